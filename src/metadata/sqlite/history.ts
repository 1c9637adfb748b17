/**
 * The hub's histories in the embedded store: commits and trees, keyed by (repository, oid),
 * and moving a branch to a new commit. Everything runs synchronously inside one IMMEDIATE
 * transaction, which holds the database's write lock: the compare-and-swap of a branch head
 * cannot interleave with another writer, in this process or any other.
 */
import type Database from "better-sqlite3";
import { checkCommit, decodeStringList, decodeTreeEntries, distinctTrees, encodeTreeEntries, treeEntriesFromBytes, treeEntriesToBytes } from "../history.js";
import type { BranchAdvance, BranchAdvanceOutcome, CommitRecord, RefChange, RefChangeOutcome, RevisionKind, TreeRecord } from "../store.js";
import type { SqliteConnection } from "./connection.js";

export interface CommitRow {
  repo_id: number;
  oid: string;
  tree_oid: string;
  parent_oids: string;
  title: string;
  message: string;
  author: string;
  created_at: number;
  object: string;
}
export interface TreeRow {
  repo_id: number;
  oid: string;
  /** ASCII JSON (../history.ts). */
  entries: Buffer;
}

export interface HistoryStatements {
  insertTree: Database.Statement<[number, string, Uint8Array]>;
  insertCommit: Database.Statement<[number, string, string, string, string, string, string, number, string]>;
  getCommit: Database.Statement<[number, string], CommitRow>;
  commitOidsWithPrefix: Database.Statement<[number, string, string, number], { oid: string }>;
  getTree: Database.Statement<[number, string], TreeRow>;
  branchHead: Database.Statement<[number, string], { kind: RevisionKind; commit_oid: string | null }>;
  moveBranch: Database.Statement<[string, number, string, string | null]>;
  insertRef: Database.Statement<[number, string, RevisionKind, number, string]>;
  moveRef: Database.Statement<[string, number, string, RevisionKind, string]>;
  deleteRef: Database.Statement<[number, string, RevisionKind, string]>;
}

