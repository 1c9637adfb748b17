/**
 * The MDB shard format (docs/protocol.md §6, §7.3): its layout and records, parsing uploaded
 * shards, reading complete shards (global-dedup answers) and the canonical form of an upload.
 * Writing both forms is shard-writer.ts.
 *
 * Layout: 48-byte header, file-info section, xorb-info section (each a run of 48-byte records
 * closed by a bookend record), then optionally lookup tables and a 200-byte footer.
 *
 * Why two readers: uploads come in several wire variants whose header `footer_size` and footer
 * cannot be trusted (§6.7), so `parseUploadShard` walks the sections sequentially and ignores
 * everything after the second bookend. A dedup answer is a complete shard whose footer real
 * clients rely on, so `parseFullShard` also decodes the footer and checks every offset in it
 * against the layout it actually found.
 *
 * Hand-written: no maintained JavaScript library reads or writes this format.
 */
import { FormatError } from "./errors.js";
import { HASH_BYTES, hashToHex, type Hash } from "./hash.js";
import { runToEnd } from "./steps.js";

/** "HFRepoMetaData", NUL, then 17 fixed magic bytes; real clients compare all 32 (§6.2). */
export const SHARD_TAG: Uint8Array = Uint8Array.from([
  0x48, 0x46, 0x52, 0x65, 0x70, 0x6f, 0x4d, 0x65, 0x74, 0x61, 0x44, 0x61, 0x74, 0x61, 0x00, 0x55, 0x69, 0x67, 0x45, 0x6a, 0x7b, 0x81, 0x57, 0x83, 0xa5, 0xbd,
  0xd9, 0x5c, 0xcd, 0xd1, 0x4a, 0xa9,
]);
export const SHARD_HEADER_VERSION = 2;
export const SHARD_FOOTER_VERSION = 1;
export const SHARD_HEADER_BYTES = 48;
/** Every record of both sections (headers, entries, bookends) has this size. */
export const SHARD_RECORD_BYTES = 48;
export const SHARD_FOOTER_BYTES = 200;

/** File block flag: one verification record per term follows the terms (§6.3). */
export const FILE_FLAG_WITH_VERIFICATION = 0x8000_0000;
/** File block flag: one metadata-extension record (the file's SHA-256) ends the block. */
export const FILE_FLAG_WITH_METADATA_EXT = 0x4000_0000;
/** Chunk entry flag: the writer marks this chunk as tracked by global deduplication (§6.4). */
export const CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE = 0x8000_0000;

const FILE_LOOKUP_ENTRY_BYTES = 12n;
const XORB_LOOKUP_ENTRY_BYTES = 12n;
const CHUNK_LOOKUP_ENTRY_BYTES = 16n;

/** One term of a file: chunks [chunkStart, chunkEnd) of one xorb. */
export interface ShardTerm {
  xorbHash: Hash;
  /** Uncompressed bytes the term contributes to the file. */
  unpackedBytes: number;
  chunkStart: number;
  /** Exclusive. */
  chunkEnd: number;
}

/** A file reconstruction as written into a shard. */
export interface ShardFile {
  fileHash: Hash;
  terms: ShardTerm[];
  /** One range hash (§3.6) per term, or null when the block carries no verification records. */
  verificationHashes: Hash[] | null;
  /**
   * SHA-256 of the whole file as stored in the shard (the metadata extension), or null.
   * Stored like every hash: `hashToHex(sha256)` is the standard SHA-256 hex string (§2); use
   * `shardSha256FromDigest` to convert a digest from `node:crypto`.
   */
  sha256: Hash | null;
}

/** A file block as read: the written fields plus what the reader derives. */
export interface ParsedShardFile extends ShardFile {
  /** The raw u32 block flags (reserved bits are kept, not rejected). */
  flags: number;
  /** The standard lowercase SHA-256 hex string, or null without a metadata extension. */
  sha256Hex: string | null;
}

export interface ShardChunk {
  /** Raw chunk hash, or its keyed form in a shard whose footer has a non-zero key (§3.7). */
  hash: Hash;
  /** Cumulative uncompressed offset of the chunk inside its xorb. */
  byteRangeStart: number;
  unpackedBytes: number;
  /** Raw u32 flags; see CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE. */
  flags: number;
}

