/**
 * The migration part of the MetadataStore contract (`castor migrate`): exports page through
 * every table in key order, imports into a second store reproduce every answer (repository ids
 * mapped), and repeating an import changes nothing. `runMetadataStoreContract` calls it with
 * its fixture factory: each case opens two fresh stores of the same backend.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { hashToHex, type Hash } from "../../src/format/hash.js";
import {
  AlreadyExistsError,
  InvalidRecordError,
  NotFoundError,
  type DatedFile,
  type DatedXorb,
  type DedupEntry,
  type ScanPage,
  type FileRepoLink,
  type CommitRecord,
  type HubToken,
  type MetadataStore,
  type RepoCommit,
  type RepoTree,
  type TreeRecord,
  type Sha256IndexEntry,
  type ShardRow,
} from "../../src/metadata/store.js";
import { fileRecord, hashOf, oidOf, xorbRecord } from "../helpers/fixtures.js";
import type { MetadataStoreFixture } from "./metadata-store.js";

/** Small xorbs: chunks of 1000 + i bytes, 700 serialized. */
const xorbOf = (label: string, count: number) => xorbRecord(label, count, { chunkBytes: (i) => 1000 + i, serializedBytes: 700 });

const X1 = xorbOf("one", 3);
const X2 = xorbOf("two", 2);
const X3 = xorbOf("three", 1);
const SHA_A = hashOf("sha a");
const SHA_B = hashOf("sha b");

const F1 = fileRecord("one", X1, { sha256: SHA_A });
const F2 = fileRecord("two", X2, { sha256: null });
const F3 = fileRecord("three", X3, { sha256: SHA_B });
const F4 = fileRecord("four", X1, { sha256: SHA_A });
/** Chunks of the dedup index: C1 in two xorbs (X1 older), BUSY in five (more than a small page). */
const C1 = hashOf("chunk one");
const C2 = hashOf("chunk two");
const BUSY = hashOf("busy chunk");
const BUSY_XORBS = [X3, X1, X2, xorbOf("four", 1), xorbOf("five", 1)].map((x) => x.hash);

const EMPTY_TREE: TreeRecord = { oid: oidOf("empty tree"), entries: [] };
const TREE: TreeRecord = {
  oid: oidOf("tree with files"),
  entries: [
    { type: "file", name: "README.md", oid: oidOf("readme"), size: 11, sha256: "ab".repeat(32), xetHash: null },
    { type: "directory", name: "data", oid: oidOf("data dir") },
    { type: "file", name: "model.bin", oid: oidOf("model pointer"), size: 3 << 20, sha256: "cd".repeat(32), xetHash: "ef".repeat(32) },
  ],
};

function commitOf(label: string, tree: TreeRecord, parents: string[], seconds: number): CommitRecord {
  const message = `${label}\n`;
  const object = `tree ${tree.oid}\n${parents.map((p) => `parent ${p}\n`).join("")}author alice <a@b> ${seconds} +0000\ncommitter alice <a@b> ${seconds} +0000\n\n${message}`;
  return { oid: oidOf(object), treeOid: tree.oid, parentOids: parents, title: label, message, author: "alice", createdAt: new Date(seconds * 1000), object };
}

const INITIAL = commitOf("Initial commit", EMPTY_TREE, [], 1_767_225_600);
const SECOND = commitOf("Add files", TREE, [INITIAL.oid], 1_767_225_660);

interface Populated {
  repos: { type: "model" | "dataset" | "space"; name: string }[];
  /** Every chunk hash of the dedup index. */
  chunks: Hash[];
  files: Hash[];
}

