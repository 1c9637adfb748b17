import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { CasTokenVerifier } from "../../src/auth/cas-token.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { CompressionScheme } from "../../src/format/compression.js";
import { hashFromHex, hashToHex } from "../../src/format/hash.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { createHttpApp } from "../../src/http/app.js";
import { casScope } from "../../src/http/cas-scope.js";
import { createLogger } from "../../src/http/logging.js";
import { xorbRoutes } from "../../src/http/xorb-routes.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { blobKey } from "../../src/storage/blob-store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { casTokenSignedWith } from "../helpers/fixtures.js";
import { fromHex, loadVector, makeData, splitmix64Bytes } from "../helpers/vectors.js";
import { settlesWithin, until } from "../helpers/wait.js";

const MAX_XORB_BYTES = 100_000;
const vector = loadVector("xorb-small.json");
const VECTOR_HEX: string = vector.expected.xorb_hash;
const VECTOR_BODY = fromHex(vector.body_hex);
const VECTOR_WITH_FOOTER = fromHex(vector.with_footer_hex);

const { privateKey, publicKey } = generateKeyPairSync("ed25519");

let dir: string;
let blobs: FsBlobStore;
let metadata: SqliteMetadataStore;
let app: FastifyInstance;
let port: number;
let writeToken: string;
let readToken: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "castor-xorb-routes-"));
  blobs = await FsBlobStore.open(join(dir, "blobs"));
  metadata = await SqliteMetadataStore.open(dir);
  app = createHttpApp({ logger: createLogger("silent") });
  await app.register(casScope, {
    verifier: new CasTokenVerifier(publicKey),
    routes: (cas) => cas.register(xorbRoutes, { xorbs: new XorbIngestService({ blobs, metadata, maxBodyBytes: MAX_XORB_BYTES }) }),
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  port = (app.server.address() as { port: number }).port;
  writeToken = await casTokenSignedWith(privateKey, "write");
  readToken = await casTokenSignedWith(privateKey, "read");
});

after(async () => {
  // A failed test may leave its raw connection open; close would wait for it.
  for (const connection of openConnections) connection.socket.destroy();
  await app.close();
  await metadata.close();
  await rm(dir, { recursive: true, force: true });
});

const openConnections: RawConnection[] = [];

let seed = 100n;
/** A fresh xorb (never uploaded before) of about 90 KB, mostly incompressible. */
function largeXorb(): SerializedXorb {
  seed++;
  return serializeXorb([0n, 1n, 2n].map((i) => ({ data: splitmix64Bytes(seed * 8n + i, 30_000), scheme: CompressionScheme.None })));
}

/** A fresh xorb (never uploaded before) of about 30 KB. */
function freshXorb(options: { footer?: boolean } = {}): SerializedXorb {
  seed++;
  return serializeXorb(
    [
      { data: splitmix64Bytes(seed, 30_000), scheme: CompressionScheme.None },
      { data: makeData(40_000, 5, Number(seed % 250n)), scheme: CompressionScheme.LZ4 },
    ],
    options,
  );
}

function upload(hash: string, body: Uint8Array, headers: Record<string, string> = {}, path = `/v1/xorbs/default/${hash}`) {
  return app.inject({
    method: "POST",
    url: path,
    payload: Buffer.from(body),
    headers: { authorization: `Bearer ${writeToken}`, ...headers },
  });
}

type Answer = Awaited<ReturnType<typeof upload>>;

function assertError(response: Answer, status: number, pattern: RegExp, context = ""): void {
  assert.equal(response.statusCode, status, `${context} ${response.body}`);
  assert.match(String(response.headers["content-type"]), /^application\/json/);
  const body = response.json();
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.match(body.error, pattern, context);
}

async function assertNothingStored(hex: string): Promise<void> {
  assert.equal(await blobs.exists(blobKey("xorbs", hashFromHex(hex))), false, "no blob");
  assert.equal(await metadata.getXorbSize(hashFromHex(hex)), null, "no metadata row");
  assert.deepEqual(await readdir(join(blobs.root, "tmp")), [], "no temp file");
}

