import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { compressFrameSync, compressSync } from "lz4-napi";
import { bg4Split } from "../../src/format/bg4.js";
import {
  bg4Recommended,
  compressChunk,
  compressChunkBest,
  compressChunkBestAsync,
  CompressionScheme,
  decompressChunk,
  isCompressionScheme,
  lz4SamplesIncompressible,
  MAX_CHUNK_COMPRESSED_BYTES,
  MAX_CHUNK_UNCOMPRESSED_BYTES,
} from "../../src/format/compression.js";
import { FormatError } from "../../src/format/errors.js";
import { expectFormatError } from "../helpers/format-errors.js";
import { encodeLz4Frame } from "../../src/format/lz4.js";
import { fromHex, loadVector, makeData, splitmix64Bytes, toHex } from "../helpers/vectors.js";

/** Deterministic log-like text: compresses well with LZ4, not helped by BG4. */
function logLines(length: number): Uint8Array {
  let text = "";
  for (let i = 0; text.length < length; i++) {
    text += `2025-06-${10 + (i % 20)} level=${i % 7 === 0 ? "warn" : "info"} chunk=${(i * 7919) % 100_003} ok\n`;
  }
  return new Uint8Array(Buffer.from(text.slice(0, length), "latin1"));
}

/** Little-endian float32 samples of a smooth signal: the case BG4 exists for. */
function floatSamples(count: number): Uint8Array {
  const values = new Float32Array(count);
  for (let i = 0; i < count; i++) values[i] = Math.sin(i / 50) * 0.02 + 1;
  return new Uint8Array(values.buffer);
}

interface ChunkView {
  scheme: number;
  payload: Uint8Array;
  uncompressedSize: number;
}

/** Splits a xorb body into chunk headers + payloads (§5.2), independently of xorb.ts. */
function chunksOf(body: Uint8Array): ChunkView[] {
  const chunks: ChunkView[] = [];
  for (let at = 0; at < body.length; ) {
    const compressedSize = body[at + 1] | (body[at + 2] << 8) | (body[at + 3] << 16);
    const uncompressedSize = body[at + 5] | (body[at + 6] << 8) | (body[at + 7] << 16);
    chunks.push({ scheme: body[at + 4], payload: body.subarray(at + 8, at + 8 + compressedSize), uncompressedSize });
    at += 8 + compressedSize;
  }
  return chunks;
}

describe("decompressChunk on xorb-small.json", () => {
  const xorb = loadVector("xorb-small.json");
  const chunks = chunksOf(fromHex(xorb.body_hex));

  it("has the three chunks with schemes None, LZ4 and BG4", () => {
    assert.deepEqual(
      chunks.map((c) => c.scheme),
      xorb.expected.chunks.map((c: { compression_scheme: number }) => c.compression_scheme),
    );
    assert.deepEqual(chunks.map((c) => c.scheme).sort(), [0, 1, 2]);
  });

  chunks.forEach((chunk, index) => {
    it(`decodes chunk ${index} (scheme ${chunk.scheme}) to its chunk_data_hex`, () => {
      const decoded = decompressChunk(chunk.scheme, chunk.payload, chunk.uncompressedSize);
      assert.equal(decoded.length, xorb.expected.chunks[index].uncompressed_length);
      assert.equal(toHex(decoded), xorb.chunk_data_hex[index]);
    });
  });

  it("returns a None chunk's payload without copying", () => {
    const none = chunks.find((c) => c.scheme === CompressionScheme.None)!;
    const decoded = decompressChunk(0, none.payload, none.uncompressedSize);
    assert.equal(decoded.buffer, none.payload.buffer);
    assert.equal(decoded.byteOffset, none.payload.byteOffset);
  });

  it("rejects each compressed chunk with a declared size one off", () => {
    for (const chunk of chunks) {
      for (const delta of [-1, 1]) {
        expectFormatError(() => decompressChunk(chunk.scheme, chunk.payload, chunk.uncompressedSize + delta), "decompressed_size_mismatch");
      }
    }
  });
});

