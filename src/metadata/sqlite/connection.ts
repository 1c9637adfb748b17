/**
 * One open SQLite database, shared by the store's record families (repos.ts, tokens.ts,
 * history.ts, cas.ts, migration.ts): the main connection, and the write lock that a large shard registration
 * holds across event-loop turns on a connection of its own (shard-registration.ts).
 *
 * Every write of the families goes through `write`, which waits while such a registration is
 * in progress and then runs synchronously, so no write meets SQLITE_BUSY from this process.
 *
 * Other processes write to the same file too: the workers of `castor serve --workers N`, and
 * admin commands (`castor gc`, `token create`) beside a server. SQLite's own wait for their
 * write lock (the busy timeout) is a synchronous sleep that holds the whole event loop, and it
 * gives up with SQLITE_BUSY after the timeout, however long the other writer legitimately needs
 * (a large shard registration holds the lock for seconds). So a write lets SQLite wait only
 * `WRITE_LOCK_SPIN_MS`, about the length of another process's ordinary write, and beyond that
 * waits asynchronously, polling, for up to `WRITE_LOCK_WAIT_MS`: the event loop keeps serving
 * reads meanwhile, and no SQLITE_BUSY reaches a client. Every write transaction is IMMEDIATE
 * (or a single statement), so the lock is taken before anything is read or written: a BUSY
 * means nothing was done, and the write is simply tried again. (A DEFERRED transaction that
 * reads and then writes can instead fail with SQLITE_BUSY_SNAPSHOT, which no waiting cures.)
 */
import { setTimeout as sleep } from "node:timers/promises";
import Database from "better-sqlite3";
import { MetadataBusyError } from "../errors.js";
import { WalCheckpointer } from "./checkpointer.js";
import { BUSY_TIMEOUT_MS, configureConnection, migrate } from "./schema.js";

/**
 * How long SQLite's busy handler may wait, synchronously, for another process's write lock
 * before the write waits asynchronously instead: another worker's commit or small shard
 * registration holds the lock ~1–5 ms.
 */
export const WRITE_LOCK_SPIN_MS = 5;
/** How long a write waits for another process's write lock in all before it fails (503). */
export const WRITE_LOCK_WAIT_MS = 60_000;
/** Longest pause between two tries: the lock is noticed free within this. */
const WRITE_LOCK_MAX_PAUSE_MS = 100;

const BUSY = Symbol("busy");

/**
 * Runs `run`, a synchronous write that takes SQLite's write lock first, on `db`, letting SQLite
 * wait at most `WRITE_LOCK_SPIN_MS` for the lock; BUSY when another process held it longer.
 * Readers keep the connection's full busy timeout (for the rare wait on a WAL recovery).
 */
function tryWrite<T>(db: Database.Database, busyTimeouts: BusyTimeouts, run: () => T): T | typeof BUSY {
  busyTimeouts.spin.get();
  try {
    return run();
  } catch (error) {
    // Outside a transaction after the failure: nothing of `run` was kept, so it can run again.
    if (error instanceof Database.SqliteError && error.code.startsWith("SQLITE_BUSY") && !db.inTransaction) return BUSY;
    throw error;
  } finally {
    busyTimeouts.restore.get();
  }
}

interface BusyTimeouts {
  spin: Database.Statement<[], unknown>;
  restore: Database.Statement<[], unknown>;
}

function prepareBusyTimeouts(db: Database.Database): BusyTimeouts {
  return {
    spin: db.prepare(`PRAGMA busy_timeout = ${WRITE_LOCK_SPIN_MS}`),
    restore: db.prepare(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`),
  };
}

/** Tries `run` until it gets the write lock, pausing between tries; MetadataBusyError after `WRITE_LOCK_WAIT_MS`. */
async function writeWhenFree<T>(db: Database.Database, busyTimeouts: BusyTimeouts, run: () => T): Promise<T> {
  const deadline = Date.now() + WRITE_LOCK_WAIT_MS;
  for (let pause = 1; ; pause = Math.min(pause * 2, WRITE_LOCK_MAX_PAUSE_MS)) {
    if (Date.now() + pause > deadline) {
      throw new MetadataBusyError(
        `the metadata database stayed locked by another process for ${WRITE_LOCK_WAIT_MS / 1000} s: nothing was written, retry in a moment`,
      );
    }
    await sleep(pause);
    const result = tryWrite(db, busyTimeouts, run);
    if (result !== BUSY) return result;
  }
}

/**
 * A write lock for connections that hold it across awaits (the large registrations of
 * shard-registration.ts): `BEGIN IMMEDIATE`, waiting for other processes as `write` does.
 */
export class ImmediateBegin {
  private readonly busyTimeouts: BusyTimeouts;
  private readonly begin: () => void;

  constructor(private readonly db: Database.Database) {
    this.busyTimeouts = prepareBusyTimeouts(db);
    this.begin = () => db.exec("BEGIN IMMEDIATE");
  }

  async run(): Promise<void> {
    if (tryWrite(this.db, this.busyTimeouts, this.begin) === BUSY) await writeWhenFree(this.db, this.busyTimeouts, this.begin);
  }
}

export class SqliteConnection {
  readonly db: Database.Database;
  /**
   * The write this process's other writes wait for: a large registration holding the lock
   * across event-loop turns, or a write waiting for another process's lock (one waiter polls
   * for the whole process, and the others keep their order behind it).
   */
  private turn: Promise<unknown> | null = null;
  private readonly busyTimeouts: BusyTimeouts;

  /** The thread checkpointing the log, with `backgroundCheckpoints`. */
  readonly checkpointer: WalCheckpointer | null;

  /**
   * Opens `path` (created as needed), in WAL mode, with the schema brought up to date; with
   * `backgroundCheckpoints` (a server), a thread checkpoints the log (checkpointer.ts).
   */
  constructor(
    readonly path: string,
    readonly backgroundCheckpoints = false,
  ) {
    this.db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
    try {
      this.db.pragma("journal_mode = WAL");
      configureConnection(this.db, backgroundCheckpoints);
      migrate(this.db, path);
      this.busyTimeouts = prepareBusyTimeouts(this.db);
    } catch (err) {
      this.db.close();
      throw err;
    }
    this.checkpointer = backgroundCheckpoints ? new WalCheckpointer(path) : null;
  }

  /**
   * Runs a synchronous write once no other write of this process is waiting or in progress:
   * the wait and the first try happen in one turn of the event loop, so none can start in
   * between. When another process holds the lock, the write waits for it asynchronously.
   */
  async write<T>(run: () => T): Promise<T> {
    while (this.turn !== null) await this.turn.catch(() => undefined);
    const result = tryWrite(this.db, this.busyTimeouts, run);
    if (result !== BUSY) return result;
    return this.holdTurn(writeWhenFree(this.db, this.busyTimeouts, run));
  }

  /** Runs an asynchronous write that holds the write lock across awaits; other writes wait for it. */
  async writeExclusively<T>(start: () => Promise<T>): Promise<T> {
    while (this.turn !== null) await this.turn.catch(() => undefined);
    return this.holdTurn(start());
  }

  private async holdTurn<T>(running: Promise<T>): Promise<T> {
    this.turn = running;
    try {
      return await running;
    } finally {
      this.turn = null;
    }
  }

  async close(): Promise<void> {
    await this.checkpointer?.stop();
    if (this.db.open) this.db.close();
  }
}
