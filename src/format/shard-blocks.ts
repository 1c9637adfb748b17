/**
 * The MDB shard layout (docs/protocol.md §6) and its structural reader: where every file block
 * and xorb block of a shard starts, checked, as two arrays of byte offsets. Nothing else is
 * built — a block's fields are read from the shard's bytes when they are needed — so reading a
 * 49 MB shard of 340,000 files costs a few megabytes of typed arrays instead of ~2 KB of
 * objects per file (which kept the garbage collector busy and could exhaust the heap when a
 * few such shards were registered at once).
 *
 * shard.ts builds the object form (`parseUploadShard`, `parseFullShard`) on top of this
 * reader, so both forms accept and refuse exactly the same bytes.
 *
 * Layout: 48-byte header, file-info section, xorb-info section (each a run of 48-byte records
 * closed by a bookend record), then optionally lookup tables and a 200-byte footer.
 */
import { FormatError } from "./errors.js";
import { HASH_BYTES } from "./hash.js";

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

/**
 * Records a parsing step reads before it pauses. A 65 MiB shard has ~1.4 million records and
 * takes a few hundred milliseconds to read; in steps of this size (a few milliseconds each) a
 * server can let other work run between them.
 */
export const SHARD_RECORDS_PER_STEP = 16_384;

/**
 * Where the blocks of a shard are. Offsets are byte offsets into `bytes`; a record's fields are
 * read with the helpers below. Block `i` of the file section starts at `fileBlocks[i]`, its
 * header record holding the file hash (bytes 0..32), the flags (u32 at 32) and the term count
 * (u32 at 36); its terms follow, then one verification record per term when
 * `withVerification`, then the metadata extension when its flag says so.
 */
export interface ShardBlocks {
  /** The shard's bytes (hashes read from the blocks are views into it). */
  bytes: Uint8Array;
  view: DataView;
  /** Byte offset of each file block's header record. */
  fileBlocks: Uint32Array;
  /** Byte offset of each xorb block's header record. */
  xorbBlocks: Uint32Array;
  /** Whether the file blocks carry verification records (all of them do, or none does). */
  withVerification: boolean;
  /** Terms of all file blocks. */
  termCount: number;
  /** Byte offset of the first record of the xorb-info section. */
  xorbSectionOffset: number;
  /** Byte offset just past the xorb-info bookend: where lookup tables or a footer may begin. */
  sectionsEnd: number;
}

export interface UploadShardBlocks extends ShardBlocks {
  /** The header's footer_size, reported for diagnostics only: uploads lie about it (§6.7). */
  declaredFooterSize: bigint;
}

/**
 * Reads an uploaded shard body (POST /v1/shards) as `parseUploadShard` does — header, file
 * blocks up to their bookend, xorb blocks up to theirs, nothing after — pausing (yielding)
 * after every `SHARD_RECORDS_PER_STEP` records. Throws FormatError `bad_shard_header`,
 * `bad_shard` or `truncated` from the step that meets the problem.
 */
export function* readUploadShardBlocksInSteps(bytes: Uint8Array): Generator<void, UploadShardBlocks, void> {
  const view = dataViewOf(bytes);
  const declaredFooterSize = readShardHeader(bytes, view);
  const blocks = yield* readShardBlocks(bytes, view, bytes.length, SHARD_RECORDS_PER_STEP);
  return { ...blocks, declaredFooterSize };
}

