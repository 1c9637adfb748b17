/**
 * CASTOR_TRANSFER_MODE=presigned in the CAS layer: `PresignedTransferUrls` asks the blob store's
 * range presigner for one URL per xorb byte range, and V2 answers give every range its own entry.
 * The S3 presigner itself (URLs equal to the AWS SDK's) is tested in
 * test/storage/s3-range-presigner.test.ts, and against RGW in test/scaleout.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { PresignedTransferUrls } from "../../src/cas/presigned-transfer.js";
import { planReconstruction, prepareFile, prepareXorb } from "../../src/cas/reconstruction.js";
import { renderV1, renderV2, SINGLE_RANGE_V2_LIMITS, type RangeUrlSigner } from "../../src/cas/reconstruction-render.js";
import { byteRange, halfOpenByteRange, type ByteRange } from "../../src/format/ranges.js";
import { hashToHex, type Hash } from "../../src/format/hash.js";
import type { FileRecord } from "../../src/metadata/cas.js";
import { blobKey, checkByteSpan, rangeHeaderOf, type BlobKey, type ByteSpan, type RangePresigner } from "../../src/storage/blob-store.js";
import { hashOf, xorbRecord } from "../helpers/fixtures.js";

/** A presigner whose URLs spell out what was signed; it counts refreshes. */
class FakePresigner implements RangePresigner {
  refreshes = 0;
  presign(key: BlobKey, span: ByteSpan): string {
    checkByteSpan(key, span, Number.POSITIVE_INFINITY);
    return `https://s3.test/${key}?range=${rangeHeaderOf(span)}`;
  }
  async refresh(): Promise<void> {
    this.refreshes++;
  }
}

/** The URL the fake presigner gives for `range` (inclusive end) of the xorb `hex`. */
function fakeUrl(hex: string, range: { start: number; end: number }): string {
  return `https://s3.test/xorbs/${hex}?range=bytes=${range.start}-${range.end}`;
}

describe("PresignedTransferUrls", () => {
  it("presigns the xorb's object for exactly the range asked, inclusive end", () => {
    const signer = new PresignedTransferUrls(new FakePresigner());
    const xorb = hashOf("x");
    assert.equal(signer.sign(xorb, [byteRange(10, 20)]), fakeUrl(hashToHex(xorb), byteRange(10, 20)));
    assert.equal(signer.sign(xorb, [byteRange(0, 0)]), `https://s3.test/${blobKey("xorbs", xorb)}?range=bytes=0-0`);
  });

  it("signs one range per URL and refuses a range list", () => {
    const signer = new PresignedTransferUrls(new FakePresigner());
    assert.throws(() => signer.sign(hashOf("x"), [byteRange(0, 9), byteRange(20, 29)]), /exactly one byte range/);
    assert.throws(() => signer.sign(hashOf("x"), []), /exactly one byte range/);
  });

  it("renews the presigner's credentials on refresh()", async () => {
    const presigner = new FakePresigner();
    await new PresignedTransferUrls(presigner).refresh();
    assert.equal(presigner.refreshes, 1);
  });
});

// ---------------------------------------------------------------------------------------------
// V2 with one range per entry

/** A xorb of `count` chunks, 100 serialized bytes and 150 unpacked bytes each. */
const smallXorb = (label: string, count: number) => xorbRecord(label, count, { chunkBytes: 150, serializedBytes: 100 });

class RecordingSigner implements RangeUrlSigner {
  readonly calls: ByteRange[][] = [];
  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    this.calls.push(ranges.map((r) => byteRange(r.start, r.end)));
    return `https://s3.test/${hashToHex(xorbHash)}?r=${ranges.map((r) => `${r.start}-${r.end}`).join(",")}`;
  }
}

interface V2Body {
  offset_into_first_range: number;
  terms: { hash: string; unpacked_length: number; range: { start: number; end: number } }[];
  xorbs: Record<string, { url: string; ranges: { chunks: { start: number; end: number }; bytes: { start: number; end: number } }[] }[]>;
}

