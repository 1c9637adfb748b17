/**
 * The scale-out store's schema and its migrations. Start-up migrations run inside one
 * transaction holding a transaction-scoped advisory lock, so nodes starting together apply
 * each migration exactly once and the others wait.
 */
import type pg from "pg";

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
  // Hub histories, as SQLite's third migration: repository visibility (rows made before it stay
  // private, the safe default), the commit each revision points at (NULL for older rows),
  // commits and trees keyed by (repository, git oid), token owners and namespaces. Oids are
  // text in the "C" collation, so keys compare bytewise as in SQLite whatever the database's
  // locale, and exports page through the primary key's order. A tree's entries are one ASCII
  // JSON text (codec in ../history.ts), kept as text: jsonb would re-serialize it on every
  // read, and bytea travels as hex text through \`pg\`, which decodes every column as UTF-8.
  // Deleting a repository cascades to everything of it (file_repos is scanned once: see the
  // comment on its table).
  `
  ALTER TABLE repos ADD COLUMN private boolean NOT NULL DEFAULT true;
  ALTER TABLE revisions ADD COLUMN commit_oid text;
  ALTER TABLE hub_tokens ADD COLUMN owner text, ADD COLUMN namespaces text[] NOT NULL DEFAULT '{}';

  CREATE TABLE commits (
    repo_id     bigint      NOT NULL,
    oid         text        COLLATE "C" NOT NULL,
    tree_oid    text        NOT NULL,
    parent_oids text[]      NOT NULL,
    title       text        NOT NULL,
    message     text        NOT NULL,
    author      text        NOT NULL,
    created_at  timestamptz NOT NULL,
    object      text        NOT NULL,
    CONSTRAINT commits_pkey PRIMARY KEY (repo_id, oid),
    CONSTRAINT commits_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES repos (id) ON DELETE CASCADE
  );

  CREATE TABLE trees (
    repo_id bigint NOT NULL,
    oid     text   COLLATE "C" NOT NULL,
    entries text   NOT NULL,
    CONSTRAINT trees_pkey PRIMARY KEY (repo_id, oid),
    CONSTRAINT trees_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES repos (id) ON DELETE CASCADE
  );
  `,
  // Garbage collection, as SQLite's fourth migration: leases, condemnation marks and epochs
  // (../gc.ts), and file_sha256 indexed by file, which a deleted file's entries are found by and
  // which the foreign key check of every deleted file row would otherwise scan the table for.
  `
  CREATE TABLE gc_leases (
    kind      text        NOT NULL,
    hash      bytea       NOT NULL,
    leased_at timestamptz NOT NULL,
    deleting  boolean     NOT NULL DEFAULT false,
    epoch     bigint      NOT NULL,
    CONSTRAINT gc_leases_pkey PRIMARY KEY (kind, hash),
    CONSTRAINT gc_leases_kind_check CHECK (kind IN ('xorb', 'file', 'inline')),
    CONSTRAINT gc_leases_hash_check CHECK (octet_length(hash) = 32)
  );
  CREATE INDEX gc_leases_deleting ON gc_leases (kind, hash) WHERE deleting;
  CREATE INDEX file_sha256_by_file ON file_sha256 (file_hash);
  `,
  // Storage statistics, as in SQLite's schema: one sample of the totals per UTC day, the first
  // recorded kept (codec and field meanings in ../stats.ts).
  `
  CREATE TABLE stats_samples (
    day                 date        NOT NULL,
    taken_at            timestamptz NOT NULL,
    repositories        bigint      NOT NULL,
    files               bigint      NOT NULL,
    logical_bytes       bigint      NOT NULL,
    stored_bytes        bigint      NOT NULL,
    xorbs               bigint      NOT NULL,
    chunks              bigint      NOT NULL,
    inline_blobs        bigint      NOT NULL,
    inline_bytes        bigint      NOT NULL,
    recorded_xorbs      bigint      NOT NULL,
    recorded_xorb_bytes bigint      NOT NULL,
    recorded_chunks     bigint      NOT NULL,
    CONSTRAINT stats_samples_pkey PRIMARY KEY (day),
    CONSTRAINT stats_samples_totals_check CHECK (
      repositories >= 0 AND files >= 0 AND logical_bytes >= 0 AND stored_bytes >= 0 AND xorbs >= 0 AND chunks >= 0
      AND inline_blobs >= 0 AND inline_bytes >= 0 AND recorded_xorbs >= 0 AND recorded_xorb_bytes >= 0 AND recorded_chunks >= 0
    )
  );
  `,
  // The last run of each maintenance command, as in SQLite's schema.
  `
  CREATE TABLE maintenance_runs (
    kind        text        NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    totals      text        NOT NULL,
    CONSTRAINT maintenance_runs_pkey PRIMARY KEY (kind),
    CONSTRAINT maintenance_runs_kind_check CHECK (kind IN ('gc', 'fsck'))
  );
  `,
  // file_sha256 loses its index by file and its foreign key to files, as in SQLite's schema
  // (the reasons are there).
  `
  ALTER TABLE file_sha256 DROP CONSTRAINT file_sha256_file_hash_fkey;
  DROP INDEX file_sha256_by_file;
  `,
  // Storage statistics samples gain the bytes of distinct content before compression, as in
  // SQLite's schema (NULL in the samples recorded before).
  `
  ALTER TABLE stats_samples ADD COLUMN unique_bytes bigint CONSTRAINT stats_samples_unique_bytes_check CHECK (unique_bytes >= 0);
  `,
  // The mirror of an upstream hub, as in SQLite's schema (the meaning of each table is there).
  `
  ALTER TABLE repos ADD COLUMN mirror_used_at timestamptz;

  CREATE TABLE mirror_refs (
    repo_id    bigint      NOT NULL,
    name       text        COLLATE "C" NOT NULL,
    kind       text,
    commit_oid text,
    checked_at timestamptz NOT NULL,
    CONSTRAINT mirror_refs_pkey PRIMARY KEY (repo_id, name),
    CONSTRAINT mirror_refs_kind_check CHECK (kind IN ('branch', 'tag')),
    CONSTRAINT mirror_refs_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES repos (id) ON DELETE CASCADE
  );

  CREATE TABLE mirror_files (
    kind          text        NOT NULL,
    hash          bytea       NOT NULL,
    git_oid       text,
    size          bigint      NOT NULL,
    fetched_bytes bigint      NOT NULL,
    fetched_at    timestamptz NOT NULL,
    last_used_at  timestamptz NOT NULL,
    CONSTRAINT mirror_files_pkey PRIMARY KEY (kind, hash),
    CONSTRAINT mirror_files_kind_check CHECK (kind IN ('xet', 'inline')),
    CONSTRAINT mirror_files_hash_check CHECK (length(hash) = 32),
    CONSTRAINT mirror_files_sizes_check CHECK (size >= 0 AND fetched_bytes >= 0)
  );
  CREATE INDEX mirror_files_by_git_oid ON mirror_files (git_oid) WHERE git_oid IS NOT NULL;
  CREATE INDEX mirror_files_by_use ON mirror_files (last_used_at, kind, hash);

  CREATE TABLE mirror_chunk_runs (
    upstream_xorb  bytea  NOT NULL,
    upstream_start bigint NOT NULL,
    upstream_end   bigint NOT NULL,
    upstream_offset bigint NOT NULL,
    xorb           bytea  NOT NULL,
    start          bigint NOT NULL,
    CONSTRAINT mirror_chunk_runs_pkey PRIMARY KEY (upstream_xorb, upstream_start, xorb),
    CONSTRAINT mirror_chunk_runs_check CHECK (
      length(upstream_xorb) = 32 AND length(xorb) = 32 AND upstream_start >= 0 AND upstream_end > upstream_start AND upstream_offset >= 0
      AND start >= 0
    )
  );
  CREATE INDEX mirror_chunk_runs_by_xorb ON mirror_chunk_runs (xorb);

  CREATE TABLE mirror_fills (
    key          text        COLLATE "C" NOT NULL,
    owner        text        NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    CONSTRAINT mirror_fills_pkey PRIMARY KEY (key)
  );
  `,
];

/** The database was migrated by a newer castor whose schema this version does not know. */
export class PostgresSchemaError extends Error {
  override readonly name = "PostgresSchemaError";
}

/**
 * Brings the schema up to date in one transaction. The advisory lock makes a second node that
 * starts at the same moment wait here and then find the schema current, instead of racing to
 * create the same tables.
 */
export async function migrate(pool: pg.Pool, database: string): Promise<void> {
  await inTransaction(pool, async (client) => {
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
  });
}

/** Runs `work` in a transaction on one connection of `pool`; any error rolls everything back. */
export async function inTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  // A checked-out connection has no 'error' listener of the pool's: a server that ends the
  // session between two statements (a restart, pg_terminate_backend) would emit one unheard,
  // which ends the process. The next statement fails on its own; the connection is dropped.
  const onError = (error: Error) => {
    broken ??= error;
  };
  client.on("error", onError);
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
    client.off("error", onError);
    client.release(broken);
  }
}
