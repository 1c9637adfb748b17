/**
 * Picks the blob store the configuration asks for: S3 when `config.s3` is set (scale-out),
 * otherwise files under the data dir (embedded default).
 */
import { join } from "node:path";
import type { CastorConfig } from "../config.js";
import { openFsBlobStore, type FsBlobStore } from "./fs.js";
import type { S3BlobStore } from "./s3.js";

/** Folder of the embedded blob store inside the data dir. */
export const BLOBS_DIR_NAME = "blobs";
/** Folder inside the data dir where the S3 store stages bodies before uploading them. */
export const S3_STAGING_DIR_NAME = "s3-staging";

export type OpenedBlobStore = FsBlobStore | S3BlobStore;

/**
 * Opens the configured store. The S3 module (and the AWS SDK behind it) is loaded only when S3 is
 * configured: it would otherwise add about a third to the embedded server's heap, which every
 * full garbage collection has to mark. The S3 store stages incoming bodies on local disk under
 * `${dataDir}/s3-staging`, so that folder needs room for the uploads in flight (up to ~65 MiB
 * each). Call `sweepTemp()` on the result once at start-up; with S3 and several nodes, pass
 * `olderThanMs` so a restarting node does not abort the uploads of the others.
 */
export async function openBlobStore(config: Pick<CastorConfig, "dataDir" | "s3">): Promise<OpenedBlobStore> {
  if (config.s3 === null) return openFsBlobStore(join(config.dataDir, BLOBS_DIR_NAME));
  const { s3 } = config;
  const { openS3BlobStore } = await import("./s3.js");
  return openS3BlobStore({
    bucket: s3.bucket,
    prefix: s3.prefix,
    endpoint: s3.endpoint,
    region: s3.region,
    accessKeyId: s3.accessKeyId,
    secretAccessKey: s3.secretAccessKey,
    forcePathStyle: s3.forcePathStyle,
    stagingDir: join(config.dataDir, S3_STAGING_DIR_NAME),
  });
}
