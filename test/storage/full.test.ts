/**
 * Storage-full classification: every backend's way of saying "no room", found wherever it is
 * wrapped, and nothing else mistaken for it; the watch behind /readyz; the free-space check.
 */
import assert from "node:assert/strict";
import { mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { S3ServiceException } from "@aws-sdk/client-s3";
import Database from "better-sqlite3";
import pg from "pg";
import { freeSpaceOf, isDiskFull, storageFullMessage, storageFullOf, StorageFullWatch, STORAGE_FULL_HOLD_MS } from "../../src/storage/full.js";

function errno(code: string, message = `${code}: some call failed`): NodeJS.ErrnoException {
  return Object.assign(new Error(message), { code, errno: -28, syscall: "write" });
}

function postgresError(sqlstate: string): Error {
  const error = new pg.DatabaseError('could not extend file "base/16384/16385": No space left on device', 120, "error");
  error.severity = "ERROR";
  error.code = sqlstate;
  return error;
}

function s3Error(name: string, httpStatusCode: number): S3ServiceException {
  return new S3ServiceException({ name, $fault: "client", $metadata: { httpStatusCode }, message: `${name} (simulated)` });
}

/** As the S3 store rethrows SDK errors (describeS3Error): a message of its own, the original as cause. */
function wrappedLikeS3Store(error: unknown): Error {
  return new Error("S3 PutObject of castor/xorbs/ab… failed (HTTP 403): QuotaExceeded", { cause: error });
}

describe("storageFullOf", () => {
  it("recognises a full or over-quota filesystem (fs store, S3 staging) as the data dir's", async () => {
    assert.deepEqual(storageFullOf(errno("ENOSPC")), { storage: "data_dir", code: "ENOSPC" });
    assert.deepEqual(storageFullOf(errno("EDQUOT")), { storage: "data_dir", code: "EDQUOT" });
  });

  it("recognises SQLite's full database and its WAL index that cannot grow, and no other SQLite error", () => {
    assert.deepEqual(storageFullOf(new Database.SqliteError("database or disk is full", "SQLITE_FULL")), { storage: "data_dir", code: "SQLITE_FULL" });
    assert.deepEqual(storageFullOf(new Database.SqliteError("disk I/O error", "SQLITE_IOERR_SHMSIZE")), {
      storage: "data_dir",
      code: "SQLITE_IOERR_SHMSIZE",
    });
    for (const code of ["SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_CONSTRAINT_UNIQUE", "SQLITE_BUSY", "SQLITE_CORRUPT"]) {
      assert.equal(storageFullOf(new Database.SqliteError("some failure", code)), null, code);
    }
  });

  it("recognises PostgreSQL's disk_full (53100) only, and only from a database error", () => {
    assert.deepEqual(storageFullOf(postgresError("53100")), { storage: "database", code: "53100" });
    assert.equal(storageFullOf(postgresError("53200")), null, "out of memory is no full disk");
    assert.equal(storageFullOf(postgresError("23505")), null);
    assert.equal(storageFullOf(Object.assign(new Error("not from pg"), { code: "53100" })), null);
  });

  it("recognises an S3 store that is full or over quota (Ceph RGW, MinIO, any 507)", () => {
    assert.deepEqual(storageFullOf(s3Error("QuotaExceeded", 403)), { storage: "object_store", code: "QuotaExceeded" });
    assert.deepEqual(storageFullOf(s3Error("XMinioStorageFull", 507)), { storage: "object_store", code: "XMinioStorageFull" });
    assert.deepEqual(storageFullOf(s3Error("XMinioAdminBucketQuotaExceeded", 400)), { storage: "object_store", code: "XMinioAdminBucketQuotaExceeded" });
    assert.deepEqual(storageFullOf(s3Error("SomethingElse", 507)), { storage: "object_store", code: "HTTP 507" });
    assert.equal(storageFullOf(s3Error("AccessDenied", 403)), null);
    assert.equal(storageFullOf(s3Error("InternalError", 500)), null);
  });

  it("looks through cause chains, AggregateErrors and suppressed-error pairs", () => {
    assert.deepEqual(storageFullOf(wrappedLikeS3Store(s3Error("QuotaExceeded", 403))), { storage: "object_store", code: "QuotaExceeded" });
    const deep = new Error("upload failed", { cause: new Error("commit failed", { cause: errno("ENOSPC") }) });
    assert.deepEqual(storageFullOf(deep), { storage: "data_dir", code: "ENOSPC" });
    const aggregate = new AggregateError([new Error("first"), new Error("second", { cause: postgresError("53100") })], "all failed");
    assert.deepEqual(storageFullOf(aggregate), { storage: "database", code: "53100" });
    const suppressed = Object.assign(new Error("cleanup failed too"), { error: new Error("close failed"), suppressed: errno("EDQUOT") });
    assert.deepEqual(storageFullOf(suppressed), { storage: "data_dir", code: "EDQUOT" });
  });

  it("answers null for other errors, non-errors and cyclic cause chains", () => {
    for (const other of [new Error("boom"), errno("EACCES"), errno("EIO"), null, undefined, "ENOSPC", 28, { code: 28 }]) {
      assert.equal(storageFullOf(other), null, String(other));
    }
    const cyclic = new Error("a");
    const other = new Error("b", { cause: cyclic });
    (cyclic as { cause?: unknown }).cause = other;
    assert.equal(storageFullOf(cyclic), null);
  });

  it("words the answer with the setting to look at and that nothing was stored, never a path", () => {
    assert.equal(
      storageFullMessage("data_dir"),
      "castor's data disk (CASTOR_DATA_DIR) is full: free space or grow the volume; nothing was stored, send the upload again once there is room",
    );
    assert.match(storageFullMessage("database"), /^The disk of castor's PostgreSQL database \(CASTOR_DATABASE_URL\) is full: .*; nothing was stored/);
    assert.match(storageFullMessage("object_store"), /^castor's S3 bucket \(CASTOR_S3_BUCKET\) is full or over its quota: .*; nothing was stored/);
  });
});

describe("StorageFullWatch", () => {
  it("holds a storage-full failure until a write succeeds", () => {
    const watch = new StorageFullWatch();
    assert.equal(watch.current(), null);
    assert.equal(watch.noteFailure(new Error("boom")), null, "other failures are not remembered");
    assert.equal(watch.current(), null);
    assert.deepEqual(watch.noteFailure(errno("ENOSPC")), { storage: "data_dir", code: "ENOSPC" });
    assert.deepEqual(watch.current(), { storage: "data_dir", code: "ENOSPC" });
    watch.noteFailure(new Error("boom"));
    assert.deepEqual(watch.current(), { storage: "data_dir", code: "ENOSPC" }, "another kind of failure does not end it");
    watch.noteSuccess();
    assert.equal(watch.current(), null);
  });

  it("lets a failure expire after the hold time, so a node taken out of its pool can come back", () => {
    let now = 1_000_000;
    const watch = new StorageFullWatch(STORAGE_FULL_HOLD_MS, () => now);
    watch.noteFailure(postgresError("53100"));
    now += STORAGE_FULL_HOLD_MS - 1;
    assert.deepEqual(watch.current(), { storage: "database", code: "53100" });
    watch.noteFailure(postgresError("53100"));
    now += STORAGE_FULL_HOLD_MS - 1;
    assert.deepEqual(watch.current(), { storage: "database", code: "53100" }, "a new failure restarts the hold");
    now += 1;
    assert.equal(watch.current(), null);
  });

  it("tracks a write: rethrows its failure, and counts a success only when it stored something", async () => {
    const watch = new StorageFullWatch();
    const full = errno("ENOSPC");
    await assert.rejects(watch.track(Promise.reject(full)), (error) => error === full);
    assert.deepEqual(watch.current(), { storage: "data_dir", code: "ENOSPC" });
    assert.equal(await watch.track(Promise.resolve("answered from what was stored"), () => false), "answered from what was stored");
    assert.notEqual(watch.current(), null, "a write that stored nothing does not end it");
    assert.equal(await watch.track(Promise.resolve(42)), 42);
    assert.equal(watch.current(), null);
  });
});

describe("free space", () => {
  it("reads the filesystem of a folder", async () => {
    const dir = await mkdtemp(join(tmpdir(), "castor-free-"));
    try {
      const space = await freeSpaceOf(dir);
      assert.ok(Number.isSafeInteger(space.availableBytes) && space.availableBytes >= 0, String(space.availableBytes));
      assert.ok(space.freeInodes === null || space.freeInodes >= 0);
      await assert.rejects(freeSpaceOf(join(dir, "missing")), { code: "ENOENT" });
      // A file works as well as a folder: statfs asks about the filesystem holding it.
      await (await open(join(dir, "f"), "w")).close();
      assert.ok((await freeSpaceOf(join(dir, "f"))).availableBytes >= 0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("calls a disk full at the reserve or below, or without a free inode", () => {
    assert.equal(isDiskFull({ availableBytes: 0, freeInodes: 10 }, 0), true);
    assert.equal(isDiskFull({ availableBytes: 1, freeInodes: 10 }, 0), false);
    assert.equal(isDiskFull({ availableBytes: 1024, freeInodes: null }, 1024), true);
    assert.equal(isDiskFull({ availableBytes: 1025, freeInodes: null }, 1024), false);
    assert.equal(isDiskFull({ availableBytes: 1 << 30, freeInodes: 0 }, 1024), true);
  });
});
