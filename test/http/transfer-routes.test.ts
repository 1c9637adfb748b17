import assert from "node:assert/strict";
import { createHash, generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { CasTokenVerifier } from "../../src/auth/cas-token.js";
import { HmacTransferUrls } from "../../src/auth/transfer-url.js";
import { byteRange, type ByteRange } from "../../src/format/ranges.js";
import { hashFromHex, type Hash } from "../../src/format/hash.js";
import { createHttpApp } from "../../src/http/app.js";
import { registerCasAuth } from "../../src/http/cas-auth.js";
import { createLogger } from "../../src/http/logging.js";
import { multipartByteRanges } from "../../src/http/multipart.js";
import { transferRoutes } from "../../src/http/transfer-routes.js";
import { blobKey, type BlobKey, type BlobStore, type ByteSpan } from "../../src/storage/blob-store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { loadVector } from "../helpers/vectors.js";
import { within } from "../helpers/wait.js";

const PUBLIC_URL = "https://cas.example.com";
const KEY = randomBytes(32);
const XORB = hashFromHex("ab".repeat(32));
const MISSING_XORB = hashFromHex("cd".repeat(32));
const XORB_BYTES = randomBytes(300_000);
const RANGES: ByteRange[] = [byteRange(0, 99), byteRange(1000, 65_535), byteRange(200_000, 299_999)];

/** A BlobStore that counts bytes handed out and read streams still open (fd not yet closed). */
class CountingBlobStore implements BlobStore {
  bytesRead = 0;
  openStreams = 0;
  readsStarted = 0;
  private allClosedWaiters: (() => void)[] = [];

  constructor(private readonly inner: BlobStore) {}

  /** Resolves once no read stream is open (at once if none is). */
  allClosed(): Promise<void> {
    return this.openStreams === 0 ? Promise.resolve() : new Promise((resolve) => this.allClosedWaiters.push(resolve));
  }

  async read(key: BlobKey, span?: ByteSpan): Promise<Readable> {
    const source = await this.inner.read(key, span);
    this.readsStarted++;
    this.openStreams++;
    source.once("close", () => {
      if (--this.openStreams === 0) for (const resolve of this.allClosedWaiters.splice(0)) resolve();
    });
    const counter = new Transform({
      transform: (chunk: Buffer, _encoding, done) => {
        this.bytesRead += chunk.length;
        done(null, chunk);
      },
    });
    // pipeline destroys the file stream when the consumer destroys the counter.
    pipeline(source, counter).catch(() => undefined);
    return counter;
  }

  putIfAbsent = (...args: Parameters<BlobStore["putIfAbsent"]>) => this.inner.putIfAbsent(...args);
  putFileIfAbsent = (...args: Parameters<BlobStore["putFileIfAbsent"]>) => this.inner.putFileIfAbsent(...args);
  beginPut = (...args: Parameters<BlobStore["beginPut"]>) => this.inner.beginPut(...args);
  size = (...args: Parameters<BlobStore["size"]>) => this.inner.size(...args);
  exists = (...args: Parameters<BlobStore["exists"]>) => this.inner.exists(...args);
  delete = (...args: Parameters<BlobStore["delete"]>) => this.inner.delete(...args);
  list = (...args: Parameters<BlobStore["list"]>) => this.inner.list(...args);
  sweepTemp = (...args: Parameters<BlobStore["sweepTemp"]>) => this.inner.sweepTemp(...args);
}

let dir: string;
let blobs: CountingBlobStore;
let app: FastifyInstance;
const clock = { now: Date.now() };
const urls = new HmacTransferUrls({ key: KEY, publicUrl: PUBLIC_URL, ttlSeconds: 60, now: () => clock.now });
const logLines: string[] = [];

function target(hash: Hash, ranges: readonly ByteRange[]): string {
  return urls.sign(hash, ranges).slice(PUBLIC_URL.length);
}

function rangeHeader(ranges: readonly ByteRange[]): string {
  return `bytes=${ranges.map((r) => `${r.start}-${r.end}`).join(",")}`;
}

function get(url: string, headers: Record<string, string> = {}, method: "GET" | "HEAD" = "GET") {
  return app.inject({ method, url, headers });
}

interface ParsedPart {
  headers: Record<string, string>;
  body: Buffer;
}

/** A strict parser of the exact layout castor promises (not a tolerant one): any deviation fails. */
function parseMultipart(body: Buffer, contentType: string): ParsedPart[] {
  const match = /^multipart\/byteranges; boundary=([0-9A-Za-z'()+_,\-./:=?]{1,70})$/.exec(contentType);
  assert.ok(match, `content type ${contentType}`);
  const boundary = match[1];
  const parts: ParsedPart[] = [];
  let at = 0;
  for (;;) {
    const delimiter = `--${boundary}`;
    assert.equal(body.toString("latin1", at, at + delimiter.length), delimiter, `delimiter at ${at}`);
    at += delimiter.length;
    if (body.toString("latin1", at, at + 4) === "--\r\n") {
      assert.equal(at + 4, body.length, "nothing may follow the closing delimiter");
      return parts;
    }
    assert.equal(body.toString("latin1", at, at + 2), "\r\n");
    at += 2;
    const headerEnd = body.indexOf("\r\n\r\n", at, "latin1");
    assert.ok(headerEnd > 0);
    const headers: Record<string, string> = {};
    for (const line of body.toString("latin1", at, headerEnd).split("\r\n")) {
      const colon = line.indexOf(": ");
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 2);
    }
    at = headerEnd + 4;
    const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(headers["content-range"] ?? "");
    assert.ok(range, `part Content-Range ${headers["content-range"]}`);
    const length = Number(range[2]) - Number(range[1]) + 1;
    parts.push({ headers, body: body.subarray(at, at + length) });
    at += length;
    assert.equal(body.toString("latin1", at, at + 2), "\r\n", "CRLF after the part's bytes");
    at += 2;
  }
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "castor-transfer-routes-"));
  blobs = new CountingBlobStore(await FsBlobStore.open(join(dir, "blobs")));
  await blobs.putIfAbsent(blobKey("xorbs", XORB), XORB_BYTES);
  const logDestination = { write: (line: string) => void logLines.push(line) };
  app = createHttpApp({ logger: createLogger("info", logDestination) });
  registerCasAuth(app, new CasTokenVerifier(generateKeyPairSync("ed25519").publicKey));
  await app.register(transferRoutes, { blobs, transferUrls: urls });
  await app.ready();
});

