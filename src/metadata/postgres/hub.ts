/**
 * The hub's records in the scale-out store: repositories, their revisions, and hub tokens.
 * Statements that can be single statements are (creating a repository with its `main`
 * branch, a token with its repository links): atomic without holding a pooled connection
 * across calls.
 */
import type pg from "pg";
import type { QueryResultRow } from "pg";
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import type { Access, HubToken, NewHubToken, Repo, RepoType, Revision, RevisionKind } from "../store.js";
import { isViolation, PG_FOREIGN_KEY_VIOLATION, PG_UNIQUE_VIOLATION, type PostgresConnection } from "./connection.js";

export interface RepoRow {
  id: number;
  type: RepoType;
  name: string;
  created_at: Date;
}
interface RevisionRow {
  repo_id: number;
  name: string;
  kind: RevisionKind;
  created_at: Date;
}
interface TokenRow {
  id: string;
  secret_hash: string;
  access: Access;
  all_repos: boolean;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  /** Ascending; empty for all-repos tokens. */
  repo_ids: number[];
}

export const REPO_COLUMNS = "id, type, name, created_at";
const REVISION_COLUMNS = "repo_id, name, kind, created_at";
const TOKEN_COLUMNS = `t.id, t.secret_hash, t.access, t.all_repos, t.created_at, t.expires_at, t.revoked_at,
  ARRAY(SELECT l.repo_id FROM hub_token_repos l WHERE l.token_id = t.id ORDER BY l.repo_id) AS repo_ids`;

const HUB_SQL = {
  createRepo: `
    WITH repo AS (
      INSERT INTO repos (type, name, created_at) VALUES ($1, $2, $3) RETURNING ${REPO_COLUMNS}
    ), main AS (
      INSERT INTO revisions (repo_id, name, kind, created_at) SELECT id, 'main', 'branch', created_at FROM repo
    )
    SELECT ${REPO_COLUMNS} FROM repo`,
  getRepo: `SELECT ${REPO_COLUMNS} FROM repos WHERE type = $1 AND name = $2`,
  getRepoById: `SELECT ${REPO_COLUMNS} FROM repos WHERE id = $1`,
  listRepos: `SELECT ${REPO_COLUMNS} FROM repos ORDER BY id`,
  createRevision: `INSERT INTO revisions (repo_id, name, kind, created_at) VALUES ($1, $2, $3, $4) RETURNING ${REVISION_COLUMNS}`,
  getRevision: `SELECT ${REVISION_COLUMNS} FROM revisions WHERE repo_id = $1 AND name = $2`,
  listRevisions: `SELECT ${REVISION_COLUMNS} FROM revisions WHERE repo_id = $1 ORDER BY seq`,
  // The links are inserted by the same statement, so a missing repository (a foreign key
  // violation, checked at the end of the statement) leaves nothing behind.
  createToken: `
    WITH token AS (
      INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at, expires_at)
      VALUES ($1, $2, $3, $4, $5, $6) RETURNING id
    ), links AS (
      INSERT INTO hub_token_repos (token_id, repo_id) SELECT token.id, repo_id FROM token, unnest($7::bigint[]) AS repo_id
    )
    SELECT id FROM token`,
  findToken: `SELECT ${TOKEN_COLUMNS} FROM hub_tokens t WHERE t.secret_hash = $1`,
  listTokens: `SELECT ${TOKEN_COLUMNS} FROM hub_tokens t ORDER BY t.seq`,
  revokeToken: `UPDATE hub_tokens SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2`,
} as const;

export class PostgresHubRecords {
  constructor(private readonly connection: PostgresConnection) {}

  private run<R extends QueryResultRow>(name: keyof typeof HUB_SQL, values: unknown[]): Promise<pg.QueryResult<R>> {
    return this.connection.query<R>(name, HUB_SQL[name], values);
  }

  async createRepo(type: RepoType, name: string): Promise<Repo> {
    try {
      const { rows } = await this.run<RepoRow>("createRepo", [type, name, new Date()]);
      return toRepo(rows[0]);
    } catch (err) {
      if (isViolation(err, PG_UNIQUE_VIOLATION)) throw new AlreadyExistsError(`repository ${type}:${name} already exists`);
      throw err;
    }
  }

