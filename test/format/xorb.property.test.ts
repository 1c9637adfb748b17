import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { CompressionScheme, decompressChunk } from "../../src/format/compression.js";
import { FormatError } from "../../src/format/errors.js";
import {
  XORB_CHUNK_HEADER_BYTES,
  XorbValidator,
  serializeXorb,
  type XorbChunkInfo,
  type XorbChunkSource,
  type XorbInfo,
  type XorbValidatorOptions,
} from "../../src/format/xorb.js";

/** Chunk data that LZ4 can and cannot shrink: random bytes, short repeated patterns, runs. */
const chunkDataArb = (maxLength: number) =>
  fc.oneof(
    fc.uint8Array({ maxLength }),
    fc.tuple(fc.uint8Array({ minLength: 1, maxLength: 24 }), fc.integer({ min: 0, max: maxLength })).map(([pattern, length]) => {
      const out = new Uint8Array(length);
      for (let i = 0; i < length; i++) out[i] = pattern[i % pattern.length];
      return out;
    }),
    fc.tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 1, max: maxLength })).map(([byte, length]) => new Uint8Array(length).fill(byte)),
  );

/** Full-size chunks (fast-check keeps plain arrays small): seeded noise, patterns or runs. */
const bigChunkDataArb = fc.tuple(fc.integer({ min: 1, max: 131_072 }), fc.integer(), fc.constantFrom("noise", "pattern", "run")).map(([length, seed, kind]) => {
  const out = new Uint8Array(length);
  let state = seed >>> 0;
  for (let i = 0; i < length; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out[i] = kind === "noise" ? state >>> 24 : kind === "pattern" ? (i * 31 + (i >> 9)) & 0xff : seed & 0xff;
  }
  return out;
});

const schemeArb = fc.constantFrom<CompressionScheme | "best">(CompressionScheme.None, CompressionScheme.LZ4, CompressionScheme.ByteGrouping4LZ4, "best");

const chunksArb = (maxChunks: number, maxLength: number): fc.Arbitrary<XorbChunkSource[]> =>
  fc.array(fc.record({ data: chunkDataArb(maxLength), scheme: schemeArb }), { minLength: 1, maxLength: maxChunks });

/** Piece sizes to cut a body into; reused cyclically, zero-length pieces included. */
const piecesArb = fc.array(fc.integer({ min: 0, max: 5000 }), { minLength: 1, maxLength: 20 });

function validateInPieces(bytes: Uint8Array, pieceSizes: readonly number[], options?: XorbValidatorOptions): XorbInfo {
  const validator = new XorbValidator(options);
  let at = 0;
  for (let k = 0; at < bytes.length; k++) {
    const size = pieceSizes[k % pieceSizes.length];
    validator.push(bytes.subarray(at, at + size));
    at += size;
    if (size === 0) {
      // An empty piece is legal; follow it with one byte so the body is always covered.
      validator.push(bytes.subarray(at, at + 1));
      at += 1;
    }
  }
  return validator.finish();
}

function withoutScheme({ scheme: _scheme, ...rest }: XorbChunkInfo): Omit<XorbChunkInfo, "scheme"> {
  return rest;
}

function sourceData(source: XorbChunkSource): Uint8Array {
  assert.ok("data" in source, "the property's chunks are given as data");
  return source.data;
}

type Mutation =
  | { kind: "truncate"; at: number }
  | { kind: "flip"; at: number; xor: number }
  | { kind: "insert"; at: number; bytes: Uint8Array }
  | { kind: "delete"; at: number; count: number }
  | { kind: "overwrite"; at: number; bytes: Uint8Array };

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ kind: fc.constant("flip" as const), at: fc.nat(), xor: fc.integer({ min: 1, max: 255 }) }),
  fc.record({ kind: fc.constant("insert" as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }),
  fc.record({ kind: fc.constant("delete" as const), at: fc.nat(), count: fc.integer({ min: 1, max: 16 }) }),
  fc.record({ kind: fc.constant("overwrite" as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 8 }) }),
);