after(async () => {
  await app.close();
  await rm(dir, { recursive: true, force: true });
});

describe("multipartByteRanges", () => {
  it("writes the layout of the http-formats vector byte for byte", async () => {
    const example = loadVector("http-formats.json").multipart_byteranges_example;
    const object = randomBytes(1000);
    const built = multipartByteRanges({
      ranges: [byteRange(0, 9), byteRange(500, 599)],
      totalSize: 1000,
      boundary: "xet_multipart_boundary",
      openPart: async (range) => Readable.from([object.subarray(range.start, range.end + 1)]),
    });
    assert.equal(built.contentType, example.content_type);
    const [head1, , head2, , closing] = example.body_parts as string[];
    const expected = Buffer.concat([
      Buffer.from(head1, "latin1"),
      object.subarray(0, 10),
      Buffer.from("\r\n"),
      Buffer.from(head2, "latin1"),
      object.subarray(500, 600),
      Buffer.from("\r\n"),
      Buffer.from(closing, "latin1"),
    ]);
    const body = Buffer.concat(await built.body.toArray());
    assert.deepEqual(body, expected);
    assert.equal(built.contentLength, expected.length);
  });

  it("uses a fresh random boundary per body", () => {
    const options = { ranges: [byteRange(0, 0)], totalSize: 1, openPart: async () => Readable.from([Buffer.alloc(1)]) };
    const a = multipartByteRanges(options).contentType;
    const b = multipartByteRanges(options).contentType;
    assert.match(a, /^multipart\/byteranges; boundary=castor-[0-9a-f]{32}$/);
    assert.notEqual(a, b);
  });

  it("opens parts one at a time, only when due", async () => {
    const opened: number[] = [];
    /** Parts opened and not yet fully read. */
    let open = 0;
    let maxOpen = 0;
    const built = multipartByteRanges({
      ranges: [0, 1, 2, 3].map((i) => byteRange(i * 10, i * 10 + 4)),
      totalSize: 40,
      openPart: async (range) => {
        opened.push(range.start);
        maxOpen = Math.max(maxOpen, ++open);
        const source = Readable.from([Buffer.alloc(5, range.start)]);
        source.once("end", () => open--);
        return source;
      },
    });
    assert.deepEqual(opened, [], "nothing opened before the body is read");
    const body = Buffer.concat(await built.body.toArray());
    assert.deepEqual(opened, [0, 10, 20, 30]);
    assert.equal(maxOpen, 1);
    assert.equal(body.length, built.contentLength);
  });

  it("fails the body when a part's source is short, instead of breaking the Content-Length silently", async () => {
    const built = multipartByteRanges({
      ranges: [byteRange(0, 9)],
      totalSize: 10,
      openPart: async () => Readable.from([Buffer.alloc(9)]),
    });
    await assert.rejects(built.body.toArray(), /produced 9 bytes instead of 10/);
  });

  it("fails the body when a part cannot be opened, and destroys the open part when destroyed", async () => {
    const failing = multipartByteRanges({
      ranges: [byteRange(0, 9)],
      totalSize: 10,
      openPart: async () => {
        throw new Error("disk on fire");
      },
    });
    await assert.rejects(failing.body.toArray(), /disk on fire/);

    const source = new PassThrough();
    source.write(Buffer.alloc(5));
    const built = multipartByteRanges({ ranges: [byteRange(0, 1_000_000)], totalSize: 2_000_000, openPart: async () => source });
    built.body.once("data", () => built.body.destroy());
    await new Promise((resolve) => built.body.once("close", resolve));
    assert.ok(source.destroyed, "the part's source was destroyed with the body");
  });

  it("refuses ranges outside the object and bad boundaries", () => {
    const openPart = async () => Readable.from([]);
    assert.throws(() => multipartByteRanges({ ranges: [byteRange(0, 10)], totalSize: 10, openPart }), RangeError);
    assert.throws(() => multipartByteRanges({ ranges: [], totalSize: 10, openPart }), RangeError);
    assert.throws(() => multipartByteRanges({ ranges: [byteRange(0, 1)], totalSize: 10, openPart, boundary: "a b" }), TypeError);
  });
});

