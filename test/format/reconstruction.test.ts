/**
 * The reconstruction wire module: the parser reads the vectors and exactly what the server's
 * renderers write (V1 and V2, several packings), refuses what breaks the protocol, and the
 * chunk table maps chunk ranges to the bytes the vectors give.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { planReconstruction, prepareFile, prepareXorb } from "../../src/cas/reconstruction.js";
import { renderV1, renderV2, SINGLE_RANGE_V2_LIMITS, type RangeUrlSigner } from "../../src/cas/reconstruction-render.js";
import { FormatError } from "../../src/format/errors.js";
import { hashToHex, type Hash } from "../../src/format/hash.js";
import { ChunkTable, chunkRange, halfOpenByteRange, type ByteRange } from "../../src/format/ranges.js";
import { coversTerm, fetchSourcesOf, MAX_FETCH_URL_CHARS, parseReconstructionV1, parseReconstructionV2 } from "../../src/format/reconstruction.js";
import { validateXorb } from "../../src/format/xorb.js";
import type { FileRecord, XorbRecord } from "../../src/metadata/cas.js";
import { xorbRecord } from "../helpers/fixtures.js";
import { fromHex, loadVector, splitmix64Bytes } from "../helpers/vectors.js";

const reconstructionVector = loadVector("reconstruction.json");
const xorbVector = loadVector("xorb-small.json");
const XORB_HEX: string = reconstructionVector.cases[0].v2.terms[0].hash;

/** The vector's placeholder URLs replaced by real ones (the parser accepts http(s) URLs only). */
const withUrls = (body: unknown) => JSON.parse(JSON.stringify(body).replace(/"<[^"]*url[^"]*>"/g, '"https://cas.test/t"'));

/** URLs that spell out what was signed. */
const signer: RangeUrlSigner = {
  sign: (xorbHash: Hash, ranges: readonly ByteRange[]) => `https://cas.test/${hashToHex(xorbHash)}?r=${ranges.map((r) => `${r.start}-${r.end}`).join(",")}`,
};

describe("reconstruction answers: the vectors", () => {
  const answered = reconstructionVector.cases.filter((c: { status: number }) => c.status === 200);

  it("parses every V1 and V2 answer of reconstruction.json into exactly its JSON", () => {
    for (const vectorCase of answered) {
      assert.deepEqual(parseReconstructionV2(withUrls(vectorCase.v2)), withUrls(vectorCase.v2), vectorCase.range_header);
      assert.deepEqual(parseReconstructionV1(withUrls(vectorCase.v1)), withUrls(vectorCase.v1), vectorCase.range_header);
    }
  });

  it("finds the same fetch ranges in the V1 and V2 form, covering every term", () => {
    for (const vectorCase of answered) {
      const v1 = parseReconstructionV1(withUrls(vectorCase.v1));
      const v2 = parseReconstructionV2(withUrls(vectorCase.v2));
      const spans = (answer: typeof v1 | typeof v2) =>
        [...fetchSourcesOf(answer)].map(([hex, sources]) => [hex, sources.map((s) => [s.chunks.start, s.chunks.end, s.bytes.start, s.bytes.end])]);
      assert.deepEqual(spans(v1), spans(v2));
      const sources = fetchSourcesOf(v2);
      for (const term of v2.terms) assert.equal(sources.get(term.hash)!.filter((s) => coversTerm(s, term)).length, 1);
    }
  });
});

