/**
 * Writing objects to S3: conditional puts (`If-None-Match: *`, so of N concurrent writers of a
 * key exactly one inserts and the others get 412), multipart uploads where the probe found them
 * safe (./probe.ts), and the local staging of stream bodies.
 *
 * Bodies that arrive as streams are staged to a local temp file (under `stagingDir`) while the
 * caller validates them, and uploaded only on commit, streamed from that file. That keeps memory
 * flat however many 64 MiB uploads run at once (the server's requirement: 16 concurrent), makes
 * an upload retryable (a file can be re-read; a consumed network stream cannot), and means an
 * upload that fails validation never reaches the bucket.
 *
 * A conditional write whose outcome was lost to a transient error and then answered 412 on retry
 * is told apart from a real conflict by a per-put id stored in the object's metadata.
 */
import { randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, open, readdir, rm, unlink } from "node:fs/promises";
import { join } from "node:path";
import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  PutObjectCommand,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { StagedPutBase, type BlobBody, type BlobKey, type PutOutcome, type StagedPut } from "../blob-store.js";
import { describeS3Error, errorName, httpStatusOf, isNotFound, isPreconditionFailed, retrying, type RetryPolicy, type S3Target } from "./client.js";

const MiB = 1024 * 1024;
/** S3's floor for every part but the last. */
export const MIN_PART_BYTES = 5 * MiB;
/** S3's ceiling on one part. */
export const MAX_PART_BYTES = 5 * 1024 * MiB;
/** S3's ceiling on parts per upload. */
const MAX_PARTS = 10_000;
/** Object metadata (`x-amz-meta-castor-put-id`) naming the put that wrote the object. */
const PUT_ID_META = "castor-put-id";
/** Reads of the staged file: 256 per 64 MiB upload is cheap, and 16 uploads buffer only a few MiB. */
const UPLOAD_READ_CHUNK = 256 * 1024;
/** Every staging file castor creates ends so; a sweep removes nothing else. */
const STAGING_SUFFIX = ".part";

export interface UploadSettings extends RetryPolicy {
  /** Local folder for bodies being received. */
  stagingDir: string;
  /** Whether large bodies go up in parts (the store honours conditional multipart completion). */
  usesMultipart: boolean;
  multipartThresholdBytes: number;
  partSizeBytes: number;
  partConcurrency: number;
}

type StagingWritable = Writable & { bytesWritten: number };

export function discardBody(body: BlobBody): void {
  if (body instanceof Readable && !body.destroyed) body.destroy();
}

export class S3Uploads {
  constructor(
    private readonly target: S3Target,
    private readonly settings: UploadSettings,
  ) {}

  putBytes(objectKey: string, bytes: Uint8Array): Promise<PutOutcome> {
    const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return this.conditionalPut(objectKey, buffer.length, () => buffer);
  }

  /** Stages `body` in a local file, then uploads that file; the staging file is gone afterwards. */
  async putStream(objectKey: string, body: Readable): Promise<PutOutcome> {
    let staging: { path: string; writable: StagingWritable };
    try {
      staging = await this.createStagingFile();
    } catch (err) {
      discardBody(body);
      throw err;
    }
    try {
      await pipeline(body, staging.writable);
      return await this.putFile(objectKey, staging.path, staging.writable.bytesWritten);
    } finally {
      if (!staging.writable.destroyed) staging.writable.destroy();
      await removeQuietly(staging.path);
    }
  }

  /** A staged put whose commit uploads the staged file unless `isPresent()` says the key is already stored. */
  async beginPut(key: BlobKey, objectKey: string, isPresent: () => Promise<boolean>): Promise<StagedPut> {
    const staging = await this.createStagingFile();
    return new S3StagedPut(key, staging.path, staging.writable, async (size) => {
      if (await isPresent()) return { inserted: false };
      return this.putFile(objectKey, staging.path, size);
    });
  }

