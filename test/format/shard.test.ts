import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE,
  FILE_FLAG_WITH_METADATA_EXT,
  FILE_FLAG_WITH_VERIFICATION,
  SHARD_FOOTER_BYTES,
  SHARD_RECORD_BYTES,
  decodeShardFooter,
  hasGlobalDedupFlag,
  parseFullShard,
  parseUploadShard,
  shardSha256FromDigest,
  type ParsedShardFile,
  type ShardContent,
  type ShardFile,
  type ShardXorb,
} from "../../src/format/shard.js";
import { serializeFullShard, serializeUploadShard } from "../../src/format/shard-writer.js";
import { expectFormatError } from "../helpers/format-errors.js";
import { firstWord, hashFromHex, hashToHex, keyedChunkHash, verificationHash, ZERO_HASH } from "../../src/format/hash.js";
import { fromHex, loadVector, toHex } from "../helpers/vectors.js";

const uploadVector = loadVector("shard-upload-small.json");
const dedupSmallVector = loadVector("shard-dedup-response-small.json");
const gpt2Vector = loadVector("shard-dedup-response-gpt2.json");
const xorbSmallVector = loadVector("xorb-small.json");

const xetCoreUpload = (): Uint8Array => fromHex(uploadVector.xet_core_style_hex);
const hfJsUpload = (): Uint8Array => fromHex(uploadVector.huggingface_js_style_hex);

function u32At(bytes: Uint8Array, at: number): number {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(at, true);
}
function setU32(bytes: Uint8Array, at: number, value: number): void {
  new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).setUint32(at, value, true);
}
function setU64(bytes: Uint8Array, at: number, value: bigint): void {
  new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).setBigUint64(at, value, true);
}
function concat(...parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}

/** The registration of shard-upload-small.json as serializer input; only num_bytes_on_disk differs by client. */
function uploadVectorContent(numBytesOnDisk: number): ShardContent {
  const e = uploadVector.expected;
  const files: ShardFile[] = e.file_info_section.files.map((f: any) => ({
    fileHash: hashFromHex(f.file_hash),
    terms: f.terms.map((t: any) => ({
      xorbHash: hashFromHex(t.xorb_hash),
      unpackedBytes: t.unpacked_segment_bytes,
      chunkStart: t.chunk_index_start,
      chunkEnd: t.chunk_index_end,
    })),
    verificationHashes: f.verification_range_hashes.map(hashFromHex),
    sha256: hashFromHex(f.sha256_standard_hex),
  }));
  const xorbs: ShardXorb[] = e.xorb_info_section.xorbs.map((x: any) => ({
    xorbHash: hashFromHex(x.xorb_hash),
    flags: x.xorb_flags,
    numBytesInXorb: x.num_bytes_in_xorb,
    numBytesOnDisk,
    chunks: x.chunks.map((c: any) => ({
      hash: hashFromHex(c.chunk_hash),
      byteRangeStart: c.chunk_byte_range_start,
      unpackedBytes: c.unpacked_segment_bytes,
      flags: c.flags,
    })),
  }));
  return { files, xorbs };
}

/** Offset of file block `index` in the upload vector (every block: header, 1 term..., verif..., ext). */
function uploadVectorFileBlockOffset(index: number): number {
  let at = 48;
  for (const f of uploadVector.expected.file_info_section.files.slice(0, index)) at += (1 + 2 * f.num_entries + 1) * SHARD_RECORD_BYTES;
  return at;
}

/**
 * Inserts real lookup tables (as xet-core wrote before 2025-07) between the xorb bookend and the
 * footer of a complete shard, and rewrites the footer's lookup fields to describe them.
 */
