/**
 * The hub-history part of the MetadataStore contract: repository visibility, initial commits,
 * commits and trees, moving branches by compare-and-swap, tags and branches pointing at
 * commits, and deleting repositories with everything that is only theirs.
 * `runMetadataStoreContract` calls it inside its own describe block with its `withStore`
 * wrapper, so every backend runs these cases unchanged.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  AlreadyExistsError,
  InvalidRecordError,
  NotFoundError,
  type BranchAdvance,
  type CommitRecord,
  type MetadataStore,
  type RepoInit,
  type TreeEntry,
  type TreeRecord,
} from "../../src/metadata/store.js";
import { fileRecord, hashOf, oidOf, xorbRecord } from "../helpers/fixtures.js";
import type { WithStore } from "./cas-metadata.js";

function sha256Of(label: string): string {
  return createHash("sha256").update(label).digest("hex");
}

/** A tree whose oid is derived from its entries, so equal entries give equal oids. */
function treeOf(entries: TreeEntry[]): TreeRecord {
  return { oid: oidOf(`tree ${JSON.stringify(entries)}`), entries };
}

const EMPTY_TREE = treeOf([]);

/** A commit with whole-second time (git's resolution) and an object text like git's. */
function commitOf(label: string, tree: TreeRecord, parents: string[], seconds = 1_767_225_600): CommitRecord {
  const message = `${label}\n\nThe body of ${label},\nover two lines.\n`;
  const object = [
    `tree ${tree.oid}`,
    ...parents.map((parent) => `parent ${parent}`),
    `author alice <alice@users.noreply.castor> ${seconds} +0000`,
    `committer alice <alice@users.noreply.castor> ${seconds} +0000`,
    "",
    message,
  ].join("\n");
  return { oid: oidOf(object), treeOid: tree.oid, parentOids: parents, title: label, message, author: "alice", createdAt: new Date(seconds * 1000), object };
}

function initOf(isPrivate: boolean): RepoInit {
  return { private: isPrivate, tree: EMPTY_TREE, commit: commitOf("Initial commit", EMPTY_TREE, []) };
}

/** A file entry: inline (no Xet hash) or Xet-stored. */
function fileEntry(name: string, size: number, xet: boolean): TreeEntry {
  return { type: "file", name, oid: oidOf(`blob ${name}`), size, sha256: sha256Of(`content ${name}`), xetHash: xet ? sha256Of(`xet ${name}`) : null };
}

/** A tree with one entry of every kind, in git's order (not the order a sort by name gives). */
function variedTree(label: string): TreeRecord {
  return treeOf([
    fileEntry(".gitattributes", 1_519, false),
    fileEntry("README.md", 0, false),
    { type: "directory", name: "data", oid: oidOf(`${label} data`) },
    fileEntry("data.bin", 2 ** 40 + 3, true),
    fileEntry("ünïcödé ✓.txt", 12, false),
    { type: "directory", name: "a", oid: oidOf(`${label} a`) },
  ]);
}

/** Everything the store holds of one repository, for "untouched" checks. */
async function snapshot(store: MetadataStore, repoId: number, commits: string[], trees: string[]) {
  return {
    repo: await store.getRepoById(repoId),
    revisions: await store.listRevisions(repoId),
    commits: await Promise.all(commits.map((oid) => store.getCommit(repoId, oid))),
    trees: await Promise.all(trees.map((oid) => store.getTree(repoId, oid))),
  };
}

