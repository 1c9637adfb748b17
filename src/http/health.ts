/**
 * Probes for orchestrators: `/healthz` says the process serves HTTP at all (restart it if
 * not); `/readyz` says it can do useful work, i.e. its metadata store answers (route traffic
 * elsewhere if not).
 */
import type { FastifyInstance } from "fastify";
import type { MetadataStore } from "../metadata/store.js";
import { ERROR_BODY_SCHEMA, HttpError } from "./errors.js";

/** A store that has not answered by then is as good as down for a readiness probe. */
export const READINESS_TIMEOUT_MS = 2000;

const STATUS_OK_SCHEMA = {
  type: "object",
  required: ["status"],
  additionalProperties: false,
  properties: { status: { type: "string", const: "ok" } },
} as const;

export function registerHealthRoutes(app: FastifyInstance, store: Pick<MetadataStore, "ping">): void {
  app.get("/healthz", { schema: { response: { 200: STATUS_OK_SCHEMA } } }, async (_request, reply) => {
    reply.header("cache-control", "no-store");
    return { status: "ok" };
  });

  app.get("/readyz", { schema: { response: { 200: STATUS_OK_SCHEMA, 503: ERROR_BODY_SCHEMA } } }, async (request, reply) => {
    reply.header("cache-control", "no-store");
    try {
      await withTimeout(store.ping(), READINESS_TIMEOUT_MS);
    } catch (error) {
      request.log.warn({ err: error }, "readiness probe: metadata store unreachable");
      throw new HttpError(503, "The metadata store does not answer: check the database (CASTOR_DATABASE_URL, or the SQLite file in CASTOR_DATA_DIR) and the server log");
    }
    return { status: "ok" };
  });
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
