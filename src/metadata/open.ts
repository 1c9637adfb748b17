/**
 * Picks the metadata backend the configuration asks for: PostgreSQL when CASTOR_DATABASE_URL
 * is set (several nodes share it), else SQLite in the data folder. Backends are imported lazily
 * so a process only loads the driver it uses (the SQLite one is a native module).
 */
import type { CastorConfig } from "../config.js";
import type { MetadataStore } from "./store.js";

export async function openMetadataStore(config: CastorConfig): Promise<MetadataStore> {
  if (config.databaseUrl !== null) {
    const { PostgresMetadataStore } = await import("./postgres.js");
    return PostgresMetadataStore.open(config.databaseUrl);
  }
  const { SqliteMetadataStore } = await import("./sqlite.js");
  return SqliteMetadataStore.open(config.dataDir);
}
