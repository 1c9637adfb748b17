/**
 * How the S3 store words a failed request (describeS3Error): a transient failure that outlasted
 * the retries — the store restarting, overloaded, the connection refused or cut — becomes
 * BlobStoreError `unavailable` (castor answers 503 and the client retries); any other failure
 * stays a plain error naming the operation and key (a 500 unless recognised otherwise, e.g. a
 * full store's 507). No store is needed; test/scaleout/faults.test.ts restarts a real one.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { S3ServiceException } from "@aws-sdk/client-s3";
import { BlobStoreError, isBlobStoreError } from "../../src/storage/blob-store.js";
import { describeS3Error } from "../../src/storage/s3/client.js";

function s3Error(name: string, httpStatusCode: number): S3ServiceException {
  return new S3ServiceException({ name, $fault: httpStatusCode >= 500 ? "server" : "client", $metadata: { httpStatusCode }, message: `${name} (simulated)` });
}

function socketError(code: string): Error {
  return Object.assign(new Error(`connect ${code} 127.0.0.1:7480`), { code, syscall: "connect" });
}

describe("describeS3Error", () => {
  it("an S3 store that is down, restarting or overloaded: `unavailable`, keeping the operation, key and cause for the log", () => {
    for (const error of [
      s3Error("ServiceUnavailable", 503),
      s3Error("SlowDown", 503),
      s3Error("InternalError", 500),
      s3Error("BadGateway", 502),
      s3Error("GatewayTimeout", 504),
      socketError("ECONNREFUSED"),
      socketError("ECONNRESET"),
      socketError("ETIMEDOUT"),
      Object.assign(new Error("aborted"), { code: "ECONNRESET" }),
    ]) {
      const described = describeS3Error("GetObject", "castor/xorbs/00ff", error);
      assert.ok(isBlobStoreError(described, "unavailable"), `${error.name} ${error.message}`);
      assert.match(described.message, /^the object store is unavailable: S3 GetObject of castor\/xorbs\/00ff failed/);
      assert.equal(described.cause, error);
    }
  });

  it("any other failure: a plain error naming the operation, key and status", () => {
    for (const [error, status] of [
      [s3Error("AccessDenied", 403), " (HTTP 403)"],
      [s3Error("QuotaExceeded", 403), " (HTTP 403)"],
      [s3Error("InsufficientCapacity", 507), " (HTTP 507)"],
      [new TypeError("bad argument"), ""],
    ] as const) {
      const described = describeS3Error("PutObject", "castor/xorbs/00ff", error);
      assert.ok(!(described instanceof BlobStoreError), `${error.name}`);
      assert.ok(described.message.startsWith(`S3 PutObject of castor/xorbs/00ff failed${status}: `), described.message);
      assert.equal(described.cause, error);
    }
  });

  it("passes the store's own errors through unchanged", () => {
    const notFound = new BlobStoreError("not_found", "xorbs/00ff is not stored");
    assert.equal(describeS3Error("GetObject", "castor/xorbs/00ff", notFound), notFound);
  });
});
