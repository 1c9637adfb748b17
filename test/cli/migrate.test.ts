/**
 * `castor migrate` without external services: from a real embedded data dir into another
 * embedded one (SQLite + files), which exercises the same copy as the scale-out target does
 * (test/scaleout/migrate.test.ts runs it into PostgreSQL + S3): the refusals, a complete copy
 * that a server with the carried keys serves to the old tokens, a repeat that copies nothing,
 * interrupted runs completed without duplicates, and a damaged source.
 */
import assert from "node:assert/strict";
import { cp, mkdtemp, readdir, rm, unlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { migrateStores, MigrationSourceError, type MigrationSource, type MigrationTarget } from "../../src/ops/migrate.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import type { MetadataStore } from "../../src/metadata/store.js";
import { blobKeyFromHex, type BlobStore } from "../../src/storage/blob-store.js";
import { openFsBlobStore } from "../../src/storage/fs.js";
import { runCastor, type CliResult } from "../helpers/cli.js";
import { startCastorServer } from "../helpers/server.js";
import { buildEmbeddedDataDir, carriedKeys, checkMigratedServer, copiedColumn, type EmbeddedDataDir } from "./migrate-fixture.js";

/** Exit code 2 with a one-line `castor migrate:` message and no stack trace. */
function assertUsageError(result: CliResult, message: RegExp): void {
  assert.equal(result.code, 2, `expected exit 2, got ${result.code}; stderr: ${result.stderr}`);
  assert.match(result.stderr, /^castor migrate: /);
  assert.match(result.stderr, message);
  assert.doesNotMatch(result.stderr, /\n\s+at /, "no stack trace");
}

async function openSource(dataDir: string): Promise<MigrationSource & { close(): Promise<void> }> {
  const metadata = await SqliteMetadataStore.open(dataDir);
  return { metadata, blobs: await openFsBlobStore(join(dataDir, "blobs")), close: () => metadata.close() };
}

async function openTarget(dataDir: string): Promise<MigrationTarget & { close(): Promise<void> }> {
  const metadata = await SqliteMetadataStore.open(dataDir);
  return { metadata, blobs: await openFsBlobStore(join(dataDir, "blobs")), close: () => metadata.close() };
}

/** `object` with `method` failing on its `failAt`-th call (1-based); other calls pass through. */
function failingOn<T extends object>(object: T, method: keyof T & string, failAt: number): T {
  let calls = 0;
  return new Proxy(object, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      if (property !== method) return value.bind(target);
      return (...args: unknown[]) => {
        calls++;
        if (calls === failAt) {
          for (const arg of args) if (arg instanceof Readable) arg.destroy();
          return Promise.reject(new Error(`simulated interruption in ${method}`));
        }
        return value.apply(target, args);
      };
    },
  });
}

async function text(stream: Readable): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

async function listAll(blobs: BlobStore): Promise<string[]> {
  const keys: string[] = [];
  for await (const key of blobs.list()) keys.push(key);
  return keys;
}

/** Everything of a store that does not involve repository ids, for comparing two stores. */
async function idFreeRows(store: MetadataStore) {
  const all = async <T>(exporter: (after: string | null, limit: number) => Promise<{ rows: T[]; next: string | null }>) => {
    const rows: T[] = [];
    for (let after: string | null = null; ; ) {
      const page = await exporter(after, 10_000);
      rows.push(...page.rows);
      if (page.next === null) return rows;
      after = page.next;
    }
  };
  const repos = await store.listRepos();
  const repoNames = new Map(repos.map((repo) => [repo.id, `${repo.type}:${repo.name}`]));
  return {
    repos: repos.map((repo) => ({ ...repo, id: undefined })),
    revisions: (await Promise.all(repos.map((repo) => store.listRevisions(repo.id)))).flat().map((r) => ({ ...r, repoId: repoNames.get(r.repoId) })),
    commits: (await all((a, n) => store.scanCommits(a, n))).map((c) => ({ ...c, repoId: repoNames.get(c.repoId) })),
    trees: (await all((a, n) => store.scanTrees(a, n))).map((t) => ({ ...t, repoId: repoNames.get(t.repoId) })),
    tokens: (await store.listHubTokens()).map((t) => ({ ...t, repos: t.repos === "all" ? "all" : t.repos.map((id) => repoNames.get(id)) })),
    xorbs: await all((a, n) => store.scanXorbs(a, n)),
    files: await all((a, n) => store.scanFiles(a, n)),
    links: (await all((a, n) => store.scanFileRepoLinks(a, n))).map((l) => ({ ...l, repoId: repoNames.get(l.repoId) })),
    sha256: (await all((a, n) => store.scanSha256Index(a, n))).map((e) => ({ ...e, repoId: repoNames.get(e.repoId) })),
    shards: await all((a, n) => store.scanShards(a, n)),
    dedup: await all((a, n) => store.scanDedupEntries(a, n)),
    statsSamples: await store.listStatsSamples(),
  };
}

