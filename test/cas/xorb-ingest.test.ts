import assert from "node:assert/strict";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { beforeEach, describe, it } from "node:test";
import { ChunkStreamEnd, XorbIngestService, XorbRejectedError } from "../../src/cas/xorb-ingest.js";
import { CompressionScheme, compressChunk } from "../../src/format/compression.js";
import type { FormatErrorCode } from "../../src/format/errors.js";
import { hashFromHex, hashToHex, type Hash } from "../../src/format/hash.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import type { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { blobKey } from "../../src/storage/blob-store.js";
import type { FsBlobStore } from "../../src/storage/fs.js";
import { useFreshCasServices } from "../helpers/stores.js";
import { fromHex, loadVector, makeData, splitmix64Bytes } from "../helpers/vectors.js";

const vector = loadVector("xorb-small.json");
const VECTOR_HASH = hashFromHex(vector.expected.xorb_hash);
const VECTOR_BODY = fromHex(vector.body_hex);
const VECTOR_WITH_FOOTER = fromHex(vector.with_footer_hex);

// Fresh stores and services per test, so no test sees another's xorbs.
const cas = useFreshCasServices("xorb-ingest");
let blobs: FsBlobStore;
let metadata: SqliteMetadataStore;
let service: XorbIngestService;

beforeEach(() => {
  ({ blobs, metadata, ingest: service } = cas());
});

/** Yields `bytes` in pieces of the given sizes (cycled), as a network stream would. */
async function* piecesOf(bytes: Uint8Array, sizes: readonly number[] = [65_536]): AsyncGenerator<Uint8Array> {
  let at = 0;
  for (let i = 0; at < bytes.length; i++) {
    const size = sizes[i % sizes.length];
    // A fresh copy per piece: network buffers are never views of one big array.
    yield bytes.slice(at, at + size);
    at += size;
    await Promise.resolve();
  }
}

/** Records whether a body was read to its end. */
function tracked(bytes: Uint8Array, sizes?: readonly number[]): { body: AsyncIterable<Uint8Array>; readToEnd: () => boolean } {
  let done = false;
  async function* body() {
    yield* piecesOf(bytes, sizes);
    done = true;
  }
  return { body: body(), readToEnd: () => done };
}

async function storedBytes(hash: Hash): Promise<Uint8Array | null> {
  const key = blobKey("xorbs", hash);
  if (!(await blobs.exists(key))) return null;
  const parts: Buffer[] = [];
  for await (const part of await blobs.read(key)) parts.push(part as Buffer);
  return new Uint8Array(Buffer.concat(parts));
}

async function tempFiles(): Promise<string[]> {
  return readdir(join(blobs.root, "tmp"));
}

async function assertNoTrace(hash: Hash): Promise<void> {
  assert.equal(await storedBytes(hash), null, "no blob is published");
  assert.equal(await metadata.getXorbSize(hash), null, "no metadata row");
  assert.deepEqual(await tempFiles(), [], "no temp file is left");
}

async function assertRejected(hash: Hash, body: Uint8Array, code: FormatErrorCode, message: RegExp, sizes?: number[]): Promise<void> {
  await assert.rejects(service.ingest(hash, piecesOf(body, sizes)), (error: unknown) => {
    assert.ok(error instanceof XorbRejectedError, `an XorbRejectedError, got ${String(error)}`);
    assert.equal(error.code, code);
    assert.match(error.message, message);
    return true;
  });
  await assertNoTrace(hash);
}

/** Three chunks: random (stored raw), text-like (LZ4), and smooth numbers (byte-grouped LZ4). */
function sampleXorb(seed = 1n, options: { footer?: boolean } = {}): SerializedXorb {
  return serializeXorb(
    [
      { data: splitmix64Bytes(seed, 20_000), scheme: CompressionScheme.None },
      { data: makeData(30_000, 7, Number(seed % 200n)), scheme: CompressionScheme.LZ4 },
      { data: makeData(12_345, 4, 1), scheme: CompressionScheme.ByteGrouping4LZ4 },
    ],
    options,
  );
}

