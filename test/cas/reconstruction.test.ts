import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  ReconstructionError,
  parseRangeHeader,
  planReconstruction,
  prepareFile,
  prepareXorb,
  resolveFileRange,
  type PreparedFile,
  type PreparedXorb,
} from "../../src/cas/reconstruction.js";
import { MAX_V2_RANGE_HEADER_CHARS, MAX_V2_URL_CHARS, renderV1, renderV2, type RangeUrlSigner } from "../../src/cas/reconstruction-render.js";
import { byteRange, halfOpenByteRange, type ByteRange } from "../../src/format/ranges.js";
import { byteBoundedLru, MAX_URL_REUSE_MS, RecordCache, ReusingUrlSigner, SIGNED_URLS_PER_XORB, urlReuseMsFor } from "../../src/cas/xorb-cache.js";
import { hashToHex, type Hash } from "../../src/format/hash.js";
import { parseUploadShard } from "../../src/format/shard.js";
import type { FileRecord, XorbRecord } from "../../src/metadata/cas.js";
import { xorbRecordOf } from "../helpers/reconstruction-answer.js";
import { fromHex, loadVector, splitmix64Bytes } from "../helpers/vectors.js";

const reconstructionVector = loadVector("reconstruction.json");
const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const rangeVector = loadVector("http-formats.json").range_header_parsing;

// ---------------------------------------------------------------------------------------------
// Helpers

/** A signer whose URLs spell out what was signed, and which records every call. */
class RecordingSigner implements RangeUrlSigner {
  readonly calls: { xorb: string; ranges: ByteRange[] }[] = [];
  constructor(private readonly padding = "") {}
  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    const xorb = hashToHex(xorbHash);
    this.calls.push({ xorb, ranges: ranges.map((r) => byteRange(r.start, r.end)) });
    return `https://transfer.test/${xorb}?${this.padding}r=${ranges.map((r) => `${r.start}-${r.end}`).join(",")}`;
  }
}

function rangesInUrl(url: string): ByteRange[] {
  const list = new URL(url).searchParams.get("r")!;
  return list.split(",").map((pair) => {
    const [start, end] = pair.split("-").map(Number);
    return byteRange(start, end);
  });
}

const vectorXorb = prepareXorb(xorbRecordOf(fromHex(xorbVector.body_hex)));
const vectorFiles = new Map<string, PreparedFile>(
  parseUploadShard(fromHex(shardVector.xet_core_style_hex)).files.map((file) => {
    const record: FileRecord = {
      hash: file.fileHash,
      size: file.terms.reduce((sum, t) => sum + t.unpackedBytes, 0),
      terms: file.terms.map((t) => ({ xorbHash: t.xorbHash, chunkStart: t.chunkStart, chunkEnd: t.chunkEnd, unpackedLength: t.unpackedBytes })),
      sha256: null,
    };
    return [hashToHex(file.fileHash), prepareFile(record, new Map([[vectorXorb.hex, vectorXorb]]))];
  }),
);

let hashSeed = 1n;
function freshHash(): Hash {
  return splitmix64Bytes(hashSeed++, 32);
}

/** A xorb record with chunks of the given uncompressed sizes (serialized sizes: header + about half). */
function syntheticXorb(sizes: readonly number[]): XorbRecord {
  let serializedEnd = 0;
  return {
    hash: freshHash(),
    serializedLength: sizes.reduce((sum, size) => sum + 8 + Math.ceil(size / 2), 0),
    uncompressedLength: sizes.reduce((sum, size) => sum + size, 0),
    chunks: sizes.map((size) => {
      serializedEnd += 8 + Math.ceil(size / 2);
      return { hash: freshHash(), uncompressedLength: size, serializedEnd };
    }),
  };
}

function syntheticFile(terms: readonly { xorb: XorbRecord; start: number; end: number }[]): FileRecord {
  const fileTerms = terms.map(({ xorb, start, end }) => ({
    xorbHash: xorb.hash,
    chunkStart: start,
    chunkEnd: end,
    unpackedLength: xorb.chunks.slice(start, end).reduce((sum, c) => sum + c.uncompressedLength, 0),
  }));
  return { hash: freshHash(), size: fileTerms.reduce((sum, t) => sum + t.unpackedLength, 0), terms: fileTerms, sha256: null };
}

function prepared(file: FileRecord, xorbs: readonly XorbRecord[]): PreparedFile {
  return prepareFile(file, new Map(xorbs.map((x) => [hashToHex(x.hash), prepareXorb(x)])));
}

function planFor(file: PreparedFile, header: string | undefined) {
  return planReconstruction(file, resolveFileRange(parseRangeHeader(header), file.size));
}

function termsOf(file: PreparedFile, header: string | undefined) {
  return planFor(file, header).terms.map((t) => ({ xorb: t.xorb.hex, start: t.chunkStart, end: t.chunkEnd, length: t.unpackedLength }));
}

