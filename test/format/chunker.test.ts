import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { ChunkBoundaryScanner, Chunker, GEAR_TABLE, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, chunkBoundaries, splitIntoChunks } from "../../src/format/chunker.js";
import { chunkHash, hashToHex } from "../../src/format/hash.js";
import { loadVector, splitmix64Bytes } from "../helpers/vectors.js";

const chunking = loadVector("chunking.json");
const vectorNamed = (prefix: string) => {
  const found = chunking.vectors.find((v: { name: string }) => v.name.startsWith(prefix));
  assert.ok(found, `chunking.json has a vector named "${prefix}…"`);
  return found;
};

/**
 * The boundary rule of docs/protocol.md §4.2 written as plainly as possible — BigInt, every byte
 * hashed, no skip-ahead — to check the optimised chunker against on data without a vector.
 */
function referenceBoundaries(data: Uint8Array): number[] {
  const u64 = (1n << 64n) - 1n;
  const table = loadVector("gearhash-table.json").map((hex: string) => BigInt(hex)) as bigint[];
  const ends: number[] = [];
  let h = 0n;
  let size = 0;
  for (let i = 0; i < data.length; i++) {
    h = ((h << 1n) + table[data[i]]) & u64;
    size++;
    if ((size >= 8192 && (h & 0xffff000000000000n) === 0n) || size === 131072) {
      ends.push(i + 1);
      h = 0n;
      size = 0;
    }
  }
  if (size > 0) ends.push(data.length);
  return ends;
}

/** The generator of the "triggering pattern" vectors (see that vector's `generator` field). */
function triggeringData(pattern: number[], padding: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  out.set(pattern);
  let filled = pattern.length + padding; // the padding bytes are already zero
  while (filled < length) {
    const copy = Math.min(length - filled, filled);
    out.copyWithin(filled, 0, copy);
    filled += copy;
  }
  return out;
}

/** Deterministic piece sizes (xorshift32) so a failing random split can be replayed. */
function randomPieceSizes(total: number, seed: number, maxPiece: number): number[] {
  const sizes: number[] = [];
  let state = seed >>> 0 || 1;
  let left = total;
  while (left > 0) {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    const size = Math.min(left, state % (maxPiece + 1)); // 0 included: empty pieces are legal
    sizes.push(size);
    left -= size;
  }
  return sizes;
}

function fixedPieceSizes(total: number, size: number): number[] {
  const sizes: number[] = [];
  for (let left = total; left > 0; left -= size) sizes.push(Math.min(size, left));
  return sizes;
}

/** Feeds `data` to `update` in pieces of `pieceSizes` (which must cover it); what the calls returned, in order. */
function feedInPieces<T>(data: Uint8Array, pieceSizes: number[], update: (piece: Uint8Array) => T[]): T[] {
  const out: T[] = [];
  let at = 0;
  for (const size of pieceSizes) {
    out.push(...update(data.subarray(at, at + size)));
    at += size;
  }
  assert.equal(at, data.length, "the piece sizes cover the data");
  return out;
}

function streamedBoundaries(data: Uint8Array, pieceSizes: number[]): number[] {
  const scanner = new ChunkBoundaryScanner();
  const ends = feedInPieces(data, pieceSizes, (piece) => scanner.update(piece));
  assert.equal(scanner.bytesSeen, data.length);
  return [...ends, ...scanner.finish()];
}

function streamedChunks(data: Uint8Array, pieceSizes: number[]): Uint8Array[] {
  const chunker = new Chunker();
  return [...feedInPieces(data, pieceSizes, (piece) => chunker.update(piece)), ...chunker.finish()];
}

function endsOf(chunks: Uint8Array[]): number[] {
  let end = 0;
  return chunks.map((chunk) => (end += chunk.length));
}

describe("gear table", () => {
  it("is the 256 constants of gearhash-table.json", () => {
    const expected = loadVector("gearhash-table.json").map((hex: string) => BigInt(hex));
    assert.deepEqual([...GEAR_TABLE], expected);
  });
});