describe("reconstruction answers: what the server renders, the parser reads", () => {
  /** A xorb of `sizes` chunks (serialized: an 8-byte header and about half the data each). */
  function xorbOf(seed: bigint, sizes: readonly number[]): XorbRecord {
    return xorbRecord(`${seed}`, sizes.length, { chunkBytes: (i) => sizes[i], serializedBytes: (size) => 8 + Math.ceil(size / 2) });
  }

  const layouts = fc.record({
    xorbSizes: fc.array(fc.array(fc.integer({ min: 1, max: 5000 }), { minLength: 1, maxLength: 12 }), { minLength: 1, maxLength: 4 }),
    termPicks: fc.array(fc.tuple(fc.nat(), fc.nat(), fc.nat()), { minLength: 1, maxLength: 10 }),
    cut: fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0, max: 1, noNaN: true })),
  });

  it("round-trips V2 (packed and one range per entry) and V1 for random files and ranges", () => {
    fc.assert(
      fc.property(layouts, ({ xorbSizes, termPicks, cut }) => {
        const xorbs = xorbSizes.map((sizes, i) => xorbOf(BigInt(i + 1), sizes));
        const terms = termPicks.map(([x, a, b]) => {
          const xorb = xorbs[x % xorbs.length];
          const start = a % xorb.chunks.length;
          const end = start + 1 + (b % (xorb.chunks.length - start));
          const unpackedLength = xorb.chunks.slice(start, end).reduce((sum, c) => sum + c.uncompressedLength, 0);
          return { xorbHash: xorb.hash, chunkStart: start, chunkEnd: end, unpackedLength };
        });
        const size = terms.reduce((sum, t) => sum + t.unpackedLength, 0);
        const record: FileRecord = { hash: splitmix64Bytes(99n, 32), size, terms, sha256: null };
        const file = prepareFile(record, new Map(xorbs.map((x) => [hashToHex(x.hash), prepareXorb(x)])));
        const start = Math.min(size - 1, Math.floor(cut[0] * size));
        const end = start + 1 + Math.floor(cut[1] * (size - start - 1));
        const plan = planReconstruction(file, halfOpenByteRange(start, end));

        for (const body of [renderV2(plan, signer), renderV2(plan, signer, SINGLE_RANGE_V2_LIMITS)]) {
          const json = JSON.parse(body);
          const parsed = parseReconstructionV2(json);
          assert.deepEqual(parsed, json);
          assertMatchesPlan(parsed, plan);
        }
        const json = JSON.parse(renderV1(plan, signer));
        const parsed = parseReconstructionV1(json);
        assert.deepEqual(parsed, json);
        assertMatchesPlan(parsed, plan);
      }),
      { numRuns: 200 },
    );
  });

  function assertMatchesPlan(
    parsed: ReturnType<typeof parseReconstructionV1> | ReturnType<typeof parseReconstructionV2>,
    plan: ReturnType<typeof planReconstruction>,
  ): void {
    assert.equal(parsed.offset_into_first_range, plan.offsetIntoFirstRange);
    assert.deepEqual(
      parsed.terms.map((t) => [t.hash, t.range.start, t.range.end, t.unpacked_length]),
      plan.terms.map((t) => [t.xorb.hex, t.chunkStart, t.chunkEnd, t.unpackedLength]),
    );
    const sources = fetchSourcesOf(parsed);
    for (const term of parsed.terms) assert.ok(sources.get(term.hash)!.some((s) => coversTerm(s, term)));
  }
});