function withLookupTables(full: Uint8Array): Uint8Array {
  const parsed = parseFullShard(full);
  const word = (h: Uint8Array) => firstWord(h);
  const fileRows: [bigint, number][] = [];
  let record = 0;
  for (const f of parsed.files) {
    fileRows.push([word(f.fileHash), record]);
    record += 1 + f.terms.length * (f.verificationHashes ? 2 : 1) + (f.sha256 ? 1 : 0);
  }
  const xorbRows: [bigint, number][] = [];
  const chunkRows: [bigint, number, number][] = [];
  record = 0;
  for (const x of parsed.xorbs) {
    xorbRows.push([word(x.xorbHash), record]);
    x.chunks.forEach((c, i) => {
      chunkRows.push([word(c.hash), record, i]);
    });
    record += 1 + x.chunks.length;
  }
  const byKey = (a: [bigint, ...number[]], b: [bigint, ...number[]]) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
  fileRows.sort(byKey);
  xorbRows.sort(byKey);
  chunkRows.sort(byKey);
  const tables = Buffer.alloc(fileRows.length * 12 + xorbRows.length * 12 + chunkRows.length * 16);
  let at = 0;
  for (const [k, r] of [...fileRows, ...xorbRows]) {
    tables.writeBigUInt64LE(k, at);
    tables.writeUInt32LE(r, at + 8);
    at += 12;
  }
  for (const [k, r, i] of chunkRows) {
    tables.writeBigUInt64LE(k, at);
    tables.writeUInt32LE(r, at + 8);
    tables.writeUInt32LE(i, at + 12);
    at += 16;
  }
  const sections = full.subarray(0, parsed.sectionsEnd);
  const footer = full.slice(full.length - SHARD_FOOTER_BYTES);
  const fileLookup = BigInt(parsed.sectionsEnd);
  const xorbLookup = fileLookup + BigInt(fileRows.length * 12);
  const chunkLookup = xorbLookup + BigInt(xorbRows.length * 12);
  setU64(footer, 24, fileLookup);
  setU64(footer, 32, BigInt(fileRows.length));
  setU64(footer, 40, xorbLookup);
  setU64(footer, 48, BigInt(xorbRows.length));
  setU64(footer, 56, chunkLookup);
  setU64(footer, 64, BigInt(chunkRows.length));
  setU64(footer, 192, chunkLookup + BigInt(chunkRows.length * 16));
  return concat(sections, tables, footer);
}

function assertUploadVectorParse(files: ParsedShardFile[], xorbs: ShardXorb[], numBytesOnDisk: number): void {
  const e = uploadVector.expected;
  assert.equal(files.length, e.file_info_section.files.length);
  e.file_info_section.files.forEach((want: any, i: number) => {
    const got = files[i];
    assert.equal(hashToHex(got.fileHash), want.file_hash);
    assert.equal(got.flags, FILE_FLAG_WITH_VERIFICATION + FILE_FLAG_WITH_METADATA_EXT);
    assert.equal(got.flags, 0xc0000000, want.flags);
    assert.equal(got.terms.length, want.num_entries);
    assert.deepEqual(
      got.terms.map((t) => ({
        xorb_hash: hashToHex(t.xorbHash),
        cas_flags: 0,
        unpacked_segment_bytes: t.unpackedBytes,
        chunk_index_start: t.chunkStart,
        chunk_index_end: t.chunkEnd,
      })),
      want.terms,
    );
    assert.deepEqual(got.verificationHashes?.map(hashToHex), want.verification_range_hashes);
    assert.equal(got.sha256Hex, want.sha256_standard_hex);
    assert.equal(toHex(got.sha256!), want.sha256_bytes_in_shard_hex);
    assert.equal(
      got.terms.reduce((sum, t) => sum + t.unpackedBytes, 0),
      want.file_size,
    );
  });
  assert.equal(xorbs.length, e.xorb_info_section.xorbs.length);
  e.xorb_info_section.xorbs.forEach((want: any, i: number) => {
    const got = xorbs[i];
    assert.equal(hashToHex(got.xorbHash), want.xorb_hash);
    assert.equal(got.flags, want.xorb_flags);
    assert.equal(got.chunks.length, want.num_entries);
    assert.equal(got.numBytesInXorb, want.num_bytes_in_xorb);
    assert.equal(got.numBytesOnDisk, numBytesOnDisk);
    assert.deepEqual(
      got.chunks.map((c) => ({
        chunk_hash: hashToHex(c.hash),
        chunk_byte_range_start: c.byteRangeStart,
        unpacked_segment_bytes: c.unpackedBytes,
        flags: c.flags,
      })),
      want.chunks,
    );
  });
}

