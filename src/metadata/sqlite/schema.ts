/**
 * The embedded store's file and schema: where the database lives, how each connection is set
 * up, and the migrations that bring a file written by any earlier castor up to date.
 */
import Database from "better-sqlite3";
import { BACKSTOP_CHECKPOINT_PAGES } from "./checkpointer.js";

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
  // Hub histories: repository visibility, the commit each branch or tag points at, commits and
  // trees, token owners and namespaces. Rows made before them: repositories stay private (the
  // safe default), revisions point at no commit (NULL; the hub gives them an initial commit),
  // tokens have no owner and no namespaces. Commits and trees are keyed by (repository, git
  // oid); a tree's entries are one ASCII JSON text kept as a BLOB, which reads faster than
  // TEXT (codec in ../history.ts); parent oids and token namespaces are JSON arrays. Deleting a repository cascades to everything of it; file_repos has
  // no index by repo_id, so that delete scans file_repos once — a rare admin operation, while
  // every registration would pay for the index.
  //
  // Repository ids are never reused (as PostgreSQL's identity column guarantees): SQLite would
  // give a new row the largest id + 1, so deleting the newest repository would hand its id to
  // the next one. The trigger remembers the largest deleted id, and inserts take the id after
  // both (REPO_ID_AFTER_DELETIONS in repos.ts).
  `
  ALTER TABLE repos ADD COLUMN private INTEGER NOT NULL DEFAULT 1 CHECK (private IN (0, 1));
  ALTER TABLE revisions ADD COLUMN commit_oid TEXT;
  ALTER TABLE hub_tokens ADD COLUMN owner TEXT;
  ALTER TABLE hub_tokens ADD COLUMN namespaces TEXT NOT NULL DEFAULT '[]';

  CREATE TABLE commits (
    repo_id     INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    oid         TEXT    NOT NULL,
    tree_oid    TEXT    NOT NULL,
    parent_oids TEXT    NOT NULL,
    title       TEXT    NOT NULL,
    message     TEXT    NOT NULL,
    author      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    object      TEXT    NOT NULL,
    PRIMARY KEY (repo_id, oid)
  ) STRICT;

  CREATE TABLE trees (
    repo_id INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    oid     TEXT    NOT NULL,
    entries BLOB    NOT NULL,
    PRIMARY KEY (repo_id, oid)
  ) STRICT;

  CREATE TABLE deleted_repo_ids (
    one    INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    max_id INTEGER NOT NULL
  ) STRICT;
  CREATE TRIGGER repos_remember_deleted_ids AFTER DELETE ON repos BEGIN
    INSERT INTO deleted_repo_ids (one, max_id) VALUES (1, old.id)
    ON CONFLICT (one) DO UPDATE SET max_id = max(max_id, excluded.max_id);
  END;
  `,
  // Garbage collection (../gc.ts): a lease per object an upload, registration, dedup answer or
  // commit used, stamped with the time; `deleting` marks a blob the collector condemned and
  // has not deleted yet (the partial index lists them after a crash); `epoch` is a random
  // number drawn anew at each condemnation and at the row's creation, which putXorb compares
  // with the lease it took. file_sha256 gains an index by file: deleting a file deletes its
  // entries, and SQLite checks the foreign key from file_sha256 on every deleted file row.
  `
  CREATE TABLE gc_leases (
    kind      TEXT    NOT NULL CHECK (kind IN ('xorb', 'file', 'inline')),
    hash      BLOB    NOT NULL CHECK (length(hash) = 32),
    leased_at INTEGER NOT NULL,
    deleting  INTEGER NOT NULL DEFAULT 0 CHECK (deleting IN (0, 1)),
    epoch     INTEGER NOT NULL,
    PRIMARY KEY (kind, hash)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX gc_leases_deleting ON gc_leases (kind, hash) WHERE deleting = 1;
  CREATE INDEX file_sha256_by_file ON file_sha256 (file_hash);
  `,
  // Storage statistics: one sample of the totals per UTC day (the first recorded is kept; the
  // codec and field meanings are in ../stats.ts). The day is the key, written YYYY-MM-DD, so
  // rows sort by date as text.
  `
  CREATE TABLE stats_samples (
    day                 TEXT    NOT NULL PRIMARY KEY CHECK (day GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'),
    taken_at            INTEGER NOT NULL,
    repositories        INTEGER NOT NULL CHECK (repositories >= 0),
    files               INTEGER NOT NULL CHECK (files >= 0),
    logical_bytes       INTEGER NOT NULL CHECK (logical_bytes >= 0),
    stored_bytes        INTEGER NOT NULL CHECK (stored_bytes >= 0),
    xorbs               INTEGER NOT NULL CHECK (xorbs >= 0),
    chunks              INTEGER NOT NULL CHECK (chunks >= 0),
    inline_blobs        INTEGER NOT NULL CHECK (inline_blobs >= 0),
    inline_bytes        INTEGER NOT NULL CHECK (inline_bytes >= 0),
    recorded_xorbs      INTEGER NOT NULL CHECK (recorded_xorbs >= 0),
    recorded_xorb_bytes INTEGER NOT NULL CHECK (recorded_xorb_bytes >= 0),
    recorded_chunks     INTEGER NOT NULL CHECK (recorded_chunks >= 0)
  ) STRICT, WITHOUT ROWID;
  `,
  // The last run of each maintenance command (../gc.ts MaintenanceRun): its totals as JSON.
  `
  CREATE TABLE maintenance_runs (
    kind        TEXT    NOT NULL PRIMARY KEY CHECK (kind IN ('gc', 'fsck')),
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    totals      TEXT    NOT NULL
  ) STRICT;
  `,
  // file_sha256 loses its index by file and its foreign key to files. Every registered file
  // inserted a row into that index at a random place (it is keyed by a hash), which at a million
  // files made each 1,000-file registration write ~1,300 more pages (`npm run bench -- scale`).
  // The collector now finds a deleted file's entries by key instead, through its repositories
  // (file_repos) and its SHA-256 (../gc.ts); lookups only answer entries whose file the
  // repository still holds, so an entry the collector could not find by key (a client that
  // gave one file two digests) is never answered once its file is gone.
  `
  CREATE TABLE file_sha256_keyed (
    repo_id   INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    sha256    BLOB    NOT NULL CHECK (length(sha256) = 32),
    file_hash BLOB    NOT NULL CHECK (length(file_hash) = 32),
    PRIMARY KEY (repo_id, sha256)
  ) STRICT, WITHOUT ROWID;
  INSERT INTO file_sha256_keyed (repo_id, sha256, file_hash) SELECT repo_id, sha256, file_hash FROM file_sha256;
  DROP TABLE file_sha256;
  ALTER TABLE file_sha256_keyed RENAME TO file_sha256;
  `,
  // Storage statistics samples gain the bytes of distinct content before compression, which
  // separates the deduplication ratio from the compression ratio (../stats.ts). NULL in the
  // samples recorded before: nobody measured it then.
  `
  ALTER TABLE stats_samples ADD COLUMN unique_bytes INTEGER CHECK (unique_bytes >= 0);
  `,
  // The mirror of an upstream hub (../mirror.ts). A mirrored repository is a repos row whose
  // mirror_used_at is set (the time of its last use; NULL for castor's own repositories); its
  // commits and trees are ordinary rows. What the upstream said revision names point at (or that
  // they name nothing: commit_oid NULL), the files fetched for the mirror (Xet files by file
  // hash, others by SHA-256, with the git blob id they were checked against), where castor holds
  // chunks of upstream xorbs (and at which byte of the upstream xorb a run starts, so a byte
  // range of it can be served from castor's xorbs), and which node is fetching what.
  `
  ALTER TABLE repos ADD COLUMN mirror_used_at INTEGER;

  CREATE TABLE mirror_refs (
    repo_id    INTEGER NOT NULL REFERENCES repos (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    kind       TEXT             CHECK (kind IN ('branch', 'tag')),
    commit_oid TEXT,
    checked_at INTEGER NOT NULL,
    PRIMARY KEY (repo_id, name)
  ) STRICT, WITHOUT ROWID;

  CREATE TABLE mirror_files (
    kind          TEXT    NOT NULL CHECK (kind IN ('xet', 'inline')),
    hash          BLOB    NOT NULL CHECK (length(hash) = 32),
    git_oid       TEXT,
    size          INTEGER NOT NULL CHECK (size >= 0),
    fetched_bytes INTEGER NOT NULL CHECK (fetched_bytes >= 0),
    fetched_at    INTEGER NOT NULL,
    last_used_at  INTEGER NOT NULL,
    PRIMARY KEY (kind, hash)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX mirror_files_by_git_oid ON mirror_files (git_oid) WHERE git_oid IS NOT NULL;
  CREATE INDEX mirror_files_by_use ON mirror_files (last_used_at, kind, hash);

  CREATE TABLE mirror_chunk_runs (
    upstream_xorb  BLOB    NOT NULL CHECK (length(upstream_xorb) = 32),
    upstream_start INTEGER NOT NULL CHECK (upstream_start >= 0),
    upstream_end   INTEGER NOT NULL CHECK (upstream_end > upstream_start),
    upstream_offset INTEGER NOT NULL CHECK (upstream_offset >= 0),
    xorb           BLOB    NOT NULL CHECK (length(xorb) = 32),
    start          INTEGER NOT NULL CHECK (start >= 0),
    PRIMARY KEY (upstream_xorb, upstream_start, xorb)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX mirror_chunk_runs_by_xorb ON mirror_chunk_runs (xorb);

  CREATE TABLE mirror_fills (
    key          TEXT    NOT NULL PRIMARY KEY,
    owner        TEXT    NOT NULL,
    heartbeat_at INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  `,
];