/** A store with a bit of everything: repositories, revisions, tokens of every kind, xorbs, registrations. */
async function populate(store: MetadataStore): Promise<Populated> {
  // Public with a history; made before histories (private, main at no commit); private with an initial commit.
  const bert = await store.createRepo("model", "alice/bert", { private: false, commit: INITIAL, tree: EMPTY_TREE });
  const data = await store.createRepo("dataset", "bob/data");
  await store.createRepo("space", "carol/app", { private: true, commit: INITIAL, tree: EMPTY_TREE });
  await store.advanceBranch({ repoId: bert.id, branch: "main", expectedHead: INITIAL.oid, commit: SECOND, trees: [TREE] });
  await store.createRevision(bert.id, "v1", "tag", INITIAL.oid);
  await store.createRevision(bert.id, "feature/x", "branch");
  await store.createHubToken({
    id: "tok_read",
    secretHash: "a".repeat(64),
    access: "read",
    repos: [data.id, bert.id],
    expiresAt: null,
    owner: "bob",
    namespaces: ["bob", "alice"],
  });
  await store.createHubToken({
    id: "tok_admin",
    secretHash: "b".repeat(64),
    access: "write",
    repos: "all",
    expiresAt: new Date(Date.UTC(2031, 0, 2, 3, 4, 5, 678)),
  });
  await store.createHubToken({ id: "tok_old", secretHash: "c".repeat(64), access: "write", repos: [bert.id], expiresAt: null });
  await store.revokeHubToken("tok_old");
  for (const xorb of [X1, X2, X3]) await store.putXorb(xorb);
  await store.registerShard({
    shardHash: hashOf("shard 1"),
    repoId: bert.id,
    files: [F1, F2],
    dedupEntries: [
      { chunkHash: C1, xorbHash: X1.hash },
      { chunkHash: C2, xorbHash: X2.hash },
      ...BUSY_XORBS.slice(0, 3).map((xorbHash) => ({ chunkHash: BUSY, xorbHash })),
    ],
  });
  await store.registerShard({
    shardHash: hashOf("shard 2"),
    repoId: data.id,
    files: [F1, F3],
    dedupEntries: [{ chunkHash: C1, xorbHash: X2.hash }, ...BUSY_XORBS.slice(3).map((xorbHash) => ({ chunkHash: BUSY, xorbHash }))],
  });
  // The latest registration of a digest wins: SHA_A now names F4 in alice/bert.
  await store.registerShard({ shardHash: hashOf("shard 3"), repoId: bert.id, files: [F4], dedupEntries: [] });
  return {
    repos: [
      { type: "model", name: "alice/bert" },
      { type: "dataset", name: "bob/data" },
      { type: "space", name: "carol/app" },
    ],
    chunks: [C1, C2, BUSY],
    files: [F1, F2, F3, F4].map((f) => f.hash),
  };
}

type Exporter<T> = (after: string | null, limit: number) => Promise<ScanPage<T>>;

/** Every row of an export, page by page. */
async function exportAll<T>(exporter: Exporter<T>, limit: number): Promise<T[]> {
  const rows: T[] = [];
  let after: string | null = null;
  for (let pages = 0; ; pages++) {
    assert.ok(pages < 10_000, "an export must end");
    const page: ScanPage<T> = await exporter(after, limit);
    rows.push(...page.rows);
    if (page.next === null) return rows;
    after = page.next;
  }
}

interface Everything {
  xorbs: DatedXorb[];
  files: DatedFile[];
  links: FileRepoLink[];
  sha256: Sha256IndexEntry[];
  shards: ShardRow[];
  dedup: DedupEntry[];
  commits: RepoCommit[];
  trees: RepoTree[];
}

async function exportEverything(store: MetadataStore, limit = 10_000): Promise<Everything> {
  return {
    xorbs: await exportAll((a, n) => store.scanXorbs(a, n), limit),
    files: await exportAll((a, n) => store.scanFiles(a, n), limit),
    links: await exportAll((a, n) => store.scanFileRepoLinks(a, n), limit),
    sha256: await exportAll((a, n) => store.scanSha256Index(a, n), limit),
    shards: await exportAll((a, n) => store.scanShards(a, n), limit),
    dedup: await exportAll((a, n) => store.scanDedupEntries(a, n), limit),
    commits: await exportAll((a, n) => store.scanCommits(a, n), limit),
    trees: await exportAll((a, n) => store.scanTrees(a, n), limit),
  };
}

/** Rows of a history export in key order: (repository id, oid). */
function byRepoAndOid<T extends { repoId: number; oid: string }>(rows: T[]): T[] {
  return [...rows].sort((a, b) => a.repoId - b.repoId || (a.oid < b.oid ? -1 : a.oid > b.oid ? 1 : 0));
}

interface CopyCounts {
  repos: number;
  revisions: number;
  tokens: number;
  xorbs: number;
  files: number;
  links: number;
  sha256: number;
  shards: number;
  dedup: number;
  commits: number;
  trees: number;
}