/** A xorb block; its number of chunks is `chunks.length`. */
export interface ShardXorb {
  xorbHash: Hash;
  flags: number;
  /** Total uncompressed bytes of the xorb. */
  numBytesInXorb: number;
  /** Serialized length as the writer claims it (xet-core always writes 0): informational only. */
  numBytesOnDisk: number;
  chunks: ShardChunk[];
}

export interface ShardContent {
  files: readonly ShardFile[];
  xorbs: readonly ShardXorb[];
}

/** What both readers find between the header and the end of the xorb section. */
export interface ShardSections {
  files: ParsedShardFile[];
  xorbs: ShardXorb[];
  /** Byte offset of the first record of the xorb-info section. */
  xorbSectionOffset: number;
  /** Byte offset just past the xorb-info bookend: where lookup tables or a footer may begin. */
  sectionsEnd: number;
}

export interface ParsedUploadShard extends ShardSections {
  /** The header's footer_size, reported for diagnostics only: uploads lie about it (§6.7). */
  declaredFooterSize: bigint;
}

/**
 * The 200-byte footer (§6.6), version 1. Every u64 stays a bigint: `shard_key_expiry` is
 * u64::MAX in some xet-core shards, and offsets are only trustworthy once checked.
 */
export interface ShardFooter {
  fileInfoOffset: bigint;
  xorbInfoOffset: bigint;
  fileLookupOffset: bigint;
  fileLookupCount: bigint;
  xorbLookupOffset: bigint;
  xorbLookupCount: bigint;
  chunkLookupOffset: bigint;
  chunkLookupCount: bigint;
  /** All zero means chunk hashes are stored raw. */
  hmacKey: Hash;
  /** Unix seconds. */
  creationTimestamp: bigint;
  /** Unix seconds after which clients stop using the keyed hashes of this shard. */
  keyExpiry: bigint;
  storedBytesOnDisk: bigint;
  materializedBytes: bigint;
  storedBytes: bigint;
  footerOffset: bigint;
}

export interface ParsedFullShard extends ShardSections {
  footer: ShardFooter;
}

/** What the caller chooses for a complete shard's footer; the offsets and totals are derived. */
export interface ShardFooterInput {
  /** Chunk hashes are written keyed with this key (§3.7) unless it is absent or all zero. */
  hmacKey?: Hash;
  creationTimestamp: number | bigint;
  keyExpiry: number | bigint;
}

export type UploadShardVariant =
  /** xet-core since 2025-11 and the spec: footer_size 0, nothing after the xorb bookend. */
  | { kind: "xet-core" }
  /**
   * huggingface.js: footer_size 200 and a footer whose lookup offsets and counts, key, expiry
   * and materialized_bytes are all zero.
   */
  | { kind: "huggingface.js"; creationTimestamp: number | bigint };

// ---------------------------------------------------------------------------------------------
// Reading

/**
 * Parses an uploaded shard body (POST /v1/shards): header, then file blocks up to their
 * bookend, then xorb blocks up to theirs. `footer_size` and whatever follows the second bookend
 * (nothing, a footer, lookup tables + footer) are ignored, as the real variants require (§6.7).
 *
 * Only structure is checked; whether xorbs exist or hashes match is the service's job (§6.8).
 * Hashes in the result are views into `bytes`: do not modify `bytes` while using the result.
 * Throws FormatError `bad_shard_header`, `bad_shard` or `truncated`.
 */
export function parseUploadShard(bytes: Uint8Array): ParsedUploadShard {
  return runToEnd(parseUploadShardInSteps(bytes));
}

/**
 * Records a parsing step reads before it pauses. A 65 MiB shard has ~1.4 million records and
 * takes most of a second to parse; in steps of this size (a few milliseconds each) a server
 * can let other work run between them.
 */
export const SHARD_RECORDS_PER_STEP = 16_384;

/**
 * `parseUploadShard` as a generator that pauses (yields) after every `SHARD_RECORDS_PER_STEP`
 * records and returns the parsed shard; the caller decides what runs between steps. Errors are
 * thrown from the step that meets them.
 */
export function* parseUploadShardInSteps(bytes: Uint8Array): Generator<void, ParsedUploadShard, void> {
  const view = dataViewOf(bytes);
  const declaredFooterSize = readHeader(bytes, view);
  const sections = yield* readSections(bytes, view, bytes.length, new StepCounter(SHARD_RECORDS_PER_STEP));
  return { declaredFooterSize, ...sections };
}