function prepareHistoryStatements(db: Database.Database): HistoryStatements {
  return {
    insertTree: db.prepare<[number, string, Uint8Array]>("INSERT INTO trees (repo_id, oid, entries) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"),
    insertCommit: db.prepare<[number, string, string, string, string, string, string, number, string]>(
      `INSERT INTO commits (repo_id, oid, tree_oid, parent_oids, title, message, author, created_at, object)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
    ),
    getCommit: db.prepare<[number, string], CommitRow>("SELECT * FROM commits WHERE repo_id = ? AND oid = ?"),
    // A range of the primary key: ids with the prefix sort between it and the prefix + "g".
    commitOidsWithPrefix: db.prepare<[number, string, string, number], { oid: string }>(
      "SELECT oid FROM commits WHERE repo_id = ? AND oid >= ? AND oid < ? ORDER BY oid LIMIT ?",
    ),
    getTree: db.prepare<[number, string], TreeRow>("SELECT * FROM trees WHERE repo_id = ? AND oid = ?"),
    branchHead: db.prepare<[number, string], { kind: RevisionKind; commit_oid: string | null }>(
      "SELECT kind, commit_oid FROM revisions WHERE repo_id = ? AND name = ?",
    ),
    // The compare-and-swap itself (`IS` is SQLite's IS NOT DISTINCT FROM).
    moveBranch: db.prepare<[string, number, string, string | null]>(
      "UPDATE revisions SET commit_oid = ? WHERE repo_id = ? AND name = ? AND kind = 'branch' AND commit_oid IS ?",
    ),
    insertRef: db.prepare<[number, string, RevisionKind, number, string]>(
      "INSERT INTO revisions (repo_id, name, kind, created_at, commit_oid) VALUES (?, ?, ?, ?, ?)",
    ),
    moveRef: db.prepare<[string, number, string, RevisionKind, string]>(
      "UPDATE revisions SET commit_oid = ? WHERE repo_id = ? AND name = ? AND kind = ? AND commit_oid = ?",
    ),
    deleteRef: db.prepare<[number, string, RevisionKind, string]>("DELETE FROM revisions WHERE repo_id = ? AND name = ? AND kind = ? AND commit_oid = ?"),
  };
}

/** Commits and their trees checked and encoded, ready to insert inside a transaction. */
export interface EncodedHistory {
  commits: { commit: CommitRecord; parentOids: string }[];
  trees: { oid: string; entries: Buffer }[];
}

/** Checks and encodes before any transaction starts, so a bad record costs no lock and stores nothing. */
export function encodeHistory(commits: CommitRecord | readonly CommitRecord[], trees: readonly TreeRecord[]): EncodedHistory {
  const list = Array.isArray(commits) ? commits : [commits as CommitRecord];
  for (const commit of list) checkCommit(commit);
  return {
    commits: list.map((commit) => ({ commit, parentOids: JSON.stringify(commit.parentOids) })),
    trees: distinctTrees(trees).map((tree) => ({ oid: tree.oid, entries: treeEntriesToBytes(encodeTreeEntries(tree)) })),
  };
}

export class SqliteHistoryRecords {
  readonly sql: HistoryStatements;
  private readonly db: Database.Database;

  constructor(private readonly connection: SqliteConnection) {
    this.db = connection.db;
    this.sql = prepareHistoryStatements(this.db);
  }

  /** Inserts the trees and the commits (each ignored when present); runs inside the caller's transaction. */
  insertHistory(repoId: number, history: EncodedHistory): void {
    for (const tree of history.trees) this.sql.insertTree.run(repoId, tree.oid, tree.entries);
    for (const { commit, parentOids } of history.commits) {
      this.sql.insertCommit.run(
        repoId,
        commit.oid,
        commit.treeOid,
        parentOids,
        commit.title,
        commit.message,
        commit.author,
        commit.createdAt.getTime(),
        commit.object,
      );
    }
  }

  async getCommit(repoId: number, oid: string): Promise<CommitRecord | null> {
    const row = this.sql.getCommit.get(repoId, oid);
    return row ? toCommit(row) : null;
  }

  async commitOidsWithPrefix(repoId: number, prefix: string, limit: number): Promise<string[]> {
    return this.sql.commitOidsWithPrefix.all(repoId, prefix, `${prefix}g`, limit).map((row) => row.oid);
  }

  async getTree(repoId: number, oid: string): Promise<TreeRecord | null> {
    const row = this.sql.getTree.get(repoId, oid);
    return row ? toTree(row) : null;
  }

  async advanceBranch(advance: BranchAdvance): Promise<BranchAdvanceOutcome> {
    const history = encodeHistory(advance.commit, advance.trees);
    return this.connection.write(() =>
      this.db
        .transaction((): BranchAdvanceOutcome => {
          const head = this.sql.branchHead.get(advance.repoId, advance.branch);
          if (head === undefined || head.kind !== "branch") return "no_branch";
          if (head.commit_oid !== advance.expectedHead) return "moved";
          this.insertHistory(advance.repoId, history);
          // Always one row under the write lock; checked anyway, and a miss rolls everything back.
          if (this.sql.moveBranch.run(advance.commit.oid, advance.repoId, advance.branch, advance.expectedHead).changes !== 1) {
            throw new Error(`branch ${JSON.stringify(advance.branch)} of repository #${advance.repoId} changed under the write lock`);
          }
          return "advanced";
        })
        .immediate(),
    );
  }

  async updateRef(change: RefChange): Promise<RefChangeOutcome> {
    const history = encodeHistory(change.commits, change.trees);
    return this.connection.write(() =>
      this.db
        .transaction((): RefChangeOutcome => {
          const current = this.sql.branchHead.get(change.repoId, change.name);
          const matches = change.expected === null ? current === undefined : current?.kind === change.kind && current.commit_oid === change.expected;
          if (!matches) return "moved";
          if (change.target === null) {
            if (change.expected !== null) this.sql.deleteRef.run(change.repoId, change.name, change.kind, change.expected);
            return "changed";
          }
          this.insertHistory(change.repoId, history);
          if (change.expected === null) this.sql.insertRef.run(change.repoId, change.name, change.kind, Date.now(), change.target);
          // Always one row under the write lock; checked anyway, and a miss rolls everything back.
          else if (this.sql.moveRef.run(change.target, change.repoId, change.name, change.kind, change.expected).changes !== 1) {
            throw new Error(`ref ${JSON.stringify(change.name)} of repository #${change.repoId} changed under the write lock`);
          }
          return "changed";
        })
        .immediate(),
    );
  }
}

export function toCommit(row: CommitRow): CommitRecord {
  return {
    oid: row.oid,
    treeOid: row.tree_oid,
    parentOids: decodeStringList(row.parent_oids, `parent oids of commit ${row.oid} in repository #${row.repo_id}`),
    title: row.title,
    message: row.message,
    author: row.author,
    createdAt: new Date(row.created_at),
    object: row.object,
  };
}

export function toTree(row: TreeRow): TreeRecord {
  return { oid: row.oid, entries: decodeTreeEntries(treeEntriesFromBytes(row.entries, row.repo_id, row.oid), row.repo_id, row.oid) };
}
