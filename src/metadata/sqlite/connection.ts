/**
 * One open SQLite database, shared by the store's record families (repos.ts, tokens.ts,
 * history.ts, cas.ts, migration.ts): the main connection, and the write lock that a large shard registration
 * holds across event-loop turns on a connection of its own (shard-registration.ts).
 *
 * Every write of the families goes through `write`, which waits while such a registration is
 * in progress and then runs synchronously, so no write meets SQLITE_BUSY from this process.
 */
import Database from "better-sqlite3";
import { BUSY_TIMEOUT_MS, configureConnection, migrate } from "./schema.js";

export class SqliteConnection {
  readonly db: Database.Database;
  /** Set while a large registration holds the write lock across event-loop turns. */
  private exclusiveWrite: Promise<unknown> | null = null;

  /** Opens `path` (created as needed), in WAL mode, with the schema brought up to date. */
  constructor(readonly path: string) {
    this.db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
    try {
      this.db.pragma("journal_mode = WAL");
      configureConnection(this.db);
      migrate(this.db, path);
    } catch (err) {
      this.db.close();
      throw err;
    }
  }

  /**
   * Runs a synchronous write once no exclusive write is in progress: the wait and the write
   * happen in one turn of the event loop, so none can start in between.
   */
  async write<T>(run: () => T): Promise<T> {
    while (this.exclusiveWrite !== null) await this.exclusiveWrite.catch(() => undefined);
    return run();
  }

  /** Runs an asynchronous write that holds the write lock across awaits; other writes wait for it. */
  async writeExclusively<T>(start: () => Promise<T>): Promise<T> {
    while (this.exclusiveWrite !== null) await this.exclusiveWrite.catch(() => undefined);
    const running = start();
    this.exclusiveWrite = running;
    try {
      return await running;
    } finally {
      this.exclusiveWrite = null;
    }
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