/** The counts of a copy that found everything in place. */
const NO_CHANGES: Readonly<CopyCounts> = {
  repos: 0,
  revisions: 0,
  tokens: 0,
  xorbs: 0,
  files: 0,
  links: 0,
  sha256: 0,
  shards: 0,
  dedup: 0,
  commits: 0,
  trees: 0,
};

/** Copies `source` into `target` with the migration methods, in pages of `limit`; returns the counts the imports reported. */
async function copyStore(source: MetadataStore, target: MetadataStore, limit: number): Promise<{ counts: CopyCounts; repoIds: Map<number, number> }> {
  const counts: CopyCounts = { ...NO_CHANGES };
  const repoIds = new Map<number, number>();
  for (const repo of await source.listRepos()) {
    const { repo: imported, inserted } = await target.importRepo({ type: repo.type, name: repo.name, createdAt: repo.createdAt, private: repo.private });
    repoIds.set(repo.id, imported.id);
    counts.repos += inserted ? 1 : 0;
  }
  const mapId = (id: number) => {
    const mapped = repoIds.get(id);
    assert.ok(mapped !== undefined, `repository id ${id} has no mapping`);
    return mapped;
  };
  for (const [sourceId, targetId] of repoIds) {
    const revisions = (await source.listRevisions(sourceId)).map((r) => ({ ...r, repoId: targetId }));
    counts.revisions += await target.importRevisions(revisions);
  }
  const tokens = (await source.listHubTokens()).map((t): HubToken => ({ ...t, repos: t.repos === "all" ? "all" : t.repos.map(mapId) }));
  counts.tokens += await target.importHubTokens(tokens);

  const pages = async <T>(exporter: Exporter<T>, importer: (rows: T[]) => Promise<number>): Promise<number> => {
    let changed = 0;
    let after: string | null = null;
    for (;;) {
      const page: ScanPage<T> = await exporter(after, limit);
      changed += await importer(page.rows);
      if (page.next === null) return changed;
      after = page.next;
    }
  };
  /** A row naming a repository, with the source's id mapped to the target's. */
  const toTarget = <R extends { repoId: number }>(row: R): R => ({ ...row, repoId: mapId(row.repoId) });
  counts.xorbs = await pages(source.scanXorbs.bind(source), target.importXorbs.bind(target));
  counts.files = await pages(source.scanFiles.bind(source), target.importFiles.bind(target));
  counts.links = await pages(source.scanFileRepoLinks.bind(source), (rows) => target.importFileRepoLinks(rows.map(toTarget)));
  counts.sha256 = await pages(source.scanSha256Index.bind(source), (rows) => target.importSha256Index(rows.map(toTarget)));
  counts.shards = await pages(source.scanShards.bind(source), target.importShards.bind(target));
  counts.dedup = await pages(source.scanDedupEntries.bind(source), target.importDedupEntries.bind(target));
  counts.trees = await pages(source.scanTrees.bind(source), (rows) => target.importTrees(rows.map(toTarget)));
  counts.commits = await pages(source.scanCommits.bind(source), (rows) => target.importCommits(rows.map(toTarget)));
  return { counts, repoIds };
}

/** Compares byte strings as the stores order keys. */
function byteOrder(a: Uint8Array, b: Uint8Array): number {
  return Buffer.compare(a, b);
}

