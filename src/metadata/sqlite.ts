/**
 * The embedded metadata store: one SQLite file, `${dataDir}/metadata.sqlite`, through
 * better-sqlite3. WAL lets readers run beside a writer, and the busy timeout makes a second
 * process (an admin command next to the running server) wait for the write lock instead of
 * failing. Statements are prepared once; rows are never cached, so another process's writes
 * are seen by the next call.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import {
  AlreadyExistsError,
  NotFoundError,
  type Access,
  type HubToken,
  type MetadataStore,
  type NewHubToken,
  type Repo,
  type RepoType,
  type Revision,
  type RevisionKind,
} from "./store.js";

export const METADATA_FILE_NAME = "metadata.sqlite";

/** How long a write waits for another connection's write lock before SQLITE_BUSY. */
export const BUSY_TIMEOUT_MS = 5000;

/**
 * Schema migrations; entry i takes `PRAGMA user_version` from i to i + 1. Append only: a
 * released entry is never edited, since databases in the field have already run it.
 * Times are INTEGER milliseconds since the epoch (exact Date round-trips, cheap comparisons).
 */
export const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE repos (
    id         INTEGER PRIMARY KEY,
    type       TEXT    NOT NULL CHECK (type IN ('model', 'dataset', 'space')),
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (type, name)
  ) STRICT;

  CREATE TABLE revisions (
    repo_id    INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('branch', 'tag')),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (repo_id, name)
  ) STRICT;

  CREATE TABLE hub_tokens (
    id          TEXT    NOT NULL PRIMARY KEY,
    secret_hash TEXT    NOT NULL UNIQUE,
    access      TEXT    NOT NULL CHECK (access IN ('read', 'write')),
    all_repos   INTEGER NOT NULL CHECK (all_repos IN (0, 1)),
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,
    revoked_at  INTEGER
  ) STRICT;

  CREATE TABLE hub_token_repos (
    token_id TEXT    NOT NULL REFERENCES hub_tokens (id) ON DELETE CASCADE,
    repo_id  INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    PRIMARY KEY (token_id, repo_id)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX hub_token_repos_by_repo ON hub_token_repos (repo_id);
  `,
];

/** The database file was written by a newer castor whose schema this version does not know. */
export class MetadataSchemaError extends Error {
  override readonly name = "MetadataSchemaError";
}

interface RepoRow {
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

export class SqliteMetadataStore implements MetadataStore {
  /** Opens (creating the folder, file and schema as needed) `${dataDir}/metadata.sqlite`. */
  static async open(dataDir: string): Promise<SqliteMetadataStore> {
    mkdirSync(dataDir, { recursive: true });
    return new SqliteMetadataStore(join(dataDir, METADATA_FILE_NAME));
  }

  readonly path: string;
  private readonly db: Database.Database;
  private readonly sql;

  private constructor(path: string) {
    this.path = path;
    this.db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
    try {
      this.db.pragma("journal_mode = WAL");
      this.db.pragma("synchronous = NORMAL");
      this.db.pragma("foreign_keys = ON");
      migrate(this.db, path);
    } catch (err) {
      this.db.close();
      throw err;
    }
    const db = this.db;
    this.sql = {
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
      ping: db.prepare<[], { ok: number }>("SELECT 1 AS ok"),
    };
  }

  async createRepo(type: RepoType, name: string): Promise<Repo> {
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
  }

  async getRevision(repoId: number, name: string): Promise<Revision | null> {
    const row = this.sql.getRevision.get(repoId, name);
    return row ? toRevision(row) : null;
  }

  async listRevisions(repoId: number): Promise<Revision[]> {
    return this.sql.listRevisions.all(repoId).map(toRevision);
  }

  async createHubToken(token: NewHubToken): Promise<HubToken> {
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
    return this.sql.revokeToken.run(Date.now(), id).changes > 0;
  }

  async ping(): Promise<void> {
    this.sql.ping.get();
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

/**
 * Brings the schema up to date. The check runs again inside an IMMEDIATE transaction (which
 * takes the write lock) so that two processes opening a fresh database at once cannot both
 * apply the same migration.
 */
function migrate(db: Database.Database, path: string): void {
  const version = (): number => db.pragma("user_version", { simple: true }) as number;
  const check = (current: number): void => {
    if (current > MIGRATIONS.length) {
      throw new MetadataSchemaError(
        `${path} has schema version ${current}, but this castor only knows versions up to ${MIGRATIONS.length}: upgrade castor (or point CASTOR_DATA_DIR at another folder)`,
      );
    }
  };
  check(version());
  if (version() === MIGRATIONS.length) return;
  db.transaction(() => {
    const current = version();
    check(current);
    for (let v = current; v < MIGRATIONS.length; v++) {
      db.exec(MIGRATIONS[v]);
      db.pragma(`user_version = ${v + 1}`);
    }
  }).immediate();
}

function isConstraint(err: unknown, code: string): boolean {
  return err instanceof Database.SqliteError && err.code === code;
}

function toRepo(row: RepoRow): Repo {
  return { id: row.id, type: row.type, name: row.name, createdAt: new Date(row.created_at) };
}

function toRevision(row: RevisionRow): Revision {
  return { repoId: row.repo_id, name: row.name, kind: row.kind, createdAt: new Date(row.created_at) };
}

function toHubToken(row: TokenRow, repos: number[] | "all"): HubToken {
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
