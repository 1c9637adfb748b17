/**
 * How the SQLite store writes a shard registration: one transaction, in bounded steps.
 *
 * better-sqlite3 is synchronous, so a registration written in one go holds the event loop
 * for as long as it runs (a 340,000-file shard: 8.9 s, during which no other request is
 * answered). `registrationSteps` writes the rows and pauses every `ROWS_PER_PAUSE` rows:
 *
 * - a small registration (at most `ROWS_PER_STEP` rows) runs inside one `db.transaction()`;
 * - a large one runs on a second connection of its own (`BulkShardWriter`), inside a
 *   `BEGIN IMMEDIATE … COMMIT` that stays open across event-loop turns, yielding to the event
 *   loop once a step has run STEP_MS (a row costs from a few µs for a new file to ~25 µs for
 *   one recorded before, so a count of rows alone made steps of 5 to 50 ms). It is still one
 *   transaction: readers on the main connection see the shard all at once when it commits
 *   (WAL snapshot isolation), and a failure rolls all of it back. While it is open it holds
 *   SQLite's write lock, so the store's other writes wait for it (`SqliteConnection.write`)
 *   instead of meeting SQLITE_BUSY.
 */
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import Database from "better-sqlite3";
import {
  fileRecordOf,
  packedDedupChunk,
  packedDedupXorb,
  packedFileHash,
  packedFileRecord,
  packedFileSha256,
  packedFileTerms,
  replacesBrokenRecord,
  PACKED_DEDUP_ENTRY_BYTES,
  type FileRow,
  type PackedShardRegistration,
} from "../cas.js";
import { NotFoundError } from "../errors.js";
import { collectedXorb, registrationXorbs } from "../gc.js";
import { ImmediateBegin } from "./connection.js";
import { prepareLeaseStatements, type LeaseStatements } from "./gc.js";
import { BUSY_TIMEOUT_MS, configureConnection } from "./schema.js";

/** The most rows a registration written in one synchronous step has: a few milliseconds of inserts. */
export const ROWS_PER_STEP = 2_000;
/** Rows written between two looks at the clock. */
const ROWS_PER_PAUSE = 64;
/** How long a step of a large registration runs before the event loop gets its turn. */
const STEP_MS = 10;

/** The statements a registration runs, prepared on the connection that runs them. */
export interface ShardStatements extends LeaseStatements {
  xorbExists: Database.Statement<[Uint8Array], { ok: number }>;
  fileRow: Database.Statement<[Uint8Array], FileRow>;
  replaceFile: Database.Statement<[number, Uint8Array | null, Uint8Array, Uint8Array]>;
  repoExists: Database.Statement<[number], { ok: number }>;
  insertShard: Database.Statement<[Uint8Array, number]>;
  insertFile: Database.Statement<[Uint8Array, number, Uint8Array | null, number, Uint8Array]>;
  linkFile: Database.Statement<[Uint8Array, number]>;
  putSha256: Database.Statement<[number, Uint8Array, Uint8Array]>;
  advanceDedupSeq: Database.Statement<[number], { next: number }>;
  insertDedup: Database.Statement<[Uint8Array, Uint8Array, number]>;
}

export function prepareShardStatements(db: Database.Database): ShardStatements {
  return {
    ...prepareLeaseStatements(db),
    xorbExists: db.prepare<[Uint8Array], { ok: number }>("SELECT 1 AS ok FROM xorbs WHERE hash = ?"),
    fileRow: db.prepare<[Uint8Array], FileRow>("SELECT size, sha256, terms FROM files WHERE hash = ?"),
    replaceFile: db.prepare<[number, Uint8Array | null, Uint8Array, Uint8Array]>("UPDATE files SET size = ?, sha256 = ?, terms = ? WHERE hash = ?"),
    repoExists: db.prepare<[number], { ok: number }>("SELECT 1 AS ok FROM repos WHERE id = ?"),
    insertShard: db.prepare<[Uint8Array, number]>("INSERT INTO shards (hash, created_at) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING"),
    insertFile: db.prepare<[Uint8Array, number, Uint8Array | null, number, Uint8Array]>(
      `INSERT INTO files (hash, size, sha256, created_at, terms)
       VALUES (?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING`,
    ),
    linkFile: db.prepare<[Uint8Array, number]>("INSERT INTO file_repos (file_hash, repo_id) VALUES (?, ?) ON CONFLICT DO NOTHING"),
    putSha256: db.prepare<[number, Uint8Array, Uint8Array]>(
      `INSERT INTO file_sha256 (repo_id, sha256, file_hash) VALUES (?, ?, ?)
       ON CONFLICT (repo_id, sha256) DO UPDATE SET file_hash = excluded.file_hash`,
    ),
    advanceDedupSeq: db.prepare<[number], { next: number }>("UPDATE dedup_seq SET next = next + ? WHERE one = 1 RETURNING next"),
    insertDedup: db.prepare<[Uint8Array, Uint8Array, number]>("INSERT INTO dedup_chunks (chunk_hash, xorb_hash, seq) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"),
  };
}