  async getRepo(type: RepoType, name: string): Promise<Repo | null> {
    const { rows } = await this.run<RepoRow>("getRepo", [type, name]);
    return rows.length > 0 ? toRepo(rows[0]) : null;
  }

  async getRepoById(id: number): Promise<Repo | null> {
    const { rows } = await this.run<RepoRow>("getRepoById", [id]);
    return rows.length > 0 ? toRepo(rows[0]) : null;
  }

  async listRepos(): Promise<Repo[]> {
    return (await this.run<RepoRow>("listRepos", [])).rows.map(toRepo);
  }

  async createRevision(repoId: number, name: string, kind: RevisionKind): Promise<Revision> {
    try {
      const { rows } = await this.run<RevisionRow>("createRevision", [repoId, name, kind, new Date()]);
      return toRevision(rows[0]);
    } catch (err) {
      if (isViolation(err, PG_UNIQUE_VIOLATION)) {
        throw new AlreadyExistsError(`revision ${JSON.stringify(name)} already exists in repository #${repoId}`);
      }
      if (isViolation(err, PG_FOREIGN_KEY_VIOLATION)) throw new NotFoundError(`no repository with id ${repoId}`);
      throw err;
    }
  }

  async getRevision(repoId: number, name: string): Promise<Revision | null> {
    const { rows } = await this.run<RevisionRow>("getRevision", [repoId, name]);
    return rows.length > 0 ? toRevision(rows[0]) : null;
  }

  async listRevisions(repoId: number): Promise<Revision[]> {
    return (await this.run<RevisionRow>("listRevisions", [repoId])).rows.map(toRevision);
  }

  async createHubToken(token: NewHubToken): Promise<HubToken> {
    const repoIds = token.repos === "all" ? [] : [...new Set(token.repos)].sort((a, b) => a - b);
    const createdAt = new Date();
    try {
      await this.run("createToken", [
        token.id,
        token.secretHash,
        token.access,
        token.repos === "all",
        createdAt,
        token.expiresAt,
        repoIds,
      ]);
    } catch (err) {
      if (isViolation(err, PG_UNIQUE_VIOLATION)) {
        throw new AlreadyExistsError(
          (err as pg.DatabaseError).constraint === "hub_tokens_secret_hash_key"
            ? "a hub token with that secret hash already exists"
            : `a hub token with id ${token.id} already exists`,
        );
      }
      if (isViolation(err, PG_FOREIGN_KEY_VIOLATION)) {
        throw new NotFoundError(`hub token ${token.id} lists a repository id that does not exist`);
      }
      throw err;
    }
    return {
      id: token.id,
      secretHash: token.secretHash,
      access: token.access,
      repos: token.repos === "all" ? "all" : repoIds,
      createdAt,
      expiresAt: token.expiresAt === null ? null : new Date(token.expiresAt.getTime()),
      revokedAt: null,
    };
  }

  async findHubTokenBySecretHash(secretHash: string): Promise<HubToken | null> {
    // One statement, so the token and its repository links come from the same snapshot.
    const { rows } = await this.run<TokenRow>("findToken", [secretHash]);
    return rows.length > 0 ? toHubToken(rows[0]) : null;
  }

  async listHubTokens(): Promise<HubToken[]> {
    return (await this.run<TokenRow>("listTokens", [])).rows.map(toHubToken);
  }

  async revokeHubToken(id: string): Promise<boolean> {
    return ((await this.run("revokeToken", [new Date(), id])).rowCount ?? 0) > 0;
  }
}

export function toRepo(row: RepoRow): Repo {
  return { id: row.id, type: row.type, name: row.name, createdAt: row.created_at };
}

export function toRevision(row: RevisionRow): Revision {
  return { repoId: row.repo_id, name: row.name, kind: row.kind, createdAt: row.created_at };
}

export function toHubToken(row: TokenRow): HubToken {
  return {
    id: row.id,
    secretHash: row.secret_hash,
    access: row.access,
    repos: row.all_repos ? "all" : row.repo_ids,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
  };
}
