/**
 * `GET /api/stats`: castor's storage statistics (hub/stats.ts) with the daily samples, for
 * admin tokens only — the numbers name every repository. `?history=N` keeps the last N daily
 * samples (default: all of them).
 */
import type { FastifyInstance } from "fastify";
import { HubError } from "../../hub/errors.js";
import { storageStatsJson } from "../../hub/stats.js";
import * as wire from "../../wire/hub.js";
import { callerOfRequest } from "./caller.js";
import type { HubRouteDeps } from "./repo-routes.js";

/** Largest `?history=`: more days than any store has samples (a century). */
const MAX_HISTORY_DAYS = 36_600;

export async function statsRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  // Who may ask before what is asked (hubAccess is checked first): a token that may not see the statistics learns nothing of their parameters.
  const what = "GET /api/stats";
  app.get<{ Querystring: wire.StatsQuery }>(
    "/api/stats",
    { config: { hubAccess: { admin: what } }, schema: { querystring: wire.StatsQuery, response: { 200: wire.StorageStatsAnswer } } },
    async (request, reply) => {
      const { stats, history } = await deps.hub.admin.storageStats(callerOfRequest(request), historyLimit(request.query.history), what);
      reply.header("cache-control", "no-store");
      return storageStatsJson(stats, history);
    },
  );
}

/** `?history=N` as a number of days; 400 for anything else. */
function historyLimit(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const days = /^\d{1,6}$/.test(value) ? Number(value) : Number.NaN;
  if (!(days <= MAX_HISTORY_DAYS)) {
    throw new HubError(400, `?history= must be one number of days from 0 to ${MAX_HISTORY_DAYS}: how many of the last daily samples to include`);
  }
  return days;
}
