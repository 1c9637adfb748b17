/**
 * The download pipeline on multi-MiB ranges: chunks written while their range still arrives,
 * the next range fetched during the write, range buffers reused for file outputs (never for
 * streams, which may still hold what they were given), a range several terms share, and a
 * range fetched again after it left the buffer budget. The CAS is a scripted fake serving
 * xorbs packed by the client's own `XorbBuilder`, with bodies delivered in small pieces.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { describe, it } from "node:test";
import type { FetchFunction } from "../../src/client/index.js";
import { XorbBuilder, type SealedXorb } from "../../src/client/packing.js";
import { CompressionScheme, chunkHash, fileHash, hashToHex, splitIntoChunks, type MerkleEntry } from "../../src/format/index.js";
import { createCipheriv, createHash } from "node:crypto";
import { tempDirForFile } from "../helpers/temp-dir.js";
import { CAS, HUB, casTokenAnswer, fakeHubClient, jsonResponse } from "../helpers/fake-hub.js";

const REPO = "model:alice/bert";
const HUB_TOKEN = "hf_test";

const MiB = 1024 * 1024;

/** Fast deterministic bytes (AES-CTR keystream) — splitmix64's BigInts are too slow for MiBs. */
function pseudoRandom(seed: number, length: number): Uint8Array {
  const key = createHash("sha256").update(`seed ${seed}`).digest().subarray(0, 16);
  return new Uint8Array(createCipheriv("aes-128-ctr", key, Buffer.alloc(16)).update(Buffer.alloc(length)));
}

function textBytes(length: number): Uint8Array {
  const text = Array.from({ length: Math.ceil(length / 40) }, (_, i) => `line ${i} value=${(i * 7919) % 10007} ok\n`).join("");
  return new Uint8Array(Buffer.from(text.slice(0, length), "latin1"));
}

interface Packed {
  sealed: SealedXorb;
  chunks: Uint8Array[];
}

function pack(data: Uint8Array): Packed {
  const chunks = splitIntoChunks(data);
  const builder = new XorbBuilder();
  for (const chunk of chunks) builder.add(chunk, chunkHash(chunk));
  return { sealed: builder.seal(), chunks };
}

const random = pack(pseudoRandom(31, 3 * MiB));
const text = pack(textBytes(2 * MiB));
const other = pack(pseudoRandom(32, 1.5 * MiB));
const XORBS = [random, text, other];

/**
 * The file: [xorb, first chunk, end chunk) terms, in order. The client fetches one range per
 * xorb here (the whole-xorb range covers the partial terms too); term 3 needs xorb 0 again
 * after xorbs 1 and 2, which a small budget has evicted it for.
 */
const TERMS: [number, number, number][] = [
  [0, 0, random.chunks.length],
  [1, 0, text.chunks.length],
  [2, 0, other.chunks.length],
  [0, 0, random.chunks.length],
  [1, 3, 9],
  [0, 5, 20],
];

const FILE = Buffer.concat(TERMS.flatMap(([x, from, to]) => XORBS[x].chunks.slice(from, to)));
const FILE_HASH = hashToHex(
  fileHash(TERMS.flatMap(([x, from, to]) => XORBS[x].chunks.slice(from, to).map((chunk): MerkleEntry => ({ hash: chunkHash(chunk), size: chunk.length })))),
);

function byteRange(xorb: Packed, from: number, to: number): { start: number; end: number } {
  const chunks = xorb.sealed.info.chunks;
  return { start: from === 0 ? 0 : chunks[from - 1].serializedEnd, end: chunks[to - 1].serializedEnd - 1 };
}

function reconstruction(): unknown {
  const xorbs: Record<string, { url: string; ranges: unknown[] }[]> = {};
  for (const [x, from, to] of TERMS) {
    const hex = hashToHex(XORBS[x].sealed.info.hash);
    const entry = (xorbs[hex] ??= [{ url: `${CAS}/transfer/${hex}`, ranges: [] }])[0];
    const bytes = byteRange(XORBS[x], from, to);
    if (!entry.ranges.some((r) => JSON.stringify(r) === JSON.stringify({ chunks: { start: from, end: to }, bytes }))) {
      entry.ranges.push({ chunks: { start: from, end: to }, bytes });
    }
  }
  return {
    offset_into_first_range: 0,
    terms: TERMS.map(([x, from, to]) => ({
      hash: hashToHex(XORBS[x].sealed.info.hash),
      unpacked_length: XORBS[x].chunks.slice(from, to).reduce((sum, chunk) => sum + chunk.length, 0),
      range: { start: from, end: to },
    })),
    xorbs,
  };
}

interface FakeOptions {
  /** Called before the second half of the first transfer body is sent. */
  midFirstBody?: () => Promise<void>;
}

