/**
 * The scale-out metadata store: PostgreSQL through `pg`, shared by every castor node. It keeps
 * the SQLite store's semantics (see sqlite.ts and the contract suite) with what a shared server
 * adds:
 *
 * - Start-up migrations run inside one transaction holding a transaction-scoped advisory lock,
 *   so nodes starting together apply each migration exactly once and the others wait.
 * - Every "did I insert it?" answer comes from the row count of one `INSERT … ON CONFLICT DO
 *   NOTHING`, which PostgreSQL makes exact across connections: of concurrent inserts of one key,
 *   the later ones wait for the first to commit and then report no row.
 * - A shard registration is one transaction of a few batched statements whose row sets are
 *   passed as packed binary parameters and inserted in key order. Inserting in key order makes
 *   two registrations that share files or dedup entries lock those rows in the same order, so
 *   they wait for each other instead of deadlocking.
 * - Statements that can be single statements are (creating a repository with its `main` branch,
 *   a token with its repository links): atomic without holding a pooled connection across calls.
 *
 * `pg` returns bigint columns as strings; the pool parses them into numbers and refuses any
 * stored value beyond Number.MAX_SAFE_INTEGER with CorruptRecordError instead of rounding it.
 */
import pg from "pg";
import type { PoolClient, QueryConfig, QueryResultRow } from "pg";
import { bytesToPlainHex, hashToHex, HASH_BYTES, type Hash } from "../format/hash.js";
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
  CorruptRecordError,
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

const { Pool, DatabaseError, TypeOverrides, types } = pg;

/** Connections per node when the caller does not say; pg's own default, ample for one process. */
export const DEFAULT_POOL_SIZE = 10;

/** How long opening a connection may take before the call fails (a wrong host must not hang). */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/**
 * Key of the advisory lock that serialises migrations. Advisory locks are per database, so this
 * only has to be unlikely to collide with another application's key in the same database.
 */
const MIGRATION_LOCK_KEY = 0x6361_7374_6f72_0001n; // "castor" + 1

/**
 * Schema migrations; entry i takes `castor_schema.version` from i to i + 1. Append only: a
 * released entry is never edited, since databases in the field have already run it.
 *
 * Equivalent to SQLite's schema: hashes are 32-byte bytea, xorb chunk tables and file terms
 * are packed bytea (layouts in cas.ts), ids are bigint identities, times are timestamptz (stored
 * to the microsecond, so a millisecond Date round-trips exactly). Lists come back in creation
 * order through identity columns (`seq`), never through time stamps that can tie.
 */
