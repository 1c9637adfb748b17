/**
 * `GET /metrics`: the app's Prometheus metrics (src/metrics.ts) in the text format, and the
 * hook that counts every answered request under its route pattern.
 *
 * Open by default, as Prometheus endpoints usually are: the numbers name no repository, hash or
 * token. With `token` (CASTOR_METRICS_TOKEN) the scraper must send `Authorization: Bearer
 * <token>`; the log never carries that header (logging.ts).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance } from "fastify";
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
  app.addHook("onResponse", async (request, reply) => {
    metrics.observeRequest({
      method: request.method,
      route: request.routeOptions.url,
      status: reply.statusCode,
      seconds: reply.elapsedTime / 1000,
      requestBytes: byteCount(request.headers["content-length"]),
      responseBytes: byteCount(reply.getHeader("content-length")),
    });
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

function byteCount(header: unknown): number | undefined {
  const value = typeof header === "number" ? header : typeof header === "string" && /^\d+$/.test(header) ? Number(header) : NaN;
  return Number.isSafeInteger(value) ? value : undefined;
}
