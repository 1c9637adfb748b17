import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { compressFrameSync, compressSync, decompressFrameSync, uncompressSync } from "lz4-napi";
import { decodeLz4Frame, encodeLz4Frame, LZ4_BLOCK_MAX_SIZES, LZ4_NATIVE_BLOCK_MIN_BYTES, xxh32, type Lz4FrameOptions } from "../../src/format/lz4.js";
import { FormatError } from "../../src/format/errors.js";
import { expectFormatError } from "../helpers/format-errors.js";
import { fromHex, loadVector, splitmix64Bytes, toHex } from "../helpers/vectors.js";

const xorbSmall = loadVector("xorb-small.json");
const chunk0 = fromHex(xorbSmall.chunk_data_hex[0]);

/** Deterministic text that compresses to roughly half, like source code or logs. */
function textLike(length: number, seed: number): Uint8Array {
  const words = ["chunk", "xorb", "shard", "hash", "upload", "the", "of", "and", "value", "error", "{", "}", "\n"];
  let state = seed >>> 0;
  const next = () => (state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0);
  const parts: string[] = [];
  let total = 0;
  while (total < length) {
    const r = next();
    const part = r % 5 === 0 ? `${next() % 100_000} ` : `${words[r % words.length]} `;
    parts.push(part);
    total += part.length;
  }
  return new Uint8Array(Buffer.from(parts.join("").slice(0, length), "latin1"));
}

function sameBytes(actual: Uint8Array, expected: Uint8Array): void {
  assert.equal(actual.length, expected.length);
  assert.ok(Buffer.from(actual.buffer, actual.byteOffset, actual.length).equals(expected), "decoded bytes differ");
}

interface BlockInfo {
  dataLength: number;
  stored: boolean;
}

/** Walks a frame's block words (test-side parser, independent of the decoder). */
function blocksOf(frame: Uint8Array): BlockInfo[] {
  const flg = frame[4];
  let at = 4 + 2 + (flg & 0x08 ? 8 : 0) + 1;
  const blocks: BlockInfo[] = [];
  for (;;) {
    const word = Buffer.from(frame.buffer, frame.byteOffset, frame.length).readUInt32LE(at);
    at += 4;
    if (word === 0) return blocks;
    const dataLength = word & 0x7fffffff;
    blocks.push({ dataLength, stored: word >= 0x80000000 });
    at += dataLength + (flg & 0x10 ? 4 : 0);
  }
}

/** Rewrites FLG/BD of a frame without content size and recomputes its header checksum. */
function withDescriptor(frame: Uint8Array, flg: number, bd: number): Uint8Array {
  const copy = Uint8Array.from(frame);
  copy[4] = flg;
  copy[5] = bd;
  copy[6] = (xxh32(copy.subarray(4, 6)) >>> 8) & 0xff;
  return copy;
}

describe("xxh32", () => {
  it("matches the reference digests", () => {
    assert.equal(xxh32(new Uint8Array(0)), 0x02cc5d05);
    assert.equal(xxh32(Buffer.from("abc")), 0x32d153ff);
    assert.equal(xxh32(Buffer.from("Nobody inspects the spammish repetition")), 0xe2293b2f);
  });
  it("honours the seed", () => {
    assert.notEqual(xxh32(Buffer.from("abc"), 1), xxh32(Buffer.from("abc"), 0));
  });
});