export const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE repos (
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    type       text        NOT NULL,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT repos_pkey PRIMARY KEY (id),
    CONSTRAINT repos_type_check CHECK (type IN ('model', 'dataset', 'space')),
    CONSTRAINT repos_type_name_key UNIQUE (type, name)
  );

  CREATE TABLE revisions (
    repo_id    bigint      NOT NULL,
    name       text        NOT NULL,
    kind       text        NOT NULL,
    created_at timestamptz NOT NULL,
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    CONSTRAINT revisions_pkey PRIMARY KEY (repo_id, name),
    CONSTRAINT revisions_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES repos (id) ON DELETE CASCADE,
    CONSTRAINT revisions_kind_check CHECK (kind IN ('branch', 'tag'))
  );

  CREATE TABLE hub_tokens (
    id          text        NOT NULL,
    secret_hash text        NOT NULL,
    access      text        NOT NULL,
    all_repos   boolean     NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz,
    revoked_at  timestamptz,
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
    CONSTRAINT hub_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT hub_tokens_secret_hash_key UNIQUE (secret_hash),
    CONSTRAINT hub_tokens_access_check CHECK (access IN ('read', 'write'))
  );

  CREATE TABLE hub_token_repos (
    token_id text   NOT NULL,
    repo_id  bigint NOT NULL,
    CONSTRAINT hub_token_repos_pkey PRIMARY KEY (token_id, repo_id),
    CONSTRAINT hub_token_repos_token_id_fkey FOREIGN KEY (token_id) REFERENCES hub_tokens (id) ON DELETE CASCADE,
    CONSTRAINT hub_token_repos_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES repos (id) ON DELETE CASCADE
  );
  -- Lets deleting a repository find its token links without scanning them all.
  CREATE INDEX hub_token_repos_by_repo ON hub_token_repos (repo_id);

  CREATE TABLE xorbs (
    hash                bytea       NOT NULL,
    serialized_length   bigint      NOT NULL,
    uncompressed_length bigint      NOT NULL,
    created_at          timestamptz NOT NULL,
    chunks              bytea       NOT NULL,
    CONSTRAINT xorbs_pkey PRIMARY KEY (hash),
    CONSTRAINT xorbs_hash_check CHECK (octet_length(hash) = 32),
    CONSTRAINT xorbs_lengths_check CHECK (serialized_length >= 0 AND uncompressed_length >= 0),
    CONSTRAINT xorbs_chunks_check CHECK (octet_length(chunks) > 0 AND octet_length(chunks) % 40 = 0)
  );

  CREATE TABLE files (
    hash       bytea       NOT NULL,
    size       bigint      NOT NULL,
    sha256     bytea,
    created_at timestamptz NOT NULL,
    terms      bytea       NOT NULL,
    CONSTRAINT files_pkey PRIMARY KEY (hash),
    CONSTRAINT files_hash_check CHECK (octet_length(hash) = 32),
    CONSTRAINT files_size_check CHECK (size >= 0),
    CONSTRAINT files_sha256_check CHECK (sha256 IS NULL OR octet_length(sha256) = 32),
    CONSTRAINT files_terms_check CHECK (octet_length(terms) % 44 = 0)
  );

  -- The primary key serves isFileInRepo. No index by repo_id: nothing deletes repositories
  -- yet, and every insert would pay for it.
  CREATE TABLE file_repos (
    file_hash bytea  NOT NULL,
    repo_id   bigint NOT NULL,
    CONSTRAINT file_repos_pkey PRIMARY KEY (file_hash, repo_id),
    CONSTRAINT file_repos_file_hash_fkey FOREIGN KEY (file_hash) REFERENCES files (hash),
    CONSTRAINT file_repos_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES repos (id) ON DELETE CASCADE
  );

  CREATE TABLE file_sha256 (
    repo_id   bigint NOT NULL,
    sha256    bytea  NOT NULL,
    file_hash bytea  NOT NULL,
    CONSTRAINT file_sha256_pkey PRIMARY KEY (repo_id, sha256),
    CONSTRAINT file_sha256_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES repos (id) ON DELETE CASCADE,
    CONSTRAINT file_sha256_file_hash_fkey FOREIGN KEY (file_hash) REFERENCES files (hash),
    CONSTRAINT file_sha256_sha256_check CHECK (octet_length(sha256) = 32)
  );

  CREATE TABLE shards (
    hash       bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT shards_pkey PRIMARY KEY (hash),
    CONSTRAINT shards_hash_check CHECK (octet_length(hash) = 32)
  );

  -- The primary key both deduplicates entries and serves the lookup by chunk hash (it sorts
  -- the few xorbs of one chunk). Oldest first is (registration_seq, position): one sequence
  -- value per registration, then the entry's place in its list. A sequence never blocks, so
  -- concurrent registrations on several nodes do not serialise on a shared counter row.
  CREATE TABLE dedup_chunks (
    chunk_hash       bytea   NOT NULL,
    xorb_hash        bytea   NOT NULL,
    registration_seq bigint  NOT NULL,
    position         integer NOT NULL,
    CONSTRAINT dedup_chunks_pkey PRIMARY KEY (chunk_hash, xorb_hash),
    CONSTRAINT dedup_chunks_hashes_check CHECK (octet_length(chunk_hash) = 32 AND octet_length(xorb_hash) = 32)
  );
  CREATE SEQUENCE dedup_registration_seq AS bigint;
  `,
];

/** The database was migrated by a newer castor whose schema this version does not know. */
export class PostgresSchemaError extends Error {
  override readonly name = "PostgresSchemaError";
}

/** The database could not be reached or refused the connection (castor cannot start). */
export class PostgresConnectionError extends Error {
  override readonly name = "PostgresConnectionError";
}

export interface PostgresStoreOptions {
  /** Most connections this store holds at once; default DEFAULT_POOL_SIZE. */
  poolSize?: number;
  /** Default DEFAULT_CONNECT_TIMEOUT_MS. */
  connectTimeoutMs?: number;
}

interface RepoRow {
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
  created_at: Date;
}
interface DatedFileRow extends FileRow {
  hash: Buffer;
  created_at: Date;
}
interface DedupRow {
  chunk_hash: Buffer;
  xorb_hash: Buffer;
}

// ---------------------------------------------------------------------------------------------
// Statements. Each has a name, so every pooled connection parses and plans it once.

const REPO_COLUMNS = "id, type, name, created_at";
const REVISION_COLUMNS = "repo_id, name, kind, created_at";
const TOKEN_COLUMNS = `t.id, t.secret_hash, t.access, t.all_repos, t.created_at, t.expires_at, t.revoked_at,
  ARRAY(SELECT l.repo_id FROM hub_token_repos l WHERE l.token_id = t.id ORDER BY l.repo_id) AS repo_ids`;

/** The `index`-th (1-based) hash of a parameter holding packed 32-byte hashes. */
const hashAt = (param: string, index: string): string => `substring(${param}::bytea FROM (${index})::integer * 32 - 31 FOR 32)`;
/** The indexes 1..n of a parameter holding n packed 32-byte hashes. */
const packedIndexes = (param: string): string => `generate_series(1, length(${param}::bytea) / 32)`;

const SQL = {
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
  ping: `SELECT 1`,

  insertXorb: `
    INSERT INTO xorbs (hash, serialized_length, uncompressed_length, created_at, chunks)
    VALUES ($1, $2, $3, $4, $5) ON CONFLICT (hash) DO NOTHING`,
  getXorbs: `SELECT hash, serialized_length, uncompressed_length, chunks FROM xorbs WHERE hash = ANY ($1::bytea[])`,
  xorbSize: `SELECT serialized_length FROM xorbs WHERE hash = $1`,

  lockRepo: `SELECT 1 FROM repos WHERE id = $1 FOR KEY SHARE`,
  insertShard: `INSERT INTO shards (hash, created_at) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`,
  // $1 packed file hashes; $2..$4 arrays in the same order.
  insertFiles: `
    INSERT INTO files (hash, size, sha256, created_at, terms)
    SELECT ${hashAt("$1", "f.i")}, f.size, f.sha256, $5::timestamptz, f.terms
    FROM unnest($2::bigint[], $3::bytea[], $4::bytea[]) WITH ORDINALITY AS f (size, sha256, terms, i)
    ORDER BY 1
    ON CONFLICT (hash) DO NOTHING`,
  linkFiles: `
    INSERT INTO file_repos (file_hash, repo_id)
    SELECT ${hashAt("$1", "i")}, $2::bigint FROM ${packedIndexes("$1")} AS i
    ORDER BY 1
    ON CONFLICT DO NOTHING`,
  // $2 packed digests, $3 packed file hashes; digests are distinct (ON CONFLICT DO UPDATE may
  // not touch one row twice in a statement).
  putSha256: `
    INSERT INTO file_sha256 (repo_id, sha256, file_hash)
    SELECT $1::bigint, ${hashAt("$2", "i")}, ${hashAt("$3", "i")} FROM ${packedIndexes("$2")} AS i
    ORDER BY 2
    ON CONFLICT (repo_id, sha256) DO UPDATE SET file_hash = excluded.file_hash`,
  // Sorting by (chunk, xorb, position) makes the first of repeated entries the one inserted.
  insertDedup: `
    WITH registration AS MATERIALIZED (SELECT nextval('dedup_registration_seq') AS seq)
    INSERT INTO dedup_chunks (chunk_hash, xorb_hash, registration_seq, position)
    SELECT ${hashAt("$1", "i")}, ${hashAt("$2", "i")}, registration.seq, i
    FROM registration, ${packedIndexes("$1")} AS i
    ORDER BY 1, 2, 4
    ON CONFLICT DO NOTHING`,
  getFile: `SELECT size, sha256, terms FROM files WHERE hash = $1`,
  fileInRepo: `SELECT 1 FROM file_repos WHERE file_hash = $1 AND repo_id = $2`,
  fileBySha256: `SELECT file_hash FROM file_sha256 WHERE repo_id = $1 AND sha256 = $2`,
  dedupXorbs: `SELECT xorb_hash FROM dedup_chunks WHERE chunk_hash = $1 ORDER BY registration_seq, position LIMIT $2`,

  // Migration (see migration.ts): exports in primary-key order, keyset-paged; imports of whole
  // batches as arrays. Arrays of bytea travel as hex text — slower than the packed form of
  // registrations, and fine for a one-off copy.
  importRepo: `INSERT INTO repos (type, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (type, name) DO NOTHING RETURNING ${REPO_COLUMNS}`,
  importRevisions: `
    INSERT INTO revisions (repo_id, name, kind, created_at)
    SELECT r.repo_id, r.name, r.kind, r.created_at
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[]) WITH ORDINALITY AS r (repo_id, name, kind, created_at, i)
    ORDER BY r.i
    ON CONFLICT DO NOTHING`,
  importToken: `
    INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at, expires_at, revoked_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
  carryRevocation: `UPDATE hub_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`,
  importTokenRepos: `INSERT INTO hub_token_repos (token_id, repo_id) SELECT $1, unnest($2::bigint[]) ON CONFLICT DO NOTHING`,
  exportXorbs: `SELECT hash, serialized_length, uncompressed_length, created_at, chunks FROM xorbs WHERE hash > $1 ORDER BY hash LIMIT $2`,
  importXorbs: `
    INSERT INTO xorbs (hash, serialized_length, uncompressed_length, created_at, chunks)
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::timestamptz[], $5::bytea[])
    ON CONFLICT (hash) DO NOTHING`,
  exportFiles: `SELECT hash, size, sha256, created_at, terms FROM files WHERE hash > $1 ORDER BY hash LIMIT $2`,
  importFiles: `
    INSERT INTO files (hash, size, sha256, created_at, terms)
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bytea[], $4::timestamptz[], $5::bytea[])
    ON CONFLICT (hash) DO NOTHING`,
  exportFileRepos: `
    SELECT file_hash, repo_id FROM file_repos WHERE (file_hash, repo_id) > ($1::bytea, $2::bigint)
    ORDER BY file_hash, repo_id LIMIT $3`,
  importFileRepos: `INSERT INTO file_repos (file_hash, repo_id) SELECT * FROM unnest($1::bytea[], $2::bigint[]) ON CONFLICT DO NOTHING`,
  exportSha256: `
    SELECT repo_id, sha256, file_hash FROM file_sha256 WHERE (repo_id, sha256) > ($1::bigint, $2::bytea)
    ORDER BY repo_id, sha256 LIMIT $3`,
  importSha256: `
    INSERT INTO file_sha256 (repo_id, sha256, file_hash)
    SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[])
    ON CONFLICT (repo_id, sha256) DO UPDATE SET file_hash = excluded.file_hash
    WHERE file_sha256.file_hash <> excluded.file_hash`,
  exportShards: `SELECT hash, created_at FROM shards WHERE hash > $1 ORDER BY hash LIMIT $2`,
  importShards: `INSERT INTO shards (hash, created_at) SELECT * FROM unnest($1::bytea[], $2::timestamptz[]) ON CONFLICT (hash) DO NOTHING`,
  exportDedup: `
    SELECT chunk_hash, xorb_hash FROM dedup_chunks WHERE chunk_hash > $1
    ORDER BY chunk_hash, registration_seq, position LIMIT $2`,
  exportDedupChunk: `SELECT chunk_hash, xorb_hash FROM dedup_chunks WHERE chunk_hash = $1 ORDER BY registration_seq, position`,
} as const;