describe("upload shards (shard-upload-small.json)", () => {
  const e = uploadVector.expected;
  const xorbExpect = e.xorb_info_section.xorbs[0];

  it("parses the xet-core variant (footer_size 0, no footer) to the expected values", () => {
    const bytes = xetCoreUpload();
    assert.equal(bytes.length, uploadVector.expected.total_length_xet_core_style);
    const shard = parseUploadShard(bytes);
    assert.equal(shard.declaredFooterSize, BigInt(e.header.footer_size_xet_core_style));
    assert.equal(shard.xorbSectionOffset, e.xorb_info_section.offset);
    assert.equal(shard.xorbSectionOffset - e.file_info_section.offset, e.file_info_section.length_including_bookend);
    assert.equal(shard.sectionsEnd, bytes.length);
    assertUploadVectorParse(shard.files, shard.xorbs, xorbExpect.num_bytes_on_disk_xet_core_style);
  });

  it("parses the huggingface.js variant (footer_size 200, zero-lookup footer) to the same registration", () => {
    const bytes = hfJsUpload();
    const shard = parseUploadShard(bytes);
    assert.equal(shard.declaredFooterSize, BigInt(e.header.footer_size_huggingface_js_style));
    assert.equal(shard.xorbSectionOffset, e.xorb_info_section.offset);
    assert.equal(shard.sectionsEnd, e.huggingface_js_footer.offset);
    assertUploadVectorParse(shard.files, shard.xorbs, xorbExpect.num_bytes_on_disk_huggingface_js_style);
  });

  it("stores each file's SHA-256 so that its Xet string form is the standard digest hex", () => {
    // File contents per the vector: A = c0‖c1‖c2, B = c2‖c0‖c1 (chunk data from xorb-small.json).
    const [c0, c1, c2] = xorbSmallVector.chunk_data_hex.map(fromHex);
    const contents = [concat(c0, c1, c2), concat(c2, c0, c1)];
    const shard = parseUploadShard(xetCoreUpload());
    shard.files.forEach((file, i) => {
      const digest = createHash("sha256").update(contents[i]).digest();
      assert.equal(file.sha256Hex, digest.toString("hex"));
      assert.deepEqual(file.sha256, shardSha256FromDigest(digest));
    });
    const sample = loadVector("hex-rendering.json").sha256_in_shards;
    const digest = createHash("sha256").update(sample.data_ascii).digest();
    assert.equal(toHex(shardSha256FromDigest(digest)), sample.bytes_stored_in_shard_hex);
  });

  it("carries range hashes that match the verification hash of the xorb's chunk hashes", () => {
    const shard = parseUploadShard(xetCoreUpload());
    const chunkHashes = shard.xorbs[0].chunks.map((c) => c.hash);
    for (const file of shard.files) {
      file.terms.forEach((term, t) => {
        assert.deepEqual(file.verificationHashes![t], verificationHash(chunkHashes.slice(term.chunkStart, term.chunkEnd)));
      });
    }
  });

  it("decodes the huggingface.js footer to the expected fields", () => {
    const bytes = hfJsUpload();
    const want = e.huggingface_js_footer;
    assert.equal(bytes.length, want.offset + SHARD_FOOTER_BYTES);
    const footer = decodeShardFooter(bytes.subarray(want.offset));
    assert.equal(footer.fileInfoOffset, BigInt(want.file_info_offset));
    assert.equal(footer.xorbInfoOffset, BigInt(want.xorb_info_offset));
    for (const field of ["fileLookupOffset", "fileLookupCount", "xorbLookupOffset", "xorbLookupCount", "chunkLookupOffset", "chunkLookupCount"] as const) {
      assert.equal(footer[field], BigInt(want.lookup_offsets_and_counts), field);
    }
    assert.deepEqual(footer.hmacKey, ZERO_HASH);
    assert.equal(footer.keyExpiry, 0n);
    assert.equal(footer.storedBytesOnDisk, BigInt(want.stored_bytes_on_disk));
    assert.equal(footer.materializedBytes, BigInt(want.materialized_bytes));
    assert.equal(footer.storedBytes, BigInt(want.stored_bytes));
    assert.equal(footer.footerOffset, BigInt(want.footer_offset));
  });

  it("serializes the xet-core variant byte for byte", () => {
    const bytes = serializeUploadShard(uploadVectorContent(xorbExpect.num_bytes_on_disk_xet_core_style), { kind: "xet-core" });
    assert.equal(toHex(bytes), uploadVector.xet_core_style_hex);
  });

  it("serializes the huggingface.js variant byte for byte", () => {
    // The creation timestamp is the one input that exists only inside the vector's bytes.
    const { creationTimestamp } = decodeShardFooter(hfJsUpload().subarray(e.huggingface_js_footer.offset));
    const bytes = serializeUploadShard(uploadVectorContent(xorbExpect.num_bytes_on_disk_huggingface_js_style), {
      kind: "huggingface.js",
      creationTimestamp,
    });
    assert.equal(toHex(bytes), uploadVector.huggingface_js_style_hex);
  });

  it("parses the stale variant: footer_size 200 with nothing after the xorb bookend", () => {
    const bytes = xetCoreUpload();
    setU64(bytes, 40, 200n);
    const shard = parseUploadShard(bytes);
    assert.equal(shard.declaredFooterSize, 200n);
    assertUploadVectorParse(shard.files, shard.xorbs, 0);
  });

  it("parses the pre-2025-07 variant: lookup tables and a real footer after the xorb bookend", () => {
    const content = uploadVectorContent(0);
    const full = withLookupTables(serializeFullShard(content, { creationTimestamp: 1_754_059_905, keyExpiry: 0 }));
    const shard = parseUploadShard(full);
    assert.equal(shard.sectionsEnd, e.total_length_xet_core_style);
    assertUploadVectorParse(shard.files, shard.xorbs, 0);
    // The lookup tables make the shard longer: 2 file + 1 xorb rows of 12 bytes, 3 chunk rows of 16.
    assert.equal(full.length, e.total_length_xet_core_style + 3 * 12 + 3 * 16 + SHARD_FOOTER_BYTES);
    const complete = parseFullShard(full);
    assert.equal(complete.footer.fileLookupCount, 2n);
    assert.equal(complete.footer.xorbLookupCount, 1n);
    assert.equal(complete.footer.chunkLookupCount, 3n);
    assertUploadVectorParse(complete.files, complete.xorbs, 0);
  });

  it("ignores any bytes after the xorb bookend, whatever they are", () => {
    const shard = parseUploadShard(concat(xetCoreUpload(), Buffer.alloc(37, 0xab)));
    assertUploadVectorParse(shard.files, shard.xorbs, 0);
  });

  it("parses a shard with no files and no xorbs", () => {
    const bytes = serializeUploadShard({ files: [], xorbs: [] }, { kind: "xet-core" });
    assert.equal(bytes.length, 48 * 3);
    const shard = parseUploadShard(bytes);
    assert.deepEqual([shard.files, shard.xorbs, shard.xorbSectionOffset, shard.sectionsEnd], [[], [], 96, 144]);
  });

  it("keeps file blocks without verification or metadata extension (none of them has verification)", () => {
    const content = uploadVectorContent(0);
    const files = content.files.map((f) => ({ ...f, verificationHashes: null, sha256: null }));
    const shard = parseUploadShard(serializeUploadShard({ files, xorbs: content.xorbs }, { kind: "xet-core" }));
    for (const [i, file] of shard.files.entries()) {
      assert.equal(file.flags, 0);
      assert.equal(file.verificationHashes, null);
      assert.equal(file.sha256, null);
      assert.equal(file.sha256Hex, null);
      assert.deepEqual(file.terms, files[i].terms);
    }
  });

  it("reports the global-dedup hint of chunk entries", () => {
    const content = uploadVectorContent(0);
    content.xorbs[0].chunks[1].flags = CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE;
    const chunks = parseUploadShard(serializeUploadShard(content, { kind: "xet-core" })).xorbs[0].chunks;
    assert.deepEqual(chunks.map(hasGlobalDedupFlag), [false, true, false]);
    assert.equal(chunks[1].flags, 0x80000000);
  });
});

