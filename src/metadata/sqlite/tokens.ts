/**
 * Hub tokens in the embedded store: the token row (secret hash, access, owner, namespaces as a
 * JSON array, times) and its repository links (`hub_token_repos`), written together and read
 * from one snapshot.
 */
import type Database from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import { decodeStringList, normalizeNamespaces } from "../history.js";
import type { Access, HubToken, NewHubToken } from "../store.js";
import type { SqliteConnection } from "./connection.js";
import { isConstraint } from "./schema.js";

export interface TokenRow {
  id: string;
  secret_hash: string;
  access: Access;
  all_repos: 0 | 1;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  owner: string | null;
  namespaces: string;
}
interface TokenRepoRow {
  token_id: string;
  repo_id: number;
}
export interface TokenStatements {
  insertToken: Database.Statement<[string, string, string, number, number, number | null, string | null, string], TokenRow>;
  insertTokenRepo: Database.Statement<[string, number]>;
  findToken: Database.Statement<[string], TokenRow>;
  tokenRepos: Database.Statement<[string], { repo_id: number }>;
  listTokens: Database.Statement<[], TokenRow>;
  listTokenRepos: Database.Statement<[], TokenRepoRow>;
  revokeToken: Database.Statement<[number, string]>;
}

function prepareTokenStatements(db: Database.Database): TokenStatements {
  return {
    insertToken: db.prepare<[string, string, string, number, number, number | null, string | null, string], TokenRow>(
      `INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at, expires_at, owner, namespaces)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`,
    ),
    insertTokenRepo: db.prepare<[string, number]>("INSERT OR IGNORE INTO hub_token_repos (token_id, repo_id) VALUES (?, ?)"),
    findToken: db.prepare<[string], TokenRow>("SELECT * FROM hub_tokens WHERE secret_hash = ?"),
    tokenRepos: db.prepare<[string], { repo_id: number }>("SELECT repo_id FROM hub_token_repos WHERE token_id = ? ORDER BY repo_id"),
    listTokens: db.prepare<[], TokenRow>("SELECT * FROM hub_tokens ORDER BY rowid"),
    listTokenRepos: db.prepare<[], TokenRepoRow>("SELECT token_id, repo_id FROM hub_token_repos ORDER BY token_id, repo_id"),
    revokeToken: db.prepare<[number, string]>("UPDATE hub_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?"),
  };
}

export class SqliteTokenRecords {
  readonly sql: TokenStatements;
  private readonly db: Database.Database;

  constructor(private readonly connection: SqliteConnection) {
    this.db = connection.db;
    this.sql = prepareTokenStatements(this.db);
  }

  async createHubToken(token: NewHubToken): Promise<HubToken> {
    const namespaces = JSON.stringify(normalizeNamespaces(token.namespaces));
    return this.connection.write(() => {
      const create = this.db.transaction(() => {
        const row = this.sql.insertToken.get(
          token.id,
          token.secretHash,
          token.access,
          token.repos === "all" ? 1 : 0,
          Date.now(),
          token.expiresAt === null ? null : token.expiresAt.getTime(),
          token.owner ?? null,
          namespaces,
        )!;
        if (token.repos === "all") return toHubToken(row, "all");
        const repoIds = [...new Set(token.repos)].sort((a, b) => a - b);
        for (const repoId of repoIds) this.sql.insertTokenRepo.run(token.id, repoId);
        return toHubToken(row, repoIds);
      });
      try {
        return create.immediate();
      } catch (err) {
        if (isConstraint(err, "SQLITE_CONSTRAINT_PRIMARYKEY")) {
          throw new AlreadyExistsError(`a hub token with id ${token.id} already exists`);
        }
        if (isConstraint(err, "SQLITE_CONSTRAINT_UNIQUE")) {
          throw new AlreadyExistsError("a hub token with that secret hash already exists");
        }
        if (isConstraint(err, "SQLITE_CONSTRAINT_FOREIGNKEY")) {
          throw new NotFoundError(`hub token ${token.id} lists a repository id that does not exist`);
        }
        throw err;
      }
    });
  }

  async findHubTokenBySecretHash(secretHash: string): Promise<HubToken | null> {
    // One read transaction, so the token and its repository links come from the same snapshot.
    return this.db.transaction(() => {
      const row = this.sql.findToken.get(secretHash);
      if (!row) return null;
      if (row.all_repos === 1) return toHubToken(row, "all");
      return toHubToken(
        row,
        this.sql.tokenRepos.all(row.id).map((r) => r.repo_id),
      );
    })();
  }

  async listHubTokens(): Promise<HubToken[]> {
    return this.db.transaction(() => {
      const reposByToken = new Map<string, number[]>();
      for (const link of this.sql.listTokenRepos.all()) {
        const list = reposByToken.get(link.token_id);
        if (list) list.push(link.repo_id);
        else reposByToken.set(link.token_id, [link.repo_id]);
      }
      return this.sql.listTokens.all().map((row) => toHubToken(row, row.all_repos === 1 ? "all" : (reposByToken.get(row.id) ?? [])));
    })();
  }

  async revokeHubToken(id: string): Promise<boolean> {
    return this.connection.write(() => this.sql.revokeToken.run(Date.now(), id).changes > 0);
  }
}

export function toHubToken(row: TokenRow, repos: number[] | "all"): HubToken {
  return {
    id: row.id,
    secretHash: row.secret_hash,
    access: row.access,
    repos,
    createdAt: new Date(row.created_at),
    expiresAt: row.expires_at === null ? null : new Date(row.expires_at),
    revokedAt: row.revoked_at === null ? null : new Date(row.revoked_at),
    owner: row.owner,
    namespaces: decodeStringList(row.namespaces, `namespaces of hub token ${row.id}`),
  };
}