type StatementName = keyof typeof SQL;

const PG_UNIQUE_VIOLATION = "23505";
const PG_FOREIGN_KEY_VIOLATION = "23503";
/** bigint[]; pg's builtins table names scalar types only. */
const INT8_ARRAY_OID = 1016;

/**
 * Type parsers of this store's pool (the process-wide `pg.types` stay untouched): bigint values
 * become numbers, and a value a number cannot hold exactly is a damaged row, not a rounding.
 */
function storeTypeParsers(): pg.CustomTypesConfig {
  const overrides = new TypeOverrides();
  const parseInt8 = (text: string): number => {
    const value = Number(text);
    if (!Number.isSafeInteger(value)) {
      throw new CorruptRecordError(
        `a stored integer ${text} is beyond ${Number.MAX_SAFE_INTEGER}, the largest castor handles: the metadata database is damaged (restore it from a backup)`,
      );
    }
    return value;
  };
  // @types/pg types getTypeParser's oid as the scalar builtins enum, which lacks array types.
  const builtinParser = types.getTypeParser as (oid: number) => (text: string) => unknown;
  const parseInt8Array = builtinParser(INT8_ARRAY_OID) as (text: string) => string[];
  overrides.setTypeParser(types.builtins.INT8, parseInt8);
  overrides.setTypeParser(INT8_ARRAY_OID, (text: string) => parseInt8Array(text).map(parseInt8));
  return overrides;
}

