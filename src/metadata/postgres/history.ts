/**
 * The hub's histories in the scale-out store: commits and trees, keyed by (repository, oid),
 * and moving a branch to a new commit.
 *
 * `advanceBranch` is one transaction that starts with the compare-and-swap: a conditional
 * UPDATE of the branch row. It locks that row, so a second advance of the same branch — on
 * this node or another — waits for the first to end and then re-checks its condition against
 * the committed head (PostgreSQL re-evaluates an UPDATE's WHERE on the newest row version), so
 * of two advances from the same head exactly one matches. Only then are the trees and the
 * commit inserted, in oid order so that two advances sharing trees lock them in the same order.
 */
import type { PoolClient } from "pg";
import { checkCommit, decodeTreeEntries, distinctTrees, encodeTreeEntries } from "../history.js";
import type { BranchAdvance, BranchAdvanceOutcome, CommitRecord, RefChange, RefChangeOutcome, RevisionKind, TreeRecord } from "../store.js";
import type { PostgresConnection, NamedStatements } from "./connection.js";

export interface CommitRow {
  repo_id: number;
  oid: string;
  tree_oid: string;
  parent_oids: string[];
  title: string;
  message: string;
  author: string;
  created_at: Date;
  object: string;
}
export interface TreeRow {
  repo_id: number;
  oid: string;
  entries: string;
}

export const COMMIT_COLUMNS = "repo_id, oid, tree_oid, parent_oids, title, message, author, created_at, object";

const HISTORY_SQL = {
  getCommit: `SELECT ${COMMIT_COLUMNS} FROM commits WHERE repo_id = $1 AND oid = $2`,
  commitOidsWithPrefix: `SELECT oid FROM commits WHERE repo_id = $1 AND starts_with(oid, $2) ORDER BY oid COLLATE "C" LIMIT $3`,
  getTree: `SELECT repo_id, oid, entries FROM trees WHERE repo_id = $1 AND oid = $2`,
  moveBranch: `
    UPDATE revisions SET commit_oid = $3
    WHERE repo_id = $1 AND name = $2 AND kind = 'branch' AND commit_oid IS NOT DISTINCT FROM $4::text`,
  revisionKind: `SELECT kind FROM revisions WHERE repo_id = $1 AND name = $2`,
  insertTrees: `
    INSERT INTO trees (repo_id, oid, entries)
    SELECT $1::bigint, t.oid, t.entries FROM unnest($2::text[], $3::text[]) AS t (oid, entries)
    ORDER BY t.oid COLLATE "C"
    ON CONFLICT DO NOTHING`,
  insertCommit: `
    INSERT INTO commits (${COMMIT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
    ON CONFLICT DO NOTHING`,
  // A ref change's compare-and-swap, in its three forms; each locks the row it changes.
  moveRef: `UPDATE revisions SET commit_oid = $5 WHERE repo_id = $1 AND name = $2 AND kind = $3 AND commit_oid = $4`,
  deleteRef: `DELETE FROM revisions WHERE repo_id = $1 AND name = $2 AND kind = $3 AND commit_oid = $4`,
  insertRef: `
    INSERT INTO revisions (repo_id, name, kind, created_at, commit_oid) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT DO NOTHING`,
} as const;

/** Commits and their trees checked and encoded before any transaction starts (a bad record holds no lock). */
export interface EncodedHistory {
  commits: CommitRecord[];
  treeOids: string[];
  treeEntries: string[];
}

export function encodeHistory(commits: CommitRecord | readonly CommitRecord[], trees: readonly TreeRecord[]): EncodedHistory {
  const list = Array.isArray(commits) ? [...commits] : [commits as CommitRecord];
  for (const commit of list) checkCommit(commit);
  const distinct = distinctTrees(trees);
  return { commits: list, treeOids: distinct.map((tree) => tree.oid), treeEntries: distinct.map(encodeTreeEntries) };
}

export class PostgresHistoryRecords {
  private readonly sql: NamedStatements<typeof HISTORY_SQL>;

