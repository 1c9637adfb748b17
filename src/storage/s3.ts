/**
 * The scale-out `BlobStore`: objects in one bucket of any S3-compatible store (tested against
 * Ceph RGW), under an optional key prefix shared by every castor node of a deployment.
 *
 *   <prefix>xorbs/<64 hex>          published objects
 *   <prefix>shards/<64 hex>
 *   <prefix>castor-probe/<uuid>     short-lived objects of the start-up capability probe
 *
 * Put-if-absent is a conditional write: `PutObject` with `If-None-Match: *`, which the store
 * evaluates atomically, so of N concurrent writers of a key (on any node) exactly one inserts
 * and the others get 412. A bare HEAD-then-PUT would let two writers both "insert" and the
 * second silently replace the first body, whose chunk offsets the metadata may already record.
 *
 * Bodies that arrive as streams are staged to a local temp file (under `stagingDir`) while the
 * caller validates them, and uploaded only on commit, streamed from that file. That keeps memory
 * flat however many 64 MiB uploads run at once (the server's requirement: 16 concurrent), makes
 * an upload retryable (a file can be re-read; a consumed network stream cannot), and means an
 * upload that fails validation never reaches the bucket.
 *
 * Multipart upload is used for large bodies ONLY where the store honours `If-None-Match` on
 * `CompleteMultipartUpload` (AWS S3 does). Ceph RGW (checked on 16.2) ignores it there and on
 * `CopyObject`, silently replacing an existing object, so against it every body goes up as one
 * conditional `PutObject`, which S3 allows up to 5 GiB (castor's objects are ≤ ~65 MiB).
 * `S3BlobStore.open` probes the store once to decide; the probe also refuses a store that
 * ignores `If-None-Match` on `PutObject`, since no correct put-if-absent is possible there.
 *
 * Retries: the SDK's standard strategy retries requests whose body it can replay. It does not
 * retry a request with a stream body, nor a response body that fails mid-way; castor retries
 * those itself (re-reading the staged file; re-requesting the rest of a range — objects are
 * immutable, so the bytes cannot have changed). A conditional write whose outcome was lost to a
 * transient error and then answered 412 on retry is told apart from a real conflict by a
 * per-put id stored in the object's metadata.
 */
import { randomUUID } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, mkdir, open, readdir, rm, stat, unlink } from "node:fs/promises";
import { join, resolve } from "node:path";
import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { setTimeout as sleep } from "node:timers/promises";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
  type GetObjectCommandOutput,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import {
  BlobStoreError,
  checkByteSpan,
  isBlobKey,
  parseBlobKey,
  parseKeyPrefix,
  type BlobBody,
  type BlobKey,
  type BlobStore,
  type ByteSpan,
  type PutOutcome,
  StagedPutBase,
  type StagedPut,
  type SweepOptions,
} from "./blob-store.js";

const MiB = 1024 * 1024;
/** S3's floor for every part but the last. */
const MIN_PART_BYTES = 5 * MiB;
/** S3's ceiling on parts per upload. */
const MAX_PARTS = 10_000;
/** SigV4 presigned URLs live at most 7 days. */
const MAX_PRESIGN_SECONDS = 7 * 24 * 60 * 60;
const MAX_PREFIX_BYTES = 512;
/** Object metadata (`x-amz-meta-castor-put-id`) naming the put that wrote the object. */
const PUT_ID_META = "castor-put-id";
const PROBE_FOLDER = "castor-probe/";
/** Reads of the staged file: 256 per 64 MiB upload is cheap, and 16 uploads buffer only a few MiB. */
const UPLOAD_READ_CHUNK = 256 * 1024;
const STAGING_SUFFIX = ".part";