describe("GET /v1/transfer/{xorb}", () => {
  it("serves one signed range: 206, exact bytes, Content-Range over the stored size", async () => {
    const url = target(XORB, RANGES);
    for (const range of RANGES) {
      const response = await get(url, { range: rangeHeader([range]) });
      assert.equal(response.statusCode, 206, response.body);
      assert.equal(response.headers["content-type"], "application/octet-stream");
      assert.equal(response.headers["content-range"], `bytes ${range.start}-${range.end}/${XORB_BYTES.length}`);
      assert.equal(response.headers["content-length"], String(range.end - range.start + 1));
      assert.equal(response.headers["content-encoding"], undefined);
      assert.deepEqual(response.rawPayload, XORB_BYTES.subarray(range.start, range.end + 1));
    }
  });

  it("serves the full signed list as multipart/byteranges, part by part", async () => {
    const response = await get(target(XORB, RANGES), { range: rangeHeader(RANGES), "accept-encoding": "gzip, br" });
    assert.equal(response.statusCode, 206, response.body);
    assert.equal(response.headers["content-encoding"], undefined, "never compressed");
    assert.equal(response.headers["content-length"], String(response.rawPayload.length));
    const parts = parseMultipart(response.rawPayload, String(response.headers["content-type"]));
    assert.equal(parts.length, RANGES.length);
    parts.forEach((part, i) => {
      const { start, end } = RANGES[i];
      assert.equal(part.headers["content-type"], "application/octet-stream");
      assert.equal(part.headers["content-range"], `bytes ${start}-${end}/${XORB_BYTES.length}`);
      assert.deepEqual(part.body, XORB_BYTES.subarray(start, end + 1));
    });
  });

  it("ignores an Authorization header (real clients send none; a stray one changes nothing)", async () => {
    const response = await get(target(XORB, RANGES), { range: rangeHeader([RANGES[0]]), authorization: "Bearer not-a-token" });
    assert.equal(response.statusCode, 206, response.body);
  });

  it("answers HEAD with the GET headers and no body", async () => {
    for (const ranges of [[RANGES[1]], RANGES]) {
      const url = target(XORB, RANGES);
      const readsBefore = blobs.readsStarted;
      const head = await get(url, { range: rangeHeader(ranges) }, "HEAD");
      assert.equal(blobs.readsStarted, readsBefore, "HEAD reads no bytes");
      const full = await get(url, { range: rangeHeader(ranges) });
      assert.equal(head.statusCode, 206);
      assert.equal(head.rawPayload.length, 0);
      assert.equal(head.headers["content-length"], full.headers["content-length"]);
      assert.equal(String(head.headers["content-type"]).split(";")[0], String(full.headers["content-type"]).split(";")[0]);
      assert.equal(head.headers["content-range"], full.headers["content-range"]);
    }
  });

  it("answers 403 with a clear JSON error for altered, expired or unsigned requests", async () => {
    const url = target(XORB, RANGES);
    const single = rangeHeader([RANGES[1]]);
    const cases: { url: string; headers: Record<string, string>; message: RegExp }[] = [
      { url: url.replace(/x=(\d)/, (_, d: string) => `x=${(Number(d) + 1) % 10}`), headers: { range: single }, message: /signature does not match/ },
      { url: url.replace("ab", "ac"), headers: { range: single }, message: /signature does not match/ },
      { url: url.slice(0, -1) + (url.endsWith("A") ? "B" : "A"), headers: { range: single }, message: /signature does not match/ },
      { url: url.split("?")[0], headers: { range: single }, message: /not a valid castor transfer URL/ },
      { url, headers: {}, message: /Range header is required/ },
      { url, headers: { range: "bytes=1000-2000" }, message: /not authorised by this URL/ },
      { url, headers: { range: "bytes=0-65535" }, message: /not authorised by this URL/ },
      { url, headers: { range: rangeHeader(RANGES.slice(0, 2)) }, message: /not authorised by this URL/ },
    ];
    for (const { url: requestUrl, headers, message } of cases) {
      const response = await get(requestUrl, headers);
      assert.equal(response.statusCode, 403, `${requestUrl} ${JSON.stringify(headers)}: ${response.body}`);
      assert.match(String(response.headers["content-type"]), /^application\/json/);
      const body = response.json() as { error: string };
      assert.deepEqual(Object.keys(body), ["error"]);
      assert.match(body.error, message);
      assert.ok(!body.error.includes(url.slice(url.indexOf("?") + 1, url.indexOf("&r="))), "the error never echoes the query");
      assert.ok(!body.error.includes(url.slice(url.lastIndexOf("&s=") + 3)), "the error never echoes the signature");
    }

    clock.now += 60_000;
    try {
      const expired = await get(url, { range: single });
      assert.equal(expired.statusCode, 403);
      assert.match((expired.json() as { error: string }).error, /expired at .*reconstruction API/);
    } finally {
      clock.now -= 60_000;
    }
  });

  it("answers 404 for a xorb that is not stored", async () => {
    const response = await get(target(MISSING_XORB, [byteRange(0, 9)]), { range: "bytes=0-9" });
    assert.equal(response.statusCode, 404);
    assert.match((response.json() as { error: string }).error, /is not stored/);
  });

  it("answers 416 with Content-Range bytes */size when a signed range ends beyond the stored object", async () => {
    const beyond = [byteRange(0, 9), byteRange(XORB_BYTES.length - 10, XORB_BYTES.length)];
    const url = target(XORB, beyond);
    for (const ranges of [beyond, [beyond[1]]]) {
      const response = await get(url, { range: rangeHeader(ranges) });
      assert.equal(response.statusCode, 416);
      assert.equal(response.headers["content-range"], `bytes */${XORB_BYTES.length}`);
      assert.match((response.json() as { error: string }).error, /beyond the end of xorb/);
    }
    // The range inside the object is still served.
    assert.equal((await get(url, { range: "bytes=0-9" })).statusCode, 206);
  });

  it("logs one line per request with the path but never the query or the signature", async () => {
    logLines.length = 0;
    const url = target(XORB, RANGES);
    await get(url, { range: rangeHeader(RANGES) });
    await get(url.replace("ab", "ac"), { range: rangeHeader(RANGES) });
    const signature = url.slice(url.lastIndexOf("&s=") + 3);
    const lines = logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === "request");
    assert.equal(lines.length, 2);
    for (const line of lines) assert.equal(line.route, "/v1/transfer/:xorb");
    const text = logLines.join("");
    assert.ok(!text.includes(signature), "signature logged");
    assert.ok(!text.includes("?x="), "query logged");
    assert.ok(!text.includes("r="), "ranges logged");
  });
});

