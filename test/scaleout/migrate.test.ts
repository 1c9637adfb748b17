/**
 * `castor migrate` into the scale-out stores: a real embedded data dir (castor's client against
 * an embedded server) copied into a fresh PostgreSQL database and S3 prefix on Ceph RGW, then a
 * scale-out node started with the carried keys serves every file, byte-exact, to the OLD hub
 * tokens, and accepts the old server's CAS token and transfer URL. A second run copies nothing.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { PostgresMetadataStore } from "../../src/metadata/postgres.js";
import { openFsBlobStore } from "../../src/storage/fs.js";
import { openS3BlobStore } from "../../src/storage/s3.js";
import { buildEmbeddedDataDir, carriedKeys, checkMigratedServer, copiedColumn, type EmbeddedDataDir } from "../cli/migrate-fixture.js";
import { runCastor } from "../helpers/cli.js";
import { createTestDatabase, requireTestDatabaseUrl, type TestDatabase } from "../helpers/scaleout-postgres.js";
import { s3ServerSettings, s3TestConfig, s3TestEnv } from "../helpers/scaleout-s3.js";
import { startCastorServer } from "../helpers/server.js";

// Fail the whole file, with the way to start the services, when they are not running.
requireTestDatabaseUrl();
const s3Env = s3TestEnv();

async function collect(keys: AsyncIterable<string>): Promise<string[]> {
  const out: string[] = [];
  for await (const key of keys) out.push(key);
  return out;
}

describe("castor migrate: embedded data dir → PostgreSQL + S3 (Ceph RGW)", () => {
  let source: EmbeddedDataDir;
  let database: TestDatabase;
  let s3: ReturnType<typeof s3ServerSettings>;
  let workDir: string;

  before(async () => {
    source = await buildEmbeddedDataDir();
    database = await createTestDatabase();
    s3 = s3ServerSettings(s3Env);
    workDir = await mkdtemp(join(tmpdir(), "castor-migrate-scaleout-"));
  });

  after(async () => {
    await source?.remove();
    await s3?.cleanup();
    await database?.drop();
    if (workDir) await rm(workDir, { recursive: true, force: true });
  });

  it("copies everything; a scale-out node with the carried keys serves every file to the old hub tokens; a second run copies nothing", async () => {
    // The target numbers repositories its own way: one is there already.
    const target = await PostgresMetadataStore.open(database.url);
    try {
      await target.createRepo("model", "zed/already-here");
    } finally {
      await target.close();
    }
    const targetEnv = { CASTOR_DATABASE_URL: database.url, ...s3.env };
    // Run from an empty folder: the migration needs no local data dir of its own.
    const cwd = join(workDir, "cwd");
    await mkdir(cwd);
    const first = await runCastor(["migrate", "--from", source.dataDir], { env: targetEnv, cwd, timeoutMs: 120_000 });
    assert.equal(first.code, 0, first.stderr);
    assert.match(
      first.stderr,
      new RegExp(
        `^castor migrate: copying ${source.dataDir} into PostgreSQL 127\\.0\\.0\\.1:\\d+/${database.name} and S3 bucket ${s3Env.bucket} \\(prefix ${s3.prefix}\\) at ${s3Env.endpoint}`,
        "m",
      ),
    );
    const copied = copiedColumn(first.stdout);
    for (const [step, count] of copied) assert.ok(count > 0, `${step} copied something`);
    assert.deepEqual(await readdir(cwd), [], "nothing is written to the working folder");
    assert.doesNotMatch(first.stdout + first.stderr, /postgres:\/\/[^ ]*@/, "the database URL's credentials are never printed");

    // The bucket holds exactly the source's objects, the database the source's rows.
    const sourceBlobs = await openFsBlobStore(join(source.dataDir, "blobs"));
    const targetBlobs = await openS3BlobStore({ ...s3TestConfig(s3.prefix, s3Env), stagingDir: join(workDir, "staging") });
    try {
      assert.deepEqual(await collect(targetBlobs.list()), await collect(sourceBlobs.list()));
    } finally {
      targetBlobs.close();
    }
    const sourceMetadata = await SqliteMetadataStore.open(source.dataDir);
    const targetMetadata = await PostgresMetadataStore.open(database.url);
    try {
      const names = async (store: SqliteMetadataStore | PostgresMetadataStore) => (await store.listRepos()).map((repo) => `${repo.type}:${repo.name}`);
      assert.deepEqual(await names(targetMetadata), ["model:zed/already-here", ...(await names(sourceMetadata))]);
      assert.deepEqual(
        (await targetMetadata.listHubTokens()).map((token) => token.secretHash),
        (await sourceMetadata.listHubTokens()).map((token) => token.secretHash),
      );
      assert.deepEqual((await targetMetadata.scanDedupEntries(null, 10_000)).rows, (await sourceMetadata.scanDedupEntries(null, 10_000)).rows);
      assert.deepEqual(await targetMetadata.listStatsSamples(), await sourceMetadata.listStatsSamples());
      // Histories, visibility and token owners, with repository ids as names (each store numbers its own).
      const hubRows = async (store: SqliteMetadataStore | PostgresMetadataStore) => {
        const repos = (await store.listRepos()).filter((repo) => repo.name !== "zed/already-here");
        const names = new Map(repos.map((repo) => [repo.id, `${repo.type}:${repo.name}`]));
        const named = <T extends { repoId: number }>(rows: T[]) => rows.map((row) => ({ ...row, repoId: names.get(row.repoId) }));
        return {
          repos: repos.map((repo) => ({ ...repo, id: undefined })),
          revisions: named((await Promise.all(repos.map((repo) => store.listRevisions(repo.id)))).flat()),
          commits: named((await store.scanCommits(null, 10_000)).rows),
          trees: named((await store.scanTrees(null, 10_000)).rows),
          tokens: (await store.listHubTokens()).map((token) => ({ ...token, repos: token.repos === "all" ? "all" : token.repos.map((id) => names.get(id)) })),
        };
      };
      const sourceHub = await hubRows(sourceMetadata);
      assert.deepEqual(await hubRows(targetMetadata), sourceHub);
      assert.equal(sourceHub.commits.length, 3, "the fixture has a history to copy: each repository's initial commit and the fixture's commit");
    } finally {
      await sourceMetadata.close();
      await targetMetadata.close();
    }

    const node = await startCastorServer({ env: { ...targetEnv, ...(await carriedKeys(source.dataDir)) } });
    try {
      await checkMigratedServer(source, node.url);
    } finally {
      await node.stop();
    }

    const again = await runCastor(["migrate", "--from", source.dataDir], { env: targetEnv, cwd, timeoutMs: 120_000 });
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual(
      [...copiedColumn(again.stdout).values()].filter((count) => count !== 0),
      [],
      "a second run copies nothing",
    );
    assert.match(again.stdout, /Nothing new to copy/);
  });
});
