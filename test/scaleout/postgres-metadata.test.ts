/**
 * PostgresMetadataStore against a real PostgreSQL (CASTOR_TEST_DATABASE_URL, started by
 * scripts/services/postgres.sh): the shared MetadataStore contract, then what only a shared
 * server adds — concurrent migrations, registrations racing from two nodes, damaged rows.
 * Every fixture gets a fresh database, dropped afterwards.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { loadConfig } from "../../src/config.js";
import { hashToHex } from "../../src/format/hash.js";
import type { ShardRegistration } from "../../src/metadata/cas.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import { MetadataUnavailableError } from "../../src/metadata/errors.js";
import { MIGRATIONS, PostgresConnectionError, PostgresMetadataStore, PostgresSchemaError } from "../../src/metadata/postgres.js";
import { PostgresConnection } from "../../src/metadata/postgres/connection.js";
import { CorruptRecordError } from "../../src/metadata/store.js";
import { runMetadataStoreContract } from "../contract/metadata-store.js";
import { PRE_HISTORY_ROWS, checkUpgradedFromBeforeHistories } from "../contract/schema-upgrade.js";
import { fileRecord, hashOf, oidOf, xorbRecord } from "../helpers/fixtures.js";
import { createTestDatabase, requireTestDatabaseUrl, type TestDatabase } from "../helpers/scaleout-postgres.js";

// Fails the whole file, with instructions, when no PostgreSQL is configured.
const adminUrl = requireTestDatabaseUrl();

runMetadataStoreContract("PostgreSQL", async () => {
  const database = await createTestDatabase(adminUrl);
  try {
    return {
      store: await PostgresMetadataStore.open(database.url),
      reopen: () => PostgresMetadataStore.open(database.url),
      cleanup: () => database.drop(),
    };
  } catch (err) {
    await database.drop();
    throw err;
  }
});

/** Runs `body` with a fresh database and a plain client on it, dropping both afterwards. */
async function withDatabase(body: (database: TestDatabase, sql: pg.Client) => Promise<void>): Promise<void> {
  const database = await createTestDatabase(adminUrl);
  const sql = new pg.Client({ connectionString: database.url });
  try {
    await sql.connect();
    await body(database, sql);
  } finally {
    await sql.end().catch(() => undefined);
    await database.drop();
  }
}

/** Opens `count` stores on one database at once; all are closed when `body` ends. */
async function withStores(database: TestDatabase, count: number, body: (stores: PostgresMetadataStore[]) => Promise<void>): Promise<void> {
  const opened = await Promise.allSettled(Array.from({ length: count }, () => PostgresMetadataStore.open(database.url)));
  const stores = opened.flatMap((result) => (result.status === "fulfilled" ? [result.value] : []));
  try {
    for (const result of opened) if (result.status === "rejected") throw result.reason;
    await body(stores);
  } finally {
    for (const store of stores) await store.close();
  }
}

async function tableNames(sql: pg.Client): Promise<string[]> {
  const { rows } = await sql.query<{ tablename: string }>("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename");
  return rows.map((row) => row.tablename);
}

async function schemaVersion(sql: pg.Client): Promise<number> {
  return (await sql.query<{ version: number }>("SELECT version FROM castor_schema")).rows[0].version;
}

