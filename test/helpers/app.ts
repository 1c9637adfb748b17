/**
 * The CAS and hub dependencies of `buildCastorApp` for tests that build the app in-process
 * around a metadata store of their own: an fs blob store in `dataDir` and services with fixed
 * test keys. `startTestApp` builds the whole app that way in a temp folder.
 */
import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import { CasTokenIssuer, CasTokenVerifier } from "../../src/auth/cas-token.js";
import { DownloadLinks } from "../../src/auth/download-link.js";
import { HmacTransferUrls } from "../../src/auth/transfer-url.js";
import { LfsObjectUrls } from "../../src/auth/lfs-object-url.js";
import { DedupService } from "../../src/cas/dedup.js";
import { ShardRegistrationService } from "../../src/cas/shard-registration.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { DEFAULT_HUB_INLINE_MAX_BYTES, DEFAULT_MAX_SHARD_BYTES, loadConfig } from "../../src/config.js";
import { FileIngest } from "../../src/cas/file-ingest.js";
import { FileReader } from "../../src/cas/file-reader.js";
import { ReconstructionService } from "../../src/cas/reconstruction-service.js";
import { HubGit } from "../../src/git/hub-source.js";
import { createHub } from "../../src/hub/index.js";
import { StorageStatsService } from "../../src/hub/stats.js";
import { DEFAULT_MAX_XORB_BODY_BYTES } from "../../src/format/xorb.js";
import { buildCastorApp, SPOOL_DIR_NAME, type CastorAppDeps } from "../../src/http/app.js";
import { createLogger } from "../../src/http/logging.js";
import { statsSampler } from "../../src/server.js";
import { OperatorHub } from "./operator.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import type { MetadataStore } from "../../src/metadata/store.js";
import { FsBlobStore } from "../../src/storage/fs.js";

export type CasDeps = Pick<
  CastorAppDeps,
  | "blobs"
  | "xorbs"
  | "shards"
  | "dedup"
  | "reconstructions"
  | "transferUrls"
  | "downloadLinks"
  | "lfsUrls"
  | "v2Reconstruction"
  | "dataDir"
  | "minFreeBytes"
  | "hub"
  | "git"
>;

const TRANSFER_URL_TTL_SECONDS = 3600;

export async function casDepsForTest(
  store: MetadataStore,
  dataDir: string,
  publicUrl: () => string,
  hub: { inlineMaxBytes?: number; now?: () => Date; stats?: StorageStatsService } = {},
): Promise<CasDeps> {
  const blobs = await FsBlobStore.open(join(dataDir, "blobs"));
  const inlineMaxBytes = hub.inlineMaxBytes ?? DEFAULT_HUB_INLINE_MAX_BYTES;
  const transferUrls = new HmacTransferUrls({ key: Buffer.alloc(32, 9), publicUrl, ttlSeconds: TRANSFER_URL_TTL_SECONDS });
  const xorbs = new XorbIngestService({ blobs, metadata: store, maxBodyBytes: DEFAULT_MAX_XORB_BODY_BYTES });
  const shards = new ShardRegistrationService({ metadata: store, blobs, maxShardBytes: DEFAULT_MAX_SHARD_BYTES });
  const services = createHub({
    store,
    blobs,
    xetFiles: new FileReader({ metadata: store, blobs }),
    stats: hub.stats ?? new StorageStatsService(store, { now: hub.now }),
    inlineMaxBytes,
    spoolDir: join(dataDir, SPOOL_DIR_NAME),
    lfsFiles: new FileIngest({ xorbs, shards, metadata: store }),
    now: hub.now,
  });
  return {
    blobs,
    xorbs,
    shards,
    dedup: new DedupService({ metadata: store, dedupKeySeed: Buffer.alloc(32, 7) }),
    transferUrls,
    downloadLinks: new DownloadLinks({ urlKey: Buffer.alloc(32, 9) }),
    reconstructions: new ReconstructionService({ store, signer: transferUrls, singleRangeEntries: false, transferUrlTtlSeconds: TRANSFER_URL_TTL_SECONDS }),
    lfsUrls: new LfsObjectUrls(Buffer.alloc(32, 9), TRANSFER_URL_TTL_SECONDS),
    v2Reconstruction: "on",
    dataDir,
    // Readiness never fails for lack of space on the machine running the tests.
    minFreeBytes: 0,
    hub: services,
    git: new HubGit(services),
  };
}

