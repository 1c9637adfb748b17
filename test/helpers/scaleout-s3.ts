/**
 * S3 for the scale-out tests: reads the `CASTOR_TEST_S3_*` environment that
 * `scripts/services.sh start` prints, and gives every fixture or server its own random key
 * prefix in the one test bucket, deleting that prefix's objects on cleanup.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AbortMultipartUploadCommand, DeleteObjectsCommand, ListMultipartUploadsCommand, ListObjectsV2Command, type S3Client } from "@aws-sdk/client-s3";
import type { S3Config } from "../../src/config.js";
import { openS3BlobStore, type S3BlobStore, type S3BlobStoreOptions } from "../../src/storage/s3.js";
import { createS3Client } from "../../src/storage/s3/client.js";

export const S3_TEST_ENV_NAMES = [
  "CASTOR_TEST_S3_ENDPOINT",
  "CASTOR_TEST_S3_REGION",
  "CASTOR_TEST_S3_ACCESS_KEY_ID",
  "CASTOR_TEST_S3_SECRET_ACCESS_KEY",
  "CASTOR_TEST_S3_BUCKET",
] as const;

export const START_SERVICES_HINT =
  'start them first with `eval "$(scripts/services.sh start)"` (or, for S3 alone, `eval "$(scripts/services/ceph-rgw.sh start)"`), then run `npm test -- test/scaleout` in that shell';

export interface S3TestEnv {
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  bucket: string;
}

/** The test endpoint, or an error saying which variables are missing and how to get them. */
export function s3TestEnv(env: NodeJS.ProcessEnv = process.env): S3TestEnv {
  const missing = S3_TEST_ENV_NAMES.filter((name) => !env[name]);
  if (missing.length > 0) {
    throw new Error(
      `the scale-out S3 tests need an S3 endpoint, but ${missing.join(", ")} ${missing.length === 1 ? "is" : "are"} not set: ${START_SERVICES_HINT}`,
    );
  }
  return {
    endpoint: env.CASTOR_TEST_S3_ENDPOINT!,
    region: env.CASTOR_TEST_S3_REGION!,
    accessKeyId: env.CASTOR_TEST_S3_ACCESS_KEY_ID!,
    secretAccessKey: env.CASTOR_TEST_S3_SECRET_ACCESS_KEY!,
    bucket: env.CASTOR_TEST_S3_BUCKET!,
  };
}

/** A prefix no other fixture uses: `castor-test-<16 hex>/`. */
export function freshS3Prefix(): string {
  return `castor-test-${randomBytes(8).toString("hex")}/`;
}

/** The production S3 settings (as `loadConfig` builds them) for the test bucket under `prefix`. */
export function s3TestConfig(prefix: string = freshS3Prefix(), env: S3TestEnv = s3TestEnv()): S3Config {
  return {
    endpoint: env.endpoint,
    bucket: env.bucket,
    region: env.region,
    accessKeyId: env.accessKeyId,
    secretAccessKey: env.secretAccessKey,
    prefix,
    forcePathStyle: true,
  };
}

export function s3TestClient(env: S3TestEnv = s3TestEnv(), endpoint = env.endpoint): S3Client {
  return createS3Client({ ...env, endpoint, forcePathStyle: true });
}

/**
 * Deletes every object and aborts every multipart upload under `prefix`; returns how many
 * objects went. Refuses an empty prefix: that would empty the whole shared bucket.
 */
export async function deleteS3Prefix(prefix: string, env: S3TestEnv = s3TestEnv()): Promise<number> {
  if (prefix === "") throw new Error("refusing to delete an empty prefix (the whole test bucket)");
  const client = s3TestClient(env);
  try {
    let deleted = 0;
    let continuationToken: string | undefined;
    do {
      const page = await client.send(new ListObjectsV2Command({ Bucket: env.bucket, Prefix: prefix, ContinuationToken: continuationToken }));
      const keys = (page.Contents ?? []).flatMap((entry) => (entry.Key ? [{ Key: entry.Key }] : []));
      if (keys.length > 0) {
        const result = await client.send(new DeleteObjectsCommand({ Bucket: env.bucket, Delete: { Objects: keys, Quiet: true } }));
        if (result.Errors?.length) {
          throw new Error(`could not delete ${result.Errors.length} test objects, e.g. ${result.Errors[0].Key}: ${result.Errors[0].Message}`);
        }
        deleted += keys.length;
      }
      continuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (continuationToken !== undefined);
    const uploads = await client.send(new ListMultipartUploadsCommand({ Bucket: env.bucket, Prefix: prefix }));
    for (const upload of uploads.Uploads ?? []) {
      await client.send(new AbortMultipartUploadCommand({ Bucket: env.bucket, Key: upload.Key, UploadId: upload.UploadId }));
    }
    return deleted;
  } finally {
    client.destroy();
  }
}

export interface S3TestStore {
  store: S3BlobStore;
  prefix: string;
  stagingDir: string;
  env: S3TestEnv;
  /** Closes the store, deletes the prefix's objects and the staging folder. */
  cleanup(): Promise<void>;
}

/** An `S3BlobStore` on a fresh prefix with its own staging folder; `overrides` tune the store. */
export async function openS3TestStore(overrides: Partial<S3BlobStoreOptions> = {}): Promise<S3TestStore> {
  const env = s3TestEnv();
  const prefix = freshS3Prefix();
  const stagingDir = await mkdtemp(join(tmpdir(), "castor-s3-staging-"));
  try {
    const store = await openS3BlobStore({ ...s3TestConfig(prefix, env), stagingDir, retryBaseDelayMs: 5, ...overrides });
    return {
      store,
      prefix,
      stagingDir,
      env,
      async cleanup() {
        store.close();
        try {
          await deleteS3Prefix(prefix, env);
        } finally {
          await rm(stagingDir, { recursive: true, force: true });
        }
      },
    };
  } catch (err) {
    await rm(stagingDir, { recursive: true, force: true });
    throw err;
  }
}

/**
 * `CASTOR_S3_*` settings that give one castor server its own prefix in the test bucket, for
 * `startCastorServer({ env })`; `cleanup()` deletes what the server stored.
 */
export function s3ServerSettings(env: S3TestEnv = s3TestEnv()): { env: Record<string, string>; prefix: string; cleanup(): Promise<void> } {
  const prefix = freshS3Prefix();
  return {
    prefix,
    env: {
      CASTOR_S3_ENDPOINT: env.endpoint,
      CASTOR_S3_BUCKET: env.bucket,
      CASTOR_S3_REGION: env.region,
      CASTOR_S3_ACCESS_KEY_ID: env.accessKeyId,
      CASTOR_S3_SECRET_ACCESS_KEY: env.secretAccessKey,
      CASTOR_S3_PREFIX: prefix,
      CASTOR_S3_FORCE_PATH_STYLE: "true",
    },
    cleanup: async () => {
      await deleteS3Prefix(prefix, env);
    },
  };
}
