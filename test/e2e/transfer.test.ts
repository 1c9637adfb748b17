/**
 * Transfer URLs end to end: a real `castor serve` process with its generated keys, a xorb
 * uploaded through POST /v1/xorbs, then its bytes fetched the way clients fetch them — no
 * Authorization header, one GET per range (xet-core's default) and one multi-range GET that must
 * answer multipart/byteranges (hf.js). URLs come from the server's reconstruction responses
 * (V2 and V1) for a file registered with a shard, and are also signed here with the server's own
 * URL key read from its data dir, as another node sharing that key would sign them.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { get as httpGet } from "node:http";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { HmacTransferUrls } from "../../src/auth/transfer-url.js";
import { byteRange, type ByteRange } from "../../src/format/ranges.js";
import { KEYS_DIR_NAME, URL_KEY_FILE_NAME } from "../../src/auth/keys.js";
import { CompressionScheme, decompressChunk } from "../../src/format/compression.js";
import { fileHash, hashToHex, verificationHash } from "../../src/format/hash.js";
import type { ShardTerm } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { chunkRangeToByteRange, serializeXorb, XORB_CHUNK_HEADER_BYTES, type SerializedXorb } from "../../src/format/xorb.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";
import { makeData, splitmix64Bytes } from "../helpers/vectors.js";

let server: ServerProcess;
let urls: HmacTransferUrls;
let expiredUrls: HmacTransferUrls;
let xorb: SerializedXorb;
let chunkData: Uint8Array[];
let accessToken: string;
/** A file made of chunks [0,2) and [3,6) of the xorb, registered with a shard. */
let fileHex: string;
let fileBytes: Buffer;
/** Chunk ranges [0,1), [2,4), [5,6) as byte ranges: a file's pieces inside a shared xorb. */
let ranges: ByteRange[];

async function cli(...args: string[]): Promise<string> {
  const result = await runCastor(args, { env: { CASTOR_DATA_DIR: server.dataDir } });
  assert.equal(result.code, 0, result.stderr);
  return result.stdout.trim();
}

function bytesOfChunks(startChunk: number, endChunk: number): ByteRange {
  const { start, end } = chunkRangeToByteRange(
    xorb.info.chunks.map((chunk) => chunk.serializedEnd),
    startChunk,
    endChunk,
  );
  return byteRange(start, end - 1);
}

function rangeHeader(list: readonly ByteRange[]): string {
  return `bytes=${list.map((r) => `${r.start}-${r.end}`).join(",")}`;
}

