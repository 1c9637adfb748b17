/**
 * The fastify application. `createHttpApp` is the bare frame every castor HTTP surface
 * shares (request ids, one log line per request, JSON errors, shutdown behaviour);
 * `buildCastorApp` adds the routes on top. Tests build the frame alone to exercise a single
 * piece (e.g. the CAS auth hook with test routes).
 */
import { join } from "node:path";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from "fastify";
import type { CasTokenIssuer, CasTokenVerifier } from "../auth/cas-token.js";
import type { DownloadLinks } from "../auth/download-link.js";
import type { HmacTransferUrls } from "../auth/transfer-url.js";
import type { DedupService } from "../cas/dedup.js";
import type { RangeUrlSigner } from "../cas/reconstruction-render.js";
import { ReconstructionService } from "../cas/reconstruction-service.js";
import type { ShardRegistrationService } from "../cas/shard-registration.js";
import type { XorbIngestService } from "../cas/xorb-ingest.js";
import type { MetadataStore } from "../metadata/store.js";
import { CastorMetrics, type OnRefusal, type SharedMetrics } from "../metrics.js";
import { gcTotals } from "../ops/gc.js";
import { GcSchedule } from "../ops/gc-schedule.js";
import type { Reserve } from "../storage/reserve.js";
import type { BlobStore } from "../storage/blob-store.js";
import { StorageFullWatch } from "../storage/full.js";
import { casScope } from "./cas-scope.js";
import { DEFAULT_CONNECTION_LIMITS, DEFAULT_HUB_LIMITS, type ConnectionLimits, type HubLimits } from "../config.js";
import { httpServerOptions, installConnectionLimits } from "./connection-limits.js";
import { dedupRoutes } from "./dedup-routes.js";
import { answerFrameworkError, installErrorHandlers, REQUEST_ID_HEADER } from "./errors.js";
import { healthRoutes } from "./health.js";
import type { HubRepositories } from "../hub/repositories.js";
import { StorageStatsService } from "../hub/stats.js";
import { StatsSampler } from "../hub/stats-sampler.js";
import { HubService } from "../hub/service.js";
import { castorRoutes } from "./hub/castor-routes.js";
import { acceptHubBodies, hubRoutes, type XetFileSource } from "./hub/index.js";
import { installHubLimits } from "./hub-limits.js";
import { hubTokenRoutes, type TokenRequestAuthorizer } from "./hub-token.js";
import { OneLinePerRequest, requestIdFor } from "./logging.js";
import { installMetrics } from "./metrics.js";
import { reconstructionRoutes } from "./reconstruction-routes.js";
import { shardRoutes } from "./shard-routes.js";
import { transferRoutes } from "./transfer-routes.js";
import { webUiRoutes, type WebUiOptions } from "./web-ui.js";
import { xorbRoutes } from "./xorb-routes.js";

/**
 * Folder of the data dir where large shard bodies wait on disk while they arrive (body-spool.ts),
 * and commits' inline files until the commit has validated (hub/inline-contents.ts).
 */
export const SPOOL_DIR_NAME = "spool";

export interface HttpAppOptions {
  /** A pino logger (see `createLogger`); fastify derives one child per request from it. */
  logger: FastifyBaseLogger;
  /** Timeouts and bounds of connections (`config.limits`); each one missing takes its default. */
  limits?: Partial<ConnectionLimits>;
  /** `config.trustedProxies`: peers whose `X-Forwarded-For` names the client; none by default. */
  trustedProxies?: readonly string[];
  /** Told of each client a connection limit refuses or cuts off (the refusal metric). */
  onRefusal?: OnRefusal;
}

/**
 * Longest path segment the router accepts. Hub names are ≤ 96 characters per part; the
 * revision is matched by a wildcard, which this limit does not cover.
 */
const MAX_PATH_PARAM_CHARS = 256;

const IDLE_REAP_INTERVAL_MS = 100;

