/**
 * Shard upload (docs/interface.md §4.1 operation 5, docs/protocol.md §6.8, §9.3, §9.4):
 *
 *     POST /v1/shards   write scope   body: the shard → {"result": 1} new / {"result": 0} known
 *     POST /shards      the same (hf_xet of 2025-09…11)
 *     POST /v2/shards   write scope   body: the shard → 200 NDJSON progress + terminal frame
 *
 * The files of the shard are linked to the token's repository. Bodies arrive raw (no
 * Content-Type needed, see raw-body.ts), capped at the service's `maxShardBytes` (413). A body
 * is received whole (spooled to disk past 2 MiB) and then admitted against the process's
 * budget of shard registrations (src/cas/shard-admission.ts): one that does not get its turn
 * within the bounded wait is answered 503 with Retry-After, on both routes, and its body is
 * never read into memory.
 *
 * `/v2/shards` answers errors found before the stream starts (token, repository, body size,
 * broken connection, no room in the budget) with their normal status codes; from then on
 * everything is a frame:
 * `{"type":"validating","verified":N,"total":M}` as validation advances, re-sent as a
 * heartbeat while it is slow (so clients can keep a read timeout), `{"type":"committing",…}`
 * while storing, and a terminal `{"type":"result","result":0|1}` or
 * `{"type":"error","message":…,"retryable":…}` — retryable only for server-side failures that
 * resending may get past (a store restarting, answered like the 503 of `/v1/shards`; not a full
 * storage, which is answered like the 507).
 * A stream that ends without a terminal frame is an error for the client (xet-core), which is
 * what a crash looks like.
 *
 * Register with `await cas.register(shardRoutes, deps)` inside the CAS scope (cas-scope.ts).
 */