describe("upload shard rejections", () => {
  it("rejects input that does not start with the shard tag", () => {
    const bytes = xetCoreUpload();
    bytes[13] ^= 0x20; // "HFRepoMetaDatA"
    expectFormatError(() => parseUploadShard(bytes), "bad_shard_header", /shard tag/);
    const tail = xetCoreUpload();
    tail[31] ^= 1; // the last magic byte counts too
    expectFormatError(() => parseUploadShard(tail), "bad_shard_header");
    expectFormatError(() => parseUploadShard(Buffer.from('{"not":"a shard"}')), "bad_shard_header");
  });

  it("rejects a header shorter than 48 bytes as truncated", () => {
    expectFormatError(() => parseUploadShard(new Uint8Array(0)), "truncated");
    expectFormatError(() => parseUploadShard(xetCoreUpload().subarray(0, 20)), "truncated");
    expectFormatError(() => parseUploadShard(xetCoreUpload().subarray(0, 47)), "truncated");
  });

  it("rejects any header version but 2", () => {
    for (const version of [0n, 1n, 3n, 1n << 63n]) {
      const bytes = xetCoreUpload();
      setU64(bytes, 32, version);
      expectFormatError(() => parseUploadShard(bytes), "bad_shard_header", new RegExp(`version ${version}`));
    }
  });

  it("rejects every truncation of the sections", () => {
    const bytes = xetCoreUpload();
    for (let length = 48; length < bytes.length; length++) {
      expectFormatError(() => parseUploadShard(bytes.subarray(0, length)), "truncated");
    }
  });

  it("rejects a file section without bookend", () => {
    // Header, then file block 0 only: the shard ends where the next block or bookend should be.
    const bytes = xetCoreUpload().subarray(0, uploadVectorFileBlockOffset(1));
    expectFormatError(() => parseUploadShard(bytes), "truncated", /file info section, before its bookend/);
  });

  it("rejects a xorb section without bookend", () => {
    const bytes = xetCoreUpload();
    expectFormatError(() => parseUploadShard(bytes.subarray(0, bytes.length - SHARD_RECORD_BYTES)), "truncated", /xorb info section, before its bookend/);
  });

  it("rejects an absurd term count before allocating for it", () => {
    const bytes = xetCoreUpload();
    setU32(bytes, 48 + 36, 0xffffffff);
    expectFormatError(() => parseUploadShard(bytes), "truncated", /declares 4294967295 terms/);
  });

  it("rejects an absurd chunk count before allocating for it", () => {
    const bytes = xetCoreUpload();
    setU32(bytes, uploadVector.expected.xorb_info_section.offset + 36, 0xffffffff);
    expectFormatError(() => parseUploadShard(bytes), "truncated", /declares 4294967295 chunks/);
  });

  it("rejects a term count that would swallow the section bookend", () => {
    // Without verification or metadata records, file 1's block is header + 2 terms; claiming 3
    // makes the bookend its third term, and the bytes after it leave room for that.
    const content = uploadVectorContent(0);
    const files = content.files.map((f) => ({ ...f, verificationHashes: null, sha256: null }));
    const bytes = serializeUploadShard({ files, xorbs: content.xorbs }, { kind: "xet-core" });
    const at = 48 + 2 * SHARD_RECORD_BYTES;
    assert.equal(u32At(bytes, at + 36), 2);
    setU32(bytes, at + 36, 3);
    expectFormatError(() => parseUploadShard(bytes), "bad_shard", /file block 1 .* bookend appears at byte 288/);
    // With verification records the overstated count first misreads a verification record as a term.
    const verified = xetCoreUpload();
    setU32(verified, uploadVectorFileBlockOffset(1) + 36, 3);
    expectFormatError(() => parseUploadShard(verified), "bad_shard", /term 2 of file block 1/);
  });

  it("rejects a chunk count that would swallow the section bookend", () => {
    const bytes = hfJsUpload(); // the footer after the bookend leaves room for the overstated count
    setU32(bytes, uploadVector.expected.xorb_info_section.offset + 36, 4);
    expectFormatError(() => parseUploadShard(bytes), "bad_shard", /bookend appears/);
  });

  it("rejects a term whose chunk range is empty or reversed", () => {
    const termAt = uploadVectorFileBlockOffset(0) + SHARD_RECORD_BYTES;
    for (const [start, end] of [
      [3, 3],
      [2, 1],
    ]) {
      const bytes = xetCoreUpload();
      setU32(bytes, termAt + 40, start);
      setU32(bytes, termAt + 44, end);
      expectFormatError(() => parseUploadShard(bytes), "bad_shard", new RegExp(`\\[${start}, ${end}\\)`));
    }
  });

  it("rejects a shard in which only some files carry verification entries", () => {
    const content = uploadVectorContent(0);
    const withVerification = serializeUploadShard(content, { kind: "xet-core" });
    const without = serializeUploadShard({ files: content.files.map((f) => ({ ...f, verificationHashes: null })), xorbs: content.xorbs }, { kind: "xet-core" });
    // Splice: block 0 with verification, then block 1 and the rest without.
    const block1Without = 48 + (1 + 1 + 1) * SHARD_RECORD_BYTES;
    const mixed = concat(withVerification.subarray(0, uploadVectorFileBlockOffset(1)), without.subarray(block1Without));
    expectFormatError(() => parseUploadShard(mixed), "bad_shard", /either every file/);
    const mixedOtherWay = concat(without.subarray(0, block1Without), withVerification.subarray(uploadVectorFileBlockOffset(1)));
    expectFormatError(() => parseUploadShard(mixedOtherWay), "bad_shard", /either every file/);
  });
});

