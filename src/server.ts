/**
 * The composition root: the one place castor's stores, services and background work are built
 * and handed to the HTTP app (src/http/app.ts constructs none itself). Starting and stopping
 * castor programmatically (used by `castor serve` and by tests).
 * The order matters: data dir, metadata store and keys are ready before the port opens, so
 * the first request accepted can be answered; on close the port stops accepting, requests in
 * progress finish, and only then are the stores closed.
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import type { FastifyInstance } from "fastify";
import type { DestinationStream, Logger } from "pino";
import { CasTokenIssuer, CasTokenVerifier } from "./auth/cas-token.js";
import { loadOrCreateKeys, type CastorKeys } from "./auth/keys.js";
import { ConfigError, listenUrl, type CastorConfig, type UpstreamConfig } from "./config.js";
import { DownloadLinks } from "./auth/download-link.js";
import { HmacTransferUrls } from "./auth/transfer-url.js";
import { DedupService } from "./cas/dedup.js";
import { PresignedTransferUrls } from "./cas/presigned-transfer.js";
import { ShardRegistrationService } from "./cas/shard-registration.js";
import { XorbIngestService } from "./cas/xorb-ingest.js";
import { FileReader } from "./cas/file-reader.js";
import { ReconstructionService } from "./cas/reconstruction-service.js";
import { LfsObjectUrls } from "./auth/lfs-object-url.js";
import { FileIngest } from "./cas/file-ingest.js";
import { HubGit } from "./git/hub-source.js";
import { createHub } from "./hub/index.js";
import { MirrorSource } from "./mirror/source.js";
import { StorageStatsService } from "./hub/stats.js";
import { StatsSampler, type StatsSamplerOptions } from "./hub/stats-sampler.js";
import { buildCastorApp, SPOOL_DIR_NAME, type BackgroundTask } from "./http/app.js";
import { sweepSpool } from "./http/body-spool.js";
import { createLogger } from "./http/logging.js";
import { PublicUrls } from "./http/public-url.js";
import { openMetadataStore, type OpenMetadataOptions } from "./metadata/open.js";
import type { MetadataStore } from "./metadata/store.js";
import type { SharedMetrics } from "./metrics.js";
import { gcTotals } from "./ops/gc.js";
import { GcSchedule } from "./ops/gc-schedule.js";
import type { BlobStore } from "./storage/blob-store.js";
import { StorageFullWatch } from "./storage/full.js";
import { openBlobStore } from "./storage/open.js";
import { ensureReserve, reserveOf, type Reserve } from "./storage/reserve.js";

/**
 * Staging files older than this are swept at start-up. With S3 other nodes share the bucket
 * and may be uploading right now, so only clearly abandoned leftovers go; a fs data dir
 * belongs to this one server, so everything left there is from a crash.
 */
const SHARED_STAGING_SWEEP_AGE_MS = 60 * 60 * 1000;

export interface StartOptions {
  /** Where log lines go; stdout by default. */
  logDestination?: DestinationStream;
  /** Set when this process is a worker of `castor serve --workers N` (src/cluster/). */
  worker?: WorkerRole;
}

/** What a worker of `castor serve --workers N` does differently from a server that is alone. */
export interface WorkerRole {
  /** 1…N, kept by a replacement; written on every log line. */
  id: number;
  /**
   * Whether this worker runs the scheduled work (CASTOR_GC_INTERVAL, the daily storage sample):
   * one worker does, not each of them.
   */
  runsSchedules: boolean;
  /** `GET /metrics` answers with every worker's metrics, not this worker's alone. */
  metrics: SharedMetrics;
}

export interface CastorServer {
  readonly app: FastifyInstance;
  readonly logger: Logger;
  readonly keys: CastorKeys;
  /** The address actually bound, e.g. `http://127.0.0.1:41234`. */
  readonly listenUrl: string;
  /** The base URL handed to clients as `casUrl`. */
  readonly publicUrl: string;
  /** Stops accepting, lets requests in progress finish, closes the stores. Idempotent. */
  close(): Promise<void>;
}

/** Thrown when the listen address cannot be bound (in use, not permitted). */
export class ListenError extends Error {
  override readonly name = "ListenError";
}

export interface OpenedStores {
  store: MetadataStore;
  blobs: BlobStore;
  keys: CastorKeys;
}

/**
 * The start-up work on the stores, before any request: the data dir, the metadata store (its
 * schema brought up to date), the keys (generated on the first start) and the sweep of staging
 * files that uploads cut short by a crash left. `sweep: "all"` removes every staging file, for a
 * server that alone writes to them; `"abandoned"` only those an hour old, when other processes
 * may be uploading right now (S3 nodes sharing the bucket, the other workers of this server).
 * `castor serve --workers N` runs it once in the primary, before the workers start, and each
 * worker again with `"abandoned"` (which then finds the schema current and the keys there),
 * `processes` telling each its share of the node's database connections.
 */
