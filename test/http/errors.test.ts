import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance, LightMyRequestResponse } from "fastify";
import { createHttpApp } from "../../src/http/app.js";
import { TransferUrlError } from "../../src/auth/transfer-url.js";
import { ReconstructionError } from "../../src/cas/reconstruction.js";
import { ShardRejectedError } from "../../src/cas/shard-registration.js";
import { XorbRejectedError } from "../../src/cas/xorb-ingest.js";
import { domainErrorAnswer, HttpError } from "../../src/http/errors.js";
import { createLogger } from "../../src/http/logging.js";
import { MetadataUnavailableError } from "../../src/metadata/errors.js";
import { BlobStoreError } from "../../src/storage/blob-store.js";
import { describeS3Error } from "../../src/storage/s3/client.js";

const logLines: Record<string, unknown>[] = [];
let app: FastifyInstance;

before(async () => {
  app = createHttpApp({ logger: createLogger("info", { write: (line: string) => void logLines.push(JSON.parse(line)) }) });
  app.post("/json", { bodyLimit: 64, schema: { body: { type: "object", required: ["name"], properties: { name: { type: "string" } } } } }, async (request) => ({
    got: request.body,
  }));
  app.get(
    "/query",
    {
      schema: {
        querystring: { type: "object", required: ["n"], properties: { n: { type: "integer", minimum: 1 } } },
        headers: { type: "object", properties: { "x-want": { type: "string" } } },
      },
    },
    async (request) => ({ query: request.query }),
  );
  app.get("/teapot", async () => {
    throw new HttpError(418, "This endpoint brews tea only: ask for tea", { "x-extra": "1" });
  });
  app.get("/inconsistent", async () => {
    throw new ReconstructionError("inconsistent_records", "term 3 of file … references xorb …, which has no stored record");
  });
  app.get("/boom", async () => {
    throw new Error("database password is hunter2");
  });
  app.post("/full", async () => {
    // As a backend rethrows it: its own message, the filesystem's error as the cause.
    const enospc = Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC", errno: -28, syscall: "write" });
    throw new Error("staging the upload at /srv/castor/blobs/tmp/x.part failed", { cause: enospc });
  });
  app.get("/database-down", async () => {
    // As the PostgreSQL store throws it (src/metadata/postgres/connection.ts).
    throw new MetadataUnavailableError("the PostgreSQL database 10.1.2.3:5432/castor is unavailable: connect ECONNREFUSED 10.1.2.3:5432");
  });
  app.get("/object-store-down", async () => {
    // As the S3 store throws it once its retries are spent (src/storage/s3/client.ts).
    const refused = Object.assign(new Error("connect ECONNREFUSED 10.1.2.4:7480"), { code: "ECONNREFUSED" });
    throw describeS3Error("GetObject", "castor/xorbs/00ff", refused);
  });
  await app.ready();
});

after(async () => {
  await app.close();
});

function assertJsonError(response: LightMyRequestResponse, status: number, pattern: RegExp): string {
  assert.equal(response.statusCode, status, response.body);
  assert.match(response.headers["content-type"] as string, /^application\/json/);
  const body = response.json();
  assert.deepEqual(Object.keys(body), ["error"], response.body);
  assert.match(body.error, pattern);
  assert.ok(response.headers["x-request-id"]);
  return body.error;
}

