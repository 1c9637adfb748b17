/**
 * The MDB shard format (docs/protocol.md §6, §7.3): its records as objects, parsing uploaded
 * shards, reading complete shards (global-dedup answers) and the canonical form of an upload.
 * The layout and the packed structural reader both readers build on are shard-blocks.ts;
 * writing both forms is shard-writer.ts.
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
import {
  SHARD_FOOTER_BYTES,
  SHARD_FOOTER_VERSION,
  SHARD_HEADER_BYTES,
  chunkByteRangeStart,
  chunkFlags,
  chunkRecordAt,
  chunkUnpackedBytes,
  dataViewOf,
  fileBlockFlags,
  fileBlockTermCount,
  metadataExtRecordAt,
  readShardBlocks,
  readShardHeader,
  readUploadShardBlocksInSteps,
  termChunkEnd,
  termChunkStart,
  termRecordAt,
  termUnpackedBytes,
  verificationRecordAt,
  xorbBlockChunkCount,
  xorbBlockFlags,
  type ShardBlocks,
} from "./shard-blocks.js";
import { runToEnd } from "./steps.js";

export {
  FILE_FLAG_WITH_METADATA_EXT,
  FILE_FLAG_WITH_VERIFICATION,
  SHARD_FOOTER_BYTES,
  SHARD_FOOTER_VERSION,
  SHARD_HEADER_BYTES,
  SHARD_HEADER_VERSION,
  SHARD_RECORD_BYTES,
  SHARD_RECORDS_PER_STEP,
  SHARD_TAG,
  dataViewOf,
  isBookend,
} from "./shard-blocks.js";

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
 * Throws FormatError `bad_shard_header`, `bad_shard` or `truncated`. A server reading large
 * uploads uses the packed form instead (shard-blocks.ts `readUploadShardBlocksInSteps`).
 */
export function parseUploadShard(bytes: Uint8Array): ParsedUploadShard {
  return runToEnd(parseUploadShardInSteps(bytes));
}

/**
 * `parseUploadShard` as a generator that pauses (yields) after every `SHARD_RECORDS_PER_STEP`
 * records while the structure is checked, and returns the parsed shard; the caller decides what
 * runs between steps. Errors are thrown from the step that meets them.
 */
export function* parseUploadShardInSteps(bytes: Uint8Array): Generator<void, ParsedUploadShard, void> {
  const blocks = yield* readUploadShardBlocksInSteps(bytes);
  return { declaredFooterSize: blocks.declaredFooterSize, ...sectionsOf(blocks) };
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
  const declaredFooterSize = readShardHeader(bytes, view);
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
  const blocks = runToEnd(readShardBlocks(bytes, view, footerStart, Infinity));
  expectFooterOffset("xorb_info_offset", footer.xorbInfoOffset, BigInt(blocks.xorbSectionOffset), "that is where the xorb section starts");

  const fileLookupEnd = BigInt(blocks.sectionsEnd) + footer.fileLookupCount * FILE_LOOKUP_ENTRY_BYTES;
  const xorbLookupEnd = footer.xorbLookupOffset + footer.xorbLookupCount * XORB_LOOKUP_ENTRY_BYTES;
  const chunkLookupEnd = footer.chunkLookupOffset + footer.chunkLookupCount * CHUNK_LOOKUP_ENTRY_BYTES;
  expectFooterOffset(
    "file_lookup_offset",
    footer.fileLookupOffset,
    BigInt(blocks.sectionsEnd),
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
  return { ...sectionsOf(blocks), footer };
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

/** The object form of checked blocks. */
function sectionsOf(blocks: ShardBlocks): ShardSections {
  const { bytes, view, withVerification } = blocks;
  const hashAt = (at: number): Hash => bytes.subarray(at, at + HASH_BYTES);
  const files: ParsedShardFile[] = Array.from(blocks.fileBlocks, (at) => {
    const termCount = fileBlockTermCount(view, at);
    const terms: ShardTerm[] = [];
    for (let t = 0; t < termCount; t++) {
      const record = termRecordAt(at, t);
      terms.push({
        xorbHash: hashAt(record),
        unpackedBytes: termUnpackedBytes(view, record),
        chunkStart: termChunkStart(view, record),
        chunkEnd: termChunkEnd(view, record),
      });
    }
    const verificationHashes = withVerification ? terms.map((_, t) => hashAt(verificationRecordAt(at, termCount, t))) : null;
    const sha256At = metadataExtRecordAt(view, at, withVerification);
    const sha256 = sha256At === -1 ? null : hashAt(sha256At);
    return { fileHash: hashAt(at), flags: fileBlockFlags(view, at), terms, verificationHashes, sha256, sha256Hex: sha256 === null ? null : hashToHex(sha256) };
  });
  const xorbs: ShardXorb[] = Array.from(blocks.xorbBlocks, (at) => {
    const chunks: ShardChunk[] = [];
    const chunkCount = xorbBlockChunkCount(view, at);
    for (let c = 0; c < chunkCount; c++) {
      const record = chunkRecordAt(at, c);
      chunks.push({
        hash: hashAt(record),
        byteRangeStart: chunkByteRangeStart(view, record),
        unpackedBytes: chunkUnpackedBytes(view, record),
        flags: chunkFlags(view, record),
      });
    }
    return {
      xorbHash: hashAt(at),
      flags: xorbBlockFlags(view, at),
      numBytesInXorb: view.getUint32(at + 40, true),
      numBytesOnDisk: view.getUint32(at + 44, true),
      chunks,
    };
  });
  return { files, xorbs, xorbSectionOffset: blocks.xorbSectionOffset, sectionsEnd: blocks.sectionsEnd };
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
 * `blocks.bytes.subarray(0, blocks.sectionsEnd)`.
 */
export function canonicalizeUploadShard(blocks: ShardBlocks): Uint8Array {
  canonicalizeShardHeader(blocks.bytes);
  for (const at of blocks.fileBlocks) canonicalizeFileBlock(blocks, at);
  for (const at of blocks.xorbBlocks) canonicalizeXorbBlock(blocks, at);
  return blocks.bytes.subarray(0, blocks.sectionsEnd);
}

/** Zeroes the header's footer_size. */
export function canonicalizeShardHeader(body: Uint8Array): void {
  body.fill(0, 40, 48);
}

/** Zeroes the reserved bytes of the file block at byte `at`. */
export function canonicalizeFileBlock(blocks: ShardBlocks, at: number): void {
  const { bytes, view, withVerification } = blocks;
  const termCount = fileBlockTermCount(view, at);
  bytes.fill(0, at + 40, at + 48);
  for (let t = 0; t < termCount; t++) {
    const term = termRecordAt(at, t);
    bytes.fill(0, term + 32, term + 36);
    if (withVerification) {
      const verification = verificationRecordAt(at, termCount, t);
      bytes.fill(0, verification + 32, verification + 48);
    }
  }
  const sha256 = metadataExtRecordAt(view, at, withVerification);
  if (sha256 !== -1) bytes.fill(0, sha256 + 32, sha256 + 48);
}

/** Zeroes num_bytes_on_disk and the reserved bytes of the xorb block at byte `at`. */
export function canonicalizeXorbBlock(blocks: ShardBlocks, at: number): void {
  const { bytes, view } = blocks;
  const chunkCount = xorbBlockChunkCount(view, at);
  bytes.fill(0, at + 44, at + 48);
  for (let c = 0; c < chunkCount; c++) {
    const chunk = chunkRecordAt(at, c);
    bytes.fill(0, chunk + 44, chunk + 48);
  }
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
