/**
 * Hub tokens in the scale-out store: the token row (secret hash, access, owner, namespaces as
 * a text array, times) and its repository links (`hub_token_repos`). A token and its links are
 * written by one statement and read by one, so both come from the same snapshot.
 */
import type pg from "pg";
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import { normalizeNamespaces } from "../history.js";
import type { Access, HubToken, NewHubToken } from "../store.js";
import { isViolation, PG_FOREIGN_KEY_VIOLATION, PG_UNIQUE_VIOLATION, type PostgresConnection, type NamedStatements } from "./connection.js";

interface TokenRow {
  id: string;
  secret_hash: string;
  access: Access;
  all_repos: boolean;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  owner: string | null;
  namespaces: string[];
  /** Ascending; empty for all-repos tokens. */
  repo_ids: number[];
}

const TOKEN_COLUMNS = `t.id, t.secret_hash, t.access, t.all_repos, t.created_at, t.expires_at, t.revoked_at, t.owner, t.namespaces,
  ARRAY(SELECT l.repo_id FROM hub_token_repos l WHERE l.token_id = t.id ORDER BY l.repo_id) AS repo_ids`;

const TOKEN_SQL = {
  // The links are inserted by the same statement, so a missing repository (a foreign key
  // violation, checked at the end of the statement) leaves nothing behind.
  createToken: `
    WITH token AS (
      INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at, expires_at, owner, namespaces)
      VALUES ($1, $2, $3, $4, $5, $6, $8, $9::text[]) RETURNING id
    ), links AS (
      INSERT INTO hub_token_repos (token_id, repo_id) SELECT token.id, repo_id FROM token, unnest($7::bigint[]) AS repo_id
    )
    SELECT id FROM token`,
  findToken: `SELECT ${TOKEN_COLUMNS} FROM hub_tokens t WHERE t.secret_hash = $1`,
  listTokens: `SELECT ${TOKEN_COLUMNS} FROM hub_tokens t ORDER BY t.seq`,
  revokeToken: `UPDATE hub_tokens SET revoked_at = coalesce(revoked_at, $1) WHERE id = $2`,
} as const;

export class PostgresTokenRecords {
  private readonly sql: NamedStatements<typeof TOKEN_SQL>;

  constructor(connection: PostgresConnection) {
    this.sql = connection.statements(TOKEN_SQL);
  }

  async createHubToken(token: NewHubToken): Promise<HubToken> {
    const repoIds = token.repos === "all" ? [] : [...new Set(token.repos)].sort((a, b) => a - b);
    const namespaces = normalizeNamespaces(token.namespaces);
    const owner = token.owner ?? null;
    const createdAt = new Date();
    try {
      await this.sql.run("createToken", [
        token.id,
        token.secretHash,
        token.access,
        token.repos === "all",
        createdAt,
        token.expiresAt,
        repoIds,
        owner,
        namespaces,
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
      owner,
      namespaces,
    };
  }

  async findHubTokenBySecretHash(secretHash: string): Promise<HubToken | null> {
    const { rows } = await this.sql.run<TokenRow>("findToken", [secretHash]);
    return rows.length > 0 ? toHubToken(rows[0]) : null;
  }

  async listHubTokens(): Promise<HubToken[]> {
    return (await this.sql.run<TokenRow>("listTokens", [])).rows.map(toHubToken);
  }

  async revokeHubToken(id: string): Promise<boolean> {
    return ((await this.sql.run("revokeToken", [new Date(), id])).rowCount ?? 0) > 0;
  }
}

function toHubToken(row: TokenRow): HubToken {
  return {
    id: row.id,
    secretHash: row.secret_hash,
    access: row.access,
    repos: row.all_repos ? "all" : row.repo_ids,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
    owner: row.owner,
    namespaces: row.namespaces,
  };
}
