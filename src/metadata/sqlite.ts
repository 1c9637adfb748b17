/**
 * The embedded metadata store: one SQLite file, `${dataDir}/metadata.sqlite`, through
 * better-sqlite3. WAL lets readers run beside a writer, and a write waits for another process's
 * write lock (a worker of `castor serve --workers N`, an admin command next to the running
 * server) instead of failing, asynchronously once the wait is longer than a few milliseconds
 * (sqlite/connection.ts). Statements are prepared once; rows are never cached, so another
 * process's writes are seen by the next call.
 *
 * The WAL stays bounded: every statement runs to completion synchronously (no `iterate()`, no
 * read transaction spanning an await), so no read transaction outlives its call and the
 * automatic checkpoint (every 1000 pages) can always reset the log; `journal_size_limit` then
 * truncates a log that one large transaction (a big shard registration) grew past the limit.
 * The one transaction that spans awaits is a large shard registration's, on a connection of
 * its own (sqlite/shard-registration.ts); the other writes wait for it (sqlite/connection.ts).
 *
 * The records live in one file per family, behind this one `MetadataStore`:
 * `sqlite/schema.ts` (file, settings, migrations), `sqlite/repos.ts` (repositories,
 * revisions), `sqlite/tokens.ts` (hub tokens), `sqlite/history.ts` (commits, trees, branch
 * heads), `sqlite/cas.ts` (xorbs, files, shards, dedup index), `sqlite/gc.ts` (leases, the
 * collector's deletions), `sqlite/migration.ts` (scans of whole tables, and imports for `castor migrate`) and
 * `sqlite/stats.ts` (storage statistics). `sqlite/snapshot.ts` handles the file as a whole
 * (online copies and checks for `castor backup` and `castor restore`).
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { RecordFamiliesStore } from "./record-families.js";
import { SqliteCasRecords } from "./sqlite/cas.js";
import { SqliteConnection } from "./sqlite/connection.js";
import { SqliteGcRecords } from "./sqlite/gc.js";
import { SqliteHistoryRecords } from "./sqlite/history.js";
import { SqliteMigrationRecords } from "./sqlite/migration.js";
import { SqliteMirrorRecords } from "./sqlite/mirror.js";
import { SqliteRepoRecords } from "./sqlite/repos.js";
import { METADATA_FILE_NAME } from "./sqlite/schema.js";
import { SqliteStatsRecords } from "./sqlite/stats.js";
import { SqliteTokenRecords } from "./sqlite/tokens.js";

export { BUSY_TIMEOUT_MS, JOURNAL_SIZE_LIMIT_BYTES, METADATA_FILE_NAME, MIGRATIONS, MetadataSchemaError } from "./sqlite/schema.js";

export class SqliteMetadataStore extends RecordFamiliesStore {
  /**
   * Opens (creating the folder, file and schema as needed) `${dataDir}/metadata.sqlite`. A
   * server passes `backgroundCheckpoints`: its WAL is then checkpointed on a thread of its own
   * (sqlite/checkpointer.ts) instead of inside the commits of requests.
   */
  static async open(dataDir: string, options: { backgroundCheckpoints?: boolean } = {}): Promise<SqliteMetadataStore> {
    mkdirSync(dataDir, { recursive: true });
    return new SqliteMetadataStore(new SqliteConnection(join(dataDir, METADATA_FILE_NAME), options.backgroundCheckpoints ?? false));
  }

  readonly path: string;
  readonly mirror: SqliteMirrorRecords;
  private readonly cas: SqliteCasRecords;
  private readonly pingStatement;

  private constructor(
    private readonly connection: SqliteConnection,
    history = new SqliteHistoryRecords(connection),
    repos = new SqliteRepoRecords(connection, history),
    tokens = new SqliteTokenRecords(connection),
    cas = new SqliteCasRecords(connection),
    migration = new SqliteMigrationRecords(connection, tokens.sql, history.sql, cas.sql),
  ) {
    super({
      repos,
      tokens,
      history,
      cas,
      gc: new SqliteGcRecords(connection),
      // One class reads tables out and writes them in: both families are about whole tables.
      scan: migration,
      migration,
      stats: new SqliteStatsRecords(connection),
    });
    this.path = connection.path;
    this.mirror = new SqliteMirrorRecords(connection, history);
    this.cas = cas;
    this.pingStatement = connection.db.prepare<[], { ok: number }>("SELECT 1 AS ok");
  }

  async ping(): Promise<void> {
    this.pingStatement.get();
  }

  async close(): Promise<void> {
    this.cas.close();
    await this.connection.close();
  }
}