  constructor(private readonly connection: PostgresConnection) {
    this.sql = connection.statements(HISTORY_SQL);
  }

  /** Inserts the trees and the commits (each ignored when present), on the caller's transaction. */
  async insertHistory(client: PoolClient, repoId: number, history: EncodedHistory): Promise<void> {
    if (history.treeOids.length > 0) await this.sql.runOn(client, "insertTrees", [repoId, history.treeOids, history.treeEntries]);
    for (const commit of history.commits) {
      await this.sql.runOn(client, "insertCommit", [
        repoId,
        commit.oid,
        commit.treeOid,
        commit.parentOids,
        commit.title,
        commit.message,
        commit.author,
        commit.createdAt,
        commit.object,
      ]);
    }
  }

  async getCommit(repoId: number, oid: string): Promise<CommitRecord | null> {
    const { rows } = await this.sql.run<CommitRow>("getCommit", [repoId, oid]);
    return rows.length > 0 ? toCommit(rows[0]) : null;
  }

  async commitOidsWithPrefix(repoId: number, prefix: string, limit: number): Promise<string[]> {
    const { rows } = await this.sql.run<{ oid: string }>("commitOidsWithPrefix", [repoId, prefix, limit]);
    return rows.map((row) => row.oid);
  }

  async getTree(repoId: number, oid: string): Promise<TreeRecord | null> {
    const { rows } = await this.sql.run<TreeRow>("getTree", [repoId, oid]);
    return rows.length > 0 ? toTree(rows[0]) : null;
  }

  async advanceBranch(advance: BranchAdvance): Promise<BranchAdvanceOutcome> {
    const history = encodeHistory(advance.commit, advance.trees);
    return this.connection.inTransaction(async (client): Promise<BranchAdvanceOutcome> => {
      const moved = await this.sql.runOn(client, "moveBranch", [advance.repoId, advance.branch, advance.commit.oid, advance.expectedHead]);
      if (moved.rowCount !== 1) {
        // Nothing was written: the transaction ends with nothing to commit. Tell why.
        const { rows } = await this.sql.runOn<{ kind: RevisionKind }>(client, "revisionKind", [advance.repoId, advance.branch]);
        return rows.length === 0 || rows[0].kind !== "branch" ? "no_branch" : "moved";
      }
      await this.insertHistory(client, advance.repoId, history);
      return "advanced";
    });
  }

  /**
   * One transaction that starts with the compare-and-swap, as `advanceBranch`: the conditional
   * UPDATE or DELETE locks the revision's row (a concurrent change waits, then finds its
   * condition false); a creation inserts the row, and a concurrent one finds the name taken.
   */
  async updateRef(change: RefChange): Promise<RefChangeOutcome> {
    const history = encodeHistory(change.commits, change.trees);
    return this.connection.inTransaction(async (client): Promise<RefChangeOutcome> => {
      const { repoId, name, kind, expected, target } = change;
      let done: boolean;
      if (expected === null) {
        done = target !== null && ((await this.sql.runOn(client, "insertRef", [repoId, name, kind, new Date(), target])).rowCount ?? 0) === 1;
      } else if (target === null) {
        done = ((await this.sql.runOn(client, "deleteRef", [repoId, name, kind, expected])).rowCount ?? 0) === 1;
      } else {
        done = ((await this.sql.runOn(client, "moveRef", [repoId, name, kind, expected, target])).rowCount ?? 0) === 1;
      }
      // Nothing was written otherwise: the transaction ends with nothing to commit.
      if (!done) return "moved";
      if (target !== null) await this.insertHistory(client, repoId, history);
      return "changed";
    });
  }
}

export function toCommit(row: CommitRow): CommitRecord {
  return {
    oid: row.oid,
    treeOid: row.tree_oid,
    parentOids: row.parent_oids,
    title: row.title,
    message: row.message,
    author: row.author,
    createdAt: row.created_at,
    object: row.object,
  };
}

export function toTree(row: TreeRow): TreeRecord {
  return { oid: row.oid, entries: decodeTreeEntries(row.entries, row.repo_id, row.oid) };
}