before(async () => {
  server = await startCastorServer();
  await cli("repo", "create", "model", "alice/bert");
  const hubToken = await cli("token", "create", "--repo", "model:alice/bert", "--access", "write");
  const tokenResponse = await fetch(`${server.url}/api/models/alice/bert/cas-write-token/main`, { headers: { authorization: `Bearer ${hubToken}` } });
  assert.equal(tokenResponse.status, 200, await tokenResponse.clone().text());
  accessToken = ((await tokenResponse.json()) as { accessToken: string }).accessToken;

  const sources = [
    { data: splitmix64Bytes(1n, 40_000), scheme: CompressionScheme.None },
    { data: makeData(50_000, 7, 1), scheme: CompressionScheme.LZ4 },
    { data: splitmix64Bytes(2n, 30_000), scheme: CompressionScheme.None },
    { data: makeData(60_000, 3, 9), scheme: CompressionScheme.ByteGrouping4LZ4 },
    { data: splitmix64Bytes(3n, 20_000), scheme: CompressionScheme.None },
    { data: makeData(45_000, 13, 5), scheme: CompressionScheme.LZ4 },
  ];
  chunkData = sources.map((source) => source.data);
  xorb = serializeXorb(sources);
  const upload = await fetch(`${server.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, {
    method: "POST",
    body: xorb.bytes,
    headers: { authorization: `Bearer ${accessToken}` },
  });
  assert.equal(upload.status, 200, await upload.clone().text());
  assert.deepEqual(await upload.json(), { was_inserted: true });

  const termChunks: [number, number][] = [
    [0, 2],
    [3, 6],
  ];
  const fileChunks = termChunks.flatMap(([start, end]) => xorb.info.chunks.slice(start, end));
  const terms: ShardTerm[] = termChunks.map(([chunkStart, chunkEnd]) => ({
    xorbHash: xorb.info.hash,
    chunkStart,
    chunkEnd,
    unpackedBytes: chunkData.slice(chunkStart, chunkEnd).reduce((sum, data) => sum + data.length, 0),
  }));
  const hash = fileHash(fileChunks.map((chunk) => ({ hash: chunk.hash, size: chunk.uncompressedLength })));
  const shard = serializeUploadShard(
    {
      files: [
        {
          fileHash: hash,
          terms,
          verificationHashes: termChunks.map(([start, end]) => verificationHash(xorb.info.chunks.slice(start, end).map((chunk) => chunk.hash))),
          sha256: null,
        },
      ],
      xorbs: [],
    },
    { kind: "xet-core" },
  );
  const registered = await fetch(`${server.url}/v1/shards`, { method: "POST", body: shard, headers: { authorization: `Bearer ${accessToken}` } });
  assert.equal(registered.status, 200, await registered.clone().text());
  fileHex = hashToHex(hash);
  fileBytes = Buffer.concat(termChunks.flatMap(([start, end]) => chunkData.slice(start, end)));

  // The generated key file holds the secret in the form CASTOR_URL_KEY takes (see keys.ts).
  const key = Buffer.from((await readFile(join(server.dataDir, KEYS_DIR_NAME, URL_KEY_FILE_NAME), "utf8")).trim(), "utf8");
  urls = new HmacTransferUrls({ key, publicUrl: server.publicUrl, ttlSeconds: 60 });
  expiredUrls = new HmacTransferUrls({ key, publicUrl: server.publicUrl, ttlSeconds: 60, now: () => Date.now() - 61_000 });
  ranges = [bytesOfChunks(0, 1), bytesOfChunks(2, 4), bytesOfChunks(5, 6)];
});

after(async () => {
  await server?.stop();
});

/** Strict multipart/byteranges reader: the parts' Content-Range and bytes, in order. */
function parseMultipart(body: Buffer, contentType: string): { contentRange: string; bytes: Buffer }[] {
  const boundary = /^multipart\/byteranges; boundary=(\S+)$/.exec(contentType)?.[1];
  assert.ok(boundary, contentType);
  const parts: { contentRange: string; bytes: Buffer }[] = [];
  let at = 0;
  for (;;) {
    assert.equal(body.toString("latin1", at, at + boundary.length + 2), `--${boundary}`);
    at += boundary.length + 2;
    if (body.toString("latin1", at, at + 4) === "--\r\n" && at + 4 === body.length) return parts;
    const headerEnd = body.indexOf("\r\n\r\n", at, "latin1");
    const headers = body.toString("latin1", at + 2, headerEnd).split("\r\n");
    assert.deepEqual(headers[0], "Content-Type: application/octet-stream");
    const contentRange = headers[1].replace(/^Content-Range: /, "");
    const [, start, end] = /^bytes (\d+)-(\d+)\/\d+$/.exec(contentRange)!.map(Number);
    at = headerEnd + 4;
    parts.push({ contentRange, bytes: body.subarray(at, at + end - start + 1) });
    at += end - start + 1;
    assert.equal(body.toString("latin1", at, at + 2), "\r\n");
    at += 2;
  }
}

/** The chunks of a fetched byte range, decoded, by chunk index (a client's parse of xorb bytes). */
function decodeChunks(bytes: Buffer, firstChunk: number): Map<number, Buffer> {
  const chunks = new Map<number, Buffer>();
  let at = 0;
  for (let index = firstChunk; at < bytes.length; index++) {
    const compressedSize = bytes.readUIntLE(at + 1, 3);
    const scheme = bytes[at + 4];
    const uncompressedSize = bytes.readUIntLE(at + 5, 3);
    const payload = bytes.subarray(at + XORB_CHUNK_HEADER_BYTES, at + XORB_CHUNK_HEADER_BYTES + compressedSize);
    chunks.set(index, Buffer.from(decompressChunk(scheme, payload, uncompressedSize)));
    at += XORB_CHUNK_HEADER_BYTES + compressedSize;
  }
  assert.equal(at, bytes.length, "a fetched range holds whole chunks");
  return chunks;
}

interface V2Reconstruction {
  offset_into_first_range: number;
  terms: { hash: string; range: { start: number; end: number }; unpacked_length: number }[];
  xorbs: Record<string, { url: string; ranges: { chunks: { start: number; end: number }; bytes: ByteRange }[] }[]>;
}

interface V1Reconstruction {
  offset_into_first_range: number;
  terms: V2Reconstruction["terms"];
  fetch_info: Record<string, { url: string; range: { start: number; end: number }; url_range: ByteRange }[]>;
}

async function reconstruction<T>(version: 1 | 2): Promise<T> {
  const response = await fetch(`${server.url}/v${version}/reconstructions/${fileHex}`, { headers: { authorization: `Bearer ${accessToken}` } });
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()) as T;
}

/** Rebuilds the file from its terms and the decoded chunks of each xorb. */
function assemble(terms: V2Reconstruction["terms"], offset: number, chunksOf: (xorbHex: string) => Map<number, Buffer>): Buffer {
  const pieces: Buffer[] = [];
  for (const term of terms) {
    const chunks = chunksOf(term.hash);
    for (let index = term.range.start; index < term.range.end; index++) {
      const chunk = chunks.get(index);
      assert.ok(chunk, `chunk ${index} of ${term.hash} was fetched`);
      pieces.push(chunk);
    }
  }
  return Buffer.concat(pieces).subarray(offset);
}

describe("downloading a file through its reconstruction's transfer URLs", () => {
  it("V2, one GET per range (xet-core's default)", async () => {
    const plan = await reconstruction<V2Reconstruction>(2);
    const decoded = new Map<string, Map<number, Buffer>>();
    for (const [xorbHex, entries] of Object.entries(plan.xorbs)) {
      const chunks = new Map<number, Buffer>();
      for (const entry of entries) {
        for (const descriptor of entry.ranges) {
          const response = await fetch(entry.url, { headers: { range: rangeHeader([descriptor.bytes]) } });
          assert.equal(response.status, 206, await response.clone().text());
          for (const [index, chunk] of decodeChunks(Buffer.from(await response.arrayBuffer()), descriptor.chunks.start)) chunks.set(index, chunk);
        }
      }
      decoded.set(xorbHex, chunks);
    }
    assert.deepEqual(
      assemble(plan.terms, plan.offset_into_first_range, (hex) => decoded.get(hex)!),
      fileBytes,
    );
  });

  it("V2, one multi-range GET per entry answered with multipart/byteranges (hf.js)", async () => {
    const plan = await reconstruction<V2Reconstruction>(2);
    const entries = Object.values(plan.xorbs).flat();
    assert.ok(
      entries.some((entry) => entry.ranges.length > 1),
      "the file's two terms give one entry with two ranges",
    );
    const decoded = new Map<string, Map<number, Buffer>>();
    for (const [xorbHex, xorbEntries] of Object.entries(plan.xorbs)) {
      const chunks = new Map<number, Buffer>();
      for (const entry of xorbEntries) {
        const response = await fetch(entry.url, { headers: { range: rangeHeader(entry.ranges.map((r) => r.bytes)) } });
        assert.equal(response.status, 206, await response.clone().text());
        const body = Buffer.from(await response.arrayBuffer());
        const contentType = response.headers.get("content-type") ?? "";
        const parts = entry.ranges.length === 1 ? [{ bytes: body }] : parseMultipart(body, contentType);
        assert.equal(parts.length, entry.ranges.length);
        parts.forEach((part, i) => {
          for (const [index, chunk] of decodeChunks(part.bytes, entry.ranges[i].chunks.start)) chunks.set(index, chunk);
        });
      }
      decoded.set(xorbHex, chunks);
    }
    assert.deepEqual(
      assemble(plan.terms, plan.offset_into_first_range, (hex) => decoded.get(hex)!),
      fileBytes,
    );
  });

  it("V1, one GET per fetch_info entry with its url_range", async () => {
    const plan = await reconstruction<V1Reconstruction>(1);
    const decoded = new Map<string, Map<number, Buffer>>();
    for (const [xorbHex, entries] of Object.entries(plan.fetch_info)) {
      const chunks = new Map<number, Buffer>();
      for (const entry of entries) {
        const response = await fetch(entry.url, { headers: { range: rangeHeader([entry.url_range]) } });
        assert.equal(response.status, 206, await response.clone().text());
        for (const [index, chunk] of decodeChunks(Buffer.from(await response.arrayBuffer()), entry.range.start)) chunks.set(index, chunk);
      }
      decoded.set(xorbHex, chunks);
    }
    assert.deepEqual(
      assemble(plan.terms, plan.offset_into_first_range, (hex) => decoded.get(hex)!),
      fileBytes,
    );
  });

  it("refuses the reconstruction's URL for a range it did not sign (the chunk between the terms)", async () => {
    const plan = await reconstruction<V2Reconstruction>(2);
    const [entry] = plan.xorbs[hashToHex(xorb.info.hash)];
    const between = bytesOfChunks(2, 3);
    const response = await fetch(entry.url, { headers: { range: rangeHeader([between]) } });
    assert.equal(response.status, 403);
  });
});

describe("transfer URLs against a running server", () => {
  it("serves each signed range on its own, as xet-core fetches by default", async () => {
    const url = urls.sign(xorb.info.hash, ranges);
    assert.ok(url.startsWith(`${server.publicUrl}/v1/transfer/${hashToHex(xorb.info.hash)}?`), url);
    for (const range of ranges) {
      const response = await fetch(url, { headers: { range: rangeHeader([range]) } });
      assert.equal(response.status, 206, await response.clone().text());
      assert.equal(response.headers.get("content-range"), `bytes ${range.start}-${range.end}/${xorb.bytes.length}`);
      assert.equal(response.headers.get("content-type"), "application/octet-stream");
      assert.deepEqual(Buffer.from(await response.arrayBuffer()), Buffer.from(xorb.bytes.subarray(range.start, range.end + 1)));
    }
  });

  it("serves the full range list as multipart/byteranges, as hf.js fetches", async () => {
    const response = await fetch(urls.sign(xorb.info.hash, ranges), { headers: { range: rangeHeader(ranges), "accept-encoding": "gzip" } });
    assert.equal(response.status, 206);
    assert.equal(response.headers.get("content-encoding"), null);
    const body = Buffer.from(await response.arrayBuffer());
    assert.equal(Number(response.headers.get("content-length")), body.length);
    const parts = parseMultipart(body, response.headers.get("content-type") ?? "");
    assert.deepEqual(
      parts.map((part) => part.contentRange),
      ranges.map((r) => `bytes ${r.start}-${r.end}/${xorb.bytes.length}`),
    );
    parts.forEach((part, i) => {
      assert.deepEqual(part.bytes, Buffer.from(xorb.bytes.subarray(ranges[i].start, ranges[i].end + 1)));
    });
  });

  it("answers 403 to expired, altered or unsigned requests, and 404 for an unknown xorb", async () => {
    const url = urls.sign(xorb.info.hash, ranges);
    const single = rangeHeader([ranges[1]]);
    const refusals: [string, Record<string, string>, RegExp][] = [
      [expiredUrls.sign(xorb.info.hash, ranges), { range: single }, /expired/],
      [url.replace(/r=[0-9a-z]/, "r=z"), { range: single }, /signature does not match/],
      [url, {}, /Range header is required/],
      [url, { range: `bytes=${ranges[1].start}-${ranges[1].end - 1}` }, /not authorised/],
      [url, { range: `bytes=0-${xorb.bytes.length - 1}` }, /not authorised/],
    ];
    for (const [requestUrl, headers, message] of refusals) {
      const response = await fetch(requestUrl, { headers });
      const text = await response.text();
      assert.equal(response.status, 403, text);
      assert.match((JSON.parse(text) as { error: string }).error, message);
    }
    const unknown = urls.sign(new Uint8Array(32).fill(9), [byteRange(0, 9)]);
    assert.equal((await fetch(unknown, { headers: { range: "bytes=0-9" } })).status, 404);
  });

  it("keeps signatures and queries out of the server's log", async () => {
    const transferLines = () => server.logLines().filter((line) => line.route === "/v1/transfer/:xorb");
    const from = server.logLines().length;
    const url = urls.sign(xorb.info.hash, ranges);
    const response = await fetch(url, { headers: { range: rangeHeader([ranges[0]]) } });
    assert.equal(response.status, 206);
    await response.arrayBuffer();
    const expectedPath = `/v1/transfer/${hashToHex(xorb.info.hash)}`;
    const logged = await server.waitForRequests(from, (requests) => requests.some((line) => line.path === expectedPath));
    assert.ok(
      logged.some((line) => line.path === expectedPath),
      "the transfer request was never logged",
    );
    const signature = url.slice(url.lastIndexOf("&s=") + 3);
    const lines = transferLines();
    for (const line of lines) assert.match(String(line.path), /^\/v1\/transfer\/[0-9a-f]{64}$/);
    assert.ok(!server.output().includes(signature), "a signature reached the log");
    assert.ok(!server.output().includes("?x="), "a transfer query reached the log");
  });
});

/**
 * Single ranges are read into pooled 1 MiB buffers that go back to the pool once the socket has
 * them (src/http/transfer-routes.ts). Given back too early, a buffer would be overwritten by
 * another response's read while still being sent: these fetch multi-MiB ranges of a larger
 * xorb many at a time, and after clients that hung up mid-body, and compare every byte.
 */
describe("single ranges served from pooled read buffers", () => {
  let big: SerializedXorb;

  before(async () => {
    // 240 incompressible chunks of 100,000 bytes: 24 MB, more than the kernel's socket buffers
    // on loopback hold (several MiB each way), so writes to slow readers stay pending.
    big = serializeXorb(Array.from({ length: 240 }, (_, i) => ({ data: splitmix64Bytes(BigInt(100 + i), 100_000), scheme: CompressionScheme.None })));
    const upload = await fetch(`${server.url}/v1/xorbs/default/${hashToHex(big.info.hash)}`, {
      method: "POST",
      body: big.bytes,
      headers: { authorization: `Bearer ${accessToken}` },
    });
    assert.equal(upload.status, 200, await upload.clone().text());
  });

  function bigRanges(): ByteRange[] {
    const size = big.bytes.length;
    const starts = [0, 1_048_575, 2_000_003, size - 3_000_001];
    return starts.flatMap((start) => [byteRange(start, size - 1), byteRange(start, Math.min(size - 1, start + 2_500_000))]);
  }

  /**
   * Fetches a range and compares it. A slow reader stops reading after its first piece until
   * `holdUntil` settles, so the server's socket fills up and its writes stay pending, holding
   * their buffers, while other responses run; then it reads the rest.
   */
  async function fetchExact(range: ByteRange, holdUntil?: Promise<unknown>): Promise<void> {
    const response = await fetch(urls.sign(big.info.hash, [range]), { headers: { range: rangeHeader([range]) } });
    assert.equal(response.status, 206, await response.clone().text());
    const pieces: Buffer[] = [];
    for await (const piece of response.body as AsyncIterable<Uint8Array>) {
      pieces.push(Buffer.from(piece));
      if (holdUntil !== undefined) {
        await holdUntil.catch(() => undefined);
        holdUntil = undefined;
      }
    }
    const got = Buffer.concat(pieces);
    assert.equal(got.length, range.end - range.start + 1);
    assert.ok(got.equals(big.bytes.subarray(range.start, range.end + 1)), `range ${range.start}-${range.end} came back with other bytes`);
  }

  it("serves many multi-MiB ranges at once, to fast and slow readers, byte-exact", async () => {
    // The slow readers hold their pending writes until every fast reader has its range.
    const fast = Promise.all(bigRanges().map((range) => fetchExact(range)));
    const slow = Promise.all(bigRanges().map((range) => fetchExact(range, fast)));
    await Promise.all([fast, slow]);
  });

  /** GETs `range` on a connection of its own and closes that connection once the first piece of the body is in. */
  function hangUpMidBody(range: ByteRange): Promise<void> {
    return new Promise((resolve, reject) => {
      const request = httpGet(urls.sign(big.info.hash, [range]), { headers: { range: rangeHeader([range]) }, agent: false }, (response) => {
        if (response.statusCode !== 206) reject(new Error(`answered ${response.statusCode}`));
        response.once("data", () => {
          request.destroy();
          resolve();
        });
      });
      request.once("error", reject);
    });
  }

  it("stays exact for later requests after clients hang up mid-body", async () => {
    // The connections are closed, not kept: a fetch aborted mid-body left its connection open,
    // and the server's shutdown then waited its whole grace for that response.
    await Promise.all(Array.from({ length: 8 }, () => hangUpMidBody(byteRange(0, big.bytes.length - 1))));
    await Promise.all(bigRanges().map((range) => fetchExact(range)));
    const health = await fetch(`${server.url}/healthz`);
    assert.equal(health.status, 200);
  });
});