describe("complete shards: the dedup answer (shard-dedup-response-small.json)", () => {
  const v = dedupSmallVector;
  const gpt2Footer = gpt2Vector.expected.footer;
  // The small answer reuses the production sample's creation time and 7-day expiry.
  const creationTimestamp = gpt2Footer.shard_creation_timestamp;
  const keyExpiry = gpt2Footer.shard_key_expiry;
  const key = hashFromHex(v.hmac_key);

  it("is reproduced byte for byte from the xorb section, key and timestamps", () => {
    const { xorbs } = uploadVectorContent(0);
    assert.equal(keyExpiry - creationTimestamp, 604_800);
    const bytes = serializeFullShard({ files: [], xorbs }, { hmacKey: key, creationTimestamp, keyExpiry });
    assert.equal(bytes.length, v.expected.length);
    assert.equal(toHex(bytes), v.response_hex);
  });

  it("reads back with keyed chunk hashes the client can match", () => {
    const shard = parseFullShard(fromHex(v.response_hex));
    assert.equal(shard.files.length, 0);
    assert.equal(shard.xorbSectionOffset, 96);
    assert.equal(shard.sectionsEnd, v.expected.footer_offset);
    assert.equal(shard.footer.footerOffset, BigInt(v.expected.footer_offset));
    for (const field of ["fileLookupOffset", "xorbLookupOffset", "chunkLookupOffset"] as const) {
      assert.equal(shard.footer[field], BigInt(v.expected.footer_offset));
    }
    assert.equal(shard.footer.creationTimestamp, BigInt(creationTimestamp));
    assert.equal(shard.footer.keyExpiry, BigInt(keyExpiry));
    assert.equal(hashToHex(shard.footer.hmacKey), v.hmac_key);
    assert.deepEqual(
      shard.xorbs[0].chunks.map((c) => hashToHex(c.hash)),
      v.expected.keyed_chunk_hashes,
    );
    // hmac(query_chunk_hash, key) == keyed_chunk_hashes[0]
    const query = hashFromHex(v.query_chunk_hash);
    assert.deepEqual(keyedChunkHash(shard.footer.hmacKey, query), shard.xorbs[0].chunks[0].hash);
    assert.equal(hashToHex(keyedChunkHash(key, query)), v.expected.keyed_chunk_hashes[0]);
  });

  it("writes raw chunk hashes when the key is zero or absent, and totals from its content", () => {
    const content = uploadVectorContent(1398);
    for (const hmacKey of [undefined, ZERO_HASH]) {
      const shard = parseFullShard(serializeFullShard(content, { hmacKey, creationTimestamp: 5, keyExpiry: 6 }));
      assert.deepEqual(
        shard.xorbs[0].chunks.map((c) => c.hash),
        content.xorbs[0].chunks.map((c) => c.hash),
      );
      assert.deepEqual(shard.footer.hmacKey, ZERO_HASH);
      assert.equal(shard.footer.storedBytesOnDisk, 1398n);
      assert.equal(shard.footer.storedBytes, 3565n);
      assert.equal(shard.footer.materializedBytes, 3565n * 2n); // Σ term bytes of both files
      assert.equal(shard.files.length, 2);
    }
  });

  it("keeps a u64::MAX expiry exact", () => {
    const max = (1n << 64n) - 1n;
    const shard = parseFullShard(serializeFullShard({ files: [], xorbs: [] }, { creationTimestamp: 0, keyExpiry: max }));
    assert.equal(shard.footer.keyExpiry, max);
  });
});

