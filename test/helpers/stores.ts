/**
 * Fresh embedded stores for service-level tests: each test of the file gets its own empty fs
 * blob store and SQLite metadata store in a temp folder, closed and removed afterwards.
 */
import { randomBytes } from "node:crypto";
import { after, afterEach, before, beforeEach } from "node:test";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { ShardRegistrationService } from "../../src/cas/shard-registration.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import type { Hash } from "../../src/format/hash.js";
import type { MetadataStore } from "../../src/metadata/store.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { blobKey, type BlobStore } from "../../src/storage/blob-store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { xorbRecord } from "./fixtures.js";

export interface TestStores {
  dir: string;
  blobs: FsBlobStore;
  metadata: SqliteMetadataStore;
}

/**
 * Registers the hooks and returns an accessor for the current test's stores. Call it at the
 * top level of a test file, before the `beforeEach` hooks that build services on the stores.
 */
export function useFreshStores(name: string): () => TestStores {
  let root = "";
  let caseNumber = 0;
  let current: TestStores | undefined;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), `castor-${name}-`));
  });
  beforeEach(async () => {
    const dir = join(root, String(caseNumber++));
    current = { dir, blobs: await FsBlobStore.open(join(dir, "blobs")), metadata: await SqliteMetadataStore.open(dir) };
  });
  afterEach(async () => {
    await current?.metadata.close();
    current = undefined;
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });
  return () => {
    if (current === undefined) throw new Error("the fresh stores exist only while a test runs");
    return current;
  };
}

/** The CAS services on one test's fresh stores, as the server builds them. */
export interface TestCasServices extends TestStores {
  ingest: XorbIngestService;
  /** Takes shards of up to 1 MiB. */
  registration: ShardRegistrationService;
}

/**
 * `useFreshStores` with a xorb ingest and a shard registration service built on each test's
 * stores, for the service-level CAS tests. Call it where `useFreshStores` would be called.
 */
export function useFreshCasServices(name: string): () => TestCasServices {
  const stores = useFreshStores(name);
  let current: TestCasServices | undefined;
  beforeEach(() => {
    const { blobs, metadata } = stores();
    current = {
      ...stores(),
      ingest: new XorbIngestService({ blobs, metadata }),
      registration: new ShardRegistrationService({ metadata, blobs, maxShardBytes: 1024 * 1024 }),
    };
  });
  afterEach(() => {
    current = undefined;
  });
  return () => {
    if (current === undefined) throw new Error("the fresh CAS services exist only while a test runs");
    return current;
  };
}

/** Ingests `body` as a xorb sent in one piece. */
export async function ingestWhole(ingest: XorbIngestService, hash: Hash, body: Uint8Array): Promise<void> {
  await ingest.ingest(
    hash,
    (async function* () {
      yield body;
    })(),
  );
}

/** Row counts of `tables`, read straight from the SQLite file at `path` (opened read-only). */
export function sqliteRowCounts(path: string, tables: readonly string[]): Record<string, number> {
  const db = new Database(path, { readonly: true });
  try {
    const counts: Record<string, number> = {};
    for (const table of tables) {
      counts[table] = (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
    }
    return counts;
  } finally {
    db.close();
  }
}

/** `count` recorded xorbs no file uses, each with a blob of random bytes: garbage for a collector. */
export async function storeGarbageXorbs(metadata: Pick<MetadataStore, "putXorb">, blobs: BlobStore, count: number, label: string): Promise<void> {
  for (let i = 0; i < count; i++) {
    const record = xorbRecord(`${label} ${i}`, 2, { serializedBytes: 64 });
    await blobs.putIfAbsent(blobKey("xorbs", record.hash), randomBytes(record.serializedLength));
    await metadata.putXorb(record);
  }
}

/** How many blobs `blobs` lists under `prefix`. */
export async function countBlobs(blobs: BlobStore, prefix: "xorbs/" | "inline/"): Promise<number> {
  let count = 0;
  for await (const _key of blobs.list(prefix)) count++;
  return count;
}