export class PostgresMetadataStore implements MetadataStore {
  /**
   * Connects to `databaseUrl` (a `postgres://` URL), brings the schema up to date and returns
   * the store. PostgresConnectionError when the server cannot be reached or refuses the login;
   * PostgresSchemaError when a newer castor migrated the database.
   */
  static async open(databaseUrl: string, options: PostgresStoreOptions = {}): Promise<PostgresMetadataStore> {
    const poolSize = options.poolSize ?? DEFAULT_POOL_SIZE;
    if (!Number.isSafeInteger(poolSize) || poolSize < 1) {
      throw new RangeError(`the PostgreSQL pool size must be a positive integer, got ${poolSize}`);
    }
    const pool = new Pool({
      connectionString: databaseUrl,
      max: poolSize,
      connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      application_name: "castor",
      types: storeTypeParsers(),
    });
    // An idle connection that breaks (server restart, network cut) is discarded by the pool and
    // the next query opens a new one; without a listener the 'error' event would kill the process.
    pool.on("error", () => undefined);
    try {
      await migrate(pool, describeDatabase(databaseUrl));
    } catch (err) {
      await pool.end().catch(() => undefined);
      throw isConnectionFailure(err)
        ? new PostgresConnectionError(
            `cannot use the PostgreSQL database ${describeDatabase(databaseUrl)}: ${(err as Error).message}; check CASTOR_DATABASE_URL and that the server is running`,
            { cause: err },
          )
        : err;
    }
    return new PostgresMetadataStore(pool, poolSize);
  }

  private closed = false;

  private constructor(
    private readonly pool: pg.Pool,
    /** Most connections this store holds at once. */
    readonly poolSize: number,
  ) {}

