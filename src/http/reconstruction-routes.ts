/**
 * File reconstruction (docs/interface.md §4.1 operations 1 and 2; docs/protocol.md §8, §9.4, §11):
 *
 *     GET /v2/reconstructions/{file_id}   read scope   optional Range → 200 V2 JSON
 *     GET /v1/reconstructions/{file_id}   read scope   optional Range → 200 V1 JSON
 *     GET /reconstructions/{file_id}      the V1 answer (hf_xet of 2025-09…11)
 *     HEAD /v1/files/{file_id}            read scope   200 + Content-Length: file size / 404
 *
 * The HEAD route (spec-listed, docs/protocol.md §8.8) lets a client ask, before sending
 * anything, whether the token's repository has a file already (castor's own client does).
 *
 * 400 malformed file id or Range header; 404 when the file is not registered in the token's
 * repository — the same answer as for a file that does not exist at all, so a token learns
 * nothing about other repositories; 416 when the range starts at or past the end of the file
 * (clients' normal end-of-download signal); V2 answers 501 with `CASTOR_V2_RECONSTRUCTION=501`
 * so clients' fallback to V1 can be exercised.
 *
 * The file ↔ repository check, the caches and the rendering are the ReconstructionService's
 * (src/cas/reconstruction-service.ts); this module parses the request and sends the answer.
 * Its ReconstructionErrors get their statuses from errors.ts.
 *
 * Bodies are built with exactly the interface's fields (no response schema: hand-built JSON is
 * several times faster for the hundreds of entries of a large file) and gzipped here, per
 * route, when the client accepts it — other responses (transfers, dedup shards, NDJSON) must
 * never be compressed, so there is no global plugin.
 *
 * Register with `await cas.register(reconstructionRoutes, deps)` inside the CAS scope (cas-scope.ts).
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { parseRangeHeader } from "../cas/reconstruction.js";
import type { ReconstructionService } from "../cas/reconstruction-service.js";
import { hashFromHex, isHashHex } from "../format/hash.js";
import { casAccessOf } from "./cas-auth.js";
import { HttpError } from "./errors.js";
import { sendHijacked } from "./hijacked-body.js";

export interface ReconstructionRouteDeps {
  reconstructions: Pick<ReconstructionService, "reconstruct" | "gzipped" | "fileSize">;
  /** `config.v2Reconstruction`: "501" makes the V2 route answer 501. */
  v2Reconstruction: "on" | "501";
}

/** Bodies below this are sent as is: gzip would save a few bytes and cost a round of zlib. */
export const GZIP_MIN_BODY_BYTES = 1024;

const JSON_CONTENT_TYPE = "application/json; charset=utf-8";

const V1_PATHS = ["/v1/reconstructions/:fileId", "/reconstructions/:fileId"] as const;
const V2_PATH = "/v2/reconstructions/:fileId";

interface FileParams {
  fileId: string;
}

type Version = 1 | 2;

export const reconstructionRoutes: FastifyPluginAsync<ReconstructionRouteDeps> = async (app, deps) => {
  const { reconstructions } = deps;
  const options = { config: { casScope: "read" as const } };

  const handler = (version: Version) => async (request: FastifyRequest<{ Params: FileParams }>, reply: FastifyReply) => {
    reply.header("vary", "Accept-Encoding").header("cache-control", "no-store").type(JSON_CONTENT_TYPE);
    const hex = parseFileId(request.params.fileId);
    const range = parseRangeHeader(request.headers.range);
    const access = casAccessOf(request);
    const pending = reconstructions.reconstruct({ repo: access.repo, rev: access.rev, fileHash: hashFromHex(hex), fileHex: hex, range, version });
    pending.catch(() => undefined); // awaited below, whichever way the race goes
    const answer = await settledWithin(pending, KEEP_ALIVE_AFTER_MS);
    if (answer === STILL_PENDING) {
      // A file being fetched first (a mirror's cold file): the answer comes once it is stored,
      // which can take longer than a client waits in silence (hf_xet: 120 s). Blank space —
      // which a JSON parser skips — keeps the response alive meanwhile; a failure then can only
      // cut it short, and the client asks again.
      return sendHijacked(app, request, reply, {
        write: async (out) => {
          out.write(" ");
          const timer = setInterval(() => out.write(" "), KEEP_ALIVE_EVERY_MS);
          try {
            out.write((await pending).body);
          } finally {
            clearInterval(timer);
          }
        },
        close: async () => undefined,
        failure: "reconstruction aborted: the file could not be made available",
      });
    }
    if (answer.body.length >= GZIP_MIN_BODY_BYTES && acceptsGzip(request.headers["accept-encoding"])) {
      return reply.header("content-encoding", "gzip").send(await reconstructions.gzipped(answer));
    }
    return reply.send(answer.body);
  };

  const v2 = handler(2);
  app.get<{ Params: FileParams }>(V2_PATH, options, async (request, reply) => {
    if (deps.v2Reconstruction === "501") {
      throw new HttpError(501, "V2 reconstruction is turned off on this server (CASTOR_V2_RECONSTRUCTION=501): use GET /v1/reconstructions/{file_id}");
    }
    return v2(request, reply);
  });
  for (const path of V1_PATHS) app.get<{ Params: FileParams }>(path, options, handler(1));

  app.head<{ Params: FileParams }>("/v1/files/:fileId", options, async (request, reply) => {
    const hex = parseFileId(request.params.fileId);
    const size = await reconstructions.fileSize(casAccessOf(request).repo, hashFromHex(hex), hex);
    // Only the status speaks (a HEAD answer has no body): the same 404 as for any file the repository lacks.
    if (size === null) return reply.code(404).header("cache-control", "no-store").send();
    return reply.header("cache-control", "no-store").header("content-length", String(size)).send();
  });
};

/** A reconstruction not answered within this long gets its headers and a blank (see the handler). */
const KEEP_ALIVE_AFTER_MS = 5_000;
const KEEP_ALIVE_EVERY_MS = 10_000;
const STILL_PENDING = Symbol("pending");

/** `promise`'s value if it settles within `ms`, STILL_PENDING otherwise (a rejection within `ms` is thrown). */
async function settledWithin<T>(promise: Promise<T>, ms: number): Promise<T | typeof STILL_PENDING> {
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<typeof STILL_PENDING>((resolve) => {
    timer = setTimeout(() => resolve(STILL_PENDING), ms);
  });
  try {
    return await Promise.race([promise, waited]);
  } finally {
    clearTimeout(timer);
  }
}

function parseFileId(hex: string): string {
  if (!isHashHex(hex)) {
    throw new HttpError(400, `Malformed file id ${JSON.stringify(hex.slice(0, 80))}: it must be exactly 64 lowercase hexadecimal characters (the file hash)`);
  }
  return hex;
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
