import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import Database from "better-sqlite3";
import { loadConfig } from "../../src/config.js";
import { hashToHex, type Hash } from "../../src/format/hash.js";
import type { FileRecord } from "../../src/metadata/cas.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import { JOURNAL_SIZE_LIMIT_BYTES, METADATA_FILE_NAME, MIGRATIONS, MetadataSchemaError, SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { PostgresConnectionError } from "../../src/metadata/postgres.js";
import { BACKSTOP_CHECKPOINT_PAGES, type CheckpointOutcome } from "../../src/metadata/sqlite/checkpointer.js";
import { SqliteConnection } from "../../src/metadata/sqlite/connection.js";
import { ROWS_PER_STEP } from "../../src/metadata/sqlite/shard-registration.js";
import { CorruptRecordError } from "../../src/metadata/store.js";
import { runMetadataStoreContract } from "../contract/metadata-store.js";
import { PRE_HISTORY_ROWS, checkUpgradedFromBeforeHistories } from "../contract/schema-upgrade.js";
import { fileRecord, hashOf, xorbRecord } from "../helpers/fixtures.js";
import { makeTempDir, removeTempDir, withTempDir } from "../helpers/temp-dir.js";
import { within } from "../helpers/wait.js";

function tempDir(): Promise<string> {
  return makeTempDir("castor-sqlite-");
}

/** Runs `body` on a store opened in a fresh folder; closes the store and removes the folder afterwards. */
async function withFreshStore(body: (store: SqliteMetadataStore, root: string) => Promise<void>): Promise<void> {
  await withTempDir("castor-sqlite-", async (root) => {
    const store = await SqliteMetadataStore.open(root);
    try {
      await body(store, root);
    } finally {
      await store.close();
    }
  });
}

/** The schema version of the database at `path`, read through a connection of its own. */
function schemaVersionOf(path: string): unknown {
  const raw = new Database(path, { readonly: true });
  try {
    return raw.pragma("user_version", { simple: true });
  } finally {
    raw.close();
  }
}

/**
 * Writes a database at schema `version` (its first migrations, then the rows of `seed`), opens
 * the store on it, runs `check` and makes sure the store upgraded it to the latest version.
 */
async function checkUpgradeFrom(version: number, seed: (raw: Database.Database) => void, check: (store: SqliteMetadataStore) => Promise<void>): Promise<void> {
  await withTempDir("castor-sqlite-", async (root) => {
    const raw = new Database(join(root, METADATA_FILE_NAME));
    raw.pragma("foreign_keys = ON");
    for (const migration of MIGRATIONS.slice(0, version)) raw.exec(migration);
    raw.pragma(`user_version = ${version}`);
    seed(raw);
    raw.close();
    const store = await SqliteMetadataStore.open(root);
    try {
      await check(store);
    } finally {
      await store.close();
    }
    assert.equal(schemaVersionOf(join(root, METADATA_FILE_NAME)), MIGRATIONS.length);
  });
}

function walSize(store: SqliteMetadataStore): number {
  const wal = `${store.path}-wal`;
  return existsSync(wal) ? statSync(wal).size : 0;
}

runMetadataStoreContract("SQLite", async () => {
  const root = await tempDir();
  // A nested, not yet existing folder: the store creates it like mkdir -p.
  const dataDir = join(root, "nested", "data");
  return {
    store: await SqliteMetadataStore.open(dataDir),
    reopen: () => SqliteMetadataStore.open(dataDir),
    cleanup: () => removeTempDir(root),
  };
});

