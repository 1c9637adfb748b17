/**
 * Ranges of upstream xorbs served from castor's store while a mirror fetches them
 * (src/mirror/upstream-xorbs.ts): a range assembled from the chunk runs of castor's xorbs,
 * across runs and xorbs; the answers while nothing holds it yet (waiting, then `pending`), once
 * the fetch failed, once castor stores the xorb itself, and when no fetch runs at all.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { describe, it } from "node:test";
import { hashToHex, type Hash } from "../../src/format/hash.js";
import { byteRange } from "../../src/format/ranges.js";
import type { XorbRecord } from "../../src/metadata/cas.js";
import type { ChunkRun } from "../../src/metadata/mirror.js";
import { UpstreamXorbs } from "../../src/mirror/upstream-xorbs.js";
import { blobKeyParts, type BlobKey, type ByteSpan } from "../../src/storage/blob-store.js";

function hashOf(byte: number): Hash {
  return new Uint8Array(32).fill(byte) as Hash;
}

/** A castor xorb record whose chunks have these serialized sizes. */
function xorbRecord(hash: Hash, sizes: number[]): XorbRecord {
  let end = 0;
  const chunks = sizes.map((size, i) => ({ hash: hashOf(100 + i), uncompressedLength: size, serializedEnd: (end += size) }));
  return { hash, serializedLength: end, uncompressedLength: end, chunks };
}

// Upstream xorb U: four chunks of 10, 20, 30 and 40 serialized bytes. castor holds chunks 0–1
// in xorb A (after a chunk of another file) and chunks 2–3 in xorb B.
const upstream = hashOf(1);
const upstreamBytes = randomBytes(100);
const a = xorbRecord(hashOf(2), [5, 10, 20]);
const b = xorbRecord(hashOf(3), [30, 40]);
const stored = new Map<string, Buffer>([
  [hashToHex(a.hash), Buffer.concat([randomBytes(5), upstreamBytes.subarray(0, 30)])],
  [hashToHex(b.hash), upstreamBytes.subarray(30)],
]);
const runs: ChunkRun[] = [
  { upstreamXorb: upstream, upstreamStart: 0, upstreamEnd: 2, upstreamOffset: 0, xorb: a.hash, start: 1 },
  { upstreamXorb: upstream, upstreamStart: 2, upstreamEnd: 4, upstreamOffset: 30, xorb: b.hash, start: 0 },
];

interface World {
  runs: ChunkRun[];
  whole: boolean;
  localFills: number;
  failure?: string;
}

function xorbsOf(world: World): UpstreamXorbs {
  const tables = new Map([a, b].map((xorb) => [hashToHex(xorb.hash), xorb]));
  return new UpstreamXorbs({
    store: {
      getXorbs: async (hashes) =>
        new Map(hashes.map((hash) => [hashToHex(hash), tables.get(hashToHex(hash))!] as const).filter(([, xorb]) => xorb !== undefined)),
      mirror: {
        findChunkRuns: async (xorbs) => world.runs.filter((run) => xorbs.some((xorb) => hashToHex(xorb) === hashToHex(run.upstreamXorb))),
        activeFills: async () => 0,
      },
    },
    blobs: {
      exists: async (key: BlobKey) => world.whole && blobKeyParts(key).hex === hashToHex(upstream),
      read: async (key: BlobKey, span?: ByteSpan) => {
        const bytes = stored.get(blobKeyParts(key).hex)!;
        return Readable.from([bytes.subarray(span!.offset, span!.offset + span!.length!)]);
      },
    },
    localFills: () => world.localFills,
    failure: () => world.failure,
    pollMs: 1,
  });
}

describe("upstream xorb ranges served from castor's store", () => {
  it("assembles a range from the runs of castor's xorbs, within one run and across two", async () => {
    const xorbs = xorbsOf({ runs, whole: false, localFills: 0 });
    for (const [start, end] of [
      [0, 99],
      [10, 59],
      [30, 59],
      [0, 9],
    ]) {
      const found = await xorbs.range(hashToHex(upstream), byteRange(start, end), 0);
      assert.ok(found !== null && typeof found === "object" && "body" in found, `${start}-${end} assembled`);
      assert.equal(found.length, end - start + 1);
      assert.ok((await buffer(found.body)).equals(upstreamBytes.subarray(start, end + 1)), `${start}-${end}: the upstream's bytes`);
    }
  });

  it("answers null for a range no run covers when no fetch runs, `pending` when one runs past the wait", async () => {
    const partial = { runs: runs.slice(0, 1), whole: false, localFills: 0 };
    assert.equal(await xorbsOf(partial).range(hashToHex(upstream), byteRange(0, 59), 0), null);
    // A range ending inside a chunk is not one castor hands out.
    assert.equal(await xorbsOf({ ...partial, runs }).range(hashToHex(upstream), byteRange(0, 15), 0), null);
    assert.equal(await xorbsOf({ ...partial, localFills: 1 }).range(hashToHex(upstream), byteRange(0, 59), 20), "pending");
  });

  it("tells the fetch's failure, and `stored` once castor holds the upstream xorb itself", async () => {
    assert.deepEqual(
      await xorbsOf({ runs: [], whole: false, localFills: 1, failure: "the upstream corrupted it" }).range(hashToHex(upstream), byteRange(0, 9), 1000),
      {
        failed: "the upstream corrupted it",
      },
    );
    assert.equal(await xorbsOf({ runs: [], whole: true, localFills: 1 }).range(hashToHex(upstream), byteRange(0, 9), 1000), "stored");
  });

  it("waits while a fetch runs and answers once the runs are recorded", async () => {
    const world: World = { runs: [], whole: false, localFills: 1 };
    const waiting = xorbsOf(world).range(hashToHex(upstream), byteRange(30, 99), 10_000);
    setTimeout(() => {
      world.runs = runs;
    }, 20);
    const found = await waiting;
    assert.ok(found !== null && typeof found === "object" && "body" in found);
    assert.ok((await buffer(found.body)).equals(upstreamBytes.subarray(30)));
  });
});
