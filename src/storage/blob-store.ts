/**
 * The blob seam: where xorb and shard bytes live. One interface, a filesystem implementation
 * (`fs.ts`, the embedded default) and an S3 one (scale-out); every implementation passes the
 * contract suite in test/contract/blob-store.ts unchanged. Capabilities only some backends have
 * are optional methods (`openSpan`, `createRangePresigner`): callers test for the method, and
 * the contract suite checks each backend offers exactly the ones it declares.
 *
 * Contract, in short:
 * - Keys are `xorbs/<64 hex>` or `shards/<64 hex>` (the hash string form of docs/protocol.md §2).
 *   Every method re-validates its key, so no backend ever builds a path or an object name from
 *   unchecked text.
 * - Objects are immutable and content-addressed: the first complete write of a key wins, later
 *   writes report `inserted: false` and leave the stored bytes untouched. An object is never
 *   visible before it is complete, and a failed or aborted write leaves nothing behind.
 * - Reads are by byte range `{ offset, length }`; a range that does not lie wholly inside the
 *   object is an error (`range_not_satisfiable`), never a short read, because callers serve
 *   exactly the signed ranges of a transfer URL and a silent short read would corrupt a download.
 */
import type { Readable, Writable } from "node:stream";
import { finished } from "node:stream/promises";
import { hashToHex, type Hash } from "../format/hash.js";

/**
 * `xorbs` and `shards` are keyed by their Merkle hash; `inline` holds the content of files a hub
 * commit stores inline (small text files), keyed by the content's SHA-256.
 */
export const BLOB_KINDS = ["xorbs", "shards", "inline"] as const;
export type BlobKind = (typeof BLOB_KINDS)[number];

declare const blobKeyBrand: unique symbol;
/** A validated key, `<kind>/<64 lowercase hex>`. Obtain one from the functions below only. */
export type BlobKey = string & { readonly [blobKeyBrand]: true };

export type BlobStoreErrorCode =
  /** The key (or list prefix) is not of the form `xorbs/<hex>`, `shards/<hex>` or `inline/<hex>`. */
  | "invalid_key"
  /** Reading an object that does not exist. */
  | "not_found"
  /** A range that is not two non-negative safe integers with `length >= 1`: a caller bug. */
  | "bad_range"
  /** A well-formed range that does not lie inside the object (HTTP 416). */
  | "range_not_satisfiable"
  /** A staged put used out of order (commit twice, commit before the body ended, write after abort). */
  | "invalid_state"
  /**
   * The store cannot be reached right now (restarting, overloaded, the network to it broken)
   * and its own retries did not get through: the same call may succeed a little later.
   */
  | "unavailable";

export class BlobStoreError extends Error {
  override readonly name = "BlobStoreError";
  /** For `range_not_satisfiable`, when known: the object's size (a 416 names it). */
  readonly objectSize: number | undefined;
  constructor(
    readonly code: BlobStoreErrorCode,
    message: string,
    options: ErrorOptions & { objectSize?: number } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.objectSize = options.objectSize;
  }
}

export function isBlobStoreError(err: unknown, code?: BlobStoreErrorCode): err is BlobStoreError {
  return err instanceof BlobStoreError && (code === undefined || err.code === code);
}

const KEY_RE = /^(xorbs|shards|inline)\/([0-9a-f]{64})$/;
const MAX_SHOWN_INPUT = 80;

/** Quotes untrusted text for an error message without letting it inject lines or megabytes. */
function showInput(text: unknown): string {
  if (typeof text !== "string") return `a ${typeof text}`;
  const cut = text.length > MAX_SHOWN_INPUT ? `${text.slice(0, MAX_SHOWN_INPUT)}…` : text;
  return JSON.stringify(cut);
}

export function isBlobKey(text: unknown): text is BlobKey {
  return typeof text === "string" && KEY_RE.test(text);
}

/** Validates untrusted text as a key; anything else (`..`, `/abs`, NUL, `\`, upper case) is rejected. */
export function parseBlobKey(text: unknown): BlobKey {
  if (!isBlobKey(text)) {
    throw new BlobStoreError(
      "invalid_key",
      `invalid blob key ${showInput(text)}: expected "xorbs/<hash>", "shards/<hash>" or "inline/<sha256>" with a 64-character lowercase hexadecimal hash`,
    );
  }
  return text;
}

export function blobKey(kind: BlobKind, hash: Hash): BlobKey {
  return parseBlobKey(`${kind}/${hashToHex(hash)}`);
}

/** `hex` is the hash string form (as in URLs); it is validated, not trusted. */
export function blobKeyFromHex(kind: BlobKind, hex: string): BlobKey {
  return parseBlobKey(`${kind}/${hex}`);
}

export function blobKeyParts(key: BlobKey): { kind: BlobKind; hex: string } {
  const match = KEY_RE.exec(parseBlobKey(key));
  return { kind: match![1] as BlobKind, hex: match![2] };
}