describe("complete shards: the real production answer (shard-dedup-response-gpt2.json)", () => {
  const want = gpt2Vector.expected;
  const bytes = new Uint8Array(Buffer.from(gpt2Vector.shard_base64, "base64"));

  it("parses to exactly the decoded fields", () => {
    assert.equal(bytes.length, want.length);
    const shard = parseFullShard(bytes);
    assert.equal(shard.files.length, want.file_info_section.files);
    assert.equal(shard.xorbSectionOffset, want.xorb_info_section.offset);
    assert.equal(shard.sectionsEnd, want.xorb_info_section.end_including_bookend);
    assert.equal(shard.xorbs.length, want.xorb_info_section.xorbs.length);
    want.xorb_info_section.xorbs.forEach((x: any, i: number) => {
      const got = shard.xorbs[i];
      assert.equal(hashToHex(got.xorbHash), x.xorb_hash);
      assert.equal(got.flags, x.xorb_flags);
      assert.equal(got.chunks.length, x.num_entries);
      assert.equal(got.numBytesInXorb, x.num_bytes_in_xorb);
      assert.equal(got.numBytesOnDisk, x.num_bytes_on_disk);
      assert.deepEqual(
        got.chunks.slice(0, x.first_chunks.length).map((c) => ({
          chunk_hash_keyed: hashToHex(c.hash),
          chunk_byte_range_start: c.byteRangeStart,
          unpacked_segment_bytes: c.unpackedBytes,
          flags: c.flags,
          reserved: 0,
        })),
        x.first_chunks,
      );
    });
    const f = want.footer;
    assert.equal(f.offset, bytes.length - SHARD_FOOTER_BYTES);
    assert.equal(f.version, 1);
    const footer = shard.footer;
    assert.equal(footer.fileInfoOffset, BigInt(f.file_info_offset));
    assert.equal(footer.xorbInfoOffset, BigInt(f.xorb_info_offset));
    assert.equal(footer.fileLookupOffset, BigInt(f.file_lookup_offset));
    assert.equal(footer.fileLookupCount, BigInt(f.file_lookup_num_entry));
    assert.equal(footer.xorbLookupOffset, BigInt(f.xorb_lookup_offset));
    assert.equal(footer.xorbLookupCount, BigInt(f.xorb_lookup_num_entry));
    assert.equal(footer.chunkLookupOffset, BigInt(f.chunk_lookup_offset));
    assert.equal(footer.chunkLookupCount, BigInt(f.chunk_lookup_num_entry));
    assert.equal(hashToHex(footer.hmacKey), f.chunk_hash_hmac_key);
    assert.equal(footer.creationTimestamp, BigInt(f.shard_creation_timestamp));
    assert.equal(footer.keyExpiry, BigInt(f.shard_key_expiry));
    assert.equal(footer.keyExpiry - footer.creationTimestamp, BigInt(f.expiry_minus_creation_seconds));
    assert.equal(footer.storedBytesOnDisk, BigInt(f.stored_bytes_on_disk));
    assert.equal(footer.materializedBytes, BigInt(f.materialized_bytes));
    assert.equal(footer.storedBytes, BigInt(f.stored_bytes));
    assert.equal(footer.footerOffset, BigInt(f.footer_offset));
    assert.equal(
      bytes.subarray(f.offset + 120, f.offset + 168).every((b) => b === 0),
      f.reserved_48_bytes_all_zero,
    );
    // Observations of the vector that castor's own answers copy.
    assert.equal(footer.storedBytes, BigInt(shard.xorbs.reduce((sum, x) => sum + x.numBytesInXorb, 0)));
    for (const x of shard.xorbs) {
      let offset = 0;
      for (const c of x.chunks) {
        assert.equal(c.byteRangeStart, offset);
        assert.equal(c.flags, 0);
        offset += c.unpackedBytes;
      }
      assert.equal(offset, x.numBytesInXorb);
    }
  });

  it("holds keyed hashes a client matches with the footer key (verification-and-hmac.json)", () => {
    const shard = parseFullShard(bytes);
    const sample = loadVector("verification-and-hmac.json").hmac_vectors[1];
    assert.equal(toHex(shard.footer.hmacKey), sample.key_raw_hex);
    const keyed = keyedChunkHash(shard.footer.hmacKey, hashFromHex(sample.chunk_hash));
    assert.equal(hashToHex(keyed), sample.keyed_hash);
    assert.deepEqual(keyed, shard.xorbs[1].chunks[0].hash);
  });

  it("also parses as an upload (the sequential walk ignores the footer)", () => {
    const upload = parseUploadShard(bytes);
    assert.equal(upload.declaredFooterSize, 200n);
    assert.equal(upload.sectionsEnd, want.xorb_info_section.end_including_bookend);
    assert.deepEqual(
      upload.xorbs.map((x) => x.chunks.length),
      want.xorb_info_section.xorbs.map((x: any) => x.num_entries),
    );
  });
});