describe("chunk boundaries (chunking.json, canonical xet-core rule)", () => {
  it("1 MB splitmix64 seed 0", () => {
    const v = vectorNamed("1 MB splitmix64 seed 0");
    const spec = loadVector("chunk-hashes.json").vectors.find((c: { name: string }) => c.name.startsWith("1 MB splitmix64"));
    const data = splitmix64Bytes(BigInt(spec.input.seed), spec.input.length);
    assert.equal(createHash("sha256").update(data).digest("hex"), spec.input.sha256_of_input, "input generator");
    assert.deepEqual(chunkBoundaries(data), v.boundaries);
    assert.deepEqual(chunkBoundaries(data), spec.chunk_end_offsets);
  });

  it("1,000,000 constant bytes are cut every 131072 bytes (forced cuts)", () => {
    const v = vectorNamed("1,000,000 bytes all 0x3B");
    const data = new Uint8Array(1_000_000).fill(0x3b);
    assert.deepEqual(chunkBoundaries(data), v.boundaries);
    assert.deepEqual(referenceBoundaries(data.subarray(0, 300_000)), [131072, 262144, 300_000]);
  });

  const triggering = vectorNamed("triggering pattern");
  it(`all ${triggering.cases.length} triggering patterns give the xet-core boundaries`, () => {
    assert.equal(triggering.cases.length, 128);
    for (const c of triggering.cases) {
      const data = triggeringData(triggering.pattern, c.padding, 65536);
      assert.equal(data[11111], c.data_at_11111, `generator, padding ${c.padding}`);
      assert.deepEqual(chunkBoundaries(data), c.xet_core_boundaries, `padding ${c.padding}`);
    }
  });

  it("does not follow huggingface.js where it accepts a match before 8192 bytes", () => {
    const deviating = triggering.cases.filter((c: { huggingface_js_boundaries?: number[] }) => c.huggingface_js_boundaries);
    assert.equal(deviating.length, 13);
    for (const c of deviating) {
      const ours = chunkBoundaries(triggeringData(triggering.pattern, c.padding, 65536));
      assert.notDeepEqual(ours, c.huggingface_js_boundaries, `padding ${c.padding}`);
      // Every first chunk hf.js cut shorter than 8192 bytes is one xet-core refuses to cut.
      if (c.huggingface_js_boundaries[0] < MIN_CHUNK_SIZE) assert.ok(ours[0] >= MIN_CHUNK_SIZE);
    }
  });

  it("agrees with a plain byte-by-byte BigInt implementation of §4.2", () => {
    const random = splitmix64Bytes(2n, 300_000);
    assert.deepEqual(chunkBoundaries(random), referenceBoundaries(random));
    for (const padding of [1, 24, 61, 104]) {
      const data = triggeringData(triggering.pattern, padding, 65536);
      assert.deepEqual(chunkBoundaries(data), referenceBoundaries(data), `padding ${padding}`);
    }
  });
});

describe("edge sizes", () => {
  it("empty input gives no chunk", () => {
    assert.deepEqual(chunkBoundaries(new Uint8Array(0)), []);
    assert.deepEqual(splitIntoChunks(new Uint8Array(0)), []);
    const chunker = new Chunker();
    assert.deepEqual(chunker.update(new Uint8Array(0)), []);
    assert.deepEqual(chunker.finish(), []);
    assert.deepEqual(new ChunkBoundaryScanner().finish(), []);
  });

  it("input shorter than 8192 bytes is one chunk, whatever it contains", () => {
    const random = splitmix64Bytes(3n, MIN_CHUNK_SIZE);
    for (const size of [1, 100, 8127, 8128, 8191]) {
      assert.deepEqual(chunkBoundaries(random.subarray(0, size)), [size], `size ${size}`);
    }
    // A pattern that matches inside the 64-byte window before 8192 is still one chunk.
    const early = triggeringData(vectorNamed("triggering pattern").pattern, 1, 65536).subarray(0, 8191);
    assert.deepEqual(chunkBoundaries(early), [8191]);
    assert.deepEqual(chunkBoundaries(random), [MIN_CHUNK_SIZE]);
  });

  it("cuts at exactly 131072 bytes when nothing matches", () => {
    const constant = (n: number) => new Uint8Array(n).fill(0x3b);
    assert.deepEqual(chunkBoundaries(constant(MAX_CHUNK_SIZE - 1)), [MAX_CHUNK_SIZE - 1]);
    assert.deepEqual(chunkBoundaries(constant(MAX_CHUNK_SIZE)), [MAX_CHUNK_SIZE]);
    assert.deepEqual(chunkBoundaries(constant(MAX_CHUNK_SIZE + 1)), [MAX_CHUNK_SIZE, MAX_CHUNK_SIZE + 1]);
    assert.deepEqual(chunkBoundaries(constant(2 * MAX_CHUNK_SIZE)), [MAX_CHUNK_SIZE, 2 * MAX_CHUNK_SIZE]);
  });

  it("splitIntoChunks returns views covering the input", () => {
    const data = splitmix64Bytes(4n, 400_000);
    const chunks = splitIntoChunks(data);
    assert.deepEqual(endsOf(chunks), chunkBoundaries(data));
    for (const chunk of chunks) {
      assert.equal(chunk.buffer, data.buffer);
      assert.ok(chunk.length <= MAX_CHUNK_SIZE);
    }
    assert.deepEqual(Buffer.concat(chunks), Buffer.from(data));
  });

  it("gives the same boundaries at every byte alignment of the input", () => {
    const data = splitmix64Bytes(5n, 300_000);
    const expected = referenceBoundaries(data);
    for (let shift = 0; shift < 8; shift++) {
      const shifted = new Uint8Array(data.length + shift);
      shifted.set(data, shift);
      assert.deepEqual(chunkBoundaries(shifted.subarray(shift)), expected, `byteOffset ${shift}`);
    }
    const pooled = Buffer.from(data); // a Buffer may sit at any offset of a shared pool
    assert.deepEqual(chunkBoundaries(pooled), expected);
  });

  it("rejects input that is not bytes with a TypeError", () => {
    for (const bad of ["abc", null, [1, 2, 3], new ArrayBuffer(8)]) {
      assert.throws(() => new Chunker().update(bad as unknown as Uint8Array), TypeError);
      assert.throws(() => new ChunkBoundaryScanner().update(bad as unknown as Uint8Array), /Uint8Array/);
    }
  });
});