describe("error answers", () => {
  it("404s an unknown route as JSON, without echoing the query", async () => {
    const error = assertJsonError(
      await app.inject({ method: "GET", url: "/no/such/thing?signature=SECRET" }),
      404,
      /^No endpoint answers GET \/no\/such\/thing: check the method and the path/,
    );
    assert.doesNotMatch(error, /SECRET/);
    assertJsonError(await app.inject({ method: "DELETE", url: "/json" }), 404, /DELETE \/json/);
  });

  it("400s malformed JSON and an empty JSON body", async () => {
    assertJsonError(
      await app.inject({ method: "POST", url: "/json", headers: { "content-type": "application/json" }, payload: "{not json" }),
      400,
      /^The body is not valid JSON .*: fix the JSON document/,
    );
    assertJsonError(
      await app.inject({ method: "POST", url: "/json", headers: { "content-type": "application/json" }, payload: "" }),
      400,
      /^The body is empty but Content-Type says application\/json/,
    );
  });

  it("400s a body or query that fails its schema, naming the field", async () => {
    assertJsonError(
      await app.inject({ method: "POST", url: "/json", payload: { other: 1 } }),
      400,
      /^Invalid request: body must have required property 'name'/,
    );
    assertJsonError(await app.inject({ method: "GET", url: "/query?n=0" }), 400, /^Invalid request: querystring\/n must be >= 1/);
  });

  it("ignores unknown query parameters and headers", async () => {
    const response = await app.inject({
      method: "GET",
      url: "/query?n=3&create_pr=1&whatever=x",
      headers: { "x-xet-session-id": "abc", "user-agent": "hf_xet/1.6.0", "x-want": "yes" },
    });
    assert.equal(response.statusCode, 200, response.body);
    assert.equal(response.json().query.n, 3);
  });

  it("413s a body over the route's limit, naming the limit", async () => {
    assertJsonError(
      await app.inject({ method: "POST", url: "/json", payload: { name: "x".repeat(100) } }),
      413,
      /larger than the 64-byte limit of POST \/json/,
    );
  });

  it("415s an unsupported content type", async () => {
    assertJsonError(
      await app.inject({ method: "POST", url: "/json", headers: { "content-type": "text/csv" }, payload: "a,b" }),
      415,
      /^POST \/json does not accept a body of Content-Type "text\/csv"/,
    );
  });

  it("400s a path that is not validly percent-encoded", async () => {
    assertJsonError(await app.inject({ method: "GET", url: "/query/%zz" }), 400, /not validly percent-encoded/);
  });

  it("sends an HttpError's status, message and headers", async () => {
    const response = await app.inject({ method: "GET", url: "/teapot" });
    assertJsonError(response, 418, /^This endpoint brews tea only/);
    assert.equal(response.headers["x-extra"], "1");
  });

  it("500s an unexpected error without leaking it, and logs it under the request id", async () => {
    logLines.length = 0;
    const response = await app.inject({ method: "GET", url: "/boom" });
    const error = assertJsonError(response, 500, /^Internal server error \(request id ([^)]+)\): this is a bug in castor; the server log has the details$/);
    assert.doesNotMatch(response.body, /hunter2|at |Error:/);
    assert.ok(error.includes(response.headers["x-request-id"] as string));
    const logged = logLines.find((line) => line.level === 50 && line.reqId === response.headers["x-request-id"]);
    assert.ok(logged, "the error is logged");
    assert.match(JSON.stringify(logged), /hunter2/, "the log keeps the real cause for the operator");
  });

  it("507s a full disk, however wrapped, naming the cause, and logs it at error level without calling it a bug", async () => {
    logLines.length = 0;
    const response = await app.inject({ method: "POST", url: "/full" });
    const error = assertJsonError(response, 507, /^castor's data disk \(CASTOR_DATA_DIR\) is full: free space or grow the volume; nothing was stored/);
    assert.doesNotMatch(error, /bug|\/srv\/castor/);
    const logged = logLines.filter((line) => line.level === 50 && line.reqId === response.headers["x-request-id"]);
    assert.equal(logged.length, 1, "logged once");
    assert.match(String(logged[0].msg), /^storage full \(data_dir, ENOSPC\)/);
    assert.doesNotMatch(String(logged[0].msg), /internal error|bug/);
  });

  it("503s a store that cannot be reached, with Retry-After, naming the store but not its address, logged without calling it a bug", async () => {
    for (const [url, store] of [
      ["/database-down", "metadata database"],
      ["/object-store-down", "object store"],
    ]) {
      logLines.length = 0;
      const response = await app.inject({ method: "GET", url });
      const error = assertJsonError(
        response,
        503,
        new RegExp(`^castor's ${store} is unavailable \\(restarting or unreachable\\): send the request again in a few seconds`),
      );
      assert.equal(response.headers["retry-after"], "2");
      assert.doesNotMatch(error, /10\.1\.2|ECONNREFUSED|xorbs|bug/);
      const logged = logLines.filter((line) => line.level === 50 && line.reqId === response.headers["x-request-id"]);
      assert.equal(logged.length, 1, "logged once, at error level");
      assert.equal(logged[0].msg, `${store} unavailable: request refused with 503`);
      assert.match(JSON.stringify(logged[0]), /10\.1\.2\.\d:\d+/, "the log names the address for the operator");
    }
  });

  it("answers a domain error by its code, and a domain error that means damaged records as an internal 500", async () => {
    const response = await app.inject({ method: "GET", url: "/inconsistent" });
    assertJsonError(response, 500, /^Internal server error \(request id [^)]+\): this is a bug in castor/);
    assert.doesNotMatch(response.body, /term 3/);
  });

  it("reuses a plain incoming request id and replaces an odd one", async () => {
    const reused = await app.inject({ method: "GET", url: "/nothing", headers: { "x-request-id": "lb-1234.abc" } });
    assert.equal(reused.headers["x-request-id"], "lb-1234.abc");
    const replaced = await app.inject({ method: "GET", url: "/nothing", headers: { "x-request-id": "two words\u0001" } });
    assert.match(replaced.headers["x-request-id"] as string, /^[0-9a-f-]{36}$/);
  });
});