describe("PostgresMetadataStore specifics", () => {
  describe("migrations", () => {
    it("creates the schema at the latest version; opening again changes nothing", async () => {
      await withDatabase(async (database, sql) => {
        await withStores(database, 1, async () => undefined);
        assert.equal(await schemaVersion(sql), MIGRATIONS.length);
        const tables = await tableNames(sql);
        for (const table of [
          "repos",
          "revisions",
          "hub_tokens",
          "hub_token_repos",
          "xorbs",
          "files",
          "file_repos",
          "file_sha256",
          "shards",
          "dedup_chunks",
          "commits",
          "trees",
          "stats_samples",
        ]) {
          assert.ok(tables.includes(table), `table ${table} exists`);
        }

        await withStores(database, 1, async ([store]) => {
          const repo = await store.createRepo("model", "alice/kept");
          await store.ping();
          assert.deepEqual(await store.listRepos(), [repo]);
        });
        await withStores(database, 1, async ([store]) => {
          assert.equal((await store.listRepos()).length, 1, "a second start keeps the data");
        });
        assert.equal(await schemaVersion(sql), MIGRATIONS.length);
        assert.deepEqual(await tableNames(sql), tables);
      });
    });

    it("upgrades a database of schema version 1 (before histories): repositories private, revisions at no commit, tokens without owner", async () => {
      await withDatabase(async (database, sql) => {
        await sql.query("CREATE TABLE castor_schema (one boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)");
        await sql.query("INSERT INTO castor_schema (version) VALUES (1)");
        await sql.query(MIGRATIONS[0]);
        await sql.query(
          "INSERT INTO repos (type, name, created_at) VALUES ('model', 'alice/old', to_timestamp(1)), ('dataset', 'alice/newest', to_timestamp(2))",
        );
        const ids = (await sql.query<{ id: string }>("SELECT id FROM repos ORDER BY id")).rows.map((row) => Number(row.id));
        await sql.query(
          "INSERT INTO revisions (repo_id, name, kind, created_at) VALUES ($1, 'main', 'branch', to_timestamp(1)), ($1, 'v1', 'tag', to_timestamp(1.5)), ($2, 'main', 'branch', to_timestamp(2))",
          ids,
        );
        await sql.query("INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at) VALUES ('tok_old', $1, 'write', false, to_timestamp(3))", [
          PRE_HISTORY_ROWS.tokenSecretHash,
        ]);
        await sql.query("INSERT INTO hub_token_repos (token_id, repo_id) VALUES ('tok_old', $1), ('tok_old', $2)", ids);

        await withStores(database, 1, async ([store]) => {
          assert.equal(await schemaVersion(sql), MIGRATIONS.length);
          await checkUpgradedFromBeforeHistories(store, [ids[0], ids[1]]);
        });
        const tables = await tableNames(sql);
        for (const table of ["commits", "trees"]) assert.ok(tables.includes(table), `table ${table} exists`);
      });
    });

    it("upgrades a database whose storage samples had no unique bytes: they read as null, new samples record them", async () => {
      await withDatabase(async (database, sql) => {
        await sql.query("CREATE TABLE castor_schema (one boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)");
        // The version before the migration that added unique_bytes.
        const before = 6;
        await sql.query("INSERT INTO castor_schema (version) VALUES ($1)", [before]);
        for (const migration of MIGRATIONS.slice(0, before)) await sql.query(migration);
        await sql.query("INSERT INTO stats_samples VALUES ('2030-01-01', to_timestamp(1), 1, 2, 300, 100, 1, 3, 1, 10, 1, 90, 3)");

        await withStores(database, 1, async ([store]) => {
          assert.equal(await schemaVersion(sql), MIGRATIONS.length);
          const [old] = await store.listStatsSamples();
          assert.deepEqual([old.day, old.logicalBytes, old.storedBytes, old.uniqueBytes], ["2030-01-01", 300, 100, null]);
          await store.recordStatsSample({ ...old, day: "2030-01-02", uniqueBytes: 150 });
          assert.deepEqual(
            (await store.listStatsSamples()).map((sample) => sample.uniqueBytes),
            [null, 150],
          );
        });
      });
    });

    it("upgrades a database whose SHA-256 index was indexed by file: entries kept and answered, the collector still deletes them", async () => {
      const [file, digest] = [hashOf("file before the upgrade"), hashOf("digest before the upgrade")];
      await withDatabase(async (database, sql) => {
        await sql.query("CREATE TABLE castor_schema (one boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)");
        // The version before the migration that dropped the index by file.
        const before = 5;
        await sql.query("INSERT INTO castor_schema (version) VALUES ($1)", [before]);
        for (const migration of MIGRATIONS.slice(0, before)) await sql.query(migration);
        const id = Number(
          (await sql.query<{ id: string }>("INSERT INTO repos (type, name, created_at) VALUES ('model', 'alice/old', now()) RETURNING id")).rows[0].id,
        );
        await sql.query("INSERT INTO files (hash, size, sha256, created_at, terms) VALUES ($1, 0, $2, now() - interval '1 hour', ''::bytea)", [file, digest]);
        await sql.query("INSERT INTO file_repos (file_hash, repo_id) VALUES ($1, $2)", [file, id]);
        await sql.query("INSERT INTO file_sha256 (repo_id, sha256, file_hash) VALUES ($1, $2, $3)", [id, digest, file]);

        await withStores(database, 1, async ([store]) => {
          assert.equal(await schemaVersion(sql), MIGRATIONS.length);
          assert.equal(hashToHex((await store.findFileBySha256(id, digest))!), hashToHex(file));
          assert.equal((await sql.query("SELECT 1 FROM pg_indexes WHERE indexname = 'file_sha256_by_file'")).rowCount, 0);
          assert.equal((await store.deleteFiles([file], new Date())).length, 1);
          assert.equal(Number((await sql.query<{ n: string }>("SELECT count(*) AS n FROM file_sha256")).rows[0].n), 0);
        });
      });
    });

    it("lets four nodes open a fresh database at the same moment", async () => {
      await withDatabase(async (database, sql) => {
        await withStores(database, 4, async (stores) => {
          assert.equal(await schemaVersion(sql), MIGRATIONS.length);
          const repos = await Promise.all(stores.map((store, i) => store.createRepo("model", `alice/node-${i}`)));
          const inCreationOrder = [...repos].sort((a, b) => a.id - b.id);
          for (const store of stores) assert.deepEqual(await store.listRepos(), inCreationOrder);
        });
      });
    });

    it("refuses a database migrated by a newer castor, naming the fix", async () => {
      await withDatabase(async (database, sql) => {
        await withStores(database, 1, async () => undefined);
        await sql.query("UPDATE castor_schema SET version = $1", [MIGRATIONS.length + 1]);
        await assert.rejects(PostgresMetadataStore.open(database.url), (err: unknown) => {
          assert.ok(err instanceof PostgresSchemaError);
          assert.match(err.message, new RegExp(`schema version ${MIGRATIONS.length + 1}.*upgrade castor`));
          assert.ok(err.message.includes(database.name), "the message names the database");
          return true;
        });
      });
    });
  });

  describe("two nodes writing at once", () => {
    it("moves branches from four nodes at once: one winner per head, no deadlock on shared trees", async () => {
      await withDatabase(async (database) => {
        await withStores(database, 4, async (stores) => {
          const emptyTree = { oid: oidOf("empty"), entries: [] };
          const commitOf = (label: string, treeOid: string, parents: string[]) => ({
            oid: oidOf(label),
            treeOid,
            parentOids: parents,
            title: label,
            message: `${label}\n`,
            author: "alice",
            createdAt: new Date(1_767_225_600_000),
            object: label,
          });
          const initial = commitOf("initial", emptyTree.oid, []);
          const repo = await stores[0].createRepo("model", "alice/raced", { private: false, commit: initial, tree: emptyTree });
          for (const branch of ["b0", "b1", "b2", "b3"]) await stores[0].createRevision(repo.id, branch, "branch", initial.oid);
          const heads = new Map([
            ["main", initial.oid],
            ["b0", initial.oid],
            ["b1", initial.oid],
            ["b2", initial.oid],
            ["b3", initial.oid],
          ]);
          for (let round = 0; round < 5; round++) {
            // Each node advances main (one wins) and its own branch (all win); the trees new in
            // this round are shared by every advance, listed in a different order by each node.
            const shared = Array.from({ length: 20 }, (_, i) => ({
              oid: oidOf(`round ${round} tree ${i}`),
              entries: [{ type: "directory" as const, name: `d${i}`, oid: oidOf(`sub ${i}`) }],
            }));
            const advances = stores.flatMap((store, node) => {
              const trees = node % 2 === 0 ? shared : [...shared].reverse();
              return ["main", `b${node}`].map((branch) => {
                const commit = commitOf(`round ${round} node ${node} ${branch}`, shared[0].oid, [heads.get(branch)!]);
                return { branch, commit, run: store.advanceBranch({ repoId: repo.id, branch, expectedHead: heads.get(branch)!, commit, trees }) };
              });
            });
            const outcomes = await Promise.all(advances.map((advance) => advance.run));
            const mainWinners = advances.filter((advance, i) => advance.branch === "main" && outcomes[i] === "advanced");
            assert.equal(mainWinners.length, 1, `round ${round}: ${outcomes.join(", ")}`);
            assert.deepEqual(
              outcomes.filter((_outcome, i) => advances[i].branch !== "main"),
              ["advanced", "advanced", "advanced", "advanced"],
            );
            for (const [i, advance] of advances.entries()) if (outcomes[i] === "advanced") heads.set(advance.branch, advance.commit.oid);
            for (const store of stores) {
              for (const [branch, head] of heads) assert.equal((await store.getRevision(repo.id, branch))?.commitOid, head);
            }
            assert.deepEqual(await stores[3].getTree(repo.id, shared[19].oid), shared[19]);
          }
        });
      });
    });

    it("registers the same shard from two nodes at once: exactly one true, no error", async () => {
      await withDatabase(async (database) => {
        await withStores(database, 2, async ([first, second]) => {
          const repo = await first.createRepo("model", "alice/raced");
          const xorb = xorbRecord("raced", 64);
          await first.putXorb(xorb);
          for (let round = 0; round < 5; round++) {
            const files = Array.from({ length: 200 }, (_, i) => fileRecord(`round ${round} file ${i}`, xorb, { terms: 1 + (i % 8) }));
            const registration: ShardRegistration = {
              shardHash: hashOf(`shard ${round}`),
              repoId: repo.id,
              files,
              dedupEntries: xorb.chunks.map((chunk) => ({ chunkHash: chunk.hash, xorbHash: hashOf(`holder ${round}`) })),
            };
            const results = await Promise.all([first.registerShard(registration), second.registerShard(registration)]);
            assert.deepEqual(
              results.filter((isNew) => isNew),
              [true],
              `round ${round}: ${JSON.stringify(results)}`,
            );
            for (const file of [files[0], files[199]]) {
              assert.deepEqual(await second.getFile(file.hash), file);
              assert.deepEqual(await first.findFileBySha256(repo.id, file.sha256!), file.hash);
            }
          }
          const oldestFirst = Array.from({ length: 5 }, (_, round) => hashOf(`holder ${round}`));
          assert.deepEqual(await second.findDedupXorbs(xorb.chunks[10].hash, 10), oldestFirst, "each entry once, oldest first");
        });
      });
    });

    it("registers different shards sharing files and dedup entries in opposite orders without deadlock", async () => {
      await withDatabase(async (database) => {
        await withStores(database, 2, async ([first, second]) => {
          const repoA = await first.createRepo("model", "alice/a");
          const repoB = await first.createRepo("model", "bob/b");
          const xorb = xorbRecord("shared", 32);
          await first.putXorb(xorb);
          const files = Array.from({ length: 500 }, (_, i) => fileRecord(`shared ${i}`, xorb, { terms: 2 }));
          const entries = Array.from({ length: 2_000 }, (_, i) => ({ chunkHash: hashOf(`chunk ${i}`), xorbHash: xorb.hash }));
          const forward: ShardRegistration = { shardHash: hashOf("forward"), repoId: repoA.id, files, dedupEntries: entries };
          const backward: ShardRegistration = {
            shardHash: hashOf("backward"),
            repoId: repoB.id,
            files: [...files].reverse(),
            dedupEntries: [...entries].reverse(),
          };
          assert.deepEqual(await Promise.all([first.registerShard(forward), second.registerShard(backward)]), [true, true]);
          for (const file of [files[0], files[250], files[499]]) {
            assert.equal(await first.isFileInRepo(file.hash, repoA.id), true);
            assert.equal(await first.isFileInRepo(file.hash, repoB.id), true);
          }
          assert.deepEqual(await second.findDedupXorbs(entries[1_234].chunkHash, 5), [xorb.hash]);
        });
      });
    });

    it("shows a 10,000-file registration on one node to the other, which repeats it as not new", async (t) => {
      await withDatabase(async (database) => {
        await withStores(database, 2, async ([first, second]) => {
          const repoA = await first.createRepo("model", "alice/large");
          const repoB = await second.createRepo("model", "bob/large");
          const xorbs = Array.from({ length: 20 }, (_, i) => xorbRecord(`large ${i}`, 64));
          const files = Array.from({ length: 10_000 }, (_, i) => fileRecord(`large ${i}`, xorbs[i % 20], { terms: 1 + (i % 16) }));
          const dedupEntries = xorbs.flatMap((xorb) => xorb.chunks.map((chunk) => ({ chunkHash: chunk.hash, xorbHash: xorb.hash })));
          const registration: ShardRegistration = { shardHash: hashOf("large"), repoId: repoA.id, files, dedupEntries };

          let started = performance.now();
          assert.equal(await first.registerShard(registration), true);
          t.diagnostic(`10,000 files (85,000 terms) + ${dedupEntries.length} dedup entries, new: ${(performance.now() - started).toFixed(0)} ms`);
          started = performance.now();
          assert.equal(await second.registerShard({ ...registration, repoId: repoB.id }), false);
          t.diagnostic(`the same registration again from another node and repository: ${(performance.now() - started).toFixed(0)} ms`);

          for (const i of [0, 3_333, 9_999]) {
            assert.deepEqual(await second.getFile(files[i].hash), files[i]);
            assert.equal(await first.isFileInRepo(files[i].hash, repoB.id), true);
            assert.deepEqual(await first.findFileBySha256(repoB.id, files[i].sha256!), files[i].hash);
          }
        });
      });
    });
  });

  describe("damaged rows and bad settings", () => {
    it("refuses stored integers beyond 2^53 and damaged tables with CorruptRecordError", async () => {
      await withDatabase(async (database, sql) => {
        await withStores(database, 1, async ([store]) => {
          const xorb = xorbRecord("damaged", 3);
          await store.putXorb(xorb);
          await sql.query("UPDATE xorbs SET serialized_length = 9007199254740993");
          await assert.rejects(store.getXorbSize(xorb.hash), (err: unknown) => {
            assert.ok(err instanceof CorruptRecordError);
            assert.match(err.message, /9007199254740993.*damaged/);
            return true;
          });
          // The schema's checks refuse such rows, so damage them the way a broken disk would: past the checks.
          await sql.query("ALTER TABLE xorbs DROP CONSTRAINT xorbs_chunks_check");
          await sql.query("UPDATE xorbs SET serialized_length = 5, chunks = '\\x00'::bytea || chunks");
          await assert.rejects(store.getXorbs([xorb.hash]), CorruptRecordError, "a chunk table that is not whole records");

          const repo = await store.createRepo("model", "alice/damaged");
          const file = fileRecord("damaged", xorb, { terms: 2 });
          await store.registerShard({ shardHash: hashOf("damaged shard"), repoId: repo.id, files: [file], dedupEntries: [] });
          await sql.query("ALTER TABLE files DROP CONSTRAINT files_terms_check");
          await sql.query("UPDATE files SET terms = substring(terms FROM 2)");
          await assert.rejects(store.getFile(file.hash), (err: unknown) => {
            assert.ok(err instanceof CorruptRecordError);
            assert.ok(err.message.includes(hashToHex(file.hash)), "the message names the file");
            return true;
          });
          await store.ping();
        });
      });
    });

    it("names the server and never the password when it cannot connect", async () => {
      const url = "postgres://castor:s3cret-password@127.0.0.1:1/castor";
      await assert.rejects(PostgresMetadataStore.open(url, { connectTimeoutMs: 2_000 }), (err: unknown) => {
        assert.ok(err instanceof PostgresConnectionError);
        assert.match(err.message, /127\.0\.0\.1:1\/castor.*CASTOR_DATABASE_URL/);
        assert.ok(!err.message.includes("s3cret"), "the password stays out of the message");
        return true;
      });
    });

    it("refuses a pool size that is not a positive integer", async () => {
      for (const poolSize of [0, -1, 2.5]) {
        await assert.rejects(PostgresMetadataStore.open(adminUrl, { poolSize }), RangeError);
      }
    });

    it("holds at most poolSize connections however many calls run at once", async () => {
      await withDatabase(async (database, sql) => {
        const store = await PostgresMetadataStore.open(database.url, { poolSize: 3 });
        try {
          assert.equal(store.poolSize, 3);
          await Promise.all(Array.from({ length: 30 }, (_, i) => store.createRepo("model", `alice/pool-${i}`)));
          const { rows } = await sql.query<{ connections: number }>(
            "SELECT count(*)::integer AS connections FROM pg_stat_activity WHERE datname = $1 AND application_name = 'castor'",
            [database.name],
          );
          assert.ok(rows[0].connections >= 1 && rows[0].connections <= 3, `${rows[0].connections} connections`);
          assert.equal((await store.listRepos()).length, 30);
        } finally {
          await store.close();
        }
      });
    });
  });

  describe("sessions the server ends (a restart, pg_terminate_backend)", () => {
    it("fails a transaction whose session ends between two statements as unavailable, without ending the process; the pool carries on", {
      timeout: 20_000,
    }, async () => {
      await withDatabase(async (database, sql) => {
        const connection = await PostgresConnection.open(database.url);
        try {
          const transaction = connection.inTransaction(async (client) => {
            const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
            // Not events.once, which would listen to 'error' itself.
            const ended = new Promise((resolve) => client.once("end", resolve));
            await sql.query("SELECT pg_terminate_backend($1)", [rows[0].pid]);
            // No statement runs when the session ends, as while a registration waits on the blob
            // store: pg reports it as an 'error' event of the connection, which must not go unheard.
            await ended;
            await connection.queryOn(client, "afterTerminate", "SELECT 1", []);
          });
          await assert.rejects(transaction, (err: unknown) => {
            assert.ok(err instanceof MetadataUnavailableError, String(err));
            assert.ok(err.message.startsWith("the PostgreSQL database ") && err.message.includes(`/${database.name} is unavailable: `), err.message);
            return true;
          });
          const { rows } = await connection.query<{ one: number }>("afterReconnect", "SELECT 1 AS one", []);
          assert.equal(rows[0].one, 1, "a new connection serves the next statement");
        } finally {
          await connection.close();
        }
      });
    });
  });

  describe("openMetadataStore", () => {
    it("opens PostgreSQL when CASTOR_DATABASE_URL is set", async () => {
      await withDatabase(async (database) => {
        const store = await openMetadataStore(loadConfig({ CASTOR_DATABASE_URL: database.url }));
        try {
          assert.ok(store instanceof PostgresMetadataStore);
          const repo = await store.createRepo("dataset", "alice/configured");
          assert.deepEqual(await store.getRepo("dataset", "alice/configured"), repo);
        } finally {
          await store.close();
          await store.close();
        }
      });
    });
  });
});