/** Whether a registration is small enough to write in one synchronous step. */
export function fitsOneStep(registration: PackedShardRegistration): boolean {
  return registration.files.count + registration.dedupEntries.length / PACKED_DEDUP_ENTRY_BYTES <= ROWS_PER_STEP;
}

/**
 * Writes the registration's rows (checked by `packShardRegistration`), pausing (yielding)
 * every ROWS_PER_PAUSE rows; returns whether the shard is new. Must run inside a write
 * transaction: an error anywhere rolls all of it back.
 */
export function* registrationSteps(sql: ShardStatements, registration: PackedShardRegistration): Generator<void, boolean, void> {
  const { shardHash, repoId, files, dedupEntries } = registration;
  let rows = 0;
  if (!sql.repoExists.get(repoId)) throw new NotFoundError(`no repository with id ${repoId}`);
  const now = Date.now();
  // Leases keep what the shard names from a garbage collection running now (../gc.ts): the
  // xorbs its terms use, and the files it names that are recorded already. A xorb without a
  // record but with a lease was collected (`collectedXorb`).
  for (const xorb of registrationXorbs(registration)) {
    if (++rows % ROWS_PER_PAUSE === 0) yield;
    if (sql.xorbExists.get(xorb)) {
      if (sql.lease.get("xorb", xorb, now) === undefined) throw collectedXorb(xorb);
    } else if (sql.leaseOf.get("xorb", xorb) !== undefined) {
      throw collectedXorb(xorb);
    }
  }
  const isNew = sql.insertShard.run(shardHash, now).changes > 0;
  // File hashes are distinct in the packed form.
  for (let i = 0; i < files.count; i++) {
    if (++rows % ROWS_PER_PAUSE === 0) yield;
    const hash = packedFileHash(files, i);
    const size = files.sizes[i];
    const sha256 = packedFileSha256(files, i);
    const terms = packedFileTerms(files, i);
    if (sql.insertFile.run(hash, size, sha256, now, terms).changes === 0) {
      sql.lease.get("file", hash, now);
      const recorded = fileRecordOf(hash, sql.fileRow.get(hash)!);
      if (replacesBrokenRecord(recorded.terms, packedFileRecord(files, i).terms, (xorb) => sql.xorbExists.get(xorb) !== undefined)) {
        sql.replaceFile.run(size, sha256, terms, hash);
      }
    }
    sql.linkFile.run(hash, repoId);
    if (sha256 !== null) sql.putSha256.run(repoId, sha256, hash);
  }
  const entries = dedupEntries.length / PACKED_DEDUP_ENTRY_BYTES;
  if (entries > 0) {
    const firstSeq = sql.advanceDedupSeq.get(entries)!.next - entries;
    for (let i = 0; i < entries; i++) {
      if (++rows % ROWS_PER_PAUSE === 0) yield;
      sql.insertDedup.run(packedDedupChunk(dedupEntries, i), packedDedupXorb(dedupEntries, i), firstSeq + i);
    }
  }
  return isNew;
}

/**
 * The second connection large registrations are written on, opened on first use. Its
 * transaction stays open across awaits, which the main connection's never do: readers there
 * keep seeing the last committed state until it commits.
 */
export class BulkShardWriter {
  private connection: { db: Database.Database; sql: ShardStatements; begin: ImmediateBegin } | null = null;

  constructor(
    private readonly path: string,
    private readonly backgroundCheckpoints: boolean,
  ) {}

  /** Writes the registration in one transaction, yielding to the event loop between steps. */
  async register(registration: PackedShardRegistration): Promise<boolean> {
    const { db, sql, begin } = this.open();
    // Another process (a worker, an admin command) may hold the write lock: waited for without
    // blocking the event loop (connection.ts).
    await begin.run();
    try {
      const steps = registrationSteps(sql, registration);
      let stepStarted = performance.now();
      for (;;) {
        const next = steps.next();
        if (next.done) {
          db.exec("COMMIT");
          return next.value;
        }
        if (performance.now() - stepStarted < STEP_MS) continue;
        await yieldToEventLoop();
        stepStarted = performance.now();
      }
    } catch (error) {
      if (db.inTransaction) db.exec("ROLLBACK");
      throw error;
    }
  }

  close(): void {
    if (this.connection?.db.open) this.connection.db.close();
    this.connection = null;
  }

  private open(): { db: Database.Database; sql: ShardStatements; begin: ImmediateBegin } {
    if (this.connection === null) {
      // The main connection created the file and its schema and set WAL mode (a property of
      // the database file).
      const db = new Database(this.path, { timeout: BUSY_TIMEOUT_MS });
      configureConnection(db, this.backgroundCheckpoints);
      // A large registration writes more log than the backstop (a 340,000-file shard: ~100 MB),
      // so its COMMIT would checkpoint the whole log on the event loop (~250 ms of CPU, every
      // other request waiting). With a checkpointing thread, that thread copies it a moment
      // later instead; the main connection keeps the backstop.
      if (this.backgroundCheckpoints) db.pragma("wal_autocheckpoint = 0");
      this.connection = { db, sql: prepareShardStatements(db), begin: new ImmediateBegin(db) };
    }
    return this.connection;
  }
}