import type { ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { PassThrough } from "node:stream";
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { ShardAdmissionError } from "../cas/shard-admission.js";
import { ShardRejectedError, type AdmittedShard, type ShardProgress, type ShardRegistrationService } from "../cas/shard-registration.js";
import { hashToHex } from "../format/hash.js";
import type { MetadataStore } from "../metadata/store.js";
import type { OnRefusal } from "../metrics.js";
import { casAccessOf } from "./cas-auth.js";
import { domainErrorAnswer, ERROR_BODY_SCHEMA, HttpError, storageFullAnswer, storeUnavailableAnswer } from "./errors.js";
import { DEFAULT_SPOOL_MEMORY_BYTES, receiveSpooled, type SpooledBody, type SpoolOptions } from "./body-spool.js";
import { bodyPieces, settleUnreadBody } from "./raw-body.js";

export interface ShardRouteDeps {
  shards: Pick<ShardRegistrationService, "admit" | "registerAdmitted" | "maxShardBytes">;
  /** Resolves the token's repository to the numeric id files are linked to. */
  repos: Pick<MetadataStore, "getRepo">;
  /** How often `/v2/shards` re-sends the last progress frame while validating. */
  heartbeatIntervalMs?: number;
  /** Where bodies past `spool.memoryBytes` wait on disk while they arrive (default: the OS temp folder, 2 MiB). */
  spool?: Partial<SpoolOptions>;
  /** Told of each upload the budget of shard registrations refused (the refusal metric). */
  onRefusal?: OnRefusal;
}

/** Production re-sends about every 20 s; a little less keeps clients with a 30 s read timeout safe. */
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 15_000;
/** Progress frames between heartbeats are sent at most this often. */
const PROGRESS_FRAME_INTERVAL_MS = 1_000;

export const NDJSON_CONTENT_TYPE = "application/x-ndjson";

const V1_PATHS = ["/v1/shards", "/shards"] as const;

const RESULT_RESPONSE_SCHEMA = {
  200: {
    type: "object",
    required: ["result"],
    additionalProperties: false,
    properties: { result: { type: "integer", enum: [0, 1] } },
  },
  "4xx": ERROR_BODY_SCHEMA,
} as const;

export const shardRoutes: FastifyPluginAsync<ShardRouteDeps> = async (app, deps) => {
  const heartbeatIntervalMs = deps.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS;
  if (!(heartbeatIntervalMs > 0)) throw new RangeError(`heartbeatIntervalMs must be positive, got ${heartbeatIntervalMs}`);
  const routeOptions = { config: { casScope: "write" as const, upload: true }, bodyLimit: deps.shards.maxShardBytes };

  /**
   * Admits the received body (shard-registration.ts `admit`). No room in the budget in time
   * becomes a 503 with Retry-After, a client gone a 400; a shard refused for what it is
   * (ShardRejectedError) passes through.
   */
  const admit = async (request: FastifyRequest, body: SpooledBody, signal: AbortSignal): Promise<AdmittedShard> => {
    try {
      return await deps.shards.admit(body, { signal });
    } catch (error) {
      await body.dispose();
      if (error instanceof ShardAdmissionError) {
        deps.onRefusal?.("shard_budget");
        request.log.info({ reason: error.message }, "shard upload refused: no room in the budget of shard registrations");
        throw new HttpError(503, error.message, { "retry-after": String(error.retryAfterSeconds) });
      }
      if (!(error instanceof ShardRejectedError) && signal.aborted) throw clientGone();
      throw error;
    }
  };

  for (const path of V1_PATHS) {
    app.post(path, { ...routeOptions, schema: { response: RESULT_RESPONSE_SCHEMA } }, async (request, reply) => {
      const { repoId, body } = await receiveUpload(request, deps);
      const aborted = abortOnClientGone(reply);
      try {
        const outcome = await deps.shards.registerAdmitted(await admit(request, body, aborted.signal), { repoId, signal: aborted.signal });
        logRegistration(request, outcome);
        return { result: outcome.inserted ? 1 : 0 };
      } catch (error) {
        if (error instanceof ShardRejectedError) logRejection(request, error);
        else if (aborted.signal.aborted && !(error instanceof HttpError)) throw clientGone();
        throw error;
      }
    });
  }

  app.post("/v2/shards", routeOptions, async (request, reply) => {
    const { repoId, body } = await receiveUpload(request, deps);
    const aborted = abortOnClientGone(reply);
    // Admitted before the stream starts, so a refusal of the budget is a 503 with Retry-After.
    // A shard refused for what it is becomes the stream's error frame, as every later refusal.
    let admitted: AdmittedShard | ShardRejectedError;
    try {
      admitted = await admit(request, body, aborted.signal);
    } catch (error) {
      if (!(error instanceof ShardRejectedError)) throw error;
      admitted = error;
    }
    const frames = new NdjsonFrames(heartbeatIntervalMs, reply.raw);
    const registration =
      admitted instanceof ShardRejectedError
        ? Promise.reject(admitted)
        : deps.shards.registerAdmitted(admitted, {
            repoId,
            signal: aborted.signal,
            onProgress: (progress) => frames.progress(progress),
            onCommitting: (stage) => frames.send({ type: "committing", stage }),
          });
    reply.raw.once("close", () => frames.close());
    void registration
      .finally(() => body.dispose())
      .then(
        (outcome) => {
          logRegistration(request, outcome);
          frames.finish({ type: "result", result: outcome.inserted ? 1 : 0 });
        },
        (error: unknown) => {
          if (aborted.signal.aborted) {
            request.log.info("shard upload abandoned by the client during validation; nothing registered");
            frames.close();
          } else if (error instanceof ShardRejectedError) {
            logRejection(request, error);
            // The sentence /v1/shards answers with the rejection's status.
            frames.finish({ type: "error", message: domainErrorAnswer(error)!.message, retryable: false });
          } else {
            const storageFull = storageFullAnswer(request.log, error);
            if (storageFull !== null) {
              // Not retryable: sending the shard again at once only sends it into the same full storage.
              frames.finish({ type: "error", message: storageFull, retryable: false });
              return;
            }
            const unavailable = storeUnavailableAnswer(request.log, error);
            if (unavailable !== null) {
              // Registration is idempotent: the same shard sent again once the store is back is registered once.
              frames.finish({ type: "error", message: unavailable, retryable: true });
              return;
            }
            request.log.error({ err: error }, "shard registration failed with an internal error");
            frames.finish({
              type: "error",
              message: `castor could not register the shard because of a server-side failure (request id ${request.id}): upload it again`,
              retryable: true,
            });
          }
        },
      );
    // Streamed as written, never compressed: clients read frame by frame.
    return reply.code(200).type(NDJSON_CONTENT_TYPE).header("cache-control", "no-cache").header("x-accel-buffering", "no").send(frames.stream);
  });
};

/**
 * Everything an upload needs before validation: the repository its files go to (checked
 * before the body is read, so a refused upload is not received) and the whole body, which the
 * shard format requires (its sections are read sequentially and cross-referenced).
 */
async function receiveUpload(request: FastifyRequest, deps: ShardRouteDeps): Promise<{ repoId: number; body: SpooledBody }> {
  try {
    const repoId = await uploadRepoId(request, deps);
    const spool: SpoolOptions = { dir: deps.spool?.dir ?? tmpdir(), memoryBytes: deps.spool?.memoryBytes ?? DEFAULT_SPOOL_MEMORY_BYTES };
    return { repoId, body: await receiveSpooled(bodyPieces(request), spool) };
  } catch (error) {
    throw settleUnreadBody(request, error);
  }
}

async function uploadRepoId(request: FastifyRequest, deps: ShardRouteDeps): Promise<number> {
  const { repo } = casAccessOf(request);
  const record = await deps.repos.getRepo(repo.type, repo.id);
  // Not 404: on 404 xet-core silently retries /v2/shards as /v1/shards.
  if (record === null) {
    throw new HttpError(
      403,
      `The access token names the repository ${repo.type}:${repo.id}, which does not exist on this server (any more): create it or get a token for another repository`,
    );
  }
  return record.id;
}

/** Nobody will read the answer; a 4xx keeps it out of the internal-error log. */
function clientGone(): HttpError {
  return new HttpError(400, "The client closed the connection before the shard was registered: nothing was registered");
}

/** Aborts when the response closes before it finished: the client went away. */
function abortOnClientGone(reply: FastifyReply): AbortController {
  const controller = new AbortController();
  reply.raw.once("close", () => {
    if (!reply.raw.writableFinished) controller.abort(new Error("the client closed the connection"));
  });
  return controller;
}

function logRegistration(request: FastifyRequest, outcome: { inserted: boolean; shardHash: Uint8Array; files: number; dedupEntries: number }): void {
  request.log.info(
    { shard: hashToHex(outcome.shardHash), inserted: outcome.inserted, files: outcome.files, dedupEntries: outcome.dedupEntries },
    "shard upload",
  );
}

function logRejection(request: FastifyRequest, error: ShardRejectedError): void {
  request.log.info({ code: error.code, reason: error.message }, "shard upload rejected");
}

type Frame =
  | { type: "validating"; verified: number; total: number }
  | { type: "committing"; stage: "uploading" | "syncing" }
  | { type: "result"; result: 0 | 1 }
  | { type: "error"; message: string; retryable: boolean };

/** The NDJSON side of `/v2/shards`: one JSON object per `\n`-terminated line, plus heartbeats. */
class NdjsonFrames {
  readonly stream = new PassThrough();
  private lastProgress: string | null = null;
  private lastProgressSentAt = 0;
  private readonly heartbeat: NodeJS.Timeout;

  constructor(
    heartbeatIntervalMs: number,
    private readonly response: ServerResponse,
  ) {
    this.heartbeat = setInterval(() => {
      if (this.lastProgress !== null) this.write(this.lastProgress);
    }, heartbeatIntervalMs);
  }

  progress({ verified, total }: ShardProgress): void {
    const line = JSON.stringify({ type: "validating", verified, total } satisfies Frame);
    this.lastProgress = line;
    const now = Date.now();
    // The first frame goes out at once: it tells the client the shard parsed and how big it is.
    if (now - this.lastProgressSentAt < PROGRESS_FRAME_INTERVAL_MS && verified !== 0) return;
    this.lastProgressSentAt = now;
    this.write(line);
  }

  send(frame: Frame): void {
    this.write(JSON.stringify(frame));
  }

  /**
   * Writes the terminal frame and ends the stream, in one socket write: xet-core stops reading
   * at the terminal frame, and a body whose end-of-chunks marker arrived with it lets the
   * client's pool keep the connection (and a proxy see the answer complete) instead of the
   * client hanging up on an unfinished answer. The response's `end()` uncorks.
   */
  finish(frame: Frame): void {
    clearInterval(this.heartbeat);
    if (this.stream.destroyed || this.stream.writableEnded) return;
    if (!this.response.destroyed) this.response.cork();
    this.stream.end(`${JSON.stringify(frame)}\n`);
  }

  /** Stops the heartbeat (the response closed, or no terminal frame can be sent). */
  close(): void {
    clearInterval(this.heartbeat);
    if (!this.stream.destroyed && !this.stream.writableEnded) this.stream.end();
  }

  private write(line: string): void {
    if (this.stream.destroyed || this.stream.writableEnded) return;
    this.stream.write(`${line}\n`);
  }
}