function fakeCas(options: FakeOptions = {}) {
  const transfers: string[] = [];
  const fetch: FetchFunction = async (input, init) => {
    const url = new URL(String(input));
    const range = new Headers(init?.headers).get("range");
    if (url.origin === HUB) return casTokenAnswer("t");
    if (url.pathname === `/v2/reconstructions/${FILE_HASH}`) {
      const start = Number(/^bytes=(\d+)-/.exec(range ?? "bytes=0-")![1]);
      if (start >= FILE.length) return new Response(null, { status: 416, headers: { "content-range": `bytes */${FILE.length}` } });
      return jsonResponse(200, reconstruction());
    }
    const transfer = /^\/transfer\/([0-9a-f]{64})$/.exec(url.pathname);
    if (transfer) {
      const xorb = XORBS.find((x) => hashToHex(x.sealed.info.hash) === transfer[1])!;
      const [, s, e] = /^bytes=(\d+)-(\d+)$/.exec(range!)!;
      const body = xorb.sealed.bytes.slice(Number(s), Number(e) + 1);
      const first = transfers.length === 0;
      transfers.push(`${transfer[1].slice(0, 8)}:${s}-${e}`);
      // Small pieces, as a socket delivers them; the first body pauses halfway if asked to.
      const stream = new ReadableStream<Uint8Array>({
        async start(controller) {
          const piece = 16 * 1024;
          for (let at = 0; at < body.length; at += piece) {
            if (first && at >= body.length / 2 && at - piece < body.length / 2) await options.midFirstBody?.();
            controller.enqueue(body.subarray(at, at + piece));
          }
          controller.close();
        },
      });
      return new Response(stream, { status: 206, headers: { "content-length": String(body.length) } });
    }
    return jsonResponse(404, { error: `unexpected ${url.pathname}` });
  };
  return { fetch, transfers };
}

const dir = tempDirForFile("castor-client-ranges-");

describe("download of multi-MiB ranges", () => {
  it("packs the fixture as intended: raw random chunks and LZ4 text chunks", () => {
    assert.ok(random.sealed.info.chunks.every((chunk) => chunk.scheme === CompressionScheme.None));
    assert.ok(text.sealed.info.chunks.every((chunk) => chunk.scheme === CompressionScheme.LZ4));
    assert.ok(random.sealed.bytes.length > 3 * MiB);
  });

  for (const bufferBytes of [undefined, 1]) {
    it(`writes a file byte-exact, verified, with ${bufferBytes === undefined ? "the default budget (ranges shared)" : "a 1-byte budget (the repeated range fetched again)"}`, async () => {
      const { fetch, transfers } = fakeCas();
      const output = join(dir.path, `out-${bufferBytes}`);
      const result = await fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILE_HASH, output, bufferBytes });
      const written = await readFile(output);
      assert.equal(written.length, FILE.length);
      assert.ok(written.equals(FILE));
      assert.equal(result.verified, "file-hash");
      assert.equal(new Set(transfers).size, 3, "one range per xorb");
      if (bufferBytes === undefined) assert.equal(transfers.length, 3, `each range fetched once: ${transfers.join(" ")}`);
      else assert.ok(transfers.length > 3, `evicted ranges fetched again: ${transfers.join(" ")}`);
    });
  }

  it("streams byte-exact too, with fresh buffers (a stream may hold written ones)", async () => {
    const { fetch } = fakeCas();
    const sink = new PassThrough();
    const parts: Buffer[] = [];
    sink.on("data", (part: Buffer) => parts.push(part));
    const result = await fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILE_HASH, output: sink, bufferBytes: 1 });
    const written = Buffer.concat(parts);
    assert.ok(written.equals(FILE));
    assert.equal(result.verified, "file-hash");
    // Had a buffer been reused, earlier parts would now show later bytes.
    assert.ok(Buffer.concat(parts).equals(FILE));
  });

  it("writes the first chunks while the rest of their range is still arriving", async () => {
    let sawOutput: () => void = () => undefined;
    const outputSeen = new Promise<void>((resolve) => (sawOutput = resolve));
    const { fetch } = fakeCas({
      // Were writing to wait for whole ranges, this would never resolve.
      midFirstBody: () =>
        Promise.race([
          outputSeen,
          new Promise<void>((_, reject) => setTimeout(() => reject(new Error("nothing was written while the first range arrived")), 5000).unref()),
        ]),
    });
    const sink = new PassThrough();
    const parts: Buffer[] = [];
    sink.on("data", (part: Buffer) => {
      parts.push(part);
      sawOutput();
    });
    await fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILE_HASH, output: sink });
    assert.ok(Buffer.concat(parts).equals(FILE));
  });
});
