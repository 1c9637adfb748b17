/**
 * File reconstruction (docs/interface.md §4.1 operations 1 and 2; docs/protocol.md §8, §9.4, §11):
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
 * RecordCache, signed URLs are reused for a twentieth of their lifetime (ReusingUrlSigner), and
 * an encoded answer for the same file, range and version is reused for as long (AnswerCache).
 *
 * Transfer URLs are castor's own signed route by default; with CASTOR_TRANSFER_MODE=presigned
 * they are presigned S3 GETs (src/cas/presigned-transfer.ts), one range per V2 entry.
 *
 * Bodies are built by `renderV2`/`renderV1` with exactly the interface's fields (no response
 * schema: hand-built JSON is several times faster for the hundreds of entries of a large file)
 * and gzipped here, per route, when the client accepts it — other responses (transfers, dedup
 * shards, NDJSON) must never be compressed, so there is no global plugin.
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
  SINGLE_RANGE_V2_LIMITS,
  type RangeUrlSigner,
  type V2Limits,
} from "../cas/reconstruction.js";
import { ByteBoundedLru, RecordCache, ReusingUrlSigner, urlReuseMsFor } from "../cas/xorb-cache.js";
import { hashFromHex, isHashHex } from "../format/hash.js";
import type { MetadataStore } from "../metadata/store.js";
import { casAccessOf } from "./cas-auth.js";
import { HttpError } from "./errors.js";

export interface ReconstructionRouteDeps {
  /** Resolves the token's repository and answers the file ↔ repository question. */
  store: Pick<MetadataStore, "getRepo" | "isFileInRepo" | "getFile" | "getXorbs">;
  /**
   * Signs transfer URLs: castor's own (`HmacTransferUrls` of src/auth/transfer-url.ts), or
   * presigned S3 GETs (`PresignedTransferUrls`, CASTOR_TRANSFER_MODE=presigned).
   */
  signer: RangeUrlSigner;
  /** V2 entries carry one range each: for a signer whose URLs serve one range (presigned S3 GETs). */
  singleRangeEntries?: boolean;
  /**
   * `config.transferUrlTtlSeconds`, the lifetime of the signer's URLs. It sets how long a signed
   * URL, and then an encoded answer holding it, may be handed out again (`urlReuseMsFor`).
   */
  transferUrlTtlSeconds: number;
  /** `config.v2Reconstruction`: "501" makes the V2 route answer 501. */
  v2Reconstruction: "on" | "501";
  /** The read path's shared record cache; a private one over `store` when absent. */
  records?: RecordCache;
  /** Byte budget of encoded answers kept for reuse (default DEFAULT_ANSWER_CACHE_BYTES; 0 turns it off). */
  answerCacheBytes?: number;
  /** Clock in ms since the epoch; tests pin it. */
  now?: () => number;
}

/** Bodies below this are sent as is: gzip would save a few bytes and cost a round of zlib. */
export const GZIP_MIN_BODY_BYTES = 1024;

/** ~450 answers for a 10 GiB file (73 KiB each). */
export const DEFAULT_ANSWER_CACHE_BYTES = 32 * 1024 * 1024;

/**
 * Level 1: reconstruction JSON is mostly hex digits and URL signatures; measured on a 10 GiB
 * file's answer (73 KiB), levels 1, 4, 6 and 9 all give ~18 KiB, within 0.1% of each other, and
 * level 1 costs the least CPU.
 */
const GZIP_LEVEL = 1;
const gzipAsync = promisify(gzip);

const JSON_CONTENT_TYPE = "application/json; charset=utf-8";

const V1_PATHS = ["/v1/reconstructions/:fileId", "/reconstructions/:fileId"] as const;
const V2_PATH = "/v2/reconstructions/:fileId";

interface FileParams {
  fileId: string;
}

type Version = 1 | 2;

