/**
 * File reconstruction (interface operations 1 and 2; XET-PROTOCOL.md §8, §9.4, §11):
 *
 *     GET /v2/reconstructions/{file_id}   read scope   optional Range → 200 V2 JSON
 *     GET /v1/reconstructions/{file_id}   read scope   optional Range → 200 V1 JSON
 *     GET /reconstructions/{file_id}      the V1 answer (hf_xet of 2025-09…11)
 *
 * 400 malformed file id or Range header; 404 when the file is not registered in the token's
 * repository — the same answer as for a file that does not exist at all, so a token learns
 * nothing about other repositories; 416 when the range starts at or past the end of the file
 * (clients' normal end-of-download signal); V2 answers 501 with `CASTOR_V2_RECONSTRUCTION=501`
 * so clients' fallback to V1 can be exercised.
 *
 * The file ↔ repository check runs on every request (an indexed lookup) and is never cached:
 * access can change, content cannot — prepared file and xorb records come from the shared
 * RecordCache, and signed URLs are reused for a tenth of their lifetime (ReusingUrlSigner). Bodies are built by `renderV2`/`renderV1` with exactly the interface's fields
 * (no response schema: hand-built JSON is several times faster for the hundreds of entries of
 * a large file) and gzipped here, per route, when the client accepts it — other responses
 * (transfers, dedup shards, NDJSON) must never be compressed, so there is no global plugin.
 *
 * Register with `await registerReconstructionRoutes(app, deps)` after `registerCasAuth`.
 */
import { promisify } from "node:util";
import { gzip } from "node:zlib";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import {
  ReconstructionError,
  parseRangeHeader,
  planReconstruction,
  renderV1,
  renderV2,
  resolveFileRange,
  type RangeUrlSigner,
} from "../cas/reconstruction.js";
import { RecordCache, ReusingUrlSigner, urlReuseMsFor } from "../cas/xorb-cache.js";
import { hashFromHex, isHashHex } from "../format/hash.js";
import type { MetadataStore } from "../metadata/store.js";
import { casAccessOf } from "./cas-auth.js";
import { HttpError } from "./errors.js";

export interface ReconstructionRouteDeps {
  /** Resolves the token's repository and answers the file ↔ repository question. */
  store: Pick<MetadataStore, "getRepo" | "isFileInRepo" | "getFile" | "getXorbs">;
  /** Signs transfer URLs (`TransferUrlSigner` of src/auth/transfer-url.ts). */
  signer: RangeUrlSigner;
  /**
   * `config.transferUrlTtlSeconds`, the lifetime of the signer's URLs: a signed URL is handed
   * out again for up to a tenth of it (see `ReusingUrlSigner`).
   */
  transferUrlTtlSeconds: number;
  /** `config.v2Reconstruction`: "501" makes the V2 route answer 501. */
  v2Reconstruction: "on" | "501";
  /** The read path's shared record cache; a private one over `store` when absent. */
  records?: RecordCache;
}

/** Bodies below this are sent as is: gzip would save a few bytes and cost a round of zlib. */
export const GZIP_MIN_BODY_BYTES = 1024;

/**
 * Level 4: reconstruction JSON is mostly hex digits and URL signatures, where higher levels
 * gain ~1% for twice the CPU.
 */
const GZIP_LEVEL = 4;
const gzipAsync = promisify(gzip);

const JSON_CONTENT_TYPE = "application/json; charset=utf-8";

const V1_PATHS = ["/v1/reconstructions/:fileId", "/reconstructions/:fileId"] as const;
const V2_PATH = "/v2/reconstructions/:fileId";

interface FileParams {
  fileId: string;
}

type Version = 1 | 2;

export async function registerReconstructionRoutes(app: FastifyInstance, deps: ReconstructionRouteDeps): Promise<void> {
  const records = deps.records ?? new RecordCache(deps.store);
  const signer = new ReusingUrlSigner(deps.signer, urlReuseMsFor(deps.transferUrlTtlSeconds));
  const options = { config: { casScope: "read" as const } };

  const handler = (version: Version) => async (request: FastifyRequest<{ Params: FileParams }>, reply: FastifyReply) => {
    reply.header("vary", "Accept-Encoding").header("cache-control", "no-store");
    const body = await reconstruct(request, version, deps.store, records, signer);
    return sendJson(request, reply, body);
  };

  const v2 = handler(2);
  app.get<{ Params: FileParams }>(V2_PATH, options, async (request, reply) => {
    if (deps.v2Reconstruction === "501") {
      throw new HttpError(
        501,
        "V2 reconstruction is turned off on this server (CASTOR_V2_RECONSTRUCTION=501): use GET /v1/reconstructions/{file_id}",
      );
    }
    return v2(request, reply);
  });
  for (const path of V1_PATHS) app.get<{ Params: FileParams }>(path, options, handler(1));
}