export function runHubHistoryContract(withStore: WithStore): void {
  describe("repository visibility and initial commits", () => {
    it(
      "creates a repository without init as before histories: private, main pointing at no commit",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/legacy");
        assert.equal(repo.private, true);
        assert.deepEqual(await store.getRepoById(repo.id), repo);
        const main = await store.getRevision(repo.id, "main");
        assert.equal(main?.commitOid, null);
      }),
    );

    it(
      "creates a repository with its initial commit: main points at it, tree and commit round-trip exactly",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("dataset", "alice/fresh", init);
        assert.equal(repo.private, false);
        assert.deepEqual(await store.getRepo("dataset", "alice/fresh"), repo);
        assert.equal((await store.getRevision(repo.id, "main"))?.commitOid, init.commit.oid);
        assert.deepEqual(await store.listRevisions(repo.id), [await store.getRevision(repo.id, "main")]);
        assert.deepEqual(await store.getCommit(repo.id, init.commit.oid), init.commit);
        assert.deepEqual(await store.getTree(repo.id, EMPTY_TREE.oid), EMPTY_TREE);
        const privateRepo = await store.createRepo("model", "alice/secret", initOf(true));
        assert.equal(privateRepo.private, true);
        assert.equal((await store.getRevision(privateRepo.id, "main"))?.commitOid, init.commit.oid, "the same commit may start two repositories");
      }),
    );

    it(
      "refuses a duplicate repository with init, storing nothing of it",
      withStore(async (store) => {
        const original = await store.createRepo("model", "alice/bert");
        const init = initOf(false);
        await assert.rejects(store.createRepo("model", "alice/bert", init), AlreadyExistsError);
        assert.deepEqual(await store.listRepos(), [original]);
        assert.equal(await store.getCommit(original.id, init.commit.oid), null);
        assert.equal((await store.getRevision(original.id, "main"))?.commitOid, null);
      }),
    );

    it(
      "refuses an unstorable initial tree with InvalidRecordError, storing nothing",
      withStore(async (store) => {
        const bad = { ...initOf(false), tree: { oid: oidOf("bad"), entries: [{ type: "symlink", name: "x", oid: oidOf("x") } as unknown as TreeEntry] } };
        await assert.rejects(store.createRepo("model", "alice/bad", bad), InvalidRecordError);
        const sized = { ...initOf(false), tree: treeOf([{ ...fileEntry("x", 1, false), size: -1 } as TreeEntry]) };
        await assert.rejects(store.createRepo("model", "alice/bad", sized), InvalidRecordError);
        assert.deepEqual(await store.listRepos(), []);
      }),
    );

    it(
      "sets visibility and reports unknown repositories",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/bert", initOf(true));
        const other = await store.createRepo("model", "alice/other", initOf(true));
        assert.equal(await store.setRepoPrivate(repo.id, false), true);
        assert.equal((await store.getRepoById(repo.id))?.private, false);
        assert.equal(await store.setRepoPrivate(repo.id, false), true, "setting the same value still reports the repository");
        assert.equal((await store.getRepo("model", "alice/bert"))?.private, false);
        assert.equal((await store.getRepoById(other.id))?.private, true, "other repositories are untouched");
        assert.equal(await store.setRepoPrivate(repo.id, true), true);
        assert.equal((await store.listRepos()).find((r) => r.id === repo.id)?.private, true);
        assert.equal(await store.setRepoPrivate(repo.id + 1000, false), false);
      }),
    );

    it(
      "renames a repository keeping its id, revisions, commits and trees; the old name is free afterwards",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/bert", init);
        await store.createRevision(repo.id, "dev", "branch", init.commit.oid);
        const before = await snapshot(store, repo.id, [init.commit.oid], [init.tree.oid]);
        assert.equal(await store.renameRepo(repo.id, "bob/roberta"), true);
        assert.equal(await store.getRepo("model", "alice/bert"), null, "the old name is gone");
        const renamed = await store.getRepo("model", "bob/roberta");
        assert.deepEqual(renamed, { ...repo, name: "bob/roberta" });
        assert.deepEqual(await snapshot(store, repo.id, [init.commit.oid], [init.tree.oid]), { ...before, repo: renamed });
        assert.deepEqual(await store.listRepos(), [renamed]);
        // The old name can be taken again, by a new repository with a new id.
        const again = await store.createRepo("model", "alice/bert", initOf(true));
        assert.notEqual(again.id, repo.id);
        assert.equal(await store.renameRepo(repo.id + 1000, "alice/none"), false);
      }),
    );

    it(
      "refuses to rename onto a taken name of the same type with AlreadyExistsError, changing nothing",
      withStore(async (store) => {
        const bert = await store.createRepo("model", "alice/bert", initOf(false));
        const gpt = await store.createRepo("model", "alice/gpt", initOf(false));
        const dataset = await store.createRepo("dataset", "alice/corpus", initOf(false));
        await assert.rejects(store.renameRepo(bert.id, "alice/gpt"), AlreadyExistsError);
        assert.deepEqual(await store.listRepos(), [bert, gpt, dataset]);
        // Names are per type: a model may take a dataset's name.
        assert.equal(await store.renameRepo(bert.id, "alice/corpus"), true);
        assert.equal((await store.getRepo("model", "alice/corpus"))?.id, bert.id);
        assert.equal((await store.getRepo("dataset", "alice/corpus"))?.id, dataset.id);
      }),
    );
  });

  describe("commits and trees", () => {
    it(
      "finds commit ids by prefix, in order, per repository, up to the limit",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/short", init);
        const other = await store.createRepo("model", "alice/other", initOf(false));
        // Ids chosen to share a prefix (the store keeps the id it is given).
        const first = { ...commitOf("first", EMPTY_TREE, [init.commit.oid]), oid: `abcd${"2".repeat(36)}` };
        const second = { ...commitOf("second", EMPTY_TREE, [first.oid]), oid: `abcd${"1".repeat(36)}` };
        assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: init.commit.oid, commit: first, trees: [] }), "advanced");
        assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: first.oid, commit: second, trees: [] }), "advanced");
        assert.deepEqual(await store.commitOidsWithPrefix(repo.id, "abcd", 10), [second.oid, first.oid]);
        assert.deepEqual(await store.commitOidsWithPrefix(repo.id, "abcd", 1), [second.oid]);
        assert.deepEqual(await store.commitOidsWithPrefix(repo.id, "abcd2", 10), [first.oid]);
        assert.deepEqual(await store.commitOidsWithPrefix(repo.id, first.oid, 10), [first.oid]);
        assert.deepEqual(await store.commitOidsWithPrefix(repo.id, "abce", 10), []);
        assert.deepEqual(await store.commitOidsWithPrefix(repo.id, init.commit.oid.slice(0, 7), 10), [init.commit.oid]);
        assert.deepEqual(await store.commitOidsWithPrefix(other.id, "abcd", 10), [], "another repository's commits are not this one's");
      }),
    );

    it(
      "keeps commits and trees per repository; unknown oids are null",
      withStore(async (store) => {
        const init = initOf(false);
        const a = await store.createRepo("model", "alice/a", init);
        const b = await store.createRepo("model", "alice/b");
        assert.equal(await store.getCommit(b.id, init.commit.oid), null, "another repository's commit is not this one's");
        assert.equal(await store.getTree(b.id, EMPTY_TREE.oid), null);
        assert.equal(await store.getCommit(a.id, oidOf("nothing")), null);
        assert.equal(await store.getTree(a.id, oidOf("nothing")), null);
        assert.equal(await store.getCommit(a.id + 1000, init.commit.oid), null);
      }),
    );

    it(
      "round-trips every kind of entry in the order given, and a commit with several parents",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/bert", init);
        const tree = variedTree("v1");
        const side = commitOf("side", EMPTY_TREE, [init.commit.oid], 1_767_225_601);
        const merge = commitOf("Merge branch 'side'", tree, [init.commit.oid, side.oid], 1_767_225_700);
        assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: init.commit.oid, commit: side, trees: [] }), "advanced");
        assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: side.oid, commit: merge, trees: [tree] }), "advanced");
        assert.deepEqual(await store.getTree(repo.id, tree.oid), tree);
        const stored = await store.getCommit(repo.id, merge.oid);
        assert.deepEqual(stored, merge);
        assert.equal(stored?.createdAt.getTime(), 1_767_225_700_000, "dates to the second");
      }),
    );

    // How fast it loads is measured by `npm run bench -- hub` (tree listings of a 10,000-file repository), not here.
    it(
      "round-trips a 10,000-entry tree exactly",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/large", init);
        const entries: TreeEntry[] = Array.from({ length: 10_000 }, (_, i) =>
          i % 10 === 0
            ? { type: "directory", name: `dir-${i}`, oid: oidOf(`dir ${i}`) }
            : fileEntry(`file-${String(i).padStart(5, "0")}.safetensors`, i * 1_000, i % 2 === 1),
        );
        const tree = treeOf(entries);
        const commit = commitOf("Add 10,000 files", tree, [init.commit.oid]);
        assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: init.commit.oid, commit, trees: [tree] }), "advanced");
        assert.deepEqual(await store.getTree(repo.id, tree.oid), tree);
      }),
    );
  });

  describe("moving branches", () => {
    it(
      "advances a branch from its head, storing the commit and its trees; trees present are kept once",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/bert", init);
        const tree = variedTree("one");
        const first = commitOf("Add files", tree, [init.commit.oid], 1_767_225_660);
        const advance: BranchAdvance = { repoId: repo.id, branch: "main", expectedHead: init.commit.oid, commit: first, trees: [tree, EMPTY_TREE, tree] };
        assert.equal(await store.advanceBranch(advance), "advanced");
        assert.equal((await store.getRevision(repo.id, "main"))?.commitOid, first.oid);
        assert.deepEqual(await store.getCommit(repo.id, first.oid), first);
        assert.deepEqual(await store.getTree(repo.id, tree.oid), tree);

        const second = commitOf("Revert", EMPTY_TREE, [first.oid], 1_767_225_720);
        assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: first.oid, commit: second, trees: [EMPTY_TREE] }), "advanced");
        assert.equal((await store.getRevision(repo.id, "main"))?.commitOid, second.oid);
        assert.deepEqual(await store.getTree(repo.id, EMPTY_TREE.oid), EMPTY_TREE);
        assert.deepEqual(await store.getCommit(repo.id, first.oid), first, "earlier commits stay");
      }),
    );

    it(
      "answers moved and writes nothing when the branch is no longer at the expected head",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/bert", init);
        const tree = variedTree("stale");
        const stale = commitOf("From a stale head", tree, [oidOf("elsewhere")]);
        for (const expectedHead of [oidOf("elsewhere"), null]) {
          assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead, commit: stale, trees: [tree] }), "moved");
        }
        assert.equal((await store.getRevision(repo.id, "main"))?.commitOid, init.commit.oid, "the head is unchanged");
        assert.equal(await store.getCommit(repo.id, stale.oid), null, "the commit is not stored");
        assert.equal(await store.getTree(repo.id, tree.oid), null, "nor its trees");

        const unstorable = { ...commitOf("Unstorable", tree, [init.commit.oid]), parentOids: [42] as unknown as string[] };
        await assert.rejects(
          store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: init.commit.oid, commit: unstorable, trees: [tree] }),
          InvalidRecordError,
        );
        assert.equal((await store.getRevision(repo.id, "main"))?.commitOid, init.commit.oid, "an unstorable commit moves nothing");
        assert.equal(await store.getTree(repo.id, tree.oid), null);
      }),
    );

    it(
      "answers no_branch for an unknown branch, a tag, an unknown repository, writing nothing",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/bert", init);
        await store.createRevision(repo.id, "v1", "tag", init.commit.oid);
        const tree = variedTree("nowhere");
        const commit = commitOf("Nowhere", tree, [init.commit.oid]);
        for (const [repoId, branch] of [
          [repo.id, "dev"],
          [repo.id, "v1"],
          [repo.id, "Main"],
          [repo.id + 1000, "main"],
        ] as const) {
          assert.equal(await store.advanceBranch({ repoId, branch, expectedHead: init.commit.oid, commit, trees: [tree] }), "no_branch", `${repoId} ${branch}`);
        }
        assert.equal((await store.getRevision(repo.id, "v1"))?.commitOid, init.commit.oid, "the tag is unchanged");
        assert.equal(await store.getCommit(repo.id, commit.oid), null);
        assert.equal(await store.getTree(repo.id, tree.oid), null);
      }),
    );

    it(
      "gives a branch without a commit (made before histories) its first commit from expectedHead null",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/legacy");
        const init = initOf(true);
        assert.equal(
          await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: init.commit.oid, commit: init.commit, trees: [init.tree] }),
          "moved",
        );
        assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: null, commit: init.commit, trees: [init.tree] }), "advanced");
        assert.equal((await store.getRevision(repo.id, "main"))?.commitOid, init.commit.oid);
        assert.deepEqual(await store.getCommit(repo.id, init.commit.oid), init.commit);
      }),
    );

    it(
      "lets exactly one of two advances from the same head win, across store instances",
      withStore(async (store, reopen) => {
        const second = await reopen();
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/raced", init);
        let head = init.commit.oid;
        for (let round = 0; round < 10; round++) {
          const trees = [variedTree(`round ${round} left`), variedTree(`round ${round} right`)];
          const commits = trees.map((tree, side) => commitOf(`round ${round} side ${side}`, tree, [head]));
          const outcomes = await Promise.all([
            store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: head, commit: commits[0], trees: [trees[0]] }),
            second.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: head, commit: commits[1], trees: [trees[1]] }),
          ]);
          assert.deepEqual([...outcomes].sort(), ["advanced", "moved"], `round ${round}: ${outcomes.join(", ")}`);
          const winner = outcomes.indexOf("advanced");
          const loser = 1 - winner;
          head = commits[winner].oid;
          assert.equal((await second.getRevision(repo.id, "main"))?.commitOid, head);
          assert.equal(await store.getCommit(repo.id, commits[loser].oid), null, "the loser wrote nothing");
          assert.equal(await store.getTree(repo.id, trees[loser].oid), null);
          assert.deepEqual(await store.getTree(repo.id, trees[winner].oid), trees[winner]);
        }
      }),
    );

    it(
      "lets exactly one of many concurrent advances from the same head win",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/crowd", init);
        const commits = Array.from({ length: 8 }, (_, i) => commitOf(`crowd ${i}`, EMPTY_TREE, [init.commit.oid]));
        const outcomes = await Promise.all(
          commits.map((commit) => store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: init.commit.oid, commit, trees: [EMPTY_TREE] })),
        );
        assert.equal(outcomes.filter((outcome) => outcome === "advanced").length, 1, outcomes.join(", "));
        assert.equal((await store.getRevision(repo.id, "main"))?.commitOid, commits[outcomes.indexOf("advanced")].oid);
      }),
    );

    it(
      "moves each branch on its own and leaves tags where they point",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/bert", init);
        const dev = await store.createRevision(repo.id, "feature/dev", "branch", init.commit.oid);
        const tag = await store.createRevision(repo.id, "v1.0", "tag", init.commit.oid);
        assert.equal(dev.commitOid, init.commit.oid);
        assert.equal(tag.commitOid, init.commit.oid);
        assert.equal((await store.createRevision(repo.id, "empty", "branch")).commitOid, null, "a revision may point at no commit");
        const commit = commitOf("On dev", EMPTY_TREE, [init.commit.oid]);
        assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "feature/dev", expectedHead: init.commit.oid, commit, trees: [] }), "advanced");
        assert.deepEqual(
          (await store.listRevisions(repo.id)).map((r) => [r.name, r.kind, r.commitOid]),
          [
            ["main", "branch", init.commit.oid],
            ["feature/dev", "branch", commit.oid],
            ["v1.0", "tag", init.commit.oid],
            ["empty", "branch", null],
          ],
        );
      }),
    );

    it(
      "deletes revisions one at a time and reports unknown ones",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/bert", init);
        const other = await store.createRepo("model", "alice/other", init);
        await store.createRevision(repo.id, "dev", "branch", init.commit.oid);
        await store.createRevision(repo.id, "v1", "tag", init.commit.oid);
        await store.createRevision(other.id, "dev", "branch", init.commit.oid);
        assert.equal(await store.deleteRevision(repo.id, "dev"), true);
        assert.equal(await store.getRevision(repo.id, "dev"), null);
        assert.equal(await store.deleteRevision(repo.id, "dev"), false);
        assert.equal(await store.deleteRevision(repo.id, "nope"), false);
        assert.equal(await store.deleteRevision(repo.id + 1000, "main"), false);
        assert.deepEqual(
          (await store.listRevisions(repo.id)).map((r) => r.name),
          ["main", "v1"],
        );
        assert.ok(await store.getRevision(other.id, "dev"), "the same name in another repository stays");
        assert.deepEqual(await store.getCommit(repo.id, init.commit.oid), init.commit, "commits stay");
        const again = await store.createRevision(repo.id, "dev", "tag", init.commit.oid);
        assert.equal(again.kind, "tag", "the name is free again");
        await assert.rejects(store.createRevision(repo.id + 1000, "x", "tag", init.commit.oid), NotFoundError);
      }),
    );
  });

  describe("changing refs with the history they bring (git pushes)", () => {
    it(
      "creates a ref with several new commits and their trees, moves it on, and deletes it",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/pushed", init);
        const trees = [variedTree("push one"), variedTree("push two")];
        const first = commitOf("push one", trees[0], [init.commit.oid]);
        const second = commitOf("push two", trees[1], [first.oid]);
        const change = { repoId: repo.id, name: "feature", kind: "branch" as const, expected: null, target: second.oid, commits: [second, first], trees };
        assert.equal(await store.updateRef(change), "changed");
        assert.equal((await store.getRevision(repo.id, "feature"))?.commitOid, second.oid);
        assert.equal((await store.getRevision(repo.id, "feature"))?.kind, "branch");
        assert.deepEqual(await store.getCommit(repo.id, first.oid), first);
        assert.deepEqual(await store.getCommit(repo.id, second.oid), second);
        assert.deepEqual(await store.getTree(repo.id, trees[1].oid), trees[1]);
        // Creating it again is refused: it exists now.
        assert.equal(await store.updateRef(change), "moved");

        const third = commitOf("push three", EMPTY_TREE, [second.oid]);
        const move = {
          repoId: repo.id,
          name: "feature",
          kind: "branch" as const,
          expected: second.oid,
          target: third.oid,
          commits: [third],
          trees: [EMPTY_TREE],
        };
        assert.equal(await store.updateRef({ ...move, expected: first.oid }), "moved", "a stale expected commit");
        assert.equal(await store.updateRef({ ...move, kind: "tag" }), "moved", "the ref is a branch, not a tag");
        assert.equal(await store.getCommit(repo.id, third.oid), null, "a refused change writes nothing");
        assert.equal(await store.updateRef(move), "changed");
        assert.equal((await store.getRevision(repo.id, "feature"))?.commitOid, third.oid);

        assert.equal(await store.updateRef({ ...move, expected: second.oid, target: null, commits: [], trees: [] }), "moved");
        assert.equal(await store.updateRef({ ...move, expected: third.oid, target: null, commits: [], trees: [] }), "changed");
        assert.equal(await store.getRevision(repo.id, "feature"), null);
        assert.deepEqual(await store.getCommit(repo.id, third.oid), third, "commits stay for gc to judge");
      }),
    );

    it(
      "creates tags, which share their names with branches",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/tagged", init);
        const tag = { repoId: repo.id, name: "v1", kind: "tag" as const, expected: null, target: init.commit.oid, commits: [], trees: [] };
        assert.equal(await store.updateRef(tag), "changed");
        assert.equal((await store.getRevision(repo.id, "v1"))?.kind, "tag");
        assert.equal(await store.updateRef({ ...tag, name: "main" }), "moved", "main is a branch");
        assert.equal(await store.updateRef({ ...tag, kind: "branch" }), "moved", "v1 is taken by the tag");
      }),
    );

    it(
      "lets exactly one of two changes from the same state win, across store instances",
      withStore(async (store, reopen) => {
        const second = await reopen();
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/raced-refs", init);
        const commits = [0, 1].map((side) => commitOf(`side ${side}`, variedTree(`side ${side}`), [init.commit.oid]));
        const outcomes = await Promise.all(
          [store, second].map((each, side) =>
            each.updateRef({
              repoId: repo.id,
              name: "main",
              kind: "branch",
              expected: init.commit.oid,
              target: commits[side].oid,
              commits: [commits[side]],
              trees: [variedTree(`side ${side}`)],
            }),
          ),
        );
        assert.deepEqual([...outcomes].sort(), ["changed", "moved"]);
        const winner = outcomes.indexOf("changed");
        assert.equal((await second.getRevision(repo.id, "main"))?.commitOid, commits[winner].oid);
        assert.equal(await store.getCommit(repo.id, commits[1 - winner].oid), null, "the loser wrote nothing");
        // A push and a Hub commit racing: the loser of either kind is refused, the winner kept.
        const pushed = commitOf("pushed", EMPTY_TREE, [commits[winner].oid]);
        const hubCommit = commitOf("hub commit", EMPTY_TREE, [commits[winner].oid], 1_767_225_601);
        const [push, advance] = await Promise.all([
          store.updateRef({ repoId: repo.id, name: "main", kind: "branch", expected: commits[winner].oid, target: pushed.oid, commits: [pushed], trees: [] }),
          second.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: commits[winner].oid, commit: hubCommit, trees: [] }),
        ]);
        assert.equal([push === "changed", advance === "advanced"].filter(Boolean).length, 1, `${push}, ${advance}`);
      }),
    );

    it(
      "refuses an unstorable commit without writing anything",
      withStore(async (store) => {
        const init = initOf(false);
        const repo = await store.createRepo("model", "alice/bad-push", init);
        const bad = { ...commitOf("bad", EMPTY_TREE, [init.commit.oid]), object: 7 } as unknown as CommitRecord;
        await assert.rejects(
          store.updateRef({ repoId: repo.id, name: "x", kind: "branch", expected: null, target: bad.oid, commits: [bad], trees: [] }),
          InvalidRecordError,
        );
        assert.equal(await store.getRevision(repo.id, "x"), null);
      }),
    );
  });

  describe("deleting repositories", () => {
    it(
      "deletes a repository with its revisions, commits, trees, token links, file links and SHA-256 index, and nothing of others",
      withStore(async (store) => {
        const init = initOf(false);
        const doomed = await store.createRepo("model", "alice/doomed", init);
        const kept = await store.createRepo("model", "alice/kept", init);
        const tree = variedTree("shared");
        const commit = commitOf("Shared", tree, [init.commit.oid]);
        for (const repo of [doomed, kept]) {
          assert.equal(await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: init.commit.oid, commit, trees: [tree] }), "advanced");
          await store.createRevision(repo.id, "v1", "tag", commit.oid);
        }
        const xorb = xorbRecord("deleted repo", 1, { chunkBytes: 200, serializedBytes: 100 });
        await store.putXorb(xorb);
        const shared = fileRecord("shared", xorb);
        const own = fileRecord("own", xorb);
        await store.registerShard({ shardHash: hashOf("shard doomed"), repoId: doomed.id, files: [shared, own], dedupEntries: [] });
        await store.registerShard({ shardHash: hashOf("shard kept"), repoId: kept.id, files: [shared], dedupEntries: [] });
        const both = await store.createHubToken({ id: "tok_both", secretHash: "a".repeat(64), access: "write", repos: [doomed.id, kept.id], expiresAt: null });
        const only = await store.createHubToken({ id: "tok_only", secretHash: "b".repeat(64), access: "read", repos: [doomed.id], expiresAt: null });
        const all = await store.createHubToken({ id: "tok_all", secretHash: "c".repeat(64), access: "read", repos: "all", expiresAt: null });
        const keptBefore = await snapshot(store, kept.id, [init.commit.oid, commit.oid], [EMPTY_TREE.oid, tree.oid]);

        assert.equal(await store.deleteRepo(doomed.id), true);
        assert.equal(await store.getRepoById(doomed.id), null);
        assert.equal(await store.getRepo("model", "alice/doomed"), null);
        assert.deepEqual(await store.listRepos(), [kept]);
        assert.deepEqual(await snapshot(store, doomed.id, [init.commit.oid, commit.oid], [EMPTY_TREE.oid, tree.oid]), {
          repo: null,
          revisions: [],
          commits: [null, null],
          trees: [null, null],
        });
        assert.equal(await store.isFileInRepo(shared.hash, doomed.id), false);
        assert.equal(await store.isFileInRepo(own.hash, doomed.id), false);
        assert.equal(await store.findFileBySha256(doomed.id, shared.sha256!), null);
        assert.deepEqual(await store.listHubTokens(), [{ ...both, repos: [kept.id] }, { ...only, repos: [] }, all], "token links go; tokens stay");

        // The rows are gone, not just unreachable: no export names the repository.
        const rowsNaming = async (repoId: number) => ({
          links: (await store.scanFileRepoLinks(null, 1000)).rows.filter((row) => row.repoId === repoId).length,
          sha256: (await store.scanSha256Index(null, 1000)).rows.filter((row) => row.repoId === repoId).length,
          commits: (await store.scanCommits(null, 1000)).rows.filter((row) => row.repoId === repoId).length,
          trees: (await store.scanTrees(null, 1000)).rows.filter((row) => row.repoId === repoId).length,
        });
        assert.deepEqual(await rowsNaming(doomed.id), { links: 0, sha256: 0, commits: 0, trees: 0 });
        assert.deepEqual(await rowsNaming(kept.id), { links: 1, sha256: 1, commits: 2, trees: 2 });

        assert.deepEqual(
          await snapshot(store, kept.id, [init.commit.oid, commit.oid], [EMPTY_TREE.oid, tree.oid]),
          keptBefore,
          "the other repository is untouched",
        );
        assert.equal(await store.isFileInRepo(shared.hash, kept.id), true);
        assert.deepEqual(await store.findFileBySha256(kept.id, shared.sha256!), shared.hash);
        assert.deepEqual(await store.getFile(own.hash), own, "file records are shared by content and stay");

        assert.equal(await store.deleteRepo(doomed.id), false, "deleting again reports no repository");
        assert.equal(await store.deleteRepo(doomed.id + 1000), false);
        await assert.rejects(store.createRevision(doomed.id, "dev", "branch"), NotFoundError);
        await assert.rejects(store.registerShard({ shardHash: hashOf("late"), repoId: doomed.id, files: [], dedupEntries: [] }), NotFoundError);
      }),
    );

    it(
      "never reuses the id of a deleted repository; the name is free again and starts empty",
      withStore(async (store) => {
        const init = initOf(false);
        const first = await store.createRepo("model", "alice/first");
        const newest = await store.createRepo("model", "alice/bert", init);
        assert.equal(await store.deleteRepo(newest.id), true);
        const again = await store.createRepo("model", "alice/bert");
        assert.ok(again.id > newest.id, `the new repository has id ${again.id}, the deleted one had ${newest.id}`);
        assert.equal(await store.getCommit(again.id, init.commit.oid), null);
        assert.equal((await store.getRevision(again.id, "main"))?.commitOid, null);
        assert.deepEqual(
          (await store.listRepos()).map((repo) => repo.id),
          [first.id, again.id],
        );
        assert.equal(await store.deleteRepo(again.id), true);
        const imported = await store.importRepo({ type: "space", name: "alice/imported", createdAt: new Date(1_000), private: false });
        assert.ok(imported.repo.id > again.id, "imports take fresh ids too");
      }),
    );
  });
}