export async function openStores(config: CastorConfig, logger: Logger, sweep: "all" | "abandoned", options: OpenMetadataOptions = {}): Promise<OpenedStores> {
  await mkdir(config.dataDir, { recursive: true });
  const store = await openMetadataStore(config, options);
  let blobs: BlobStore | undefined;
  try {
    const keys = await loadOrCreateKeys(config);
    blobs = await openBlobStore(config);
    const olderThanMs = sweep === "all" ? 0 : SHARED_STAGING_SWEEP_AGE_MS;
    const swept = await blobs.sweepTemp({ olderThanMs });
    const spooled = await sweepSpool(join(config.dataDir, SPOOL_DIR_NAME), SHARED_STAGING_SWEEP_AGE_MS);
    if (swept + spooled > 0) logger.info({ swept, spooled }, `removed ${swept + spooled} staging leftover(s) of interrupted uploads`);
    await makeReserve(config, logger);
    return { store, blobs, keys };
  } catch (error) {
    blobs?.close?.();
    await store.close();
    throw error;
  }
}

/** How a server alone sweeps staging files: all of them, unless other nodes share the bucket. */
export function loneServerSweep(config: CastorConfig): "all" | "abandoned" {
  return config.s3 ? "abandoned" : "all";
}

export async function startServer(config: CastorConfig, options: StartOptions = {}): Promise<CastorServer> {
  const { worker } = options;
  const logger = createLogger(config.logLevel, options.logDestination, worker?.id);
  const { store, blobs, keys } = await openStores(config, logger, worker ? "abandoned" : loneServerSweep(config), {
    processes: worker ? config.workers : 1,
    backgroundCheckpoints: true,
  });
  try {
    const publicUrls = new PublicUrls({ config, logger });
    let presignedUrls: PresignedTransferUrls | undefined;
    if (config.transferMode === "presigned") {
      if (blobs.createRangePresigner === undefined) {
        throw new ConfigError("CASTOR_TRANSFER_MODE=presigned needs a blob store that presigns URLs, the S3 one (set CASTOR_S3_BUCKET)");
      }
      presignedUrls = new PresignedTransferUrls(await blobs.createRangePresigner({ ttlSeconds: config.transferUrlTtlSeconds }));
      logger.info("transfer URLs are presigned S3 GETs, one byte range each (CASTOR_TRANSFER_MODE=presigned)");
    }
    const runsSchedules = worker?.runsSchedules ?? true;
    // Transfer URLs stay on the configured public URL whatever name a client used: hf_xet follows
    // them as given, any loopback name reaches the same server, and answers are cached across clients.
    const transferUrls = new HmacTransferUrls({ key: keys.urlKey, publicUrl: () => publicUrls.configured(), ttlSeconds: config.transferUrlTtlSeconds });
    const stats = new StorageStatsService(store);
    // Every worker measures after its own changes; one takes the daily samples (stats-sampler.ts).
    const sampler = statsSampler(stats, logger, { daily: runsSchedules });
    const background: BackgroundTask[] = [sampler];
    if (runsSchedules && config.gc.intervalMs !== null) {
      background.push(
        scheduledGc(store, blobs, logger, {
          ...config.gc,
          intervalMs: config.gc.intervalMs,
          reserve: reserveOf(config),
          mirrorMaxBytes: config.upstream?.maxBytes ?? undefined,
        }),
      );
    }
    const xetFiles = new FileReader({ metadata: store, blobs });
    const xorbs = new XorbIngestService({ blobs, metadata: store, maxBodyBytes: config.maxXorbBytes });
    const mirror = config.upstream === null ? undefined : mirrorSource(config.upstream, { store, blobs, xorbs, xetFiles, logger, worker });
    const shards = new ShardRegistrationService({
      metadata: store,
      blobs,
      maxShardBytes: config.maxShardBytes,
      maxChunkReferences: config.maxShardChunkRefs,
      budget: { memoryBytes: config.shardMemoryBudget },
      admissionWaitMs: config.shardAdmissionWaitMs,
    });
    // /readyz learns of storage-full failures from every writer: the CAS routes and Git LFS uploads.
    const storageFull = new StorageFullWatch();
    const hub = createHub({
      store,
      blobs,
      xetFiles,
      stats,
      inlineMaxBytes: config.hubInlineMaxBytes,
      spoolDir: join(config.dataDir, SPOOL_DIR_NAME),
      // Git LFS basic uploads: chunked by the server into xorbs and a shard, through the CAS's own services.
      lfsFiles: new FileIngest({
        xorbs: { ingest: (hash, body) => storageFull.track(xorbs.ingest(hash, body), (done) => done.outcome !== "already_recorded") },
        shards: { register: (body, options) => storageFull.track(shards.register(body, options)) },
        metadata: store,
      }),
      pushMaxObjects: config.gitLimits.maxObjects,
      mirror,
    });
    const app = await buildCastorApp({
      logger,
      limits: config.limits,
      trustedProxies: config.trustedProxies,
      store,
      hub,
      git: new HubGit(hub),
      storageFull,
      issuer: new CasTokenIssuer(keys.jwtSigningKey, config.tokenTtlSeconds),
      verifier: new CasTokenVerifier(keys.jwtPublicKey),
      publicUrl: (request) => publicUrls.forRequest(request),
      blobs,
      xorbs,
      shards,
      dedup: new DedupService({ metadata: store, dedupKeySeed: keys.dedupKeySeed }),
      reconstructions: new ReconstructionService({
        store,
        signer: presignedUrls ?? transferUrls,
        singleRangeEntries: presignedUrls !== undefined,
        transferUrlTtlSeconds: config.transferUrlTtlSeconds,
        ...(mirror === undefined
          ? {}
          : {
              // A mirrored repository's file castor does not hold: answered at once from the
              // upstream's plan, behind castor's own transfer URLs (even with presigned ones: only
              // the transfer route serves a range as the fill brings it); V1 waits for the fill.
              answerMissing: async (repo, rev, fileHex, range) => {
                const found = await store.getRepo(repo.type, repo.id);
                return found?.mirror ? mirror.liveReconstruction(found, rev, fileHex, range, transferUrls.sign.bind(transferUrls)) : null;
              },
              fetchMissing: async (repo, rev, fileHex) => {
                const found = await store.getRepo(repo.type, repo.id);
                return found?.mirror === true && mirror.ensureXet(found, rev, fileHex);
              },
            }),
      }),
      transferUrls,
      downloadLinks: new DownloadLinks({ urlKey: keys.urlKey }),
      lfsUrls: new LfsObjectUrls(keys.urlKey, config.transferUrlTtlSeconds),
      v2Reconstruction: config.v2Reconstruction,
      dataDir: config.dataDir,
      minFreeBytes: config.minFreeBytes,
      metrics: { enabled: config.metrics, token: config.metricsToken, shared: worker?.metrics },
      background,
      onChange: () => sampler.changed(),
      maxConcurrentUploads: config.maxConcurrentUploads,
      hubLimits: config.hubLimits,
      gitLimits: config.gitLimits,
      mirror,
    });
    const bound = await listen(app, config);
    publicUrls.bind(bound.address, bound.port);
    const boundPublicUrl = publicUrls.configured();
    const url = listenUrl(config.listenHost, bound.port);
    if (worker) {
      // The primary says "castor listening" once every worker is; this line is the worker's own.
      logger.info({ listenUrl: url }, `worker ${worker.id} listening on ${url}`);
    } else {
      logger.info({ listenUrl: url, publicUrl: boundPublicUrl, dataDir: config.dataDir }, `castor listening on ${url}`);
    }

    let closed: Promise<void> | undefined;
    return {
      app,
      logger,
      keys,
      listenUrl: url,
      publicUrl: boundPublicUrl,
      close: () => (closed ??= closeAll(app, store, blobs, logger, config.shutdownGraceMs)),
    };
  } catch (error) {
    blobs.close?.();
    await store.close();
    throw error;
  }
}