export interface S3BlobStoreOptions {
  bucket: string;
  /** Prepended to every object name; "" for none. A non-empty prefix gets a trailing "/" if it lacks one. */
  prefix?: string;
  /** e.g. http://127.0.0.1:7480; null/undefined = the AWS endpoint of `region`. */
  endpoint?: string | null;
  region: string;
  /** Both or neither; neither = the SDK's default credential chain (environment, profile, instance role). */
  accessKeyId?: string | null;
  secretAccessKey?: string | null;
  /** `http://endpoint/bucket/key` rather than `http://bucket.endpoint/key`; RGW and most self-hosted stores need it. Default true. */
  forcePathStyle?: boolean;
  /** Local folder for bodies being received; several stores may share one only if they never sweep it with olderThanMs 0. */
  stagingDir: string;
  /** Bodies larger than this go up in parts (where the store allows, see the file comment). Default 16 MiB. */
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
  /** Attempts per request, SDK retries and castor's own alike. Default 4. */
  maxAttempts?: number;
  /** First backoff of castor's own retries; doubled per attempt, with full jitter. Default 100 ms. */
  retryBaseDelayMs?: number;
  /** Keys per ListObjectsV2 page (1..1000). Default 1000. */
  listPageSize?: number;
}

/** The options that shape the SDK client; shared with tests that need a raw client for the same bucket. */
export type S3ClientOptions = Pick<
  S3BlobStoreOptions,
  "endpoint" | "region" | "accessKeyId" | "secretAccessKey" | "forcePathStyle" | "maxAttempts"
>;

interface ResolvedOptions {
  bucket: string;
  prefix: string;
  endpoint: string | null;
  stagingDir: string;
  multipartThresholdBytes: number;
  partSizeBytes: number;
  partConcurrency: number;
  maxAttempts: number;
  retryBaseDelayMs: number;
  listPageSize: number;
}

/** The SDK logs a warning through `console` on every failed stream-bodied request unless given a logger; castor retries and reports those itself. */
const QUIET_LOGGER = { trace() {}, debug() {}, info() {}, warn() {}, error() {} };

export function createS3Client(options: S3ClientOptions): S3Client {
  const hasKey = options.accessKeyId != null && options.accessKeyId !== "";
  const hasSecret = options.secretAccessKey != null && options.secretAccessKey !== "";
  if (hasKey !== hasSecret) {
    throw new TypeError(
      "S3 credentials need both an access key id and a secret access key (CASTOR_S3_ACCESS_KEY_ID and CASTOR_S3_SECRET_ACCESS_KEY), or neither to use the default AWS credential chain",
    );
  }
  return new S3Client({
    region: options.region,
    ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    forcePathStyle: options.forcePathStyle ?? true,
    ...(hasKey ? { credentials: { accessKeyId: options.accessKeyId!, secretAccessKey: options.secretAccessKey! } } : {}),
    // Newer SDKs add CRC32 checksums to every upload by default; RGW and other S3-compatible
    // stores reject or mishandle them. Checksums are sent only where an operation requires one.
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
    maxAttempts: options.maxAttempts ?? 4,
    retryMode: "standard",
    logger: QUIET_LOGGER,
    requestHandler: {
      connectionTimeout: 5_000,
      // Idle, not total: a 64 MiB body may legitimately take long, but a silent socket is dead.
      socketTimeout: 120_000,
      httpAgent: { keepAlive: true, maxSockets: 128 },
      httpsAgent: { keepAlive: true, maxSockets: 128 },
    },
  });
}

function httpStatusOf(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

function errorName(err: unknown): string | undefined {
  return (err as { name?: unknown } | null)?.name as string | undefined;
}

function isPreconditionFailed(err: unknown): boolean {
  return httpStatusOf(err) === 412 || errorName(err) === "PreconditionFailed";
}

function isNotFound(err: unknown): boolean {
  const name = errorName(err);
  return httpStatusOf(err) === 404 || name === "NotFound" || name === "NoSuchKey";
}

const TRANSIENT_STATUS = new Set([429, 500, 502, 503, 504]);
const TRANSIENT_NAMES = new Set([
  "RequestTimeout",
  "RequestTimeoutException",
  "SlowDown",
  "ServiceUnavailable",
  "InternalError",
  "ThrottlingException",
  "TimeoutError",
  // AWS: a conditional write raced another on the same key; the documented answer is to retry.
  "ConditionalRequestConflict",
]);
const TRANSIENT_CODES = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EAI_AGAIN",
  "ENOTCONN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "ERR_STREAM_PREMATURE_CLOSE",
]);

