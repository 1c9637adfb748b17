/**
 * The fastify application. `createHttpApp` is the bare frame every castor HTTP surface
 * shares (request ids, one log line per request, JSON errors, shutdown behaviour);
 * `buildCastorApp` adds the routes on top, over services the composition root (src/server.ts)
 * built: it constructs none itself. Tests build the frame alone to exercise a single piece (e.g.
 * the CAS auth hook with test routes).
 */
import { join } from "node:path";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from "fastify";
import type { CasTokenIssuer, CasTokenVerifier } from "../auth/cas-token.js";
import type { DownloadLinks } from "../auth/download-link.js";
import type { HmacTransferUrls } from "../auth/transfer-url.js";
import type { LfsObjectUrls } from "../auth/lfs-object-url.js";
import type { DedupService } from "../cas/dedup.js";
import type { ReconstructionService } from "../cas/reconstruction-service.js";
import type { ShardRegistrationService } from "../cas/shard-registration.js";
import type { XorbIngestService } from "../cas/xorb-ingest.js";
import type { Hub } from "../hub/index.js";
import type { UpstreamXorbRange } from "../hub/mirrored.js";
import type { ByteRange } from "../format/ranges.js";
import type { MetadataStore } from "../metadata/store.js";
import { CastorMetrics, type MirrorCounters, type OnRefusal, type SharedMetrics } from "../metrics.js";
import type { BlobStore } from "../storage/blob-store.js";
import { StorageFullWatch } from "../storage/full.js";
import { casScope } from "./cas-scope.js";
import {
  DEFAULT_CONNECTION_LIMITS,
  DEFAULT_GIT_LIMITS,
  DEFAULT_HUB_LIMITS,
  DEFAULT_MAX_CONCURRENT_UPLOADS,
  type ConnectionLimits,
  type GitLimits,
  type HubLimits,
} from "../config.js";
import { httpServerOptions, installConnectionLimits } from "./connection-limits.js";
import { dedupRoutes } from "./dedup-routes.js";
import { answerFrameworkError, installErrorHandlers, REQUEST_ID_HEADER } from "./errors.js";
import type { HubGit } from "../git/hub-source.js";
import { gitRoutes } from "./git-routes.js";
import { healthRoutes } from "./health.js";
import { acceptHubBodies, hubRoutes } from "./hub/index.js";
import { installHubLimits } from "./hub-limits.js";
import { hubTokenRoutes } from "./hub-token.js";
import { OneLinePerRequest, requestIdFor } from "./logging.js";
import { installMetrics } from "./metrics.js";
import { reconstructionRoutes } from "./reconstruction-routes.js";
import { shardRoutes } from "./shard-routes.js";
import { transferRoutes } from "./transfer-routes.js";
import { UploadSlots } from "./upload-limit.js";
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

/** Work a server does in the background while it serves (the daily statistics sample, scheduled gc): started once ready, stopped before it closes. */
export interface BackgroundTask {
  start(): void;
  stop(): void | Promise<void>;
}

