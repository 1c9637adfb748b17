import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { bg4Regroup, bg4Split } from "../../src/format/bg4.js";
import { compressChunk, CompressionScheme, decompressChunk, MAX_CHUNK_UNCOMPRESSED_BYTES } from "../../src/format/compression.js";
import { FormatError } from "../../src/format/errors.js";
import { decodeLz4Frame, encodeLz4Frame, LZ4_BLOCK_MAX_SIZES, xxh32 } from "../../src/format/lz4.js";

const SCHEMES = [CompressionScheme.None, CompressionScheme.LZ4, CompressionScheme.ByteGrouping4LZ4] as const;

/**
 * Runs of repeated fragments, cycled up to a drawn length (often past a 64 KiB block), with a
 * byte changed after every run so repeats are near-misses too: literals, matches, overlaps.
 */
const compressibleBytes = (maxLength: number) =>
  fc
    .record({
      length: fc.oneof(fc.integer({ min: 0, max: 4096 }), fc.integer({ min: 0, max: maxLength })),
      runs: fc.array(fc.tuple(fc.uint8Array({ minLength: 1, maxLength: 64 }), fc.integer({ min: 1, max: 300 })), {
        minLength: 1,
        maxLength: 12,
      }),
    })
    .map(({ length, runs }) => {
      const out = new Uint8Array(length);
      let at = 0;
      for (let pass = 1; at < length; pass++) {
        for (const [fragment, repeat] of runs) {
          for (let r = 0; r < repeat && at < length; r++) {
            const n = Math.min(fragment.length, length - at);
            out.set(fragment.subarray(0, n), at);
            at += n;
          }
          out[at - 1] ^= pass & 0xff;
        }
      }
      return out;
    });

/**
 * Pseudo-random letters from a small alphabet: LZ4 shrinks them only somewhat, so 64 KiB of it
 * is a large compressed block (the native decoding path) rather than a few long matches.
 */
const lowEntropyBytes = (maxLength: number) =>
  fc.record({ length: fc.integer({ min: 0, max: maxLength }), alphabet: fc.integer({ min: 2, max: 40 }), seed: fc.nat() }).map(({ length, alphabet, seed }) => {
    const out = new Uint8Array(length);
    let state = seed;
    for (let i = 0; i < length; i++) {
      state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
      out[i] = 0x41 + ((state >>> 16) % alphabet);
    }
    return out;
  });

const chunkBytes = fc.oneof(fc.uint8Array({ maxLength: 3000 }), compressibleBytes(MAX_CHUNK_UNCOMPRESSED_BYTES), lowEntropyBytes(MAX_CHUNK_UNCOMPRESSED_BYTES));

const frameOptions = fc.record({
  blockMaxSize: fc.constantFrom(...LZ4_BLOCK_MAX_SIZES),
  linkedBlocks: fc.boolean(),
  blockChecksums: fc.boolean(),
  contentSize: fc.boolean(),
  contentChecksum: fc.boolean(),
});

/** The only acceptable outcomes for hostile input: exactly `size` bytes, or a FormatError. */
function decodesExactlyOrFormatError(decode: () => Uint8Array, size: number): void {
  let result: Uint8Array;
  try {
    result = decode();
  } catch (err) {
    if (err instanceof FormatError) return;
    throw err;
  }
  assert.equal(result.length, size);
}

type Mutation =
  | { kind: "truncate"; at: number }
  | { kind: "flip"; at: number; bit: number }
  | { kind: "overwrite"; at: number; bytes: Uint8Array }
  | { kind: "insert"; at: number; bytes: Uint8Array }
  | { kind: "append"; bytes: Uint8Array };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ kind: fc.constant("flip" as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant("overwrite" as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }),
  fc.record({ kind: fc.constant("insert" as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }),
  fc.record({ kind: fc.constant("append" as const), bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }),
);

function mutate(payload: Uint8Array, m: Mutation): Uint8Array {
  const at = m.kind === "append" ? payload.length : payload.length === 0 ? 0 : m.at % payload.length;
  switch (m.kind) {
    case "truncate":
      return payload.subarray(0, at);
    case "flip": {
      const copy = Uint8Array.from(payload);
      if (copy.length > 0) copy[at] ^= 1 << m.bit;
      return copy;
    }
    case "overwrite": {
      const copy = Uint8Array.from(payload);
      copy.set(m.bytes.subarray(0, Math.max(0, copy.length - at)), at);
      return copy;
    }
    case "insert":
    case "append":
      return Uint8Array.from([...payload.subarray(0, at), ...m.bytes, ...payload.subarray(at)]);
  }
}