describe("POST /v1/xorbs/default/{hash}", () => {
  it('stores a new xorb and answers exactly {"was_inserted":true}, then false for the same xorb', async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    const first = await upload(hex, xorb.bytes);
    assert.equal(first.statusCode, 200, first.body);
    assert.match(String(first.headers["content-type"]), /^application\/json/);
    assert.equal(first.body, '{"was_inserted":true}');
    assert.equal(await blobs.size(blobKey("xorbs", xorb.info.hash)), xorb.bytes.length);

    const second = await upload(hex, xorb.bytes);
    assert.equal(second.statusCode, 200);
    assert.equal(second.body, '{"was_inserted":false}');
  });

  it("accepts the body whatever its Content-Type, or none", async () => {
    for (const contentType of [undefined, "application/octet-stream", "application/json", "text/plain", "x-anything/at-all"]) {
      const xorb = freshXorb();
      const response = await upload(hashToHex(xorb.info.hash), xorb.bytes, contentType === undefined ? {} : { "content-type": contentType });
      assert.equal(response.statusCode, 200, `${contentType}: ${response.body}`);
      assert.deepEqual(response.json(), { was_inserted: true });
    }
  });

  it("serves the legacy unversioned path /xorbs/default/{hash}", async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    const response = await upload(hex, xorb.bytes, {}, `/xorbs/default/${hex}`);
    assert.equal(response.statusCode, 200, response.body);
    assert.deepEqual(response.json(), { was_inserted: true });
  });

  it("stores the vector xorb sent with its footer as the chunk stream alone", async () => {
    const response = await upload(VECTOR_HEX, VECTOR_WITH_FOOTER);
    assert.equal(response.statusCode, 200, response.body);
    assert.equal(await blobs.size(blobKey("xorbs", hashFromHex(VECTOR_HEX))), VECTOR_BODY.length);
    const head = await app.inject({ method: "HEAD", url: `/v1/xorbs/default/${VECTOR_HEX}`, headers: { authorization: `Bearer ${readToken}` } });
    assert.equal(head.headers["content-length"], String(vector.expected.body_length));
  });

  it("refuses another prefix and a malformed hash with 400, before reading the body", async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    assertError(await upload(hex, xorb.bytes, {}, `/v1/xorbs/default-merkledb/${hex}`), 400, /Unknown xorb prefix "default-merkledb".*"default"/);
    assertError(await upload(hex, xorb.bytes, {}, `/v1/xorbs/default/${hex.toUpperCase()}`), 400, /Malformed xorb hash.*64 lowercase hexadecimal/);
    assertError(await upload(hex, xorb.bytes, {}, `/v1/xorbs/default/${hex.slice(1)}`), 400, /Malformed xorb hash/);
    await assertNothingStored(hex);
  });

  it("answers 400 with the validator's message for every malformed body, storing nothing", async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    const cases: [string, Uint8Array, RegExp][] = [
      ["hash mismatch", freshXorb().bytes, new RegExp(`xorb hash of the uploaded chunks is [0-9a-f]{64}, but the upload names ${hex}`)],
      ["truncated", xorb.bytes.subarray(0, xorb.bytes.length - 1), /truncated/],
      ["bad header", Uint8Array.of(7, ...xorb.bytes.subarray(1)), /header version is 7/],
      ["empty", new Uint8Array(0), /no chunks/],
      ["junk trailer", new Uint8Array([...xorb.bytes, 0x58, 0x45, 0x54, 0x42, 0x4c, 0x4f, 0x42, 1, 2, 3]), /footer/],
    ];
    for (const [what, body, pattern] of cases) {
      assertError(await upload(hex, body), 400, new RegExp(`^Xorb rejected: .*${pattern.source}`), what);
      await assertNothingStored(hex);
    }
  });

  it("refuses a Content-Length above the cap with 413", async () => {
    const xorb = freshXorb();
    const big = new Uint8Array(MAX_XORB_BYTES + 1);
    big.set(xorb.bytes);
    assertError(await upload(hashToHex(xorb.info.hash), big), 413, new RegExp(`Content-Length ${MAX_XORB_BYTES + 1}.* ${MAX_XORB_BYTES}-byte limit`));
    await assertNothingStored(hashToHex(xorb.info.hash));
  });

  it("needs a write token: read → 403, expired → 401, missing → 401", async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    assertError(await upload(hex, xorb.bytes, { authorization: `Bearer ${readToken}` }), 403, /needs a write token/);
    const expired = await casTokenSignedWith(privateKey, "write", { ttlSeconds: 60, now: () => new Date(Date.now() - 3_600_000) });
    assertError(await upload(hex, xorb.bytes, { authorization: `Bearer ${expired}` }), 401, /expired/);
    const missing = await app.inject({ method: "POST", url: `/v1/xorbs/default/${hex}`, payload: Buffer.from(xorb.bytes) });
    assertError(missing, 401, /Missing access token/);
    await assertNothingStored(hex);
  });
});

