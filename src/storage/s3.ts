/**
 * The scale-out `BlobStore`: objects in one bucket of any S3-compatible store (tested against
 * Ceph RGW), under an optional key prefix shared by every castor node of a deployment.
 *
 *   <prefix>xorbs/<64 hex>          published objects
 *   <prefix>shards/<64 hex>
 *   <prefix>inline/<64 hex>         content of files hub commits store inline (by SHA-256)
 *   <prefix>castor-probe/<uuid>     short-lived objects of the start-up capability probe
 *
 * This file opens the store and maps the `BlobStore` methods onto its parts:
 * - s3/client.ts: the SDK client, how its errors are read, and castor's own retries;
 * - s3/probe.ts: the start-up checks of the bucket and of conditional-write support;
 * - s3/uploads.ts: put-if-absent as conditional writes, multipart, local staging of bodies;
 * - s3/reads.ts: ranged GETs that resume after a connection breaks off;
 * - s3/range-presigner.ts: the optional `createRangePresigner` capability (presigned GETs).
 *
 * Put-if-absent is a conditional write: `PutObject` with `If-None-Match: *`, which the store
 * evaluates atomically, so of N concurrent writers of a key (on any node) exactly one inserts
 * and the others get 412. A bare HEAD-then-PUT would let two writers both "insert" and the
 * second silently replace the first body, whose chunk offsets the metadata may already record.
 */
import { mkdir, stat } from "node:fs/promises";
import { resolve } from "node:path";
import { Readable } from "node:stream";
import { DeleteObjectCommand, ListObjectsV2Command, type S3Client } from "@aws-sdk/client-s3";
import {
  isBlobKey,
  parseBlobKey,
  parseKeyPrefix,
  type BlobBody,
  type BlobKey,
  type BlobStore,
  type ByteSpan,
  type PutOutcome,
  type RangePresigner,
  type RangePresignerOptions,
  type StagedPut,
  type SweepOptions,
} from "./blob-store.js";
import { createS3Client, describeS3Error, isNotFound, type S3ClientOptions, type S3Target } from "./s3/client.js";
import { checkBucket, probeConditionalMultipart, sweepProbeObjects } from "./s3/probe.js";
import { S3Reads } from "./s3/reads.js";
import { discardBody, MAX_PART_BYTES, MIN_PART_BYTES, S3Uploads, type UploadSettings } from "./s3/uploads.js";

const MiB = 1024 * 1024;
const MAX_PREFIX_BYTES = 512;

export interface S3BlobStoreOptions extends S3ClientOptions {
  bucket: string;
  /** Prepended to every object name; "" for none. A non-empty prefix gets a trailing "/" if it lacks one. */
  prefix?: string;
  /** Local folder for bodies being received; several stores may share one only if they never sweep it with olderThanMs 0. */
  stagingDir: string;
  /** Bodies larger than this go up in parts (where the store allows, see s3/probe.ts). Default 16 MiB. */
  multipartThresholdBytes?: number;
  /** Default 8 MiB; at least 5 MiB (S3's minimum). */
  partSizeBytes?: number;
  /** Parts of one object uploaded at once. Default 4. */
  partConcurrency?: number;
  /**
   * Whether the store honours `If-None-Match: *` on CompleteMultipartUpload. Default "probe":
   * find out once in `open`. Setting true for a store that ignores it breaks put-if-absent for
   * large bodies; it exists so tests can exercise the multipart path against such a store.
   */
  conditionalMultipart?: boolean | "probe";
  /** First backoff of castor's own retries; doubled per attempt, with full jitter. Default 100 ms. */
  retryBaseDelayMs?: number;
  /** Keys per ListObjectsV2 page (1..1000). Default 1000. */
  listPageSize?: number;
}

function positiveInteger(name: string, value: number | undefined, fallback: number, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const chosen = value ?? fallback;
  if (!Number.isSafeInteger(chosen) || chosen < min || chosen > max) {
    throw new RangeError(`S3 blob store option ${name} must be an integer from ${min} to ${max}, got ${String(value)}`);
  }
  return chosen;
}

