/**
 * The embedded metadata store: one SQLite file, `${dataDir}/metadata.sqlite`, through
 * better-sqlite3. WAL lets readers run beside a writer, and the busy timeout makes a second
 * process (an admin command next to the running server) wait for the write lock instead of
 * failing. Statements are prepared once; rows are never cached, so another process's writes
 * are seen by the next call.
 *
 * The WAL stays bounded: every statement runs to completion synchronously (no `iterate()`, no
 * read transaction spanning an await), so no read transaction outlives its call and the
 * automatic checkpoint (every 1000 pages) can always reset the log; `journal_size_limit` then
 * truncates a log that one large transaction (a big shard registration) grew past the limit.
 * The one transaction that spans awaits is a large shard registration's, on a connection of
 * its own (sqlite-shard-registration.ts); the other writes wait for it (`write`).
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { bytesToPlainHex, hashToHex, type Hash } from "../format/hash.js";
import {
  checkHash,
  packFileRecord,
  packXorbRecord,
  storedHash,
  unpackChunkTable,
  unpackFileTerms,
  type FileRecord,
  type ShardRegistration,
  type XorbRecord,
} from "./cas.js";
import {
  checkPageLimit,
  exportPage,
  hashCursor,
  hashIdCursor,
  idHashCursor,
  parseHashCursor,
  parseHashIdCursor,
  parseIdHashCursor,
  wholeChunkPage,
  type DatedFile,
  type DatedXorb,
  type DedupEntry,
  type ExportPage,
  type FileRepoLink,
  type Sha256IndexEntry,
  type ShardRow,
} from "./migration.js";
import {
  AlreadyExistsError,
  InvalidRecordError,
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
import { BulkShardWriter, fitsOneStep, prepareShardStatements, registrationSteps, runAllSteps } from "./sqlite-shard-registration.js";

export const METADATA_FILE_NAME = "metadata.sqlite";

/** How long a write waits for another connection's write lock before SQLITE_BUSY. */
export const BUSY_TIMEOUT_MS = 5000;

/** Size the WAL file is truncated back to after a checkpoint reset it. */
export const JOURNAL_SIZE_LIMIT_BYTES = 16 * 1024 * 1024;

/**
 * Page cache per connection (default is 2 MB). A 10,000-file registration touches a few
 * thousand index pages; with them all in cache no dirty page spills to the WAL twice.
 */
const CACHE_SIZE_KIB = 32 * 1024;

