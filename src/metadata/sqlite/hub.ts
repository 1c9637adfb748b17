/**
 * The hub's records in the embedded store: repositories, their revisions, and hub tokens.
 */
import type Database from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import type { Access, HubToken, NewHubToken, Repo, RepoType, Revision, RevisionKind } from "../store.js";
import type { SqliteConnection } from "./connection.js";
import { isConstraint } from "./schema.js";

export interface RepoRow {
  id: number;
  type: RepoType;
  name: string;
  created_at: number;
}
interface RevisionRow {
  repo_id: number;
  name: string;
  kind: RevisionKind;
  created_at: number;
}
interface TokenRow {
  id: string;
  secret_hash: string;
  access: Access;
  all_repos: 0 | 1;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
}
interface TokenRepoRow {
  token_id: string;
  repo_id: number;
}
export interface HubStatements {
  insertRepo: Database.Statement<[string, string, number], RepoRow>;
  getRepo: Database.Statement<[string, string], RepoRow>;
  getRepoById: Database.Statement<[number], RepoRow>;
  listRepos: Database.Statement<[], RepoRow>;
  insertRevision: Database.Statement<[number, string, string, number], RevisionRow>;
  getRevision: Database.Statement<[number, string], RevisionRow>;
  listRevisions: Database.Statement<[number], RevisionRow>;
  insertToken: Database.Statement<[string, string, string, number, number, number | null], TokenRow>;
  insertTokenRepo: Database.Statement<[string, number]>;
  findToken: Database.Statement<[string], TokenRow>;
  tokenRepos: Database.Statement<[string], { repo_id: number }>;
  listTokens: Database.Statement<[], TokenRow>;
  listTokenRepos: Database.Statement<[], TokenRepoRow>;
  revokeToken: Database.Statement<[number, string]>;
}

function prepareHubStatements(db: Database.Database): HubStatements {
  return {
    insertRepo: db.prepare<[string, string, number], RepoRow>(
      "INSERT INTO repos (type, name, created_at) VALUES (?, ?, ?) RETURNING *",
    ),
    getRepo: db.prepare<[string, string], RepoRow>("SELECT * FROM repos WHERE type = ? AND name = ?"),
    getRepoById: db.prepare<[number], RepoRow>("SELECT * FROM repos WHERE id = ?"),
    listRepos: db.prepare<[], RepoRow>("SELECT * FROM repos ORDER BY id"),
    insertRevision: db.prepare<[number, string, string, number], RevisionRow>(
      "INSERT INTO revisions (repo_id, name, kind, created_at) VALUES (?, ?, ?, ?) RETURNING *",
    ),
    getRevision: db.prepare<[number, string], RevisionRow>("SELECT * FROM revisions WHERE repo_id = ? AND name = ?"),
    listRevisions: db.prepare<[number], RevisionRow>("SELECT * FROM revisions WHERE repo_id = ? ORDER BY rowid"),
    insertToken: db.prepare<[string, string, string, number, number, number | null], TokenRow>(
      "INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
    ),
    insertTokenRepo: db.prepare<[string, number]>("INSERT OR IGNORE INTO hub_token_repos (token_id, repo_id) VALUES (?, ?)"),
    findToken: db.prepare<[string], TokenRow>("SELECT * FROM hub_tokens WHERE secret_hash = ?"),
    tokenRepos: db.prepare<[string], { repo_id: number }>(
      "SELECT repo_id FROM hub_token_repos WHERE token_id = ? ORDER BY repo_id",
    ),
    listTokens: db.prepare<[], TokenRow>("SELECT * FROM hub_tokens ORDER BY rowid"),
    listTokenRepos: db.prepare<[], TokenRepoRow>("SELECT token_id, repo_id FROM hub_token_repos ORDER BY token_id, repo_id"),
    revokeToken: db.prepare<[number, string]>("UPDATE hub_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?"),
  };
}

export class SqliteHubRecords {
  readonly sql: HubStatements;
  private readonly db: Database.Database;

  constructor(private readonly connection: SqliteConnection) {
    this.db = connection.db;
    this.sql = prepareHubStatements(this.db);
  }

  async createRepo(type: RepoType, name: string): Promise<Repo> {
    return this.connection.write(() => {
      const create = this.db.transaction(() => {
        const now = Date.now();
        const row = this.sql.insertRepo.get(type, name, now)!;
        this.sql.insertRevision.run(row.id, "main", "branch", now);
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

  async createRevision(repoId: number, name: string, kind: RevisionKind): Promise<Revision> {
    return this.connection.write(() => {
      try {
        return toRevision(this.sql.insertRevision.get(repoId, name, kind, Date.now())!);
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

  async getRevision(repoId: number, name: string): Promise<Revision | null> {
    const row = this.sql.getRevision.get(repoId, name);
    return row ? toRevision(row) : null;
  }

  async listRevisions(repoId: number): Promise<Revision[]> {
    return this.sql.listRevisions.all(repoId).map(toRevision);
  }

  async createHubToken(token: NewHubToken): Promise<HubToken> {
    return this.connection.write(() => {
      const create = this.db.transaction(() => {
        const row = this.sql.insertToken.get(
          token.id,
          token.secretHash,
          token.access,
          token.repos === "all" ? 1 : 0,
          Date.now(),
          token.expiresAt === null ? null : token.expiresAt.getTime(),
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
      return this.sql.listTokens
        .all()
        .map((row) => toHubToken(row, row.all_repos === 1 ? "all" : (reposByToken.get(row.id) ?? [])));
    })();
  }

  async revokeHubToken(id: string): Promise<boolean> {
    return this.connection.write(() => this.sql.revokeToken.run(Date.now(), id).changes > 0);
  }
}

export function toRepo(row: RepoRow): Repo {
  return { id: row.id, type: row.type, name: row.name, createdAt: new Date(row.created_at) };
}

export function toRevision(row: RevisionRow): Revision {
  return { repoId: row.repo_id, name: row.name, kind: row.kind, createdAt: new Date(row.created_at) };
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
  };
}