/** A failure another attempt may not see: network trouble, throttling, 5xx. Never 4xx answers about the request itself. */
export function isTransientS3Error(err: unknown): boolean {
  if (err === null || typeof err !== "object") return false;
  const status = httpStatusOf(err);
  if (status !== undefined && TRANSIENT_STATUS.has(status)) return true;
  const name = errorName(err);
  if (name !== undefined && TRANSIENT_NAMES.has(name)) return true;
  const code = (err as NodeJS.ErrnoException).code;
  if (code !== undefined && TRANSIENT_CODES.has(code)) return true;
  // A response that ended before its Content-Length (Node's "aborted" error on the body).
  if ((err as Error).message === "aborted") return true;
  // The SDK marks throttling and transient answers it recognises itself.
  return Boolean((err as { $retryable?: unknown }).$retryable);
}

/** Adds the operation and key to an SDK error so a log line says what failed; the original stays as `cause`. */
function describeS3Error(operation: string, objectKey: string, err: unknown): Error {
  if (err instanceof BlobStoreError) return err;
  const status = httpStatusOf(err);
  const reason = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return new Error(`S3 ${operation} of ${objectKey} failed${status ? ` (HTTP ${status})` : ""}: ${reason}`, { cause: err });
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

function discardBody(body: BlobBody): void {
  if (body instanceof Readable && !body.destroyed) body.destroy();
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

async function removeQuietly(path: string): Promise<void> {
  await unlink(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "ENOENT") throw err;
  });
}

const CONTENT_RANGE_RE = /^bytes (\d+)-(\d+)\/(\d+|\*)$/;

interface OpenedRange {
  body: Readable;
  /** Total object size when the response told it. */
  objectSize: number | null;
}

export interface PresignOptions {
  /** Sign a GET of just these bytes; omitted = the whole object. */
  span?: ByteSpan;
  /** Lifetime, 1 s .. 7 days. */
  expiresInSeconds: number;
}

const probeCache = new Map<string, Promise<boolean>>();

export class S3BlobStore implements BlobStore {
  private constructor(
    readonly client: S3Client,
    private readonly options: ResolvedOptions,
    /** Whether large bodies go up in parts (the store honours conditional multipart completion). */
    readonly usesMultipart: boolean,
  ) {}

  /**
   * Connects, checks the bucket answers, and probes conditional-write support (a handful of
   * requests on a probe object under the prefix, removed again; once per process for each
   * endpoint and bucket). Fails with a message naming the
   * setting to fix when the bucket is missing, access is denied or the store cannot do
   * put-if-absent. Call `sweepTemp()` once at start-up.
   */
  static async open(options: S3BlobStoreOptions): Promise<S3BlobStore> {
    if (typeof options.bucket !== "string" || options.bucket === "") {
      throw new TypeError("S3 blob store needs a bucket name (CASTOR_S3_BUCKET)");
    }
    const resolved: ResolvedOptions = {
      bucket: options.bucket,
      prefix: normalizePrefix(options.prefix),
      endpoint: options.endpoint ?? null,
      stagingDir: resolve(options.stagingDir),
      multipartThresholdBytes: positiveInteger("multipartThresholdBytes", options.multipartThresholdBytes, 16 * MiB, MIN_PART_BYTES),
      partSizeBytes: positiveInteger("partSizeBytes", options.partSizeBytes, 8 * MiB, MIN_PART_BYTES, 5 * 1024 * MiB),
      partConcurrency: positiveInteger("partConcurrency", options.partConcurrency, 4, 1, 64),
      maxAttempts: positiveInteger("maxAttempts", options.maxAttempts, 4, 1, 20),
      retryBaseDelayMs: positiveInteger("retryBaseDelayMs", options.retryBaseDelayMs, 100, 1, 60_000),
      listPageSize: positiveInteger("listPageSize", options.listPageSize, 1000, 1, 1000),
    };
    const client = createS3Client(options);
    try {
      await mkdir(resolved.stagingDir, { recursive: true });
      const probe = new S3BlobStore(client, resolved, false);
      await probe.checkBucket();
      const setting = options.conditionalMultipart ?? "probe";
      const conditionalMultipart = setting === "probe" ? await probe.cachedProbe(options.region) : setting;
      return new S3BlobStore(client, resolved, conditionalMultipart);
    } catch (err) {
      client.destroy();
      throw err;
    }
  }