describe("complete shard rejections", () => {
  const full = (): Uint8Array => fromHex(dedupSmallVector.response_hex);
  const footerAt = (bytes: Uint8Array) => bytes.length - SHARD_FOOTER_BYTES;

  it("rejects upload bodies that are not complete shards", () => {
    expectFormatError(() => parseFullShard(xetCoreUpload()), "bad_shard_header", /footer_size 200/);
    // huggingface.js writes zero lookup offsets: hf.js's own dedup reader would find no xorbs.
    expectFormatError(() => parseFullShard(hfJsUpload()), "bad_footer", /file_lookup_offset is 0 but must be 816/);
    const stale = xetCoreUpload();
    setU64(stale, 40, 200n);
    expectFormatError(() => parseFullShard(stale), "bad_footer");
  });

  it("rejects a shard too short to hold header and footer", () => {
    expectFormatError(() => parseFullShard(full().subarray(0, 247)), "truncated");
  });

  it("rejects any footer version but 1", () => {
    for (const version of [0n, 2n]) {
      const bytes = full();
      setU64(bytes, footerAt(bytes), version);
      expectFormatError(() => parseFullShard(bytes), "bad_footer", new RegExp(`version ${version}`));
    }
    expectFormatError(() => decodeShardFooter(new Uint8Array(199)), "truncated");
  });

  it("rejects a footer_offset that is not length − 200 (cut or padded shards)", () => {
    const padded = concat(full(), new Uint8Array(8));
    expectFormatError(() => parseFullShard(padded), "bad_footer");
    const bytes = full();
    setU64(bytes, footerAt(bytes) + 192, 0n);
    expectFormatError(() => parseFullShard(bytes), "bad_footer", /footer_offset is 0 but must be 336/);
  });

  it("rejects file or xorb section offsets that do not match the layout", () => {
    const file = full();
    setU64(file, footerAt(file) + 8, 0n);
    expectFormatError(() => parseFullShard(file), "bad_footer", /file_info_offset is 0 but must be 48/);
    const xorb = full();
    setU64(xorb, footerAt(xorb) + 16, 48n);
    expectFormatError(() => parseFullShard(xorb), "bad_footer", /xorb_info_offset is 48 but must be 96/);
  });

  it("rejects lookup offsets and counts that do not describe the bytes before the footer", () => {
    const cases: [number, bigint, RegExp][] = [
      [24, 300n, /file_lookup_offset is 300 but must be 336/],
      [32, 1n, /xorb_lookup_offset is 336 but must be 348/], // a file row of 12 bytes that is not there
      [40, 0n, /xorb_lookup_offset is 0/],
      [48, 1n, /chunk_lookup_offset is 336 but must be 348/],
      [56, (1n << 64n) - 1n, /chunk_lookup_offset/],
      [64, 1n, /chunk lookup table of 1 entries .* ends at byte 352/],
      [64, (1n << 64n) - 1n, /chunk lookup table/],
    ];
    for (const [field, value, message] of cases) {
      const bytes = full();
      setU64(bytes, footerAt(bytes) + field, value);
      expectFormatError(() => parseFullShard(bytes), "bad_footer", message);
    }
  });

  it("rejects sections whose bookend would lie inside the footer", () => {
    // Drop the xorb bookend: the walk must stop at the footer, not read it as records.
    const bytes = full();
    const end = footerAt(bytes) - SHARD_RECORD_BYTES;
    const cut = concat(bytes.subarray(0, end), bytes.subarray(footerAt(bytes)));
    setU64(cut, cut.length - 8, BigInt(cut.length - SHARD_FOOTER_BYTES));
    expectFormatError(() => parseFullShard(cut), "truncated", /xorb info section, before its bookend/);
  });

  it("rejects lookup tables that are shorter than their declared counts", () => {
    const withTables = withLookupTables(serializeFullShard(uploadVectorContent(0), { creationTimestamp: 1, keyExpiry: 2 }));
    const short = concat(withTables.subarray(0, withTables.length - SHARD_FOOTER_BYTES - 16), withTables.subarray(withTables.length - SHARD_FOOTER_BYTES));
    setU64(short, short.length - 8, BigInt(short.length - SHARD_FOOTER_BYTES));
    expectFormatError(() => parseFullShard(short), "bad_footer", /chunk lookup table of 3 entries/);
  });
});