describe("SqliteMetadataStore specifics", () => {
  it("creates the data folder and metadata.sqlite in WAL mode at the latest schema version", async () => {
    await withTempDir("castor-sqlite-", async (root) => {
      const dataDir = join(root, "a", "b");
      const store = await SqliteMetadataStore.open(dataDir);
      assert.equal(store.path, join(dataDir, METADATA_FILE_NAME));
      assert.ok(existsSync(store.path));
      await store.close();

      const raw = new Database(store.path, { readonly: true });
      try {
        assert.equal(raw.pragma("journal_mode", { simple: true }), "wal");
      } finally {
        raw.close();
      }
      assert.equal(schemaVersionOf(store.path), MIGRATIONS.length);
      // Opening again finds the schema current and changes nothing.
      const again = await SqliteMetadataStore.open(dataDir);
      await again.ping();
      await again.close();
    });
  });

  it("refuses a database written by a newer castor, naming the fix", async () => {
    await withTempDir("castor-sqlite-", async (root) => {
      const raw = new Database(join(root, METADATA_FILE_NAME));
      raw.pragma(`user_version = ${MIGRATIONS.length + 1}`);
      raw.close();
      await assert.rejects(SqliteMetadataStore.open(root), (err: unknown) => {
        assert.ok(err instanceof MetadataSchemaError);
        assert.match(err.message, /schema version \d+.*upgrade castor/);
        return true;
      });
    });
  });

  it("waits for another process's write lock instead of failing, without holding the event loop", async () => {
    const root = await tempDir();
    const store = await SqliteMetadataStore.open(root);
    const repo = await store.createRepo("model", "alice/first");
    const xorb = xorbRecord("waited", 1);
    await store.putXorb(xorb);
    const term = { xorbHash: xorb.hash, chunkStart: 0, chunkEnd: 1, unpackedLength: 65_536 };
    const files = (label: string, count: number): FileRecord[] =>
      Array.from({ length: count }, (_, f) => ({ hash: hashOf(`${label} ${f}`), size: 65_536, terms: [term], sha256: null }));
    // Another thread (standing in for another process: a worker, `castor gc`) holds the write
    // lock until told to let go: as long as the test needs, whatever the machine's speed, and
    // far longer than the synchronous spin a write allows itself.
    const worker = new Worker(
      `
      const { parentPort, workerData } = require("node:worker_threads");
      const Database = require(workerData.driver);
      const db = new Database(workerData.path);
      db.exec("BEGIN IMMEDIATE");
      parentPort.postMessage("locked");
      parentPort.once("message", () => {
        db.exec("COMMIT");
        db.close();
        parentPort.postMessage("released");
      });
      `,
      { eval: true, workerData: { driver: createRequire(import.meta.url).resolve("better-sqlite3"), path: store.path } },
    );
    try {
      worker.once("error", (error) => assert.fail(error));
      await within(new Promise<void>((resolve) => worker.once("message", () => resolve())), "the other thread's lock");
      // One write of each kind: single statements, IMMEDIATE transactions, and a large
      // registration whose transaction spans event-loop turns on a connection of its own.
      let releaseAsked = false;
      const settledWhileLocked: string[] = [];
      const track = (name: string, write: Promise<unknown>) =>
        write.finally(() => {
          if (!releaseAsked) settledWhileLocked.push(name);
        });
      const writes = Promise.all([
        track("createRepo", store.createRepo("model", "alice/waited")),
        track("putXorb", store.putXorb(xorbRecord("waited too", 1))),
        track(
          "large registerShard",
          store.registerShard({ shardHash: hashOf("waited shard"), repoId: repo.id, files: files("bulk", 2 * ROWS_PER_STEP), dedupEntries: [] }),
        ),
        track("small registerShard", store.registerShard({ shardHash: hashOf("small shard"), repoId: repo.id, files: files("small", 3), dedupEntries: [] })),
      ]);
      // While they wait, the event loop turns and reads are answered: the waits are asynchronous.
      // (A write spinning synchronously on SQLite's busy timeout would hold each turn for seconds.)
      const turns = async () => {
        for (let turn = 0; turn < 20; turn++) {
          assert.ok(await store.getRepo("model", "alice/first"), "a read answered while the writes waited");
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
      };
      await within(turns(), "20 turns of the event loop while the writes waited", 10_000);
      assert.deepEqual(settledWhileLocked, [], "no write completed (or failed) while the other process held the lock");
      releaseAsked = true;
      worker.postMessage("release");
      await within(writes, "the writes once the lock is released", 30_000);
      assert.ok(await store.getRepo("model", "alice/waited"));
      assert.equal(await store.isFileInRepo(hashOf("bulk 0"), repo.id), true);
      assert.equal(await store.isFileInRepo(hashOf("small 2"), repo.id), true);
    } finally {
      await worker.terminate();
      await store.close();
      await removeTempDir(root);
    }
  });
});

describe("SqliteMetadataStore CAS specifics", () => {
  it("upgrades a database of schema version 1, keeping its rows", async () => {
    await checkUpgradeFrom(
      1,
      (raw) => raw.prepare("INSERT INTO repos (type, name, created_at) VALUES ('model', 'alice/old', 1)").run(),
      async (store) => {
        const repo = await store.getRepo("model", "alice/old");
        assert.equal(repo?.createdAt.getTime(), 1);
        assert.equal(await store.putXorb(xorbRecord("after upgrade", 3)), true);
        assert.equal(await store.registerShard({ shardHash: hashOf("shard after upgrade"), repoId: repo!.id, files: [], dedupEntries: [] }), true);
      },
    );
  });

  it("upgrades a database whose SHA-256 index was indexed by file: entries kept and answered, the collector still deletes them", async () => {
    const [file, digest] = [hashOf("file before the upgrade"), hashOf("digest before the upgrade")];
    await checkUpgradeFrom(
      // The version before the migration that keyed file_sha256.
      6,
      (raw) => {
        raw.prepare("INSERT INTO repos (id, type, name, created_at) VALUES (1, 'model', 'alice/old', 1000)").run();
        raw.prepare("INSERT INTO files (hash, size, sha256, created_at, terms) VALUES (?, 0, ?, 1000, x'')").run(file, digest);
        raw.prepare("INSERT INTO file_repos (file_hash, repo_id) VALUES (?, 1)").run(file);
        raw.prepare("INSERT INTO file_sha256 (repo_id, sha256, file_hash) VALUES (1, ?, ?)").run(digest, file);
      },
      async (store) => {
        assert.equal(hashToHex((await store.findFileBySha256(1, digest))!), hashToHex(file));
        const raw = new Database(store.path, { readonly: true });
        const rows = () => raw.prepare<[], { n: number }>("SELECT count(*) AS n FROM file_sha256").get()!.n;
        try {
          assert.equal(raw.prepare("SELECT 1 FROM sqlite_schema WHERE name = 'file_sha256_by_file'").get(), undefined);
          assert.equal(rows(), 1);
          assert.equal((await store.deleteFiles([file], new Date())).length, 1);
          assert.equal(rows(), 0);
        } finally {
          raw.close();
        }
      },
    );
  });

  it("upgrades a database whose storage samples had no unique bytes: they read as null, new samples record them", async () => {
    await checkUpgradeFrom(
      // The version before the migration that added unique_bytes.
      7,
      (raw) => {
        raw.prepare("INSERT INTO stats_samples VALUES ('2030-01-01', 1000, 1, 2, 300, 100, 1, 3, 1, 10, 1, 90, 3)").run();
      },
      async (store) => {
        const [old] = await store.listStatsSamples();
        assert.deepEqual([old.day, old.logicalBytes, old.storedBytes, old.uniqueBytes], ["2030-01-01", 300, 100, null]);
        await store.recordStatsSample({ ...old, day: "2030-01-02", uniqueBytes: 150 });
        assert.deepEqual(
          (await store.listStatsSamples()).map((sample) => sample.uniqueBytes),
          [null, 150],
        );
      },
    );
  });

  it("upgrades a database of schema version 2 (before histories): repositories private, revisions at no commit, tokens without owner", async () => {
    await checkUpgradeFrom(
      2,
      (raw) => {
        raw.prepare("INSERT INTO repos (id, type, name, created_at) VALUES (1, 'model', 'alice/old', 1000), (2, 'dataset', 'alice/newest', 2000)").run();
        raw
          .prepare(
            "INSERT INTO revisions (repo_id, name, kind, created_at) VALUES (1, 'main', 'branch', 1000), (1, 'v1', 'tag', 1500), (2, 'main', 'branch', 2000)",
          )
          .run();
        raw
          .prepare("INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at) VALUES ('tok_old', ?, 'write', 0, 3000)")
          .run(PRE_HISTORY_ROWS.tokenSecretHash);
        raw.prepare("INSERT INTO hub_token_repos (token_id, repo_id) VALUES ('tok_old', 1), ('tok_old', 2)").run();
      },
      (store) => checkUpgradedFromBeforeHistories(store, [1, 2]),
    );
  });

  it("answers CorruptRecordError for damaged rows instead of reading out of bounds", async () => {
    await withFreshStore(async (store) => {
      const repo = await store.createRepo("model", "alice/damaged");
      const healthy = xorbRecord("healthy", 4);
      const damaged = xorbRecord("damaged", 4);
      await store.putXorb(healthy);
      await store.putXorb(damaged);
      const file = fileRecord("damaged", damaged);
      const chunk = damaged.chunks[0].hash;
      await store.registerShard({
        shardHash: hashOf("shard damaged"),
        repoId: repo.id,
        files: [file],
        dedupEntries: [{ chunkHash: chunk, xorbHash: damaged.hash }],
      });

      // Another connection damages the rows, bypassing the schema's CHECK constraints.
      const raw = new Database(store.path);
      try {
        raw.pragma("ignore_check_constraints = ON");
        raw.prepare("UPDATE xorbs SET chunks = zeroblob(41) WHERE hash = ?").run(damaged.hash);
        raw.prepare("UPDATE files SET terms = zeroblob(45), sha256 = zeroblob(3) WHERE hash = ?").run(file.hash);
        raw.prepare("UPDATE dedup_chunks SET xorb_hash = zeroblob(31) WHERE chunk_hash = ?").run(chunk);
      } finally {
        raw.close();
      }

      await assert.rejects(store.getXorbs([healthy.hash, damaged.hash]), (err: unknown) => {
        assert.ok(err instanceof CorruptRecordError);
        assert.match(err.message, new RegExp(`chunk table of xorb ${hashToHex(damaged.hash)} has 41 bytes.*restore it from a backup`));
        return true;
      });
      await assert.rejects(store.getFile(file.hash), /stored terms of file .* have 45 bytes/);
      await assert.rejects(store.findDedupXorbs(chunk, 5), CorruptRecordError);
      assert.deepEqual((await store.getXorbs([healthy.hash])).get(hashToHex(healthy.hash)), healthy, "healthy rows still read");
      assert.equal(await store.getXorbSize(damaged.hash), damaged.serializedLength);
    });
  });

  it("writes a large registration in steps, as one transaction: the event loop runs, readers see all or nothing, other writes wait", async () => {
    await withFreshStore(async (store) => {
      const repo = await store.createRepo("model", "alice/large");
      const xorb = xorbRecord("large", 4);
      await store.putXorb(xorb);
      const term = { xorbHash: xorb.hash, chunkStart: 0, chunkEnd: 1, unpackedLength: 65_536 };
      const files: FileRecord[] = Array.from({ length: 5 * ROWS_PER_STEP }, (_, f) => ({
        hash: hashOf(`file ${f}`),
        size: 65_536,
        terms: [term],
        sha256: null,
      }));

      // While the registration is in progress: the event loop turns, a reader sees none of its
      // files, and a write issued meanwhile completes (after it, since it waits for the write
      // lock). Turns are counted with setImmediate, not a timer: a timer fires only once a
      // millisecond has passed, so fast steps would look like a blocked loop.
      let ticks = 0;
      let ticking = true;
      const seenMidway: boolean[] = [];
      const tick = () => {
        if (!ticking) return;
        ticks++;
        void store.isFileInRepo(files[0].hash, repo.id).then((seen) => seenMidway.push(seen));
        setImmediate(tick);
      };
      setImmediate(tick);
      const registered = store.registerShard({ shardHash: hashOf("shard 1"), repoId: repo.id, files, dedupEntries: [] });
      const writtenMeanwhile = store.createRepo("model", "alice/meanwhile");
      let registrationDone = false;
      void registered.then(() => (registrationDone = true));
      try {
        assert.equal(await registered, true);
        await writtenMeanwhile;
        assert.equal(registrationDone, true, "the other write waited for the registration's transaction");
      } finally {
        ticking = false;
      }
      assert.ok(ticks >= 3, `the event loop turned between the steps (${ticks} turns)`);
      assert.ok(seenMidway.length > 0 && seenMidway.every((seen) => seen === false), "no file was visible before the commit");
      assert.equal(await store.isFileInRepo(files.at(-1)!.hash, repo.id), true);
      assert.ok(await store.getRepo("model", "alice/meanwhile"));

      // A bad record near the end rolls back everything written before it, and the store writes on.
      const more = Array.from({ length: 3 * ROWS_PER_STEP }, (_, f) => ({ hash: hashOf(`more file ${f}`), size: 65_536, terms: [term], sha256: null }));
      const badEntry = { chunkHash: new Uint8Array(31), xorbHash: xorb.hash };
      await assert.rejects(store.registerShard({ shardHash: hashOf("shard 2"), repoId: repo.id, files: more, dedupEntries: [badEntry] }));
      assert.equal(await store.isFileInRepo(more[0].hash, repo.id), false, "rolled back");
      assert.equal(await store.registerShard({ shardHash: hashOf("shard 2"), repoId: repo.id, files: more, dedupEntries: [] }), true);
      assert.equal(await store.isFileInRepo(more[0].hash, repo.id), true);
    });
  });

  it("keeps the WAL bounded: sustained writes beside a reader, and after one oversized transaction", async () => {
    const root = await tempDir();
    const store = await SqliteMetadataStore.open(root);
    const reader = await SqliteMetadataStore.open(root);
    try {
      // ~24 MiB of xorb rows, one transaction each, while another instance keeps reading. The
      // xorbs share one chunk table: only the bytes written matter here.
      const { chunks } = xorbRecord("shared chunks", 2000);
      const xorbHashes: Hash[] = [];
      let largestWal = 0;
      for (let n = 0; n < 300; n++) {
        const xorb = { ...xorbRecord(`${n}`, 1), chunks };
        xorbHashes.push(xorb.hash);
        await store.putXorb(xorb);
        if (n % 10 === 0) assert.equal((await reader.getXorbs([xorb.hash])).size, 1);
        largestWal = Math.max(largestWal, walSize(store));
      }
      assert.ok(largestWal <= JOURNAL_SIZE_LIMIT_BYTES, `the WAL reached ${largestWal} bytes under sustained writes`);

      // One registration larger than the limit (500 files of 1,000 terms, ~22 MB) must grow
      // the WAL past it; the next write after the automatic checkpoint truncates it back.
      const repo = await store.createRepo("model", "alice/wal");
      const terms = Array.from({ length: 1000 }, (_, k) => ({ xorbHash: xorbHashes[k % 300], chunkStart: k, chunkEnd: k + 1, unpackedLength: 65_536 }));
      const files: FileRecord[] = Array.from({ length: 500 }, (_, f) => ({ hash: hashOf(`file ${f}`), size: 1000 * 65_536, terms, sha256: null }));
      await store.registerShard({ shardHash: hashOf("oversized shard"), repoId: repo.id, files, dedupEntries: [] });
      assert.ok(walSize(store) > JOURNAL_SIZE_LIMIT_BYTES, "precondition: the registration outgrew the limit");
      assert.ok(await reader.getFile(files[499].hash));
      await store.putXorb(xorbRecord("after the checkpoint", 1));
      assert.ok(walSize(store) <= JOURNAL_SIZE_LIMIT_BYTES, `the WAL stayed at ${walSize(store)} bytes`);
    } finally {
      await reader.close();
      await store.close();
      await removeTempDir(root);
    }
  });

  it("with background checkpoints (a server), a thread checkpoints the log that commits only append to", async () => {
    const root = await tempDir();
    const connection = new SqliteConnection(join(root, METADATA_FILE_NAME), true);
    const walSizeNow = () => statSync(`${connection.path}-wal`).size;
    try {
      assert.equal(connection.db.pragma("wal_autocheckpoint", { simple: true }), BACKSTOP_CHECKPOINT_PAGES);
      connection.db.exec("CREATE TABLE filler (n INTEGER PRIMARY KEY, bytes BLOB NOT NULL)");
      const insert = connection.db.prepare<[number, Buffer]>("INSERT INTO filler (n, bytes) VALUES (?, ?)");
      // ~24 MiB in 300 commits: past SQLite's default of 1,000 pages many times over, far below
      // the connection's own backstop (BACKSTOP_CHECKPOINT_PAGES, 64 MiB).
      const bytes = Buffer.alloc(80_000, 7);
      const outcomes: CheckpointOutcome[] = [];
      const firstCheckpoint = connection.checkpointer!.nextCheckpoint();
      for (let n = 0; n < 300; n++) await connection.write(() => insert.run(n, bytes));
      outcomes.push(await within(firstCheckpoint, "the thread's first checkpoint", 30_000));
      assert.ok(walSizeNow() > JOURNAL_SIZE_LIMIT_BYTES, "precondition: the log outgrew journal_size_limit");
      // Once the thread has copied the whole log back, the next commit starts the log over and
      // journal_size_limit cuts the file back. The thread's reports can trail the commits (one
      // made while they went on arrives after them), so small commits follow, each awaiting the
      // thread's next report, until one finds the log wholly copied. Only the thread copies:
      // the backstop is never reached.
      const small = Buffer.alloc(100, 7);
      for (let n = 300; walSizeNow() > JOURNAL_SIZE_LIMIT_BYTES; n++) {
        assert.ok(n < 400, `the WAL stayed at ${walSizeNow()} bytes after ${n - 300} more commits; the thread reported ${JSON.stringify(outcomes.slice(-3))}`);
        const next = connection.checkpointer!.nextCheckpoint();
        await connection.write(() => insert.run(n, small));
        outcomes.push(await within(next, "the thread's next checkpoint", 30_000));
      }
      assert.ok(
        outcomes.some((outcome) => outcome.checkpointed > 0),
        `the thread copied back nothing: ${JSON.stringify(outcomes)}`,
      );
    } finally {
      await connection.close();
      await removeTempDir(root);
    }
    assert.equal(connection.db.open, false);
  });

  it("lets exactly one of several processes racing on the same file insert each xorb", async () => {
    const root = await tempDir();
    const store = await SqliteMetadataStore.open(root);
    const children = 2;
    const xorbCount = 40;
    // Each child opens its own store, says "ready", waits for "go" (sent once all are ready, so
    // they really race), then puts the same xorbs in its own order and prints what it was told.
    // This process races too, through its own store, in a third order.
    const code = `
      const { SqliteMetadataStore } = await import(process.env.STORE_MODULE);
      const store = await SqliteMetadataStore.open(process.env.STORE_ROOT);
      const index = Number(process.env.RACER_INDEX), count = Number(process.env.XORB_COUNT);
      process.stdout.write("ready\\n");
      await new Promise((resolve) => process.stdin.once("data", resolve));
      const inserted = {};
      for (let i = 0; i < count; i++) {
        const n = (index % 2 === 0 ? i + index * 13 : count - 1 - i) % count;
        const hash = new Uint8Array(32);
        new DataView(hash.buffer).setUint32(0, 77);
        new DataView(hash.buffer).setUint32(4, n);
        const chunks = [{ hash: hash.map((b) => b ^ 0xff), uncompressedLength: 10, serializedEnd: 18 }];
        inserted[n] = await store.putXorb({ hash, serializedLength: 18, uncompressedLength: 10, chunks });
      }
      await store.close();
      process.stdout.write(JSON.stringify(inserted) + "\\n");
      process.stdin.destroy();
    `;
    const xorbHash = (n: number): Hash => {
      const hash = new Uint8Array(32);
      new DataView(hash.buffer).setUint32(0, 77);
      new DataView(hash.buffer).setUint32(4, n);
      return hash;
    };
    const racers = Array.from({ length: children }, (_, index) => {
      const child = spawn(process.execPath, ["--import", import.meta.resolve("tsx"), "--input-type=module", "-e", code], {
        env: {
          ...process.env,
          STORE_MODULE: new URL("../../src/metadata/sqlite.ts", import.meta.url).href,
          STORE_ROOT: root,
          RACER_INDEX: String(index),
          XORB_COUNT: String(xorbCount),
        },
        stdio: ["pipe", "pipe", "inherit"],
      });
      let output = "";
      child.stdout.setEncoding("utf8");
      const ready = new Promise<void>((resolve) => {
        child.stdout.on("data", (text: string) => {
          output += text;
          if (output.startsWith("ready\n")) resolve();
        });
      });
      const done = new Promise<Record<number, boolean>>((resolve, reject) => {
        child.once("error", reject);
        child.once("exit", (status) => {
          if (status !== 0) reject(new Error(`racer ${index} exited with ${status}: ${output}`));
          else resolve(JSON.parse(output.slice("ready\n".length)));
        });
      });
      return { child, ready, done };
    });
    try {
      await Promise.all(racers.map((racer) => racer.ready));
      for (const racer of racers) racer.child.stdin.write("go\n");
      const own: Record<number, boolean> = {};
      for (let i = 0; i < xorbCount; i++) {
        const n = (i * 7 + 5) % xorbCount;
        const hash = xorbHash(n);
        const chunks = [{ hash: hash.map((b) => b ^ 0xff), uncompressedLength: 10, serializedEnd: 18 }];
        own[n] = await store.putXorb({ hash, serializedLength: 18, uncompressedLength: 10, chunks });
      }
      const results = [own, ...(await Promise.all(racers.map((racer) => racer.done)))];
      for (let n = 0; n < xorbCount; n++) {
        assert.ok(
          results.every((r) => typeof r[n] === "boolean"),
          `every racer put xorb ${n}`,
        );
        const winners = results.filter((r) => r[n]).length;
        assert.equal(winners, 1, `xorb ${n}: ${winners} racers were told they inserted it`);
      }
      assert.equal((await store.getXorbs(Array.from({ length: xorbCount }, (_, n) => xorbHash(n)))).size, xorbCount);
    } finally {
      for (const racer of racers) racer.child.kill();
      await store.close();
      await removeTempDir(root);
    }
  });
});

describe("openMetadataStore", () => {
  it("opens SQLite in the data folder when no database URL is set", async () => {
    await withTempDir("castor-sqlite-", async (root) => {
      const store = await openMetadataStore(loadConfig({ CASTOR_DATA_DIR: root }));
      try {
        assert.ok(store instanceof SqliteMetadataStore);
        assert.equal(store.path, join(root, METADATA_FILE_NAME));
        await store.createRepo("model", "alice/bert");
      } finally {
        await store.close();
      }
    });
  });

  it("opens PostgreSQL (not SQLite) for a postgres:// URL, naming the server but never the password", async () => {
    const config = loadConfig({ CASTOR_DATABASE_URL: "postgres://castor:s3cret-pw@127.0.0.1:1/castor" });
    await assert.rejects(openMetadataStore(config), (err: unknown) => {
      assert.ok(err instanceof PostgresConnectionError, String(err));
      assert.match(err.message, /127\.0\.0\.1:1/);
      assert.doesNotMatch(err.message, /s3cret-pw/);
      return true;
    });
  });
});