/** Counts records read and says when a step is complete. */
class StepCounter {
  private records = 0;
  constructor(private readonly recordsPerStep: number) {}
  /** Counts `n` records; true when the step is complete (the counter restarts). */
  count(n: number): boolean {
    this.records += n;
    if (this.records < this.recordsPerStep) return false;
    this.records = 0;
    return true;
  }
}

/**
 * Reads a complete shard with its 200-byte footer — the form of a global-dedup answer (§7.3).
 * Besides the sequential sections it requires header footer_size 200, footer version 1, and
 * footer offsets that match the layout exactly: file info at 48, xorb info where that section
 * really starts, the lookup tables packed between the xorb bookend and the footer (sized by
 * their counts), and footer_offset = length − 200.
 *
 * Hashes in the result are views into `bytes`. Throws FormatError `bad_shard_header`,
 * `bad_shard`, `truncated` or `bad_footer`.
 */
export function parseFullShard(bytes: Uint8Array): ParsedFullShard {
  const view = dataViewOf(bytes);
  const declaredFooterSize = readHeader(bytes, view);
  if (declaredFooterSize !== BigInt(SHARD_FOOTER_BYTES)) {
    throw new FormatError(
      "bad_shard_header",
      `a complete shard declares footer_size ${SHARD_FOOTER_BYTES} in its header, this one declares ${declaredFooterSize}; an upload body without a footer must be read as an upload`,
    );
  }
  if (bytes.length < SHARD_HEADER_BYTES + SHARD_FOOTER_BYTES) {
    throw new FormatError(
      "truncated",
      `a complete shard has at least ${SHARD_HEADER_BYTES + SHARD_FOOTER_BYTES} bytes (header and footer), got ${bytes.length}`,
    );
  }
  const footerStart = bytes.length - SHARD_FOOTER_BYTES;
  const footer = decodeShardFooter(bytes.subarray(footerStart));
  const at = BigInt(footerStart);

  expectFooterOffset("footer_offset", footer.footerOffset, at, "the shard is truncated or has bytes after its footer");
  expectFooterOffset("file_info_offset", footer.fileInfoOffset, BigInt(SHARD_HEADER_BYTES), "the file info section follows the header");

  // The sections must end before the footer: reading them over the whole buffer would let a
  // missing bookend swallow the footer.
  const sections = runToEnd(readSections(bytes, view, footerStart, new StepCounter(Infinity)));
  expectFooterOffset("xorb_info_offset", footer.xorbInfoOffset, BigInt(sections.xorbSectionOffset), "that is where the xorb section starts");

  const fileLookupEnd = BigInt(sections.sectionsEnd) + footer.fileLookupCount * FILE_LOOKUP_ENTRY_BYTES;
  const xorbLookupEnd = footer.xorbLookupOffset + footer.xorbLookupCount * XORB_LOOKUP_ENTRY_BYTES;
  const chunkLookupEnd = footer.chunkLookupOffset + footer.chunkLookupCount * CHUNK_LOOKUP_ENTRY_BYTES;
  expectFooterOffset(
    "file_lookup_offset",
    footer.fileLookupOffset,
    BigInt(sections.sectionsEnd),
    "the lookup tables start right after the xorb section's bookend",
  );
  expectFooterOffset("xorb_lookup_offset", footer.xorbLookupOffset, fileLookupEnd, `the file lookup table of ${footer.fileLookupCount} entries ends there`);
  expectFooterOffset("chunk_lookup_offset", footer.chunkLookupOffset, xorbLookupEnd, `the xorb lookup table of ${footer.xorbLookupCount} entries ends there`);
  if (chunkLookupEnd !== at) {
    throw new FormatError(
      "bad_footer",
      `the chunk lookup table of ${footer.chunkLookupCount} entries at byte ${footer.chunkLookupOffset} ends at byte ${chunkLookupEnd}, but the footer starts at byte ${at}`,
    );
  }
  return { ...sections, footer };
}

/**
 * Decodes one 200-byte footer record without checking it against any layout (parseFullShard
 * does that). Throws FormatError `truncated` for a short record, `bad_footer` for a version ≠ 1.
 */
