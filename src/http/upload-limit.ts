/**
 * How many uploads (xorbs and shards) one node receives at once (CASTOR_MAX_CONCURRENT_UPLOADS).
 * Each holds a staging file or spool, up to 64 MiB of body in flight and, for shards, a
 * validation's CPU; without a cap, enough parallel clients exhaust the disk, the descriptors or
 * the event loop together. One more is answered 503 with `Retry-After` before its body is read
 * (connection-limits.ts then drops the rest of the body and closes, so the client sees the
 * answer): hf_xet and @huggingface/hub retry a 503 with backoff, and behind a load balancer the
 * retry may land on a less busy node.
 *
 * A route opts in with `config: { upload: true }`. The hook belongs to the CAS scope, after the
 * auth hook, so a request without a valid token is refused with 401 and never takes a slot.
 */
import type { FastifyInstance } from "fastify";
import type { OnRefusal } from "../metrics.js";
import { HttpError } from "./errors.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /** The route receives an upload: it counts against the concurrent-upload cap. */
    upload?: boolean;
  }
}

/** A small upload takes well under a second; a few seconds let several finish before the retry. */
export const UPLOAD_RETRY_AFTER_SECONDS = 5;

/** One node's count of uploads in progress, shared by every scope that takes uploads (CAS, git pushes, Git LFS). */
export class UploadSlots {
  inProgress = 0;

  constructor(
    readonly max: number,
    readonly onRefusal: OnRefusal = () => {},
  ) {}
}

/** Installs the cap on `scope`; every upload route of it and its children counts, against `slots`. */
export function limitConcurrentUploads(scope: FastifyInstance, slots: UploadSlots): void {
  scope.addHook("onRequest", async (request, reply) => {
    if (request.routeOptions.config.upload !== true) return;
    if (slots.inProgress >= slots.max) {
      slots.onRefusal("upload_concurrency");
      throw new HttpError(
        503,
        `This castor node is receiving its maximum of ${slots.max} uploads at once: retry in ${UPLOAD_RETRY_AFTER_SECONDS} s (hf_xet and huggingface.js retry on their own)`,
        { "retry-after": String(UPLOAD_RETRY_AFTER_SECONDS) },
      );
    }
    slots.inProgress++;
    // 'close' comes once per response, whether it finished or its connection went first.
    reply.raw.once("close", () => slots.inProgress--);
  });
}