describe("decompressChunk: bad headers and payloads", () => {
  const data = logLines(4000);
  const lz4 = compressChunk(data, CompressionScheme.LZ4);

  it("rejects unknown schemes, including xet-core's internal Auto (99)", () => {
    for (const scheme of [3, 4, 65, 99, 255]) {
      expectFormatError(() => decompressChunk(scheme, lz4, data.length), "unknown_compression_scheme", new RegExp(`scheme ${scheme}`));
    }
    assert.equal(isCompressionScheme(99), false);
    assert.equal(isCompressionScheme(2), true);
  });

  it("rejects declared sizes outside 0..131072 before decoding", () => {
    for (const size of [MAX_CHUNK_UNCOMPRESSED_BYTES + 1, 16_777_215, -1, 1.5, Number.NaN]) {
      expectFormatError(() => decompressChunk(CompressionScheme.LZ4, lz4, size), "chunk_too_large");
    }
  });

  it("rejects compressed payloads over 256 KiB", () => {
    const oversized = new Uint8Array(MAX_CHUNK_COMPRESSED_BYTES + 1);
    oversized.set(lz4);
    expectFormatError(() => decompressChunk(CompressionScheme.LZ4, oversized, data.length), "chunk_too_large");
  });

  it("rejects a raw LZ4 block, an empty payload and a truncated frame", () => {
    expectFormatError(() => decompressChunk(CompressionScheme.LZ4, compressSync(Buffer.from(data)), data.length), "bad_compression");
    expectFormatError(() => decompressChunk(CompressionScheme.LZ4, new Uint8Array(0), 0), "bad_compression");
    expectFormatError(() => decompressChunk(CompressionScheme.ByteGrouping4LZ4, lz4.subarray(0, lz4.length - 1), data.length), "bad_compression");
  });

  it("rejects a None chunk whose payload length differs from the declared size", () => {
    expectFormatError(() => decompressChunk(CompressionScheme.None, data, data.length + 1), "decompressed_size_mismatch");
  });

  it("bounds BG4 chunks by the declared size too", () => {
    const bg4 = compressChunk(data, CompressionScheme.ByteGrouping4LZ4);
    expectFormatError(() => decompressChunk(CompressionScheme.ByteGrouping4LZ4, bg4, data.length - 1), "decompressed_size_mismatch");
    const bomb = encodeLz4Frame(new Uint8Array(MAX_CHUNK_UNCOMPRESSED_BYTES * 4), { blockMaxSize: 4_194_304 });
    expectFormatError(() => decompressChunk(CompressionScheme.ByteGrouping4LZ4, bomb, MAX_CHUNK_UNCOMPRESSED_BYTES), "decompressed_size_mismatch");
  });
});

/** Chunks of every kind the codecs meet: tiny, compressible text, floats (BG4's case), incompressible noise, a run. */
const CHUNK_INPUTS: [string, Uint8Array][] = [
  ["empty", new Uint8Array(0)],
  ["1 byte", Uint8Array.of(7)],
  ["3 bytes", Uint8Array.of(1, 2, 3)],
  ["1000 bytes of makeData", makeData(1000, 7, 13)],
  ["64 KiB of log text", logLines(65_536)],
  ["64 KiB + 1 of log text", logLines(65_537)],
  ["100,001 bytes of log text", logLines(100_001)],
  ["128 KiB of float samples", floatSamples(32_768)],
  ["128 KiB of random bytes", splitmix64Bytes(77n, MAX_CHUNK_UNCOMPRESSED_BYTES)],
  ["64 KiB of zeros", new Uint8Array(65_536)],
];

