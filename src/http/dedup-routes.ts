/**
 * The global-deduplication query (docs/interface.md §4.1 operation 3, docs/protocol.md §7, §9.4):
 *
 *     GET /v1/chunks/{prefix}/{chunk_hash}   read scope   200 shard bytes / 404 not tracked
 *     GET /chunks/{prefix}/{chunk_hash}      the same (hf_xet of 2025-09…11)
 *
 * `prefix` is `default` (what both real clients send) or `default-merkledb` (what the spec
 * says); anything else is a malformed request (400), not a miss, so a client bug shows.
 * The answer is built by `DedupService` and sent as is: `application/octet-stream`, never
 * compressed (clients write it to their cache and read its footer from the last 200 bytes).
 *
 * Register with `await cas.register(dedupRoutes, deps)` inside the CAS scope (cas-scope.ts).
 */
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import type { DedupService } from "../cas/dedup.js";
import { hashFromHex, isHashHex, type Hash } from "../format/hash.js";
import { HttpError } from "./errors.js";

export interface DedupRouteDeps {
  dedup: Pick<DedupService, "query">;
}

export const DEDUP_PREFIXES: readonly string[] = ["default", "default-merkledb"];

const DEDUP_PATHS = ["/v1/chunks/:prefix/:hash", "/chunks/:prefix/:hash"] as const;

interface ChunkParams {
  prefix: string;
  hash: string;
}

export const dedupRoutes: FastifyPluginAsync<DedupRouteDeps> = async (app, deps) => {
  for (const path of DEDUP_PATHS) {
    app.get<{ Params: ChunkParams }>(path, { config: { casScope: "read" } }, async (request, reply) => {
      const chunk = parseChunkAddress(request);
      const answer = await deps.dedup.query(chunk);
      if (answer === null) {
        throw new HttpError(404, `Chunk ${request.params.hash} is not tracked by global deduplication: upload its data`);
      }
      return reply
        .type("application/octet-stream")
        .header("cache-control", "no-store")
        .send(Buffer.from(answer.buffer, answer.byteOffset, answer.byteLength));
    });
  }
};

function parseChunkAddress(request: FastifyRequest<{ Params: ChunkParams }>): Hash {
  const { prefix, hash } = request.params;
  if (!DEDUP_PREFIXES.includes(prefix)) {
    throw new HttpError(400, `Unknown chunk prefix ${JSON.stringify(prefix.slice(0, 80))}: query /v1/chunks/default/{hash} (or default-merkledb)`);
  }
  if (!isHashHex(hash)) {
    throw new HttpError(400, `Malformed chunk hash ${JSON.stringify(hash.slice(0, 80))}: it must be exactly 64 lowercase hexadecimal characters`);
  }
  return hashFromHex(hash);
}