/** Hashes per `getXorbs` query; batch sizes are powers of two up to this, so few statements exist. */
const XORB_BATCH_MAX = 256;

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
  // CAS tables. Hashes are 32-byte BLOBs. Xorbs and files are one row each with their tables
  // packed (layouts in cas.ts) and the BLOB column last, so reading the scalar columns before
  // it never touches the blob's overflow pages. Both are rowid tables because their rows are
  // large, which WITHOUT ROWID tables handle badly.
  `
  CREATE TABLE xorbs (
    hash                BLOB    NOT NULL PRIMARY KEY CHECK (length(hash) = 32),
    serialized_length   INTEGER NOT NULL CHECK (serialized_length >= 0),
    uncompressed_length INTEGER NOT NULL CHECK (uncompressed_length >= 0),
    created_at          INTEGER NOT NULL,
    chunks              BLOB    NOT NULL CHECK (length(chunks) > 0 AND length(chunks) % 40 = 0)
  ) STRICT;

  CREATE TABLE files (
    hash       BLOB    NOT NULL PRIMARY KEY CHECK (length(hash) = 32),
    size       INTEGER NOT NULL CHECK (size >= 0),
    sha256     BLOB             CHECK (sha256 IS NULL OR length(sha256) = 32),
    created_at INTEGER NOT NULL,
    terms      BLOB    NOT NULL CHECK (length(terms) % 44 = 0)
  ) STRICT;

  -- No index by repo_id: nothing deletes repositories yet, and every insert would pay for it.
  CREATE TABLE file_repos (
    file_hash BLOB    NOT NULL REFERENCES files (hash),
    repo_id   INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    PRIMARY KEY (file_hash, repo_id)
  ) STRICT, WITHOUT ROWID;

  CREATE TABLE file_sha256 (
    repo_id   INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    sha256    BLOB    NOT NULL CHECK (length(sha256) = 32),
    file_hash BLOB    NOT NULL REFERENCES files (hash),
    PRIMARY KEY (repo_id, sha256)
  ) STRICT, WITHOUT ROWID;

  CREATE TABLE shards (
    hash       BLOB    NOT NULL PRIMARY KEY CHECK (length(hash) = 32),
    created_at INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;

  -- One B-tree: the primary key both deduplicates entries and serves the lookup by chunk
  -- hash. seq is the insertion order findDedupXorbs returns oldest first (it sorts the few
  -- xorbs of one chunk); it comes from dedup_seq, advanced once per registration under the
  -- write lock, which keeps inserts to a single B-tree (a rowid would need a second index).
  CREATE TABLE dedup_chunks (
    chunk_hash BLOB    NOT NULL CHECK (length(chunk_hash) = 32),
    xorb_hash  BLOB    NOT NULL CHECK (length(xorb_hash) = 32),
    seq        INTEGER NOT NULL,
    PRIMARY KEY (chunk_hash, xorb_hash)
  ) STRICT, WITHOUT ROWID;

  CREATE TABLE dedup_seq (
    one  INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    next INTEGER NOT NULL
  ) STRICT;
  INSERT INTO dedup_seq (one, next) VALUES (1, 0);
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
interface XorbRow {
  hash: Buffer;
  serialized_length: number;
  uncompressed_length: number;
  chunks: Buffer;
}
interface FileRow {
  size: number;
  sha256: Buffer | null;
  terms: Buffer;
}
interface DatedXorbRow extends XorbRow {
  created_at: number;
}
interface DatedFileRow extends FileRow {
  hash: Buffer;
  created_at: number;
}
type XorbBatchStatement = Database.Statement<Uint8Array[], XorbRow>;

export class SqliteMetadataStore implements MetadataStore {
  /** Opens (creating the folder, file and schema as needed) `${dataDir}/metadata.sqlite`. */
  static async open(dataDir: string): Promise<SqliteMetadataStore> {
    mkdirSync(dataDir, { recursive: true });
    return new SqliteMetadataStore(join(dataDir, METADATA_FILE_NAME));
  }

  readonly path: string;
  private readonly db: Database.Database;
  private readonly sql;
  /** Writes large shard registrations on a connection of their own, in steps. */
  private readonly bulkShards: BulkShardWriter;
  /** Set while a large registration holds the write lock across event-loop turns. */
  private bulkWrite: Promise<unknown> | null = null;

  private constructor(path: string) {
    this.path = path;
    this.bulkShards = new BulkShardWriter(path, (db) => configureConnection(db));
    this.db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
    try {
      this.db.pragma("journal_mode = WAL");
      configureConnection(this.db);
      migrate(this.db, path);
    } catch (err) {
      this.db.close();
      throw err;
    }
    const db = this.db;
    this.sql = {
      // The statements of a shard registration (sqlite-shard-registration.ts), which imports reuse.
      ...prepareShardStatements(db),
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

      insertXorb: db.prepare<[Uint8Array, number, number, number, Uint8Array]>(
        `INSERT INTO xorbs (hash, serialized_length, uncompressed_length, created_at, chunks)
         VALUES (?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING`,
      ),
      xorbSize: db.prepare<[Uint8Array], { serialized_length: number }>(
        "SELECT serialized_length FROM xorbs WHERE hash = ?",
      ),
      getFile: db.prepare<[Uint8Array], FileRow>("SELECT size, sha256, terms FROM files WHERE hash = ?"),
      fileInRepo: db.prepare<[Uint8Array, number], { ok: number }>(
        "SELECT 1 AS ok FROM file_repos WHERE file_hash = ? AND repo_id = ?",
      ),
      fileBySha256: db.prepare<[number, Uint8Array], { file_hash: Buffer }>(
        "SELECT file_hash FROM file_sha256 WHERE repo_id = ? AND sha256 = ?",
      ),
      dedupXorbs: db.prepare<[Uint8Array, number], { xorb_hash: Buffer }>(
        "SELECT xorb_hash FROM dedup_chunks WHERE chunk_hash = ? ORDER BY seq LIMIT ?",
      ),

      // Migration (see migration.ts): exports in primary-key order, keyset-paged.
      importRepo: db.prepare<[string, string, number], RepoRow>(
        "INSERT INTO repos (type, name, created_at) VALUES (?, ?, ?) ON CONFLICT (type, name) DO NOTHING RETURNING *",
      ),
      importRevision: db.prepare<[number, string, string, number]>(
        "INSERT INTO revisions (repo_id, name, kind, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
      ),
      importToken: db.prepare<[string, string, string, number, number, number | null, number | null]>(
        `INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at, expires_at, revoked_at)
         VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
      ),
      carryRevocation: db.prepare<[number, string]>("UPDATE hub_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"),
      exportXorbs: db.prepare<[Uint8Array, number], DatedXorbRow>(
        "SELECT hash, serialized_length, uncompressed_length, created_at, chunks FROM xorbs WHERE hash > ? ORDER BY hash LIMIT ?",
      ),
      exportFiles: db.prepare<[Uint8Array, number], DatedFileRow>(
        "SELECT hash, size, sha256, created_at, terms FROM files WHERE hash > ? ORDER BY hash LIMIT ?",
      ),
      exportFileRepos: db.prepare<[Uint8Array, number, number], { file_hash: Buffer; repo_id: number }>(
        "SELECT file_hash, repo_id FROM file_repos WHERE (file_hash, repo_id) > (?, ?) ORDER BY file_hash, repo_id LIMIT ?",
      ),
      fileExists: db.prepare<[Uint8Array], { ok: number }>("SELECT 1 AS ok FROM files WHERE hash = ?"),
      exportSha256: db.prepare<[number, Uint8Array, number], { repo_id: number; sha256: Buffer; file_hash: Buffer }>(
        "SELECT repo_id, sha256, file_hash FROM file_sha256 WHERE (repo_id, sha256) > (?, ?) ORDER BY repo_id, sha256 LIMIT ?",
      ),
      importSha256: db.prepare<[number, Uint8Array, Uint8Array]>(
        `INSERT INTO file_sha256 (repo_id, sha256, file_hash) VALUES (?, ?, ?)
         ON CONFLICT (repo_id, sha256) DO UPDATE SET file_hash = excluded.file_hash
         WHERE file_sha256.file_hash <> excluded.file_hash`,
      ),
      exportShards: db.prepare<[Uint8Array, number], { hash: Buffer; created_at: number }>(
        "SELECT hash, created_at FROM shards WHERE hash > ? ORDER BY hash LIMIT ?",
      ),
      // Within a chunk, the primary key sorts by xorb hash; the few entries of one chunk are sorted by seq on top.
      exportDedup: db.prepare<[Uint8Array, number], { chunk_hash: Buffer; xorb_hash: Buffer }>(
        "SELECT chunk_hash, xorb_hash FROM dedup_chunks WHERE chunk_hash > ? ORDER BY chunk_hash, seq LIMIT ?",
      ),
      exportDedupChunk: db.prepare<[Uint8Array], { chunk_hash: Buffer; xorb_hash: Buffer }>(
        "SELECT chunk_hash, xorb_hash FROM dedup_chunks WHERE chunk_hash = ? ORDER BY seq",
      ),
    };
  }

  /** `SELECT … WHERE hash IN (?, …)` with `size` placeholders, prepared on first use. */
  private readonly xorbBatches = new Map<number, XorbBatchStatement>();
  private xorbBatch(size: number): XorbBatchStatement {
    let statement = this.xorbBatches.get(size);
    if (!statement) {
      statement = this.db.prepare<Uint8Array[], XorbRow>(
        `SELECT hash, serialized_length, uncompressed_length, chunks FROM xorbs WHERE hash IN (${Array(size).fill("?").join(", ")})`,
      );
      this.xorbBatches.set(size, statement);
    }
    return statement;
  }

  async createRepo(type: RepoType, name: string): Promise<Repo> {
    return this.write(() => {
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
    return this.write(() => {
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
    return this.write(() => {
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
    return this.write(() => this.sql.revokeToken.run(Date.now(), id).changes > 0);
  }

  async putXorb(xorb: XorbRecord): Promise<boolean> {
    return this.write(() => {
      const chunks = packXorbRecord(xorb);
      return (
        this.sql.insertXorb.run(xorb.hash, xorb.serializedLength, xorb.uncompressedLength, Date.now(), chunks).changes > 0
      );
    });
  }

  async getXorbs(hashes: readonly Hash[]): Promise<Map<string, XorbRecord>> {
    const found = new Map<string, XorbRecord>();
    const distinct = [...new Map(hashes.map((hash) => [bytesToPlainHex(hash), hash])).values()];
    for (let start = 0; start < distinct.length; start += XORB_BATCH_MAX) {
      const batch = distinct.slice(start, start + XORB_BATCH_MAX);
      // Pad to a power of two by repeating the last hash (harmless inside IN), so at most
      // log2(XORB_BATCH_MAX) + 1 statements are ever prepared.
      let size = 1;
      while (size < batch.length) size *= 2;
      while (batch.length < size) batch.push(batch[batch.length - 1]);
      for (const row of this.xorbBatch(size).all(...batch)) {
        const record = toXorbRecord(row);
        found.set(hashToHex(record.hash), record);
      }
    }
    return found;
  }

  async getXorbSize(hash: Hash): Promise<number | null> {
    return this.sql.xorbSize.get(hash)?.serialized_length ?? null;
  }

  async registerShard(registration: ShardRegistration): Promise<boolean> {
    const { shardHash, repoId } = registration;
    checkHash(shardHash, "shard hash");
    if (!Number.isSafeInteger(repoId)) throw new InvalidRecordError(`repository id must be an integer, got ${String(repoId)}`);
    if (fitsOneStep(registration)) {
      return this.write(() => this.db.transaction(() => runAllSteps(registrationSteps(this.sql, registration))).immediate());
    }
    while (this.bulkWrite !== null) await this.bulkWrite.catch(() => undefined);
    const registered = this.bulkShards.register(registration);
    this.bulkWrite = registered;
    try {
      return await registered;
    } finally {
      this.bulkWrite = null;
    }
  }

  async getFile(hash: Hash): Promise<FileRecord | null> {
    const row = this.sql.getFile.get(hash);
    if (!row) return null;
    const fileHash = new Uint8Array(hash);
    const name = `file ${hashToHex(fileHash)}`;
    return {
      hash: fileHash,
      size: row.size,
      terms: unpackFileTerms(row.terms, name),
      sha256: row.sha256 === null ? null : storedHash(row.sha256, `SHA-256 of ${name}`),
    };
  }

  async isFileInRepo(fileHash: Hash, repoId: number): Promise<boolean> {
    return this.sql.fileInRepo.get(fileHash, repoId) !== undefined;
  }

  async findFileBySha256(repoId: number, sha256: Uint8Array): Promise<Hash | null> {
    const row = this.sql.fileBySha256.get(repoId, sha256);
    return row ? storedHash(row.file_hash, "file hash in the SHA-256 index") : null;
  }

  async findDedupXorbs(chunkHash: Hash, limit: number): Promise<Hash[]> {
    if (!Number.isSafeInteger(limit) || limit < 0) {
      throw new RangeError(`the dedup lookup limit must be a non-negative integer, got ${limit}`);
    }
    if (limit === 0) return [];
    return this.sql.dedupXorbs.all(chunkHash, limit).map((row) => storedHash(row.xorb_hash, "xorb hash in the dedup index"));
  }

  // -------------------------------------------------------------------------------------------
  // Migration (migration.ts)

  async importRepo(repo: Omit<Repo, "id">): Promise<{ repo: Repo; inserted: boolean }> {
    return this.write(() => {
      const row = this.sql.importRepo.get(repo.type, repo.name, repo.createdAt.getTime());
      if (row !== undefined) return { repo: toRepo(row), inserted: true };
      return { repo: toRepo(this.sql.getRepo.get(repo.type, repo.name)!), inserted: false };
    });
  }

  async importRevisions(revisions: readonly Revision[]): Promise<number> {
    return this.write(() => {
      return this.importAll(() => {
        let changed = 0;
        for (const revision of revisions) {
          if (!this.sql.repoExists.get(revision.repoId)) throw new NotFoundError(`no repository with id ${revision.repoId}`);
          changed += this.sql.importRevision.run(revision.repoId, revision.name, revision.kind, revision.createdAt.getTime()).changes;
        }
        return changed;
      });
    });
  }

  async importHubTokens(tokens: readonly HubToken[]): Promise<number> {
    return this.write(() => {
      try {
        return this.importAll(() => {
          let changed = 0;
          for (const token of tokens) {
            const revokedAt = token.revokedAt === null ? null : token.revokedAt.getTime();
            const inserted = this.sql.importToken.run(
              token.id,
              token.secretHash,
              token.access,
              token.repos === "all" ? 1 : 0,
              token.createdAt.getTime(),
              token.expiresAt === null ? null : token.expiresAt.getTime(),
              revokedAt,
            ).changes;
            if (inserted === 0) {
              // Present already: its record (and coverage) stays; only a revocation carries over.
              if (revokedAt !== null) changed += this.sql.carryRevocation.run(revokedAt, token.id).changes;
              continue;
            }
            changed++;
            if (token.repos === "all") continue;
            for (const repoId of token.repos) {
              if (!this.sql.repoExists.get(repoId)) throw new NotFoundError(`hub token ${token.id} lists repository id ${repoId}, which does not exist`);
              this.sql.insertTokenRepo.run(token.id, repoId);
            }
          }
          return changed;
        });
      } catch (err) {
        if (isConstraint(err, "SQLITE_CONSTRAINT_UNIQUE")) throw new AlreadyExistsError("another hub token has the secret hash of an imported one");
        throw err;
      }
    });
  }

  async exportXorbs(after: string | null, limit: number): Promise<ExportPage<DatedXorb>> {
    checkPageLimit(limit);
    const rows = this.sql.exportXorbs.all(parseHashCursor(after), limit).map((row) => ({ ...toXorbRecord(row), createdAt: new Date(row.created_at) }));
    return exportPage(rows, limit, (last) => hashCursor(last.hash));
  }

  async importXorbs(xorbs: readonly DatedXorb[]): Promise<number> {
    return this.write(() => {
      // Packed (and so checked) before the transaction: a bad record stores nothing.
      const packed = xorbs.map((xorb) => packXorbRecord(xorb));
      return this.importAll(() => {
        let changed = 0;
        xorbs.forEach((xorb, i) => {
          changed += this.sql.insertXorb.run(xorb.hash, xorb.serializedLength, xorb.uncompressedLength, xorb.createdAt.getTime(), packed[i]).changes;
        });
        return changed;
      });
    });
  }

  async exportFiles(after: string | null, limit: number): Promise<ExportPage<DatedFile>> {
    checkPageLimit(limit);
    const rows = this.sql.exportFiles.all(parseHashCursor(after), limit).map((row): DatedFile => {
      const hash = storedHash(row.hash, "file hash");
      const name = `file ${hashToHex(hash)}`;
      return {
        hash,
        size: row.size,
        terms: unpackFileTerms(row.terms, name),
        sha256: row.sha256 === null ? null : storedHash(row.sha256, `SHA-256 of ${name}`),
        createdAt: new Date(row.created_at),
      };
    });
    return exportPage(rows, limit, (last) => hashCursor(last.hash));
  }

  async importFiles(files: readonly DatedFile[]): Promise<number> {
    return this.write(() => {
      const packed = files.map((file) => packFileRecord(file));
      return this.importAll(() => {
        let changed = 0;
        files.forEach((file, i) => {
          changed += this.sql.insertFile.run(file.hash, file.size, file.sha256, file.createdAt.getTime(), packed[i]).changes;
        });
        return changed;
      });
    });
  }

  async exportFileRepoLinks(after: string | null, limit: number): Promise<ExportPage<FileRepoLink>> {
    checkPageLimit(limit);
    const [fileHash, repoId] = parseHashIdCursor(after);
    const rows = this.sql.exportFileRepos.all(fileHash, repoId, limit).map((row) => ({ fileHash: storedHash(row.file_hash, "file hash of a link"), repoId: row.repo_id }));
    return exportPage(rows, limit, (last) => hashIdCursor(last.fileHash, last.repoId));
  }

  async importFileRepoLinks(links: readonly FileRepoLink[]): Promise<number> {
    return this.write(() => {
      return this.importAll(() => {
        let changed = 0;
        for (const link of links) {
          checkHash(link.fileHash, "file hash of a link");
          this.requireFileAndRepo(link.fileHash, link.repoId);
          changed += this.sql.linkFile.run(link.fileHash, link.repoId).changes;
        }
        return changed;
      });
    });
  }

  async exportSha256Index(after: string | null, limit: number): Promise<ExportPage<Sha256IndexEntry>> {
    checkPageLimit(limit);
    const [repoId, sha256] = parseIdHashCursor(after);
    const rows = this.sql.exportSha256.all(repoId, sha256, limit).map((row) => ({
      repoId: row.repo_id,
      sha256: storedHash(row.sha256, "digest in the SHA-256 index"),
      fileHash: storedHash(row.file_hash, "file hash in the SHA-256 index"),
    }));
    return exportPage(rows, limit, (last) => idHashCursor(last.repoId, last.sha256));
  }

  async importSha256Index(entries: readonly Sha256IndexEntry[]): Promise<number> {
    return this.write(() => {
      return this.importAll(() => {
        let changed = 0;
        for (const entry of entries) {
          checkHash(entry.sha256, "SHA-256 digest");
          checkHash(entry.fileHash, "file hash in the SHA-256 index");
          this.requireFileAndRepo(entry.fileHash, entry.repoId);
          changed += this.sql.importSha256.run(entry.repoId, entry.sha256, entry.fileHash).changes;
        }
        return changed;
      });
    });
  }

  async exportShards(after: string | null, limit: number): Promise<ExportPage<ShardRow>> {
    checkPageLimit(limit);
    const rows = this.sql.exportShards.all(parseHashCursor(after), limit).map((row) => ({
      hash: storedHash(row.hash, "shard hash"),
      createdAt: new Date(row.created_at),
    }));
    return exportPage(rows, limit, (last) => hashCursor(last.hash));
  }

  async importShards(shards: readonly ShardRow[]): Promise<number> {
    return this.write(() => {
      for (const shard of shards) checkHash(shard.hash, "shard hash");
      return this.importAll(() => {
        let changed = 0;
        for (const shard of shards) changed += this.sql.insertShard.run(shard.hash, shard.createdAt.getTime()).changes;
        return changed;
      });
    });
  }

  async exportDedupEntries(after: string | null, limit: number): Promise<ExportPage<DedupEntry>> {
    checkPageLimit(limit);
    const toEntry = (row: { chunk_hash: Buffer; xorb_hash: Buffer }): DedupEntry => ({
      chunkHash: storedHash(row.chunk_hash, "chunk hash in the dedup index"),
      xorbHash: storedHash(row.xorb_hash, "xorb hash in the dedup index"),
    });
    const rows = this.sql.exportDedup.all(parseHashCursor(after), limit).map(toEntry);
    return wholeChunkPage(rows, limit, async (chunkHash) => this.sql.exportDedupChunk.all(chunkHash).map(toEntry));
  }

  async importDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    return this.write(() => {
      entries.forEach((entry, i) => {
        checkHash(entry.chunkHash, `chunk hash of dedup entry ${i}`);
        checkHash(entry.xorbHash, `xorb hash of dedup entry ${i}`);
      });
      if (entries.length === 0) return 0;
      return this.importAll(() => {
        // One block of sequence numbers after everything stored, in the given order.
        const firstSeq = this.sql.advanceDedupSeq.get(entries.length)!.next - entries.length;
        let changed = 0;
        entries.forEach((entry, i) => {
          changed += this.sql.insertDedup.run(entry.chunkHash, entry.xorbHash, firstSeq + i).changes;
        });
        return changed;
      });
    });
  }

  /** Runs a batch of import statements in one write transaction. */
  private importAll(write: () => number): number {
    return this.db.transaction(write).immediate();
  }

  private requireFileAndRepo(fileHash: Hash, repoId: number): void {
    if (!this.sql.fileExists.get(fileHash)) throw new NotFoundError(`no file ${hashToHex(fileHash)}: import files before what refers to them`);
    if (!this.sql.repoExists.get(repoId)) throw new NotFoundError(`no repository with id ${repoId}`);
  }

  async ping(): Promise<void> {
    this.sql.ping.get();
  }

  async close(): Promise<void> {
    this.bulkShards.close();
    if (this.db.open) this.db.close();
  }

  /**
   * Runs a synchronous write once no large registration holds the write lock: the wait and
   * the write happen in one turn of the event loop, so none can start in between.
   */
  private async write<T>(run: () => T): Promise<T> {
    while (this.bulkWrite !== null) await this.bulkWrite.catch(() => undefined);
    return run();
  }
}

/** Per-connection settings (WAL mode is the database file's, set once by the main connection). */
function configureConnection(db: Database.Database): void {
  db.pragma("synchronous = NORMAL");
  db.pragma("foreign_keys = ON");
  db.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
  db.pragma(`cache_size = -${CACHE_SIZE_KIB}`);
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

function toXorbRecord(row: XorbRow): XorbRecord {
  const hash = storedHash(row.hash, "xorb hash");
  return {
    hash,
    serializedLength: row.serialized_length,
    uncompressedLength: row.uncompressed_length,
    chunks: unpackChunkTable(row.chunks, `xorb ${hashToHex(hash)}`),
  };
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