  /** Uploads a complete local file of `size` bytes. */
  async putFile(objectKey: string, path: string, size: number): Promise<PutOutcome> {
    if (size === 0) return this.putBytes(objectKey, new Uint8Array(0));
    if (this.settings.usesMultipart && size > this.settings.multipartThresholdBytes) return this.putFileInParts(objectKey, path, size);
    return this.conditionalPut(objectKey, size, () => createReadStream(path, { highWaterMark: UPLOAD_READ_CHUNK }));
  }

  /** Whether the object now under `objectKey` was written by the put with id `putId`. */
  private async writtenBy(objectKey: string, putId: string): Promise<boolean> {
    try {
      const head = await this.target.client.send(new HeadObjectCommand({ Bucket: this.target.bucket, Key: objectKey }));
      return head.Metadata?.[PUT_ID_META] === putId;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw describeS3Error("HeadObject", objectKey, err);
    }
  }

  /** One conditional PutObject; `body` is called once per attempt. */
  private async conditionalPut(objectKey: string, size: number, body: () => Readable | Buffer): Promise<PutOutcome> {
    const putId = randomUUID();
    try {
      await retrying(this.settings, async () => {
        const payload = body();
        try {
          await this.target.client.send(
            new PutObjectCommand({
              Bucket: this.target.bucket,
              Key: objectKey,
              Body: payload,
              ContentLength: size,
              IfNoneMatch: "*",
              Metadata: { [PUT_ID_META]: putId },
            }),
          );
        } finally {
          if (payload instanceof Readable && !payload.destroyed) payload.destroy();
        }
      });
      return { inserted: true };
    } catch (err) {
      // A retry (ours or the SDK's) can meet the object an earlier, seemingly failed attempt wrote.
      if (isPreconditionFailed(err)) return { inserted: await this.writtenBy(objectKey, putId) };
      throw describeS3Error("PutObject", objectKey, err);
    }
  }