describe("HEAD /v1/xorbs/default/{hash}", () => {
  it("answers 200 with the stored size, 404 when absent, 400 for a bad hash", async () => {
    const xorb = freshXorb({ footer: true });
    const hex = hashToHex(xorb.info.hash);
    const head = (h: string, token = readToken) => app.inject({ method: "HEAD", url: `/v1/xorbs/default/${h}`, headers: { authorization: `Bearer ${token}` } });

    const absent = await head(hex);
    assert.equal(absent.statusCode, 404);
    assert.equal(absent.body, "");

    assert.equal((await upload(hex, xorb.bytes)).statusCode, 200);
    const present = await head(hex);
    assert.equal(present.statusCode, 200);
    assert.equal(present.headers["content-length"], String(xorb.info.serializedLength), "the stored size: chunks without the footer");
    assert.equal(present.body, "");
    assert.equal((await head(hex, writeToken)).statusCode, 200, "write includes read");
    assert.equal((await app.inject({ method: "HEAD", url: `/xorbs/default/${hex}`, headers: { authorization: `Bearer ${readToken}` } })).statusCode, 200);

    assert.equal((await head("zz")).statusCode, 400);
    assert.equal((await app.inject({ method: "HEAD", url: `/v1/xorbs/default/${hex}` })).statusCode, 401);
  });
});

describe("POST /v1/telemetry", () => {
  it("reads and drops the body with a read token", async () => {
    const response = await app.inject({
      method: "POST",
      url: "/v1/telemetry",
      payload: { event: "upload", bytes: 123 },
      headers: { authorization: `Bearer ${readToken}` },
    });
    assert.equal(response.statusCode, 200, response.body);
    assert.equal((await app.inject({ method: "POST", url: "/v1/telemetry", payload: "x" })).statusCode, 401);
  });
});

// ---------------------------------------------------------------------------------------------
// On a real socket: what a client sees while its body is still being sent.

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Reads HTTP responses off a socket one at a time; tracks whether the server closed it. */
class RawConnection {
  private buffer = Buffer.alloc(0);
  private waiter: (() => void) | null = null;
  closed = false;

  private constructor(readonly socket: Socket) {
    socket.on("data", (data: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, data]);
      this.waiter?.();
    });
    socket.on("close", () => {
      this.closed = true;
      this.waiter?.();
    });
    socket.on("error", () => undefined);
  }

  static open(): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, "127.0.0.1", () => {
        const connection = new RawConnection(socket);
        openConnections.push(connection);
        resolve(connection);
      });
      socket.once("error", reject);
    });
  }

  async response(timeoutMs = 5000): Promise<RawResponse> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const end = this.buffer.indexOf("\r\n\r\n");
      if (end !== -1) {
        const [statusLine, ...lines] = this.buffer.subarray(0, end).toString("latin1").split("\r\n");
        const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]));
        const length = Number(headers["content-length"] ?? 0);
        if (this.buffer.length >= end + 4 + length) {
          const body = this.buffer.subarray(end + 4, end + 4 + length).toString("utf8");
          this.buffer = this.buffer.subarray(end + 4 + length);
          return { status: Number(statusLine.split(" ")[1]), headers, body };
        }
      }
      if (this.closed) throw new Error(`connection closed before a complete response: ${this.buffer.toString("latin1")}`);
      if (Date.now() > deadline) throw new Error("no response in time");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        this.waiter = () => {
          clearTimeout(timer);
          this.waiter = null;
          resolve();
        };
      });
    }
  }

  write(data: string | Uint8Array): Promise<void> {
    return new Promise((resolve, reject) => this.socket.write(data, (error) => (error ? reject(error) : resolve())));
  }

  /** Whether the server closes the connection within `timeoutMs`. */
  async waitClosed(timeoutMs = 3000): Promise<boolean> {
    return this.closed || (await settlesWithin(once(this.socket, "close"), timeoutMs));
  }
}

function requestHead(path: string, headers: Record<string, string | number>): string {
  const lines = [`POST ${path} HTTP/1.1`, "Host: castor", `Authorization: Bearer ${writeToken}`];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  return `${lines.join("\r\n")}\r\n\r\n`;
}

