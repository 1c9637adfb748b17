/**
 * The hub's repositories and their revisions in the embedded store. Creating a repository
 * writes it, its `main` branch and (given a `RepoInit`) its initial tree and commit in one
 * transaction; deleting one cascades to everything that is only its (see schema.ts).
 */
import type Database from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import type { Repo, RepoInit, RepoType, Revision, RevisionKind } from "../store.js";
import type { SqliteConnection } from "./connection.js";
import { encodeHistory, type SqliteHistoryRecords } from "./history.js";
import { isConstraint } from "./schema.js";

export interface RepoRow {
  id: number;
  type: RepoType;
  name: string;
  created_at: number;
  private: 0 | 1;
  /** Set for a mirrored repository (its last use); null for castor's own. */
  mirror_used_at: number | null;
}
export interface RevisionRow {
  repo_id: number;
  name: string;
  kind: RevisionKind;
  created_at: number;
  commit_oid: string | null;
}
export interface RepoStatements {
  insertRepo: Database.Statement<[string, string, number, number], RepoRow>;
  getRepo: Database.Statement<[string, string], RepoRow>;
  getRepoById: Database.Statement<[number], RepoRow>;
  listRepos: Database.Statement<[], RepoRow>;
  setRepoPrivate: Database.Statement<[number, number]>;
  renameRepo: Database.Statement<[string, number]>;
  deleteRepo: Database.Statement<[number]>;
  insertRevision: Database.Statement<[number, string, string, number, string | null], RevisionRow>;
  deleteRevision: Database.Statement<[number, string]>;
  getRevision: Database.Statement<[number, string], RevisionRow>;
  listRevisions: Database.Statement<[number], RevisionRow>;
}

/**
 * The id of a new repository: after every id in use and every id deleted, so an id is never
 * reused (schema.ts keeps the largest deleted one).
 */
export const REPO_ID_AFTER_DELETIONS = "(SELECT max(coalesce((SELECT max(id) FROM repos), 0), coalesce((SELECT max_id FROM deleted_repo_ids), 0)) + 1)";

function prepareRepoStatements(db: Database.Database): RepoStatements {
  return {
    insertRepo: db.prepare<[string, string, number, number], RepoRow>(
      `INSERT INTO repos (id, type, name, created_at, private) VALUES (${REPO_ID_AFTER_DELETIONS}, ?, ?, ?, ?) RETURNING *`,
    ),
    getRepo: db.prepare<[string, string], RepoRow>("SELECT * FROM repos WHERE type = ? AND name = ?"),
    getRepoById: db.prepare<[number], RepoRow>("SELECT * FROM repos WHERE id = ?"),
    listRepos: db.prepare<[], RepoRow>("SELECT * FROM repos ORDER BY id"),
    setRepoPrivate: db.prepare<[number, number]>("UPDATE repos SET private = ? WHERE id = ?"),
    renameRepo: db.prepare<[string, number]>("UPDATE repos SET name = ? WHERE id = ?"),
    deleteRepo: db.prepare<[number]>("DELETE FROM repos WHERE id = ?"),
    insertRevision: db.prepare<[number, string, string, number, string | null], RevisionRow>(
      "INSERT INTO revisions (repo_id, name, kind, created_at, commit_oid) VALUES (?, ?, ?, ?, ?) RETURNING *",
    ),
    deleteRevision: db.prepare<[number, string]>("DELETE FROM revisions WHERE repo_id = ? AND name = ?"),
    getRevision: db.prepare<[number, string], RevisionRow>("SELECT * FROM revisions WHERE repo_id = ? AND name = ?"),
    listRevisions: db.prepare<[number], RevisionRow>("SELECT * FROM revisions WHERE repo_id = ? ORDER BY rowid"),
  };
}

export class SqliteRepoRecords {
  readonly sql: RepoStatements;
  private readonly db: Database.Database;

  constructor(
    private readonly connection: SqliteConnection,
    /** Writes a new repository's initial tree and commit. */
    private readonly history: SqliteHistoryRecords,
  ) {
    this.db = connection.db;
    this.sql = prepareRepoStatements(this.db);
  }