describe("decodeLz4Frame: frames from real encoders", () => {
  it("decodes the huggingface.js-style frame of xorb-small chunk 0 (FLG 0x40, BD 0x70)", () => {
    const body = fromHex(xorbSmall.body_hex);
    const payload = body.subarray(8, 8 + xorbSmall.expected.chunks[0].compressed_length);
    assert.equal(toHex(payload.subarray(0, 6)), "04224d184070");
    sameBytes(decodeLz4Frame(payload, 1000), chunk0);
  });

  for (const extra of xorbSmall.extra_lz4_frames_for_decoder_tests) {
    it(`decodes the lz4 CLI frame: ${extra.description.slice(0, 90)}`, () => {
      assert.equal(extra.decompresses_to, "chunk_data_hex[0]");
      sameBytes(decodeLz4Frame(fromHex(extra.frame_hex), chunk0.length), chunk0);
    });
  }

  it("decodes a linked-block lz4 CLI frame whose second block copies from the first", () => {
    // `lz4 -B4 -BD -BX --content-size` of the 96 KiB text below: FLG 0x5c (linked, block and
    // content checksums, content size), two blocks; block 1 opens with a match 64962 bytes back.
    const frame = fromHex(
      "04224d185c4000800100000000001551020000f000726f7720303a20616c70686120300a0f00a1313a20627261766f20" +
        "310f00c1323a20636861726c696520341100a1333a2064656c746120390f00a1343a206563686f2031360f0014354d00" +
        "213235100014364e001233200017304f000241001431500012366000133251001238800014335100223130a000143452" +
        "002231322200163553002231344400143654002231366500133055002231398700143156001332a80014325600223235" +
        "2200163356002232384500143456002233326700133556002233368a00143656001334ac0014304c0122343422001631" +
        "56002234384500143256002235326700133356002235378a00143456001336ac00143556001336220016365600133745" +
        "0014305600133767001331560013388a00143256001339ac00143356001339ce0016345600213237cd01143555002139" +
        "32100013365400223135ba000f4a02ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff" +
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff" +
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff" +
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff" +
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff" +
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffff98500a726f77207036cd508e0000001331c2fd" +
        "0f16feffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff" +
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff" +
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff6050353a206272cb6f22210000" +
        "00008c90c2ff",
    );
    const words = ["alpha", "bravo", "charlie", "delta", "echo"];
    let text = "";
    for (let i = 0; text.length < 98_304; i++) text += `row ${i % 7}: ${words[i % 5]} ${((i % 35) * (i % 35)) % 997}\n`;
    const expected = Buffer.from(text.slice(0, 98_304), "latin1");
    assert.equal(blocksOf(frame).length, 2);
    sameBytes(decodeLz4Frame(frame, expected.length), expected);
  });

  it("decodes lz4_flex FrameEncoder output (xet-core's writer), with and without checksums", () => {
    for (const length of [1000, 65_536, 131_072, 300_000]) {
      const data = textLike(length, length);
      for (const options of [undefined, { blockChecksums: true, contentChecksum: true }]) {
        const frame = compressFrameSync(Buffer.from(data), options);
        assert.equal(toHex(frame.subarray(0, 4)), "04224d18");
        sameBytes(decodeLz4Frame(frame, length), data);
      }
    }
    // lz4_flex sizes blocks from the first write: a 128 KiB chunk is one 256 KiB-max block.
    const chunkFrame = compressFrameSync(Buffer.from(textLike(131_072, 1)));
    assert.equal(chunkFrame[5], 0x50);
    assert.equal(blocksOf(chunkFrame).length, 1);
  });
});