function normalizePrefix(prefix: string | undefined): string {
  const text = prefix ?? "";
  if (text === "") return "";
  // Object names are UTF-8 of at most 1024 bytes; keys need ~71 of them, and control characters break listings and logs.
  if (Buffer.byteLength(text) > MAX_PREFIX_BYTES || /[\u0000-\u001f\u007f\\]/.test(text) || text.startsWith("/")) {
    throw new RangeError(
      `S3 prefix ${JSON.stringify(text.slice(0, 80))} is invalid: use at most ${MAX_PREFIX_BYTES} bytes, no leading "/", no backslash or control characters (e.g. "castor/")`,
    );
  }
  return text.endsWith("/") ? text : `${text}/`;
}

/** The upload settings of `options`, checked; `usesMultipart` is decided later, by the probe. */
function resolveUploadSettings(options: S3BlobStoreOptions): Omit<UploadSettings, "usesMultipart"> {
  return {
    stagingDir: resolve(options.stagingDir),
    multipartThresholdBytes: positiveInteger("multipartThresholdBytes", options.multipartThresholdBytes, 16 * MiB, MIN_PART_BYTES),
    partSizeBytes: positiveInteger("partSizeBytes", options.partSizeBytes, 8 * MiB, MIN_PART_BYTES, MAX_PART_BYTES),
    partConcurrency: positiveInteger("partConcurrency", options.partConcurrency, 4, 1, 64),
    maxAttempts: positiveInteger("maxAttempts", options.maxAttempts, 4, 1, 20),
    retryBaseDelayMs: positiveInteger("retryBaseDelayMs", options.retryBaseDelayMs, 100, 1, 60_000),
  };
}

export class S3BlobStore implements BlobStore {
  /** Whether large bodies go up in parts (the store honours conditional multipart completion). */
  readonly usesMultipart: boolean;
  private readonly reads: S3Reads;
  private readonly uploads: S3Uploads;

  private constructor(
    private readonly target: S3Target,
    uploadSettings: UploadSettings,
    private readonly listPageSize: number,
  ) {
    this.reads = new S3Reads(target, uploadSettings);
    this.uploads = new S3Uploads(target, uploadSettings);
    this.usesMultipart = uploadSettings.usesMultipart;
  }

  /**
   * Connects, checks the bucket answers, and probes conditional-write support (a handful of
   * requests on a probe object under the prefix, removed again; once per process for each
   * endpoint and bucket). Fails with a message naming the setting to fix when the bucket is
   * missing, access is denied or the store cannot do put-if-absent. Call `sweepTemp()` once at
   * start-up.
   */
  static async open(options: S3BlobStoreOptions): Promise<S3BlobStore> {
    if (typeof options.bucket !== "string" || options.bucket === "") {
      throw new TypeError("S3 blob store needs a bucket name (CASTOR_S3_BUCKET)");
    }
    const prefix = normalizePrefix(options.prefix);
    const settings = resolveUploadSettings(options);
    const listPageSize = positiveInteger("listPageSize", options.listPageSize, 1000, 1, 1000);
    const client = createS3Client(options);
    try {
      const target: S3Target = { client, bucket: options.bucket, prefix, endpoint: options.endpoint ?? null };
      await mkdir(settings.stagingDir, { recursive: true });
      await checkBucket(target);
      const setting = options.conditionalMultipart ?? "probe";
      const usesMultipart = setting === "probe" ? await probeConditionalMultipart(target, options.region) : setting;
      return new S3BlobStore(target, { ...settings, usesMultipart }, listPageSize);
    } catch (err) {
      client.destroy();
      throw err;
    }
  }

  /** Closes the client's idle connections; the store is unusable afterwards. */
  close(): void {
    this.client.destroy();
  }

  get client(): S3Client {
    return this.target.client;
  }

  get bucket(): string {
    return this.target.bucket;
  }

  /** The normalized prefix ("" or ending in "/"). */
  get prefix(): string {
    return this.target.prefix;
  }

  /** The only place an object name is derived from a key, and it re-validates the key first. */
  objectKeyOf(key: BlobKey): string {
    return this.target.prefix + parseBlobKey(key);
  }

  // Every method below is async, even where it only delegates, so that an invalid key rejects
  // (as the contract asks) instead of throwing synchronously from objectKeyOf.
  async putIfAbsent(key: BlobKey, body: BlobBody): Promise<PutOutcome> {
    let objectKey: string;
    try {
      objectKey = this.objectKeyOf(key);
      if (await this.exists(key)) {
        discardBody(body);
        return { inserted: false };
      }
    } catch (err) {
      discardBody(body);
      throw err;
    }
    return body instanceof Readable ? this.uploads.putStream(objectKey, body) : this.uploads.putBytes(objectKey, body);
  }