describe("serializer input checks", () => {
  const content = () => uploadVectorContent(0);
  const refuses = (c: ShardContent, message: RegExp) => {
    assert.throws(
      () => serializeUploadShard(c, { kind: "xet-core" }),
      (e: unknown) => e instanceof RangeError && message.test(e.message),
    );
    assert.throws(() => serializeFullShard(c, { creationTimestamp: 0, keyExpiry: 0 }), RangeError);
  };

  it("refuses verification hashes that do not match the terms", () => {
    const c = content();
    c.files[1].verificationHashes!.pop();
    refuses(c, /2 terms but 1 verification hashes/);
  });

  it("refuses a mix of files with and without verification", () => {
    const c = content();
    c.files[1].verificationHashes = null;
    refuses(c, /every file/);
  });

  it("refuses values that do not fit their u32 fields", () => {
    const tooBig = content();
    tooBig.xorbs[0].chunks[0].unpackedBytes = 2 ** 32;
    refuses(tooBig, /chunks\[0\]\.unpackedBytes/);
    const negative = content();
    negative.files[0].terms[0].unpackedBytes = -1;
    refuses(negative, /unpackedBytes/);
    const fraction = content();
    fraction.xorbs[0].numBytesOnDisk = 1.5;
    refuses(fraction, /numBytesOnDisk/);
  });

  it("refuses empty chunk ranges, short hashes and bookend-like block hashes", () => {
    const empty = content();
    empty.files[0].terms[0].chunkEnd = empty.files[0].terms[0].chunkStart;
    refuses(empty, /start must be < end/);
    const short = content();
    short.xorbs[0].chunks[2].hash = new Uint8Array(31);
    refuses(short, /32 raw bytes/);
    const bookend = content();
    bookend.xorbs[0].xorbHash = new Uint8Array(32).fill(0xff);
    refuses(bookend, /bookend/);
  });

  it("refuses footer timestamps and keys that do not fit", () => {
    const c = content();
    assert.throws(() => serializeFullShard(c, { creationTimestamp: -1, keyExpiry: 0 }), RangeError);
    assert.throws(() => serializeFullShard(c, { creationTimestamp: 0, keyExpiry: 1n << 64n }), RangeError);
    assert.throws(() => serializeFullShard(c, { creationTimestamp: 0.5, keyExpiry: 0 }), RangeError);
    assert.throws(() => serializeFullShard(c, { hmacKey: new Uint8Array(16), creationTimestamp: 0, keyExpiry: 0 }), RangeError);
    assert.throws(() => shardSha256FromDigest(new Uint8Array(20)), RangeError);
  });
});
