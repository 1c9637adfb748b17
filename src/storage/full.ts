/**
 * Running out of storage is an operating condition, not a bug: the data disk fills up, a quota
 * is reached, the database server's disk or the bucket is full. This module recognises such
 * failures wherever they come from (one place, so no call site has to), says which storage is
 * full, and remembers recent ones for the readiness probe.
 *
 * Recognised, anywhere in an error's `cause` chain, `AggregateError.errors` or
 * `SuppressedError` pair (backends wrap what they rethrow):
 *
 * - `ENOSPC`, `EDQUOT` from the filesystem: the fs blob store, the S3 store's local staging
 *   (both in the data dir);
 * - better-sqlite3's `SQLITE_FULL`, and `SQLITE_IOERR_SHMSIZE`: SQLite reports the latter when
 *   its WAL index (`metadata.sqlite-shm`) cannot grow, which on a full disk happens whenever a
 *   transaction crosses a 32 KiB index boundary (measured on a full tmpfs; its only other cause
 *   would be a failing disk). Other `SQLITE_IOERR_*` codes are left alone: SQLite maps ENOSPC
 *   on the database and WAL files to `SQLITE_FULL` itself, so those are real I/O errors;
 * - PostgreSQL SQLSTATE `53100` (`disk_full`);
 * - from an S3-compatible store: HTTP 507, Ceph RGW's `QuotaExceeded`, MinIO's
 *   `XMinioStorageFull` and `XMinioAdminBucketQuotaExceeded`.
 */
import { statfs } from "node:fs/promises";

/** Which storage is full: the data dir's disk, the PostgreSQL server's, or the S3 bucket. */
export type FullStorage = "data_dir" | "database" | "object_store";

export interface StorageFull {
  storage: FullStorage;
  /** The code that told (`ENOSPC`, `SQLITE_FULL`, `53100`, `QuotaExceeded`, `HTTP 507`…), for the log. */
  code: string;
}

const FILESYSTEM_FULL_CODES = new Set(["ENOSPC", "EDQUOT"]);
const SQLITE_FULL_CODES = new Set(["SQLITE_FULL", "SQLITE_IOERR_SHMSIZE"]);
const POSTGRES_DISK_FULL = "53100";
const S3_FULL_NAMES = new Set(["QuotaExceeded", "XMinioStorageFull", "XMinioAdminBucketQuotaExceeded"]);
const HTTP_INSUFFICIENT_STORAGE = 507;
/** Bounds the walk through a hostile or cyclic error graph. */
const MAX_ERRORS_VISITED = 64;

/** What `error` (or an error it wraps) says is full, or null when it is no storage-full failure. */
export function storageFullOf(error: unknown): StorageFull | null {
  const pending: unknown[] = [error];
  const seen = new Set<unknown>();
  while (pending.length > 0 && seen.size < MAX_ERRORS_VISITED) {
    const current = pending.shift();
    if (current === null || typeof current !== "object" || seen.has(current)) continue;
    seen.add(current);
    const found = classifyOne(current);
    if (found !== null) return found;
    const wrapper = current as { cause?: unknown; errors?: unknown; error?: unknown; suppressed?: unknown };
    if ("cause" in wrapper) pending.push(wrapper.cause);
    if (Array.isArray(wrapper.errors)) pending.push(...wrapper.errors);
    // SuppressedError (explicit resource management) carries two errors.
    if ("suppressed" in wrapper) pending.push(wrapper.error, wrapper.suppressed);
  }
  return null;
}