  private async run<R extends QueryResultRow>(name: StatementName, values: unknown[]): Promise<pg.QueryResult<R>> {
    const query: QueryConfig = { name, text: SQL[name], values };
    return this.pool.query<R>(query);
  }

  private async runOn<R extends QueryResultRow>(client: PoolClient, name: StatementName, values: unknown[]): Promise<pg.QueryResult<R>> {
    return client.query<R>({ name, text: SQL[name], values });
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

  async putXorb(xorb: XorbRecord): Promise<boolean> {
    const chunks = packXorbRecord(xorb);
    const result = await this.run("insertXorb", [xorb.hash, xorb.serializedLength, xorb.uncompressedLength, new Date(), chunks]);
    return result.rowCount === 1;
  }

  async getXorbs(hashes: readonly Hash[]): Promise<Map<string, XorbRecord>> {
    const found = new Map<string, XorbRecord>();
    if (hashes.length === 0) return found;
    const distinct = [...new Map(hashes.map((hash) => [bytesToPlainHex(hash), hash])).values()];
    for (const row of (await this.run<XorbRow>("getXorbs", [distinct])).rows) {
      const record = toXorbRecord(row);
      found.set(hashToHex(record.hash), record);
    }
    return found;
  }

  async getXorbSize(hash: Hash): Promise<number | null> {
    const { rows } = await this.run<{ serialized_length: number }>("xorbSize", [hash]);
    return rows.length > 0 ? rows[0].serialized_length : null;
  }

  async registerShard(registration: ShardRegistration): Promise<boolean> {
    const { shardHash, repoId, files, dedupEntries } = registration;
    checkHash(shardHash, "shard hash");
    if (!Number.isSafeInteger(repoId)) throw new InvalidRecordError(`repository id must be an integer, got ${String(repoId)}`);
    // Everything is checked and packed before the transaction starts, so a bad record costs no
    // round trip and holds no lock.
    const batch = packRegistration(files, dedupEntries);

    return this.inTransaction(async (client) => {
      if ((await this.runOn(client, "lockRepo", [repoId])).rowCount === 0) {
        throw new NotFoundError(`no repository with id ${repoId}`);
      }
      const now = new Date();
      const isNew = (await this.runOn(client, "insertShard", [shardHash, now])).rowCount === 1;
      if (batch.fileCount > 0) {
        await this.runOn(client, "insertFiles", [batch.fileHashes, batch.sizes, batch.sha256s, batch.terms, now]);
        await this.runOn(client, "linkFiles", [batch.fileHashes, repoId]);
      }
      if (batch.digests.length > 0) {
        await this.runOn(client, "putSha256", [repoId, batch.digests, batch.digestFiles]);
      }
      if (batch.chunkHashes.length > 0) {
        await this.runOn(client, "insertDedup", [batch.chunkHashes, batch.dedupXorbHashes]);
      }
      return isNew;
    });
  }

  async getFile(hash: Hash): Promise<FileRecord | null> {
    const { rows } = await this.run<FileRow>("getFile", [hash]);
    if (rows.length === 0) return null;
    const row = rows[0];
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
    return ((await this.run("fileInRepo", [fileHash, repoId])).rowCount ?? 0) > 0;
  }

  async findFileBySha256(repoId: number, sha256: Uint8Array): Promise<Hash | null> {
    const { rows } = await this.run<{ file_hash: Buffer }>("fileBySha256", [repoId, sha256]);
    return rows.length > 0 ? storedHash(rows[0].file_hash, "file hash in the SHA-256 index") : null;
  }

  async findDedupXorbs(chunkHash: Hash, limit: number): Promise<Hash[]> {
    if (!Number.isSafeInteger(limit) || limit < 0) {
      throw new RangeError(`the dedup lookup limit must be a non-negative integer, got ${limit}`);
    }
    if (limit === 0) return [];
    const { rows } = await this.run<{ xorb_hash: Buffer }>("dedupXorbs", [chunkHash, limit]);
    return rows.map((row) => storedHash(row.xorb_hash, "xorb hash in the dedup index"));
  }

  // -------------------------------------------------------------------------------------------
  // Migration (migration.ts)

  async importRepo(repo: Omit<Repo, "id">): Promise<{ repo: Repo; inserted: boolean }> {
    const { rows } = await this.run<RepoRow>("importRepo", [repo.type, repo.name, repo.createdAt]);
    if (rows.length > 0) return { repo: toRepo(rows[0]), inserted: true };
    const existing = await this.getRepo(repo.type, repo.name);
    if (existing === null) throw new Error(`repository ${repo.type}:${repo.name} neither inserted nor found (deleted meanwhile?)`);
    return { repo: existing, inserted: false };
  }

  async importRevisions(revisions: readonly Revision[]): Promise<number> {
    if (revisions.length === 0) return 0;
    return importing(async () => {
      const result = await this.run("importRevisions", [
        revisions.map((r) => r.repoId),
        revisions.map((r) => r.name),
        revisions.map((r) => r.kind),
        revisions.map((r) => r.createdAt),
      ]);
      return result.rowCount ?? 0;
    });
  }

  async importHubTokens(tokens: readonly HubToken[]): Promise<number> {
    if (tokens.length === 0) return 0;
    return importing(() =>
      this.inTransaction(async (client) => {
        let changed = 0;
        for (const token of tokens) {
          const inserted = await this.runOn(client, "importToken", [
            token.id,
            token.secretHash,
            token.access,
            token.repos === "all",
            token.createdAt,
            token.expiresAt,
            token.revokedAt,
          ]);
          if (inserted.rowCount === 0) {
            // Present already: its record (and coverage) stays; only a revocation carries over.
            if (token.revokedAt !== null) changed += (await this.runOn(client, "carryRevocation", [token.revokedAt, token.id])).rowCount ?? 0;
            continue;
          }
          changed++;
          if (token.repos !== "all" && token.repos.length > 0) await this.runOn(client, "importTokenRepos", [token.id, token.repos]);
        }
        return changed;
      }),
    );
  }

  async exportXorbs(after: string | null, limit: number): Promise<ExportPage<DatedXorb>> {
    checkPageLimit(limit);
    const { rows } = await this.run<DatedXorbRow>("exportXorbs", [parseHashCursor(after), limit]);
    const xorbs = rows.map((row) => ({ ...toXorbRecord(row), createdAt: row.created_at }));
    return exportPage(xorbs, limit, (last) => hashCursor(last.hash));
  }

  async importXorbs(xorbs: readonly DatedXorb[]): Promise<number> {
    const packed = xorbs.map((xorb) => packXorbRecord(xorb));
    if (xorbs.length === 0) return 0;
    const result = await this.run("importXorbs", [
      xorbs.map((x) => x.hash),
      xorbs.map((x) => x.serializedLength),
      xorbs.map((x) => x.uncompressedLength),
      xorbs.map((x) => x.createdAt),
      packed,
    ]);
    return result.rowCount ?? 0;
  }

  async exportFiles(after: string | null, limit: number): Promise<ExportPage<DatedFile>> {
    checkPageLimit(limit);
    const { rows } = await this.run<DatedFileRow>("exportFiles", [parseHashCursor(after), limit]);
    const files = rows.map((row): DatedFile => {
      const hash = storedHash(row.hash, "file hash");
      const name = `file ${hashToHex(hash)}`;
      return {
        hash,
        size: row.size,
        terms: unpackFileTerms(row.terms, name),
        sha256: row.sha256 === null ? null : storedHash(row.sha256, `SHA-256 of ${name}`),
        createdAt: row.created_at,
      };
    });
    return exportPage(files, limit, (last) => hashCursor(last.hash));
  }

  async importFiles(files: readonly DatedFile[]): Promise<number> {
    const packed = files.map((file) => packFileRecord(file));
    if (files.length === 0) return 0;
    const result = await this.run("importFiles", [
      files.map((f) => f.hash),
      files.map((f) => f.size),
      files.map((f) => f.sha256),
      files.map((f) => f.createdAt),
      packed,
    ]);
    return result.rowCount ?? 0;
  }

  async exportFileRepoLinks(after: string | null, limit: number): Promise<ExportPage<FileRepoLink>> {
    checkPageLimit(limit);
    const [fileHash, repoId] = parseHashIdCursor(after);
    const { rows } = await this.run<{ file_hash: Buffer; repo_id: number }>("exportFileRepos", [fileHash, repoId, limit]);
    const links = rows.map((row) => ({ fileHash: storedHash(row.file_hash, "file hash of a link"), repoId: row.repo_id }));
    return exportPage(links, limit, (last) => hashIdCursor(last.fileHash, last.repoId));
  }

  async importFileRepoLinks(links: readonly FileRepoLink[]): Promise<number> {
    links.forEach((link) => checkHash(link.fileHash, "file hash of a link"));
    if (links.length === 0) return 0;
    return importing(async () => {
      const result = await this.run("importFileRepos", [links.map((l) => l.fileHash), links.map((l) => l.repoId)]);
      return result.rowCount ?? 0;
    });
  }

  async exportSha256Index(after: string | null, limit: number): Promise<ExportPage<Sha256IndexEntry>> {
    checkPageLimit(limit);
    const [repoId, sha256] = parseIdHashCursor(after);
    const { rows } = await this.run<{ repo_id: number; sha256: Buffer; file_hash: Buffer }>("exportSha256", [repoId, sha256, limit]);
    const entries = rows.map((row) => ({
      repoId: row.repo_id,
      sha256: storedHash(row.sha256, "digest in the SHA-256 index"),
      fileHash: storedHash(row.file_hash, "file hash in the SHA-256 index"),
    }));
    return exportPage(entries, limit, (last) => idHashCursor(last.repoId, last.sha256));
  }

  async importSha256Index(entries: readonly Sha256IndexEntry[]): Promise<number> {
    // ON CONFLICT DO UPDATE may not touch a row twice in one statement: the last entry of a key wins.
    const byKey = new Map<string, Sha256IndexEntry>();
    for (const entry of entries) {
      checkHash(entry.sha256, "SHA-256 digest");
      checkHash(entry.fileHash, "file hash in the SHA-256 index");
      byKey.set(idHashCursor(entry.repoId, entry.sha256), entry);
    }
    if (byKey.size === 0) return 0;
    const distinct = [...byKey.values()];
    return importing(async () => {
      const result = await this.run("importSha256", [distinct.map((e) => e.repoId), distinct.map((e) => e.sha256), distinct.map((e) => e.fileHash)]);
      return result.rowCount ?? 0;
    });
  }

  async exportShards(after: string | null, limit: number): Promise<ExportPage<ShardRow>> {
    checkPageLimit(limit);
    const { rows } = await this.run<{ hash: Buffer; created_at: Date }>("exportShards", [parseHashCursor(after), limit]);
    const shards = rows.map((row) => ({ hash: storedHash(row.hash, "shard hash"), createdAt: row.created_at }));
    return exportPage(shards, limit, (last) => hashCursor(last.hash));
  }

  async importShards(shards: readonly ShardRow[]): Promise<number> {
    shards.forEach((shard) => checkHash(shard.hash, "shard hash"));
    if (shards.length === 0) return 0;
    const result = await this.run("importShards", [shards.map((s) => s.hash), shards.map((s) => s.createdAt)]);
    return result.rowCount ?? 0;
  }

  async exportDedupEntries(after: string | null, limit: number): Promise<ExportPage<DedupEntry>> {
    checkPageLimit(limit);
    const toEntry = (row: DedupRow): DedupEntry => ({
      chunkHash: storedHash(row.chunk_hash, "chunk hash in the dedup index"),
      xorbHash: storedHash(row.xorb_hash, "xorb hash in the dedup index"),
    });
    const { rows } = await this.run<DedupRow>("exportDedup", [parseHashCursor(after), limit]);
    return wholeChunkPage(rows.map(toEntry), limit, async (chunkHash) => (await this.run<DedupRow>("exportDedupChunk", [chunkHash])).rows.map(toEntry));
  }

  async importDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    const { chunkHashes, dedupXorbHashes } = packRegistration([], entries);
    if (entries.length === 0) return 0;
    // The registration statement: one sequence value, positions in the given order.
    const result = await this.run("insertDedup", [chunkHashes, dedupXorbHashes]);
    return result.rowCount ?? 0;
  }