/**
 * Validates a `list()` prefix: it must be the beginning of some valid key (`""`, `"xo"`,
 * `"xorbs/"`, `"xorbs/ab"`, a whole key). Rejecting the rest keeps odd text (`../`, NUL) away
 * from paths and object names, and turns typos like `"xorb/"` into an error instead of an
 * empty listing.
 */
export function parseKeyPrefix(prefix: unknown): string {
  if (typeof prefix === "string") {
    for (const kind of BLOB_KINDS) {
      const head = `${kind}/`;
      if (prefix.length <= head.length ? head.startsWith(prefix) : prefix.startsWith(head) && /^[0-9a-f]{0,64}$/.test(prefix.slice(head.length))) {
        return prefix;
      }
    }
  }
  throw new BlobStoreError(
    "invalid_key",
    `invalid blob key prefix ${showInput(prefix)}: it must be the start of "xorbs/<hash>", "shards/<hash>" or "inline/<sha256>" (lowercase hexadecimal)`,
  );
}

/** A byte range of a stored object: `length` bytes starting at `offset` (so the last byte is `offset + length - 1`). */
export interface ByteSpan {
  offset: number;
  length: number;
}

/**
 * Checks `span` against an object of `size` bytes; backends call it before reading so every one
 * reports the same errors. Zero-length spans are refused: HTTP ranges cannot express them, so
 * asking for one is a caller bug (read the whole object without a span instead).
 */
export function checkByteSpan(key: BlobKey, span: ByteSpan, size: number): void {
  const { offset, length } = span;
  if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 1) {
    throw new BlobStoreError(
      "bad_range",
      `byte range {offset: ${String(offset)}, length: ${String(length)}} is malformed: offset must be an integer >= 0 and length an integer >= 1`,
    );
  }
  if (offset + length > size) {
    throw new BlobStoreError("range_not_satisfiable", `byte range ${offset}-${offset + length - 1} lies outside ${key}, which has ${size} bytes`);
  }
}

/** A span of a stored object, open for positional reads (`BlobStore.openSpan`). */
export interface SpanReader {
  /** Bytes in the span. */
  readonly length: number;
  /**
   * Copies the span's bytes from `from` (0 = the span's first byte) into `buffer`, as many as
   * fit; resolves with how many were copied, which may be fewer than asked (0 from `length` on).
   */
  read(buffer: Uint8Array, from: number): Promise<number>;
  /** Releases the object; call once, after the last read. */
  close(): Promise<void>;
}

/** The HTTP `Range` header value that selects exactly `span`: `bytes=<first>-<last>`. */
export function rangeHeaderOf(span: ByteSpan): string {
  return `bytes=${span.offset}-${span.offset + span.length - 1}`;
}

export interface RangePresignerOptions {
  /** Lifetime of every URL: whole seconds, 1 to `MAX_PRESIGNED_URL_TTL_SECONDS` (config.ts). */
  ttlSeconds: number;
  /** Clock in ms since the epoch; tests pin it. */
  now?: () => number;
}

/**
 * Signs URLs that let their holder GET one byte range of an object straight from the backend
 * (`BlobStore.createRangePresigner`). Each URL must be fetched with the header
 * `Range: ${rangeHeaderOf(span)}`: the range is part of what is signed, so any other range, or
 * none, is refused by the backend. A URL stays valid until its lifetime runs out; it cannot be
 * revoked. URLs are credentials: never log them.
 */
export interface RangePresigner {
  /**
   * A URL for exactly `span` of the object at `key`. Synchronous and cheap, because a
   * reconstruction answer signs one per range on the request's path; no request is made, so
   * neither the object's existence nor the span's fit is checked (a malformed span or key is
   * refused with `bad_range` / `invalid_key`).
   */
  presign(key: BlobKey, span: ByteSpan): string;
  /**
   * Renews the credentials URLs are signed with, where they rotate (temporary credentials).
   * Await it before a batch of `presign` calls.
   */
  refresh(): Promise<void>;
}

export interface PutOutcome {
  /** false when the key was already present; the stored bytes were then left untouched. */
  inserted: boolean;
}

/** A body to store: a stream (consumed, or destroyed if not needed) or bytes already in memory. */
export type BlobBody = Readable | Uint8Array;

/**
 * A write in progress that becomes visible only on `commit()`. The write path streams an upload
 * into `writable` while validating it, and commits only once validation succeeded:
 *
 * ```ts
 * const staged = await store.beginPut(key);
 * try {
 *   await pipeline(body, validator, staged.writable);
 *   return await staged.commit();
 * } finally {
 *   await staged.abort(); // no-op once committed
 * }
 * ```
 */
export interface StagedPut {
  readonly key: BlobKey;
  /** Receives the body. Ending it publishes nothing; destroying it dooms the put. */
  readonly writable: Writable;
  /**
   * Durably publishes the staged bytes under `key` if absent (`inserted: false` and the staged
   * bytes discarded if present). The writable must have been ended (`invalid_state` otherwise:
   * committing a body still being written would publish a truncated object); a writable that
   * failed makes commit reject and clean up. Exactly one commit or abort takes effect.
   */
  commit(): Promise<PutOutcome>;
  /** Discards the staged bytes. Idempotent, and a no-op after a commit. */
  abort(): Promise<void>;
}