/**
 * The storage-statistics samples (src/hub/stats-sampler.ts), each reported to the log: the daily
 * ones when `daily` (one process of a node: `WorkerRole.runsSchedules`), and a measurement after
 * changes, which the app reports (`CastorAppDeps.onChange`). The metrics read the latest sample
 * from the store.
 */
export function statsSampler(stats: StorageStatsService, logger: Logger, options: Pick<StatsSamplerOptions, "daily" | "delayMs" | "now"> = {}): StatsSampler {
  return new StatsSampler(stats, {
    ...options,
    onSample: (sample) => {
      const { logicalBytes, storedBytes, recordedXorbBytes } = sample;
      logger.info({ day: sample.day, logicalBytes, storedBytes, recordedXorbBytes }, "storage statistics sample");
    },
    onError: (error) => logger.warn({ err: error }, "the storage statistics sample failed; trying again later"),
  });
}

/**
 * The mirror of the upstream hub (CASTOR_UPSTREAM_*, src/mirror): a second source of
 * repositories behind the hub's services, and of files behind the CAS.
 */
function mirrorSource(
  upstream: UpstreamConfig,
  deps: { store: MetadataStore; blobs: BlobStore; xorbs: XorbIngestService; xetFiles: FileReader; logger: Logger; worker: WorkerRole | undefined },
): MirrorSource {
  const origin = new URL(upstream.url).origin;
  deps.logger.info(
    { upstream: origin, repos: upstream.repos, anonymous: upstream.anonymous },
    `mirroring ${origin}: names castor does not hold are looked up there (CASTOR_UPSTREAM_URL)`,
  );
  return new MirrorSource({
    settings: upstream,
    store: deps.store,
    blobs: deps.blobs,
    xorbs: deps.xorbs,
    reader: deps.xetFiles,
    log: deps.logger,
    // Workers of one node share a database but not a process: each claims fills as its own node.
    node: deps.worker ? `${process.pid}` : undefined,
  });
}

