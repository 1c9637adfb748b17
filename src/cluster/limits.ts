/**
 * How the node-wide limits split over the workers of `castor serve --workers N`.
 *
 * CASTOR_MAX_CONNECTIONS, CASTOR_MAX_CONCURRENT_UPLOADS, CASTOR_HUB_RATE_LIMIT and
 * CASTOR_AUTH_FAILURE_LIMIT are counted by each process in its own memory. They keep meaning
 * "per node" (the README's word, what an operator sizes them by: the machine's disk, descriptors
 * and uplink), so each worker gets an equal share, rounded up: the node then holds at most about
 * the setting whatever N is, and a brute force spread over the workers still gets no more
 * guesses in all than CASTOR_AUTH_FAILURE_LIMIT allows. The cluster hands new connections to
 * the workers in turn, so the shares fill evenly; a client whose requests all ride one
 * keep-alive connection meets its worker's share (1/N of a hub limit) — the defaults leave room
 * for that. Timeouts and sizes are per request and stay as they are, and so does
 * CASTOR_SHARD_MEMORY_BUDGET: it guards a process's own heap, and each worker has its own.
 */
import type { CastorConfig } from "../config.js";

/** `config` as one of `config.workers` workers applies it. */
export function perWorkerConfig(config: CastorConfig): CastorConfig {
  const share = (total: number): number => Math.ceil(total / config.workers);
  const shareOrOff = (total: number | null): number | null => (total === null ? null : share(total));
  return {
    ...config,
    limits: { ...config.limits, maxConnections: share(config.limits.maxConnections) },
    maxConcurrentUploads: share(config.maxConcurrentUploads),
    hubLimits: {
      requestsPerMinute: shareOrOff(config.hubLimits.requestsPerMinute),
      authFailuresPerMinute: shareOrOff(config.hubLimits.authFailuresPerMinute),
    },
  };
}

/** The shares, for the primary's start-up log line. */
export function workerShares(config: CastorConfig): Record<string, number | "off"> {
  const each = perWorkerConfig(config);
  return {
    maxConnections: each.limits.maxConnections,
    maxConcurrentUploads: each.maxConcurrentUploads,
    hubRateLimit: each.hubLimits.requestsPerMinute ?? "off",
    authFailureLimit: each.hubLimits.authFailuresPerMinute ?? "off",
  };
}