export function decodeShardFooter(record: Uint8Array): ShardFooter {
  if (record.length < SHARD_FOOTER_BYTES) {
    throw new FormatError("truncated", `a shard footer has ${SHARD_FOOTER_BYTES} bytes, got ${record.length}`);
  }
  const view = dataViewOf(record);
  const u64 = (at: number): bigint => view.getBigUint64(at, true);
  const version = u64(0);
  if (version !== BigInt(SHARD_FOOTER_VERSION)) {
    throw new FormatError(
      "bad_footer",
      `unsupported shard footer version ${version}; only version ${SHARD_FOOTER_VERSION} exists (or this is not a complete shard)`,
    );
  }
  return {
    fileInfoOffset: u64(8),
    xorbInfoOffset: u64(16),
    fileLookupOffset: u64(24),
    fileLookupCount: u64(32),
    xorbLookupOffset: u64(40),
    xorbLookupCount: u64(48),
    chunkLookupOffset: u64(56),
    chunkLookupCount: u64(64),
    hmacKey: record.subarray(72, 72 + HASH_BYTES),
    creationTimestamp: u64(104),
    keyExpiry: u64(112),
    // 120..168 is reserved.
    storedBytesOnDisk: u64(168),
    materializedBytes: u64(176),
    storedBytes: u64(184),
    footerOffset: u64(192),
  };
}

function expectFooterOffset(field: string, actual: bigint, expected: bigint, why: string): void {
  if (actual !== expected) {
    throw new FormatError("bad_footer", `footer ${field} is ${actual} but must be ${expected}: ${why}`);
  }
}

