import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import Database from "better-sqlite3";
import { ConfigError, loadConfig } from "../../src/config.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import {
  METADATA_FILE_NAME,
  MIGRATIONS,
  MetadataSchemaError,
  SqliteMetadataStore,
} from "../../src/metadata/sqlite.js";
import { runMetadataStoreContract } from "../contract/metadata-store.js";

async function tempDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), "castor-sqlite-"));
}

runMetadataStoreContract("SQLite", async () => {
  const root = await tempDir();
  // A nested, not yet existing folder: the store creates it like mkdir -p.
  const dataDir = join(root, "nested", "data");
  return {
    store: await SqliteMetadataStore.open(dataDir),
    reopen: () => SqliteMetadataStore.open(dataDir),
    cleanup: () => rm(root, { recursive: true, force: true }),
  };
});

describe("SqliteMetadataStore specifics", () => {
  it("creates the data folder and metadata.sqlite in WAL mode at the latest schema version", async () => {
    const root = await tempDir();
    try {
      const dataDir = join(root, "a", "b");
      const store = await SqliteMetadataStore.open(dataDir);
      assert.equal(store.path, join(dataDir, METADATA_FILE_NAME));
      assert.ok(existsSync(store.path));
      await store.close();

      const raw = new Database(store.path, { readonly: true });
      try {
        assert.equal(raw.pragma("journal_mode", { simple: true }), "wal");
        assert.equal(raw.pragma("user_version", { simple: true }), MIGRATIONS.length);
      } finally {
        raw.close();
      }
      // Opening again finds the schema current and changes nothing.
      const again = await SqliteMetadataStore.open(dataDir);
      await again.ping();
      await again.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("refuses a database written by a newer castor, naming the fix", async () => {
    const root = await tempDir();
    try {
      const raw = new Database(join(root, METADATA_FILE_NAME));
      raw.pragma(`user_version = ${MIGRATIONS.length + 1}`);
      raw.close();
      await assert.rejects(SqliteMetadataStore.open(root), (err: unknown) => {
        assert.ok(err instanceof MetadataSchemaError);
        assert.match(err.message, /schema version \d+.*upgrade castor/);
        return true;
      });
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("waits for another connection's write lock instead of failing", async () => {
    const root = await tempDir();
    const store = await SqliteMetadataStore.open(root);
    // Another thread (standing in for another process) holds the write lock for a moment.
    const worker = new Worker(
      `
      const { parentPort, workerData } = require("node:worker_threads");
      const Database = require(workerData.driver);
      const db = new Database(workerData.path);
      db.exec("BEGIN IMMEDIATE");
      parentPort.postMessage("locked");
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 300);
      db.exec("COMMIT");
      db.close();
      `,
      { eval: true, workerData: { driver: createRequire(import.meta.url).resolve("better-sqlite3"), path: store.path } },
    );
    try {
      await new Promise<void>((resolve, reject) => {
        worker.once("message", () => resolve());
        worker.once("error", reject);
      });
      const repo = await store.createRepo("model", "alice/waited");
      assert.deepEqual(await store.getRepo("model", "alice/waited"), repo);
    } finally {
      await worker.terminate();
      await store.close();
      await rm(root, { recursive: true, force: true });
    }
  });
});

describe("openMetadataStore", () => {
  it("opens SQLite in the data folder when no database URL is set", async () => {
    const root = await tempDir();
    try {
      const store = await openMetadataStore(loadConfig({ CASTOR_DATA_DIR: root }));
      try {
        assert.ok(store instanceof SqliteMetadataStore);
        assert.equal(store.path, join(root, METADATA_FILE_NAME));
        await store.createRepo("model", "alice/bert");
      } finally {
        await store.close();
      }
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("says PostgreSQL is not supported yet for a postgres:// URL", async () => {
    const config = loadConfig({ CASTOR_DATABASE_URL: "postgres://castor@127.0.0.1/castor" });
    await assert.rejects(openMetadataStore(config), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /CASTOR_DATABASE_URL.*not supported by this version/);
      return true;
    });
  });
});