/** The database file was written by a newer castor whose schema this version does not know. */
export class MetadataSchemaError extends Error {
  override readonly name = "MetadataSchemaError";
}

/**
 * Per-connection settings (WAL mode is the database file's, set once by the main connection).
 * With `backgroundCheckpoints` a thread checkpoints the log (checkpointer.ts), and commits only
 * do it themselves past a larger backstop size.
 */
export function configureConnection(db: Database.Database, backgroundCheckpoints: boolean): void {
  db.pragma("synchronous = NORMAL");
  if (backgroundCheckpoints) db.pragma(`wal_autocheckpoint = ${BACKSTOP_CHECKPOINT_PAGES}`);
  db.pragma("foreign_keys = ON");
  db.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
  db.pragma(`cache_size = -${CACHE_SIZE_KIB}`);
}

/**
 * Brings the schema up to date. The check runs again inside an IMMEDIATE transaction (which
 * takes the write lock) so that two processes opening a fresh database at once cannot both
 * apply the same migration.
 */
export function migrate(db: Database.Database, path: string): void {
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

/** Whether `err` is SQLite's constraint failure `code` (e.g. `SQLITE_CONSTRAINT_UNIQUE`). */
export function isConstraint(err: unknown, code: string): boolean {
  return err instanceof Database.SqliteError && err.code === code;
}