/**
 * The `StagedPut` rules every backend shares: one commit or abort takes effect, a commit needs
 * the writable ended and unfailed, and whatever happens the staging is released exactly once.
 * A backend supplies how staged bytes are published and how its staging is cleaned up.
 */
export abstract class StagedPutBase<W extends Writable = Writable> implements StagedPut {
  private state: "open" | "committing" | "done" = "open";
  private commitPromise: Promise<PutOutcome> | null = null;

  constructor(
    readonly key: BlobKey,
    readonly writable: W,
  ) {
    // Write errors surface through commit(); without a listener they would crash the process.
    this.writable.on("error", () => undefined);
  }

  /** Publishes the staged bytes; runs once the writable has finished. */
  protected abstract publishStaged(): Promise<PutOutcome>;
  /** Removes the staging (temp files, handles); runs exactly once, after commit or abort. */
  protected abstract cleanUpStaging(): Promise<void>;

  commit(): Promise<PutOutcome> {
    if (this.state !== "open") {
      return Promise.reject(new BlobStoreError("invalid_state", `the staged put of ${this.key} was already committed or aborted`));
    }
    this.state = "committing";
    this.commitPromise = this.runCommit();
    return this.commitPromise;
  }

  private async runCommit(): Promise<PutOutcome> {
    try {
      const { writable } = this;
      if (writable.errored) throw writable.errored;
      if (!writable.writableEnded) {
        throw new BlobStoreError("invalid_state", `commit of ${this.key} before its body was complete: end the writable (or await the pipeline into it) first`);
      }
      await finished(writable);
      return await this.publishStaged();
    } finally {
      await this.release();
    }
  }

  async abort(): Promise<void> {
    if (this.state === "committing") {
      await this.commitPromise?.catch(() => undefined);
      return;
    }
    if (this.state === "done") return;
    await this.release();
  }

  private async release(): Promise<void> {
    this.state = "done";
    if (!this.writable.destroyed) this.writable.destroy();
    await this.cleanUpStaging();
  }
}

export interface SweepOptions {
  /** Only remove staging leftovers untouched for at least this long (default 0: all of them). */
  olderThanMs?: number;
}

export interface BlobStore {
  /**
   * Stores `body` under `key` unless present. A stream body is consumed, or destroyed when the
   * key is already present; if it fails, the put rejects with the stream's own error (so a
   * validator's error reaches the caller unchanged) and nothing is stored.
   */
  putIfAbsent(key: BlobKey, body: BlobBody): Promise<PutOutcome>;
  /** Stores a copy of the local file at `path` unless present; the file itself is left alone. */
  putFileIfAbsent(key: BlobKey, path: string): Promise<PutOutcome>;
  /** Starts a staged put (see `StagedPut`). */
  beginPut(key: BlobKey): Promise<StagedPut>;
  /**
   * Opens the whole object, or `span` of it, as a stream. Rejects before any byte is produced
   * with `not_found`, `bad_range` or `range_not_satisfiable`, so an HTTP layer can still choose
   * the status code.
   */
  read(key: BlobKey, span?: ByteSpan): Promise<Readable>;
  /**
   * Opens `span` of the object for reads into the caller's own buffers, which a server can
   * reuse from request to request (src/http/buffer-pool.ts) where a stream allocates a buffer
   * per read. Rejects as `read` does. Offered by backends that read local files; absent where
   * bytes only come as a stream (S3).
   */
  openSpan?(key: BlobKey, span: ByteSpan): Promise<SpanReader>;
  /**
   * Starts signing URLs that clients fetch byte ranges of objects with, bypassing castor
   * (CASTOR_TRANSFER_MODE=presigned). Offered by backends clients can reach themselves (S3);
   * absent where only castor reads the bytes (fs). Rejects when the backend cannot sign: no
   * credentials, or a self-check of the signer failed.
   */
  createRangePresigner?(options: RangePresignerOptions): Promise<RangePresigner>;
  /** The object's size in bytes, or null when absent. */
  size(key: BlobKey): Promise<number | null>;
  exists(key: BlobKey): Promise<boolean>;
  /** Removes the object; removing an absent key is not an error. */
  delete(key: BlobKey): Promise<void>;
  /** Every key starting with `prefix` (see `parseKeyPrefix`), in ascending byte order. */
  list(prefix?: string): AsyncIterable<BlobKey>;
  /**
   * Removes staging leftovers of crashed writers (temp files, unfinished multipart uploads).
   * Called at start-up; returns how many were removed.
   */
  sweepTemp(options?: SweepOptions): Promise<number>;
  /** Releases connections a backend holds (the S3 client); absent where there is nothing to release. */
  close?(): void;
}