async function reconstruct(
  request: FastifyRequest<{ Params: FileParams }>,
  version: Version,
  store: ReconstructionRouteDeps["store"],
  records: RecordCache,
  signer: RangeUrlSigner,
): Promise<string> {
  const hex = request.params.fileId;
  if (!isHashHex(hex)) {
    throw new HttpError(400, `Malformed file id ${JSON.stringify(hex.slice(0, 80))}: it must be exactly 64 lowercase hexadecimal characters (the file hash)`);
  }
  const spec = withHttpStatus(() => parseRangeHeader(request.headers.range));
  const fileHash = hashFromHex(hex);

  const { repo } = casAccessOf(request);
  const notFound = () =>
    new HttpError(
      404,
      `No file ${hex} in the repository ${repo.type}:${repo.id} this token is for: check the file id, or use a token of the repository the file was uploaded to`,
    );
  const repoRecord = await store.getRepo(repo.type, repo.id);
  if (repoRecord === null || !(await store.isFileInRepo(fileHash, repoRecord.id))) throw notFound();

  // An `inconsistent_records` error from here is a damaged database: a logged 500.
  const file = await records.file(fileHash, hex);
  if (file === null) throw notFound();
  const range = withHttpStatus(() => resolveFileRange(spec, file.size), file.size);
  const plan = planReconstruction(file, range);
  return version === 2 ? renderV2(plan, signer) : renderV1(plan, signer);
}

/** Runs a range step, turning its ReconstructionError into the HTTP answer it stands for. */
function withHttpStatus<T>(step: () => T, fileSize?: number): T {
  try {
    return step();
  } catch (error) {
    if (!(error instanceof ReconstructionError)) throw error;
    switch (error.code) {
      case "malformed_range":
        throw new HttpError(400, error.message);
      case "unsatisfiable_range":
        // RFC 9110 §15.5.17: a 416 names the current length, so the client can correct its range.
        throw new HttpError(416, error.message, fileSize === undefined ? {} : { "content-range": `bytes */${fileSize}` });
      case "inconsistent_records":
        throw error;
    }
  }
}

async function sendJson(request: FastifyRequest, reply: FastifyReply, body: string): Promise<FastifyReply> {
  reply.type(JSON_CONTENT_TYPE);
  // Encoded once here (sent as a string, it would be measured for Content-Length and then
  // encoded again by the socket); the renderers produce pure ASCII, so Latin-1 is exact.
  const bytes = Buffer.from(body, "latin1");
  if (bytes.length >= GZIP_MIN_BODY_BYTES && acceptsGzip(request.headers["accept-encoding"])) {
    // zlib runs on the thread pool, so the event loop keeps serving while a large body compresses.
    const compressed = await gzipAsync(bytes, { level: GZIP_LEVEL });
    return reply.header("content-encoding", "gzip").send(compressed);
  }
  return reply.send(bytes);
}

/**
 * Whether an Accept-Encoding value (RFC 9110 §12.5.3) accepts gzip: listed as `gzip` or
 * `x-gzip` with a non-zero q, or covered by `*` with a non-zero q and not refused by name.
 */
export function acceptsGzip(header: string | string[] | undefined): boolean {
  if (header === undefined) return false;
  const text = Array.isArray(header) ? header.join(",") : header;
  let gzipQuality: number | undefined;
  let wildcardQuality: number | undefined;
  for (const item of text.split(",")) {
    const [coding, ...parameters] = item.split(";");
    const name = coding.trim().toLowerCase();
    if (name !== "gzip" && name !== "x-gzip" && name !== "*") continue;
    let quality = 1;
    for (const parameter of parameters) {
      const match = /^\s*q\s*=\s*([01](?:\.\d{0,3})?)\s*$/i.exec(parameter);
      if (match) quality = Number(match[1]);
    }
    if (name === "*") wildcardQuality = quality;
    else gzipQuality = Math.max(gzipQuality ?? 0, quality);
  }
  return gzipQuality !== undefined ? gzipQuality > 0 : (wildcardQuality ?? 0) > 0;
}
