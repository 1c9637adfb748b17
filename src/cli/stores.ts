/** The configured stores, opened for one admin command and closed after it whatever happens. */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { loadConfig, type CastorConfig } from "../config.js";
import { METADATA_FILE_NAME } from "../metadata/sqlite/schema.js";
import { UsageError } from "./args.js";
import { openMetadataStore } from "../metadata/open.js";
import type { MetadataStore } from "../metadata/store.js";
import type { BlobStore } from "../storage/blob-store.js";
import { openBlobStore } from "../storage/open.js";

export async function withStores<T>(config: CastorConfig, work: (metadata: MetadataStore, blobs: BlobStore) => Promise<T>): Promise<T> {
  const metadata = await openMetadataStore(config);
  try {
    const blobs: BlobStore = await openBlobStore(config);
    try {
      return await work(metadata, blobs);
    } finally {
      blobs.close?.();
    }
  } finally {
    await metadata.close();
  }
}

/**
 * The configuration of an admin command that works on a server's stores. With the embedded
 * stores and no data dir named (CASTOR_DATA_DIR or --data-dir), the default `./castor-data`
 * must already be one: run from another folder, an admin command would otherwise create an
 * empty data dir there and, say, make a token the running server has never heard of.
 */
export function loadAdminConfig(flags: Record<string, string | undefined>, env: NodeJS.ProcessEnv = process.env): CastorConfig {
  const config = loadConfig(env, flags);
  const named = (flags["data-dir"] ?? env.CASTOR_DATA_DIR ?? "") !== "";
  if (config.databaseUrl === null && !named && !existsSync(join(config.dataDir, METADATA_FILE_NAME))) {
    throw new UsageError(
      `no castor data dir at ${config.dataDir} (the default, ./castor-data, in the current folder), and admin commands do not create one. ` +
        "Run the command in the folder where 'castor serve' runs, or name the server's data dir with --data-dir DIR or CASTOR_DATA_DIR=DIR " +
        "('castor serve' prints it when it starts).",
    );
  }
  return config;
}
