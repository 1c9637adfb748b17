/**
 * Picks the metadata backend the configuration asks for. Backends are imported lazily so a
 * process only loads the driver it uses (the SQLite one is a native module).
 */
import { ConfigError, type CastorConfig } from "../config.js";
import type { MetadataStore } from "./store.js";

export async function openMetadataStore(config: CastorConfig): Promise<MetadataStore> {
  if (config.databaseUrl !== null) {
    throw new ConfigError(
      "CASTOR_DATABASE_URL is set, but PostgreSQL metadata is not supported by this version of castor yet: unset it to use the embedded SQLite database in CASTOR_DATA_DIR",
    );
  }
  const { SqliteMetadataStore } = await import("./sqlite.js");
  return SqliteMetadataStore.open(config.dataDir);
}
