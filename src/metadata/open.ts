/**
 * Picks the metadata backend the configuration asks for: PostgreSQL when CASTOR_DATABASE_URL
 * is set (several nodes share it), else SQLite in the data folder. Backends are imported lazily
 * so a process only loads the driver it uses (the SQLite one is a native module).
 */
import type { CastorConfig } from "../config.js";
import type { MetadataStore } from "./store.js";

export interface OpenMetadataOptions {
  /**
   * Processes of one node that each open the store (the workers of `castor serve --workers N`):
   * each takes its share of the node's PostgreSQL connections, so a node on many cores does not
   * exhaust the server's `max_connections` (100 by default).
   */
  processes?: number;
  /**
   * A long-running server: the embedded store checkpoints its log on a thread of its own
   * (sqlite/checkpointer.ts) rather than in the commits of requests.
   */
  backgroundCheckpoints?: boolean;
}

/**
 * Connections each process keeps at least: a large shard registration holds one for its whole
 * transaction, and the requests beside it need another.
 */
const MIN_POOL_PER_PROCESS = 2;

export async function openMetadataStore(config: CastorConfig, options: OpenMetadataOptions = {}): Promise<MetadataStore> {
  if (config.databaseUrl !== null) {
    const { PostgresMetadataStore, DEFAULT_POOL_SIZE } = await import("./postgres.js");
    const poolSize = Math.max(MIN_POOL_PER_PROCESS, Math.ceil(DEFAULT_POOL_SIZE / (options.processes ?? 1)));
    return PostgresMetadataStore.open(config.databaseUrl, { poolSize });
  }
  const { SqliteMetadataStore } = await import("./sqlite.js");
  return SqliteMetadataStore.open(config.dataDir, { backgroundCheckpoints: options.backgroundCheckpoints });
}
