import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { CompressionScheme } from "../../src/format/compression.js";
import { FormatError } from "../../src/format/errors.js";
import { expectFormatError } from "../helpers/format-errors.js";
import { chunkHash, hashFromHex, hashToHex, xorbHash } from "../../src/format/hash.js";
import {
  DEFAULT_MAX_XORB_BODY_BYTES,
  MAX_XORB_CHUNKS,
  MAX_XORB_UNCOMPRESSED_BYTES,
  XorbValidator,
  chunkRangeToByteRange,
  chunkRangeUncompressedLength,
  maxXorbFooterBytes,
  parseXorbFooter,
  serializeXorb,
  serializeXorbFooter,
  validateXorb,
  type XorbChunkInfo,
  type XorbInfo,
  type XorbValidatorOptions,
} from "../../src/format/xorb.js";
import { fromHex, loadVector, seededRandom as prng, toHex } from "../helpers/vectors.js";

const vector = loadVector("xorb-small.json");
const body = fromHex(vector.body_hex);
const withFooter = fromHex(vector.with_footer_hex);
const expectedHash = hashFromHex(vector.expected.xorb_hash);
const chunkData: Uint8Array[] = vector.chunk_data_hex.map((hex: string) => fromHex(hex));

interface ExpectedChunk {
  header_offset: number;
  header_hex: string;
  compression_scheme: number;
  compressed_length: number;
  uncompressed_length: number;
  chunk_hash: string;
  chunk_boundary_offset: number;
  unpacked_chunk_offset: number;
}
const expectedChunks: ExpectedChunk[] = vector.expected.chunks;

function pushInPieces(validator: XorbValidator, bytes: Uint8Array, pieceSize: number): void {
  for (let at = 0; at < bytes.length; at += pieceSize) validator.push(bytes.subarray(at, at + pieceSize));
}

function validateInPieces(bytes: Uint8Array, pieceSize: number, options?: XorbValidatorOptions): XorbInfo {
  const validator = new XorbValidator(options);
  pushInPieces(validator, bytes, pieceSize);
  return validator.finish();
}

function validateRandomSplit(bytes: Uint8Array, seed: number, options?: XorbValidatorOptions): XorbInfo {
  const random = prng(seed);
  const validator = new XorbValidator(options);
  let at = 0;
  while (at < bytes.length) {
    const size = Math.floor(random() * 600); // zero-length pieces included on purpose
    validator.push(bytes.subarray(at, at + size));
    at += size;
  }
  return validator.finish();
}

function assertMatchesVector(info: XorbInfo, hasFooter: boolean): void {
  assert.equal(hashToHex(info.hash), vector.expected.xorb_hash);
  assert.equal(info.serializedLength, vector.expected.body_length);
  assert.equal(info.uncompressedLength, expectedChunks[expectedChunks.length - 1].unpacked_chunk_offset);
  assert.equal(info.hasFooter, hasFooter);
  assert.equal(info.chunks.length, expectedChunks.length);
  info.chunks.forEach((chunk, i) => {
    const e = expectedChunks[i];
    assert.equal(hashToHex(chunk.hash), e.chunk_hash, `chunk ${i} hash`);
    assert.equal(chunk.uncompressedLength, e.uncompressed_length, `chunk ${i} length`);
    assert.equal(chunk.serializedEnd, e.chunk_boundary_offset, `chunk ${i} E`);
    assert.equal(chunk.uncompressedEnd, e.unpacked_chunk_offset, `chunk ${i} U`);
    assert.equal(chunk.scheme, e.compression_scheme, `chunk ${i} scheme`);
  });
}

function chunkHeader(compressedSize: number, scheme: number, uncompressedSize: number, version = 0): Uint8Array {
  const h = new Uint8Array(8);
  h[0] = version;
  h[1] = compressedSize & 0xff;
  h[2] = (compressedSize >> 8) & 0xff;
  h[3] = (compressedSize >> 16) & 0xff;
  h[4] = scheme;
  h[5] = uncompressedSize & 0xff;
  h[6] = (uncompressedSize >> 8) & 0xff;
  h[7] = (uncompressedSize >> 16) & 0xff;
  return h;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}