function classifyOne(error: object): StorageFull | null {
  const { code, name } = error as { code?: unknown; name?: unknown };
  if (typeof code === "string") {
    if (FILESYSTEM_FULL_CODES.has(code) || SQLITE_FULL_CODES.has(code)) return { storage: "data_dir", code };
    // pg's DatabaseError carries the SQLSTATE as `code` (and a `severity`, which errno errors lack).
    if (code === POSTGRES_DISK_FULL && "severity" in error) return { storage: "database", code };
  }
  if (typeof name === "string" && S3_FULL_NAMES.has(name)) return { storage: "object_store", code: name };
  const status = (error as { $metadata?: { httpStatusCode?: unknown } }).$metadata?.httpStatusCode;
  if (status === HTTP_INSUFFICIENT_STORAGE) return { storage: "object_store", code: `HTTP ${status}` };
  return null;
}

/**
 * What is full and what to do about it. It names the setting that points at the storage, never
 * its value: paths and URLs of the deployment stay in the log.
 */
export function storageFullReason(storage: FullStorage): string {
  switch (storage) {
    case "data_dir":
      return "castor's data disk (CASTOR_DATA_DIR) is full: free space or grow the volume";
    case "database":
      return "The disk of castor's PostgreSQL database (CASTOR_DATABASE_URL) is full: free space or grow its volume";
    case "object_store":
      return "castor's S3 bucket (CASTOR_S3_BUCKET) is full or over its quota: free space or raise the quota";
  }
}

/** The one sentence an upload refused for lack of storage is answered with (HTTP 507, or a /v2/shards error frame). */
export function storageFullMessage(storage: FullStorage): string {
  return `${storageFullReason(storage)}; nothing was stored, send the upload again once there is room`;
}

/**
 * How long a storage-full failure keeps `/readyz` failing when no write succeeds after it. A
 * node out of its load balancer's pool receives no uploads, so it could never see the success
 * that clears the mark; expiring it lets the node come back and try, and while storage stays
 * full the next failed upload marks it again.
 */
export const STORAGE_FULL_HOLD_MS = 30_000;

/**
 * Remembers the last storage-full failure until a write succeeds after it or it is
 * `STORAGE_FULL_HOLD_MS` old. One per server; uploads report to it, `/readyz` asks it.
 */
export class StorageFullWatch {
  private last: { full: StorageFull; at: number } | null = null;

  constructor(
    private readonly holdMs: number = STORAGE_FULL_HOLD_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Call with every failed write; returns what was full, or null when the failure is another kind. */
  noteFailure(error: unknown): StorageFull | null {
    const full = storageFullOf(error);
    if (full !== null) this.last = { full, at: this.now() };
    return full;
  }

  /** Call when a write went through: storage evidently has room again. */
  noteSuccess(): void {
    this.last = null;
  }

  /** The storage-full failure that still counts, if any. */
  current(): StorageFull | null {
    if (this.last !== null && this.now() - this.last.at >= this.holdMs) this.last = null;
    return this.last?.full ?? null;
  }

  /**
   * Runs a write and reports its outcome: a storage-full failure marks the watch, success clears
   * it when `wrote` says the write really stored something (an upload answered from what was
   * already stored proves nothing about free space).
   */
  async track<T>(write: Promise<T>, wrote: (result: T) => boolean = () => true): Promise<T> {
    let result: T;
    try {
      result = await write;
    } catch (error) {
      this.noteFailure(error);
      throw error;
    }
    if (wrote(result)) this.noteSuccess();
    return result;
  }
}

export interface FreeSpace {
  /** Bytes an unprivileged process may still write (`df`'s "Avail"). */
  availableBytes: number;
  /** Free inodes, or null where the filesystem does not count them (btrfs reports 0 of 0). */
  freeInodes: number | null;
}

/** The free space of the filesystem holding `path`. */
export async function freeSpaceOf(path: string): Promise<FreeSpace> {
  const stats = await statfs(path);
  return {
    availableBytes: stats.bavail * stats.bsize,
    freeInodes: stats.files > 0 ? stats.ffree : null,
  };
}

/** Whether `space` is too little to take uploads: `minFreeBytes` or less, or no inode left. */
export function isDiskFull(space: FreeSpace, minFreeBytes: number): boolean {
  return space.availableBytes <= minFreeBytes || space.freeInodes === 0;
}
