/**
 * The WebAssembly boundary scanner must cut exactly where the format's scanner (and xet-core)
 * cut: checked against chunking.json, against `chunkBoundaries`, and under every way of
 * splitting the input into pieces, including pieces that end inside the skip and warm-up zones.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { GearBoundaryScanner } from "../../src/client/gear-scan.js";
import { MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, chunkBoundaries } from "../../src/format/chunker.js";
import { loadVector, splitmix64Bytes } from "../helpers/vectors.js";

const chunking = loadVector("chunking.json");
const vectorNamed = (prefix: string) => {
  const found = chunking.vectors.find((v: { name: string }) => v.name.startsWith(prefix));
  assert.ok(found, `chunking.json has a vector named "${prefix}…"`);
  return found;
};

function scanner(): GearBoundaryScanner {
  const created = GearBoundaryScanner.create();
  assert.ok(created, "WebAssembly runs on Node 20");
  return created;
}

/** Boundaries of `data` fed in pieces of the given sizes (the last piece takes the rest). */
function scanned(data: Uint8Array, pieceSizes: number[] = [], reuse?: GearBoundaryScanner): number[] {
  const gear = reuse ?? scanner();
  const ends: number[] = [];
  let at = 0;
  for (const size of pieceSizes) {
    const end = Math.min(data.length, at + size);
    ends.push(...gear.update(data.subarray(at, end)));
    at = end;
  }
  if (at < data.length) ends.push(...gear.update(data.subarray(at)));
  assert.equal(gear.bytesSeen, data.length);
  ends.push(...gear.finish());
  assert.equal(gear.bytesSeen, 0, "finish() starts a new stream");
  return ends;
}

/** The generator of chunking.json's "triggering pattern" vectors. */
function triggeringData(pattern: number[], padding: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  out.set(pattern);
  let filled = pattern.length + padding;
  while (filled < length) {
    const copy = Math.min(length - filled, filled);
    out.copyWithin(filled, 0, copy);
    filled += copy;
  }
  return out;
}

describe("GearBoundaryScanner (chunking.json)", () => {
  it("cuts the 1 MB splitmix64 vector where xet-core does", () => {
    const spec = loadVector("chunk-hashes.json").vectors.find((c: { name: string }) => c.name.startsWith("1 MB splitmix64"));
    const data = splitmix64Bytes(BigInt(spec.input.seed), spec.input.length);
    assert.deepEqual(scanned(data), vectorNamed("1 MB splitmix64 seed 0").boundaries);
    assert.deepEqual(scanned(data, Array(200).fill(5003)), spec.chunk_end_offsets);
  });

  it("cuts 1,000,000 constant bytes every 131072 bytes (no match at all)", () => {
    assert.deepEqual(scanned(new Uint8Array(1_000_000).fill(0x3b)), vectorNamed("1,000,000 bytes all 0x3B").boundaries);
  });

  it("follows xet-core, not huggingface.js, on all 128 triggering patterns, whole and in 37-byte pieces", () => {
    const triggering = vectorNamed("triggering pattern");
    for (const c of triggering.cases) {
      const data = triggeringData(triggering.pattern, c.padding, 65536);
      assert.deepEqual(scanned(data), c.xet_core_boundaries, `padding ${c.padding}`);
      assert.deepEqual(scanned(data, Array(2000).fill(37)), c.xet_core_boundaries, `padding ${c.padding}, 37-byte pieces`);
    }
  });
});

describe("GearBoundaryScanner equals the format's scanner", () => {
  const data = splitmix64Bytes(11n, 700_000);
  const expected = chunkBoundaries(data);

  it("on random data in pieces of every awkward size", () => {
    assert.ok(expected.length >= 5);
    for (const size of [1, 7, 63, 64, 8127, 8128, 8191, 8192, 65_536, MAX_CHUNK_SIZE - 1, MAX_CHUNK_SIZE, 4 * 1024 * 1024]) {
      assert.deepEqual(scanned(data, Array(Math.ceil(data.length / size)).fill(size)), expected, `pieces of ${size}`);
    }
  });

  it("on pieces ending right at the skip (8128) and first-test (8191) offsets of each chunk", () => {
    const sizes: number[] = [];
    let start = 0;
    for (const end of expected) {
      sizes.push(MIN_CHUNK_SIZE - 64, 63, 1, end - start - MIN_CHUNK_SIZE);
      start = end;
    }
    assert.deepEqual(
      scanned(
        data,
        sizes.filter((size) => size >= 0),
      ),
      expected,
    );
  });

  it("at every byte alignment of the input", () => {
    const slice = data.subarray(0, 300_000);
    const want = chunkBoundaries(slice);
    for (let shift = 0; shift < 8; shift++) {
      const shifted = new Uint8Array(slice.length + shift);
      shifted.set(slice, shift);
      assert.deepEqual(scanned(shifted.subarray(shift)), want, `byteOffset ${shift}`);
    }
  });

  it("on empty input, inputs shorter than a chunk, and exact multiples of the maximum", () => {
    assert.deepEqual(scanned(new Uint8Array(0)), []);
    for (const size of [1, 8127, 8191, 8192]) assert.deepEqual(scanned(data.subarray(0, size)), [size]);
    const constant = new Uint8Array(2 * MAX_CHUNK_SIZE).fill(7);
    assert.deepEqual(scanned(constant), [MAX_CHUNK_SIZE, 2 * MAX_CHUNK_SIZE]);
    assert.deepEqual(scanned(constant.subarray(0, MAX_CHUNK_SIZE + 1)), [MAX_CHUNK_SIZE, MAX_CHUNK_SIZE + 1]);
  });

  it("on one piece larger than the part it scans at once (16 MiB)", () => {
    const big = new Uint8Array(40 * 1024 * 1024);
    for (let at = 0; at < big.length; at += data.length) big.set(data.subarray(0, Math.min(data.length, big.length - at)), at);
    assert.deepEqual(scanned(big), chunkBoundaries(big));
  });

  it("when reused for another stream after finish()", () => {
    const gear = scanner();
    for (let round = 0; round < 3; round++) assert.deepEqual(scanned(data, [100_000, 3], gear), expected);
  });

  it("on generated data and splits (low-entropy runs, random bytes, empty pieces)", () => {
    const input = fc.oneof(
      fc.uint8Array({ minLength: 0, maxLength: 300_000 }),
      // Few distinct bytes: many gear matches, many short chunks.
      fc.tuple(fc.integer({ min: 0, max: 400_000 }), fc.integer({ min: 1, max: 4 }), fc.nat()).map(([length, alphabet, seed]) => {
        const out = new Uint8Array(length);
        let state = seed | 1;
        for (let i = 0; i < length; i++) {
          state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
          out[i] = (state >>> 24) % alphabet;
        }
        return out;
      }),
    );
    fc.assert(
      fc.property(input, fc.array(fc.integer({ min: 0, max: 150_000 }), { maxLength: 12 }), (bytes, pieces) => {
        assert.deepEqual(scanned(bytes, pieces), chunkBoundaries(bytes));
      }),
      { numRuns: 40 },
    );
  });
});