describe("streaming", () => {
  const data = splitmix64Bytes(1n, 256_000); // the streaming-invariance vector's input
  const whole = chunkBoundaries(data);

  it("the streaming-invariance input has several chunks", () => {
    vectorNamed("streaming invariance");
    assert.ok(whole.length >= 3, `${whole.length} chunks`);
  });

  for (const size of [1, 37, 255, 8191, 8192, 65536, MAX_CHUNK_SIZE]) {
    it(`pieces of ${size} bytes give the same boundaries and chunks`, () => {
      const sizes = fixedPieceSizes(data.length, size);
      assert.deepEqual(streamedBoundaries(data, sizes), whole);
      const chunks = streamedChunks(data, sizes);
      assert.deepEqual(endsOf(chunks), whole);
      assert.deepEqual(Buffer.concat(chunks), Buffer.from(data));
    });
  }

  it("random splits (including empty pieces) give the same boundaries and chunks", () => {
    for (const [seed, maxPiece] of [
      [1, 300],
      [2, 9000],
      [3, 70_000],
      [4, 200_000],
    ]) {
      const sizes = randomPieceSizes(data.length, seed, maxPiece);
      assert.deepEqual(streamedBoundaries(data, sizes), whole, `seed ${seed}`);
      const chunks = streamedChunks(data, sizes);
      assert.deepEqual(endsOf(chunks), whole, `seed ${seed}`);
      assert.deepEqual(Buffer.concat(chunks), Buffer.from(data), `seed ${seed}`);
    }
  });

  it("pieces ending right at the skip and warm-up limits give the same boundaries", () => {
    const sizes = [8127, 1, 63, 1, 1, 60_000];
    sizes.push(data.length - sizes.reduce((a, b) => a + b, 0));
    assert.deepEqual(streamedBoundaries(data, sizes), whole);
    const triggering = vectorNamed("triggering pattern");
    for (const c of triggering.cases.filter((x: { huggingface_js_boundaries?: number[] }) => x.huggingface_js_boundaries)) {
      const pattern = triggeringData(triggering.pattern, c.padding, 65536);
      assert.deepEqual(streamedBoundaries(pattern, fixedPieceSizes(pattern.length, 37)), c.xet_core_boundaries);
      assert.deepEqual(streamedBoundaries(pattern, [8128, 63, 1, 65536 - 8192]), c.xet_core_boundaries);
    }
  });

  it("a reused read buffer yields the right chunks if each is consumed before the next read", () => {
    const spec = loadVector("chunk-hashes.json").vectors.find((c: { name: string }) => c.name.startsWith("1 MB splitmix64"));
    const file = splitmix64Bytes(BigInt(spec.input.seed), spec.input.length);
    const readBuffer = new Uint8Array(50_000);
    const chunker = new Chunker();
    const hashes: string[] = [];
    for (let at = 0; at < file.length; at += readBuffer.length) {
      const piece = readBuffer.subarray(0, Math.min(readBuffer.length, file.length - at));
      piece.set(file.subarray(at, at + piece.length));
      for (const chunk of chunker.update(piece)) hashes.push(hashToHex(chunkHash(chunk)));
    }
    for (const chunk of chunker.finish()) hashes.push(hashToHex(chunkHash(chunk)));
    assert.deepEqual(hashes, spec.chunk_hashes);
  });

  it("chunkers can be reused after finish()", () => {
    const scanner = new ChunkBoundaryScanner();
    const chunker = new Chunker();
    for (let round = 0; round < 2; round++) {
      const ends = [...scanner.update(data.subarray(0, 100_000)), ...scanner.finish()];
      assert.deepEqual(ends, chunkBoundaries(data.subarray(0, 100_000)));
      assert.equal(scanner.bytesSeen, 0);
      const chunks = [...chunker.update(data.subarray(0, 100_000)), ...chunker.finish()];
      assert.deepEqual(endsOf(chunks), ends);
    }
  });
});