describe("encodeLz4Frame", () => {
  const data = textLike(150_000, 7);
  const flagSets: Omit<Lz4FrameOptions, "blockMaxSize">[] = [];
  for (let bits = 0; bits < 16; bits++) {
    flagSets.push({
      linkedBlocks: (bits & 1) !== 0,
      blockChecksums: (bits & 2) !== 0,
      contentSize: (bits & 4) !== 0,
      contentChecksum: (bits & 8) !== 0,
    });
  }

  it("writes xet-core's header by default: FLG 0x60 (v1, independent, no checksums), BD by input size", () => {
    for (const [length, bd] of [
      [0, 0x40],
      [65_536, 0x40],
      [65_537, 0x50],
      [131_072, 0x50],
      [262_144, 0x50],
      [262_145, 0x70],
    ]) {
      const input = textLike(length, length);
      const frame = encodeLz4Frame(input);
      const reference = compressFrameSync(Buffer.from(input));
      assert.equal(toHex(frame.subarray(0, 7)), toHex(reference.subarray(0, 7)), `length ${length}`);
      assert.equal(frame[5], bd);
      assert.equal(frame[6], (xxh32(frame.subarray(4, 6)) >>> 8) & 0xff);
      assert.equal(blocksOf(frame).length, length === 0 ? 0 : 1);
      assert.equal(toHex(frame.subarray(frame.length - 4)), "00000000");
    }
  });

  for (const blockMaxSize of LZ4_BLOCK_MAX_SIZES) {
    it(`round-trips every flag combination with ${blockMaxSize / 1024} KiB blocks, and lz4_flex decodes them`, () => {
      for (const flags of flagSets) {
        const options = { ...flags, blockMaxSize };
        const frame = encodeLz4Frame(data, options);
        const expectedFlg =
          0x40 | (flags.linkedBlocks ? 0 : 0x20) | (flags.blockChecksums ? 0x10 : 0) | (flags.contentSize ? 0x08 : 0) | (flags.contentChecksum ? 0x04 : 0);
        assert.equal(frame[4], expectedFlg, JSON.stringify(options));
        assert.equal(frame[5], (LZ4_BLOCK_MAX_SIZES.indexOf(blockMaxSize) + 4) << 4);
        assert.equal(blocksOf(frame).length, Math.ceil(data.length / blockMaxSize));
        sameBytes(decodeLz4Frame(frame, data.length), data);
        // lz4_flex's frame decoder (what xet-core runs) verifies the header checksum and checksums.
        assert.ok(decompressFrameSync(Buffer.from(frame)).equals(data), JSON.stringify(options));
      }
    });
  }

  it("encodes empty input as a header and an end mark", () => {
    const frame = encodeLz4Frame(new Uint8Array(0), { contentChecksum: true, contentSize: true });
    assert.equal(frame.length, 4 + 2 + 8 + 1 + 4 + 4);
    assert.equal(decodeLz4Frame(frame, 0).length, 0);
    assert.equal(decompressFrameSync(Buffer.from(frame)).length, 0);
  });

  it("stores incompressible blocks uncompressed (high bit of the block size)", () => {
    const random = splitmix64Bytes(3n, 100_000);
    const frame = encodeLz4Frame(random, { blockChecksums: true, blockMaxSize: 65_536 });
    assert.deepEqual(
      blocksOf(frame).map((b) => [b.stored, b.dataLength]),
      [
        [true, 65_536],
        [true, 100_000 - 65_536],
      ],
    );
    sameBytes(decodeLz4Frame(frame, random.length), random);
    assert.ok(decompressFrameSync(Buffer.from(frame)).equals(random));
  });

  it("mixes stored and compressed blocks in one frame", () => {
    const mixed = new Uint8Array(131_072);
    mixed.set(textLike(65_536, 9), 0);
    mixed.set(splitmix64Bytes(9n, 65_536), 65_536);
    for (const linkedBlocks of [false, true]) {
      const frame = encodeLz4Frame(mixed, { linkedBlocks, blockMaxSize: 65_536 });
      assert.deepEqual(
        blocksOf(frame).map((b) => b.stored),
        [false, true],
      );
      sameBytes(decodeLz4Frame(frame, mixed.length), mixed);
    }
  });

  it("rejects a block size that is not one of the four LZ4 sizes", () => {
    assert.throws(() => encodeLz4Frame(data, { blockMaxSize: 100_000 as never }), RangeError);
  });
});

