import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import fc from "fast-check";
import { FileHashBuilder, MerkleMemo, type LeafSource } from "../../src/format/file-hash-builder.js";
import { ZERO_HASH, fileHash, hashToHex, type MerkleEntry } from "../../src/format/hash.js";

/** A source of `count` chunks with random hashes and sizes (some hashes ≡ 0 mod 4, as in real data). */
function sourceOf(count: number, memoId: number, sizes: (i: number) => number = (i) => 1 + ((i * 7919) % 70_000)): LeafSource & { entries: MerkleEntry[] } {
  const hashes = new Uint8Array(randomBytes(count * 32));
  const unpackedOffsets = new Float64Array(count + 1);
  const entries: MerkleEntry[] = [];
  for (let i = 0; i < count; i++) {
    unpackedOffsets[i + 1] = unpackedOffsets[i] + sizes(i);
    entries.push({ hash: hashes.subarray(i * 32, (i + 1) * 32), size: sizes(i) });
  }
  return { hashes, unpackedOffsets, memoId, entries };
}

/** Chunks [start, end) of a source, remembered in the memo unless `memoize` is false. */
type Range = [source: number, start: number, end: number, memoize?: boolean];

/** The builder's file hash and the plain definition's, for the same ranges. */
function bothHashes(sources: ReturnType<typeof sourceOf>[], ranges: readonly Range[], memo: MerkleMemo | null): [string, string] {
  const builder = new FileHashBuilder(memo);
  const leaves: MerkleEntry[] = [];
  for (const [s, start, end, memoize] of ranges) {
    builder.addRange(sources[s], start, end, memoize ?? true);
    leaves.push(...sources[s].entries.slice(start, end));
  }
  assert.equal(builder.leafCount, leaves.length);
  return [hashToHex(builder.fileHash()), hashToHex(fileHash(leaves))];
}

describe("FileHashBuilder", () => {
  it("gives the zero hash for no leaves, and the plain file hash for one, two and three leaves", () => {
    const source = sourceOf(3, 0);
    assert.deepEqual(new FileHashBuilder().fileHash(), ZERO_HASH);
    for (const end of [1, 2, 3]) {
      const [built, plain] = bothHashes([source], [[0, 0, end]], new MerkleMemo());
      assert.equal(built, plain, `${end} leaves`);
    }
  });

  it("matches the plain definition for any ranges of any sources, with and without a memo", () => {
    const sources = [sourceOf(300, 0), sourceOf(40, 1), sourceOf(9, -1), sourceOf(1000, 2)];
    const rangeArb: fc.Arbitrary<Range> = fc
      .integer({ min: 0, max: sources.length - 1 })
      .chain((s) => fc.tuple(fc.constant(s), fc.integer({ min: 0, max: sources[s].entries.length - 1 }), fc.integer({ min: 1, max: 200 }), fc.boolean()))
      .map(([s, start, length, memoize]): Range => [s, start, Math.min(sources[s].entries.length, start + length), memoize]);
    fc.assert(
      fc.property(fc.array(rangeArb, { maxLength: 12 }), fc.constantFrom(-1, 0, 3, 64, 1 << 16), (ranges, capacity) => {
        const [built, plain] = bothHashes(sources, ranges, capacity === -1 ? null : new MerkleMemo(capacity));
        assert.equal(built, plain);
      }),
      { numRuns: 300 },
    );
  });

  it("reuses the nodes of a repeated range: 200 × 1,000 chunks hash as the plain definition says, with few nodes remembered", () => {
    const source = sourceOf(1000, 0);
    const memo = new MerkleMemo();
    const ranges: Range[] = Array.from({ length: 200 }, () => [0, 0, 1000]);
    const [built, plain] = bothHashes([source], ranges, memo);
    assert.equal(built, plain);
    // Distinct nodes: the first-level nodes of the range at each of a few phases and the levels
    // above them, far fewer than the ~60,000 nodes of 200,000 leaves.
    assert.ok(memo.size < 5_000, `${memo.size} nodes remembered`);
  });

  it("keeps a memo shared by several files correct, however often it fills and starts over", () => {
    // Over many random sources: a memo starting over at the wrong moment shows only for some.
    for (let round = 0; round < 30; round++) keepsMemoCorrect([sourceOf(500, 0), sourceOf(500, 1)]);
  });

  function keepsMemoCorrect(sources: ReturnType<typeof sourceOf>[]): void {
    for (const capacity of [1, 10, 1 << 16]) {
      const memo = new MerkleMemo(capacity);
      for (const ranges of [
        [[0, 0, 500]],
        [
          [1, 3, 400],
          [0, 0, 500],
          [1, 3, 400],
        ],
        [
          [0, 1, 499],
          [0, 499, 500],
          [1, 0, 10],
        ],
        [
          [1, 0, 500, false],
          [0, 0, 500],
          [1, 0, 500],
        ],
        [[0, 0, 500]],
      ] as Range[][]) {
        const [built, plain] = bothHashes(sources, ranges, memo);
        assert.equal(built, plain);
      }
      assert.ok(memo.size <= capacity);
    }
  }

  it("starts the next file after fileHash(): one builder hashes files in turn", () => {
    const sources = [sourceOf(400, 0), sourceOf(30, 1)];
    const builder = new FileHashBuilder(new MerkleMemo(50));
    for (const ranges of [
      [[0, 0, 400]],
      [[1, 0, 1]],
      [],
      [
        [1, 0, 30],
        [0, 5, 300],
      ],
      [[0, 0, 2]],
    ] as Range[][]) {
      for (const [s, start, end] of ranges) builder.addRange(sources[s], start, end);
      const plain = fileHash(ranges.flatMap(([s, start, end]) => sources[s].entries.slice(start, end)));
      assert.equal(hashToHex(builder.fileHash()), hashToHex(plain));
    }
  });

  it("remembers nothing of ranges added without memoize", () => {
    const source = sourceOf(1000, 0);
    const memo = new MerkleMemo();
    const [built, plain] = bothHashes(
      [source],
      [
        [0, 0, 1000, false],
        [0, 0, 1000, false],
      ],
      memo,
    );
    assert.equal(built, plain);
    assert.equal(memo.size, 0);
  });

  it("hashes files whose sizes need many digits", () => {
    const source = sourceOf(50, 0, (i) => 2 ** 40 + i);
    const [built, plain] = bothHashes(
      [source],
      [
        [0, 0, 50],
        [0, 10, 20],
      ],
      new MerkleMemo(),
    );
    assert.equal(built, plain);
  });
});