export interface CastorAppDeps extends HttpAppOptions {
  /** For /readyz (ping) and /metrics (the last maintenance runs), and the shard routes' repository lookup. */
  store: MetadataStore;
  /** The hub's services (src/hub): the Hugging Face routes, castor's own and the token operation call them. */
  hub: Hub;
  /** The hub's repositories as git sees them (src/git/hub-source.ts), for git's smart HTTP routes. */
  git: Pick<HubGit, "readable" | "writable">;
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
  reconstructions: ReconstructionService;
  transferUrls: HmacTransferUrls;
  /** Signs the web interface's download links, which `resolve` accepts without a token (auth/download-link.ts). */
  downloadLinks: DownloadLinks;
  /** Signs and verifies the URLs of Git LFS basic actions (auth/lfs-object-url.ts). */
  lfsUrls: LfsObjectUrls;
  /**
   * Told of storage-full failures and of the successes that end them (/readyz reads it); shared
   * with the services built outside the app that write (the hub's Git LFS uploads). Its own when absent.
   */
  storageFull?: StorageFullWatch;
  /** `config.v2Reconstruction`. */
  v2Reconstruction: "on" | "501";
  /** `config.dataDir`: `/readyz` watches its filesystem's free space. */
  dataDir: string;
  /** `config.minFreeBytes`. */
  minFreeBytes: number;
  /**
   * `config.metrics` and `config.metricsToken`; default: `/metrics` served, no token needed.
   * `shared`: this app is one of several processes on one port, and a scrape shows all of them.
   */
  metrics?: { enabled: boolean; token: string | null; shared?: SharedMetrics };
  /** Started once the app is ready, stopped when it closes (before server.ts closes the stores). */
  background?: readonly BackgroundTask[];
  /**
   * Called after every request that may have changed what is stored (a write that succeeded):
   * the storage statistics' sampler then measures again (hub/stats-sampler.ts).
   */
  onChange?: () => void;
  /** `config.maxConcurrentUploads`; the default when absent. */
  maxConcurrentUploads?: number;
  /** `config.hubLimits`; each one missing takes its default. */
  hubLimits?: Partial<HubLimits>;
  /** The web interface's built files (web-ui.ts); dist/web/ by default. */
  webUi?: WebUiOptions;
  /** `config.gitLimits`; each one missing takes its default. */
  gitLimits?: Partial<GitLimits>;
  /**
   * The upstream hub castor mirrors, when it mirrors one (src/mirror): where it reports what
   * `/metrics` counts of it, and the ranges of upstream xorbs the transfer route serves for it.
   */
  mirror?: { countInto(counters: MirrorCounters): void; upstreamXorbRange(xorbHex: string, range: ByteRange): Promise<UpstreamXorbRange | null> };
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
  const storageFull = deps.storageFull ?? new StorageFullWatch();
  // One count of uploads for the node: xorbs and shards, git pushes and Git LFS uploads alike.
  const uploadSlots = new UploadSlots(deps.maxConcurrentUploads ?? DEFAULT_MAX_CONCURRENT_UPLOADS, onRefusal);
  const { xorbs, shards, reconstructions } = deps;
  if (metrics) {
    const shared = deps.metrics?.shared;
    shared?.attach(metrics);
    installMetrics(app, { metrics, token: deps.metrics?.token ?? null, expose: shared && (() => shared.expose()) });
    metrics.watchMaintenance(() => deps.store.lastMaintenanceRuns());
    metrics.watchStorageSamples(async () => (await deps.store.listStatsSamples()).at(-1) ?? null);
    deps.mirror?.countInto(metrics.mirrorCounters());
  }
  for (const task of deps.background ?? []) {
    app.addHook("onReady", async () => task.start());
    app.addHook("onClose", async () => task.stop());
  }
  const onChange = deps.onChange;
  if (onChange !== undefined) {
    app.addHook("onResponse", async (request, reply) => {
      if (changesSomething(request.method, reply.statusCode)) onChange();
    });
  }
  await app.register(healthRoutes, { store: deps.store, dataDir: deps.dataDir, minFreeBytes: deps.minFreeBytes, storageFull });
  // One scope for the hub's routes and the token operation, so the per-client limits
  // (hub-limits.ts) cover exactly them and never the CAS routes.
  await app.register(async (hubScope) => {
    acceptHubBodies(hubScope);
    await installHubLimits(hubScope, { ...DEFAULT_HUB_LIMITS, ...deps.hubLimits }, onRefusal);
    await hubScope.register(hubTokenRoutes, {
      tokens: {
        authorizeTokenRequest: async (request) => {
          const decision = await deps.hub.tokens.authorizeTokenRequest(request);
          metrics?.tokenRequestDecided(decision.ok ? "granted" : "denied");
          return decision;
        },
      },
      issuer: deps.issuer,
      publicUrl: deps.publicUrl,
    });
    await hubScope.register(hubRoutes, { hub: deps.hub, publicUrl: deps.publicUrl, downloadLinks: deps.downloadLinks, lfsUrls: deps.lfsUrls, uploadSlots });
    await hubScope.register(gitRoutes, {
      authenticate: (secret) => deps.hub.tokens.authenticate(secret),
      readable: (caller, address) => deps.git.readable(caller, address),
      writable: (caller, address) => deps.git.writable(caller, address),
      agent: "castor",
      limits: { ...DEFAULT_GIT_LIMITS, ...deps.gitLimits },
      // Larger files go through Git LFS, as they go through Xet in the Hub API.
      maxObjectBytes: deps.hub.files.inlineMaxBytes,
      spoolDir: join(deps.dataDir, SPOOL_DIR_NAME),
      uploadSlots,
    });
  });
  await app.register(webUiRoutes, deps.webUi ?? {});
  await app.register(casScope, {
    verifier: deps.verifier,
    uploadSlots,
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
  const { mirror } = deps;
  await app.register(transferRoutes, {
    blobs: deps.blobs,
    transferUrls: deps.transferUrls,
    upstreamXorbRange: mirror && ((xorbHex, range) => mirror.upstreamXorbRange(xorbHex, range)),
  });
  return app;
}