describe("domain errors → HTTP answers (the one map)", () => {
  const statusOf = (error: unknown) => domainErrorAnswer(error)?.statusCode ?? null;

  it("refused uploads: every xorb rejection 400, a shard rejection 400 or 413 for its size", () => {
    assert.deepEqual(domainErrorAnswer(new XorbRejectedError("hash_mismatch", "the body hashes to …")), {
      statusCode: 400,
      message: "Xorb rejected: the body hashes to …",
    });
    assert.deepEqual(domainErrorAnswer(new ShardRejectedError("missing_xorb", "term 0 …")), { statusCode: 400, message: "Shard rejected: term 0 …" });
    assert.equal(statusOf(new ShardRejectedError("shard_too_large", "…")), 413);
    assert.equal(statusOf(new ShardRejectedError("too_many_chunk_references", "…")), 413);
    assert.equal(statusOf(new ShardRejectedError("chunk_references_exceed_file_size", "…")), 400);
  });

  it("reconstructions: 400 malformed range, 404 no such file, 416 naming the size when known, internal for damaged records", () => {
    assert.equal(statusOf(new ReconstructionError("malformed_range", "…")), 400);
    assert.equal(statusOf(new ReconstructionError("file_not_found", "…")), 404);
    assert.deepEqual(domainErrorAnswer(new ReconstructionError("unsatisfiable_range", "past the end", 3565)), {
      statusCode: 416,
      message: "past the end",
      headers: { "content-range": "bytes */3565" },
    });
    assert.deepEqual(domainErrorAnswer(new ReconstructionError("unsatisfiable_range", "start after end")), { statusCode: 416, message: "start after end" });
    assert.equal(domainErrorAnswer(new ReconstructionError("inconsistent_records", "…")), null);
  });

  it("stored objects and transfer URLs: 404, 416 with the object's size, 403; store misuse is internal", () => {
    assert.equal(statusOf(new BlobStoreError("not_found", "…")), 404);
    assert.deepEqual(domainErrorAnswer(new BlobStoreError("range_not_satisfiable", "…", { objectSize: 10 }))?.headers, { "content-range": "bytes */10" });
    for (const code of ["invalid_key", "bad_range", "invalid_state"] as const) assert.equal(domainErrorAnswer(new BlobStoreError(code, "…")), null);
    assert.deepEqual(domainErrorAnswer(new BlobStoreError("unavailable", "the object store is unavailable: S3 PutObject of … failed")), {
      statusCode: 503,
      message:
        "castor's object store is unavailable (restarting or unreachable): send the request again in a few seconds, and tell the server's operator if this lasts",
      headers: { "retry-after": "2" },
    });
    assert.equal(statusOf(new TransferUrlError("expired", "…")), 403);
    assert.equal(domainErrorAnswer(new Error("…")), null);
  });

  it("the metadata database unavailable: 503 with Retry-After, whatever the driver said", () => {
    assert.deepEqual(domainErrorAnswer(new MetadataUnavailableError("the PostgreSQL database … is unavailable: Connection terminated unexpectedly")), {
      statusCode: 503,
      message:
        "castor's metadata database is unavailable (restarting or unreachable): send the request again in a few seconds, and tell the server's operator if this lasts",
      headers: { "retry-after": "2" },
    });
  });
});
