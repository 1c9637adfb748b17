/**
 * The hub's repositories and their revisions in the scale-out store. A repository and its
 * `main` branch are written by one statement; with a `RepoInit`, that statement and the
 * initial tree and commit share one transaction. Deleting a repository is one statement whose
 * foreign keys cascade to everything that is only its (see schema.ts).
 */
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import type { Repo, RepoInit, RepoType, Revision, RevisionKind } from "../store.js";
import { isViolation, PG_FOREIGN_KEY_VIOLATION, PG_UNIQUE_VIOLATION, type PostgresConnection, type NamedStatements } from "./connection.js";
import { encodeHistory, type PostgresHistoryRecords } from "./history.js";

export interface RepoRow {
  id: number;
  type: RepoType;
  name: string;
  created_at: Date;
  private: boolean;
  /** Set for a mirrored repository (its last use); null for castor's own. */
  mirror_used_at: Date | null;
}
export interface RevisionRow {
  repo_id: number;
  name: string;
  kind: RevisionKind;
  created_at: Date;
  commit_oid: string | null;
}

export const REPO_COLUMNS = "id, type, name, created_at, private, mirror_used_at";
export const REVISION_COLUMNS = "repo_id, name, kind, created_at, commit_oid";

const REPO_SQL = {
  createRepo: `
    WITH repo AS (
      INSERT INTO repos (type, name, created_at, private) VALUES ($1, $2, $3, $4) RETURNING ${REPO_COLUMNS}
    ), main AS (
      INSERT INTO revisions (repo_id, name, kind, created_at, commit_oid) SELECT id, 'main', 'branch', created_at, $5::text FROM repo
    )
    SELECT ${REPO_COLUMNS} FROM repo`,
  getRepo: `SELECT ${REPO_COLUMNS} FROM repos WHERE type = $1 AND name = $2`,
  getRepoById: `SELECT ${REPO_COLUMNS} FROM repos WHERE id = $1`,
  listRepos: `SELECT ${REPO_COLUMNS} FROM repos ORDER BY id`,
  setRepoPrivate: `UPDATE repos SET private = $2 WHERE id = $1`,
  renameRepo: `UPDATE repos SET name = $2 WHERE id = $1`,
  deleteRepo: `DELETE FROM repos WHERE id = $1`,
  createRevision: `
    INSERT INTO revisions (repo_id, name, kind, created_at, commit_oid) VALUES ($1, $2, $3, $4, $5)
    RETURNING ${REVISION_COLUMNS}`,
  deleteRevision: `DELETE FROM revisions WHERE repo_id = $1 AND name = $2`,
  getRevision: `SELECT ${REVISION_COLUMNS} FROM revisions WHERE repo_id = $1 AND name = $2`,
  listRevisions: `SELECT ${REVISION_COLUMNS} FROM revisions WHERE repo_id = $1 ORDER BY seq`,
} as const;

export class PostgresRepoRecords {
  private readonly sql: NamedStatements<typeof REPO_SQL>;

  constructor(
    private readonly connection: PostgresConnection,
    /** Writes a new repository's initial tree and commit. */
    private readonly history: PostgresHistoryRecords,
  ) {
    this.sql = connection.statements(REPO_SQL);
  }

  async createRepo(type: RepoType, name: string, init?: RepoInit): Promise<Repo> {
    const initial = init === undefined ? undefined : encodeHistory(init.commit, [init.tree]);
    const values = [type, name, new Date(), init === undefined || init.private, init?.commit.oid ?? null];
    try {
      if (initial === undefined) return toRepo((await this.sql.run<RepoRow>("createRepo", values)).rows[0]);
      return await this.connection.inTransaction(async (client) => {
        const { rows } = await this.connection.queryOn<RepoRow>(client, "createRepo", REPO_SQL.createRepo, values);
        await this.history.insertHistory(client, rows[0].id, initial);
        return toRepo(rows[0]);
      });
    } catch (err) {
      if (isViolation(err, PG_UNIQUE_VIOLATION)) throw new AlreadyExistsError(`repository ${type}:${name} already exists`);
      throw err;
    }
  }

  async getRepo(type: RepoType, name: string): Promise<Repo | null> {
    const { rows } = await this.sql.run<RepoRow>("getRepo", [type, name]);
    return rows.length > 0 ? toRepo(rows[0]) : null;
  }

  async getRepoById(id: number): Promise<Repo | null> {
    const { rows } = await this.sql.run<RepoRow>("getRepoById", [id]);
    return rows.length > 0 ? toRepo(rows[0]) : null;
  }

  async listRepos(): Promise<Repo[]> {
    return (await this.sql.run<RepoRow>("listRepos", [])).rows.map(toRepo);
  }

  async setRepoPrivate(repoId: number, isPrivate: boolean): Promise<boolean> {
    return ((await this.sql.run("setRepoPrivate", [repoId, isPrivate])).rowCount ?? 0) > 0;
  }

  async renameRepo(repoId: number, name: string): Promise<boolean> {
    try {
      return ((await this.sql.run("renameRepo", [repoId, name])).rowCount ?? 0) > 0;
    } catch (err) {
      if (isViolation(err, PG_UNIQUE_VIOLATION)) throw new AlreadyExistsError(`a repository named ${name} of that type already exists`);
      throw err;
    }
  }

  async deleteRepo(repoId: number): Promise<boolean> {
    return ((await this.sql.run("deleteRepo", [repoId])).rowCount ?? 0) > 0;
  }

  async createRevision(repoId: number, name: string, kind: RevisionKind, commitOid: string | null = null): Promise<Revision> {
    try {
      const { rows } = await this.sql.run<RevisionRow>("createRevision", [repoId, name, kind, new Date(), commitOid]);
      return toRevision(rows[0]);
    } catch (err) {
      if (isViolation(err, PG_UNIQUE_VIOLATION)) {
        throw new AlreadyExistsError(`revision ${JSON.stringify(name)} already exists in repository #${repoId}`);
      }
      if (isViolation(err, PG_FOREIGN_KEY_VIOLATION)) throw new NotFoundError(`no repository with id ${repoId}`);
      throw err;
    }
  }

  async deleteRevision(repoId: number, name: string): Promise<boolean> {
    return ((await this.sql.run("deleteRevision", [repoId, name])).rowCount ?? 0) > 0;
  }

  async getRevision(repoId: number, name: string): Promise<Revision | null> {
    const { rows } = await this.sql.run<RevisionRow>("getRevision", [repoId, name]);
    return rows.length > 0 ? toRevision(rows[0]) : null;
  }

  async listRevisions(repoId: number): Promise<Revision[]> {
    return (await this.sql.run<RevisionRow>("listRevisions", [repoId])).rows.map(toRevision);
  }
}

export function toRepo(row: RepoRow): Repo {
  const repo: Repo = { id: row.id, type: row.type, name: row.name, createdAt: row.created_at, private: row.private };
  if (row.mirror_used_at !== null && row.mirror_used_at !== undefined) repo.mirror = true;
  return repo;
}

export function toRevision(row: RevisionRow): Revision {
  return { repoId: row.repo_id, name: row.name, kind: row.kind, createdAt: row.created_at, commitOid: row.commit_oid };
}