  async ping(): Promise<void> {
    await this.run("ping", []);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }

  /** Runs `work` in a transaction on one pooled connection; any error rolls everything back. */
  private async inTransaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query("BEGIN");
      const result = await work(client);
      await client.query("COMMIT");
      return result;
    } catch (err) {
      // A connection that cannot even roll back is in an unknown state: the pool drops it.
      await client.query("ROLLBACK").catch((rollbackError: Error) => {
        broken = rollbackError;
      });
      throw err;
    } finally {
      client.release(broken);
    }
  }
}

/**
 * Runs an import, turning a foreign-key violation (a row naming a file or repository the store
 * lacks) into NotFoundError and a taken secret hash into AlreadyExistsError.
 */
async function importing<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (err) {
    if (isViolation(err, PG_FOREIGN_KEY_VIOLATION)) {
      throw new NotFoundError(`an imported row refers to something the store lacks (${(err as pg.DatabaseError).detail ?? (err as Error).message}): import repositories and files before what refers to them`);
    }
    if (isViolation(err, PG_UNIQUE_VIOLATION)) throw new AlreadyExistsError("another hub token has the secret hash of an imported one");
    throw err;
  }
}

/** A registration's row sets as statement parameters; hashes packed back to back. */
interface PackedRegistration {
  fileCount: number;
  /** Files kept (first occurrence of each hash), in shard order. */
  fileHashes: Buffer;
  sizes: number[];
  sha256s: (Uint8Array | null)[];
  terms: Uint8Array[];
  /** Distinct digests of kept files; the last file with a digest wins, as in shard order. */
  digests: Buffer;
  digestFiles: Buffer;
  chunkHashes: Buffer;
  dedupXorbHashes: Buffer;
}

