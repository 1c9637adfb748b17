import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { bg4Regroup, bg4Split } from "../../src/format/bg4.js";
import { decodeLz4Frame } from "../../src/format/lz4.js";
import { fromHex, loadVector, splitmix64Bytes } from "../helpers/vectors.js";

const asArray = (bytes: Uint8Array): number[] => Array.from(bytes);

describe("BG4 (bg4.json)", () => {
  const { vectors } = loadVector("bg4.json");
  assert.ok(vectors.length >= 5);
  for (const v of vectors) {
    it(`splits and regroups ${v.original.length} bytes (${v.source.split(":")[0]})`, () => {
      assert.deepEqual(asArray(bg4Split(Uint8Array.from(v.original))), v.grouped);
      assert.deepEqual(asArray(bg4Regroup(Uint8Array.from(v.grouped))), v.original);
    });
  }
});

describe("BG4 layout", () => {
  it("follows the §5.3 example: n=10 has groups of 3,3,2,2", () => {
    const original = Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert.deepEqual(asArray(bg4Split(original)), [1, 5, 9, 2, 6, 10, 3, 7, 4, 8]);
  });

  it("puts byte i of n at the start of group i%4 plus floor(i/4), for every n up to 64", () => {
    for (let n = 0; n <= 64; n++) {
      const original = Uint8Array.from({ length: n }, (_, i) => i);
      const grouped = bg4Split(original);
      const sizes = [0, 1, 2, 3].map((g) => Math.floor(n / 4) + (g < n % 4 ? 1 : 0));
      const starts = [0, sizes[0], sizes[0] + sizes[1], sizes[0] + sizes[1] + sizes[2]];
      for (let i = 0; i < n; i++) assert.equal(grouped[starts[i % 4] + Math.floor(i / 4)], i, `n=${n} i=${i}`);
      assert.deepEqual(asArray(bg4Regroup(grouped)), asArray(original));
    }
  });

  it("round-trips a 128 KiB chunk and a subarray at an odd offset without touching its input", () => {
    const data = splitmix64Bytes(21n, 131_075);
    const view = data.subarray(3);
    const before = Uint8Array.from(view);
    const grouped = bg4Split(view);
    assert.deepEqual(view, before);
    assert.deepEqual(bg4Regroup(grouped), before);
    assert.deepEqual(bg4Regroup(bg4Split(data)), data);
  });

  it("regroups word-aligned multiples of 16 (the word-wise path) exactly like the definition, aligned or not", () => {
    for (const n of [16, 32, 48, 4096, 65_536, 131_072]) {
      const original = splitmix64Bytes(BigInt(n), n);
      const grouped = bg4Split(original);
      const expected = new Uint8Array(n);
      for (let i = 0; i < n; i++) expected[i] = grouped[(i % 4) * (n / 4) + Math.floor(i / 4)];
      assert.deepEqual(bg4Regroup(grouped), expected, `aligned n=${n}`);
      const shifted = new Uint8Array(n + 1);
      shifted.set(grouped, 1);
      assert.deepEqual(bg4Regroup(shifted.subarray(1)), expected, `unaligned n=${n}`);
    }
  });

  it("matches the BG4 chunk of xorb-small.json: LZ4-decoding it gives exactly bg4Split of the chunk data", () => {
    const xorb = loadVector("xorb-small.json");
    const chunk = xorb.expected.chunks[2];
    assert.equal(chunk.compression_scheme, 2);
    const body = fromHex(xorb.body_hex);
    const payload = body.subarray(chunk.header_offset + 8, chunk.header_offset + 8 + chunk.compressed_length);
    const grouped = decodeLz4Frame(payload, chunk.uncompressed_length);
    const data = fromHex(xorb.chunk_data_hex[2]);
    assert.deepEqual(grouped, bg4Split(data));
    assert.deepEqual(bg4Regroup(grouped), data);
  });
});