describe("property: round trips", () => {
  it("every scheme round-trips any chunk", () => {
    fc.assert(
      fc.property(chunkBytes, fc.constantFrom(...SCHEMES), (data, scheme) => {
        const decoded = decompressChunk(scheme, compressChunk(data, scheme), data.length);
        assert.deepEqual(decoded, data);
      }),
      { numRuns: 150 },
    );
  });

  it("every frame option combination round-trips, across block boundaries", () => {
    fc.assert(
      fc.property(fc.oneof(compressibleBytes(300_000), lowEntropyBytes(300_000)), frameOptions, (data, options) => {
        assert.deepEqual(decodeLz4Frame(encodeLz4Frame(data, options), data.length), data);
      }),
      { numRuns: 60 },
    );
  });

  it("BG4 regroup inverts split and split only permutes bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), (data) => {
        const grouped = bg4Split(data);
        assert.deepEqual(bg4Regroup(grouped), data);
        assert.deepEqual(Array.from(grouped).sort(), Array.from(data).sort());
      }),
      { numRuns: 300 },
    );
  });
});

describe("property: hostile payloads only ever yield a FormatError or exactly the declared size", () => {
  it("mutated valid payloads", () => {
    fc.assert(
      fc.property(
        chunkBytes,
        fc.constantFrom(CompressionScheme.LZ4, CompressionScheme.ByteGrouping4LZ4),
        frameOptions,
        fc.array(mutation, { minLength: 1, maxLength: 3 }),
        (data, scheme, options, mutations) => {
          const source = scheme === CompressionScheme.ByteGrouping4LZ4 ? bg4Split(data) : data;
          let payload = encodeLz4Frame(source, options);
          for (const m of mutations) payload = mutate(payload, m);
          decodesExactlyOrFormatError(() => decompressChunk(scheme, payload, data.length), data.length);
        },
      ),
      { numRuns: 400 },
    );
  });

  it("valid payloads under a wrong declared size", () => {
    fc.assert(
      fc.property(chunkBytes, fc.constantFrom(...SCHEMES), fc.integer({ min: 0, max: MAX_CHUNK_UNCOMPRESSED_BYTES }), (data, scheme, declared) => {
        const payload = compressChunk(data, scheme);
        decodesExactlyOrFormatError(() => decompressChunk(scheme, payload, declared), declared);
        if (declared !== data.length) assert.throws(() => decompressChunk(scheme, payload, declared), FormatError);
      }),
      { numRuns: 150 },
    );
  });

  it("random block data behind a valid frame header", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 0x3f }).map((flags) => 0x40 | (flags & 0x3c)),
        fc.constantFrom(0x40, 0x50, 0x60, 0x70),
        fc.uint8Array({ maxLength: 4000 }),
        fc.integer({ min: 0, max: MAX_CHUNK_UNCOMPRESSED_BYTES }),
        (flg, bd, body, declared) => {
          const descriptor = [flg, bd, ...(flg & 0x08 ? [declared & 0xff, (declared >> 8) & 0xff, declared >> 16, 0, 0, 0, 0, 0] : [])];
          const header = [0x04, 0x22, 0x4d, 0x18, ...descriptor, (xxh32(Uint8Array.from(descriptor)) >>> 8) & 0xff];
          const frame = Uint8Array.from([...header, ...body]);
          decodesExactlyOrFormatError(() => decompressChunk(CompressionScheme.LZ4, frame, declared), declared);
        },
      ),
      { numRuns: 400 },
    );
  });

  it("random block words and block contents (small blocks, JS and native paths)", () => {
    const block = fc.oneof(fc.uint8Array({ minLength: 1, maxLength: 64 }), fc.uint8Array({ minLength: 2048, maxLength: 4096 }));
    fc.assert(
      fc.property(fc.array(fc.tuple(block, fc.boolean()), { minLength: 1, maxLength: 3 }), fc.boolean(), fc.nat({ max: 5000 }), (blocks, linked, declared) => {
        const head = encodeLz4Frame(new Uint8Array(0), { linkedBlocks: linked }).subarray(0, 7);
        const parts: number[] = [...head];
        for (const [bytes, stored] of blocks) {
          const word = (bytes.length | (stored ? 0x8000_0000 : 0)) >>> 0;
          parts.push(word & 0xff, (word >>> 8) & 0xff, (word >>> 16) & 0xff, word >>> 24, ...bytes);
        }
        parts.push(0, 0, 0, 0);
        decodesExactlyOrFormatError(() => decompressChunk(CompressionScheme.LZ4, Uint8Array.from(parts), declared), declared);
      }),
      { numRuns: 400 },
    );
  });
});