  /** Closes the client's idle connections; the store is unusable afterwards. */
  close(): void {
    this.client.destroy();
  }

  get bucket(): string {
    return this.options.bucket;
  }

  /** The normalized prefix ("" or ending in "/"). */
  get prefix(): string {
    return this.options.prefix;
  }

  /** The only place an object name is derived from a key, and it re-validates the key first. */
  objectKeyOf(key: BlobKey): string {
    return this.options.prefix + parseBlobKey(key);
  }

  private where(): string {
    return `bucket ${JSON.stringify(this.options.bucket)} at ${this.options.endpoint ?? "the AWS endpoint"}`;
  }

  private async checkBucket(): Promise<void> {
    try {
      await this.client.send(new HeadBucketCommand({ Bucket: this.options.bucket }));
    } catch (err) {
      const status = httpStatusOf(err);
      if (status === 404) {
        throw new Error(`S3 ${this.where()} does not exist: create it, or set CASTOR_S3_BUCKET to an existing bucket`, { cause: err });
      }
      if (status === 403 || status === 401) {
        throw new Error(
          `S3 ${this.where()} refused access: check CASTOR_S3_ACCESS_KEY_ID / CASTOR_S3_SECRET_ACCESS_KEY and the bucket policy`,
          { cause: err },
        );
      }
      throw describeS3Error("HeadBucket", this.options.bucket, err);
    }
  }

  /**
   * The probe's answer, found once per process for each store endpoint and bucket: it is a
   * property of the store, not of a prefix, and several stores on one bucket (tests open one per
   * case) need not repeat its requests. A failed probe is not remembered.
   */
  private cachedProbe(region: string): Promise<boolean> {
    const cacheKey = `${this.options.endpoint ?? `aws:${region}`}|${this.options.bucket}`;
    let answer = probeCache.get(cacheKey);
    if (answer === undefined) {
      answer = this.probeConditionalWrites();
      probeCache.set(cacheKey, answer);
      answer.catch(() => probeCache.delete(cacheKey));
    }
    return answer;
  }

  /** Returns whether conditional multipart completion works, after making sure conditional PutObject does. */
  private async probeConditionalWrites(): Promise<boolean> {
    const { bucket } = this.options;
    const probeKey = `${this.options.prefix}${PROBE_FOLDER}${randomUUID()}`;
    const put = () => this.client.send(new PutObjectCommand({ Bucket: bucket, Key: probeKey, Body: Buffer.from("probe"), IfNoneMatch: "*" }));
    try {
      await put();
      try {
        await put();
      } catch (err) {
        if (!isPreconditionFailed(err)) throw describeS3Error("PutObject (probe)", probeKey, err);
        return await this.probeConditionalMultipart(probeKey);
      }
      throw new Error(
        `S3 ${this.where()} ignores "If-None-Match: *" on PutObject, so castor cannot store each object once (put-if-absent): use a store with conditional writes (AWS S3, Ceph RGW, MinIO)`,
      );
    } finally {
      await this.client.send(new DeleteObjectCommand({ Bucket: bucket, Key: probeKey })).catch(() => undefined);
    }
  }