/**
 * Checks every record (InvalidRecordError naming the first bad one) and lays the rows out as
 * parameters. Hashes travel as one binary bytea per column — `pg` would send an array of them
 * as hex text — which measured about 1.7× faster for 100,000 dedup entries.
 */
function packRegistration(files: readonly FileRecord[], dedupEntries: readonly DedupEntry[]): PackedRegistration {
  const kept: FileRecord[] = [];
  const terms: Uint8Array[] = [];
  const seen = new Set<string>();
  for (const file of files) {
    const packedTerms = packFileRecord(file);
    const key = bytesToPlainHex(file.hash);
    if (seen.has(key)) continue;
    seen.add(key);
    kept.push(file);
    terms.push(packedTerms);
  }

  const fileHashes = Buffer.allocUnsafe(kept.length * HASH_BYTES);
  const fileByDigest = new Map<string, { digest: Uint8Array; file: Hash }>();
  for (let i = 0; i < kept.length; i++) {
    const file = kept[i];
    fileHashes.set(file.hash, i * HASH_BYTES);
    if (file.sha256 !== null) fileByDigest.set(bytesToPlainHex(file.sha256), { digest: file.sha256, file: file.hash });
  }
  const digests = Buffer.allocUnsafe(fileByDigest.size * HASH_BYTES);
  const digestFiles = Buffer.allocUnsafe(fileByDigest.size * HASH_BYTES);
  let at = 0;
  for (const { digest, file } of fileByDigest.values()) {
    digests.set(digest, at);
    digestFiles.set(file, at);
    at += HASH_BYTES;
  }

  const chunkHashes = Buffer.allocUnsafe(dedupEntries.length * HASH_BYTES);
  const dedupXorbHashes = Buffer.allocUnsafe(dedupEntries.length * HASH_BYTES);
  for (let i = 0; i < dedupEntries.length; i++) {
    const entry = dedupEntries[i];
    checkHash(entry.chunkHash, `chunk hash of dedup entry ${i}`);
    checkHash(entry.xorbHash, `xorb hash of dedup entry ${i}`);
    chunkHashes.set(entry.chunkHash, i * HASH_BYTES);
    dedupXorbHashes.set(entry.xorbHash, i * HASH_BYTES);
  }

  return {
    fileCount: kept.length,
    fileHashes,
    sizes: kept.map((file) => file.size),
    sha256s: kept.map((file) => file.sha256),
    terms,
    digests,
    digestFiles,
    chunkHashes,
    dedupXorbHashes,
  };
}