describe("decodeLz4Frame: multi-block 128 KiB chunks", () => {
  // The second half repeats the first half's bytes 4 KiB further on, with a changed byte every
  // 997 bytes: a linked second block can copy from the first block's output.
  const first = textLike(65_536, 11);
  const chunk = new Uint8Array(131_072);
  chunk.set(first, 0);
  chunk.set(first.subarray(4096), 65_536);
  chunk.set(first.subarray(0, 4096), 131_072 - 4096);
  for (let i = 65_536; i < chunk.length; i += 997) chunk[i] ^= 0x5a;
  const sixtyFourKiB = { blockMaxSize: 65_536 } as const;

  it("decodes two independent 64 KiB blocks (both on the native path)", () => {
    const frame = encodeLz4Frame(chunk, sixtyFourKiB);
    const blocks = blocksOf(frame);
    assert.equal(blocks.length, 2);
    assert.ok(blocks.every((b) => !b.stored && b.dataLength >= LZ4_NATIVE_BLOCK_MIN_BYTES));
    sameBytes(decodeLz4Frame(frame, chunk.length), chunk);
  });

  it("decodes two linked 64 KiB blocks, passing the earlier output as history", () => {
    const independent = encodeLz4Frame(chunk, sixtyFourKiB);
    const linked = encodeLz4Frame(chunk, { ...sixtyFourKiB, linkedBlocks: true });
    const [, second] = blocksOf(linked);
    assert.ok(second.dataLength >= LZ4_NATIVE_BLOCK_MIN_BYTES, "second block takes the native path");
    assert.ok(second.dataLength < blocksOf(independent)[1].dataLength, "second block refers back to the first");
    sameBytes(decodeLz4Frame(linked, chunk.length), chunk);
    assert.ok(decompressFrameSync(Buffer.from(linked)).equals(chunk));
    // Read as independent blocks, the same bytes must fail: the history is really used.
    const asIndependent = withDescriptor(linked, linked[4] | 0x20, linked[5]);
    expectFormatError(() => decodeLz4Frame(asIndependent, chunk.length), "bad_compression");
  });

  it("decodes linked small blocks on the JavaScript path with history", () => {
    // 64 KiB of a short repeating pattern: both blocks compress far below the native threshold.
    const pattern = textLike(300, 5);
    const repeated = new Uint8Array(70_000);
    for (let i = 0; i < repeated.length; i++) repeated[i] = pattern[i % pattern.length];
    const frame = encodeLz4Frame(repeated, { linkedBlocks: true, blockMaxSize: 65_536 });
    const blocks = blocksOf(frame);
    assert.equal(blocks.length, 2);
    assert.ok(blocks.every((b) => b.dataLength < LZ4_NATIVE_BLOCK_MIN_BYTES));
    sameBytes(decodeLz4Frame(frame, repeated.length), repeated);
  });
});

describe("decodeLz4Frame: memory", () => {
  it("leaves its input untouched and returns memory it does not share with the input", () => {
    const data = textLike(100_000, 12);
    for (const options of [{}, { blockMaxSize: 65_536 as const, linkedBlocks: true, blockChecksums: true }]) {
      const frame = encodeLz4Frame(data, options);
      const before = Uint8Array.from(frame);
      const decoded = decodeLz4Frame(frame, data.length);
      assert.deepEqual(frame, before);
      assert.notEqual(decoded.buffer, frame.buffer);
      sameBytes(decoded, data);
    }
    const stored = encodeLz4Frame(splitmix64Bytes(1n, 500));
    assert.notEqual(decodeLz4Frame(stored, 500).buffer, stored.buffer);
  });
});