  async createRepo(type: RepoType, name: string, init?: RepoInit): Promise<Repo> {
    const initial = init === undefined ? undefined : encodeHistory(init.commit, [init.tree]);
    return this.connection.write(() => {
      const create = this.db.transaction(() => {
        const now = Date.now();
        const row = this.sql.insertRepo.get(type, name, now, init === undefined || init.private ? 1 : 0)!;
        if (initial !== undefined) this.history.insertHistory(row.id, initial);
        this.sql.insertRevision.run(row.id, "main", "branch", now, init?.commit.oid ?? null);
        return row;
      });
      try {
        return toRepo(create.immediate());
      } catch (err) {
        if (isConstraint(err, "SQLITE_CONSTRAINT_UNIQUE")) {
          throw new AlreadyExistsError(`repository ${type}:${name} already exists`);
        }
        throw err;
      }
    });
  }

  async getRepo(type: RepoType, name: string): Promise<Repo | null> {
    const row = this.sql.getRepo.get(type, name);
    return row ? toRepo(row) : null;
  }

  async getRepoById(id: number): Promise<Repo | null> {
    const row = this.sql.getRepoById.get(id);
    return row ? toRepo(row) : null;
  }

  async listRepos(): Promise<Repo[]> {
    return this.sql.listRepos.all().map(toRepo);
  }

  async setRepoPrivate(repoId: number, isPrivate: boolean): Promise<boolean> {
    return this.connection.write(() => this.sql.setRepoPrivate.run(isPrivate ? 1 : 0, repoId).changes > 0);
  }

  async renameRepo(repoId: number, name: string): Promise<boolean> {
    return this.connection.write(() => {
      try {
        return this.sql.renameRepo.run(name, repoId).changes > 0;
      } catch (err) {
        if (isConstraint(err, "SQLITE_CONSTRAINT_UNIQUE")) throw new AlreadyExistsError(`a repository named ${name} of that type already exists`);
        throw err;
      }
    });
  }

  async deleteRepo(repoId: number): Promise<boolean> {
    // One statement: the foreign keys' ON DELETE CASCADE removes the rest in the same transaction.
    return this.connection.write(() => this.sql.deleteRepo.run(repoId).changes > 0);
  }

  async createRevision(repoId: number, name: string, kind: RevisionKind, commitOid: string | null = null): Promise<Revision> {
    return this.connection.write(() => {
      try {
        return toRevision(this.sql.insertRevision.get(repoId, name, kind, Date.now(), commitOid)!);
      } catch (err) {
        if (isConstraint(err, "SQLITE_CONSTRAINT_PRIMARYKEY") || isConstraint(err, "SQLITE_CONSTRAINT_UNIQUE")) {
          throw new AlreadyExistsError(`revision ${JSON.stringify(name)} already exists in repository #${repoId}`);
        }
        if (isConstraint(err, "SQLITE_CONSTRAINT_FOREIGNKEY")) {
          throw new NotFoundError(`no repository with id ${repoId}`);
        }
        throw err;
      }
    });
  }

  async deleteRevision(repoId: number, name: string): Promise<boolean> {
    return this.connection.write(() => this.sql.deleteRevision.run(repoId, name).changes > 0);
  }

  async getRevision(repoId: number, name: string): Promise<Revision | null> {
    const row = this.sql.getRevision.get(repoId, name);
    return row ? toRevision(row) : null;
  }

  async listRevisions(repoId: number): Promise<Revision[]> {
    return this.sql.listRevisions.all(repoId).map(toRevision);
  }
}

export function toRepo(row: RepoRow): Repo {
  const repo: Repo = { id: row.id, type: row.type, name: row.name, createdAt: new Date(row.created_at), private: row.private === 1 };
  if (row.mirror_used_at !== null && row.mirror_used_at !== undefined) repo.mirror = true;
  return repo;
}

export function toRevision(row: RevisionRow): Revision {
  return { repoId: row.repo_id, name: row.name, kind: row.kind, createdAt: new Date(row.created_at), commitOid: row.commit_oid };
}