describe("reconstruction answers: refusals", () => {
  const caseB = reconstructionVector.cases.find((c: { file: string; range_header: string | null }) => c.file === "B" && c.range_header === "bytes=100-2500");
  const good = { v1: withUrls(caseB.v1), v2: withUrls(caseB.v2) };

  const broken: [string, 1 | 2, (body: any) => void, RegExp][] = [
    ["terms that are not an array", 2, (b) => (b.terms = {}), /terms is not an array/],
    ["a missing offset", 2, (b) => delete b.offset_into_first_range, /offset_into_first_range/],
    ["a negative offset", 1, (b) => (b.offset_into_first_range = -1), /offset_into_first_range/],
    ["a chunk range past 8192", 2, (b) => (b.terms[0].range = { start: 0, end: 9000 }), /term 0 has no chunk range/],
    ["an empty term", 1, (b) => (b.terms[0].range = { start: 2, end: 2 }), /term 0 has no chunk range/],
    ["a term hash in capitals", 2, (b) => (b.terms[1].hash = b.terms[1].hash.toUpperCase()), /term 1 has no xorb hash/],
    ["an unpacked length over 64 MiB", 2, (b) => (b.terms[0].unpacked_length = 2 ** 27), /unpacked_length/],
    [
      "a byte range too short for its chunks",
      2,
      (b) => (b.xorbs[XORB_HEX][0].ranges[0].bytes = { start: 0, end: 3 }),
      /spans 4 bytes, impossible for \d+ chunks/,
    ],
    ["a byte range over a xorb's size", 1, (b) => (b.fetch_info[XORB_HEX][0].url_range = { start: 0, end: 2 ** 40 }), /impossible/],
    ["a byte range ending before it starts", 2, (b) => (b.xorbs[XORB_HEX][0].ranges[0].bytes = { start: 10, end: 9 }), /no byte range/],
    ["a V1 entry without url_range", 1, (b) => delete b.fetch_info[XORB_HEX][0].url_range, /no byte range/],
    ["a V2 entry without ranges", 2, (b) => (b.xorbs[XORB_HEX][0].ranges = []), /has no ranges/],
    ["a non-http url", 2, (b) => (b.xorbs[XORB_HEX][0].url = "file:///etc/passwd"), /no http\(s\) url/],
    ["an overlong url", 1, (b) => (b.fetch_info[XORB_HEX][0].url = `https://x/${"a".repeat(MAX_FETCH_URL_CHARS)}`), /longer than/],
    ["a bad xorb key", 2, (b) => (b.xorbs = { nothex: b.xorbs[XORB_HEX] }), /key "nothex" is not a xorb hash/],
    ["a V2 map under the V1 name", 1, (b) => delete b.fetch_info, /fetch_info is not an object/],
  ];

  for (const [what, version, mutate, message] of broken) {
    it(`refuses ${what} (V${version})`, () => {
      const body = structuredClone(version === 2 ? good.v2 : good.v1);
      mutate(body);
      const parse = version === 2 ? parseReconstructionV2 : parseReconstructionV1;
      assert.throws(
        () => parse(body),
        (error: unknown) =>
          error instanceof FormatError &&
          error.code === "bad_reconstruction" &&
          error.message.startsWith(`invalid V${version} reconstruction: `) &&
          message.test(error.message),
      );
    });
  }

  it("refuses a body that is not a JSON object", () => {
    for (const body of [null, [], "text", 3]) assert.throws(() => parseReconstructionV2(body), /invalid V2 reconstruction: not a JSON object/);
  });
});

describe("ChunkTable", () => {
  const info = validateXorb(fromHex(xorbVector.body_hex));
  const table = ChunkTable.of(info.chunks);

  it("maps chunk ranges to the serialized bytes of the vector, end inclusive", () => {
    for (const range of xorbVector.expected.chunk_ranges_to_physical_bytes) {
      const [first, last] = range.chunks as [number, number];
      const [start, end] = range.http_range_inclusive as [number, number];
      assert.deepEqual(table.serializedRange(chunkRange(first, last)), { start, end });
    }
  });

  it("sums uncompressed lengths over any chunk range, chunk 0 included", () => {
    assert.equal(table.chunkCount, 3);
    assert.equal(table.unpackedLength(0, 3), 3565);
    assert.equal(table.unpackedLength(1, 3), 3565 - 1000);
    assert.equal(table.unpackedLength(1, 2), 517);
    assert.equal(table.unpackedLength(2, 2), 0);
  });

  it("finds the chunk holding an uncompressed byte", () => {
    // Chunks hold bytes [0, 1000), [1000, 1517), [1517, 3565).
    const cases: [number, number][] = [
      [0, 0],
      [999, 0],
      [1000, 1],
      [1516, 1],
      [1517, 2],
      [3564, 2],
      [3565, 3],
    ];
    for (const [offset, chunk] of cases) assert.equal(table.chunkHoldingUnpackedByte(offset, 0, 3), chunk, `byte ${offset}`);
    assert.equal(table.chunkHoldingUnpackedByte(0, 1, 3), 1, "never before the first chunk searched");
  });
});
