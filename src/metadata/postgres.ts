/**
 * The scale-out metadata store: PostgreSQL through `pg`, shared by every castor node. It keeps
 * the SQLite store's semantics (see sqlite.ts and the contract suite) with what a shared server
 * adds: migrations under an advisory lock (postgres/schema.ts), exact "did I insert it?"
 * answers across connections, and shard registrations as one transaction of a few batched
 * statements in key order (postgres/cas.ts).
 *
 * The records live in one file per family, behind this one `MetadataStore`:
 * `postgres/schema.ts` (migrations), `postgres/connection.ts` (the pool), `postgres/repos.ts`
 * (repositories, revisions), `postgres/tokens.ts` (hub tokens), `postgres/history.ts`
 * (commits, trees, branch heads), `postgres/cas.ts` (xorbs, files, shards, dedup index),
 * `postgres/gc.ts` (leases, the collector's deletions), `postgres/migration.ts` (scans of
 * whole tables, and imports for `castor migrate`) and `postgres/stats.ts` (storage statistics).
 */
import { PostgresCasRecords } from "./postgres/cas.js";
import { PostgresConnection, type PostgresStoreOptions } from "./postgres/connection.js";
import { PostgresGcRecords } from "./postgres/gc.js";
import { PostgresHistoryRecords } from "./postgres/history.js";
import { PostgresMigrationRecords } from "./postgres/migration.js";
import { PostgresMirrorRecords } from "./postgres/mirror.js";
import { PostgresRepoRecords } from "./postgres/repos.js";
import { PostgresStatsRecords } from "./postgres/stats.js";
import { PostgresTokenRecords } from "./postgres/tokens.js";
import { RecordFamiliesStore } from "./record-families.js";

export { DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_POOL_SIZE, PostgresConnectionError, type PostgresStoreOptions } from "./postgres/connection.js";
export { MIGRATIONS, PostgresSchemaError } from "./postgres/schema.js";

export class PostgresMetadataStore extends RecordFamiliesStore {
  /**
   * Connects to `databaseUrl` (a `postgres://` URL), brings the schema up to date and returns
   * the store. PostgresConnectionError when the server cannot be reached or refuses the login;
   * PostgresSchemaError when a newer castor migrated the database.
   */
  static async open(databaseUrl: string, options: PostgresStoreOptions = {}): Promise<PostgresMetadataStore> {
    return new PostgresMetadataStore(await PostgresConnection.open(databaseUrl, options));
  }

  /** Most connections this store holds at once. */
  readonly poolSize: number;
  readonly mirror: PostgresMirrorRecords;

  private constructor(
    private readonly connection: PostgresConnection,
    history = new PostgresHistoryRecords(connection),
    cas = new PostgresCasRecords(connection),
    migration = new PostgresMigrationRecords(connection, cas),
  ) {
    super({
      repos: new PostgresRepoRecords(connection, history),
      tokens: new PostgresTokenRecords(connection),
      history,
      cas,
      gc: new PostgresGcRecords(connection),
      // One class reads tables out and writes them in: both families are about whole tables.
      scan: migration,
      migration,
      stats: new PostgresStatsRecords(connection),
    });
    this.poolSize = connection.poolSize;
    this.mirror = new PostgresMirrorRecords(connection, history);
  }

  async ping(): Promise<void> {
    await this.connection.query("ping", "SELECT 1", []);
  }

  close(): Promise<void> {
    return this.connection.close();
  }
}