/** A DataView over exactly `bytes`. */
export function dataViewOf(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Validates tag and version; returns the declared footer size. */
function readHeader(bytes: Uint8Array, view: DataView): bigint {
  const comparable = Math.min(bytes.length, SHARD_TAG.length);
  for (let i = 0; i < comparable; i++) {
    if (bytes[i] !== SHARD_TAG[i]) {
      throw new FormatError("bad_shard_header", "not a shard: it must start with the 32-byte shard tag ('HFRepoMetaData', NUL, 17 magic bytes)");
    }
  }
  if (bytes.length < SHARD_HEADER_BYTES) {
    throw new FormatError("truncated", `a shard starts with a ${SHARD_HEADER_BYTES}-byte header, got only ${bytes.length} bytes`);
  }
  const version = view.getBigUint64(32, true);
  if (version !== BigInt(SHARD_HEADER_VERSION)) {
    throw new FormatError("bad_shard_header", `unsupported shard header version ${version}; only version ${SHARD_HEADER_VERSION} is accepted`);
  }
  return view.getBigUint64(40, true);
}

/** A record whose 32 hash bytes are all 0xFF closes its section; readers test nothing else. */
export function isBookend(bytes: Uint8Array, at: number): boolean {
  for (let i = 0; i < HASH_BYTES; i++) if (bytes[at + i] !== 0xff) return false;
  return true;
}

/**
 * Fails when a record inside a block's counted run is a bookend: the block's count overstates
 * its records, and trusting it would read the section's end as data.
 */
function rejectBookendInBlock(bytes: Uint8Array, at: number, block: string): void {
  if (isBookend(bytes, at)) {
    throw new FormatError("bad_shard", `${block} declares more records than it has: a section bookend appears at byte ${at} inside it`);
  }
}

function* readSections(bytes: Uint8Array, view: DataView, end: number, steps: StepCounter): Generator<void, ShardSections, void> {
  const files: ParsedShardFile[] = [];
  const xorbSectionOffset = yield* readFileSection(bytes, view, SHARD_HEADER_BYTES, end, files, steps);
  const xorbs: ShardXorb[] = [];
  const sectionsEnd = yield* readXorbSection(bytes, view, xorbSectionOffset, end, xorbs, steps);
  return { files, xorbs, xorbSectionOffset, sectionsEnd };
}

/** Reads file blocks from `offset` up to and including the bookend; returns the offset after it. */
function* readFileSection(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  end: number,
  files: ParsedShardFile[],
  steps: StepCounter,
): Generator<void, number, void> {
  let sectionHasVerification: boolean | null = null;
  for (;;) {
    if (end - offset < SHARD_RECORD_BYTES) {
      throw new FormatError("truncated", `the shard ends at byte ${end} inside the file info section, before its bookend (after ${files.length} file blocks)`);
    }
    if (isBookend(bytes, offset)) return offset + SHARD_RECORD_BYTES;

    const block = `file block ${files.length} (at byte ${offset})`;
    const fileHash = bytes.subarray(offset, offset + HASH_BYTES);
    const flags = view.getUint32(offset + 32, true);
    const termCount = view.getUint32(offset + 36, true);
    const hasVerification = (flags & FILE_FLAG_WITH_VERIFICATION) !== 0;
    const hasMetadataExt = (flags & FILE_FLAG_WITH_METADATA_EXT) !== 0;

    // xet-core refuses a shard in which only some files carry verification (§6.8 step 3).
    if (sectionHasVerification === null) {
      sectionHasVerification = hasVerification;
    } else if (hasVerification !== sectionHasVerification) {
      throw new FormatError(
        "bad_shard",
        `${block} ${hasVerification ? "has" : "lacks"} verification entries but the blocks before it ${sectionHasVerification ? "have" : "lack"} them; either every file of a shard carries verification entries or none does`,
      );
    }

    offset += SHARD_RECORD_BYTES;
    // termCount ≤ 2^32 − 1, so this stays an exact integer (< 2^39).
    const recordCount = termCount * (hasVerification ? 2 : 1) + (hasMetadataExt ? 1 : 0);
    if (recordCount * SHARD_RECORD_BYTES > end - offset) {
      throw new FormatError(
        "truncated",
        `${block} declares ${termCount} terms, i.e. ${recordCount} records of ${SHARD_RECORD_BYTES} bytes, but only ${end - offset} bytes remain`,
      );
    }

    const terms: ShardTerm[] = [];
    for (let i = 0; i < termCount; i++, offset += SHARD_RECORD_BYTES) {
      if (steps.count(1)) yield;
      rejectBookendInBlock(bytes, offset, block);
      const chunkStart = view.getUint32(offset + 40, true);
      const chunkEnd = view.getUint32(offset + 44, true);
      if (chunkStart >= chunkEnd) {
        throw new FormatError(
          "bad_shard",
          `term ${i} of ${block} has chunk range [${chunkStart}, ${chunkEnd}); a term covers at least one chunk (start < end)`,
        );
      }
      terms.push({
        xorbHash: bytes.subarray(offset, offset + HASH_BYTES),
        // Bytes 32..35 are the term's xorb flags, always 0 and unused.
        unpackedBytes: view.getUint32(offset + 36, true),
        chunkStart,
        chunkEnd,
      });
    }

    let verificationHashes: Hash[] | null = null;
    if (hasVerification) {
      verificationHashes = [];
      for (let i = 0; i < termCount; i++, offset += SHARD_RECORD_BYTES) {
        if (steps.count(1)) yield;
        rejectBookendInBlock(bytes, offset, block);
        verificationHashes.push(bytes.subarray(offset, offset + HASH_BYTES));
      }
    }

    let sha256: Hash | null = null;
    if (hasMetadataExt) {
      rejectBookendInBlock(bytes, offset, block);
      sha256 = bytes.subarray(offset, offset + HASH_BYTES);
      offset += SHARD_RECORD_BYTES;
    }

    files.push({ fileHash, flags, terms, verificationHashes, sha256, sha256Hex: sha256 === null ? null : hashToHex(sha256) });
    if (steps.count(1)) yield;
  }
}

/** Reads xorb blocks from `offset` up to and including the bookend; returns the offset after it. */
function* readXorbSection(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  end: number,
  xorbs: ShardXorb[],
  steps: StepCounter,
): Generator<void, number, void> {
  for (;;) {
    if (end - offset < SHARD_RECORD_BYTES) {
      throw new FormatError("truncated", `the shard ends at byte ${end} inside the xorb info section, before its bookend (after ${xorbs.length} xorb blocks)`);
    }
    if (isBookend(bytes, offset)) return offset + SHARD_RECORD_BYTES;

    const block = `xorb block ${xorbs.length} (at byte ${offset})`;
    const xorbHash = bytes.subarray(offset, offset + HASH_BYTES);
    const flags = view.getUint32(offset + 32, true);
    const chunkCount = view.getUint32(offset + 36, true);
    const numBytesInXorb = view.getUint32(offset + 40, true);
    const numBytesOnDisk = view.getUint32(offset + 44, true);
    offset += SHARD_RECORD_BYTES;
    if (chunkCount * SHARD_RECORD_BYTES > end - offset) {
      throw new FormatError("truncated", `${block} declares ${chunkCount} chunks of ${SHARD_RECORD_BYTES} bytes each, but only ${end - offset} bytes remain`);
    }

    const chunks: ShardChunk[] = [];
    for (let i = 0; i < chunkCount; i++, offset += SHARD_RECORD_BYTES) {
      if (steps.count(1)) yield;
      rejectBookendInBlock(bytes, offset, block);
      chunks.push({
        hash: bytes.subarray(offset, offset + HASH_BYTES),
        byteRangeStart: view.getUint32(offset + 32, true),
        unpackedBytes: view.getUint32(offset + 36, true),
        // Bytes 44..47 are reserved.
        flags: view.getUint32(offset + 40, true),
      });
    }
    xorbs.push({ xorbHash, flags, numBytesInXorb, numBytesOnDisk, chunks });
    if (steps.count(1)) yield;
  }
}

// ---------------------------------------------------------------------------------------------
// Canonical form of an upload

/**
 * The canonical form of an upload: every field that carries no content is rewritten, in
 * place, so that every wire variant of the same content has the same bytes up to
 * `sectionsEnd` (§6.7): the header's footer_size (0, a stale 200, or hf.js's 200), each xorb
 * block's num_bytes_on_disk (0 from xet-core, the serialized size from hf.js) and the reserved
 * bytes readers ignore (which some xet-core test builds fill). The result is a valid
 * xet-core-style upload shard; whatever followed the xorb section is left out.
 *
 * `canonicalizeUploadShard` does it all at once; a caller that wants to spread the work over
 * time rewrites the header, each file block and each xorb block separately and then takes
 * `body.subarray(0, shard.sectionsEnd)`. `body` is the buffer the shard was parsed from.
 */
export function canonicalizeUploadShard(body: Uint8Array, shard: ParsedUploadShard): Uint8Array {
  canonicalizeShardHeader(body);
  for (const file of shard.files) canonicalizeFileBlock(body, file);
  for (const xorb of shard.xorbs) canonicalizeXorbBlock(body, xorb);
  return body.subarray(0, shard.sectionsEnd);
}

/** Zeroes the header's footer_size. */
export function canonicalizeShardHeader(body: Uint8Array): void {
  body.fill(0, 40, 48);
}

/** Zeroes the reserved bytes of one parsed file block of `body`. */
export function canonicalizeFileBlock(body: Uint8Array, file: ParsedShardFile): void {
  zeroInRecord(body, file.fileHash, 40, 48);
  for (const term of file.terms) zeroInRecord(body, term.xorbHash, 32, 36);
  for (const rangeHash of file.verificationHashes ?? []) zeroInRecord(body, rangeHash, 32, 48);
  if (file.sha256 !== null) zeroInRecord(body, file.sha256, 32, 48);
}

/** Zeroes num_bytes_on_disk and the reserved bytes of one parsed xorb block of `body`. */
export function canonicalizeXorbBlock(body: Uint8Array, xorb: ShardXorb): void {
  zeroInRecord(body, xorb.xorbHash, 44, 48);
  for (const chunk of xorb.chunks) zeroInRecord(body, chunk.hash, 44, 48);
}

/** Zeroes bytes [from, to) of the record of `body` that starts with the hash `record` (a view into `body`). */
function zeroInRecord(body: Uint8Array, record: Hash, from: number, to: number): void {
  const at = record.byteOffset - body.byteOffset;
  body.fill(0, at + from, at + to);
}

/** True when the chunk entry carries the writer's global-dedup hint. */
export function hasGlobalDedupFlag(chunk: ShardChunk): boolean {
  return (chunk.flags & CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE) !== 0;
}

/**
 * Converts a standard SHA-256 digest (e.g. from `node:crypto`) to the bytes a shard stores:
 * xet-core reads the digest as a big-endian hash, so each 8-byte group is reversed (§2).
 */
export function shardSha256FromDigest(digest: Uint8Array): Hash {
  if (digest.length !== HASH_BYTES) throw new RangeError(`a SHA-256 digest has ${HASH_BYTES} bytes, got ${digest.length}`);
  const out = new Uint8Array(HASH_BYTES);
  for (let group = 0; group < HASH_BYTES; group += 8) {
    for (let i = 0; i < 8; i++) out[group + i] = digest[group + 7 - i];
  }
  return out;
}
