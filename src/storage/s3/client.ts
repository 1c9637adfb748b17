/**
 * The S3 client castor talks through, and how its failures are read: which are "not found" or
 * "precondition failed" answers, which are transient and worth another attempt, and castor's
 * own retries. Shared by the probe, the uploads and the reads of the S3 blob store (../s3.ts).
 *
 * The SDK's standard strategy retries requests whose body it can replay. It does not retry a
 * request with a stream body, nor a response body that fails mid-way; castor retries those
 * itself (`retrying`, `backOffBeforeRetry`): uploads re-read their staged file, reads
 * re-request the rest of the range.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { S3Client } from "@aws-sdk/client-s3";
import { BlobStoreError } from "../blob-store.js";

/** The options that shape the SDK client; shared with tests that need a raw client for the same bucket. */
export interface S3ClientOptions {
  /** e.g. http://127.0.0.1:7480; null/undefined = the AWS endpoint of `region`. */
  endpoint?: string | null;
  region: string;
  /** Both or neither; neither = the SDK's default credential chain (environment, profile, instance role). */
  accessKeyId?: string | null;
  secretAccessKey?: string | null;
  /** `http://endpoint/bucket/key` rather than `http://bucket.endpoint/key`; RGW and most self-hosted stores need it. Default true. */
  forcePathStyle?: boolean;
  /** Attempts per request, SDK retries and castor's own alike. Default 4. */
  maxAttempts?: number;
}

/** Where a store's objects live; every part of the S3 store addresses the bucket through this. */
export interface S3Target {
  readonly client: S3Client;
  readonly bucket: string;
  /** Prepended to every object name: "" or ending in "/". */
  readonly prefix: string;
  /** The configured endpoint; null = AWS. */
  readonly endpoint: string | null;
}

/** How castor's own retries pace themselves. */
export interface RetryPolicy {
  /** Attempts in all, the first included. */
  readonly maxAttempts: number;
  /** First backoff; doubled per attempt, with full jitter. */
  readonly retryBaseDelayMs: number;
}

/** The SDK logs a warning through `console` on every failed stream-bodied request unless given a logger; castor retries and reports those itself. */
const QUIET_LOGGER = { trace() {}, debug() {}, info() {}, warn() {}, error() {} };
const MAX_BACKOFF_MS = 10_000;

export function createS3Client(options: S3ClientOptions): S3Client {
  const hasKey = options.accessKeyId != null && options.accessKeyId !== "";
  const hasSecret = options.secretAccessKey != null && options.secretAccessKey !== "";
  if (hasKey !== hasSecret) {
    throw new TypeError(
      "S3 credentials need both an access key id and a secret access key (CASTOR_S3_ACCESS_KEY_ID and CASTOR_S3_SECRET_ACCESS_KEY), or neither to use the default AWS credential chain",
    );
  }
  // The SDK warns on Node < 22 at every client's creation that its releases from 2027 on will
  // need Node 22. castor runs the release its lockfile pins, which supports Node 20 (its
  // `engines`), so on castor's tested Node the notice only alarms operators; AWS documents this
  // variable as its off switch. One set by the operator is left as it is.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
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

/** "bucket "b" at http://…", for messages that tell an operator which store answered. */
export function describeTarget(target: Pick<S3Target, "bucket" | "endpoint">): string {
  return `bucket ${JSON.stringify(target.bucket)} at ${target.endpoint ?? "the AWS endpoint"}`;
}

export function httpStatusOf(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

export function errorName(err: unknown): string | undefined {
  return (err as { name?: unknown } | null)?.name as string | undefined;
}

export function isPreconditionFailed(err: unknown): boolean {
  return httpStatusOf(err) === 412 || errorName(err) === "PreconditionFailed";
}

export function isNotFound(err: unknown): boolean {
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

/**
 * Adds the operation and key to an SDK error so a log line says what failed; the original stays
 * as `cause`. A transient failure (the store down or overloaded, after the retries) becomes a
 * BlobStoreError `unavailable`, which castor answers with 503 rather than as a bug of its own.
 */
export function describeS3Error(operation: string, objectKey: string, err: unknown): Error {
  if (err instanceof BlobStoreError) return err;
  const status = httpStatusOf(err);
  const reason = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  const message = `S3 ${operation} of ${objectKey} failed${status ? ` (HTTP ${status})` : ""}: ${reason}`;
  if (isTransientS3Error(err)) return new BlobStoreError("unavailable", `the object store is unavailable: ${message}`, { cause: err });
  return new Error(message, { cause: err });
}

/**
 * Whether `err`, the `failures`-th failure in a row, deserves another attempt; if so, waits the
 * backoff first. Full jitter keeps many nodes retrying one overloaded store from doing so in lockstep.
 */
export async function backOffBeforeRetry(policy: RetryPolicy, failures: number, err: unknown): Promise<boolean> {
  if (failures >= policy.maxAttempts || !isTransientS3Error(err)) return false;
  const ceiling = Math.min(MAX_BACKOFF_MS, policy.retryBaseDelayMs * 2 ** (failures - 1));
  await sleep(Math.random() * ceiling);
  return true;
}

/** Runs `attempt` again after transient failures the SDK could not retry itself (stream bodies). */
export async function retrying<T>(policy: RetryPolicy, attempt: () => Promise<T>): Promise<T> {
  for (let failures = 1; ; failures++) {
    try {
      return await attempt();
    } catch (err) {
      if (!(await backOffBeforeRetry(policy, failures, err))) throw err;
    }
  }
}
