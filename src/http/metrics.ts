/**
 * `GET /metrics`: the app's Prometheus metrics (src/metrics.ts) in the text format, and the
 * hook that counts every answered request under its route pattern.
 *
 * Open by default, as Prometheus endpoints usually are: the numbers name no repository, hash or
 * token. With `token` (CASTOR_METRICS_TOKEN) the scraper must send `Authorization: Bearer
 * <token>`; the log never carries that header (logging.ts).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { ServerResponse } from "node:http";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { CastorMetrics, MetricsExposition } from "../metrics.js";
import { bearerToken } from "./cas-auth.js";
import { HttpError } from "./errors.js";

export const METRICS_PATH = "/metrics";

export interface MetricsRouteOptions {
  metrics: CastorMetrics;
  /** Bearer token a scrape must present; null = none needed. */
  token: string | null;
  /** What a scrape is answered with; by default `metrics` alone (see `SharedMetrics` for the other case). */
  expose?: () => Promise<MetricsExposition>;
}

/**
 * Installed on the root instance (not as an encapsulated plugin) so its `onResponse` hook sees
 * every route and the 404s of unknown paths.
 */
export function installMetrics(app: FastifyInstance, options: MetricsRouteOptions): void {
  const { metrics } = options;
  /** The responses in progress: their body bytes so far, until observed. */
  const inProgress = new WeakMap<ServerResponse, () => number>();
  const observe = (request: FastifyRequest, reply: FastifyReply, bodyBytes: number) =>
    metrics.observeRequest({
      method: request.method,
      route: request.routeOptions.url,
      status: reply.statusCode,
      seconds: reply.elapsedTime / 1000,
      requestBytes: byteCount(request.headers["content-length"]),
      responseBytes: sendsBody(request.method, reply.statusCode) ? bodyBytes : 0,
    });
  app.addHook("onRequest", async (request, reply) => {
    inProgress.set(reply.raw, countBodyWrites(reply.raw));
    // A response whose connection closes before it finished never reaches onResponse (fastify
    // runs it on 'finish' or 'error'): an abandoned download is counted here, with what it sent.
    reply.raw.once("close", () => {
      const written = inProgress.get(reply.raw);
      inProgress.delete(reply.raw);
      if (written !== undefined) observe(request, reply, written());
    });
  });
  app.addHook("onResponse", async (request, reply) => {
    const written = inProgress.get(reply.raw);
    inProgress.delete(reply.raw);
    // No count when an earlier onRequest hook answered (a refusal) before ours ran: such answers
    // are whole, small bodies, sent as announced.
    observe(request, reply, written === undefined ? (byteCount(reply.getHeader("content-length")) ?? 0) : written());
  });

  const expected = options.token === null ? null : digest(options.token);
  app.get(METRICS_PATH, async (request, reply) => {
    if (expected !== null) {
      const presented = bearerToken(request.headers.authorization);
      if (typeof presented !== "string" || !timingSafeEqual(digest(presented), expected)) {
        throw new HttpError(401, "The metrics need `Authorization: Bearer <token>` with the token in CASTOR_METRICS_TOKEN", {
          "www-authenticate": 'Bearer realm="castor-metrics"',
        });
      }
    }
    const { contentType, body } = await (options.expose ?? (() => metrics.expose()))();
    reply.header("cache-control", "no-store").type(contentType);
    return body;
  });
}

/** Equal-length digests, so the comparison takes the same time whatever was presented. */
function digest(token: string): Buffer {
  return createHash("sha256").update(token).digest();
}

/**
 * Counts the body bytes handed to `response` from now on, wherever they come from (`reply.send`,
 * a piped stream, a hijacked reply writing itself). The Content-Length a response announces is
 * no measure: HEAD answers announce the whole file and send nothing, and a download cut short
 * sends less. Writes to a response already destroyed go nowhere and are not counted. Node has no
 * event or counter for this (`socket.bytesWritten` mixes headers and the other responses of a
 * keep-alive connection), so the response's own `write` and `end` are wrapped.
 */
function countBodyWrites(response: ServerResponse): () => number {
  let bytes = 0;
  const count = (chunk: unknown, encoding: unknown) => {
    if (response.destroyed) return;
    if (typeof chunk === "string") bytes += Buffer.byteLength(chunk, typeof encoding === "string" ? (encoding as BufferEncoding) : "utf8");
    else if (chunk instanceof Uint8Array) bytes += chunk.byteLength;
  };
  const write = response.write;
  const end = response.end;
  response.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
    count(chunk, rest[0]);
    return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
  } as ServerResponse["write"];
  response.end = function (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) {
    if (typeof chunk !== "function") count(chunk, rest[0]);
    return (end as (...args: unknown[]) => ServerResponse).call(this, chunk, ...rest);
  } as ServerResponse["end"];
  return () => bytes;
}

/** Whether HTTP lets the response carry a body at all: Node drops what is written to the others. */
function sendsBody(method: string, status: number): boolean {
  return method !== "HEAD" && status >= 200 && status !== 204 && status !== 304;
}

function byteCount(header: unknown): number | undefined {
  const value = typeof header === "number" ? header : typeof header === "string" && /^\d+$/.test(header) ? Number(header) : NaN;
  return Number.isSafeInteger(value) ? value : undefined;
}