describe("GET /v1/transfer/{xorb} over a socket", () => {
  const BIG_XORB = hashFromHex("ef".repeat(32));
  const MiB = 1024 * 1024;
  let bigBytes: Buffer;
  let port: number;
  /** Six 10 MiB ranges with gaps: 60 MiB of a 64 MiB blob. */
  const BIG_RANGES: ByteRange[] = Array.from({ length: 6 }, (_, i) => byteRange(i * 10 * MiB + 512 * 1024, (i + 1) * 10 * MiB + 256 * 1024 - 1));

  before(async () => {
    bigBytes = randomBytes(64 * MiB);
    await blobs.putIfAbsent(blobKey("xorbs", BIG_XORB), bigBytes);
    await app.listen({ host: "127.0.0.1", port: 0 });
    port = (app.server.address() as { port: number }).port;
  });

  function open(ranges: readonly ByteRange[]): Promise<{ response: IncomingMessage; abort: () => void }> {
    return new Promise((resolve, reject) => {
      const request = httpRequest({ host: "127.0.0.1", port, path: target(BIG_XORB, BIG_RANGES), headers: { range: rangeHeader(ranges) } });
      request.once("response", (response) => resolve({ response, abort: () => request.destroy() }));
      request.once("error", reject);
      request.end();
    });
  }

  it("streams a ~60 MiB multi-range response: first bytes arrive long before the store has read it all", async () => {
    const readBefore = blobs.bytesRead;
    const { response } = await open(BIG_RANGES);
    assert.equal(response.statusCode, 206);
    const firstChunk: Buffer = await new Promise((resolve) => response.once("data", resolve));
    response.pause();
    // A check that something does NOT happen, so only time will do: a buffering implementation
    // reads the 60 MiB ahead in well under 300 ms on loopback; a streaming one stops once the
    // socket's buffers are full, whatever the wait.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const readWhilePaused = blobs.bytesRead - readBefore;
    assert.ok(readWhilePaused < 16 * MiB, `read ${readWhilePaused} bytes while the client held the first chunk`);
    assert.ok(blobs.openStreams <= 1, "at most one part open at a time");

    const boundary = /boundary=(.+)$/.exec(String(response.headers["content-type"]))![1];
    const expected = createHash("sha256");
    for (const { start, end } of BIG_RANGES) {
      expected.update(`--${boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes ${start}-${end}/${bigBytes.length}\r\n\r\n`);
      expected.update(bigBytes.subarray(start, end + 1));
      expected.update("\r\n");
    }
    expected.update(`--${boundary}--\r\n`);
    const actual = createHash("sha256").update(firstChunk);
    let length = firstChunk.length;
    response.on("data", (chunk: Buffer) => {
      actual.update(chunk);
      length += chunk.length;
    });
    response.resume();
    await new Promise((resolve) => response.once("end", resolve));
    assert.equal(length, Number(response.headers["content-length"]));
    assert.equal(actual.digest("hex"), expected.digest("hex"));
    await within(blobs.allClosed(), "the last part's file to close");
  });

  it("closes the blob stream when the client goes away mid-body (multi-range and single range)", async () => {
    for (const ranges of [BIG_RANGES, [BIG_RANGES[2]]]) {
      const { response, abort } = await open(ranges);
      assert.equal(response.statusCode, 206);
      await new Promise((resolve) => response.once("data", resolve));
      assert.equal(blobs.openStreams, 1);
      const readAtAbort = blobs.bytesRead;
      abort();
      await within(blobs.allClosed(), "the blob stream to close after the client left");
      assert.ok(blobs.bytesRead - readAtAbort < 16 * MiB, "reading stopped with the client");
    }
  });
});