function applyMutation(bytes: Uint8Array, mutation: Mutation): Uint8Array {
  const at = mutation.at % bytes.length;
  switch (mutation.kind) {
    case "truncate":
      return bytes.slice(0, at);
    case "flip": {
      const out = bytes.slice();
      out[at] ^= mutation.xor;
      return out;
    }
    case "insert":
      return new Uint8Array(Buffer.concat([bytes.subarray(0, at), mutation.bytes, bytes.subarray(at)]));
    case "delete":
      return new Uint8Array(Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + mutation.count)]));
    case "overwrite": {
      const out = bytes.slice();
      out.set(mutation.bytes.subarray(0, Math.max(0, out.length - at)), at);
      return out;
    }
  }
}

describe("xorb properties", () => {
  it("serialize → validate round-trips, whatever the piece sizes", () => {
    fc.assert(
      fc.property(chunksArb(12, 3000), fc.boolean(), piecesArb, (chunks, footer, pieces) => {
        const built = serializeXorb(chunks, { footer });
        const info = validateInPieces(built.bytes, pieces, { expectedHash: built.info.hash });
        assert.deepEqual(info, built.info);
        assert.equal(info.chunks.length, chunks.length);
        assert.equal(built.bytes.length, info.serializedLength + (footer ? 92 + 40 * chunks.length + 4 : 0));
      }),
      { numRuns: 150 },
    );
  });

  it("round-trips full-size chunks (up to 128 KiB, incompressible ones grow under LZ4)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ data: bigChunkDataArb, scheme: schemeArb }), { minLength: 1, maxLength: 3 }),
        fc.boolean(),
        piecesArb,
        (chunks, footer, pieces) => {
          const built = serializeXorb(chunks, { footer });
          assert.deepEqual(validateInPieces(built.bytes, pieces, { expectedHash: built.info.hash }), built.info);
        },
      ),
      { numRuns: 15 },
    );
  });

  it("a mutated xorb yields a FormatError or, if the mutation is harmless, the original result", () => {
    fc.assert(
      fc.property(chunksArb(6, 1500), fc.boolean(), mutationArb, piecesArb, (chunks, footer, mutation, pieces) => {
        const built = serializeXorb(chunks, { footer });
        const mutated = applyMutation(built.bytes, mutation);
        let info: XorbInfo;
        try {
          info = validateInPieces(mutated, pieces, { expectedHash: built.info.hash });
        } catch (err) {
          if (err instanceof FormatError) return;
          throw err;
        }
        // Harmless mutations: the footer's nonce/reserved bytes, cutting off the whole footer, or
        // a chunk's compression-scheme byte when the other scheme decodes the same payload to the
        // same bytes (LZ4 ↔ ByteGrouping4LZ4 on data that byte grouping leaves as it is, such as
        // a run of one byte). The xorb hash binds every chunk's hash and length but not its
        // scheme, so a body that validates must match the original in everything but schemes.
        assert.deepEqual(info.hash, built.info.hash);
        assert.equal(info.serializedLength, built.info.serializedLength);
        assert.deepEqual(info.chunks.map(withoutScheme), built.info.chunks.map(withoutScheme));
        info.chunks.forEach((chunk, i) => {
          if (chunk.scheme === built.info.chunks[i].scheme) return;
          // A changed scheme must decode the mutated payload to exactly the original data.
          const start = i === 0 ? 0 : info.chunks[i - 1].serializedEnd;
          const payload = mutated.subarray(start + XORB_CHUNK_HEADER_BYTES, chunk.serializedEnd);
          assert.deepEqual(decompressChunk(chunk.scheme, payload, chunk.uncompressedLength), sourceData(chunks[i]));
        });
      }),
      { numRuns: 400 },
    );
  });

  it("a body cut at a chunk boundary validates as the prefix of the chunks", () => {
    fc.assert(
      fc.property(chunksArb(8, 1000), fc.nat(), piecesArb, (chunks, cutSeed, pieces) => {
        const built = serializeXorb(chunks);
        const keep = 1 + (cutSeed % chunks.length);
        const end = built.info.chunks[keep - 1].serializedEnd;
        const info = validateInPieces(built.bytes.subarray(0, end), pieces);
        assert.deepEqual(info.chunks, built.info.chunks.slice(0, keep));
        assert.deepEqual(info, serializeXorb(chunks.slice(0, keep)).info);
      }),
      { numRuns: 100 },
    );
  });
});