describe("castor migrate (embedded data dir → another embedded data dir)", () => {
  let source: EmbeddedDataDir;
  const scratch: string[] = [];
  const scratchDir = async () => {
    const dir = await mkdtemp(join(tmpdir(), "castor-migrate-target-"));
    scratch.push(dir);
    return dir;
  };

  before(async () => {
    source = await buildEmbeddedDataDir();
  });
  after(async () => {
    await source?.remove();
    for (const dir of scratch) await rm(dir, { recursive: true, force: true });
  });

  it("explains itself, and refuses without --from, without a data dir at --from, and when the target is the source itself", async () => {
    const empty = await scratchDir();
    const help = await runCastor(["migrate", "--help"], { env: { CASTOR_DATA_DIR: empty } });
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^Usage: castor migrate --from DATA_DIR\n/);
    assert.match(help.stdout, /CASTOR_DATABASE_URL/);
    assertUsageError(await runCastor(["migrate"], { env: { CASTOR_DATA_DIR: empty } }), /--from DATA_DIR is required/);
    assertUsageError(await runCastor(["migrate", "--from", join(empty, "nope")], { env: { CASTOR_DATA_DIR: empty } }), /does not exist or is not a folder/);
    assertUsageError(
      await runCastor(["migrate", "--from", empty], { env: { CASTOR_DATA_DIR: join(empty, "target") } }),
      /is not a castor data dir: it has no readable metadata\.sqlite/,
    );
    assert.deepEqual(await readdir(empty), [], "nothing is created in a folder that is no data dir");
    const itself = await runCastor(["migrate", "--from", source.dataDir], { env: { CASTOR_DATA_DIR: source.dataDir } });
    assertUsageError(itself, /the target is .* itself \(its metadata \(metadata\.sqlite\) and its objects \(blobs\/\)\): set CASTOR_DATABASE_URL/);
  });

  it("copies everything; a server on the copy with the carried keys serves every file to the old tokens; a repeat copies nothing", async () => {
    const target = join(await scratchDir(), "data");
    const first = await runCastor(["migrate", "--from", source.dataDir], { env: { CASTOR_DATA_DIR: target }, timeoutMs: 60_000 });
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stderr, /^castor migrate: copying .* into SQLite in .* and files in .*blobs/m);
    assert.match(first.stderr, /^castor migrate: xorb objects: \d+ in the source, \d+ copied/m);
    const copied = copiedColumn(first.stdout);
    assert.equal(copied.get("repositories"), 2);
    assert.equal(copied.get("revisions"), 3, "main of each repository and the tag");
    assert.equal(copied.get("hub tokens (secret hashes)"), 5);
    assert.equal(copied.get("inline file objects"), 1);
    assert.equal(copied.get("trees"), 3, "each repository's empty initial tree and the fixture's tree");
    assert.equal(copied.get("commits"), 3, "each repository's initial commit and the fixture's commit");
    assert.equal(copied.get("files"), 4, "the shared file is one file");
    assert.equal(copied.get("file ↔ repository links"), 5, "the shared file is linked to both repositories");
    for (const [step, count] of copied) assert.ok(count > 0, `${step} copied something`);
    assert.match(first.stdout, new RegExp(`CASTOR_SIGNING_KEY_FILE=${join(source.dataDir, "keys", "jwt-signing-key.pem")}`));
    assert.match(first.stdout, new RegExp(`CASTOR_URL_KEY="\\$\\(cat ${join(source.dataDir, "keys", "url-key")}\\)"`));
    assert.match(first.stdout, new RegExp(`CASTOR_DEDUP_KEY_SEED="\\$\\(cat ${join(source.dataDir, "keys", "dedup-key-seed")}\\)"`));
    const keys = await carriedKeys(source.dataDir);
    for (const secret of [keys.CASTOR_URL_KEY, keys.CASTOR_DEDUP_KEY_SEED]) {
      assert.ok(!first.stdout.includes(secret) && !first.stderr.includes(secret), "secrets are never printed");
    }

    // Histories, visibility, token owners and inline objects came along, repository ids mapped.
    const from = await openSource(source.dataDir);
    const to = await openTarget(target);
    try {
      assert.deepEqual(await idFreeRows(to.metadata), await idFreeRows(from.metadata));
      assert.deepEqual(await listAll(to.blobs), await listAll(from.blobs!));
      const bert = (await to.metadata.getRepo("model", "alice/bert"))!;
      const head = (await to.metadata.getRevision(bert.id, "main"))!.commitOid!;
      const commit = (await to.metadata.getCommit(bert.id, head))!;
      assert.equal(commit.title, "Add README");
      const [readme] = (await to.metadata.getTree(bert.id, commit.treeOid))!.entries;
      assert.ok(readme.type === "file" && readme.xetHash === null);
      assert.match(await text(await to.blobs.read(blobKeyFromHex("inline", readme.sha256))), /^# bert\n/);
      assert.equal((await to.metadata.getRepo("dataset", "bob/data"))?.private, false);
    } finally {
      await from.close();
      await to.close();
    }

    const server = await startCastorServer({ dataDir: target, env: keys });
    try {
      await checkMigratedServer(source, server.url);
    } finally {
      await server.stop();
    }

    const again = await runCastor(["migrate", "--from", source.dataDir], { env: { CASTOR_DATA_DIR: target, ...keys }, timeoutMs: 60_000 });
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual(
      [...copiedColumn(again.stdout).values()].filter((n) => n !== 0),
      [],
      "a repeat copies nothing",
    );
    assert.match(again.stdout, /Nothing new to copy/);
    assert.doesNotMatch(again.stdout, /Warning/, "the carried keys match the source's");

    const otherKey = await runCastor(["migrate", "--from", source.dataDir], { env: { CASTOR_DATA_DIR: target, CASTOR_URL_KEY: "x".repeat(40) } });
    assert.equal(otherKey.code, 0, otherKey.stderr);
    assert.match(otherKey.stdout, /Warning: CASTOR_URL_KEY here differs: transfer URLs of the old server would be refused/);
  });

  it("completes interrupted runs without duplicates, then copies nothing more", async () => {
    const targetDir = await scratchDir();
    const from = await openSource(source.dataDir);
    const to = await openTarget(targetDir);
    try {
      // Cut short while copying objects, then while importing files.
      await assert.rejects(migrateStores(from, { ...to, blobs: failingOn(to.blobs, "putIfAbsent", 2) }), /simulated interruption in putIfAbsent/);
      await assert.rejects(migrateStores(from, { ...to, metadata: failingOn(to.metadata, "importFiles", 1) }), /simulated interruption in importFiles/);
      const lines: string[] = [];
      const completed = await migrateStores(from, to, { progress: (line) => lines.push(line), maxPageRows: 2, concurrency: 2 });
      const copiedNow = new Map(completed.map((step) => [step.name, step.copied]));
      assert.ok(
        (copiedNow.get("xorb objects") ?? 0) < (completed.find((s) => s.name === "xorb objects")?.inSource ?? 0),
        "objects copied before the interruption are not copied again",
      );
      assert.equal(copiedNow.get("repositories"), 0, "repositories were copied by the first run");
      assert.ok(lines.some((line) => /^dedup index entries: \d+ in the source/.test(line)));

      assert.deepEqual(await listAll(to.blobs), await listAll(from.blobs!));
      assert.deepEqual(await idFreeRows(to.metadata), await idFreeRows(from.metadata));
      const repeat = await migrateStores(from, to, { maxPageRows: 3 });
      assert.deepEqual(
        repeat.filter((step) => step.copied !== 0),
        [],
      );
      assert.deepEqual(
        repeat.map((step) => step.inSource),
        completed.map((step) => step.inSource),
      );
    } finally {
      await from.close();
      await to.close();
    }
  });

  it("refuses a source whose xorb record has lost its object, naming the xorb", async () => {
    const damaged = join(await scratchDir(), "data");
    await cp(source.dataDir, damaged, { recursive: true });
    const xorbFolder = join(damaged, "blobs", "xorbs");
    const fanout = (await readdir(xorbFolder))[0];
    const [name] = await readdir(join(xorbFolder, fanout));
    await unlink(join(xorbFolder, fanout, name));
    const from = await openSource(damaged);
    const to = await openTarget(await scratchDir());
    try {
      await assert.rejects(migrateStores(from, to), (err: unknown) => {
        assert.ok(err instanceof MigrationSourceError);
        assert.match(err.message, new RegExp(`xorb ${name} is recorded .* but its object is missing`));
        return true;
      });
    } finally {
      await from.close();
      await to.close();
    }
  });
});