  private async probeConditionalMultipart(probeKey: string): Promise<boolean> {
    const { bucket } = this.options;
    const { UploadId } = await this.client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: probeKey }));
    try {
      const { ETag } = await this.client.send(
        new UploadPartCommand({ Bucket: bucket, Key: probeKey, UploadId, PartNumber: 1, Body: Buffer.from("multipart probe") }),
      );
      await this.client.send(
        new CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key: probeKey,
          UploadId,
          IfNoneMatch: "*",
          MultipartUpload: { Parts: [{ PartNumber: 1, ETag }] },
        }),
      );
      return false; // completed over an existing object: the condition was ignored
    } catch (err) {
      if (isPreconditionFailed(err)) return true;
      if (httpStatusOf(err) === 501 || httpStatusOf(err) === 400) return false;
      throw describeS3Error("CompleteMultipartUpload (probe)", probeKey, err);
    } finally {
      await this.client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: probeKey, UploadId })).catch(() => undefined);
    }
  }

  /** Runs `attempt` again after transient failures the SDK could not retry itself (stream bodies). */
  private async retrying<T>(attempt: () => Promise<T>): Promise<T> {
    for (let attemptNumber = 1; ; attemptNumber++) {
      try {
        return await attempt();
      } catch (err) {
        if (attemptNumber >= this.options.maxAttempts || !isTransientS3Error(err)) throw err;
        // Full jitter keeps many nodes retrying one overloaded store from doing so in lockstep.
        const ceiling = Math.min(10_000, this.options.retryBaseDelayMs * 2 ** (attemptNumber - 1));
        await sleep(Math.random() * ceiling);
      }
    }
  }

  /** Whether the object now under `objectKey` was written by the put with id `putId`. */
  private async writtenBy(objectKey: string, putId: string): Promise<boolean> {
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.options.bucket, Key: objectKey }));
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
      await this.retrying(async () => {
        const payload = body();
        try {
          await this.client.send(
            new PutObjectCommand({
              Bucket: this.options.bucket,
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

  private putBytes(objectKey: string, bytes: Uint8Array): Promise<PutOutcome> {
    const buffer = asBuffer(bytes);
    return this.conditionalPut(objectKey, buffer.length, () => buffer);
  }

  /** Uploads a complete local file of `size` bytes. */
  private async putFile(objectKey: string, path: string, size: number): Promise<PutOutcome> {
    if (size === 0) return this.putBytes(objectKey, new Uint8Array(0));
    if (this.usesMultipart && size > this.options.multipartThresholdBytes) return this.putFileInParts(objectKey, path, size);
    return this.conditionalPut(objectKey, size, () => createReadStream(path, { highWaterMark: UPLOAD_READ_CHUNK }));
  }

  private async putFileInParts(objectKey: string, path: string, size: number): Promise<PutOutcome> {
    const { bucket } = this.options;
    // Grow parts past the configured size only if the object would otherwise need > 10,000 of them.
    const partSize = Math.max(this.options.partSizeBytes, Math.ceil(size / MAX_PARTS));
    const partCount = Math.ceil(size / partSize);
    const putId = randomUUID();
    let uploadId: string | undefined;
    let completed = false;
    try {
      uploadId = (
        await this.client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: objectKey, Metadata: { [PUT_ID_META]: putId } }))
      ).UploadId;
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
            etags[index] = await this.retrying(async () => {
              const body = createReadStream(path, { start, end: start + length - 1, highWaterMark: UPLOAD_READ_CHUNK });
              try {
                const { ETag } = await this.client.send(
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
      const workers = await Promise.allSettled(Array.from({ length: Math.min(this.options.partConcurrency, partCount) }, uploadParts));
      const failure = workers.find((worker): worker is PromiseRejectedResult => worker.status === "rejected");
      if (failure) throw failure.reason;
      try {
        await this.client.send(
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
        await this.client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: objectKey, UploadId: uploadId })).catch(() => undefined);
      }
    }
  }

  private async createStagingFile() {
    const path = join(this.options.stagingDir, `${randomUUID()}${STAGING_SUFFIX}`);
    // Opened before the stream exists, so an abort can never race the file's creation and leave it behind.
    const handle = await open(path, "wx", 0o600);
    return { path, writable: handle.createWriteStream() };
  }

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
    if (!(body instanceof Readable)) return this.putBytes(objectKey, body);

    let staging: Awaited<ReturnType<S3BlobStore["createStagingFile"]>>;
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

  async putFileIfAbsent(key: BlobKey, path: string): Promise<PutOutcome> {
    const objectKey = this.objectKeyOf(key);
    if (await this.exists(key)) return { inserted: false };
    // Uploaded straight from `path` (no local copy): the file must stay unchanged until this resolves.
    const info = await stat(path);
    if (!info.isFile()) throw new TypeError(`${path} is not a regular file`);
    return this.putFile(objectKey, path, info.size);
  }

  async beginPut(key: BlobKey): Promise<StagedPut> {
    const objectKey = this.objectKeyOf(key);
    const staging = await this.createStagingFile();
    return new S3StagedPut(key, staging.path, staging.writable, async (size) => {
      if (await this.exists(key)) return { inserted: false };
      return this.putFile(objectKey, staging.path, size);
    });
  }

  /** One GET of `range` (or the whole object), checked against what was asked for before a byte is handed on. */
  private async openRange(key: BlobKey, objectKey: string, range: { offset: number; length: number } | null): Promise<OpenedRange> {
    let response: GetObjectCommandOutput;
    try {
      response = await this.client.send(
        new GetObjectCommand({
          Bucket: this.options.bucket,
          Key: objectKey,
          ...(range ? { Range: `bytes=${range.offset}-${range.offset + range.length - 1}` } : {}),
        }),
      );
    } catch (err) {
      if (isNotFound(err)) throw new BlobStoreError("not_found", `${key} is not stored`);
      if (range && httpStatusOf(err) === 416) {
        const size = await this.size(key);
        if (size === null) throw new BlobStoreError("not_found", `${key} is not stored`);
        checkByteSpan(key, range, size);
      }
      throw describeS3Error("GetObject", objectKey, err);
    }
    const body = response.Body as Readable | undefined;
    if (!(body instanceof Readable)) throw new Error(`S3 GetObject of ${objectKey} returned no readable body`);
    try {
      const contentLength = response.ContentLength ?? null;
      if (range === null) return { body, objectSize: contentLength };
      const match = CONTENT_RANGE_RE.exec(response.ContentRange ?? "");
      if (match === null) {
        // A store that ignored Range sent the whole object; acceptable only if that is exactly what was asked.
        if (range.offset === 0 && contentLength === range.length) return { body, objectSize: contentLength };
        if (contentLength !== null) checkByteSpan(key, range, contentLength);
        throw new Error(`S3 GetObject of ${objectKey} ignored the Range header (answered ${JSON.stringify(response.ContentRange ?? null)})`);
      }
      const [first, last] = [Number(match[1]), Number(match[2])];
      const objectSize = match[3] === "*" ? null : Number(match[3]);
      if (first !== range.offset || last !== range.offset + range.length - 1) {
        // S3 clips a range that runs past the end rather than refusing it.
        if (objectSize !== null) checkByteSpan(key, range, objectSize);
        throw new Error(
          `S3 GetObject of ${objectKey} answered bytes ${first}-${last} for bytes ${range.offset}-${range.offset + range.length - 1}`,
        );
      }
      return { body, objectSize };
    } catch (err) {
      body.destroy();
      throw err;
    }
  }

  async read(key: BlobKey, span?: ByteSpan): Promise<Readable> {
    const objectKey = this.objectKeyOf(key);
    // Malformed spans are refused before any request (an infinite size only checks the form).
    if (span !== undefined) checkByteSpan(key, span, Number.POSITIVE_INFINITY);
    // The SDK retries opening; what it cannot retry is a body failing mid-way, which resumingBody handles.
    const first = await this.openRange(key, objectKey, span ?? null);
    const start = span?.offset ?? 0;
    const end = span !== undefined ? span.offset + span.length : first.objectSize;
    if (end === null) return first.body; // no length known: nothing to resume against
    return this.resumingBody(key, objectKey, first.body, start, end);
  }

  /**
   * The bytes [start, end) of an object, starting from an already open response, re-requesting
   * the remainder when the connection fails mid-way. A short or long body is an error, never
   * silently passed on.
   */
  private resumingBody(key: BlobKey, objectKey: string, firstBody: Readable, start: number, end: number): Readable {
    const store = this;
    return Readable.from(
      (async function* () {
        let body = firstBody;
        let position = start;
        let failures = 0;
        for (;;) {
          try {
            for await (const piece of body as AsyncIterable<Buffer>) {
              if (position + piece.length > end) {
                throw new Error(`S3 GetObject of ${objectKey} sent more than the ${end - start} bytes asked for`);
              }
              position += piece.length;
              failures = 0;
              yield piece;
            }
            if (position === end) return;
            throw Object.assign(new Error(`S3 GetObject of ${objectKey} ended at byte ${position} of ${end}`), {
              code: "ERR_STREAM_PREMATURE_CLOSE",
            });
          } catch (err) {
            body.destroy();
            failures++;
            if (failures >= store.options.maxAttempts || !isTransientS3Error(err)) throw err;
            const ceiling = Math.min(10_000, store.options.retryBaseDelayMs * 2 ** (failures - 1));
            await sleep(Math.random() * ceiling);
            body = (await store.openRange(key, objectKey, { offset: position, length: end - position })).body;
          }
        }
      })(),
      { objectMode: false, highWaterMark: 256 * 1024 },
    );
  }

  async size(key: BlobKey): Promise<number | null> {
    const objectKey = this.objectKeyOf(key);
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.options.bucket, Key: objectKey }));
      if (head.ContentLength === undefined) throw new Error(`S3 HeadObject of ${objectKey} answered without a Content-Length`);
      return head.ContentLength;
    } catch (err) {
      if (isNotFound(err)) return null;
      throw describeS3Error("HeadObject", objectKey, err);
    }
  }

  async exists(key: BlobKey): Promise<boolean> {
    return (await this.size(key)) !== null;
  }

  async delete(key: BlobKey): Promise<void> {
    const objectKey = this.objectKeyOf(key);
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.options.bucket, Key: objectKey }));
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
    const listPrefix = this.options.prefix + keyPrefix;
    let continuationToken: string | undefined;
    do {
      let page;
      try {
        page = await this.client.send(
          new ListObjectsV2Command({
            Bucket: this.options.bucket,
            Prefix: listPrefix,
            MaxKeys: this.options.listPageSize,
            ContinuationToken: continuationToken,
          }),
        );
      } catch (err) {
        throw describeS3Error("ListObjectsV2", listPrefix, err);
      }
      // S3 lists in UTF-8 byte order, which for these ASCII names is the contract's ascending order.
      for (const entry of page.Contents ?? []) {
        const name = entry.Key?.slice(this.options.prefix.length);
        // Stray objects under the prefix (probe objects, anything put there by hand) are never keys.
        if (entry.Key?.startsWith(this.options.prefix) && isBlobKey(name)) yield name;
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
    return (await this.sweepStagingDir(cutoff, olderThanMs > 0)) + (await this.sweepMultipartUploads(cutoff)) + (await this.sweepProbes(cutoff));
  }

  private async sweepStagingDir(cutoff: number, checkAge: boolean): Promise<number> {
    let removed = 0;
    let names: string[];
    try {
      names = await readdir(this.options.stagingDir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw err;
    }
    for (const name of names) {
      if (!name.endsWith(STAGING_SUFFIX)) continue; // never delete what castor did not create
      const path = join(this.options.stagingDir, name);
      if (checkAge) {
        const info = await lstat(path).catch(() => null);
        if (info === null || info.mtimeMs > cutoff) continue;
      }
      await rm(path, { force: true });
      removed++;
    }
    return removed;
  }

  private async sweepMultipartUploads(cutoff: number): Promise<number> {
    const { bucket, prefix } = this.options;
    let removed = 0;
    let keyMarker: string | undefined;
    let uploadIdMarker: string | undefined;
    for (;;) {
      const page = await this.client.send(
        new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix, KeyMarker: keyMarker, UploadIdMarker: uploadIdMarker }),
      );
      for (const upload of page.Uploads ?? []) {
        if (!upload.Key || !upload.UploadId) continue;
        if (upload.Initiated !== undefined && upload.Initiated.getTime() > cutoff) continue;
        try {
          await this.client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: upload.Key, UploadId: upload.UploadId }));
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

  private async sweepProbes(cutoff: number): Promise<number> {
    const { bucket } = this.options;
    const probePrefix = this.options.prefix + PROBE_FOLDER;
    let removed = 0;
    let continuationToken: string | undefined;
    do {
      const page = await this.client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: probePrefix, ContinuationToken: continuationToken }));
      for (const entry of page.Contents ?? []) {
        if (!entry.Key || (entry.LastModified !== undefined && entry.LastModified.getTime() > cutoff)) continue;
        await this.client.send(new DeleteObjectCommand({ Bucket: bucket, Key: entry.Key }));
        removed++;
      }
      continuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (continuationToken !== undefined);
    return removed;
  }

  /**
   * A presigned GET URL for `key`, for clients to fetch from the store directly
   * (`CASTOR_TRANSFER_MODE=presigned`). No request is made: the key's existence and the span's
   * fit are not checked.
   *
   * Scope of the grant: without a span the URL reads the whole object. With a span, `Range` is
   * one of the SIGNED headers (`X-Amz-SignedHeaders=host;range`), so the holder must send exactly
   * `Range: bytes=<first>-<last>`; the store rejects any other Range, or none, as a signature
   * mismatch (403; verified against Ceph RGW). That protection lives in the store's signature
   * check, not in the URL's text: a store that skipped verifying signed headers would serve the
   * whole object. Either way the URL stays valid, for that range, until it expires; a presigned
   * URL cannot be revoked short of rotating the access key.
   */
  async presignGetUrl(key: BlobKey, options: PresignOptions): Promise<string> {
    const objectKey = this.objectKeyOf(key);
    const { span, expiresInSeconds } = options;
    if (span !== undefined) checkByteSpan(key, span, Number.POSITIVE_INFINITY);
    if (!Number.isSafeInteger(expiresInSeconds) || expiresInSeconds < 1 || expiresInSeconds > MAX_PRESIGN_SECONDS) {
      throw new RangeError(`presigned URL lifetime must be a whole number of seconds from 1 to ${MAX_PRESIGN_SECONDS}, got ${String(expiresInSeconds)}`);
    }
    const command = new GetObjectCommand({
      Bucket: this.options.bucket,
      Key: objectKey,
      ...(span ? { Range: presignedRangeHeader(span) } : {}),
    });
    return getSignedUrl(this.client, command, { expiresIn: expiresInSeconds });
  }
}

/** The exact `Range` header value a URL from `presignGetUrl(key, { span })` must be fetched with. */
export function presignedRangeHeader(span: ByteSpan): string {
  return `bytes=${span.offset}-${span.offset + span.length - 1}`;
}

export function openS3BlobStore(options: S3BlobStoreOptions): Promise<S3BlobStore> {
  return S3BlobStore.open(options);
}

class S3StagedPut extends StagedPutBase<Writable & { bytesWritten: number }> {
  constructor(
    key: BlobKey,
    private readonly stagingPath: string,
    writable: Writable & { bytesWritten: number },
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