export function createHttpApp(options: HttpAppOptions): FastifyInstance {
  const limits: ConnectionLimits = { ...DEFAULT_CONNECTION_LIMITS, ...options.limits };
  const app = Fastify({
    http: httpServerOptions(limits),
    loggerInstance: options.logger,
    logController: new OneLinePerRequest(),
    genReqId: requestIdFor,
    requestIdHeader: false,
    frameworkErrors: answerFrameworkError,
    routerOptions: { maxParamLength: MAX_PATH_PARAM_CHARS },
    // `request.ip` is then the client named by X-Forwarded-For from a trusted proxy: the address
    // the per-address hub limits count and the log shows. Fastify also takes X-Forwarded-Host
    // and -Proto from such a peer (`request.host`, `request.protocol`), which castor reads only
    // to warn of a CASTOR_PUBLIC_URL that clients will refuse (public-url.ts).
    trustProxy: options.trustedProxies?.length ? [...options.trustedProxies] : false,
    // Shutdown: idle keep-alive sockets close at once, requests in progress run to the end.
    forceCloseConnections: "idle",
    // Requests received while closing are served (see below), not refused with a 503.
    return503OnClosing: false,
  });

  // Shutdown (`app.close()`): the listener stops accepting connections, and every request
  // already received, even partly, is served to the end. Node closes the keep-alive
  // connections idle at that moment; one whose request ends later (an upload still arriving)
  // would stay open for the whole keep-alive timeout, so while closing every response says
  // `Connection: close` and idle connections are reaped as they appear.
  let closing = false;
  let idleReaper: NodeJS.Timeout | undefined;
  app.addHook("preClose", async () => {
    closing = true;
    idleReaper = setInterval(() => app.server.closeIdleConnections(), IDLE_REAP_INTERVAL_MS).unref();
  });
  app.addHook("onClose", async () => {
    clearInterval(idleReaper);
  });
  app.addHook("onRequest", async (request, reply) => {
    reply.header(REQUEST_ID_HEADER, request.id);
  });
  installConnectionLimits(app, limits, options.onRefusal);
  app.addHook("onSend", async (_request, reply, payload) => {
    if (closing) reply.header("connection", "close");
    return payload;
  });
  installErrorHandlers(app);
  return app;
}

export interface CastorAppDeps extends HttpAppOptions {
  store: MetadataStore;
  hub: TokenRequestAuthorizer;
  issuer: CasTokenIssuer;
  verifier: CasTokenVerifier;
  /**
   * The base of the URLs in the answer to a request (`casUrl`, repository and commit URLs, `Link`
   * headers): `PublicUrls.forRequest` (public-url.ts) in a server; known only once the port is bound.
   */
  publicUrl: (request: FastifyRequest) => string;
  blobs: BlobStore;
  xorbs: XorbIngestService;
  shards: ShardRegistrationService;
  dedup: DedupService;
  transferUrls: HmacTransferUrls;
  /** Signs the web interface's download links, which `resolve` accepts without a token (auth/download-link.ts). */
  downloadLinks: DownloadLinks;
  /**
   * CASTOR_TRANSFER_MODE=presigned: reconstruction answers hand out these URLs (presigned S3
   * GETs, one range per V2 entry) instead of `transferUrls`. Absent in the default proxy mode.
   */
  presignedUrls?: RangeUrlSigner;
  /** `config.transferUrlTtlSeconds`: the lifetime of the transfer URLs handed out (`transferUrls`' or `presignedUrls`'). */
  transferUrlTtlSeconds: number;
  /** `config.v2Reconstruction`. */
  v2Reconstruction: "on" | "501";
  /** `config.dataDir`: `/readyz` watches its filesystem's free space. */
  dataDir: string;
  /** `config.minFreeBytes`. */
  minFreeBytes: number;
  /** The hub's repositories, for the Hugging Face routes. */
  hubRepos: HubRepositories;
  /** Serves Xet-stored files to clients that download them over plain HTTP. */
  xetFiles: XetFileSource;
  /** `config.hubInlineMaxBytes`. */
  hubInlineMaxBytes: number;
  /**
   * `config.metrics` and `config.metricsToken`; default: `/metrics` served, no token needed.
   * `shared`: this app is one of several processes on one port, and a scrape shows all of them.
   */
  metrics?: { enabled: boolean; token: string | null; shared?: SharedMetrics };
  /**
   * Storage statistics (`GET /api/stats`): their clock; whether the app takes the daily samples
   * (at start-up, after each UTC midnight) and measures again after the requests that change
   * something, from the moment it is ready until it closes (hub/stats-sampler.ts; `castor serve`
   * does both, one worker of several only the latter; test apps only when asked); how long after
   * a change (`changeDelayMs`, DEFAULT_CHANGE_DELAY_MS by default).
   */
  storageStats?: { dailySamples: boolean; afterChanges?: boolean; changeDelayMs?: number; now?: () => Date };
  /** `config.gc`: collections on a schedule when `intervalMs` is set (src/ops/gc-schedule.ts). */
  gc?: { intervalMs: number | null; graceMs: number; reserve?: Reserve | null };
  /** `config.maxConcurrentUploads`; the default when absent. */
  maxConcurrentUploads?: number;
  /** `config.hubLimits`; each one missing takes its default. */
  hubLimits?: Partial<HubLimits>;
  /** The web interface's built files (web-ui.ts); dist/web/ by default. */
  webUi?: WebUiOptions;
}

