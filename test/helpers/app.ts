/**
 * The CAS and hub dependencies of `buildCastorApp` for tests that build the app in-process
 * around a metadata store of their own: an fs blob store in `dataDir` and services with fixed
 * test keys.
 */
import { join } from "node:path";
import { HmacTransferUrls } from "../../src/auth/transfer-url.js";
import { DedupService } from "../../src/cas/dedup.js";
import { ShardRegistrationService } from "../../src/cas/shard-registration.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { DEFAULT_HUB_INLINE_MAX_BYTES, DEFAULT_MAX_SHARD_BYTES } from "../../src/config.js";
import { FileReader } from "../../src/cas/file-reader.js";
import { HubRepositories } from "../../src/hub/repositories.js";
import { DEFAULT_MAX_XORB_BODY_BYTES } from "../../src/format/xorb.js";
import type { CastorAppDeps } from "../../src/http/app.js";
import type { MetadataStore } from "../../src/metadata/store.js";
import { FsBlobStore } from "../../src/storage/fs.js";

export type CasDeps = Pick<
  CastorAppDeps,
  | "blobs"
  | "xorbs"
  | "shards"
  | "dedup"
  | "transferUrls"
  | "transferUrlTtlSeconds"
  | "v2Reconstruction"
  | "dataDir"
  | "minFreeBytes"
  | "hubRepos"
  | "xetFiles"
  | "hubInlineMaxBytes"
>;

const TRANSFER_URL_TTL_SECONDS = 3600;

export async function casDepsForTest(
  store: MetadataStore,
  dataDir: string,
  publicUrl: () => string,
  hub: { inlineMaxBytes?: number; now?: () => Date } = {},
): Promise<CasDeps> {
  const blobs = await FsBlobStore.open(join(dataDir, "blobs"));
  const inlineMaxBytes = hub.inlineMaxBytes ?? DEFAULT_HUB_INLINE_MAX_BYTES;
  return {
    blobs,
    xorbs: new XorbIngestService({ blobs, metadata: store, maxBodyBytes: DEFAULT_MAX_XORB_BODY_BYTES }),
    shards: new ShardRegistrationService({ metadata: store, blobs, maxShardBytes: DEFAULT_MAX_SHARD_BYTES }),
    dedup: new DedupService({ metadata: store, dedupKeySeed: Buffer.alloc(32, 7) }),
    transferUrls: new HmacTransferUrls({ key: Buffer.alloc(32, 9), publicUrl, ttlSeconds: TRANSFER_URL_TTL_SECONDS }),
    transferUrlTtlSeconds: TRANSFER_URL_TTL_SECONDS,
    v2Reconstruction: "on",
    dataDir,
    // Readiness never fails for lack of space on the machine running the tests.
    minFreeBytes: 0,
    hubRepos: new HubRepositories(store, { inlineMaxBytes, now: hub.now }),
    xetFiles: new FileReader({ metadata: store, blobs }),
    hubInlineMaxBytes: inlineMaxBytes,
  };
}