describe("renderV2 with SINGLE_RANGE_V2_LIMITS", () => {
  // Terms use chunks [0,2), [5,7), [9,10) of one xorb and [0,1) of another: three separate
  // ranges of the first xorb (gaps between them), which default rendering packs into one entry.
  const a = prepareXorb(smallXorb("xorb a", 10));
  const b = prepareXorb(smallXorb("xorb b", 3));
  const terms = [
    { xorbHash: a.hash, chunkStart: 0, chunkEnd: 2, unpackedLength: 300 },
    { xorbHash: b.hash, chunkStart: 0, chunkEnd: 1, unpackedLength: 150 },
    { xorbHash: a.hash, chunkStart: 5, chunkEnd: 7, unpackedLength: 300 },
    { xorbHash: a.hash, chunkStart: 9, chunkEnd: 10, unpackedLength: 150 },
  ];
  const record: FileRecord = { hash: hashOf("file"), size: 900, terms, sha256: null };
  const file = prepareFile(
    record,
    new Map([
      [a.hex, a],
      [b.hex, b],
    ]),
  );

  it("gives every range its own entry, signed for that range alone, and keeps terms and ranges unchanged", () => {
    const plan = planReconstruction(file, halfOpenByteRange(0, file.size));
    const packedSigner = new RecordingSigner();
    const packed = JSON.parse(renderV2(plan, packedSigner)) as V2Body;
    const singleSigner = new RecordingSigner();
    const single = JSON.parse(renderV2(plan, singleSigner, SINGLE_RANGE_V2_LIMITS)) as V2Body;

    assert.equal(packed.xorbs[a.hex].length, 1, "by default the three ranges of xorb a share one entry");
    assert.equal(packed.xorbs[a.hex][0].ranges.length, 3);
    assert.deepEqual(
      single.xorbs[a.hex].map((entry) => entry.ranges.length),
      [1, 1, 1],
    );
    assert.deepEqual(single.terms, packed.terms);
    assert.equal(single.offset_into_first_range, packed.offset_into_first_range);
    for (const hex of [a.hex, b.hex]) {
      assert.deepEqual(
        single.xorbs[hex].flatMap((entry) => entry.ranges),
        packed.xorbs[hex].flatMap((entry) => entry.ranges),
      );
      for (const entry of single.xorbs[hex]) {
        const [range] = entry.ranges;
        assert.equal(entry.url, `https://s3.test/${hex}?r=${range.bytes.start}-${range.bytes.end}`);
      }
    }
    assert.ok(
      singleSigner.calls.every((call) => call.length === 1),
      "only single ranges are ever signed",
    );
    assert.deepEqual(
      single.xorbs[a.hex].map((entry) => entry.ranges[0].bytes),
      [
        { start: 0, end: 199 },
        { start: 500, end: 699 },
        { start: 900, end: 999 },
      ],
    );
  });

  it("renders presigned URLs into V2 and V1 answers", () => {
    const signer = new PresignedTransferUrls(new FakePresigner());
    const plan = planReconstruction(file, halfOpenByteRange(160, 700));
    const v2 = JSON.parse(renderV2(plan, signer, SINGLE_RANGE_V2_LIMITS)) as V2Body;
    let urls = 0;
    for (const [hex, entries] of Object.entries(v2.xorbs)) {
      for (const entry of entries) {
        assert.equal(entry.url, fakeUrl(hex, entry.ranges[0].bytes));
        urls++;
      }
    }
    const v1 = JSON.parse(renderV1(plan, signer)) as { fetch_info: Record<string, { url: string; url_range: ByteRange }[]> };
    for (const [hex, entries] of Object.entries(v1.fetch_info)) {
      for (const entry of entries) {
        assert.equal(entry.url, fakeUrl(hex, entry.url_range));
        urls++;
      }
    }
    assert.ok(urls >= 4, "the plan has ranges of both xorbs in both answers");
    assert.throws(() => renderV2(plan, signer), /exactly one byte range/, "packed entries cannot be presigned");
  });
});