describe("compressChunk", () => {
  for (const [name, data] of CHUNK_INPUTS) {
    it(`round-trips ${name} through every scheme`, () => {
      for (const scheme of [CompressionScheme.None, CompressionScheme.LZ4, CompressionScheme.ByteGrouping4LZ4]) {
        const payload = compressChunk(data, scheme);
        if (scheme !== CompressionScheme.None) assert.equal(toHex(payload.subarray(0, 4)), "04224d18");
        assert.equal(toHex(decompressChunk(scheme, payload, data.length)), toHex(data));
      }
    });
  }

  it("round-trips constant and short-period chunks (long overlapping matches) through every scheme", () => {
    for (const length of [33, 4096, 65_536, 65_537, MAX_CHUNK_UNCOMPRESSED_BYTES]) {
      for (const period of [1, 2, 3, 4, 5, 8, 12, 100]) {
        const data = new Uint8Array(length);
        for (let i = 0; i < length; i++) data[i] = period === 1 ? 0 : ((i % period) * 53 + 7) & 0xff;
        for (const scheme of [CompressionScheme.LZ4, CompressionScheme.ByteGrouping4LZ4]) {
          const payload = compressChunk(data, scheme);
          assert.ok(payload.length < length || length < 100, `period ${period} compresses`);
          assert.equal(toHex(decompressChunk(scheme, payload, length)), toHex(data), `length ${length}, period ${period}, scheme ${scheme}`);
          expectFormatError(() => decompressChunk(scheme, payload, length - 1), "decompressed_size_mismatch");
        }
      }
    }
  });

  it("returns the input itself for scheme None", () => {
    const data = logLines(100);
    assert.equal(compressChunk(data, CompressionScheme.None), data);
  });

  it("writes frames with xet-core's header: one independent block, no checksums", () => {
    assert.equal(toHex(compressChunk(logLines(65_536), CompressionScheme.LZ4).subarray(4, 6)), "6040");
    assert.equal(toHex(compressChunk(logLines(MAX_CHUNK_UNCOMPRESSED_BYTES), CompressionScheme.LZ4).subarray(4, 6)), "6050");
  });

  it("refuses chunks over 128 KiB and unknown schemes", () => {
    expectFormatError(() => compressChunk(new Uint8Array(MAX_CHUNK_UNCOMPRESSED_BYTES + 1), CompressionScheme.LZ4), "chunk_too_large");
    expectFormatError(() => compressChunk(new Uint8Array(10), 99 as CompressionScheme), "unknown_compression_scheme");
  });
});

describe("compressChunkBest", () => {
  function check(data: Uint8Array): { scheme: CompressionScheme; payload: Uint8Array } {
    const best = compressChunkBest(data);
    const lz4 = compressChunk(data, CompressionScheme.LZ4).length;
    const bg4 = compressChunk(data, CompressionScheme.ByteGrouping4LZ4).length;
    const smallest = Math.min(lz4, bg4);
    if (smallest < data.length) {
      assert.equal(best.payload.length, smallest);
      assert.equal(best.scheme, lz4 <= bg4 ? CompressionScheme.LZ4 : CompressionScheme.ByteGrouping4LZ4);
    } else {
      assert.equal(best.scheme, CompressionScheme.None);
      assert.equal(best.payload, data);
    }
    assert.equal(toHex(decompressChunk(best.scheme, best.payload, data.length)), toHex(data));
    return best;
  }

  it("keeps incompressible data as None", () => {
    assert.equal(check(splitmix64Bytes(5n, 65_536)).scheme, CompressionScheme.None);
    assert.equal(check(splitmix64Bytes(6n, 517)).scheme, CompressionScheme.None);
  });

  it("keeps empty and tiny chunks as None (a frame is never smaller)", () => {
    assert.equal(check(new Uint8Array(0)).scheme, CompressionScheme.None);
    assert.equal(check(Uint8Array.of(0, 0, 0, 0, 0, 0, 0, 0)).scheme, CompressionScheme.None);
  });

  it("picks LZ4 for text", () => {
    const best = check(logLines(65_536));
    assert.equal(best.scheme, CompressionScheme.LZ4);
    assert.ok(best.payload.length < 65_536 / 2);
  });

  it("picks BG4 for float32 tensors", () => {
    assert.equal(check(floatSamples(32_768)).scheme, CompressionScheme.ByteGrouping4LZ4);
    const xorb = loadVector("xorb-small.json");
    assert.equal(check(fromHex(xorb.chunk_data_hex[2])).scheme, CompressionScheme.ByteGrouping4LZ4);
  });

  it("agrees with the schemes the vectors' writer chose for all three chunks", () => {
    const xorb = loadVector("xorb-small.json");
    xorb.chunk_inputs.forEach((input: { scheme: number }, index: number) => {
      assert.equal(check(fromHex(xorb.chunk_data_hex[index])).scheme, input.scheme);
    });
  });
});