/** An in-process castor on the embedded store in a temp folder, with its store and hub. */
export interface TestApp {
  dataDir: string;
  store: MetadataStore;
  hub: OperatorHub;
  app: FastifyInstance;
  /** Where it listens (http://127.0.0.1:PORT); the public URL too unless one was given. */
  url: string;
  /** Closes the app and the store and removes the folder. */
  close(): Promise<void>;
}

export interface TestAppOptions {
  /** Names the temp folder (castor-NAME-…). */
  name: string;
  /** Receives every JSON log line at level info; without it, warnings and worse are dropped. */
  logLines?: (line: string) => void;
  /** The URL handed out in answers, if not the listening one. */
  publicUrl?: string;
  /** Defaults: a fresh Ed25519 pair, 900 s tokens, the real clock. */
  keys?: { privateKey: KeyObject; publicKey: KeyObject };
  tokenTtlSeconds?: number;
  now?: () => Date;
  inlineMaxBytes?: number;
  /** `/metrics`: served without a token unless this says otherwise. */
  metrics?: CastorAppDeps["metrics"];
  /** Storage statistics' clock and daily samples (off unless asked). */
  /** Storage statistics' samples (off unless asked): the daily ones, measurements after changes (and how long after), their clock. */
  storageStats?: { dailySamples: boolean; afterChanges?: boolean; changeDelayMs?: number; now?: () => Date };
  /** Per-client limits of the hub routes; castor's defaults unless given. */
  hubLimits?: CastorAppDeps["hubLimits"];
  /** The web interface's built files; dist/web/ unless given. */
  webUi?: CastorAppDeps["webUi"];
  /** Peers whose X-Forwarded-For is believed (CASTOR_TRUSTED_PROXIES); none unless given. */
  trustedProxies?: CastorAppDeps["trustedProxies"];
}

export async function startTestApp(options: TestAppOptions): Promise<TestApp> {
  const dataDir = await mkdtemp(join(tmpdir(), `castor-${options.name}-`));
  const store = await openMetadataStore(loadConfig({ CASTOR_DATA_DIR: dataDir }));
  const hub = new OperatorHub(store);
  const { privateKey, publicKey } = options.keys ?? generateKeyPairSync("ed25519");
  let url = "";
  const publicUrl = () => options.publicUrl ?? url;
  const logger = options.logLines ? createLogger("info", { write: options.logLines }) : createLogger("warn", { write: () => {} });
  const sampling = options.storageStats;
  const stats = new StorageStatsService(store, { now: sampling?.now });
  const sampler =
    sampling !== undefined && (sampling.dailySamples || sampling.afterChanges === true)
      ? statsSampler(stats, logger, { daily: sampling.dailySamples, delayMs: sampling.changeDelayMs, now: sampling.now })
      : undefined;
  const app = await buildCastorApp({
    logger,
    store,
    issuer: new CasTokenIssuer(privateKey, options.tokenTtlSeconds ?? 900, options.now),
    verifier: new CasTokenVerifier(publicKey, options.now),
    publicUrl,
    metrics: options.metrics,
    background: sampler === undefined ? [] : [sampler],
    onChange: sampler !== undefined && sampling?.afterChanges === true ? () => sampler.changed() : undefined,
    hubLimits: options.hubLimits,
    webUi: options.webUi,
    trustedProxies: options.trustedProxies,
    ...(await casDepsForTest(store, dataDir, publicUrl, { inlineMaxBytes: options.inlineMaxBytes, stats })),
  });
  url = await app.listen({ host: "127.0.0.1", port: 0 });
  return {
    dataDir,
    store,
    hub,
    app,
    url,
    async close() {
      await app.close();
      await store.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
