/** The configured stores, opened for one admin command and closed after it whatever happens. */
import type { CastorConfig } from "../config.js";
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