/** Garbage collection every `intervalMs` (CASTOR_GC_INTERVAL, src/ops/gc-schedule.ts), evicting mirrored files past `mirrorMaxBytes`. */
export function scheduledGc(
  store: MetadataStore,
  blobs: BlobStore,
  logger: Logger,
  gc: { intervalMs: number; graceMs: number; reserve?: Reserve | null; mirrorMaxBytes?: number },
): BackgroundTask {
  return new GcSchedule(store, blobs, {
    intervalMs: gc.intervalMs,
    graceMs: gc.graceMs,
    mirrorMaxBytes: gc.mirrorMaxBytes,
    onReport: (report) => logger.info({ removed: gcTotals(report) }, "scheduled garbage collection finished"),
    onError: (error) => logger.error({ err: error }, "scheduled garbage collection failed; trying again at the next interval"),
    reserve: gc.reserve,
    onReserve: (line) => logger.warn(`scheduled garbage collection: ${line}`),
  });
}

/** Makes the data disk's maintenance reserve (src/storage/reserve.ts), saying so when there is no room for it. */
async function makeReserve(config: CastorConfig, logger: Logger): Promise<void> {
  const reserve = reserveOf(config);
  if (reserve === null) return;
  const outcome = await ensureReserve(reserve);
  if (outcome === "created") logger.info({ bytes: reserve.bytes }, "reserved space on the data disk for maintenance (CASTOR_RESERVED_SPACE)");
  if (outcome === "no room") {
    logger.warn(
      { bytes: reserve.bytes, dataDir: config.dataDir },
      "no room on the data disk for the space reserved for maintenance (CASTOR_RESERVED_SPACE): free space, or castor gc may not be able to run once the disk is full",
    );
  }
}

async function listen(app: FastifyInstance, config: CastorConfig): Promise<AddressInfo> {
  try {
    await app.listen({ host: config.listenHost, port: config.listenPort });
  } catch (error) {
    await app.close().catch(() => undefined);
    const code = (error as NodeJS.ErrnoException).code;
    const where = `${config.listenHost}:${config.listenPort}`;
    if (code === "EADDRINUSE") throw new ListenError(`${where} is already in use: stop the other server or set CASTOR_LISTEN to a free port`);
    if (code === "EACCES") throw new ListenError(`binding ${where} is not permitted: use a port above 1023 or grant the permission`);
    if (code === "EADDRNOTAVAIL" || code === "ENOTFOUND") {
      throw new ListenError(`${config.listenHost} is not an address of this machine: set CASTOR_LISTEN to a local address, e.g. 127.0.0.1:8080`);
    }
    throw error;
  }
  return app.server.address() as AddressInfo;
}

/**
 * Requests in progress get `graceMs` to finish (CASTOR_SHUTDOWN_GRACE); then every connection
 * left is closed, so one stalled client cannot hold a rolling restart. Their uploads fail like
 * any interrupted upload (staged data dropped); clients retry on another node.
 */
async function closeAll(app: FastifyInstance, store: MetadataStore, blobs: BlobStore, logger: Logger, graceMs: number): Promise<void> {
  logger.info({ graceSeconds: graceMs / 1000 }, "castor shutting down: finishing requests in progress");
  const cutOff = setTimeout(() => {
    logger.warn({ graceSeconds: graceMs / 1000 }, "requests still in progress after the shutdown grace: closing their connections");
    app.server.closeAllConnections();
  }, graceMs);
  try {
    await app.close();
  } finally {
    clearTimeout(cutOff);
    blobs.close?.();
    await store.close();
  }
  logger.info("castor stopped");
}