function assertRangeError(fn: () => unknown, code: ReconstructionError["code"], message?: RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof ReconstructionError, String(error));
    assert.equal(error.code, code);
    if (message) assert.match(error.message, message);
    return true;
  });
}

/**
 * Direct port of the reference algorithm (docs/protocol.md §8.3), walking chunk by chunk: what
 * the binary-search planner must agree with.
 */
function referenceTerms(file: FileRecord, xorbs: Map<string, XorbRecord>, r0: number, r1: number) {
  const size = (x: string, i: number) => xorbs.get(x)!.chunks[i].uncompressedLength;
  const terms = file.terms.map((t) => ({ x: hashToHex(t.xorbHash), a: t.chunkStart, b: t.chunkEnd, len: t.unpackedLength }));
  let pos = 0;
  let k = 0;
  while (pos + terms[k].len <= r0) {
    pos += terms[k].len;
    k++;
  }
  let firstStart = pos;
  const out: { xorb: string; start: number; end: number; length: number }[] = [];
  while (k < terms.length && pos < r1) {
    let { x, a, b, len } = terms[k];
    if (pos < r0) {
      while (a < b && pos + size(x, a) <= r0) {
        pos += size(x, a);
        firstStart += size(x, a);
        len -= size(x, a);
        a++;
      }
    }
    if (pos + len > r1) {
      while (b > a && pos + len - size(x, b - 1) >= r1) {
        len -= size(x, b - 1);
        b--;
      }
    }
    out.push({ xorb: x, start: a, end: b, length: len });
    pos += len;
    k++;
  }
  return { offset: r0 - firstStart, terms: out };
}

// ---------------------------------------------------------------------------------------------