/** A xorb of uncompressed chunks only: independent of the LZ4/BG4 codecs. */
const plain = serializeXorb([
  { data: chunkData[0], scheme: CompressionScheme.None },
  { data: chunkData[1], scheme: CompressionScheme.None },
  { data: chunkData[2], scheme: CompressionScheme.None },
]);
const plainWithFooter = serializeXorb(
  chunkData.map((data) => ({ data, scheme: CompressionScheme.None })),
  { footer: true },
);

/** Legacy v0 footer, built by hand from the layout of §5.4. */
function legacyFooter(info: Pick<XorbInfo, "hash" | "chunks">): Uint8Array {
  const n = info.chunks.length;
  const out = Buffer.alloc(60 + 36 * n + 4);
  out.write("XETBLOB", 0, "latin1");
  out[7] = 0;
  out.set(info.hash, 8);
  out.writeUInt32LE(n, 40);
  info.chunks.forEach((c, i) => {
    out.writeUInt32LE(c.serializedEnd, 44 + 4 * i);
    out.set(c.hash, 44 + 4 * n + 32 * i);
  });
  out.writeUInt32LE(60 + 36 * n, 60 + 36 * n);
  return new Uint8Array(out);
}

describe("xorb validator on the xorb-small vector", () => {
  for (const pieceSize of [body.length, 1, 7, 8, 1000]) {
    it(`validates the upload body pushed in ${pieceSize}-byte pieces`, () => {
      assertMatchesVector(validateInPieces(body, pieceSize), false);
    });
    it(`validates the body with footer pushed in ${pieceSize}-byte pieces`, () => {
      assertMatchesVector(validateInPieces(withFooter, pieceSize), true);
    });
  }

  it("gives the same result for random splits (incl. empty pieces)", () => {
    for (let seed = 1; seed <= 40; seed++) {
      assertMatchesVector(validateRandomSplit(body, seed), false);
      assertMatchesVector(validateRandomSplit(withFooter, seed + 1000), true);
    }
  });

  it("accepts the expected hash and rejects a different one with hash_mismatch", () => {
    assertMatchesVector(validateXorb(body, { expectedHash }), false);
    const wrong = expectedHash.slice();
    wrong[0] ^= 1;
    expectFormatError(() => validateXorb(body, { expectedHash: wrong }), "hash_mismatch", new RegExp(vector.expected.xorb_hash));
    expectFormatError(() => validateXorb(withFooter, { expectedHash: wrong }), "hash_mismatch");
  });

  it("does not depend on the caller's buffer after push returns (straddling chunks are copied)", () => {
    const validator = new XorbValidator();
    const scratch = new Uint8Array(100);
    for (let at = 0; at < withFooter.length; at += scratch.length) {
      const n = Math.min(scratch.length, withFooter.length - at);
      scratch.set(withFooter.subarray(at, at + n));
      validator.push(scratch.subarray(0, n));
      scratch.fill(0xee); // the caller reuses its buffer
    }
    assertMatchesVector(validator.finish(), true);
  });

  it("has chunk data that hashes to the vector's chunk hashes (sanity check of the vector)", () => {
    chunkData.forEach((data, i) => {
      assert.equal(hashToHex(chunkHash(data)), expectedChunks[i].chunk_hash);
    });
  });
});

describe("xorb validator without LZ4 (uncompressed chunks)", () => {
  it("has the vector's chunk hashes and xorb hash, since both only depend on the data", () => {
    const info = validateInPieces(plain.bytes, 13);
    assert.equal(hashToHex(info.hash), vector.expected.xorb_hash);
    assert.deepEqual(info, plain.info);
    assert.deepEqual(
      info.chunks.map((c) => hashToHex(c.hash)),
      expectedChunks.map((c) => c.chunk_hash),
    );
  });

  it("validates a v1 footer in any split", () => {
    for (const size of [1, 7, 64, 5000]) {
      const info = validateInPieces(plainWithFooter.bytes, size);
      assert.equal(info.hasFooter, true);
      assert.equal(info.serializedLength, plain.info.serializedLength);
      assert.deepEqual(info.chunks, plain.info.chunks);
    }
  });

  it("accepts a legacy v0 footer and checks it too", () => {
    const legacy = concat(plain.bytes, legacyFooter(plain.info));
    for (const size of [1, 9, legacy.length]) {
      const info = validateInPieces(legacy, size);
      assert.equal(info.hasFooter, true);
      assert.deepEqual(info.chunks, plain.info.chunks);
    }
    const footer = legacyFooter(plain.info);
    footer[44 + 4] ^= 1; // chunk_boundary_offsets[1]
    expectFormatError(() => validateXorb(concat(plain.bytes, footer)), "bad_footer", /chunk_boundary_offsets\[1\]/);
    const footer2 = legacyFooter(plain.info);
    footer2[44 + 12 + 32 * 2 + 5] ^= 1; // a byte of chunk hash 2
    expectFormatError(() => validateXorb(concat(plain.bytes, footer2)), "bad_footer", /chunk hash 2/);
  });

  it("accepts a single-chunk xorb whose hash is the chunk hash", () => {
    const one = serializeXorb([{ data: chunkData[1], scheme: CompressionScheme.None }]);
    const info = validateXorb(one.bytes, { expectedHash: chunkHash(chunkData[1]) });
    assert.equal(info.chunks.length, 1);
  });

  it("accepts a zero-length chunk (its empty payload completes at the header)", () => {
    const xorb = concat(chunkHeader(0, 0, 0));
    const info = validateInPieces(xorb, 8);
    assert.equal(info.chunks.length, 1);
    assert.equal(info.chunks[0].serializedEnd, 8);
    assert.equal(info.uncompressedLength, 0);
  });
});