describe("XorbIngestService: accepted uploads", () => {
  it("streams a xorb into the blob store and records its chunk table", async () => {
    const xorb = sampleXorb();
    const { body, readToEnd } = tracked(xorb.bytes, [1, 7, 8, 100, 4096, 65_536]);
    const result = await service.ingest(xorb.info.hash, body);

    assert.equal(result.wasInserted, true);
    assert.equal(result.outcome, "stored");
    assert.ok(readToEnd());
    assert.deepEqual(await storedBytes(xorb.info.hash), xorb.bytes, "stored bytes are the body, byte for byte");
    assert.equal(await metadata.getXorbSize(xorb.info.hash), xorb.bytes.length);

    const record = (await metadata.getXorbs([xorb.info.hash])).get(hashToHex(xorb.info.hash));
    assert.ok(record);
    assert.deepEqual(record, {
      hash: xorb.info.hash,
      serializedLength: xorb.info.serializedLength,
      uncompressedLength: xorb.info.uncompressedLength,
      chunks: xorb.info.chunks.map((c) => ({ hash: c.hash, uncompressedLength: c.uncompressedLength, serializedEnd: c.serializedEnd })),
    });
    assert.deepEqual(result.record, record);
    assert.deepEqual(await tempFiles(), []);
  });

  it("accepts the protocol vector and records the offsets the vector lists", async () => {
    const result = await service.ingest(VECTOR_HASH, piecesOf(VECTOR_BODY, [333]));
    assert.equal(result.wasInserted, true);
    assert.deepEqual(await storedBytes(VECTOR_HASH), VECTOR_BODY);
    const record = (await metadata.getXorbs([VECTOR_HASH])).get(vector.expected.xorb_hash);
    assert.ok(record);
    assert.equal(record.serializedLength, vector.expected.body_length);
    assert.deepEqual(
      record.chunks.map((c) => ({ hash: hashToHex(c.hash), length: c.uncompressedLength, end: c.serializedEnd })),
      vector.expected.chunks.map((c: { chunk_hash: string; uncompressed_length: number; chunk_boundary_offset: number }) => ({
        hash: c.chunk_hash,
        length: c.uncompressed_length,
        end: c.chunk_boundary_offset,
      })),
    );
  });

  it("validates a footer sent by an older client and stores only the chunk stream", async () => {
    // Pieces that split the footer's "XETBLOB" ident and the last chunk's header.
    const result = await service.ingest(VECTOR_HASH, piecesOf(VECTOR_WITH_FOOTER, [1395, 2, 3, 5, 100]));
    assert.equal(result.wasInserted, true);
    const stored = await storedBytes(VECTOR_HASH);
    assert.deepEqual(stored, VECTOR_BODY, "the footer is not stored");
    assert.equal(await metadata.getXorbSize(VECTOR_HASH), vector.expected.body_length);
    assert.equal(VECTOR_WITH_FOOTER.length - VECTOR_BODY.length, vector.expected.footer.info_length + 4);
  });

  it("answers false for a xorb already recorded, reading the body to its end without storing it again", async () => {
    const xorb = sampleXorb();
    assert.equal((await service.ingest(xorb.info.hash, piecesOf(xorb.bytes))).wasInserted, true);

    // Even a footer variant of the same xorb: the stored bytes stay the first upload's.
    const again = serializeXorb(
      [
        { data: splitmix64Bytes(1n, 20_000), scheme: CompressionScheme.None },
        { data: makeData(30_000, 7, 1), scheme: CompressionScheme.LZ4 },
        { data: makeData(12_345, 4, 1), scheme: CompressionScheme.ByteGrouping4LZ4 },
      ],
      { footer: true },
    );
    assert.deepEqual(again.info.hash, xorb.info.hash);
    const { body, readToEnd } = tracked(again.bytes);
    const result = await service.ingest(xorb.info.hash, body);
    assert.deepEqual(result, { wasInserted: false, outcome: "already_recorded", record: null });
    assert.ok(readToEnd(), "the body was drained, so the client is not cut off mid-send");
    assert.deepEqual(await storedBytes(xorb.info.hash), xorb.bytes);
    assert.deepEqual(await tempFiles(), []);
  });

  it("repairs a crash between blob commit and metadata: the next upload records the xorb", async () => {
    const xorb = sampleXorb();
    // What a crash right after the commit leaves: the blob, and no metadata.
    assert.deepEqual(await blobs.putIfAbsent(blobKey("xorbs", xorb.info.hash), xorb.bytes), { inserted: true });
    assert.equal(await metadata.getXorbSize(xorb.info.hash), null);

    const result = await service.ingest(xorb.info.hash, piecesOf(xorb.bytes));
    assert.equal(result.wasInserted, true);
    assert.equal(result.outcome, "already_stored");
    assert.equal(await metadata.getXorbSize(xorb.info.hash), xorb.bytes.length);
    assert.deepEqual(await tempFiles(), []);
  });

  it("records the layout of the bytes actually stored when another encoding of the same xorb was published first", async () => {
    const data = [makeData(40_000, 3, 5), makeData(50_000, 11, 2)];
    const raw = serializeXorb(data.map((d) => ({ data: d, scheme: CompressionScheme.None })));
    const lz4 = serializeXorb(data.map((d) => ({ data: d, scheme: CompressionScheme.LZ4 })));
    assert.deepEqual(raw.info.hash, lz4.info.hash, "the xorb hash ignores compression");
    assert.notEqual(raw.bytes.length, lz4.bytes.length);

    await blobs.putIfAbsent(blobKey("xorbs", raw.info.hash), raw.bytes);
    const result = await service.ingest(lz4.info.hash, piecesOf(lz4.bytes));
    assert.equal(result.wasInserted, true);
    assert.equal(result.outcome, "already_stored");
    assert.deepEqual(await storedBytes(raw.info.hash), raw.bytes, "the published bytes are untouched");
    const record = (await metadata.getXorbs([raw.info.hash])).get(hashToHex(raw.info.hash));
    assert.equal(record?.serializedLength, raw.bytes.length);
    assert.deepEqual(
      record?.chunks.map((c) => c.serializedEnd),
      raw.info.chunks.map((c) => c.serializedEnd),
      "offsets describe the stored encoding, not the uploaded one",
    );
  });

  it("lets exactly one of 16 concurrent uploads of one xorb report the insertion", async () => {
    const xorb = sampleXorb(7n);
    const results = await Promise.all(Array.from({ length: 16 }, (_, i) => service.ingest(xorb.info.hash, piecesOf(xorb.bytes, [1000 + 97 * i]))));
    assert.equal(results.filter((r) => r.wasInserted).length, 1);
    assert.deepEqual(await storedBytes(xorb.info.hash), xorb.bytes);
    assert.equal(await metadata.getXorbSize(xorb.info.hash), xorb.bytes.length);
    assert.deepEqual(await tempFiles(), []);
  });

  it("accepts a body exactly at the cap", async () => {
    const xorb = sampleXorb();
    const capped = new XorbIngestService({ blobs, metadata, maxBodyBytes: xorb.bytes.length });
    assert.equal((await capped.ingest(xorb.info.hash, piecesOf(xorb.bytes))).wasInserted, true);
  });
});