/** Whether a request may have changed what the storage statistics count: any write that succeeded. */
function changesSomething(method: string, status: number): boolean {
  return method !== "GET" && method !== "HEAD" && method !== "OPTIONS" && status < 400;
}

/** The whole castor HTTP surface: the hub (Hugging Face routes and token operation), health probes and the CAS routes. */
export async function buildCastorApp(deps: CastorAppDeps): Promise<FastifyInstance> {
  // Counted where the routes meet the services, so the services stay free of metrics.
  const metrics = (deps.metrics?.enabled ?? true) ? new CastorMetrics() : undefined;
  const onRefusal: OnRefusal | undefined = metrics && ((reason) => metrics.refused(reason));
  const app = createHttpApp({ ...deps, onRefusal });
  // Both upload services report to it, so /readyz learns of storage-full failures (and of
  // the successes that end them) whichever route or frame answered the client.
  const storageFull = new StorageFullWatch();
  const { xorbs, shards } = deps;
  if (metrics) {
    const shared = deps.metrics?.shared;
    shared?.attach(metrics);
    installMetrics(app, { metrics, token: deps.metrics?.token ?? null, expose: shared && (() => shared.expose()) });
    metrics.watchMaintenance(() => deps.store.lastMaintenanceRuns());
    metrics.watchStorageSamples(async () => (await deps.store.listStatsSamples()).at(-1) ?? null);
  }
  const hub: TokenRequestAuthorizer = {
    authorizeTokenRequest: async (request) => {
      const decision = await deps.hub.authorizeTokenRequest(request);
      metrics?.tokenRequestDecided(decision.ok ? "granted" : "denied");
      return decision;
    },
  };
  const stats = new StorageStatsService(deps.store, { now: deps.storageStats?.now });
  const { dailySamples = false, afterChanges = false } = deps.storageStats ?? {};
  if (dailySamples || afterChanges) {
    const sampler = new StatsSampler(stats, {
      now: deps.storageStats?.now,
      daily: dailySamples,
      delayMs: deps.storageStats?.changeDelayMs,
      onSample: (sample) => {
        const { logicalBytes, storedBytes, recordedXorbBytes } = sample;
        app.log.info({ day: sample.day, logicalBytes, storedBytes, recordedXorbBytes }, "storage statistics sample");
      },
      onError: (error) => app.log.warn({ err: error }, "the storage statistics sample failed; trying again later"),
    });
    // Started once the app is ready, stopped before the stores close (server.ts closes them after the app).
    app.addHook("onReady", async () => sampler.start());
    app.addHook("onClose", () => sampler.stop());
    if (afterChanges) {
      app.addHook("onResponse", async (request, reply) => {
        if (changesSomething(request.method, reply.statusCode)) sampler.changed();
      });
    }
  }
  if (deps.gc?.intervalMs != null) {
    const schedule = new GcSchedule(deps.store, deps.blobs, {
      intervalMs: deps.gc.intervalMs,
      graceMs: deps.gc.graceMs,
      onReport: (report) => app.log.info({ removed: gcTotals(report) }, "scheduled garbage collection finished"),
      onError: (error) => app.log.error({ err: error }, "scheduled garbage collection failed; trying again at the next interval"),
      reserve: deps.gc.reserve,
      onReserve: (line) => app.log.warn(`scheduled garbage collection: ${line}`),
    });
    app.addHook("onReady", async () => schedule.start());
    app.addHook("onClose", () => schedule.stop());
  }
  await app.register(healthRoutes, { store: deps.store, dataDir: deps.dataDir, minFreeBytes: deps.minFreeBytes, storageFull });
  // One scope for the hub's routes and the token operation, so the per-client limits
  // (hub-limits.ts) cover exactly them and never the CAS routes.
  await app.register(async (hubScope) => {
    acceptHubBodies(hubScope);
    await installHubLimits(hubScope, { ...DEFAULT_HUB_LIMITS, ...deps.hubLimits }, onRefusal);
    await hubScope.register(hubTokenRoutes, { hub, issuer: deps.issuer, publicUrl: deps.publicUrl });
    await hubScope.register(hubRoutes, {
      repos: deps.hubRepos,
      blobs: deps.blobs,
      xetFiles: deps.xetFiles,
      store: deps.store,
      publicUrl: deps.publicUrl,
      downloadLinks: deps.downloadLinks,
      inlineMaxBytes: deps.hubInlineMaxBytes,
      spoolDir: join(deps.dataDir, SPOOL_DIR_NAME),
      stats,
    });
    await hubScope.register(castorRoutes, {
      repos: deps.hubRepos,
      publicUrl: deps.publicUrl,
      downloadLinks: deps.downloadLinks,
      store: deps.store,
      tokens: new HubService(deps.store),
    });
  });
  await app.register(webUiRoutes, deps.webUi ?? {});
  await app.register(casScope, {
    verifier: deps.verifier,
    maxConcurrentUploads: deps.maxConcurrentUploads,
    onRefusal,
    routes: async (cas) => {
      await cas.register(xorbRoutes, {
        xorbs: {
          maxBodyBytes: xorbs.maxBodyBytes,
          storedSize: (hash) => xorbs.storedSize(hash),
          // An upload of a xorb recorded before stores nothing, so it says nothing about free space.
          ingest: async (hash, body) => {
            const started = performance.now();
            const result = await storageFull.track(xorbs.ingest(hash, body), (done) => done.outcome !== "already_recorded");
            metrics?.xorbIngested(result.outcome, (performance.now() - started) / 1000);
            return result;
          },
        },
      });
      await cas.register(shardRoutes, {
        shards: {
          maxShardBytes: shards.maxShardBytes,
          admit: (body, options) => shards.admit(body, options),
          registerAdmitted: async (shard, options) => {
            const started = performance.now();
            const result = await storageFull.track(shards.registerAdmitted(shard, options));
            metrics?.shardRegistered(result.inserted, (performance.now() - started) / 1000);
            return result;
          },
        },
        repos: deps.store,
        spool: { dir: join(deps.dataDir, SPOOL_DIR_NAME) },
        onRefusal,
      });
      await cas.register(dedupRoutes, {
        dedup: {
          query: async (chunk) => {
            const answer = await deps.dedup.query(chunk);
            metrics?.dedupQueried(answer !== null);
            return answer;
          },
        },
      });
      const reconstructions = new ReconstructionService({
        store: deps.store,
        signer: deps.presignedUrls ?? deps.transferUrls,
        singleRangeEntries: deps.presignedUrls !== undefined,
        transferUrlTtlSeconds: deps.transferUrlTtlSeconds,
      });
      await cas.register(reconstructionRoutes, {
        reconstructions: {
          reconstruct: async (query) => {
            const answer = await reconstructions.reconstruct(query);
            metrics?.reconstructionAnswered(query.version, answer.terms);
            return answer;
          },
          gzipped: (answer) => reconstructions.gzipped(answer),
          fileSize: (repo, fileHash, fileHex) => reconstructions.fileSize(repo, fileHash, fileHex),
        },
        v2Reconstruction: deps.v2Reconstruction,
      });
    },
  });
  await app.register(transferRoutes, { blobs: deps.blobs, transferUrls: deps.transferUrls });
  return app;
}