  async putFileIfAbsent(key: BlobKey, path: string): Promise<PutOutcome> {
    const objectKey = this.objectKeyOf(key);
    if (await this.exists(key)) return { inserted: false };
    // Uploaded straight from `path` (no local copy): the file must stay unchanged until this resolves.
    const info = await stat(path);
    if (!info.isFile()) throw new TypeError(`${path} is not a regular file`);
    return this.uploads.putFile(objectKey, path, info.size);
  }

  async beginPut(key: BlobKey): Promise<StagedPut> {
    return this.uploads.beginPut(key, this.objectKeyOf(key), () => this.exists(key));
  }

  async read(key: BlobKey, span?: ByteSpan): Promise<Readable> {
    return this.reads.read(key, this.objectKeyOf(key), span);
  }

  async size(key: BlobKey): Promise<number | null> {
    return this.reads.size(this.objectKeyOf(key));
  }

  async exists(key: BlobKey): Promise<boolean> {
    return (await this.size(key)) !== null;
  }

  async delete(key: BlobKey): Promise<void> {
    const objectKey = this.objectKeyOf(key);
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: objectKey }));
    } catch (err) {
      if (isNotFound(err)) return;
      throw describeS3Error("DeleteObject", objectKey, err);
    }
  }

  list(prefix = ""): AsyncIterable<BlobKey> {
    // Validated here, synchronously, so a bad prefix fails at the call and not at first iteration.
    return this.listValidPrefix(parseKeyPrefix(prefix));
  }

  private async *listValidPrefix(keyPrefix: string): AsyncGenerator<BlobKey> {
    const listPrefix = this.prefix + keyPrefix;
    let continuationToken: string | undefined;
    do {
      let page;
      try {
        page = await this.client.send(
          new ListObjectsV2Command({ Bucket: this.bucket, Prefix: listPrefix, MaxKeys: this.listPageSize, ContinuationToken: continuationToken }),
        );
      } catch (err) {
        throw describeS3Error("ListObjectsV2", listPrefix, err);
      }
      // S3 lists in UTF-8 byte order, which for these ASCII names is the contract's ascending order.
      for (const entry of page.Contents ?? []) {
        const name = entry.Key?.slice(this.prefix.length);
        // Stray objects under the prefix (probe objects, anything put there by hand) are never keys.
        if (entry.Key?.startsWith(this.prefix) && isBlobKey(name)) yield name;
      }
      continuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
      if (page.IsTruncated && !continuationToken) throw new Error(`S3 ListObjectsV2 of ${listPrefix} was truncated without a continuation token`);
    } while (continuationToken !== undefined);
  }

  /**
   * Removes staged bodies of crashed writers from `stagingDir`, and aborts multipart uploads and
   * probe objects under the prefix. With several nodes on one bucket, pass `olderThanMs` (e.g.
   * an hour): 0 also aborts the uploads other nodes have in flight.
   */
  async sweepTemp(options: SweepOptions = {}): Promise<number> {
    const olderThanMs = options.olderThanMs ?? 0;
    if (!Number.isFinite(olderThanMs) || olderThanMs < 0) {
      throw new RangeError(`sweepTemp olderThanMs must be a finite number >= 0, got ${String(olderThanMs)}`);
    }
    const cutoff = Date.now() - olderThanMs;
    return (
      (await this.uploads.sweepStagingDir(cutoff, olderThanMs > 0)) +
      (await this.uploads.sweepMultipartUploads(cutoff)) +
      (await sweepProbeObjects(this.target, cutoff))
    );
  }

  /** Presigned S3 GETs of byte ranges (see s3/range-presigner.ts). */
  async createRangePresigner(options: RangePresignerOptions): Promise<RangePresigner> {
    // Loaded on demand: only CASTOR_TRANSFER_MODE=presigned needs the SDK's presigner package.
    const { S3RangePresigner } = await import("./s3/range-presigner.js");
    return S3RangePresigner.create(this, options);
  }
}

export function openS3BlobStore(options: S3BlobStoreOptions): Promise<S3BlobStore> {
  return S3BlobStore.open(options);
}