describe("XorbIngestService: rejected uploads leave no trace", () => {
  it("rejects a body whose hash is not the one named", async () => {
    const xorb = sampleXorb();
    const other = sampleXorb(2n).info.hash;
    await assertRejected(other, xorb.bytes, "hash_mismatch", new RegExp(`${hashToHex(xorb.info.hash)}.*${hashToHex(other)}`));
  });

  it("rejects an empty body", async () => {
    await assertRejected(VECTOR_HASH, new Uint8Array(0), "empty_xorb", /no chunks/);
  });

  it("rejects a truncated body, whether cut in a payload or in a header", async () => {
    await assertRejected(VECTOR_HASH, VECTOR_BODY.subarray(0, VECTOR_BODY.length - 10), "truncated", /truncated/);
    await assertRejected(VECTOR_HASH, VECTOR_BODY.subarray(0, 294 + 5), "truncated", /truncated.*header/);
  });

  it("rejects a bad chunk header version and an unknown compression scheme", async () => {
    const badVersion = VECTOR_BODY.slice();
    badVersion[294] = 1; // chunk 1's version byte
    await assertRejected(VECTOR_HASH, badVersion, "bad_chunk_header", /chunk 1 .*version/);
    const badScheme = VECTOR_BODY.slice();
    badScheme[4] = 99;
    await assertRejected(VECTOR_HASH, badScheme, "unknown_compression_scheme", /scheme 99/);
  });

  it("rejects a payload that is not an LZ4 frame and one that decodes to another length", async () => {
    const badFrame = VECTOR_BODY.slice();
    badFrame.fill(0, 8, 12); // chunk 0's LZ4 frame magic
    await assertRejected(VECTOR_HASH, badFrame, "bad_compression", /chunk 0/);

    const wrongLength = VECTOR_BODY.slice();
    wrongLength[5] -= 1; // chunk 0 declares 999 uncompressed bytes; its frame holds 1000
    await assertRejected(VECTOR_HASH, wrongLength, "decompressed_size_mismatch", /chunk 0/);
  });

  it("rejects a decompression bomb: a frame that expands past its declared size", async () => {
    const payload = compressChunk(new Uint8Array(131_072), CompressionScheme.LZ4);
    const header = Uint8Array.of(0, payload.length & 0xff, (payload.length >> 8) & 0xff, payload.length >> 16, 1, 100, 0, 0);
    const body = new Uint8Array([...header, ...payload]);
    await assert.rejects(service.ingest(VECTOR_HASH, piecesOf(body)), (error: unknown) => {
      assert.ok(error instanceof XorbRejectedError);
      assert.ok(["bad_compression", "decompressed_size_mismatch"].includes(error.code), error.code);
      return true;
    });
    await assertNoTrace(VECTOR_HASH);
  });

  it("rejects chunks over the per-chunk limits before reading their payload", async () => {
    const tooBig = Uint8Array.of(0, 0x00, 0x00, 0x02, 0, 0x01, 0x00, 0x02); // uncompressed 131,073
    await assertRejected(VECTOR_HASH, tooBig, "chunk_too_large", /uncompressed size 131073/);
    const tooBigCompressed = Uint8Array.of(0, 0x01, 0x00, 0x04, 1, 0x00, 0x00, 0x01); // compressed 262,145
    await assertRejected(VECTOR_HASH, tooBigCompressed, "chunk_too_large", /compressed size 262145/);
  });

  it("rejects more than 8,192 chunks", async () => {
    const chunkCount = 8193;
    const body = new Uint8Array(chunkCount * 9);
    for (let i = 0; i < chunkCount; i++) body.set([0, 1, 0, 0, 0, 1, 0, 0, i & 0xff], i * 9);
    await assertRejected(VECTOR_HASH, body, "too_many_chunks", /at most 8192 chunks/);
  });

  it("rejects more than 64 MiB of uncompressed data", async () => {
    // 512 chunks of 128 KiB of zeros are exactly 64 MiB; one more byte is too many.
    const zeros = new Uint8Array(131_072);
    const full = serializeXorb(Array.from({ length: 512 }, () => ({ data: zeros, scheme: CompressionScheme.LZ4 })));
    const body = new Uint8Array([...full.bytes, 0, 1, 0, 0, 0, 1, 0, 0, 42]);
    await assertRejected(full.info.hash, body, "xorb_too_large", /uncompressed size/);
  });

  it("rejects junk after the chunks and a footer that contradicts them", async () => {
    const junk = new Uint8Array([...VECTOR_BODY, ...new TextEncoder().encode("XETBLOB and then nonsense")]);
    await assertRejected(VECTOR_HASH, junk, "bad_footer", /footer/);

    const lying = VECTOR_WITH_FOOTER.slice();
    lying[vector.expected.footer.footer_start + 8] ^= 0xff; // the footer's xorb hash
    await assertRejected(VECTOR_HASH, lying, "bad_footer", /xorb hash/);
  });

  it("rejects a body over the cap as soon as the cap is crossed", async () => {
    const xorb = sampleXorb();
    const capped = new XorbIngestService({ blobs, metadata, maxBodyBytes: 10_000 });
    let piecesPulled = 0;
    async function* body() {
      for await (const piece of piecesOf(xorb.bytes, [4096])) {
        piecesPulled++;
        yield piece;
      }
    }
    await assert.rejects(capped.ingest(xorb.info.hash, body()), { code: "xorb_too_large" });
    assert.equal(piecesPulled, 3, "stops at the piece that crossed 10,000 bytes");
    await assertNoTrace(xorb.info.hash);
  });

  it("enforces the cap on the body of an already recorded xorb too", async () => {
    const xorb = sampleXorb();
    await service.ingest(xorb.info.hash, piecesOf(xorb.bytes));
    const capped = new XorbIngestService({ blobs, metadata, maxBodyBytes: 10_000 });
    await assert.rejects(capped.ingest(xorb.info.hash, piecesOf(xorb.bytes)), { code: "xorb_too_large" });
  });

  it("passes a failing body's own error through and discards the staged bytes", async () => {
    const xorb = sampleXorb();
    const broken = new Error("connection reset by peer");
    async function* body() {
      yield xorb.bytes.slice(0, 30_000);
      throw broken;
    }
    await assert.rejects(service.ingest(xorb.info.hash, body()), (error) => error === broken);
    await assertNoTrace(xorb.info.hash);
  });
});

describe("ChunkStreamEnd", () => {
  it("finds the end of the chunk stream whatever the piece boundaries", () => {
    for (const size of [1, 2, 3, 7, 8, 9, 293, 294, 295, 1000]) {
      const walker = new ChunkStreamEnd();
      const kept: number[] = [];
      for (let at = 0; at < VECTOR_WITH_FOOTER.length; at += size) kept.push(...walker.take(VECTOR_WITH_FOOTER.subarray(at, at + size)));
      assert.equal(walker.length, VECTOR_BODY.length, `pieces of ${size}`);
      assert.deepEqual(new Uint8Array(kept), VECTOR_BODY, `pieces of ${size}`);
    }
  });

  it("returns views of the pieces it is given, never copies", () => {
    const walker = new ChunkStreamEnd();
    const piece = VECTOR_BODY.subarray(0, 500);
    assert.equal(walker.take(piece), piece);
  });
});
