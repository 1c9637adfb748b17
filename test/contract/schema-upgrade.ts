/**
 * What every backend promises when it opens a database written before histories existed
 * (SQLite schema version 2, PostgreSQL version 1): the old rows read as before, with the
 * defaults the upgrade gives them, and the new records work on them. Each backend writes the
 * old schema and the rows of `PRE_HISTORY_ROWS` with its own SQL, opens a store on it and
 * hands it to `checkUpgradedFromBeforeHistories`.
 */
import assert from "node:assert/strict";
import type { MetadataStore } from "../../src/metadata/store.js";

/**
 * The rows to seed (times in milliseconds): two repositories, `model alice/old` at 1000 and
 * `dataset alice/newest` at 2000; on alice/old the branch main (1000) and the tag v1 (1500), on
 * alice/newest the branch main (2000); and the write token `tok_old` with this secret hash,
 * created at 3000, limited to both repositories.
 */
export const PRE_HISTORY_ROWS = { tokenSecretHash: "a".repeat(64) } as const;

/** Checks `store`, just opened on the seeded database, given the ids of alice/old and alice/newest. */
export async function checkUpgradedFromBeforeHistories(store: MetadataStore, [oldId, newestId]: readonly [number, number]): Promise<void> {
  const secretHash = PRE_HISTORY_ROWS.tokenSecretHash;
  // Repositories from before visibility existed are private; revisions are at no commit; tokens have no owner.
  assert.deepEqual(await store.getRepo("model", "alice/old"), { id: oldId, type: "model", name: "alice/old", createdAt: new Date(1000), private: true });
  assert.deepEqual(
    (await store.listRevisions(oldId)).map((r) => [r.name, r.kind, r.createdAt.getTime(), r.commitOid]),
    [
      ["main", "branch", 1000, null],
      ["v1", "tag", 1500, null],
    ],
  );
  const token = await store.findHubTokenBySecretHash(secretHash);
  assert.deepEqual([token?.repos, token?.owner, token?.namespaces], [[oldId, newestId], null, []]);

  // The new records work on the old rows: a first commit, visibility, deletion without id reuse.
  const commit = {
    oid: "1".repeat(40),
    treeOid: "2".repeat(40),
    parentOids: [],
    title: "Initial",
    message: "Initial\n",
    author: "alice",
    createdAt: new Date(5000),
    object: "tree …",
  };
  assert.equal(
    await store.advanceBranch({ repoId: oldId, branch: "main", expectedHead: null, commit, trees: [{ oid: commit.treeOid, entries: [] }] }),
    "advanced",
  );
  assert.deepEqual(await store.getCommit(oldId, commit.oid), commit);
  assert.equal(await store.setRepoPrivate(oldId, false), true);
  assert.equal(await store.deleteRepo(newestId), true);
  assert.deepEqual((await store.findHubTokenBySecretHash(secretHash))?.repos, [oldId]);
  assert.ok((await store.createRepo("space", "alice/next")).id > newestId, "the deleted newest id is not reused");
}