describe("bg4Recommended (xet-core's KL-divergence predictor)", () => {
  it("says no for random bytes, text and constant data, yes for float tensors", () => {
    assert.equal(bg4Recommended(splitmix64Bytes(21n, 65_536)), false);
    assert.equal(bg4Recommended(logLines(65_536)), false);
    assert.equal(bg4Recommended(new Uint8Array(65_536)), false);
    assert.equal(bg4Recommended(floatSamples(16_384)), true);
    const xorb = loadVector("xorb-small.json");
    assert.equal(bg4Recommended(fromHex(xorb.chunk_data_hex[2])), true, "the vectors' BG4 chunk");
  });

  it("sees one skewed lane among random ones, and any alignment of it", () => {
    const data = splitmix64Bytes(22n, 100_003);
    for (let i = 3; i < data.length; i += 4) data[i] &= 0x01; // lane 3: popcount 0 or 1
    assert.equal(bg4Recommended(data), true);
    assert.equal(bg4Recommended(data.subarray(1)), true, "the skewed lane is now lane 2");
  });

  it("handles empty and tiny chunks", () => {
    assert.equal(bg4Recommended(new Uint8Array(0)), false);
    assert.equal(bg4Recommended(Uint8Array.of(0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff)), true, "two lanes all 0, two all 8");
    assert.equal(bg4Recommended(Uint8Array.of(7)), false);
  });
});

describe("lz4SamplesIncompressible", () => {
  it("is true only when no sample window compresses at all", () => {
    assert.equal(lz4SamplesIncompressible(splitmix64Bytes(23n, 65_536)), true);
    assert.equal(lz4SamplesIncompressible(logLines(65_536)), false);
    assert.equal(lz4SamplesIncompressible(new Uint8Array(65_536)), false);
    // One compressible stretch anywhere a window lands is enough to try the whole chunk.
    const mixed = splitmix64Bytes(24n, 65_536);
    mixed.fill(0, 40_000, 65_536);
    assert.equal(lz4SamplesIncompressible(mixed), false);
  });

  it("never skips chunks below 16 KiB", () => {
    assert.equal(lz4SamplesIncompressible(splitmix64Bytes(25n, 16_383)), false);
  });
});

describe("compressChunkBestAsync", () => {
  it("keeps the contract and makes compressChunkBest's choice, on views at any offset", async () => {
    for (const [name, data] of CHUNK_INPUTS) {
      for (const shift of [0, 1, 3]) {
        const shifted = new Uint8Array(data.length + shift);
        shifted.set(data, shift);
        const view = shifted.subarray(shift);
        const best = await compressChunkBestAsync(view);
        assert.equal(best.scheme, compressChunkBest(view).scheme, `${name}, offset ${shift}`);
        assert.equal(toHex(decompressChunk(best.scheme, best.payload, data.length)), toHex(data), `${name}, offset ${shift}`);
        if (best.scheme === CompressionScheme.None) assert.equal(best.payload, view);
        else assert.ok(best.payload.length < data.length);
      }
    }
  });

  it("writes the frames of lz4_flex's frame encoder (xet-core's), which our decoder reads", async () => {
    // lz4-napi's block and frame calls pick different hash tables for small inputs, so below
    // 64 KiB these frames may differ from encodeLz4Frame's; both are valid LZ4.
    const text = logLines(MAX_CHUNK_UNCOMPRESSED_BYTES);
    for (const size of [300, 4096, 65_535, 65_536, 65_537, 100_000, MAX_CHUNK_UNCOMPRESSED_BYTES]) {
      const chunk = text.subarray(0, size);
      const best = await compressChunkBestAsync(chunk);
      assert.equal(best.scheme, CompressionScheme.LZ4, `size ${size}`);
      assert.equal(toHex(best.payload), toHex(compressFrameSync(Buffer.from(chunk))), `size ${size}`);
      assert.equal(toHex(decompressChunk(best.scheme, best.payload, size)), toHex(chunk));
      if (size >= 65_536) assert.equal(toHex(best.payload), toHex(encodeLz4Frame(chunk)), `size ${size}: one 64 KiB+ block`);
    }
    const floats = floatSamples(32_768);
    const bg4 = await compressChunkBestAsync(floats);
    assert.equal(bg4.scheme, CompressionScheme.ByteGrouping4LZ4);
    assert.equal(toHex(bg4.payload), toHex(compressFrameSync(Buffer.from(bg4Split(floats)))));
  });

  it("refuses chunks over 128 KiB", async () => {
    await assert.rejects(
      compressChunkBestAsync(new Uint8Array(MAX_CHUNK_UNCOMPRESSED_BYTES + 1)),
      (error: unknown) => error instanceof FormatError && error.code === "chunk_too_large",
    );
  });
});
