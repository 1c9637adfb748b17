/**
 * `GET /api/stats`: castor's storage statistics (hub/stats.ts) with the daily samples, for
 * admin tokens only — the numbers name every repository. `?history=N` keeps the last N daily
 * samples (default: all of them).
 */
import type { FastifyInstance } from "fastify";
import { requireAdmin } from "../../hub/access.js";
import { HubError } from "../../hub/errors.js";
import { storageStatsJson, type StorageStatsService } from "../../hub/stats.js";
import { callerOfRequest, type HubRouteDeps } from "./repo-routes.js";

export interface StatsRouteDeps extends HubRouteDeps {
  stats: StorageStatsService;
}

/** Largest `?history=`: more days than any store has samples (a century). */
const MAX_HISTORY_DAYS = 36_600;

export async function statsRoutes(app: FastifyInstance, deps: StatsRouteDeps): Promise<void> {
  app.get<{ Querystring: { history?: unknown } }>("/api/stats", async (request, reply) => {
    requireAdmin(await callerOfRequest(deps, request), "GET /api/stats");
    const history = historyLimit(request.query.history);
    const stats = await deps.stats.measureShared();
    reply.header("cache-control", "no-store");
    return storageStatsJson(stats, await deps.stats.history(history));
  });
}

/** `?history=N` as a number of days; 400 for anything else (a repeated parameter included). */
function historyLimit(value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const days = typeof value === "string" && /^\d{1,6}$/.test(value) ? Number(value) : Number.NaN;
  if (!(days <= MAX_HISTORY_DAYS)) {
    throw new HubError(400, `?history= must be one number of days from 0 to ${MAX_HISTORY_DAYS}: how many of the last daily samples to include`);
  }
  return days;
}