describe("xorb validator rejections", () => {
  const okChunk = concat(chunkHeader(3, 0, 3), Uint8Array.of(1, 2, 3));

  it("rejects a header version other than 0, naming chunk and offset", () => {
    const bad = concat(okChunk, chunkHeader(3, 0, 3, 1), Uint8Array.of(1, 2, 3));
    expectFormatError(() => validateXorb(bad), "bad_chunk_header", /chunk 1 \(header at byte 11\).*version is 1/);
  });

  it("rejects bytes that start like a footer ident but are not one", () => {
    const bad = concat(okChunk, new TextEncoder().encode("XETBLOC\x01"), new Uint8Array(200));
    expectFormatError(() => validateXorb(bad), "bad_chunk_header", /neither a chunk header nor a "XETBLOB" footer/);
  });

  it("rejects unknown compression schemes (including xet-core's internal 99)", () => {
    for (const scheme of [3, 99, 255]) {
      expectFormatError(
        () => validateXorb(concat(okChunk, chunkHeader(3, scheme, 3), Uint8Array.of(1, 2, 3))),
        "unknown_compression_scheme",
        new RegExp(`chunk 1 .*scheme ${scheme}`),
      );
    }
  });

  it("rejects uncompressed size 131073 as soon as the header arrives, before the payload", () => {
    const validator = new XorbValidator();
    validator.push(okChunk);
    expectFormatError(() => validator.push(chunkHeader(100, 1, 131_073)), "chunk_too_large", /chunk 1 .*131073/);
  });

  it("rejects compressed size 262145 as soon as the header arrives, before the payload", () => {
    const validator = new XorbValidator();
    expectFormatError(() => validator.push(chunkHeader(262_145, 1, 131_072)), "chunk_too_large", /262145/);
    // The same header split over two pieces is rejected when its last byte arrives.
    const split = new XorbValidator();
    const header = chunkHeader(262_145, 1, 1000);
    split.push(header.subarray(0, 5));
    expectFormatError(() => split.push(header.subarray(5)), "chunk_too_large");
  });

  it("rejects a scheme-0 chunk whose sizes disagree", () => {
    expectFormatError(() => validateXorb(concat(chunkHeader(3, 0, 4), Uint8Array.of(1, 2, 3))), "bad_chunk_header", /equal sizes/);
  });

  it("rejects chunk 8193 at its header", () => {
    const tiny = concat(chunkHeader(1, 0, 1), Uint8Array.of(7));
    const many = new Uint8Array(tiny.length * MAX_XORB_CHUNKS);
    for (let i = 0; i < MAX_XORB_CHUNKS; i++) many.set(tiny, i * tiny.length);
    const validator = new XorbValidator();
    validator.push(many);
    assert.equal(validator.chunkCount, MAX_XORB_CHUNKS);
    expectFormatError(() => validator.push(chunkHeader(1, 0, 1)), "too_many_chunks", /chunk 8192 .*at most 8192/);
    // and exactly 8192 chunks is fine
    const full = validateXorb(many);
    assert.equal(full.chunks.length, MAX_XORB_CHUNKS);
  });

  it("honours a tighter chunk-count limit", () => {
    const validator = new XorbValidator({ maxChunks: 2 });
    validator.push(concat(okChunk, okChunk));
    expectFormatError(() => validator.push(okChunk), "too_many_chunks");
  });

  it("rejects a running uncompressed total of 64 MiB + 1 at the header of the chunk that crosses it", () => {
    const payload = new Uint8Array(131_072);
    const header = chunkHeader(payload.length, 0, payload.length);
    const validator = new XorbValidator();
    for (let i = 0; i < MAX_XORB_UNCOMPRESSED_BYTES / payload.length; i++) {
      validator.push(header);
      validator.push(payload);
    }
    expectFormatError(() => validator.push(chunkHeader(1, 0, 1)), "xorb_too_large", /67108865/);
  });

  it("accepts exactly the tighter uncompressed limit and rejects one byte more", () => {
    const info = validateXorb(concat(okChunk, okChunk), { maxUncompressedBytes: 6 });
    assert.equal(info.uncompressedLength, 6);
    expectFormatError(() => validateXorb(concat(okChunk, okChunk, okChunk), { maxUncompressedBytes: 8 }), "xorb_too_large");
  });

  it("rejects bodies above the body cap", () => {
    expectFormatError(() => validateXorb(concat(okChunk, okChunk), { maxBodyBytes: 21 }), "xorb_too_large", /21 bytes/);
    assert.equal(validateXorb(concat(okChunk, okChunk), { maxBodyBytes: 22 }).chunks.length, 2);
  });

  it("rejects a truncated body at finish()", () => {
    const cases: [Uint8Array, RegExp][] = [
      [okChunk.subarray(0, 5), /5 byte\(s\) into chunk 0's 8-byte header at byte 0/],
      [okChunk.subarray(0, 9), /chunk 0 .*declares 3 payload bytes but only 1 arrived/],
      [concat(okChunk, okChunk.subarray(0, 8)), /chunk 1 .*only 0 arrived/],
      [concat(okChunk, new TextEncoder().encode("XETB")), /into a footer at byte 11/],
    ];
    for (const [bytes, pattern] of cases) {
      for (const size of [1, bytes.length]) expectFormatError(() => validateInPieces(bytes, size), "truncated", pattern);
    }
    for (const cut of [1, 100, 293, 294 + 4, 1397]) {
      expectFormatError(() => validateXorb(body.subarray(0, cut)), "truncated");
    }
  });

  it("rejects an empty xorb and a footer without chunks", () => {
    expectFormatError(() => validateXorb(new Uint8Array(0)), "empty_xorb");
    const emptyFooter = serializeXorbFooter({ hash: xorbHash([]), chunks: [] });
    expectFormatError(() => validateXorb(emptyFooter), "empty_xorb");
  });

  it("reports decoder failures with the chunk index (corrupt LZ4 frame)", () => {
    const garbage = Uint8Array.of(0x04, 0x22, 0x4d, 0x18, 0x40, 0x70, 0xdf, 0xff, 0xff, 0xff, 0x7f, 1, 2, 3);
    expectFormatError(
      () => validateXorb(concat(okChunk, chunkHeader(garbage.length, 1, 1000), garbage)),
      "bad_compression",
      /^chunk 1 \(header at byte 11\): /,
    );
  });

  it("rejects an LZ4 chunk whose decoded length differs from its header", () => {
    const chunk0 = body.slice(0, expectedChunks[0].chunk_boundary_offset);
    chunk0[5] = 0xe7; // uncompressed_size 1000 → 999
    // The seam lets the decoder report this as either code (it may stop at the declared size).
    let caught: unknown;
    try {
      validateXorb(chunk0);
    } catch (err) {
      caught = err;
    }
    assert.ok(caught instanceof FormatError, String(caught));
    assert.ok(["bad_compression", "decompressed_size_mismatch"].includes(caught.code), caught.code);
    assert.match(caught.message, /^chunk 0 \(header at byte 0\): /);
  });

  it("stays failed after the first error and refuses use after finish()", () => {
    const validator = new XorbValidator();
    const first = expectFormatError(() => validator.push(chunkHeader(1, 7, 1)), "unknown_compression_scheme");
    assert.throws(
      () => validator.push(okChunk),
      (err) => err === first,
    );
    assert.throws(
      () => validator.finish(),
      (err) => err === first,
    );
    const done = new XorbValidator();
    done.push(okChunk);
    done.finish();
    assert.throws(() => done.push(okChunk), /already/);
    assert.throws(() => done.finish(), /already/);
  });

  it("refuses limits looser than the protocol's", () => {
    assert.throws(() => new XorbValidator({ maxChunks: MAX_XORB_CHUNKS + 1 }), RangeError);
    assert.throws(() => new XorbValidator({ maxChunkUncompressedBytes: 131_073 }), RangeError);
    assert.throws(() => new XorbValidator({ maxChunkCompressedBytes: 262_145 }), RangeError);
    assert.throws(() => new XorbValidator({ maxUncompressedBytes: MAX_XORB_UNCOMPRESSED_BYTES + 1 }), RangeError);
    assert.throws(() => new XorbValidator({ maxChunks: 0 }), RangeError);
    assert.throws(() => new XorbValidator({ expectedHash: new Uint8Array(31) }), RangeError);
    // Its documented value is checked where users meet it (config.test.ts); here, that it admits every legal xorb.
    assert.ok(DEFAULT_MAX_XORB_BODY_BYTES >= 64 * 1024 * 1024 + 8 * 8192 + maxXorbFooterBytes(8192), "the largest legal xorb fits under the cap");
  });
});

describe("xorb footer validation", () => {
  const footerStart = plain.info.serializedLength;
  const n = plain.info.chunks.length;
  const footerOf = (bytes: Uint8Array) => bytes.slice(footerStart);
  const withMutatedFooter = (mutate: (footer: Buffer) => void): Uint8Array => {
    const footer = Buffer.from(footerOf(plainWithFooter.bytes));
    mutate(footer);
    return concat(plain.bytes, footer);
  };
  const corruptions: [string, (f: Buffer) => void, RegExp][] = [
    ["footer version", (f) => (f[7] = 2), /version is 2/],
    ["xorb hash", (f) => (f[8] ^= 1), /xorb hash/],
    ["hash-section ident", (f) => (f[40] = 0x59), /XBLBHSH/],
    ["hashes_version", (f) => (f[47] = 1), /hashes_version/],
    ["first num_chunks", (f) => f.writeUInt32LE(n - 1, 48), /num_chunks/],
    ["chunk hash", (f) => (f[52 + 32 + 3] ^= 0x10), /chunk hash 1/],
    ["boundary ident", (f) => (f[52 + 32 * n + 6] = 0x54), /XBLBBND/],
    ["boundaries_version", (f) => (f[59 + 32 * n] = 0), /boundaries_version/],
    ["second num_chunks", (f) => f.writeUInt32LE(n + 1, 60 + 32 * n), /disagree/],
    ["chunk boundary offset", (f) => f.writeUInt32LE(f.readUInt32LE(64 + 32 * n + 4) + 1, 64 + 32 * n + 4), /chunk_boundary_offsets\[1\]/],
    ["last chunk boundary offset", (f) => f.writeUInt32LE(f.readUInt32LE(64 + 32 * n + 8) - 1, 64 + 32 * n + 8), /chunk_boundary_offsets\[2\]/],
    ["unpacked offset", (f) => f.writeUInt32LE(f.readUInt32LE(64 + 36 * n) + 1, 64 + 36 * n), /unpacked_chunk_offsets\[0\]/],
    ["decreasing unpacked offset", (f) => f.writeUInt32LE(0, 64 + 36 * n + 4), /unpacked_chunk_offsets\[1\]/],
    ["third num_chunks", (f) => f.writeUInt32LE(0, 64 + 40 * n), /disagree/],
    ["hashes_section_offset_from_end", (f) => f.writeUInt32LE(52 + 40 * n + 4, 68 + 40 * n), /hashes_section_offset_from_end/],
    ["boundary_section_offset_from_end", (f) => f.writeUInt32LE(40, 72 + 40 * n), /boundary_section_offset_from_end/],
    ["info_length", (f) => f.writeUInt32LE(92 + 40 * n - 1, 92 + 40 * n), /info_length/],
  ];
  for (const [field, mutate, pattern] of corruptions) {
    it(`rejects a footer with a corrupt ${field}`, () => {
      const bytes = withMutatedFooter(mutate);
      expectFormatError(() => validateXorb(bytes), "bad_footer", pattern);
      expectFormatError(() => validateInPieces(bytes, 3), "bad_footer", pattern);
    });
  }

  it("rejects a well-formed footer that lists more chunks than the body has", () => {
    const twoChunks = plain.bytes.subarray(0, plain.info.chunks[1].serializedEnd);
    const bytes = concat(twoChunks, footerOf(plainWithFooter.bytes));
    expectFormatError(() => validateXorb(bytes), "bad_footer", /lists 3 chunks, the body has 2/);
  });

  it("ignores the nonce and the reserved buffer bytes (as xet-core's reader does)", () => {
    const withNonce = serializeXorb(
      chunkData.map((data) => ({ data, scheme: CompressionScheme.None })),
      { footer: true, footerNonce: Uint8Array.of(9, 8, 7, 6) },
    );
    assert.deepEqual(validateXorb(withNonce.bytes).chunks, plain.info.chunks);
    assert.deepEqual(Array.from(withNonce.bytes.subarray(footerStart + 76 + 40 * n, footerStart + 80 + 40 * n)), [9, 8, 7, 6]);
    const reserved = withMutatedFooter((f) => (f[85 + 40 * n] = 1));
    assert.equal(validateXorb(reserved).hasFooter, true);
  });

  it("rejects garbage after the footer", () => {
    for (const tail of [Uint8Array.of(0), new Uint8Array(100).fill(0x41)]) {
      const bytes = concat(plainWithFooter.bytes, tail);
      expectFormatError(() => validateXorb(bytes), "bad_footer", /info_length/);
      expectFormatError(() => validateInPieces(bytes, 1), "bad_footer");
    }
  });

  it("rejects a footer missing its last bytes", () => {
    expectFormatError(() => validateXorb(plainWithFooter.bytes.subarray(0, plainWithFooter.bytes.length - 1)), "bad_footer");
    expectFormatError(() => validateXorb(concat(plain.bytes, new TextEncoder().encode("XETBLOB\x01"))), "bad_footer", /shorter/);
  });

  it("rejects chunks after the footer", () => {
    const bytes = concat(plainWithFooter.bytes, plain.bytes);
    expectFormatError(() => validateXorb(bytes), "bad_footer");
  });

  it("rejects an oversized footer as soon as the bound is exceeded, without waiting for finish()", () => {
    const validator = new XorbValidator({ maxChunks: 4 });
    validator.push(plain.bytes);
    const bound = maxXorbFooterBytes(4);
    const junk = new Uint8Array(bound + 1);
    junk.set(new TextEncoder().encode("XETBLOB\x01"));
    validator.push(junk.subarray(0, bound));
    expectFormatError(() => validator.push(junk.subarray(bound)), "bad_footer", /longer than the largest legal footer/);
  });

  it("rejects a v1 footer declaring more chunks than the limit before reading them", () => {
    const f = Buffer.from(footerOf(plainWithFooter.bytes));
    f.writeUInt32LE(0xffffffff, 48);
    expectFormatError(() => parseXorbFooter(f), "bad_footer", /num_chunks 4294967295 exceeds/);
  });
});

describe("xorb serializer and footer writer", () => {
  const vectorPayloads = expectedChunks.map((c) => ({
    payload: body.subarray(c.header_offset + 8, c.chunk_boundary_offset),
    scheme: c.compression_scheme as CompressionScheme,
    uncompressedLength: c.uncompressed_length,
  }));

  it("reproduces the vector body byte for byte from its compressed payloads", () => {
    const { bytes, info } = serializeXorb(vectorPayloads);
    assert.equal(toHex(bytes), vector.body_hex);
    assertMatchesVector(info, false);
  });

  it("reproduces the vector body with footer byte for byte", () => {
    const { bytes, info } = serializeXorb(vectorPayloads, { footer: true });
    assert.equal(toHex(bytes), vector.with_footer_hex);
    assertMatchesVector(info, true);
  });

  it("writes chunk headers exactly like the vector's (uncompressed chunk 1 byte for byte)", () => {
    const e = expectedChunks[1];
    const at = plain.info.chunks[0].serializedEnd;
    assert.equal(toHex(plain.bytes.subarray(at, at + 8 + e.uncompressed_length)), toHex(body.subarray(e.header_offset, e.chunk_boundary_offset)));
    assert.equal(toHex(plain.bytes.subarray(at, at + 8)), e.header_hex);
  });

  it("writes the vector's footer from the vector's per-chunk values", () => {
    const chunks: XorbChunkInfo[] = expectedChunks.map((c) => ({
      hash: hashFromHex(c.chunk_hash),
      uncompressedLength: c.uncompressed_length,
      serializedEnd: c.chunk_boundary_offset,
      uncompressedEnd: c.unpacked_chunk_offset,
      scheme: c.compression_scheme as CompressionScheme,
    }));
    const footer = serializeXorbFooter({ hash: expectedHash, chunks });
    assert.equal(toHex(footer), vector.with_footer_hex.slice(2 * vector.expected.footer.footer_start));
    assert.equal(footer.length, vector.expected.footer.info_length + 4);
  });

  it("parses the vector's footer", () => {
    const footer = parseXorbFooter(withFooter.subarray(vector.expected.footer.footer_start));
    assert.equal(footer.version, 1);
    assert.equal(hashToHex(footer.xorbHash), vector.expected.xorb_hash);
    assert.deepEqual(
      footer.chunkHashes.map(hashToHex),
      expectedChunks.map((c) => c.chunk_hash),
    );
    assert.deepEqual(
      footer.serializedEnds,
      expectedChunks.map((c) => c.chunk_boundary_offset),
    );
    assert.deepEqual(
      footer.uncompressedEnds,
      expectedChunks.map((c) => c.unpacked_chunk_offset),
    );
  });

  it("parses a legacy v0 footer", () => {
    const footer = parseXorbFooter(legacyFooter(plain.info));
    assert.equal(footer.version, 0);
    assert.equal(footer.uncompressedEnds, null);
    assert.deepEqual(
      footer.serializedEnds,
      plain.info.chunks.map((c) => c.serializedEnd),
    );
    assert.deepEqual(
      footer.chunkHashes,
      plain.info.chunks.map((c) => c.hash),
    );
  });

  it("round-trips raw chunks through each scheme and 'best'", () => {
    const schemes = [CompressionScheme.None, CompressionScheme.LZ4, CompressionScheme.ByteGrouping4LZ4, "best"] as const;
    for (const scheme of schemes) {
      const built = serializeXorb(
        chunkData.map((data) => ({ data, scheme })),
        { footer: true },
      );
      const info = validateInPieces(built.bytes, 97, { expectedHash });
      assert.deepEqual(info, built.info);
      if (scheme !== "best") assert.ok(info.chunks.every((c) => c.scheme === scheme));
    }
  });

  it("refuses inputs beyond the protocol limits", () => {
    assert.throws(() => serializeXorb([]), RangeError);
    assert.throws(() => serializeXorb([{ data: new Uint8Array(131_073), scheme: CompressionScheme.None }]), RangeError);
    const tooMany = Array.from({ length: MAX_XORB_CHUNKS + 1 }, () => ({ data: Uint8Array.of(1), scheme: CompressionScheme.None }));
    assert.throws(() => serializeXorb(tooMany), RangeError);
    assert.throws(() => serializeXorbFooter(plain.info, Uint8Array.of(1, 2, 3)), RangeError);
  });
});

describe("chunk range to byte range (§5.5)", () => {
  const ends = expectedChunks.map((c) => c.chunk_boundary_offset);
  const unpacked = expectedChunks.map((c) => c.unpacked_chunk_offset);

  it("matches the vector's ranges", () => {
    for (const r of vector.expected.chunk_ranges_to_physical_bytes) {
      const [a, b] = r.chunks as [number, number];
      const range = chunkRangeToByteRange(ends, a, b);
      assert.deepEqual([range.start, range.end], r.bytes_exclusive_end);
      assert.deepEqual([range.start, range.end - 1], r.http_range_inclusive);
    }
  });

  it("gives the uncompressed length of a chunk range", () => {
    assert.equal(chunkRangeUncompressedLength(unpacked, 0, 3), 3565);
    assert.equal(chunkRangeUncompressedLength(unpacked, 1, 3), 3565 - 1000);
    assert.equal(chunkRangeUncompressedLength(unpacked, 1, 2), 517);
  });

  it("rejects empty, reversed or out-of-bounds ranges", () => {
    for (const [a, b] of [
      [0, 0],
      [2, 1],
      [-1, 2],
      [0, 4],
      [1.5, 2],
    ]) {
      assert.throws(() => chunkRangeToByteRange(ends, a, b), RangeError);
      assert.throws(() => chunkRangeUncompressedLength(unpacked, a, b), RangeError);
    }
  });
});