export async function registerReconstructionRoutes(app: FastifyInstance, deps: ReconstructionRouteDeps): Promise<void> {
  const now = deps.now ?? Date.now;
  const reuseMs = urlReuseMsFor(deps.transferUrlTtlSeconds);
  const records = deps.records ?? new RecordCache(deps.store);
  const signer = new ReusingUrlSigner(deps.signer, reuseMs, now);
  const answers = new AnswerCache(deps.answerCacheBytes ?? DEFAULT_ANSWER_CACHE_BYTES, reuseMs, now);
  const options = { config: { casScope: "read" as const } };
  const path: ReadPath = {
    store: deps.store,
    records,
    signer,
    refreshSigner: deps.signer.refresh?.bind(deps.signer),
    v2Limits: deps.singleRangeEntries ? SINGLE_RANGE_V2_LIMITS : undefined,
    answers,
  };

  const handler = (version: Version) => async (request: FastifyRequest<{ Params: FileParams }>, reply: FastifyReply) => {
    reply.header("vary", "Accept-Encoding").header("cache-control", "no-store").type(JSON_CONTENT_TYPE);
    const answer = await reconstruct(request, version, path);
    if (answer.body.length >= GZIP_MIN_BODY_BYTES && acceptsGzip(request.headers["accept-encoding"])) {
      // zlib runs on the thread pool, so the event loop keeps serving while a large body compresses.
      const gzipped = answer.gzipped ?? answers.addGzipped(answer, await gzipAsync(answer.body, { level: GZIP_LEVEL }));
      return reply.header("content-encoding", "gzip").send(gzipped);
    }
    return reply.send(answer.body);
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

interface ReadPath {
  store: ReconstructionRouteDeps["store"];
  records: RecordCache;
  signer: RangeUrlSigner;
  /** The signer's `refresh`, awaited before rendering, when it has one. */
  refreshSigner: (() => Promise<void>) | undefined;
  /** Limits of V2 entries; the renderer's defaults when undefined. */
  v2Limits: V2Limits | undefined;
  answers: AnswerCache;
}

async function reconstruct(request: FastifyRequest<{ Params: FileParams }>, version: Version, path: ReadPath): Promise<Answer> {
  const hex = request.params.fileId;
  if (!isHashHex(hex)) {
    throw new HttpError(400, `Malformed file id ${JSON.stringify(hex.slice(0, 80))}: it must be exactly 64 lowercase hexadecimal characters (the file hash)`);
  }
  const spec = withHttpStatus(() => parseRangeHeader(request.headers.range));
  const fileHash = hashFromHex(hex);

  // Every request, before any cache: access can change, content cannot.
  const { repo } = casAccessOf(request);
  const notFound = () =>
    new HttpError(
      404,
      `No file ${hex} in the repository ${repo.type}:${repo.id} this token is for: check the file id, or use a token of the repository the file was uploaded to`,
    );
  const repoRecord = await path.store.getRepo(repo.type, repo.id);
  if (repoRecord === null || !(await path.store.isFileInRepo(fileHash, repoRecord.id))) throw notFound();

  // An `inconsistent_records` error from here is a damaged database: a logged 500.
  const file = await path.records.file(fileHash, hex);
  if (file === null) throw notFound();
  const range = withHttpStatus(() => resolveFileRange(spec, file.size), file.size);
  const key = `${version}${hex}${range.start}-${range.end}`;
  const cached = path.answers.get(key);
  if (cached !== undefined) return cached;
  const plan = planReconstruction(file, range);
  if (path.refreshSigner !== undefined) await path.refreshSigner();
  const body = version === 2 ? renderV2(plan, path.signer, path.v2Limits) : renderV1(plan, path.signer);
  // Encoded once here (sent as a string, it would be measured for Content-Length and then
  // encoded again by the socket); the renderers produce pure ASCII, so Latin-1 is exact.
  return path.answers.put(key, Buffer.from(body, "latin1"));
}

interface Answer {
  readonly key: string;
  readonly body: Buffer;
  gzipped: Buffer | undefined;
  readonly createdAt: number;
}

/**
 * Encoded answers, served again for the URL reuse window. An answer is a function of the file,
 * the range and the signed URLs, and the URLs are themselves reused for that window, so a hit
 * is byte-identical to what rendering would produce — without planning, rendering, encoding
 * or compressing again. Popular files are asked for again and again with the same ranges
 * (xet-core downloads in fixed blocks). Looked up only after the repository check.
 */
class AnswerCache {
  private readonly lru: ByteBoundedLru<string, Answer>;

  constructor(
    maxBytes: number,
    private readonly reuseMs: number,
    private readonly now: () => number,
  ) {
    this.lru = new ByteBoundedLru(maxBytes);
  }

  get(key: string): Answer | undefined {
    const answer = this.lru.get(key);
    return answer !== undefined && this.now() - answer.createdAt < this.reuseMs ? answer : undefined;
  }

  put(key: string, body: Buffer): Answer {
    const answer: Answer = { key, body, gzipped: undefined, createdAt: this.now() };
    if (this.reuseMs > 0) this.lru.set(key, answer, this.cost(answer));
    return answer;
  }

  addGzipped(answer: Answer, gzipped: Buffer): Buffer {
    answer.gzipped = gzipped;
    if (this.lru.has(answer.key)) this.lru.set(answer.key, answer, this.cost(answer));
    return gzipped;
  }

  private cost(answer: Answer): number {
    return answer.body.length + (answer.gzipped?.length ?? 0) + answer.key.length * 2 + 200;
  }
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