  private async putFileInParts(objectKey: string, path: string, size: number): Promise<PutOutcome> {
    const { client, bucket } = this.target;
    // Grow parts past the configured size only if the object would otherwise need > 10,000 of them.
    const partSize = Math.max(this.settings.partSizeBytes, Math.ceil(size / MAX_PARTS));
    const partCount = Math.ceil(size / partSize);
    const putId = randomUUID();
    let uploadId: string | undefined;
    let completed = false;
    try {
      uploadId = (await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: objectKey, Metadata: { [PUT_ID_META]: putId } }))).UploadId;
      if (!uploadId) throw new Error("CreateMultipartUpload answered without an UploadId");
      const etags: string[] = new Array(partCount);
      let nextPart = 0;
      let failed = false;
      const uploadParts = async () => {
        while (!failed && nextPart < partCount) {
          const index = nextPart++;
          const start = index * partSize;
          const length = Math.min(partSize, size - start);
          try {
            etags[index] = await retrying(this.settings, async () => {
              const body = createReadStream(path, { start, end: start + length - 1, highWaterMark: UPLOAD_READ_CHUNK });
              try {
                const { ETag } = await client.send(
                  new UploadPartCommand({ Bucket: bucket, Key: objectKey, UploadId: uploadId, PartNumber: index + 1, Body: body, ContentLength: length }),
                );
                if (!ETag) throw new Error(`UploadPart ${index + 1} answered without an ETag`);
                return ETag;
              } finally {
                if (!body.destroyed) body.destroy();
              }
            });
          } catch (err) {
            failed = true;
            throw err;
          }
        }
      };
      // allSettled, not all: every worker must have stopped before the upload is aborted, or a
      // part still in flight could land after the abort and linger (billed) in the bucket.
      const workers = await Promise.allSettled(Array.from({ length: Math.min(this.settings.partConcurrency, partCount) }, uploadParts));
      const failure = workers.find((worker): worker is PromiseRejectedResult => worker.status === "rejected");
      if (failure) throw failure.reason;
      try {
        await client.send(
          new CompleteMultipartUploadCommand({
            Bucket: bucket,
            Key: objectKey,
            UploadId: uploadId,
            IfNoneMatch: "*",
            MultipartUpload: { Parts: etags.map((ETag, index) => ({ PartNumber: index + 1, ETag })) },
          }),
        );
        completed = true;
        return { inserted: true };
      } catch (err) {
        // After a completion the SDK retried, 412 or NoSuchUpload may mean the first attempt completed it.
        const maybeOurs = isPreconditionFailed(err) || errorName(err) === "NoSuchUpload";
        if (maybeOurs && (await this.writtenBy(objectKey, putId))) {
          completed = true;
          return { inserted: true };
        }
        if (isPreconditionFailed(err)) return { inserted: false };
        throw err;
      }
    } catch (err) {
      throw describeS3Error("multipart upload", objectKey, err);
    } finally {
      if (!completed && uploadId !== undefined) {
        await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: objectKey, UploadId: uploadId })).catch(() => undefined);
      }
    }
  }

  private async createStagingFile(): Promise<{ path: string; writable: StagingWritable }> {
    const path = join(this.settings.stagingDir, `${randomUUID()}${STAGING_SUFFIX}`);
    // Opened before the stream exists, so an abort can never race the file's creation and leave it behind.
    const handle = await open(path, "wx", 0o600);
    return { path, writable: handle.createWriteStream() };
  }

  /** Removes staging files of crashed writers (only those untouched since `cutoff` when `checkAge`); returns how many. */
  async sweepStagingDir(cutoff: number, checkAge: boolean): Promise<number> {
    let removed = 0;
    let names: string[];
    try {
      names = await readdir(this.settings.stagingDir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw err;
    }
    for (const name of names) {
      if (!name.endsWith(STAGING_SUFFIX)) continue; // never delete what castor did not create
      const path = join(this.settings.stagingDir, name);
      if (checkAge) {
        const info = await lstat(path).catch(() => null);
        if (info === null || info.mtimeMs > cutoff) continue;
      }
      await rm(path, { force: true });
      removed++;
    }
    return removed;
  }

  /** Aborts multipart uploads under the prefix initiated before `cutoff`; returns how many. */
  async sweepMultipartUploads(cutoff: number): Promise<number> {
    const { client, bucket, prefix } = this.target;
    let removed = 0;
    let keyMarker: string | undefined;
    let uploadIdMarker: string | undefined;
    for (;;) {
      const page = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix, KeyMarker: keyMarker, UploadIdMarker: uploadIdMarker }));
      for (const upload of page.Uploads ?? []) {
        if (!upload.Key || !upload.UploadId) continue;
        if (upload.Initiated !== undefined && upload.Initiated.getTime() > cutoff) continue;
        try {
          await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: upload.Key, UploadId: upload.UploadId }));
          removed++;
        } catch (err) {
          // Completed or aborted by its owner meanwhile.
          if (errorName(err) !== "NoSuchUpload" && httpStatusOf(err) !== 404) throw describeS3Error("AbortMultipartUpload", upload.Key, err);
        }
      }
      if (!page.IsTruncated) return removed;
      keyMarker = page.NextKeyMarker;
      uploadIdMarker = page.NextUploadIdMarker;
      if (keyMarker === undefined) throw new Error(`S3 ListMultipartUploads of ${prefix} was truncated without a next marker`);
    }
  }
}

async function removeQuietly(path: string): Promise<void> {
  await unlink(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "ENOENT") throw err;
  });
}

class S3StagedPut extends StagedPutBase<StagingWritable> {
  constructor(
    key: BlobKey,
    private readonly stagingPath: string,
    writable: StagingWritable,
    private readonly publish: (size: number) => Promise<PutOutcome>,
  ) {
    super(key, writable);
  }

  protected publishStaged(): Promise<PutOutcome> {
    return this.publish(this.writable.bytesWritten);
  }

  protected cleanUpStaging(): Promise<void> {
    return removeQuietly(this.stagingPath);
  }
}