describe("decodeLz4Frame: rejects malformed frames", () => {
  const data = textLike(5000, 3);
  const plain = encodeLz4Frame(data);
  const full = encodeLz4Frame(data, { blockChecksums: true, contentChecksum: true, contentSize: true });

  it("rejects a raw LZ4 block (no magic) and skippable frames", () => {
    expectFormatError(() => decodeLz4Frame(compressSync(Buffer.from(data)), data.length), "bad_compression", /magic/);
    const skippable = Uint8Array.from([0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4]);
    expectFormatError(() => decodeLz4Frame(skippable, 0), "bad_compression", /skippable/);
  });

  it("rejects unknown versions, dictionary IDs and reserved bits", () => {
    for (const version of [0x00, 0x80, 0xc0]) {
      expectFormatError(() => decodeLz4Frame(withDescriptor(plain, (plain[4] & 0x3f) | version, plain[5]), data.length), "bad_compression", /version/);
    }
    expectFormatError(() => decodeLz4Frame(withDescriptor(plain, plain[4] | 0x01, plain[5]), data.length), "bad_compression", /dictionary/);
    expectFormatError(() => decodeLz4Frame(withDescriptor(plain, plain[4] | 0x02, plain[5]), data.length), "bad_compression", /reserved/);
    for (const bdBit of [0x80, 0x08, 0x01]) {
      expectFormatError(() => decodeLz4Frame(withDescriptor(plain, plain[4], plain[5] | bdBit), data.length), "bad_compression", /reserved/);
    }
    for (const code of [0, 1, 2, 3]) {
      expectFormatError(() => decodeLz4Frame(withDescriptor(plain, plain[4], code << 4), data.length), "bad_compression", /max-size code/);
    }
  });

  it("verifies the header checksum", () => {
    const bad = Uint8Array.from(plain);
    bad[6] ^= 1;
    expectFormatError(() => decodeLz4Frame(bad, data.length), "bad_compression", /header checksum/);
  });

  it("verifies block and content checksums", () => {
    const badBlockChecksum = Uint8Array.from(full);
    const blockChecksumAt = 15 + 4 + blocksOf(full)[0].dataLength;
    badBlockChecksum[blockChecksumAt] ^= 0x10;
    expectFormatError(() => decodeLz4Frame(badBlockChecksum, data.length), "bad_compression", /block 0's checksum/);
    const badContentChecksum = Uint8Array.from(full);
    badContentChecksum[full.length - 1] ^= 0x80;
    expectFormatError(() => decodeLz4Frame(badContentChecksum, data.length), "bad_compression", /content checksum/);
    expectFormatError(() => decodeLz4Frame(full.subarray(0, full.length - 4), data.length), "bad_compression", /content checksum is missing/);
  });

  it("rejects every truncation of a frame", () => {
    for (const frame of [plain, full]) {
      for (let length = 0; length < frame.length; length++) {
        assert.throws(() => decodeLz4Frame(frame.subarray(0, length), data.length), FormatError, `length ${length}`);
      }
    }
  });

  it("rejects bytes after the end of the frame (including a second frame)", () => {
    for (const tail of [[0], [0, 0, 0, 0], Array.from(plain)]) {
      const withTail = Uint8Array.from([...plain, ...tail]);
      expectFormatError(() => decodeLz4Frame(withTail, data.length), "bad_compression", /unexpected bytes follow/);
    }
  });

  it("rejects a block larger than the frame's maximum block size", () => {
    // A 100 KB block (written with a 256 KiB maximum) relabelled as a 64 KiB-block frame.
    const big = textLike(100_000, 4);
    const frame = encodeLz4Frame(big, { blockMaxSize: 262_144 });
    const relabelled = withDescriptor(frame, frame[4], 0x40);
    expectFormatError(() => decodeLz4Frame(relabelled, big.length), "bad_compression", /maximum block size/);
    // A stored block whose size word exceeds the maximum is rejected before it is read.
    const storedTooBig = Uint8Array.from([...frame.subarray(0, 7), 0x01, 0x00, 0x01, 0x80]);
    expectFormatError(() => decodeLz4Frame(withDescriptor(storedTooBig, frame[4], 0x40), 65_537), "bad_compression", /maximum block size/);
  });

  it("rejects corrupt block data with a FormatError", () => {
    // Offset 0 and a match reaching before the start of the output.
    for (const block of [[0x11, 0x61, 0x00, 0x00, 0x00], [0x11, 0x61, 0x05, 0x00, 0x00], [0x10], [0x11, 0x61, 0x01, 0x00]]) {
      const frame = Uint8Array.from([...plain.subarray(0, 7), block.length, 0, 0, 0, ...block, 0, 0, 0, 0]);
      expectFormatError(() => decodeLz4Frame(frame, 10), "bad_compression");
    }
  });
});

describe("decodeLz4Frame: sizes are bounded by the declared size", () => {
  it("rejects a content-size field that disagrees with the declared size, before decoding", () => {
    const data = textLike(3000, 8);
    const frame = encodeLz4Frame(data, { contentSize: true });
    expectFormatError(() => decodeLz4Frame(frame, 2999), "decompressed_size_mismatch", /content-size field says 3000/);
    const huge = Uint8Array.from(frame);
    huge[13] = 0x01; // content size ≥ 2^56
    huge[14] = (xxh32(huge.subarray(4, 14)) >>> 8) & 0xff;
    expectFormatError(() => decodeLz4Frame(huge, 3000), "decompressed_size_mismatch");
  });

  it("rejects a frame that decodes to fewer bytes than declared", () => {
    const data = textLike(3000, 8);
    expectFormatError(() => decodeLz4Frame(encodeLz4Frame(data), 3001), "decompressed_size_mismatch", /decodes to 3000 bytes/);
  });

  it("stops a small (JavaScript-path) block that expands past the declared size", () => {
    const zeros = new Uint8Array(65_536);
    const frame = encodeLz4Frame(zeros);
    assert.ok(blocksOf(frame)[0].dataLength < LZ4_NATIVE_BLOCK_MIN_BYTES);
    expectFormatError(() => decodeLz4Frame(frame, 1000), "decompressed_size_mismatch", /only 1000 bytes/);
  });

  it("stops a native-path bomb: a 4 MiB block declared as 128 KiB", () => {
    const big = new Uint8Array(4_194_304);
    for (let i = 0; i < big.length; i += 4096) big.set(splitmix64Bytes(BigInt(i), 64), i);
    const frame = encodeLz4Frame(big, { blockMaxSize: 4_194_304 });
    assert.ok(blocksOf(frame)[0].dataLength >= LZ4_NATIVE_BLOCK_MIN_BYTES);
    expectFormatError(() => decodeLz4Frame(frame, 131_072), "decompressed_size_mismatch", /only 131072 bytes/);
  });

  it("stops a hand-made block whose match length claims ~16 MB", () => {
    // token: 1 literal, match length 15+4+255·65 793+…; offset 1 — a run-length bomb.
    const block = [0x1f, 0x61, 0x01, 0x00, ...new Array<number>(65_793).fill(0xff), 0x00, 0x00];
    const header = encodeLz4Frame(new Uint8Array(0), { blockMaxSize: 4_194_304 }).subarray(0, 7);
    const frame = Uint8Array.from([...header, block.length & 0xff, (block.length >> 8) & 0xff, block.length >> 16, 0, ...block, 0, 0, 0, 0]);
    expectFormatError(() => decodeLz4Frame(frame, 131_072), "decompressed_size_mismatch");
  });

  it("stops a stored block larger than the declared size", () => {
    const frame = encodeLz4Frame(splitmix64Bytes(5n, 2000));
    assert.ok(blocksOf(frame)[0].stored);
    expectFormatError(() => decodeLz4Frame(frame, 1999), "decompressed_size_mismatch");
  });
});

// ---------------------------------------------------------------------------------------------
// Hand-built raw blocks, to reach decoder paths that real encoders only hit on certain data.

interface Sequence {
  literals: Uint8Array;
  /** Absent on the block's last, literals-only sequence. */
  match?: { offset: number; length: number };
}

/** Encodes sequences as one raw LZ4 block (token, length bytes, literals, offset, length bytes). */
function rawBlock(sequences: readonly Sequence[]): Uint8Array {
  const bytes: number[] = [];
  const pushExtraLength = (n: number) => {
    for (; n >= 255; n -= 255) bytes.push(255);
    bytes.push(n);
  };
  for (const { literals, match } of sequences) {
    const matchCode = match === undefined ? 0 : match.length - 4;
    bytes.push((Math.min(literals.length, 15) << 4) | Math.min(matchCode, 15));
    if (literals.length >= 15) pushExtraLength(literals.length - 15);
    for (const b of literals) bytes.push(b);
    if (match !== undefined) {
      bytes.push(match.offset & 0xff, match.offset >>> 8);
      if (matchCode >= 15) pushExtraLength(matchCode - 15);
    }
  }
  return Uint8Array.from(bytes);
}

/** What the sequences mean, written out naively one byte at a time (the test's own reference). */
function expandSequences(sequences: readonly Sequence[]): Uint8Array {
  const out: number[] = [];
  for (const { literals, match } of sequences) {
    for (const b of literals) out.push(b);
    if (match !== undefined) for (let i = 0; i < match.length; i++) out.push(out[out.length - match.offset]);
  }
  return Uint8Array.from(out);
}

/** One independent compressed block in a frame with 256 KiB blocks (room for any chunk). */
function singleBlockFrame(block: Uint8Array): Uint8Array {
  const header = encodeLz4Frame(new Uint8Array(0), { blockMaxSize: 262_144 }).subarray(0, 7);
  const frame = new Uint8Array(7 + 4 + block.length + 4);
  frame.set(header, 0);
  Buffer.from(frame.buffer).writeUInt32LE(block.length, 7);
  frame.set(block, 11);
  return frame;
}

/** lz4_flex (the reference client's decoder) on a raw block, given at most `room` bytes of output. */
function lz4FlexDecode(block: Uint8Array, room: number): Buffer | FormatError {
  const input = Buffer.alloc(4 + block.length);
  input.writeUInt32LE(room, 0);
  input.set(block, 4);
  try {
    return uncompressSync(input);
  } catch (err) {
    return new FormatError("bad_compression", String(err));
  }
}

/**
 * Byte offsets of the match offset fields of a block (test-side walker); on a corrupted block it
 * stops at the first field that runs past the end.
 */
function matchOffsetPositions(block: Uint8Array): number[] {
  const positions: number[] = [];
  let at = 0;
  while (at < block.length) {
    const token = block[at++];
    let literals = token >>> 4;
    if (literals === 15) {
      let extra = 255;
      while (extra === 255 && at < block.length) literals += extra = block[at++];
    }
    at += literals;
    if (at + 2 > block.length) break;
    positions.push(at);
    at += 2;
    if ((token & 15) === 15) while (at < block.length && block[at++] === 255);
  }
  return positions;
}

const seedBytes = (length: number, salt: number) => Uint8Array.from({ length }, (_, i) => (i * 37 + salt * 11 + 1) & 0xff || 1);

describe("decodeLz4Frame: overlapping matches (runs) on the JavaScript path", () => {
  it("decodes runs of every short period and length exactly as lz4_flex does", () => {
    for (const offset of [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 255]) {
      for (const length of [4, 19, 32, 33, 34, 64, 65, 100, 1000, 4097, 65_000, 131_000]) {
        const sequences: Sequence[] = [{ literals: seedBytes(offset, offset), match: { offset, length } }, { literals: seedBytes(5, 99) }];
        const expected = expandSequences(sequences);
        const block = rawBlock(sequences);
        assert.ok(block.length < LZ4_NATIVE_BLOCK_MIN_BYTES, `offset ${offset} length ${length} stays on the JS path`);
        const decoded = decodeLz4Frame(singleBlockFrame(block), expected.length);
        sameBytes(decoded, expected);
        sameBytes(decoded, lz4FlexDecode(block, expected.length) as Buffer);
      }
    }
  });

  it("decodes chunks of zeros and short repeating patterns from real encoders", () => {
    for (const period of [1, 2, 3, 10, 300]) {
      const data = new Uint8Array(131_072);
      for (let i = 0; i < data.length; i++) data[i] = period === 1 ? 0 : (i % period) * 7 + 1;
      for (const blockMaxSize of [65_536, 262_144] as const) {
        for (const linkedBlocks of [false, true]) {
          const frame = encodeLz4Frame(data, { blockMaxSize, linkedBlocks });
          assert.ok(blocksOf(frame).every((b) => b.dataLength < LZ4_NATIVE_BLOCK_MIN_BYTES));
          sameBytes(decodeLz4Frame(frame, data.length), data);
        }
      }
    }
  });

  it("stops a run that would pass the declared size, and one reaching before the block", () => {
    const run: Sequence[] = [{ literals: seedBytes(3, 1), match: { offset: 3, length: 5000 } }, { literals: seedBytes(5, 2) }];
    expectFormatError(() => decodeLz4Frame(singleBlockFrame(rawBlock(run)), 4000), "decompressed_size_mismatch", /only 4000 bytes/);
    const reachesBack: Sequence[] = [{ literals: seedBytes(3, 1), match: { offset: 4, length: 5000 } }, { literals: seedBytes(5, 2) }];
    expectFormatError(() => decodeLz4Frame(singleBlockFrame(rawBlock(reachesBack)), 5008), "bad_compression", /before its window/);
  });
});

describe("decodeLz4Frame: match offset 0 is rejected on every path", () => {
  // lz4_flex rejects offset 0. liblz4 1.9.2 (npm `lz4`) accepts it and copies whatever the output
  // buffer held, so a server using it would store chunks the reference client cannot decode.
  for (const literalCount of [20, 1500]) {
    const path = literalCount < LZ4_NATIVE_BLOCK_MIN_BYTES ? "JavaScript" : "native";
    it(`rejects an offset-0 match in a ${path}-path block`, () => {
      const sequences = (offset: number): Sequence[] => [
        { literals: seedBytes(literalCount, 3), match: { offset, length: 40 } },
        { literals: seedBytes(12, 4) },
      ];
      const valid = rawBlock(sequences(1));
      assert.equal(valid.length >= LZ4_NATIVE_BLOCK_MIN_BYTES, path === "native");
      const size = literalCount + 40 + 12;
      sameBytes(decodeLz4Frame(singleBlockFrame(valid), size), expandSequences(sequences(1)));
      expectFormatError(() => decodeLz4Frame(singleBlockFrame(rawBlock(sequences(0))), size), "bad_compression");
      assert.ok(lz4FlexDecode(rawBlock(sequences(0)), size) instanceof FormatError);
    });
  }
});

describe("property: the block decoder accepts exactly what lz4_flex accepts", () => {
  const chunkLike = fc.oneof(
    fc.uint8Array({ maxLength: 2000 }),
    fc
      .record({
        // Short inputs compress below LZ4_NATIVE_BLOCK_MIN_BYTES (the JavaScript path), long ones above it.
        length: fc.oneof(fc.integer({ min: 1, max: 3000 }), fc.integer({ min: 1, max: 131_072 })),
        alphabet: fc.integer({ min: 1, max: 30 }),
        seed: fc.nat(),
      })
      .map(({ length, alphabet, seed }) => {
        const out = new Uint8Array(length);
        let state = seed;
        for (let i = 0; i < length; i++) {
          state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
          // Runs of one letter make long overlapping matches; mixed letters make short sequences.
          out[i] = state >>> 28 < 3 ? out[Math.max(0, i - 1)] : 0x61 + ((state >>> 16) % alphabet);
        }
        return out;
      }),
  );
  type BlockMutation = { kind: "flip" | "set"; at: number; value: number } | { kind: "truncate"; at: number } | { kind: "zero-offset"; which: number };
  const blockMutation: fc.Arbitrary<BlockMutation> = fc.oneof(
    fc.record({ kind: fc.constantFrom("flip" as const, "set" as const), at: fc.nat(), value: fc.nat({ max: 255 }) }),
    fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
    fc.record({ kind: fc.constant("zero-offset" as const), which: fc.nat() }),
  );

  function applyMutation(block: Uint8Array, m: BlockMutation): Uint8Array {
    if (block.length === 0) return block;
    const copy = Uint8Array.from(block);
    switch (m.kind) {
      case "flip":
        copy[m.at % copy.length] ^= 1 << (m.value & 7);
        return copy;
      case "set":
        copy[m.at % copy.length] = m.value;
        return copy;
      case "truncate":
        return copy.subarray(0, m.at % copy.length);
      case "zero-offset": {
        const positions = matchOffsetPositions(copy).filter((p) => p + 1 < copy.length);
        if (positions.length === 0) return copy;
        const at = positions[m.which % positions.length];
        copy[at] = 0;
        copy[at + 1] = 0;
        return copy;
      }
    }
  }

  it("same verdict and same bytes on valid and corrupted blocks, on both decoding paths", () => {
    fc.assert(
      fc.property(chunkLike, fc.array(blockMutation, { maxLength: 2 }), fc.integer({ min: -3, max: 3 }), (data, mutations, sizeDelta) => {
        let block: Uint8Array = compressSync(Buffer.from(data)).subarray(4);
        for (const m of mutations) block = applyMutation(block, m);
        const declared = Math.max(0, data.length + sizeDelta);
        const reference = lz4FlexDecode(block, declared);
        const referenceAccepts = !(reference instanceof FormatError) && reference.length === declared;
        let decoded: Uint8Array | FormatError;
        try {
          decoded = decodeLz4Frame(singleBlockFrame(block), declared);
        } catch (err) {
          if (!(err instanceof FormatError)) throw err;
          decoded = err;
        }
        assert.equal(!(decoded instanceof FormatError), referenceAccepts, decoded instanceof FormatError ? decoded.message : "accepted");
        if (referenceAccepts) sameBytes(decoded as Uint8Array, reference as Buffer);
      }),
      { numRuns: 300 },
    );
  });
});