export function runMigrationContract(open: () => Promise<MetadataStoreFixture>): void {
  /** Runs `body` with two fresh stores of the backend, closing and cleaning up both. */
  const withTwoStores = (body: (source: MetadataStore, target: MetadataStore) => Promise<void>) => async () => {
    const first = await open();
    let second: MetadataStoreFixture | undefined;
    try {
      second = await open();
      await body(first.store, second.store);
    } finally {
      for (const fixture of [first, second]) {
        if (fixture === undefined) continue;
        await fixture.store.close();
        await fixture.cleanup();
      }
    }
  };

  describe("migration: export and import", () => {
    it(
      "exports every table in key order, the same rows whatever the page size, never splitting a chunk's dedup entries",
      withTwoStores(async (store) => {
        const populated = await populate(store);
        const whole = await exportEverything(store);
        assert.deepEqual(await exportEverything(store, 1), whole, "pages of 1 row give the same rows");
        assert.deepEqual(await exportEverything(store, 2), whole, "pages of 2 rows give the same rows");

        assert.deepEqual(
          whole.xorbs.map((x) => x.hash),
          [X1, X2, X3].map((x) => x.hash).sort(byteOrder),
        );
        const [bertId, , appId] = (await store.listRepos()).map((repo) => repo.id);
        assert.deepEqual(
          whole.commits,
          byRepoAndOid([
            { repoId: bertId, ...INITIAL },
            { repoId: bertId, ...SECOND },
            { repoId: appId, ...INITIAL },
          ]),
          "commits in (repository, oid) order, every field kept",
        );
        assert.deepEqual(
          whole.trees,
          byRepoAndOid([
            { repoId: bertId, ...EMPTY_TREE },
            { repoId: bertId, ...TREE },
            { repoId: appId, ...EMPTY_TREE },
          ]),
          "trees in (repository, oid) order, entries kept",
        );
        for (const xorb of whole.xorbs) {
          const { createdAt, ...record } = xorb;
          assert.ok(createdAt instanceof Date && createdAt.getTime() <= Date.now());
          assert.deepEqual(record, (await store.getXorbs([xorb.hash])).get(hashToHex(xorb.hash)));
        }
        assert.deepEqual(
          whole.files.map((f) => f.hash),
          [...populated.files].sort(byteOrder),
        );
        for (const file of whole.files) {
          const { createdAt, ...record } = file;
          assert.ok(createdAt instanceof Date);
          assert.deepEqual(record, await store.getFile(file.hash));
        }
        const bert = (await store.getRepo("model", "alice/bert"))!;
        const data = (await store.getRepo("dataset", "bob/data"))!;
        const expectedLinks = [
          { fileHash: F1.hash, repoId: bert.id },
          { fileHash: F2.hash, repoId: bert.id },
          { fileHash: F1.hash, repoId: data.id },
          { fileHash: F3.hash, repoId: data.id },
          { fileHash: F4.hash, repoId: bert.id },
        ].sort((a, b) => byteOrder(a.fileHash, b.fileHash) || a.repoId - b.repoId);
        assert.deepEqual(whole.links, expectedLinks);
        const expectedSha256 = [
          { repoId: bert.id, sha256: SHA_A, fileHash: F4.hash },
          { repoId: data.id, sha256: SHA_A, fileHash: F1.hash },
          { repoId: data.id, sha256: SHA_B, fileHash: F3.hash },
        ].sort((a, b) => a.repoId - b.repoId || byteOrder(a.sha256, b.sha256));
        assert.deepEqual(whole.sha256, expectedSha256);
        assert.deepEqual(
          whole.shards.map((s) => s.hash),
          ["shard 1", "shard 2", "shard 3"].map(hashOf).sort(byteOrder),
        );

        // The dedup index: chunk order, each chunk's xorbs oldest first.
        const expectedDedup = new Map<string, Hash[]>([
          [hashToHex(C1), [X1.hash, X2.hash]],
          [hashToHex(C2), [X2.hash]],
          [hashToHex(BUSY), BUSY_XORBS],
        ]);
        assert.deepEqual(
          whole.dedup.map((e) => e.chunkHash),
          [...populated.chunks].sort(byteOrder).flatMap((c) => expectedDedup.get(hashToHex(c))!.map(() => c)),
        );
        for (const chunk of populated.chunks) {
          assert.deepEqual(
            whole.dedup.filter((e) => byteOrder(e.chunkHash, chunk) === 0).map((e) => e.xorbHash),
            expectedDedup.get(hashToHex(chunk)),
          );
        }
        const busyPage = await store.scanDedupEntries(null, 2);
        const busyPages: DedupEntry[][] = [];
        for (let page = busyPage; ; page = await store.scanDedupEntries(page.next, 2)) {
          busyPages.push(page.rows);
          const chunksInPage = new Set(page.rows.map((e) => hashToHex(e.chunkHash)));
          for (const chunk of chunksInPage) {
            assert.equal(
              page.rows.filter((e) => hashToHex(e.chunkHash) === chunk).length,
              expectedDedup.get(chunk)!.length,
              "a page holds all of a chunk's entries",
            );
          }
          if (page.next === null) break;
        }
        assert.ok(
          busyPages.some((rows) => rows.length === BUSY_XORBS.length),
          "a chunk with more entries than the page size comes whole",
        );
      }),
    );

    it(
      "copies a store into an empty one: every answer is the same, with repository ids mapped",
      withTwoStores(async (source, target) => {
        const populated = await populate(source);
        // The target numbers repositories differently: one of its own first.
        const own = await target.createRepo("model", "zed/own");
        const { counts, repoIds } = await copyStore(source, target, 2);
        assert.deepEqual(counts, { repos: 3, revisions: 5, tokens: 3, xorbs: 3, files: 4, links: 5, sha256: 3, shards: 3, dedup: 8, commits: 3, trees: 3 });
        assert.ok(
          [...repoIds].some(([from, to]) => from !== to),
          "ids differ between the stores",
        );

        const sourceRepos = await source.listRepos();
        const targetRepos = await target.listRepos();
        assert.deepEqual(targetRepos[0], own);
        assert.deepEqual(
          targetRepos.slice(1).map(({ type, name, createdAt }) => ({ type, name, createdAt })),
          sourceRepos.map(({ type, name, createdAt }) => ({ type, name, createdAt })),
          "repositories keep their names, types, creation times and order",
        );
        assert.deepEqual(
          targetRepos.map((repo) => repo.private),
          [true, false, true, true],
          "and their visibility",
        );
        for (const repo of sourceRepos) {
          const mapped = repoIds.get(repo.id)!;
          assert.deepEqual(await target.getRepoById(mapped), { ...repo, id: mapped });
          assert.deepEqual(
            await target.listRevisions(mapped),
            (await source.listRevisions(repo.id)).map((r) => ({ ...r, repoId: mapped })),
          );
        }
        assert.deepEqual(
          await target.listHubTokens(),
          (await source.listHubTokens()).map((t) => ({ ...t, repos: t.repos === "all" ? "all" : t.repos.map((id) => repoIds.get(id)!).sort((a, b) => a - b) })),
          "tokens keep ids, secret hashes, access, coverage, times, revocations, owners and namespaces",
        );
        assert.deepEqual(
          (await target.listHubTokens()).map((t) => [t.owner, t.namespaces]),
          [
            ["bob", ["alice", "bob"]],
            [null, []],
            [null, []],
          ],
        );
        for (const token of await source.listHubTokens()) {
          assert.deepEqual((await target.findHubTokenBySecretHash(token.secretHash))?.id, token.id);
        }

        const sourceRows = await exportEverything(source);
        const targetRows = await exportEverything(target);
        for (const table of ["xorbs", "files", "shards", "dedup"] as const) {
          assert.deepEqual(targetRows[table], sourceRows[table], `${table} are copied exactly, times included`);
        }
        for (const table of ["commits", "trees"] as const) {
          const mapped = sourceRows[table].map((row) => ({ ...row, repoId: repoIds.get(row.repoId)! }));
          assert.deepEqual(targetRows[table], byRepoAndOid<RepoCommit | RepoTree>(mapped), `${table} are copied exactly, repository ids mapped`);
        }
        const bert = repoIds.get((await source.getRepo("model", "alice/bert"))!.id)!;
        assert.equal((await target.getRevision(bert, "main"))?.commitOid, SECOND.oid);
        assert.deepEqual(await target.getCommit(bert, SECOND.oid), SECOND);
        assert.deepEqual(await target.getTree(bert, TREE.oid), TREE);
        for (const hash of populated.files) {
          for (const repo of sourceRepos) {
            assert.equal(await target.isFileInRepo(hash, repoIds.get(repo.id)!), await source.isFileInRepo(hash, repo.id));
          }
        }
        for (const repo of sourceRepos) {
          for (const digest of [SHA_A, SHA_B]) {
            assert.deepEqual(await target.findFileBySha256(repoIds.get(repo.id)!, digest), await source.findFileBySha256(repo.id, digest));
          }
        }
        for (const chunk of populated.chunks) {
          assert.deepEqual(await target.findDedupXorbs(chunk, 10), await source.findDedupXorbs(chunk, 10), "dedup answers keep their oldest-first order");
        }
        for (const xorb of [X1, X2, X3]) assert.equal(await target.getXorbSize(xorb.hash), xorb.serializedLength);

        // Registrations after the copy are newer than everything copied.
        const newer = xorbOf("newer", 1);
        await target.putXorb(newer);
        await target.registerShard({ shardHash: hashOf("shard 4"), repoId: own.id, files: [], dedupEntries: [{ chunkHash: C1, xorbHash: newer.hash }] });
        assert.deepEqual(await target.findDedupXorbs(C1, 10), [X1.hash, X2.hash, newer.hash]);
      }),
    );

    it(
      "changes nothing when the copy is repeated, and carries a later revocation but never undoes one",
      withTwoStores(async (source, target) => {
        await populate(source);
        await copyStore(source, target, 3);
        const before = await exportEverything(target);
        const tokensBefore = await target.listHubTokens();
        const again = await copyStore(source, target, 3);
        assert.deepEqual(again.counts, NO_CHANGES);
        assert.deepEqual(await exportEverything(target), before);
        assert.deepEqual(await target.listHubTokens(), tokensBefore);
        assert.equal((await target.listRepos()).length, 3);

        await source.revokeHubToken("tok_read");
        const revoked = (await source.listHubTokens()).find((t) => t.id === "tok_read")!;
        const withMappedRepos = (token: HubToken, repos: HubToken["repos"]): HubToken => ({ ...token, repos });
        const targetRead = tokensBefore.find((t) => t.id === "tok_read")!;
        assert.equal(await target.importHubTokens([withMappedRepos(revoked, targetRead.repos)]), 1);
        assert.deepEqual((await target.listHubTokens()).find((t) => t.id === "tok_read")?.revokedAt, revoked.revokedAt);
        const old = tokensBefore.find((t) => t.id === "tok_old")!;
        assert.ok(old.revokedAt !== null);
        assert.equal(await target.importHubTokens([{ ...old, revokedAt: null }]), 0, "an import never un-revokes");
        assert.deepEqual((await target.listHubTokens()).find((t) => t.id === "tok_old")?.revokedAt, old.revokedAt);
        assert.equal(await target.importHubTokens([{ ...old, repos: "all" }]), 0, "a token present keeps its coverage");
        assert.deepEqual((await target.listHubTokens()).find((t) => t.id === "tok_old")?.repos, old.repos);
      }),
    );

    it(
      "carries a moved branch and a changed visibility on a repeat, never a revision back to no commit",
      withTwoStores(async (source, target) => {
        await populate(source);
        await copyStore(source, target, 10);
        const bert = (await source.getRepo("model", "alice/bert"))!;
        const data = (await source.getRepo("dataset", "bob/data"))!;
        // The source goes on after the first copy: a commit on main, visibility flipped both ways, a new tag.
        const third = commitOf("Third", EMPTY_TREE, [SECOND.oid], 1_767_225_720);
        assert.equal(await source.advanceBranch({ repoId: bert.id, branch: "main", expectedHead: SECOND.oid, commit: third, trees: [EMPTY_TREE] }), "advanced");
        assert.equal(await source.advanceBranch({ repoId: data.id, branch: "main", expectedHead: null, commit: INITIAL, trees: [EMPTY_TREE] }), "advanced");
        await source.setRepoPrivate(bert.id, true);
        await source.setRepoPrivate(data.id, false);
        await source.createRevision(bert.id, "v2", "tag", third.oid);
        const again = await copyStore(source, target, 10);
        assert.deepEqual(again.counts, { ...NO_CHANGES, revisions: 3, commits: 2, trees: 1 });
        for (const repo of [bert, data]) {
          const mapped = again.repoIds.get(repo.id)!;
          assert.deepEqual(await target.getRepoById(mapped), { ...(await source.getRepoById(repo.id))!, id: mapped }, "visibility carried");
          assert.deepEqual(
            await target.listRevisions(mapped),
            (await source.listRevisions(repo.id)).map((r) => ({ ...r, repoId: mapped })),
            "heads carried",
          );
        }
        const targetBert = again.repoIds.get(bert.id)!;
        assert.deepEqual(await target.getCommit(targetBert, third.oid), third);

        // A revision present never goes back to no commit, nor takes the commit of a revision of another kind.
        const main = (await target.getRevision(targetBert, "main"))!;
        assert.equal(await target.importRevisions([{ ...main, commitOid: null }]), 0);
        assert.equal(await target.importRevisions([{ ...main, kind: "tag", commitOid: INITIAL.oid }]), 0);
        assert.deepEqual(await target.getRevision(targetBert, "main"), main);
        const imported = await target.importRepo({ type: "model", name: "alice/bert", createdAt: new Date(0), private: false });
        assert.deepEqual(
          imported,
          { repo: { ...(await target.getRepoById(targetBert))!, private: false }, inserted: false },
          "the time is kept, the visibility set",
        );
      }),
    );

    it(
      "refuses rows that name unknown repositories or files, a taken secret hash, and malformed cursors and page sizes",
      withTwoStores(async (store) => {
        const repo = await store.createRepo("model", "alice/bert");
        const missingRepo = repo.id + 1000;
        await assert.rejects(store.importRevisions([{ repoId: missingRepo, name: "v1", kind: "tag", createdAt: new Date(), commitOid: null }]), NotFoundError);
        await assert.rejects(
          store.importRevisions([
            { repoId: repo.id, name: "v2", kind: "tag", createdAt: new Date(), commitOid: null },
            { repoId: missingRepo, name: "v1", kind: "tag", createdAt: new Date(), commitOid: null },
          ]),
          NotFoundError,
        );
        assert.equal(await store.getRevision(repo.id, "v2"), null, "a failed batch stores nothing");
        await assert.rejects(
          store.importCommits([
            { repoId: repo.id, ...INITIAL },
            { repoId: missingRepo, ...SECOND },
          ]),
          NotFoundError,
        );
        await assert.rejects(
          store.importTrees([
            { repoId: repo.id, ...TREE },
            { repoId: missingRepo, ...EMPTY_TREE },
          ]),
          NotFoundError,
        );
        assert.equal(await store.getCommit(repo.id, INITIAL.oid), null, "a failed batch stores nothing");
        assert.equal(await store.getTree(repo.id, TREE.oid), null);
        await assert.rejects(store.importCommits([{ repoId: repo.id, ...INITIAL, createdAt: new Date(Number.NaN) }]), InvalidRecordError);
        await assert.rejects(store.importTrees([{ repoId: repo.id, oid: TREE.oid, entries: [{ type: "link" } as never] }]), InvalidRecordError);
        const token: HubToken = {
          id: "tok_x",
          secretHash: "d".repeat(64),
          access: "read",
          repos: [missingRepo],
          createdAt: new Date(),
          expiresAt: null,
          revokedAt: null,
          owner: null,
          namespaces: [],
        };
        await assert.rejects(store.importHubTokens([token]), NotFoundError);
        assert.deepEqual(await store.listHubTokens(), []);
        await store.createHubToken({ id: "tok_y", secretHash: "e".repeat(64), access: "read", repos: "all", expiresAt: null });
        await assert.rejects(store.importHubTokens([{ ...token, repos: "all", secretHash: "e".repeat(64) }]), AlreadyExistsError);

        await store.putXorb(X1);
        await assert.rejects(store.importFileRepoLinks([{ fileHash: F1.hash, repoId: repo.id }]), NotFoundError, "the file must be imported first");
        await store.importFiles([{ ...F1, createdAt: new Date() }]);
        await assert.rejects(store.importFileRepoLinks([{ fileHash: F1.hash, repoId: missingRepo }]), NotFoundError);
        await assert.rejects(store.importSha256Index([{ repoId: missingRepo, sha256: SHA_A, fileHash: F1.hash }]), NotFoundError);
        await assert.rejects(store.importSha256Index([{ repoId: repo.id, sha256: SHA_A, fileHash: F2.hash }]), NotFoundError);
        assert.equal(await store.importFileRepoLinks([{ fileHash: F1.hash, repoId: repo.id }]), 1);
        assert.equal(await store.importSha256Index([{ repoId: repo.id, sha256: SHA_A, fileHash: F1.hash }]), 1);
        assert.equal(await store.importSha256Index([{ repoId: repo.id, sha256: SHA_A, fileHash: F1.hash }]), 0);

        for (const cursor of ["", "zz", "0".repeat(63), `${"0".repeat(64)}:x`]) {
          await assert.rejects(store.scanXorbs(cursor, 10), RangeError);
          await assert.rejects(store.scanFileRepoLinks(cursor, 10), RangeError);
          await assert.rejects(store.scanSha256Index(cursor, 10), RangeError);
          await assert.rejects(store.scanCommits(cursor, 10), RangeError);
          await assert.rejects(store.scanTrees(cursor, 10), RangeError);
        }
        for (const limit of [0, -1, 1.5, 10_001]) await assert.rejects(store.scanFiles(null, limit), RangeError);
      }),
    );
  });
}