/** A DataView over exactly `bytes`. */
export function dataViewOf(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Validates tag and version; returns the declared footer size. */
export function readShardHeader(bytes: Uint8Array, view: DataView): bigint {
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

// ---------------------------------------------------------------------------------------------
// Fields of a block, by the byte offset of its header record

/** Flags of the file block at `at` (the raw u32; reserved bits are kept, not rejected). */
export function fileBlockFlags(view: DataView, at: number): number {
  return view.getUint32(at + 32, true);
}

/** Terms of the file block at `at`. */
export function fileBlockTermCount(view: DataView, at: number): number {
  return view.getUint32(at + 36, true);
}

/** Byte offset of term `t` of the file block at `at`. */
export function termRecordAt(at: number, t: number): number {
  return at + SHARD_RECORD_BYTES * (1 + t);
}

/** Byte offset of the verification record of term `t` of the file block at `at`, which has `termCount` terms. */
export function verificationRecordAt(at: number, termCount: number, t: number): number {
  return at + SHARD_RECORD_BYTES * (1 + termCount + t);
}

/** Byte offset of the metadata extension (the SHA-256 record) of the file block at `at`, or -1 without one. */
export function metadataExtRecordAt(view: DataView, at: number, withVerification: boolean): number {
  if ((fileBlockFlags(view, at) & FILE_FLAG_WITH_METADATA_EXT) === 0) return -1;
  return at + SHARD_RECORD_BYTES * (1 + fileBlockTermCount(view, at) * (withVerification ? 2 : 1));
}

/** Uncompressed bytes the term record at `at` contributes to its file. Bytes 32..35 are its xorb flags, always 0 and unused. */
export function termUnpackedBytes(view: DataView, at: number): number {
  return view.getUint32(at + 36, true);
}

/** First chunk of the term record at `at`. */
export function termChunkStart(view: DataView, at: number): number {
  return view.getUint32(at + 40, true);
}

/** End (exclusive) of the chunk range of the term record at `at`. */
export function termChunkEnd(view: DataView, at: number): number {
  return view.getUint32(at + 44, true);
}

/** Flags of the xorb block at `at`. */
export function xorbBlockFlags(view: DataView, at: number): number {
  return view.getUint32(at + 32, true);
}

/** Chunks of the xorb block at `at`; chunk `c`'s record is at `at + 48 · (1 + c)`. */
export function xorbBlockChunkCount(view: DataView, at: number): number {
  return view.getUint32(at + 36, true);
}

/** Byte offset of chunk `c` of the xorb block at `at`. */
export function chunkRecordAt(at: number, c: number): number {
  return at + SHARD_RECORD_BYTES * (1 + c);
}

/** Cumulative uncompressed offset of the chunk record at `at` inside its xorb. */
export function chunkByteRangeStart(view: DataView, at: number): number {
  return view.getUint32(at + 32, true);
}

/** Uncompressed bytes of the chunk record at `at`. */
export function chunkUnpackedBytes(view: DataView, at: number): number {
  return view.getUint32(at + 36, true);
}

/** Raw u32 flags of the chunk record at `at` (bytes 44..47 are reserved). */
export function chunkFlags(view: DataView, at: number): number {
  return view.getUint32(at + 40, true);
}

// ---------------------------------------------------------------------------------------------
// Reading the sections

/**
 * Reads both sections from the header's end up to `end`, pausing after every `recordsPerStep`
 * records (Infinity: never). Every count is checked against the bytes left before the records
 * it announces are visited, so a lying count costs nothing.
 */
export function* readShardBlocks(bytes: Uint8Array, view: DataView, end: number, recordsPerStep: number): Generator<void, ShardBlocks, void> {
  if (bytes.length > 0xffff_ffff) throw new RangeError(`a shard is read up to 4 GiB, got ${bytes.length} bytes`);
  const steps = new StepCounter(recordsPerStep);
  const files = new OffsetList();
  const { offset: xorbSectionOffset, withVerification, termCount } = yield* readFileSection(bytes, view, SHARD_HEADER_BYTES, end, files, steps);
  const xorbs = new OffsetList();
  const sectionsEnd = yield* readXorbSection(bytes, view, xorbSectionOffset, end, xorbs, steps);
  return { bytes, view, fileBlocks: files.finish(), xorbBlocks: xorbs.finish(), withVerification, termCount, xorbSectionOffset, sectionsEnd };
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

/** A growing list of u32 offsets (doubling), handed out trimmed. */
class OffsetList {
  private items = new Uint32Array(64);
  length = 0;
  push(offset: number): void {
    if (this.length === this.items.length) {
      const grown = new Uint32Array(this.items.length * 2);
      grown.set(this.items);
      this.items = grown;
    }
    this.items[this.length++] = offset;
  }
  finish(): Uint32Array {
    return this.items.slice(0, this.length);
  }
}

/**
 * Fails when a record inside a block's counted run is a bookend: the block's count overstates
 * its records, and trusting it would read the section's end as data.
 */
function rejectBookendInBlock(bytes: Uint8Array, at: number, block: () => string): void {
  if (isBookend(bytes, at)) {
    throw new FormatError("bad_shard", `${block()} declares more records than it has: a section bookend appears at byte ${at} inside it`);
  }
}

/**
 * Checks file blocks from `offset` up to and including the bookend; returns the offset after
 * it, whether the blocks carry verification records, and their terms in all.
 */
function* readFileSection(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  end: number,
  files: OffsetList,
  steps: StepCounter,
): Generator<void, { offset: number; withVerification: boolean; termCount: number }, void> {
  let sectionHasVerification: boolean | null = null;
  let termTotal = 0;
  for (;;) {
    if (end - offset < SHARD_RECORD_BYTES) {
      throw new FormatError("truncated", `the shard ends at byte ${end} inside the file info section, before its bookend (after ${files.length} file blocks)`);
    }
    if (isBookend(bytes, offset)) return { offset: offset + SHARD_RECORD_BYTES, withVerification: sectionHasVerification ?? false, termCount: termTotal };

    const blockAt = offset;
    const index = files.length;
    const block = () => `file block ${index} (at byte ${blockAt})`;
    const flags = fileBlockFlags(view, offset);
    const termCount = fileBlockTermCount(view, offset);
    const hasVerification = (flags & FILE_FLAG_WITH_VERIFICATION) !== 0;
    const hasMetadataExt = (flags & FILE_FLAG_WITH_METADATA_EXT) !== 0;

    // xet-core refuses a shard in which only some files carry verification (§6.8 step 3).
    if (sectionHasVerification === null) {
      sectionHasVerification = hasVerification;
    } else if (hasVerification !== sectionHasVerification) {
      throw new FormatError(
        "bad_shard",
        `${block()} ${hasVerification ? "has" : "lacks"} verification entries but the blocks before it ${sectionHasVerification ? "have" : "lack"} them; either every file of a shard carries verification entries or none does`,
      );
    }

    offset += SHARD_RECORD_BYTES;
    // termCount ≤ 2^32 − 1, so this stays an exact integer (< 2^39).
    const recordCount = termCount * (hasVerification ? 2 : 1) + (hasMetadataExt ? 1 : 0);
    if (recordCount * SHARD_RECORD_BYTES > end - offset) {
      throw new FormatError(
        "truncated",
        `${block()} declares ${termCount} terms, i.e. ${recordCount} records of ${SHARD_RECORD_BYTES} bytes, but only ${end - offset} bytes remain`,
      );
    }

    for (let i = 0; i < termCount; i++, offset += SHARD_RECORD_BYTES) {
      if (steps.count(1)) yield;
      rejectBookendInBlock(bytes, offset, block);
      const chunkStart = termChunkStart(view, offset);
      const chunkEnd = termChunkEnd(view, offset);
      if (chunkStart >= chunkEnd) {
        throw new FormatError(
          "bad_shard",
          `term ${i} of ${block()} has chunk range [${chunkStart}, ${chunkEnd}); a term covers at least one chunk (start < end)`,
        );
      }
    }
    if (hasVerification) {
      for (let i = 0; i < termCount; i++, offset += SHARD_RECORD_BYTES) {
        if (steps.count(1)) yield;
        rejectBookendInBlock(bytes, offset, block);
      }
    }
    if (hasMetadataExt) {
      rejectBookendInBlock(bytes, offset, block);
      offset += SHARD_RECORD_BYTES;
    }
    files.push(blockAt);
    termTotal += termCount;
    if (steps.count(1)) yield;
  }
}

/** Checks xorb blocks from `offset` up to and including the bookend; returns the offset after it. */
function* readXorbSection(
  bytes: Uint8Array,
  view: DataView,
  offset: number,
  end: number,
  xorbs: OffsetList,
  steps: StepCounter,
): Generator<void, number, void> {
  for (;;) {
    if (end - offset < SHARD_RECORD_BYTES) {
      throw new FormatError("truncated", `the shard ends at byte ${end} inside the xorb info section, before its bookend (after ${xorbs.length} xorb blocks)`);
    }
    if (isBookend(bytes, offset)) return offset + SHARD_RECORD_BYTES;

    const blockAt = offset;
    const index = xorbs.length;
    const block = () => `xorb block ${index} (at byte ${blockAt})`;
    const chunkCount = xorbBlockChunkCount(view, offset);
    offset += SHARD_RECORD_BYTES;
    if (chunkCount * SHARD_RECORD_BYTES > end - offset) {
      throw new FormatError("truncated", `${block()} declares ${chunkCount} chunks of ${SHARD_RECORD_BYTES} bytes each, but only ${end - offset} bytes remain`);
    }
    for (let i = 0; i < chunkCount; i++, offset += SHARD_RECORD_BYTES) {
      if (steps.count(1)) yield;
      rejectBookendInBlock(bytes, offset, block);
    }
    xorbs.push(blockAt);
    if (steps.count(1)) yield;
  }
}