/**
 * Brings the schema up to date in one transaction. The advisory lock makes a second node that
 * starts at the same moment wait here and then find the schema current, instead of racing to
 * create the same tables.
 */
async function migrate(pool: pg.Pool, database: string): Promise<void> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query("BEGIN");
    await client.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK_KEY.toString()]);
    await client.query(`
      CREATE TABLE IF NOT EXISTS castor_schema (
        one     boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one),
        version integer NOT NULL
      )`);
    await client.query("INSERT INTO castor_schema (version) VALUES (0) ON CONFLICT DO NOTHING");
    const current = (await client.query<{ version: number }>("SELECT version FROM castor_schema")).rows[0].version;
    if (current > MIGRATIONS.length) {
      throw new PostgresSchemaError(
        `the PostgreSQL database ${database} has castor schema version ${current}, but this castor only knows versions up to ${MIGRATIONS.length}: upgrade castor (or point CASTOR_DATABASE_URL at another database)`,
      );
    }
    for (let version = current; version < MIGRATIONS.length; version++) {
      await client.query(MIGRATIONS[version]);
    }
    if (current < MIGRATIONS.length) await client.query("UPDATE castor_schema SET version = $1", [MIGRATIONS.length]);
    await client.query("COMMIT");
  } catch (err) {
    await client.query("ROLLBACK").catch((rollbackError: Error) => {
      broken = rollbackError;
    });
    throw err;
  } finally {
    client.release(broken);
  }
}

/** host:port/database of a connection URL, never its password (for error messages). */
function describeDatabase(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    return `${url.hostname || "localhost"}:${url.port || "5432"}${url.pathname || "/"}`;
  } catch {
    return "named by CASTOR_DATABASE_URL";
  }
}

/**
 * Errors that mean "no usable connection" rather than a bug in a statement: network failures,
 * timeouts, refused logins, a missing database.
 */
function isConnectionFailure(err: unknown): boolean {
  if (err instanceof DatabaseError) {
    // Class 08: connection exception; 28: invalid authorization; 3D000: no such database;
    // 57P03: the server is starting up or shutting down; 42501: the role may not create the
    // schema (a setup problem the operator fixes, like the others).
    const code = err.code ?? "";
    return code.startsWith("08") || code.startsWith("28") || ["3D000", "57P03", "42501"].includes(code);
  }
  return err instanceof Error && !(err instanceof PostgresSchemaError);
}

function isViolation(err: unknown, code: string): boolean {
  return err instanceof DatabaseError && err.code === code;
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
  return { id: row.id, type: row.type, name: row.name, createdAt: row.created_at };
}

function toRevision(row: RevisionRow): Revision {
  return { repoId: row.repo_id, name: row.name, kind: row.kind, createdAt: row.created_at };
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
  };
}
