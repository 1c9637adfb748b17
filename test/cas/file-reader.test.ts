import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { Writable, type Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { beforeEach, describe, it } from "node:test";
import fc from "fast-check";
import { FileReadError, FileReader, type FileByteRange, type FileReadErrorCode, type FileReaderOptions, type SpanSource } from "../../src/cas/file-reader.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { CompressionScheme } from "../../src/format/compression.js";
import { ZERO_HASH, fileHash, hashToHex, type Hash } from "../../src/format/hash.js";
import { XORB_CHUNK_HEADER_BYTES, serializeXorb, type SerializedXorb, type XorbChunkSource } from "../../src/format/xorb.js";
import type { FileRecord, FileTerm } from "../../src/metadata/cas.js";
import type { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { blobKey, type BlobKey, type ByteSpan } from "../../src/storage/blob-store.js";
import type { FsBlobStore } from "../../src/storage/fs.js";
import { ingestWhole, useFreshStores } from "../helpers/stores.js";
import { makeData, splitmix64Bytes } from "../helpers/vectors.js";
import { until, within } from "../helpers/wait.js";

// ---------------------------------------------------------------------------------------------
// Fixtures: xorbs stored through the real ingest path, files registered in the real store

const stores = useFreshStores("file-reader");
let blobs: FsBlobStore;
let metadata: SqliteMetadataStore;
let repoId: number;

beforeEach(async () => {
  ({ blobs, metadata } = stores());
  repoId = (await metadata.createRepo("model", "alice/files")).id;
});

interface StoredXorb {
  xorb: SerializedXorb;
  /** Each chunk's uncompressed bytes. */
  data: Uint8Array[];
}

async function storeXorb(sources: readonly XorbChunkSource[]): Promise<StoredXorb> {
  const xorb = serializeXorb(sources);
  await ingestWhole(new XorbIngestService({ blobs, metadata }), xorb.info.hash, xorb.bytes);
  return { xorb, data: sources.map((source) => ("data" in source ? source.data : assert.fail("raw chunks only"))) };
}

interface TermSpec {
  of: StoredXorb;
  start: number;
  end: number;
}

interface RegisteredFile {
  hash: Hash;
  bytes: Uint8Array;
}

/** Registers a file of the given terms, its hash and size computed from the chunks. */
async function registerFile(specs: readonly TermSpec[], override: Partial<FileRecord> = {}): Promise<RegisteredFile> {
  const terms: FileTerm[] = specs.map(({ of, start, end }) => ({
    xorbHash: of.xorb.info.hash,
    chunkStart: start,
    chunkEnd: end,
    unpackedLength: of.data.slice(start, end).reduce((sum, chunk) => sum + chunk.length, 0),
  }));
  const chunks = specs.flatMap(({ of, start, end }) => of.xorb.info.chunks.slice(start, end).map((c) => ({ hash: c.hash, size: c.uncompressedLength })));
  const bytes = Buffer.concat(specs.flatMap(({ of, start, end }) => of.data.slice(start, end)));
  const record: FileRecord = { hash: fileHash(chunks), size: bytes.length, terms, sha256: null, ...override };
  await metadata.registerShard({ shardHash: new Uint8Array(randomBytes(32)), repoId, files: [record], dedupEntries: [] });
  return { hash: record.hash, bytes: new Uint8Array(bytes) };
}

/** Text-like bytes (LZ4 shrinks them), random bytes (stored raw), little-endian float32s (BG4 shrinks them). */
const text = (length: number, seed: number) => makeData(length, 7, seed);
const random = (length: number, seed: number) => splitmix64Bytes(BigInt(seed), length);
function floats(length: number, seed: number): Uint8Array {
  const noise = random(length, seed);
  const out = new Uint8Array(length);
  const view = new DataView(out.buffer);
  for (let i = 0; i + 4 <= length; i += 4) view.setFloat32(i, 1 + noise[i] / 4096, true);
  return out;
}

/**
 * Three xorbs with every compression scheme, and a file that uses a sub-range of one, the same
 * xorb twice, and terms of one chunk. Chunks are small so the file is ~200 KB.
 */
async function mixedFile(): Promise<{ file: RegisteredFile; xorbs: StoredXorb[] }> {
  const a = await storeXorb([
    { data: text(20_000, 1), scheme: CompressionScheme.LZ4 },
    { data: random(13_001, 2), scheme: CompressionScheme.None },
    { data: floats(16_384, 3), scheme: CompressionScheme.ByteGrouping4LZ4 },
    { data: text(1, 4), scheme: CompressionScheme.None },
    { data: floats(9_999, 5), scheme: CompressionScheme.ByteGrouping4LZ4 },
    { data: text(31_000, 6), scheme: CompressionScheme.LZ4 },
  ]);
  const b = await storeXorb([
    { data: random(7_000, 7) },
    { data: text(12_345, 8) },
    { data: floats(8_192, 9) },
    { data: random(5_555, 10), scheme: CompressionScheme.None },
    { data: text(4_096, 11) },
  ]);
  const c = await storeXorb([{ data: random(22_222, 12) }, { data: text(17, 13) }, { data: floats(30_000, 14) }]);
  for (const scheme of [CompressionScheme.None, CompressionScheme.LZ4, CompressionScheme.ByteGrouping4LZ4]) {
    assert.ok(
      [a, b, c].some((x) => x.xorb.info.chunks.some((chunk) => chunk.scheme === scheme)),
      `scheme ${scheme} is exercised`,
    );
  }
  const file = await registerFile([
    { of: a, start: 0, end: 6 },
    { of: b, start: 1, end: 4 },
    { of: a, start: 2, end: 5 },
    { of: c, start: 0, end: 3 },
    { of: b, start: 4, end: 5 },
    { of: a, start: 3, end: 4 },
  ]);
  return { file, xorbs: [a, b, c] };
}

// ---------------------------------------------------------------------------------------------
// An instrumented blob source: records every span read, counts open handles, can hold reads

interface SpanLog {
  /** Every span asked for, in order. */
  readonly requested: { hex: string; offset: number; length: number }[];
  /** Handles and streams opened and not yet released. */
  open: number;
  /** Reads waiting to be let through by `release()`. */
  held: number;
  /**
   * Holds reads (before they open anything) until `release()`; resolves when the first read
   * reaches the hold.
   */
  hold(): Promise<void>;
  release(): void;
}

function instrumented(inner: FsBlobStore, positional: boolean): { source: SpanSource; log: SpanLog } {
  let gate: Promise<void> = Promise.resolve();
  let openGate = () => {};
  let arrived = () => {};
  const log: SpanLog = {
    requested: [],
    open: 0,
    held: 0,
    hold() {
      gate = new Promise((resolve) => (openGate = resolve));
      return new Promise((resolve) => (arrived = resolve));
    },
    release() {
      openGate();
    },
  };
  const passGate = async () => {
    log.held++;
    arrived();
    await gate;
    log.held--;
  };
  const record = (key: BlobKey, span?: ByteSpan) => {
    assert.ok(span, "the reader always reads spans, never whole blobs");
    log.requested.push({ hex: key.slice("xorbs/".length), ...span });
  };
  const source: SpanSource = {
    async read(key, span) {
      record(key, span);
      await passGate();
      const stream = await inner.read(key, span);
      log.open++;
      stream.once("close", () => log.open--);
      return stream;
    },
    openSpan: positional
      ? async (key, span) => {
          record(key, span);
          await passGate();
          const reader = await inner.openSpan(key, span);
          log.open++;
          return {
            length: reader.length,
            read: (buffer, from) => reader.read(buffer, from),
            close: async () => {
              await reader.close();
              log.open--;
            },
          };
        }
      : undefined,
  };
  return { source, log };
}

// ---------------------------------------------------------------------------------------------
// Reading helpers

async function collect(stream: Readable): Promise<Uint8Array> {
  const parts: Buffer[] = [];
  for await (const part of stream) parts.push(part as Buffer);
  return new Uint8Array(Buffer.concat(parts));
}

/** Everything the stream emitted before it failed, and its error. */
async function collectUntilError(stream: Readable): Promise<{ bytes: Uint8Array; error: unknown }> {
  const parts: Buffer[] = [];
  stream.on("data", (part: Buffer) => parts.push(part));
  const [error] = await once(stream, "error").catch((e: unknown) => [e]);
  return { bytes: new Uint8Array(Buffer.concat(parts)), error };
}

async function readFile(reader: FileReader, hash: Hash, range?: FileByteRange): Promise<Uint8Array> {
  const file = await reader.open(hash);
  assert.ok(file, `file ${hashToHex(hash)} is registered`);
  return collect(file.read(range));
}

function assertBytes(actual: Uint8Array, expected: Uint8Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  assert.ok(Buffer.from(actual).equals(Buffer.from(expected)), `${what}: bytes differ`);
}

function isReadError(code: FileReadErrorCode, message: RegExp) {
  return (error: unknown) => {
    assert.ok(error instanceof FileReadError, `a FileReadError, got ${String(error)}`);
    assert.equal(error.code, code);
    assert.match(error.message, message);
    return true;
  };
}

// ---------------------------------------------------------------------------------------------
// Byte-exact reconstruction

/** Reader shapes: default spans; one chunk per span without read-ahead; mid-size spans; the stream (S3-like) path. */
const SHAPES: { name: string; options: FileReaderOptions; positional: boolean }[] = [
  { name: "defaults, positional reads", options: {}, positional: true },
  { name: "one chunk per span, no read-ahead", options: { maxSpanBytes: 1, readAheadSpans: 0, highWaterMark: 1 }, positional: true },
  { name: "~24 KB spans, read-ahead 3", options: { maxSpanBytes: 24_000, readAheadSpans: 3, highWaterMark: 10_000 }, positional: true },
  { name: "~24 KB spans, range streams (no openSpan)", options: { maxSpanBytes: 24_000 }, positional: false },
];

describe("FileReader: whole files and ranges", () => {
  for (const shape of SHAPES) {
    it(`${shape.name}: whole file, every kind of range, and random ranges are byte-exact`, async () => {
      const { file } = await mixedFile();
      const { source } = instrumented(blobs, shape.positional);
      const reader = new FileReader({ metadata, blobs: source, ...shape.options });
      const size = file.bytes.length;
      assertBytes(await readFile(reader, file.hash), file.bytes, "whole file");

      // Offsets of the term and chunk boundaries, from the fixture's layout.
      const termEnd0 = 20_000 + 13_001 + 16_384 + 1 + 9_999 + 31_000;
      const ranges: [string, FileByteRange][] = [
        ["first byte", { start: 0, end: 0 }],
        ["last byte", { start: size - 1, end: size - 1 }],
        ["one byte inside a chunk", { start: 25_000, end: 25_000 }],
        ["the one-byte chunk", { start: 20_000 + 13_001 + 16_384, end: 20_000 + 13_001 + 16_384 }],
        ["across a chunk boundary", { start: 19_990, end: 20_010 }],
        ["across a term boundary", { start: termEnd0 - 5, end: termEnd0 + 5 }],
        ["across several terms", { start: 1_234, end: size - 4_321 }],
        ["exactly one term", { start: termEnd0, end: termEnd0 + 7_000 + 12_345 + 8_192 - 1 }],
        ["everything as a range", { start: 0, end: size - 1 }],
        ["a suffix", { start: size - 70_000, end: size - 1 }],
      ];
      for (const [what, range] of ranges) {
        assertBytes(await readFile(reader, file.hash, range), file.bytes.subarray(range.start, range.end + 1), what);
      }
      await fc.assert(
        fc.asyncProperty(fc.nat(size - 1), fc.nat(size - 1), async (x, y) => {
          const range = { start: Math.min(x, y), end: Math.max(x, y) };
          assertBytes(await readFile(reader, file.hash, range), file.bytes.subarray(range.start, range.end + 1), `bytes ${range.start}-${range.end}`);
        }),
        { numRuns: 40 },
      );
    });
  }

  it("streams of one reader run concurrently, reusing span buffers without mixing their bytes", async () => {
    const { file } = await mixedFile();
    // Small spans and buffers reused many times over; every piece is kept until the end, so a
    // piece that still pointed into a reused buffer would show up as wrong bytes.
    const reader = new FileReader({ metadata, blobs, maxSpanBytes: 24_000, readAheadSpans: 1 });
    const size = file.bytes.length;
    const ranges = [
      { start: 0, end: size - 1 },
      { start: 13, end: size - 14 },
      { start: 70_000, end: 150_000 },
      { start: 0, end: size - 1 },
    ];
    const results = await Promise.all(ranges.map((range) => readFile(reader, file.hash, range)));
    ranges.forEach((range, i) => {
      assertBytes(results[i], file.bytes.subarray(range.start, range.end + 1), `stream ${i}`);
    });
  });

  it("reports the size, and null for a file that is not registered", async () => {
    const { file } = await mixedFile();
    const reader = new FileReader({ metadata, blobs });
    assert.equal((await reader.open(file.hash))?.size, file.bytes.length);
    assert.equal(await reader.open(new Uint8Array(randomBytes(32))), null);
  });

  it("reads a term of a whole 8-chunk xorb cut into spans of at most maxSpanBytes", async () => {
    const x = await storeXorb(Array.from({ length: 8 }, (_, i) => ({ data: random(10_000, 100 + i), scheme: CompressionScheme.None })));
    const file = await registerFile([{ of: x, start: 0, end: 8 }]);
    const { source, log } = instrumented(blobs, true);
    const reader = new FileReader({ metadata, blobs: source, maxSpanBytes: 3 * (10_000 + XORB_CHUNK_HEADER_BYTES) });
    assertBytes(await readFile(reader, file.hash), file.bytes, "whole file");
    assert.deepEqual(
      log.requested.map((s) => s.length),
      [3, 3, 2].map((n) => n * 10_008),
      "three chunks per span, then the remaining two",
    );
    assert.equal(log.open, 0, "every handle released");
  });

  it("reads only the chunk holding a single requested byte", async () => {
    const { file, xorbs } = await mixedFile();
    const b = xorbs[1].xorb.info;
    const { source, log } = instrumented(blobs, true);
    const reader = new FileReader({ metadata, blobs: source });
    // Byte 100 of the second term's second chunk: chunk 2 of xorb b.
    const termEnd0 = 20_000 + 13_001 + 16_384 + 1 + 9_999 + 31_000;
    const at = termEnd0 + 12_345 + 100;
    assertBytes(await readFile(reader, file.hash, { start: at, end: at }), file.bytes.subarray(at, at + 1), "the byte");
    assert.deepEqual(log.requested, [
      { hex: hashToHex(b.hash), offset: b.chunks[1].serializedEnd, length: b.chunks[2].serializedEnd - b.chunks[1].serializedEnd },
    ]);
  });

  it("reads an empty file as no bytes, and refuses a range in it", async () => {
    const file = await registerFile([], { hash: ZERO_HASH });
    const reader = new FileReader({ metadata, blobs });
    const stored = await reader.open(ZERO_HASH);
    assert.equal(stored?.size, 0);
    assert.equal((await collect(stored!.read())).length, 0);
    assert.equal(file.bytes.length, 0);
    assert.throws(() => stored!.read({ start: 0, end: 0 }), RangeError);
  });

  it("refuses ranges the caller should have checked", async () => {
    const { file } = await mixedFile();
    const stored = (await new FileReader({ metadata, blobs }).open(file.hash))!;
    for (const range of [
      { start: -1, end: 3 },
      { start: 5, end: 4 },
      { start: 0, end: file.bytes.length },
      { start: 0.5, end: 3 },
    ]) {
      assert.throws(() => stored.read(range), RangeError, JSON.stringify(range));
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Damaged and missing data

describe("FileReader: damaged or missing data fails the stream, never emitting wrong bytes", () => {
  /** Replaces the stored blob of `x` with `mutate(its bytes)`. */
  async function replaceBlob(x: StoredXorb, mutate: (bytes: Uint8Array) => Uint8Array): Promise<void> {
    const key = blobKey("xorbs", x.xorb.info.hash);
    await blobs.delete(key);
    await blobs.putIfAbsent(key, mutate(new Uint8Array(x.xorb.bytes)));
  }

  /** Where chunk `index` of xorb `x` starts in the serialized xorb. */
  const chunkStart = (x: StoredXorb, index: number) => (index === 0 ? 0 : x.xorb.info.chunks[index - 1].serializedEnd);

  async function assertFailsAfterPrefix(file: RegisteredFile, failsAt: number, code: FileReadErrorCode, message: RegExp): Promise<void> {
    for (const positional of [true, false]) {
      const { source, log } = instrumented(blobs, positional);
      const stored = (await new FileReader({ metadata, blobs: source, maxSpanBytes: 1 }).open(file.hash))!;
      const { bytes, error } = await collectUntilError(stored.read());
      isReadError(code, message)(error);
      assert.ok(bytes.length <= failsAt, `emitted ${bytes.length} bytes, more than the ${failsAt} before the damage`);
      assertBytes(bytes, file.bytes.subarray(0, bytes.length), "what was emitted is a correct prefix");
      assert.equal(log.open, 0, "every handle released");
    }
  }

  it("a flipped byte in an uncompressed chunk: hash mismatch", async () => {
    const { file, xorbs } = await mixedFile();
    const a = xorbs[0];
    // Chunk 1 of xorb a is raw random bytes: the flip decodes fine and only the hash catches it.
    await replaceBlob(a, (bytes) => {
      bytes[chunkStart(a, 1) + XORB_CHUNK_HEADER_BYTES + 500] ^= 0x01;
      return bytes;
    });
    await assertFailsAfterPrefix(file, 20_000, "corrupt_xorb", new RegExp(`xorb ${hashToHex(a.xorb.info.hash)} is damaged: chunk 1 .*hash differs`));
  });

  it("a damaged LZ4 payload: undecodable or a hash mismatch", async () => {
    const { file, xorbs } = await mixedFile();
    const a = xorbs[0];
    await replaceBlob(a, (bytes) => {
      const payload = chunkStart(a, 0) + XORB_CHUNK_HEADER_BYTES;
      for (let i = 20; i < 60; i++) bytes[payload + i] ^= 0x5a;
      return bytes;
    });
    await assertFailsAfterPrefix(file, 0, "corrupt_xorb", /chunk 0 .*(does not decode|hash differs)/);
  });

  it("a chunk header that disagrees with the chunk table", async () => {
    const { file, xorbs } = await mixedFile();
    const c = xorbs[2];
    await replaceBlob(c, (bytes) => {
      bytes[chunkStart(c, 1) + 5] ^= 0x01; // uncompressed size
      return bytes;
    });
    const cStart = file.bytes.length - 4_096 - 1 - (22_222 + 17 + 30_000);
    await assertFailsAfterPrefix(
      file,
      cStart + 22_222,
      "corrupt_xorb",
      /chunk 1 .*has header version 0, \d+ payload bytes and 16 uncompressed, where its record implies version 0, \d+ and 17/,
    );
  });

  it("a truncated blob", async () => {
    const { file, xorbs } = await mixedFile();
    const b = xorbs[1];
    await replaceBlob(b, (bytes) => bytes.subarray(0, chunkStart(b, 3) + 10));
    const bStart = 20_000 + 13_001 + 16_384 + 1 + 9_999 + 31_000;
    await assertFailsAfterPrefix(
      file,
      bStart + 12_345 + 8_192,
      "corrupt_xorb",
      new RegExp(`xorb ${hashToHex(b.xorb.info.hash)} is shorter than its record says`),
    );
  });

  it("a missing blob", async () => {
    const { file, xorbs } = await mixedFile();
    await blobs.delete(blobKey("xorbs", xorbs[2].xorb.info.hash));
    const cStart = file.bytes.length - 4_096 - 1 - (22_222 + 17 + 30_000);
    await assertFailsAfterPrefix(file, cStart, "missing_xorb", /has a record but its blob is not stored/);
  });

  it("a term whose xorb has no record", async () => {
    const { xorbs } = await mixedFile();
    const unrecorded = serializeXorb([{ data: text(1_000, 77) }]);
    const file = await registerFile([
      { of: xorbs[0], start: 0, end: 1 },
      { of: { xorb: unrecorded, data: [text(1_000, 77)] }, start: 0, end: 1 },
    ]);
    await assertFailsAfterPrefix(
      file,
      20_000,
      "missing_xorb",
      new RegExp(`term 1 of file .* uses xorb ${hashToHex(unrecorded.info.hash)}, which has no record`),
    );
  });

  it("records that disagree: a term longer than its chunks, a size that is not the terms' sum", async () => {
    const { xorbs } = await mixedFile();
    const a = xorbs[0];
    const wrongTerm = await registerFile([{ of: a, start: 0, end: 2 }], {
      hash: new Uint8Array(randomBytes(32)),
      terms: [{ xorbHash: a.xorb.info.hash, chunkStart: 0, chunkEnd: 2, unpackedLength: 33_002 }],
      size: 33_002,
    });
    const stored = (await new FileReader({ metadata, blobs }).open(wrongTerm.hash))!;
    const { bytes, error } = await collectUntilError(stored.read());
    isReadError("inconsistent_records", /records 33002 bytes but chunks \[0, 2\) of xorb .* hold 33001/)(error);
    assert.equal(bytes.length, 0);

    const wrongSize = await registerFile([{ of: a, start: 0, end: 2 }], { hash: new Uint8Array(randomBytes(32)), size: 5 });
    await assert.rejects(
      new FileReader({ metadata, blobs }).open(wrongSize.hash),
      isReadError("inconsistent_records", /records 5 bytes but its terms hold 33001/),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Bounded reading: backpressure and destroy

describe("FileReader: bounded reading", () => {
  /** A file of 20 one-chunk spans (maxSpanBytes 1), so spans requested are easy to count. */
  async function twentySpanFile(): Promise<RegisteredFile> {
    const x = await storeXorb(Array.from({ length: 10 }, (_, i) => ({ data: random(8_000, 200 + i) })));
    return registerFile([
      { of: x, start: 0, end: 10 },
      { of: x, start: 0, end: 10 },
    ]);
  }

  for (const readAheadSpans of [0, 2, 5]) {
    it(`a consumer that stops reading leaves at most 1 + readAheadSpans (${readAheadSpans}) spans requested`, async () => {
      const file = await twentySpanFile();
      const { source, log } = instrumented(blobs, true);
      const stored = (await new FileReader({ metadata, blobs: source, maxSpanBytes: 1, readAheadSpans, highWaterMark: 1 }).open(file.hash))!;
      const stream = stored.read();
      // One read(): the stream decodes until its 1-byte buffer is full, i.e. one chunk.
      await once(stream, "readable");
      await until(() => log.requested.length >= 1 + readAheadSpans, "the spans ahead to be requested");
      // Checks that nothing more happens: only letting time pass shows that (a reader that
      // ignored the bound would request the other spans within a few milliseconds).
      await sleep(50);
      assert.equal(log.requested.length, 1 + readAheadSpans, "spans requested while nobody reads");
      assert.equal(stream.readableLength, 8_000, "one decoded chunk is buffered");
      await sleep(50);
      assert.equal(log.requested.length, 1 + readAheadSpans, "still no more");

      // Reading resumes and completes, each span requested exactly once.
      assertBytes(await collect(stream), file.bytes, "the whole file");
      assert.equal(log.requested.length, 20);
      assert.equal(log.open, 0);
    });
  }

  for (const positional of [true, false]) {
    it(`destroying the stream mid-file stops reading and releases every handle (${positional ? "positional" : "stream"} reads)`, async () => {
      const file = await twentySpanFile();
      const { source, log } = instrumented(blobs, positional);
      const stored = (await new FileReader({ metadata, blobs: source, maxSpanBytes: 1, readAheadSpans: 3, highWaterMark: 1 }).open(file.hash))!;
      const stream = stored.read();
      await once(stream, "readable");
      // Reads of the spans ahead are in progress (held before they open) when the stream is destroyed.
      const held = log.hold();
      assert.equal((stream.read() as Buffer).length, 8_000);
      await within(held, "the next span's read to reach the hold");
      // Taking the first chunk let the stream decode one more: 2 spans consumed, 3 ahead.
      const requestedBefore = log.requested.length;
      assert.equal(requestedBefore, 5);
      assert.equal(log.held, 1, "the newest read is held before it opens anything");
      const closed = once(stream, "close");
      stream.destroy();
      log.release();
      await closed;
      assert.equal(log.held, 0, "the held read went on, saw the abort and let go before 'close'");
      assert.equal(log.open, 0, "every handle and stream released by 'close'");
      // Something that must not happen: give a reader that kept going time to show it.
      await sleep(50);
      assert.equal(log.requested.length, requestedBefore, "nothing requested after destroy");
      assert.equal(log.open, 0);
    });
  }

  it("destroying before the first read opens nothing", async () => {
    const file = await twentySpanFile();
    const { source, log } = instrumented(blobs, true);
    const stream = (await new FileReader({ metadata, blobs: source }).open(file.hash))!.read();
    stream.destroy();
    await once(stream, "close");
    assert.equal(log.requested.length, 0);
  });
});

// ---------------------------------------------------------------------------------------------
// The writer for responses

/**
 * A Writable standing in for a socket: it keeps the buffers written to it without copying them
 * and copies them only when `flush()` completes their writes (a socket's bytes leave the
 * buffer when the kernel takes them), so a buffer given back for reuse too early shows up as
 * wrong bytes. With `auto`, every write completes on the next turn of the event loop.
 */
class DeferredSink extends Writable {
  readonly parts: Buffer[] = [];
  private queued: { chunks: Buffer[]; callback: (error?: Error | null) => void }[] = [];
  writes = 0;

  constructor(
    private readonly auto: boolean,
    highWaterMark = 1,
  ) {
    super({ highWaterMark });
  }

  override _writev(chunks: { chunk: Buffer }[], callback: (error?: Error | null) => void): void {
    this.writes++;
    this.queued.push({ chunks: chunks.map((c) => c.chunk), callback });
    if (this.auto) setImmediate(() => this.flush());
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this._writev([{ chunk }], callback);
  }

  /** Completes writes until none are left. */
  async flushAll(): Promise<void> {
    while (this.queued.length > 0 || this.writableLength > 0) {
      this.flush();
      await sleep(0);
    }
  }

  /** Completes the writes queued so far. */
  flush(): void {
    const queued = this.queued;
    this.queued = [];
    for (const { chunks, callback } of queued) {
      for (const chunk of chunks) this.parts.push(Buffer.from(chunk));
      callback();
    }
  }

  get bytes(): Uint8Array {
    return new Uint8Array(Buffer.concat(this.parts));
  }
}

async function writeBody(reader: FileReader, hash: Hash, range?: FileByteRange): Promise<Uint8Array> {
  const file = await reader.open(hash);
  assert.ok(file, `file ${hashToHex(hash)} is registered`);
  const sink = new DeferredSink(true);
  await (await file.body(range)).writeTo(sink);
  return sink.bytes;
}

describe("FileReader: bodies written to responses", () => {
  for (const shape of SHAPES) {
    it(`${shape.name}: whole file and random ranges are byte-exact`, async () => {
      const { file } = await mixedFile();
      const { source, log } = instrumented(blobs, shape.positional);
      const reader = new FileReader({ metadata, blobs: source, ...shape.options });
      const size = file.bytes.length;
      assertBytes(await writeBody(reader, file.hash), file.bytes, "whole file");
      await fc.assert(
        fc.asyncProperty(fc.nat(size - 1), fc.nat(size - 1), async (x, y) => {
          const range = { start: Math.min(x, y), end: Math.max(x, y) };
          assertBytes(await writeBody(reader, file.hash, range), file.bytes.subarray(range.start, range.end + 1), `bytes ${range.start}-${range.end}`);
        }),
        { numRuns: 25 },
      );
      assert.equal(log.open, 0, "every handle released");
    });
  }

  it("span buffers are reused only once their writes completed", async () => {
    const { file } = await mixedFile();
    const reader = new FileReader({ metadata, blobs, maxSpanBytes: 24_000, readAheadSpans: 1 });
    const stored = (await reader.open(file.hash))!;
    // Writes are accepted (no backpressure) but complete only at the end: a span buffer given
    // back before would be refilled by later spans while the sink still points into it.
    const size = file.bytes.length;
    const ranges = [
      { start: 0, end: size - 1 },
      { start: 13, end: size - 14 },
      { start: 70_000, end: 150_000 },
    ];
    for (const range of ranges) {
      const sink = new DeferredSink(false, 1 << 30);
      await (await stored.body(range)).writeTo(sink);
      await sink.flushAll();
      assertBytes(sink.bytes, file.bytes.subarray(range.start, range.end + 1), `bytes ${range.start}-${range.end}`);
    }
    // And concurrently, completing as they go.
    const results = await Promise.all(ranges.map((range) => writeBody(reader, file.hash, range)));
    ranges.forEach((range, i) => {
      assertBytes(results[i], file.bytes.subarray(range.start, range.end + 1), `body ${i}`);
    });
  });

  it("writes a span's chunks corked, as one write", async () => {
    const x = await storeXorb(Array.from({ length: 8 }, (_, i) => ({ data: random(10_000, 300 + i), scheme: CompressionScheme.None })));
    const file = await registerFile([{ of: x, start: 0, end: 8 }]);
    const stored = (await new FileReader({ metadata, blobs }).open(file.hash))!;
    const sink = new DeferredSink(true);
    await (await stored.body()).writeTo(sink);
    assertBytes(sink.bytes, file.bytes, "whole file");
    assert.equal(sink.writes, 1);
  });

  it("an empty file writes nothing", async () => {
    await registerFile([], { hash: ZERO_HASH });
    const stored = (await new FileReader({ metadata, blobs }).open(ZERO_HASH))!;
    const sink = new DeferredSink(true);
    await (await stored.body()).writeTo(sink);
    assert.equal(sink.bytes.length, 0);
  });

  it("damage in the first chunk rejects body() before anything is written; later damage rejects writeTo after a correct prefix", async () => {
    const { file, xorbs } = await mixedFile();
    const a = xorbs[0];
    const key = blobKey("xorbs", a.xorb.info.hash);
    const damaged = new Uint8Array(a.xorb.bytes);
    const chunk1 = a.xorb.info.chunks[0].serializedEnd;
    damaged[chunk1 + XORB_CHUNK_HEADER_BYTES + 500] ^= 0x01;
    await blobs.delete(key);
    await blobs.putIfAbsent(key, damaged);
    const { source, log } = instrumented(blobs, true);
    const stored = (await new FileReader({ metadata, blobs: source, maxSpanBytes: 1 }).open(file.hash))!;

    // Chunk 1 of xorb a is bytes 20,000.. of the file.
    await assert.rejects(stored.body({ start: 20_500, end: 30_000 }), isReadError("corrupt_xorb", /chunk 1 .*hash differs/));
    assert.equal(log.open, 0, "every handle released");

    const sink = new DeferredSink(true);
    const body = await stored.body();
    await assert.rejects(body.writeTo(sink), isReadError("corrupt_xorb", /chunk 1 .*hash differs/));
    sink.flush();
    assert.ok(sink.bytes.length <= 20_000, `wrote ${sink.bytes.length} bytes, more than the 20,000 before the damage`);
    assertBytes(sink.bytes, file.bytes.subarray(0, sink.bytes.length), "what was written is a correct prefix");
    assert.equal(log.open, 0, "every handle released");
  });

  for (const readAheadSpans of [0, 2]) {
    it(`a response that takes nothing leaves at most 1 + readAheadSpans (${readAheadSpans}) spans requested`, async () => {
      const x = await storeXorb(Array.from({ length: 10 }, (_, i) => ({ data: random(8_000, 400 + i) })));
      const file = await registerFile([{ of: x, start: 0, end: 10 }]);
      const { source, log } = instrumented(blobs, true);
      const stored = (await new FileReader({ metadata, blobs: source, maxSpanBytes: 1, readAheadSpans }).open(file.hash))!;
      const sink = new DeferredSink(false);
      const writing = (await stored.body()).writeTo(sink);
      await sleep(50);
      assert.equal(log.requested.length, 1 + readAheadSpans, "spans requested while the response takes nothing");
      // Completing writes one by one lets it through to the end.
      let done = false;
      void writing.then(() => (done = true));
      while (!done) {
        sink.flush();
        await sleep(1);
      }
      assertBytes(sink.bytes, file.bytes, "the whole file");
      assert.equal(log.requested.length, 10);
      assert.equal(log.open, 0);
    });
  }

  it("a response destroyed mid-file stops the reads: writeTo resolves once every handle is released", async () => {
    const x = await storeXorb(Array.from({ length: 10 }, (_, i) => ({ data: random(8_000, 500 + i) })));
    const file = await registerFile([{ of: x, start: 0, end: 10 }]);
    const { source, log } = instrumented(blobs, true);
    const stored = (await new FileReader({ metadata, blobs: source, maxSpanBytes: 1, readAheadSpans: 3 }).open(file.hash))!;
    const sink = new DeferredSink(false);
    const writing = (await stored.body()).writeTo(sink);
    await sleep(20);
    log.hold();
    sink.flush();
    await sleep(20);
    const requestedBefore = log.requested.length;
    assert.equal(log.held, 1, "the newest read is held before it opens anything");
    sink.destroy();
    log.release();
    await writing;
    assert.equal(log.held, 0);
    assert.equal(log.open, 0, "every handle released when writeTo resolves");
    await sleep(50);
    assert.equal(log.requested.length, requestedBefore, "nothing requested after the response closed");
  });

  it("a body given up without writing releases its reads", async () => {
    const { file } = await mixedFile();
    const { source, log } = instrumented(blobs, true);
    const stored = (await new FileReader({ metadata, blobs: source, maxSpanBytes: 1, readAheadSpans: 2 }).open(file.hash))!;
    const body = await stored.body();
    await body.close();
    assert.equal(log.open, 0);
    await assert.rejects(body.writeTo(new DeferredSink(true)), /written once/);
  });
});
