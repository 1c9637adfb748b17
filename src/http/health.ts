/**
 * Probes for orchestrators: `/healthz` says the process serves HTTP at all (restart it if
 * not); `/readyz` says it can do useful work, i.e. take uploads (route traffic elsewhere if
 * not). Not ready while:
 *
 * - the metadata store does not answer a ping within `READINESS_TIMEOUT_MS`;
 * - the data dir's filesystem is full: `minFreeBytes` (CASTOR_MIN_FREE_BYTES) or fewer bytes
 *   available, or no free inode. Asked of the filesystem at every probe, so the answer turns
 *   200 as soon as space is freed, with no upload needed to find out;
 * - an upload failed for lack of storage (`StorageFullWatch`) and no upload has stored
 *   anything since, for at most `STORAGE_FULL_HOLD_MS`. This covers what the filesystem
 *   numbers cannot show: a PostgreSQL server's disk, a bucket's quota, a user quota (EDQUOT),
 *   or free space too small for the uploads that arrive.
 */
import type { FastifyPluginAsync } from "fastify";
import type { MetadataStore } from "../metadata/store.js";
import { freeSpaceOf, isDiskFull, storageFullReason, type StorageFullWatch } from "../storage/full.js";
import { ERROR_BODY_SCHEMA, HttpError } from "./errors.js";

/** A store that has not answered by then is as good as down for a readiness probe. */
export const READINESS_TIMEOUT_MS = 2000;

const STATUS_OK_SCHEMA = {
  type: "object",
  required: ["status"],
  additionalProperties: false,
  properties: { status: { type: "string", const: "ok" } },
} as const;

export interface ReadinessDeps {
  store: Pick<MetadataStore, "ping">;
  /** The data dir (CASTOR_DATA_DIR), whose filesystem holds blobs or upload staging, and SQLite. */
  dataDir: string;
  /** `config.minFreeBytes`. */
  minFreeBytes: number;
  storageFull: Pick<StorageFullWatch, "current">;
}

export const healthRoutes: FastifyPluginAsync<ReadinessDeps> = async (app, deps) => {
  app.get("/healthz", { schema: { response: { 200: STATUS_OK_SCHEMA } } }, async (_request, reply) => {
    reply.header("cache-control", "no-store");
    return { status: "ok" };
  });

  app.get("/readyz", { schema: { response: { 200: STATUS_OK_SCHEMA, 503: ERROR_BODY_SCHEMA } } }, async (request, reply) => {
    reply.header("cache-control", "no-store");
    try {
      await withTimeout(deps.store.ping(), READINESS_TIMEOUT_MS);
    } catch (error) {
      request.log.warn({ err: error }, "readiness probe: metadata store unreachable");
      throw new HttpError(
        503,
        "The metadata store does not answer: check the database (CASTOR_DATABASE_URL, or the SQLite file in CASTOR_DATA_DIR) and the server log",
      );
    }

    let space;
    try {
      space = await withTimeout(freeSpaceOf(deps.dataDir), READINESS_TIMEOUT_MS);
    } catch (error) {
      request.log.warn({ err: error, dataDir: deps.dataDir }, "readiness probe: cannot read the data dir's free space");
      throw new HttpError(
        503,
        "castor cannot read the free space of its data dir (CASTOR_DATA_DIR): check that the folder exists and its volume is mounted, and the server log",
      );
    }
    if (isDiskFull(space, deps.minFreeBytes)) {
      request.log.warn({ dataDir: deps.dataDir, ...space, minFreeBytes: deps.minFreeBytes }, "readiness probe: the data disk is full");
      const what =
        space.freeInodes === 0 ? "no free inode" : `${space.availableBytes} bytes available, not more than CASTOR_MIN_FREE_BYTES=${deps.minFreeBytes}`;
      throw new HttpError(
        503,
        `castor's data disk (CASTOR_DATA_DIR) is full (${what}): free space or grow the volume; uploads fail until then (downloads still work)`,
      );
    }

    const full = deps.storageFull.current();
    if (full !== null) {
      throw new HttpError(
        503,
        `${storageFullReason(full.storage)}; an upload failed for lack of space and none has stored anything since (downloads still work)`,
      );
    }
    return { status: "ok" };
  });
};

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