describe("reconstruction.json vectors", () => {
  for (const vectorCase of reconstructionVector.cases) {
    const name = `file ${vectorCase.file}, Range ${vectorCase.range_header ?? "(none)"} → ${vectorCase.status}`;
    it(name, () => {
      const file = vectorFiles.get(reconstructionVector.file_hashes[vectorCase.file])!;
      assert.equal(file.size, reconstructionVector.file_sizes[vectorCase.file]);
      const spec = parseRangeHeader(vectorCase.range_header ?? undefined);
      if (vectorCase.status === 416) {
        assertRangeError(() => resolveFileRange(spec, file.size), "unsatisfiable_range", /at or past the end of the file \(3565 bytes\)/);
        return;
      }
      const plan = planReconstruction(file, resolveFileRange(spec, file.size));

      const v2Signer = new RecordingSigner();
      const v2 = JSON.parse(renderV2(plan, v2Signer));
      for (const [xorb, entries] of Object.entries(v2.xorbs) as [string, { url: string; ranges: { bytes: ByteRange }[] }[]][]) {
        for (const entry of entries) {
          assert.deepEqual(
            rangesInUrl(entry.url),
            entry.ranges.map((r) => r.bytes),
            "the URL signs exactly the entry's byte ranges",
          );
          assert.ok(entry.url.includes(xorb));
          entry.url = "<signed url covering all ranges below>";
        }
      }
      assert.deepEqual(v2, vectorCase.v2);
      assert.equal(v2Signer.calls.length, Object.values(v2.xorbs).flat().length, "one signature per URL");

      const v1Signer = new RecordingSigner();
      const v1 = JSON.parse(renderV1(plan, v1Signer));
      for (const entries of Object.values(v1.fetch_info) as { url: string; url_range: ByteRange }[][]) {
        for (const entry of entries) {
          assert.deepEqual(rangesInUrl(entry.url), [entry.url_range], "a V1 URL signs exactly its url_range");
          entry.url = "<url>";
        }
      }
      assert.deepEqual(v1, vectorCase.v1);
      assert.equal(v1Signer.calls.length, Object.values(v1.fetch_info).flat().length);
    });
  }

  it("renders the fields in the interface's order", () => {
    const file = vectorFiles.get(reconstructionVector.file_hashes.B)!;
    const plan = planFor(file, "bytes=100-2500");
    const v2 = renderV2(plan, new RecordingSigner());
    assert.match(v2, /^\{"offset_into_first_range":100,"terms":\[\{"hash":"[0-9a-f]{64}","unpacked_length":2048,"range":\{"start":2,"end":3\}\},/);
    assert.match(v2, /"xorbs":\{"[0-9a-f]{64}":\[\{"url":"https:[^"]+","ranges":\[\{"chunks":\{"start":0,"end":1\},"bytes":\{"start":0,"end":293\}\},/);
    const v1 = renderV1(plan, new RecordingSigner());
    assert.match(v1, /"fetch_info":\{"[0-9a-f]{64}":\[\{"range":\{"start":0,"end":1\},"url":"https:[^"]+","url_range":\{"start":0,"end":293\}\},/);
  });
});

describe("Range header parsing (http-formats.json range_header_parsing)", () => {
  const SIZE = 3565;
  it("maps every documented form to the vector's file range", () => {
    const expected: Record<string, [number, number] | number> = {
      "bytes=0-499": [0, 500],
      "bytes=500-": [500, SIZE],
      "bytes=-500": [SIZE - 500, SIZE],
      "bytes=500-100": 416,
      // The vector's reference server answers 416 to a malformed header; castor answers 400
      // with a message (the brief's choice; docs/protocol.md §8.2 allows either).
      "items=0-1": 400,
      "bytes=0-18446744073709551614": [0, SIZE],
    };
    assert.deepEqual(Object.keys(expected).sort(), rangeVector.cases.map((c: { header: string }) => c.header).sort());
    for (const [header, outcome] of Object.entries(expected)) {
      if (outcome === 416) assertRangeError(() => parseRangeHeader(header), "unsatisfiable_range", /start is after its end/);
      else if (outcome === 400) assertRangeError(() => parseRangeHeader(header), "malformed_range", /^Malformed Range header "items=0-1"/);
      else {
        const [start, end] = outcome as [number, number];
        assert.deepEqual(resolveFileRange(parseRangeHeader(header), SIZE), { start, end }, header);
      }
    }
  });

  it("keeps numbers past 2^53 and 2^64 exact and clamps the end", () => {
    assert.deepEqual(parseRangeHeader("bytes=9007199254740993-18446744073709551617"), {
      kind: "closed",
      first: 9007199254740993n,
      last: 18446744073709551617n,
    });
    assert.deepEqual(resolveFileRange(parseRangeHeader("bytes=10-340282366920938463463374607431768211456"), SIZE), { start: 10, end: SIZE });
    assert.deepEqual(resolveFileRange(parseRangeHeader("bytes=0-"), SIZE), { start: 0, end: SIZE });
    assert.deepEqual(resolveFileRange(parseRangeHeader("bytes=-99999999999999999999999"), SIZE), { start: 0, end: SIZE });
    // 2^53 + 1 would round down to 2^53 as a Number: still past the end, and reported exactly.
    assertRangeError(() => resolveFileRange(parseRangeHeader("bytes=9007199254740993-"), SIZE), "unsatisfiable_range", /starts at byte 9007199254740993,/);
    assertRangeError(() => resolveFileRange(parseRangeHeader("bytes=18446744073709551616-18446744073709551617"), SIZE), "unsatisfiable_range");
  });

  it("answers 416 for a start at or past the end and for an empty suffix", () => {
    assertRangeError(() => resolveFileRange(parseRangeHeader(`bytes=${SIZE}-${SIZE + 10}`), SIZE), "unsatisfiable_range");
    assertRangeError(() => resolveFileRange(parseRangeHeader(`bytes=${SIZE}-`), SIZE), "unsatisfiable_range");
    assertRangeError(() => resolveFileRange(parseRangeHeader("bytes=-0"), SIZE), "unsatisfiable_range");
    assert.deepEqual(resolveFileRange(parseRangeHeader(`bytes=${SIZE - 1}-${SIZE - 1}`), SIZE), { start: SIZE - 1, end: SIZE });
  });

  it("serves the empty file: no header or start 0 select nothing, any other start is 416", () => {
    assert.deepEqual(resolveFileRange(parseRangeHeader(undefined), 0), { start: 0, end: 0 });
    assert.deepEqual(resolveFileRange(parseRangeHeader("bytes=0-100"), 0), { start: 0, end: 0 });
    assert.deepEqual(resolveFileRange(parseRangeHeader("bytes=0-"), 0), { start: 0, end: 0 });
    assert.deepEqual(resolveFileRange(parseRangeHeader("bytes=-5"), 0), { start: 0, end: 0 });
    assertRangeError(() => resolveFileRange(parseRangeHeader("bytes=1-2"), 0), "unsatisfiable_range", /file \(0 bytes\)/);
  });

  it("accepts the unit in any case and surrounding whitespace", () => {
    assert.deepEqual(parseRangeHeader("  BYTES=1-2 "), { kind: "closed", first: 1n, last: 2n });
  });

  it("refuses malformed headers with a message that shows the accepted forms", () => {
    for (const header of ["", "bytes=", "bytes=-", "bytes=a-b", "bytes=1-2-3", "bytes = 1-2", "bytes=1.5-2", "bytes=+1-2", "1-2", "bytes=0x10-20"]) {
      assertRangeError(
        () => parseRangeHeader(header),
        "malformed_range",
        /: send one byte range: bytes=START-END \(END inclusive\), bytes=START- or bytes=-LENGTH$/,
      );
    }
    assertRangeError(() => parseRangeHeader("bytes=0-1,5-6"), "malformed_range", /several ranges in one request are not supported/);
    assertRangeError(() => parseRangeHeader(`bytes=0-${"9".repeat(41)}`), "malformed_range", /more than 40 digits/);
    const long = parseRangeHeaderMessage(`bytes=${"x".repeat(5000)}`);
    assert.ok(long.length < 400, "a hostile header is not echoed whole");
  });
});

function parseRangeHeaderMessage(header: string): string {
  try {
    parseRangeHeader(header);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error("expected a refusal");
}

describe("term cutting (§8.3)", () => {
  // Xorb X: chunks of 100, 200, 300, 400 bytes; xorb Y: 50, 50, 1000.
  const X = syntheticXorb([100, 200, 300, 400]);
  const Y = syntheticXorb([50, 50, 1000]);
  const hx = hashToHex(X.hash);
  const hy = hashToHex(Y.hash);
  // File: X[1,4) (900) | Y[0,3) (1100) | X[0,2) (300) → 2300 bytes.
  const file = prepared(
    syntheticFile([
      { xorb: X, start: 1, end: 4 },
      { xorb: Y, start: 0, end: 3 },
      { xorb: X, start: 0, end: 2 },
    ]),
    [X, Y],
  );

  it("the whole file keeps every term whole", () => {
    assert.deepEqual(termsOf(file, undefined), [
      { xorb: hx, start: 1, end: 4, length: 900 },
      { xorb: hy, start: 0, end: 3, length: 1100 },
      { xorb: hx, start: 0, end: 2, length: 300 },
    ]);
    assert.equal(planFor(file, undefined).offsetIntoFirstRange, 0);
  });

  it("the first byte is the first chunk of the first term", () => {
    const plan = planFor(file, "bytes=0-0");
    assert.equal(plan.offsetIntoFirstRange, 0);
    assert.deepEqual(termsOf(file, "bytes=0-0"), [{ xorb: hx, start: 1, end: 2, length: 200 }]);
  });

  it("the last byte is the last chunk of the last term, with the offset into it", () => {
    const plan = planFor(file, "bytes=2299-2299");
    assert.deepEqual(termsOf(file, "bytes=2299-2299"), [{ xorb: hx, start: 1, end: 2, length: 200 }]);
    assert.equal(plan.offsetIntoFirstRange, 199);
    assert.deepEqual(termsOf(file, "bytes=-1"), termsOf(file, "bytes=2299-2299"));
  });

  it("a range inside one chunk returns that chunk only", () => {
    // Bytes 1450..1459 of the file are bytes 450..459 of Y's chunk 2 (which starts at file byte 1000).
    const plan = planFor(file, "bytes=1450-1459");
    assert.deepEqual(termsOf(file, "bytes=1450-1459"), [{ xorb: hy, start: 2, end: 3, length: 1000 }]);
    assert.equal(plan.offsetIntoFirstRange, 450);
  });

  it("a range spanning terms cuts the first and the last and keeps the middle whole", () => {
    // 250 is inside X chunk 2 (file bytes 200..499); 2050 is inside X chunk 0 of term 3 (2000..2099).
    const plan = planFor(file, "bytes=250-2050");
    assert.equal(plan.offsetIntoFirstRange, 50);
    assert.deepEqual(termsOf(file, "bytes=250-2050"), [
      { xorb: hx, start: 2, end: 4, length: 700 },
      { xorb: hy, start: 0, end: 3, length: 1100 },
      { xorb: hx, start: 0, end: 1, length: 100 },
    ]);
  });

  it("ranges ending exactly on chunk and term boundaries take nothing beyond them", () => {
    assert.deepEqual(termsOf(file, "bytes=0-899"), [{ xorb: hx, start: 1, end: 4, length: 900 }]);
    assert.deepEqual(termsOf(file, "bytes=900-949"), [{ xorb: hy, start: 0, end: 1, length: 50 }]);
    assert.deepEqual(termsOf(file, "bytes=200-499"), [{ xorb: hx, start: 2, end: 3, length: 300 }]);
    assert.equal(planFor(file, "bytes=200-499").offsetIntoFirstRange, 0);
  });

  it("a range past the end is clamped, and a start past the end is refused", () => {
    assert.deepEqual(termsOf(file, "bytes=2000-18446744073709551615"), [{ xorb: hx, start: 0, end: 2, length: 300 }]);
    assertRangeError(() => planFor(file, "bytes=2300-2300"), "unsatisfiable_range");
  });

  it("the empty file has no terms and no fetches", () => {
    const empty = prepared({ hash: freshHash(), size: 0, terms: [], sha256: null }, []);
    for (const header of [undefined, "bytes=0-0", "bytes=0-"]) {
      const plan = planFor(empty, header);
      assert.deepEqual(plan, { offsetIntoFirstRange: 0, terms: [], fetches: [] });
      assert.equal(renderV2(plan, new RecordingSigner()), '{"offset_into_first_range":0,"terms":[],"xorbs":{}}');
      assert.equal(renderV1(plan, new RecordingSigner()), '{"offset_into_first_range":0,"terms":[],"fetch_info":{}}');
    }
  });

  it("agrees with the reference algorithm on random files and ranges (zero-length chunks included)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.array(fc.integer({ min: 0, max: 40 }), { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 3 }),
        fc.array(fc.tuple(fc.nat(), fc.nat(), fc.nat()), { minLength: 1, maxLength: 8 }),
        fc.nat(),
        fc.nat(),
        (xorbSizes, termPicks, startPick, lengthPick) => {
          const xorbs = xorbSizes.map((sizes) => syntheticXorb(sizes));
          const terms = termPicks.map(([x, s, l]) => {
            const xorb = xorbs[x % xorbs.length];
            const start = s % xorb.chunks.length;
            return { xorb, start, end: start + 1 + (l % (xorb.chunks.length - start)) };
          });
          const record = syntheticFile(terms);
          fc.pre(record.size > 0);
          const file = prepared(record, xorbs);
          const r0 = startPick % record.size;
          const r1 = r0 + 1 + (lengthPick % (record.size - r0));
          const plan = planReconstruction(file, halfOpenByteRange(r0, r1));
          const expected = referenceTerms(record, new Map(xorbs.map((x) => [hashToHex(x.hash), x])), r0, r1);
          assert.equal(plan.offsetIntoFirstRange, expected.offset);
          assert.deepEqual(
            plan.terms.map((t) => ({ xorb: t.xorb.hex, start: t.chunkStart, end: t.chunkEnd, length: t.unpackedLength })),
            expected.terms,
          );
          assertEveryTermCovered(plan);
        },
      ),
      { numRuns: 300 },
    );
  });
});

/** Every term lies inside one fetch range of its xorb; the fetches name exactly the terms' xorbs. */
function assertEveryTermCovered(plan: ReturnType<typeof planReconstruction>): void {
  const fetchByXorb = new Map(plan.fetches.map((f) => [f.xorb.hex, f]));
  assert.deepEqual(new Set(fetchByXorb.keys()), new Set(plan.terms.map((t) => t.xorb.hex)));
  for (const term of plan.terms) {
    const covering = fetchByXorb.get(term.xorb.hex)!.ranges.filter((r) => r.chunks.start <= term.chunkStart && term.chunkEnd <= r.chunks.end);
    assert.equal(covering.length, 1, `term [${term.chunkStart}, ${term.chunkEnd}) of ${term.xorb.hex}`);
  }
}

describe("fetch ranges (§8.4)", () => {
  const X = syntheticXorb(Array.from({ length: 10 }, (_, i) => 100 + i));
  const xorb = prepareXorb(X);
  /** E[i], the end of chunk i in the serialized xorb (§5.5). */
  const E = xorb.chunks.serializedOffsets.subarray(1);
  const fileOf = (ranges: [number, number][]) => prepared(syntheticFile(ranges.map(([start, end]) => ({ xorb: X, start, end }))), [X]);
  const fetched = (ranges: [number, number][]) =>
    planFor(fileOf(ranges), undefined).fetches.map((f) => f.ranges.map((r) => [r.chunks.start, r.chunks.end, r.bytes.start, r.bytes.end]));

  it("never merges across a gap of even one chunk", () => {
    assert.deepEqual(
      fetched([
        [0, 2],
        [3, 5],
      ]),
      [
        [
          [0, 2, 0, E[1] - 1],
          [3, 5, E[2], E[4] - 1],
        ],
      ],
    );
    assert.deepEqual(
      fetched([
        [6, 7],
        [0, 1],
        [3, 4],
      ]),
      [
        [
          [0, 1, 0, E[0] - 1],
          [3, 4, E[2], E[3] - 1],
          [6, 7, E[5], E[6] - 1],
        ],
      ],
    );
  });

  it("merges adjacent, overlapping, nested and repeated ranges", () => {
    assert.deepEqual(
      fetched([
        [2, 4],
        [0, 2],
      ]),
      [[[0, 4, 0, E[3] - 1]]],
    );
    assert.deepEqual(
      fetched([
        [0, 3],
        [1, 5],
      ]),
      [[[0, 5, 0, E[4] - 1]]],
    );
    assert.deepEqual(
      fetched([
        [0, 6],
        [2, 3],
      ]),
      [[[0, 6, 0, E[5] - 1]]],
    );
    assert.deepEqual(
      fetched([
        [4, 5],
        [4, 5],
        [4, 5],
      ]),
      [[[4, 5, E[3], E[4] - 1]]],
    );
  });

  it("fetches only the chunks of the cut terms, one map entry per xorb in order of first use", () => {
    const Y = syntheticXorb([10, 10]);
    const file = prepared(
      syntheticFile([
        { xorb: Y, start: 0, end: 2 },
        { xorb: X, start: 0, end: 10 },
        { xorb: Y, start: 0, end: 1 },
      ]),
      [X, Y],
    );
    // Bytes 25..130 → Y is whole-term skipped (20 bytes), X chunk 0 (bytes 20..119) + chunk 1.
    const plan = planFor(file, "bytes=25-130");
    assert.deepEqual(
      plan.fetches.map((f) => [f.xorb.hex, f.ranges.map((r) => [r.chunks.start, r.chunks.end])]),
      [[hashToHex(X.hash), [[0, 2]]]],
    );
    const whole = planFor(file, undefined);
    assert.deepEqual(
      whole.fetches.map((f) => f.xorb.hex),
      [hashToHex(Y.hash), hashToHex(X.hash)],
    );
  });
});

describe("V2 entry splitting (8 KiB)", () => {
  // 8,192 one-byte-apart chunks; the file takes every other chunk: 4,096 disjoint ranges.
  const X = syntheticXorb(Array.from({ length: 8192 }, (_, i) => 1000 + (i % 7)));
  const file = prepared(syntheticFile(Array.from({ length: 4096 }, (_, i) => ({ xorb: X, start: 2 * i, end: 2 * i + 1 }))), [X]);
  const plan = planFor(file, undefined);

  function checkEntries(body: string, signer: RecordingSigner) {
    const v2 = JSON.parse(body) as { xorbs: Record<string, { url: string; ranges: { chunks: { start: number; end: number }; bytes: ByteRange }[] }[]> };
    const entries = v2.xorbs[hashToHex(X.hash)];
    const all = entries.flatMap((e) => e.ranges);
    assert.equal(all.length, 4096, "every range appears once");
    for (let i = 0; i < all.length; i++) {
      assert.deepEqual(all[i].chunks, { start: 2 * i, end: 2 * i + 1 }, "ranges ascend by chunk start across and within entries");
    }
    for (const entry of entries) {
      assert.ok(entry.ranges.length >= 1);
      assert.ok(entry.url.length <= MAX_V2_URL_CHARS, `URL of ${entry.url.length} chars`);
      const header = `bytes=${entry.ranges.map((r) => `${r.bytes.start}-${r.bytes.end}`).join(",")}`;
      assert.ok(header.length <= MAX_V2_RANGE_HEADER_CHARS, `Range header of ${header.length} chars`);
      assert.deepEqual(
        rangesInUrl(entry.url),
        entry.ranges.map((r) => r.bytes),
      );
    }
    assert.equal(signer.calls.length >= entries.length, true);
    return entries;
  }

  it("splits a xorb's thousands of disjoint ranges into few, well-filled entries within both limits", () => {
    const signer = new RecordingSigner();
    const entries = checkEntries(renderV2(plan, signer), signer);
    assert.ok(entries.length > 1 && entries.length < 20, `${entries.length} entries`);
    // This signer's URLs hold the range list plus a prefix, so the first full entry comes out
    // too long once and is signed again; the rest are signed once.
    assert.ok(signer.calls.length <= entries.length + 1, `${signer.calls.length} signatures for ${entries.length} entries`);
    for (const entry of entries.slice(0, -1)) assert.ok(entry.url.length > 0.9 * MAX_V2_URL_CHARS, `an entry of ${entry.url.length} chars is not well filled`);
  });

  it("fills entries up to the Range header limit when URLs are short", () => {
    const shortUrls: RangeUrlSigner = { sign: (hash) => `https://t.test/${hashToHex(hash)}` };
    const v2 = JSON.parse(renderV2(plan, shortUrls)) as { xorbs: Record<string, { ranges: { bytes: ByteRange }[] }[]> };
    const entries = v2.xorbs[hashToHex(X.hash)];
    const headerLength = (ranges: { bytes: ByteRange }[]) => `bytes=${ranges.map((r) => `${r.bytes.start}-${r.bytes.end}`).join(",")}`.length;
    for (let i = 0; i < entries.length; i++) {
      assert.ok(headerLength(entries[i].ranges) <= MAX_V2_RANGE_HEADER_CHARS);
      // Greedy: each entry but the last would overflow with the next range.
      if (i + 1 < entries.length) assert.ok(headerLength([...entries[i].ranges, entries[i + 1].ranges[0]]) > MAX_V2_RANGE_HEADER_CHARS);
    }
  });

  it("also splits when the signer's URLs outgrow 8 KiB before the Range value does", () => {
    const signer = new RecordingSigner(`pad=${"p".repeat(3000)}&`);
    const entries = checkEntries(renderV2(plan, signer), signer);
    assert.ok(entries.length > 3);
    assert.ok(signer.calls.length <= entries.length + 2, `${signer.calls.length} signatures for ${entries.length} entries`);
  });

  it("V1 has one URL per range", () => {
    const signer = new RecordingSigner();
    const v1 = JSON.parse(renderV1(plan, signer)) as { fetch_info: Record<string, { url: string; url_range: ByteRange; range: { start: number } }[]> };
    const entries = v1.fetch_info[hashToHex(X.hash)];
    assert.equal(entries.length, 4096);
    assert.equal(signer.calls.length, 4096);
    for (const entry of entries) assert.deepEqual(rangesInUrl(entry.url), [entry.url_range]);
  });
});

describe("rendering", () => {
  it("keeps bodies pure ASCII, escaping a URL's non-ASCII characters", () => {
    const file = vectorFiles.get(reconstructionVector.file_hashes.A)!;
    const plan = planFor(file, undefined);
    const odd: RangeUrlSigner = { sign: () => 'https://tränsfer.test/x?q="é😀"\\' };
    for (const body of [renderV2(plan, odd), renderV1(plan, odd)]) {
      assert.match(body, /^[\x20-\x7e]*$/);
      assert.ok(body.includes('"https://tr\\u00e4nsfer.test/x?q=\\"\\u00e9\\ud83d\\ude00\\"\\\\"'), body);
      const parsed = JSON.parse(body);
      const entry = (parsed.xorbs ?? parsed.fetch_info)[vectorXorb.hex][0];
      assert.equal(entry.url, 'https://tränsfer.test/x?q="é😀"\\');
    }
  });

  it("renders a cached file's whole terms once and reuses them across requests", () => {
    const file = vectorFiles.get(reconstructionVector.file_hashes.B)!;
    const first = planFor(file, undefined);
    const again = planFor(file, undefined);
    assert.equal(again.terms[0], first.terms[0], "whole terms are the file's own objects");
    assert.notEqual(planFor(file, "bytes=100-2500").terms[1], first.terms[1], "a cut term is a new one");
    assert.equal(planFor(file, "bytes=100-2500").terms[0], first.terms[0], "a term cut to nothing less stays the file's");
  });
});

describe("ReusingUrlSigner", () => {
  it("reuses a URL for the same xorb and ranges within the window, then signs again", () => {
    let now = 1_000;
    const inner = new RecordingSigner();
    const signer = new ReusingUrlSigner(inner, 100, () => now);
    const xorb = freshHash();
    const url = signer.sign(xorb, [byteRange(0, 9)]);
    now += 99;
    assert.equal(signer.sign(xorb, [byteRange(0, 9)]), url);
    assert.equal(inner.calls.length, 1);
    signer.sign(xorb, [byteRange(0, 10)]);
    signer.sign(xorb, [byteRange(0, 9), byteRange(20, 29)]);
    signer.sign(freshHash(), [byteRange(0, 9)]);
    assert.equal(inner.calls.length, 4, "other ranges or another xorb are signed");
    now += 1;
    signer.sign(xorb, [byteRange(0, 9)]);
    assert.equal(inner.calls.length, 5, "past the window the URL is signed again");
  });

  it("remembers a bounded number of URLs per xorb, and nothing with a zero window", () => {
    const inner = new RecordingSigner();
    const signer = new ReusingUrlSigner(inner, 60_000);
    const xorb = freshHash();
    for (let i = 0; i <= SIGNED_URLS_PER_XORB; i++) signer.sign(xorb, [byteRange(i, i)]);
    signer.sign(xorb, [byteRange(SIGNED_URLS_PER_XORB, SIGNED_URLS_PER_XORB)]);
    assert.equal(inner.calls.length, SIGNED_URLS_PER_XORB + 1);
    signer.sign(xorb, [byteRange(0, 0)]);
    assert.equal(inner.calls.length, SIGNED_URLS_PER_XORB + 2, "the oldest was dropped");

    const never = new RecordingSigner();
    const direct = new ReusingUrlSigner(never, 0);
    direct.sign(xorb, [byteRange(0, 0)]);
    direct.sign(xorb, [byteRange(0, 0)]);
    assert.equal(never.calls.length, 2);
  });

  it("reuses for a twentieth of the URL lifetime, at most 30 s", () => {
    assert.equal(urlReuseMsFor(1), 50);
    assert.equal(urlReuseMsFor(60), 3_000);
    assert.equal(MAX_URL_REUSE_MS, 30_000);
    assert.equal(urlReuseMsFor(3600), MAX_URL_REUSE_MS);
  });
});

describe("prepared records", () => {
  it("refuse records that contradict each other", () => {
    const X = syntheticXorb([10, 20]);
    const good = syntheticFile([{ xorb: X, start: 0, end: 2 }]);
    const xorbs = new Map([[hashToHex(X.hash), prepareXorb(X)]]);
    assert.throws(() => prepareFile(good, new Map()), /references xorb [0-9a-f]{64}, which has no stored record/);
    assert.throws(() => prepareFile({ ...good, terms: [{ ...good.terms[0], chunkEnd: 3 }] }, xorbs), /covers chunks \[0, 3\) outside xorb/);
    assert.throws(
      () => prepareFile({ ...good, terms: [{ ...good.terms[0], unpackedLength: 31 }] }, xorbs),
      /records 31 bytes but chunks \[0, 2\) of xorb [0-9a-f]{64} hold 30/,
    );
    assert.throws(() => prepareFile({ ...good, size: 29 }, xorbs), /records 29 bytes but its terms hold 30/);
    assert.throws(() => prepareXorb({ ...X, chunks: [X.chunks[1], X.chunks[0]] }), /not ascending at chunk 1/);
  });
});

describe("byteBoundedLru", () => {
  type Entry = { n: number; bytes: number };
  const bytesOf = (entry: Entry) => entry.bytes;

  it("evicts least recently used entries past its byte budget", () => {
    const lru = byteBoundedLru<string, Entry>(100, bytesOf)!;
    lru.set("a", { n: 1, bytes: 40 });
    lru.set("b", { n: 2, bytes: 40 });
    assert.equal(lru.get("a")?.n, 1); // a is now the most recent
    lru.set("c", { n: 3, bytes: 40 });
    assert.equal(lru.has("b"), false);
    assert.equal(lru.get("a")?.n, 1);
    assert.equal(lru.get("c")?.n, 3);
    assert.equal(lru.calculatedSize, 80);
    lru.set("big", { n: 4, bytes: 101 });
    assert.equal(lru.has("big"), false, "an entry above the budget is not kept");
    assert.equal(lru.calculatedSize, 80);
    lru.set("a", { n: 5, bytes: 10 });
    assert.equal(lru.calculatedSize, 50, "replacing an entry replaces its cost");
    lru.set("a", { n: 6, bytes: 101 });
    assert.equal(lru.has("a"), false, "an entry replaced by one above the budget is gone");
    assert.equal(lru.calculatedSize, 40);
    assert.equal(byteBoundedLru<string, Entry>(0, bytesOf), null, "a budget of 0 keeps nothing");
  });

  it("serves an entry while it is younger than the reuse window", () => {
    let now = 1_000;
    const lru = byteBoundedLru<string, Entry>(100, bytesOf, { ms: 100, now: () => now })!;
    lru.set("a", { n: 1, bytes: 10 });
    now += 99;
    assert.equal(lru.get("a")?.n, 1);
    now += 1;
    assert.equal(lru.get("a"), undefined);
  });
});

describe("RecordCache", () => {
  const X = syntheticXorb([10, 20, 30]);
  const Y = syntheticXorb([5]);
  const record = syntheticFile([
    { xorb: X, start: 0, end: 2 },
    { xorb: Y, start: 0, end: 1 },
    { xorb: X, start: 2, end: 3 },
  ]);

  function countingStore(files: FileRecord[], xorbs: XorbRecord[]) {
    const calls = { getFile: 0, getXorbs: 0, xorbsAsked: 0 };
    const store = {
      calls,
      async getFile(hash: Hash) {
        calls.getFile++;
        await new Promise((resolve) => setImmediate(resolve));
        return files.find((f) => hashToHex(f.hash) === hashToHex(hash)) ?? null;
      },
      async getXorbs(hashes: readonly Hash[]) {
        calls.getXorbs++;
        calls.xorbsAsked += hashes.length;
        const wanted = new Set(hashes.map(hashToHex));
        return new Map(xorbs.filter((x) => wanted.has(hashToHex(x.hash))).map((x) => [hashToHex(x.hash), x]));
      },
    };
    return store;
  }

  it("loads a file and its xorbs once, also for concurrent misses, and serves it from memory after", async () => {
    const store = countingStore([record], [X, Y]);
    const cache = new RecordCache(store);
    const [first, second] = await Promise.all([cache.file(record.hash), cache.file(record.hash)]);
    assert.equal(first, second);
    assert.equal(first!.size, 65);
    assert.deepEqual(
      first!.xorbs.map((x: PreparedXorb) => x.hex),
      [hashToHex(X.hash), hashToHex(Y.hash)],
    );
    assert.deepEqual(store.calls, { getFile: 1, getXorbs: 1, xorbsAsked: 2 });
    assert.equal(await cache.file(record.hash), first);
    assert.equal(store.calls.getFile, 1);
    assert.ok(cache.bytes > 0);
    assert.equal((await cache.xorb(X.hash))!.hex, hashToHex(X.hash));
    assert.equal(store.calls.getXorbs, 1, "xorbs prepared for the file are cached too");
  });

  it("does not remember a file that is not there", async () => {
    const files: FileRecord[] = [];
    const store = countingStore(files, [X, Y]);
    const cache = new RecordCache(store);
    assert.equal(await cache.file(record.hash), null);
    files.push(record);
    assert.equal((await cache.file(record.hash))!.size, 65);
  });

  it("reports a file whose xorb record is missing", async () => {
    const cache = new RecordCache(countingStore([record], [X]));
    await assert.rejects(cache.file(record.hash), (error: unknown) => error instanceof ReconstructionError && error.code === "inconsistent_records");
  });

  it("stays within its byte budget", async () => {
    const xorbs = Array.from({ length: 20 }, () => syntheticXorb(Array.from({ length: 100 }, () => 10)));
    const files = xorbs.map((x) => syntheticFile([{ xorb: x, start: 0, end: 100 }]));
    const cache = new RecordCache(countingStore(files, xorbs), { maxBytes: 8_000 });
    for (const file of files) assert.equal((await cache.file(file.hash))!.size, 1000);
    assert.ok(cache.bytes <= 8_000, `${cache.bytes} bytes cached`);
  });
});