describe("raw bodies on the wire", () => {
  it("accepts an upload with no Content-Type header at all, and keeps the connection", async () => {
    const connection = await RawConnection.open();
    for (let i = 0; i < 2; i++) {
      const xorb = freshXorb();
      await connection.write(requestHead(`/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { "Content-Length": xorb.bytes.length }));
      await connection.write(xorb.bytes);
      const response = await connection.response();
      assert.equal(response.status, 200, response.body);
      assert.equal(response.body, '{"was_inserted":true}');
    }
    connection.socket.destroy();
  });

  it("answers 413 to a Content-Length above the cap without reading a body byte, and closes", async () => {
    const connection = await RawConnection.open();
    await connection.write(requestHead(`/v1/xorbs/default/${VECTOR_HEX}`, { "Content-Length": 10 * MAX_XORB_BYTES }));
    const response = await connection.response();
    assert.equal(response.status, 413);
    assert.match(JSON.parse(response.body).error, /exceeds the 100000-byte limit/);
    assert.equal(response.headers.connection, "close");
    assert.ok(await connection.waitClosed());
  });

  it("answers 413 as soon as a chunked body crosses the cap, while the client is still sending", async () => {
    // A well-formed stream of raw chunks, so only the cap can stop it.
    const xorbs = [largeXorb(), largeXorb()];
    const hex = hashToHex(xorbs[0].info.hash);
    const stream = new Uint8Array([...xorbs[0].bytes, ...xorbs[1].bytes]);
    const connection = await RawConnection.open();
    await connection.write(requestHead(`/v1/xorbs/default/${hex}`, { "Transfer-Encoding": "chunked" }));
    const pieceBytes = 20_000;
    for (let sent = 0; sent <= MAX_XORB_BYTES; sent += pieceBytes) {
      await connection.write(`${pieceBytes.toString(16)}\r\n`);
      await connection.write(stream.subarray(sent, sent + pieceBytes));
      await connection.write("\r\n");
    }
    // The terminating chunk is never sent: the answer must not wait for it.
    const response = await connection.response();
    assert.equal(response.status, 413);
    assert.match(JSON.parse(response.body).error, /exceeds the 100000-byte limit of POST \/v1\/xorbs\/default\//);
    connection.socket.destroy();
    await assertNothingStored(hex);
  });

  it("answers a malformed body at once, then drops the rest so the same connection serves the next request", async () => {
    const connection = await RawConnection.open();
    const hex = hashToHex(freshXorb().info.hash);
    const badBody = new Uint8Array(60_000);
    badBody[0] = 9; // not a chunk header version
    await connection.write(requestHead(`/v1/xorbs/default/${hex}`, { "Content-Length": badBody.length }));
    await connection.write(badBody.subarray(0, 1000));
    const refused = await connection.response();
    assert.equal(refused.status, 400);
    assert.match(JSON.parse(refused.body).error, /header version is 9/);
    assert.notEqual(refused.headers.connection, "close");

    await connection.write(badBody.subarray(1000));
    const xorb = freshXorb();
    await connection.write(requestHead(`/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { "Content-Length": xorb.bytes.length }));
    await connection.write(xorb.bytes);
    const next = await connection.response();
    assert.equal(next.status, 200, next.body);
    assert.equal(connection.closed, false);
    connection.socket.destroy();
    await assertNothingStored(hex);
  });

  it("drains the body of an already stored xorb and keeps the connection", async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    assert.equal((await upload(hex, xorb.bytes)).statusCode, 200);
    const connection = await RawConnection.open();
    for (let i = 0; i < 2; i++) {
      await connection.write(requestHead(`/v1/xorbs/default/${hex}`, { "Content-Length": xorb.bytes.length }));
      await connection.write(xorb.bytes);
      const response = await connection.response();
      assert.equal(response.body, '{"was_inserted":false}');
    }
    assert.equal(connection.closed, false);
    connection.socket.destroy();
  });

  it("leaves no temp file when the client disconnects mid-body", async () => {
    const xorb = largeXorb();
    const hex = hashToHex(xorb.info.hash);
    const connection = await RawConnection.open();
    await connection.write(requestHead(`/v1/xorbs/default/${hex}`, { "Content-Length": xorb.bytes.length }));
    await connection.write(xorb.bytes.subarray(0, 40_000));
    // Wait until the server is demonstrably staging the upload, then vanish.
    const staged = () => readdir(join(blobs.root, "tmp"));
    await until(async () => (await staged()).length > 0, "the server to stage the upload", 3000);
    assert.equal((await staged()).length, 1, "the upload is being staged");
    connection.socket.destroy();
    await until(async () => (await staged()).length === 0, "the temp file to be removed", 3000);
    await assertNothingStored(hex);
  });
});
