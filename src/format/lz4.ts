/**
 * LZ4 *frame* format (the xorb chunk payload of schemes 1 and 2, docs/protocol.md §5.3),
 * written over raw-block calls of `lz4-napi` (native lz4_flex, the reference client's codec).
 *
 * Why our own frame layer: library frame decoders measured (docs/design.md §8.2) at 57–490 MB/s on 64 KiB
 * chunks, versus several GB/s for a thin frame reader over native block calls. Owning the frame
 * layer also lets us bound every allocation by the size the chunk header declares, which no
 * library frame decoder offers.
 *
 * `lz4-napi`'s raw-block calls carry the block's decoded size as a 4-byte little-endian prefix
 * (lz4_flex `compress_prepend_size` / `decompress_size_prepended`). The decoder allocates
 * exactly the prefixed size and fails with "output is too small" if the block expands beyond it,
 * so we always write a prefix we chose (never one read from the wire) and strip it on encode.
 *
 * Why not the faster npm `lz4` (liblz4 1.9.2, ~1.7× lz4-napi on text blocks): its
 * `LZ4_decompress_safe` accepts a match offset of 0 and copies whatever the output buffer held,
 * where lz4_flex — the reference client's decoder — rejects the block. Accepting it would let an
 * upload store chunks that clients cannot decode (and others dedup against). Screening every
 * offset first is a sequence-by-sequence walk that costs as much as the native decode saves.
 */
import { compressSync, uncompressSync } from "lz4-napi";
import { FormatError } from "./errors.js";

const FRAME_MAGIC = [0x04, 0x22, 0x4d, 0x18] as const;
const SKIPPABLE_MAGIC_MASK = 0xfffffff0;
const SKIPPABLE_MAGIC_BASE = 0x184d2a50;

const FLG_VERSION_MASK = 0b1100_0000;
const FLG_VERSION_01 = 0b0100_0000;
const FLG_BLOCK_INDEPENDENCE = 0b0010_0000;
const FLG_BLOCK_CHECKSUM = 0b0001_0000;
const FLG_CONTENT_SIZE = 0b0000_1000;
const FLG_CONTENT_CHECKSUM = 0b0000_0100;
const FLG_RESERVED = 0b0000_0010;
const FLG_DICTIONARY_ID = 0b0000_0001;
const BD_RESERVED = 0b1000_1111;

const STORED_BLOCK_BIT = 0x8000_0000;
const BLOCK_SIZE_MASK = 0x7fff_ffff;
/** Linked blocks may copy from up to this many bytes of earlier output (u16 match offset). */
const LINKED_WINDOW_BYTES = 65_536;
const MIN_MATCH = 4;

/** BD codes 4..7 → maximum decoded size of one block. */
export const LZ4_BLOCK_MAX_SIZES = [65_536, 262_144, 1_048_576, 4_194_304] as const;
export type Lz4BlockMaxSize = (typeof LZ4_BLOCK_MAX_SIZES)[number];

/**
 * Blocks whose compressed data is shorter than this are decoded in JavaScript. A native call
 * costs ~2–3 µs however small the block, so on tiny blocks the JS loop (~250 MB/s) wins: measured
 * break-even at ~500 compressed bytes. The floor also caps how many native calls (each zeroing
 * up to 128 KiB of output) a hostile payload cut into tiny blocks can force: ≤ 256 per 256 KiB.
 */
export const LZ4_NATIVE_BLOCK_MIN_BYTES = 1_024;

export interface Lz4FrameOptions {
  /**
   * Maximum decoded bytes per block (BD field). Default: what lz4_flex's `FrameEncoder` (xet-core)
   * picks for one write of the whole input — 64 KiB up to 64 KiB of input, 256 KiB up to
   * 256 KiB, else 4 MiB — so every chunk (≤ 128 KiB) is a single block.
   */
  blockMaxSize?: Lz4BlockMaxSize;
  /** Let each block copy from up to 64 KiB of the previous blocks' output. Default false. */
  linkedBlocks?: boolean;
  /** Append an xxHash32 of each block's stored bytes after its data. Default false. */
  blockChecksums?: boolean;
  /** Store the decoded length in the header. Default false. */
  contentSize?: boolean;
  /** Append an xxHash32 of the whole decoded content after the end mark. Default false. */
  contentChecksum?: boolean;
}

function badFrame(message: string): FormatError {
  return new FormatError("bad_compression", `invalid LZ4 frame: ${message}`);
}

function readU32LE(bytes: Uint8Array, at: number): number {
  return (bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (bytes[at + 3] << 24)) >>> 0;
}

function writeU32LE(bytes: Uint8Array, at: number, value: number): void {
  bytes[at] = value & 0xff;
  bytes[at + 1] = (value >>> 8) & 0xff;
  bytes[at + 2] = (value >>> 16) & 0xff;
  bytes[at + 3] = (value >>> 24) & 0xff;
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

// ---------------------------------------------------------------------------------------------
// xxHash32
// Hand-written because no xxHash package is installed and the frame format needs only the
// 32-bit variant, over a few hundred KiB at most, and only for frames that opt into checksums
// (neither real client writes them). Spec: https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md
// ---------------------------------------------------------------------------------------------

const PRIME32_1 = 0x9e3779b1;
const PRIME32_2 = 0x85ebca77;
const PRIME32_3 = 0xc2b2ae3d;
const PRIME32_4 = 0x27d4eb2f;
const PRIME32_5 = 0x165667b1;

function rotl32(x: number, r: number): number {
  return (x << r) | (x >>> (32 - r));
}

function xxh32Round(acc: number, lane: number): number {
  return Math.imul(rotl32((acc + Math.imul(lane, PRIME32_2)) | 0, 13), PRIME32_1);
}

/** xxHash32 of `data` (unsigned result), as the LZ4 frame format uses it with seed 0. */
export function xxh32(data: Uint8Array, seed = 0): number {
  const length = data.length;
  let at = 0;
  let acc: number;
  if (length >= 16) {
    let v1 = (seed + PRIME32_1 + PRIME32_2) | 0;
    let v2 = (seed + PRIME32_2) | 0;
    let v3 = seed | 0;
    let v4 = (seed - PRIME32_1) | 0;
    const stripesEnd = length - 16;
    while (at <= stripesEnd) {
      v1 = xxh32Round(v1, readU32LE(data, at));
      v2 = xxh32Round(v2, readU32LE(data, at + 4));
      v3 = xxh32Round(v3, readU32LE(data, at + 8));
      v4 = xxh32Round(v4, readU32LE(data, at + 12));
      at += 16;
    }
    acc = (rotl32(v1, 1) + rotl32(v2, 7) + rotl32(v3, 12) + rotl32(v4, 18)) | 0;
  } else {
    acc = (seed + PRIME32_5) | 0;
  }
  acc = (acc + length) | 0;
  while (at + 4 <= length) {
    acc = Math.imul(rotl32((acc + Math.imul(readU32LE(data, at), PRIME32_3)) | 0, 17), PRIME32_4);
    at += 4;
  }
  while (at < length) {
    acc = Math.imul(rotl32((acc + Math.imul(data[at], PRIME32_5)) | 0, 11), PRIME32_1);
    at++;
  }
  acc ^= acc >>> 15;
  acc = Math.imul(acc, PRIME32_2);
  acc ^= acc >>> 13;
  acc = Math.imul(acc, PRIME32_3);
  acc ^= acc >>> 16;
  return acc >>> 0;
}

// ---------------------------------------------------------------------------------------------
// Block decoding
// ---------------------------------------------------------------------------------------------

/**
 * Which limit a block would break by decoding further: the declared content size (a bomb or a
 * size lie) or the frame's maximum block size.
 */
type Overflow = "declared_size" | "block_max";

function overflowError(kind: Overflow, blockIndex: number, room: number): FormatError {
  if (kind === "declared_size") {
    return new FormatError("decompressed_size_mismatch", `LZ4 block ${blockIndex} decodes past the declared uncompressed size (only ${room} bytes were left)`);
  }
  return badFrame(`block ${blockIndex} decodes to more than the frame's maximum block size of ${room} bytes`);
}

/** Copies up to this long are done byte by byte; longer ones by native `set`/`copyWithin`. */
const SHORT_COPY_BYTES = 32;

/**
 * Writes the overlapping match `dst[op - offset, …)` of `length` bytes at `op` (offset < length):
 * the output repeats with period `offset`. Byte by byte, a run of zeros (a 128 KiB zero chunk is
 * one such match) decoded at ~400 MB/s; seeding one period and then doubling the copied span
 * takes log2(length / offset) native copies, each reading only bytes already written.
 * Requires 1 ≤ offset < length (offset 0 is rejected before this is reached).
 */
function copyRepeating(dst: Uint8Array, op: number, offset: number, length: number): void {
  dst.copyWithin(op, op - offset, op);
  let copied = offset;
  while (copied < length) {
    const n = Math.min(copied, length - copied);
    dst.copyWithin(op + copied, op, op + n);
    copied += n;
  }
}

/**
 * Decodes one raw LZ4 block `src[srcStart, srcEnd)` into `dst` at `dstStart`, writing no further
 * than `dstLimit`; matches may reach back to `windowStart` (the block's own start for independent
 * blocks, earlier output for linked ones). Same acceptance rules as lz4_flex's safe decoder: the
 * block must end with a literals-only sequence. Returns the new end of output.
 */
function decodeBlockInto(
  src: Uint8Array,
  srcStart: number,
  srcEnd: number,
  dst: Uint8Array,
  dstStart: number,
  dstLimit: number,
  windowStart: number,
  overflowKind: Overflow,
  blockIndex: number,
): number {
  let ip = srcStart;
  let op = dstStart;
  for (;;) {
    if (ip >= srcEnd) throw badFrame(`block ${blockIndex} ends in the middle of a sequence`);
    const token = src[ip++];
    let literalLength = token >>> 4;
    if (literalLength === 15) {
      let extra: number;
      do {
        if (ip >= srcEnd) throw badFrame(`block ${blockIndex} ends inside a literal length`);
        extra = src[ip++];
        literalLength += extra;
      } while (extra === 255);
    }
    if (literalLength > srcEnd - ip) throw badFrame(`block ${blockIndex} has literals past its end`);
    if (literalLength > dstLimit - op) throw overflowError(overflowKind, blockIndex, dstLimit - dstStart);
    if (literalLength > SHORT_COPY_BYTES) {
      dst.set(src.subarray(ip, ip + literalLength), op);
    } else {
      for (let i = 0; i < literalLength; i++) dst[op + i] = src[ip + i];
    }
    ip += literalLength;
    op += literalLength;
    if (ip === srcEnd) return op;

    if (srcEnd - ip < 2) throw badFrame(`block ${blockIndex} ends inside a match offset`);
    const offset = src[ip] | (src[ip + 1] << 8);
    ip += 2;
    if (offset === 0) throw badFrame(`block ${blockIndex} has a match with offset 0`);
    if (offset > op - windowStart) throw badFrame(`block ${blockIndex} has a match reaching before its window`);
    let matchLength = (token & 15) + MIN_MATCH;
    if (matchLength === 15 + MIN_MATCH) {
      let extra: number;
      do {
        if (ip >= srcEnd) throw badFrame(`block ${blockIndex} ends inside a match length`);
        extra = src[ip++];
        matchLength += extra;
      } while (extra === 255);
    }
    if (matchLength > dstLimit - op) throw overflowError(overflowKind, blockIndex, dstLimit - dstStart);
    const from = op - offset;
    if (matchLength <= SHORT_COPY_BYTES) {
      // A forward byte copy is also right when the match overlaps its own output (offset <
      // length): it re-reads bytes it has just written, which is how LZ4 encodes runs.
      for (let i = 0; i < matchLength; i++) dst[op + i] = dst[from + i];
    } else if (offset >= matchLength) {
      dst.copyWithin(op, from, from + matchLength);
    } else {
      copyRepeating(dst, op, offset, matchLength);
    }
    op += matchLength;
  }
}

/** Reusable [4-byte size prefix ‖ block] staging area for native calls; grows to the largest block. */
let nativeStaging = Buffer.allocUnsafeSlow(4 + 65_536);

/** lz4_flex's `DecompressError::OutputTooSmall` text: the block wanted more room than we gave. */
const NATIVE_OUTPUT_TOO_SMALL = /output is too small/;

/**
 * Decodes one block natively into a fresh buffer of at most `room` bytes (the size we put in the
 * prefix, so a hostile block can never make lz4_flex allocate more).
 */
function decodeBlockNative(
  frame: Uint8Array,
  dataStart: number,
  dataLength: number,
  room: number,
  dictionary: Uint8Array | undefined,
  overflowKind: Overflow,
  blockIndex: number,
): Buffer {
  if (nativeStaging.length < 4 + dataLength) nativeStaging = Buffer.allocUnsafeSlow(4 + dataLength);
  nativeStaging.writeUInt32LE(room, 0);
  nativeStaging.set(frame.subarray(dataStart, dataStart + dataLength), 4);
  const input = nativeStaging.subarray(0, 4 + dataLength);
  try {
    return dictionary === undefined ? uncompressSync(input) : uncompressSync(input, dictionary);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    if (NATIVE_OUTPUT_TOO_SMALL.test(reason)) throw overflowError(overflowKind, blockIndex, room);
    throw badFrame(`block ${blockIndex} is corrupt (${reason})`);
  }
}

// ---------------------------------------------------------------------------------------------
// Frame decoding
// ---------------------------------------------------------------------------------------------

/**
 * Output buffer for a frame. Uninitialised (and unpooled) because zero-filling a fresh 128 KiB
 * array measured at twice the cost of the unpooled allocation; every byte is written before
 * the buffer is returned (blocks fill it in order and the size is checked to be exact).
 */
function allocateOutput(size: number): Uint8Array {
  const buffer = Buffer.allocUnsafeSlow(size);
  return new Uint8Array(buffer.buffer, buffer.byteOffset, size);
}

/**
 * Decodes one complete LZ4 frame that must hold exactly `expectedSize` bytes, and nothing after
 * it. Never allocates more than `expectedSize` bytes of output (the caller bounds it). Throws
 * `FormatError` `bad_compression` for malformed frames, bad checksums, dictionary IDs, unknown
 * versions, reserved bits or trailing bytes, and `decompressed_size_mismatch` when the content
 * (or its content-size field) differs from `expectedSize`. The result never shares memory with
 * `frame`.
 */
export function decodeLz4Frame(frame: Uint8Array, expectedSize: number): Uint8Array {
  if (!Number.isSafeInteger(expectedSize) || expectedSize < 0) {
    throw new RangeError(`expected size must be a non-negative integer, got ${expectedSize}`);
  }
  if (frame.length < 7) throw badFrame(`${frame.length} bytes is shorter than the smallest frame header (7)`);
  if (frame[0] !== FRAME_MAGIC[0] || frame[1] !== FRAME_MAGIC[1] || frame[2] !== FRAME_MAGIC[2] || frame[3] !== FRAME_MAGIC[3]) {
    const magic = readU32LE(frame, 0);
    if ((magic & SKIPPABLE_MAGIC_MASK) >>> 0 === SKIPPABLE_MAGIC_BASE) {
      throw badFrame("skippable frames are not accepted; the payload must be one LZ4 frame");
    }
    const found = magic.toString(16).padStart(8, "0");
    throw badFrame(`magic number ${found} is not 184d2204 (a raw LZ4 block is not accepted)`);
  }

  const flg = frame[4];
  const bd = frame[5];
  if ((flg & FLG_VERSION_MASK) !== FLG_VERSION_01) {
    throw badFrame(`unsupported frame version ${flg >>> 6} (only 1 exists)`);
  }
  if (flg & FLG_DICTIONARY_ID) throw badFrame("frames that need a dictionary ID are not supported");
  if (flg & FLG_RESERVED || bd & BD_RESERVED) throw badFrame("reserved header bits are set");
  const blockSizeCode = (bd >>> 4) & 7;
  if (blockSizeCode < 4) throw badFrame(`block max-size code ${blockSizeCode} is not one of 4..7`);
  const blockMaxSize = LZ4_BLOCK_MAX_SIZES[blockSizeCode - 4];
  const linked = (flg & FLG_BLOCK_INDEPENDENCE) === 0;
  const hasBlockChecksums = (flg & FLG_BLOCK_CHECKSUM) !== 0;
  const hasContentChecksum = (flg & FLG_CONTENT_CHECKSUM) !== 0;

  const descriptorEnd = 6 + (flg & FLG_CONTENT_SIZE ? 8 : 0);
  if (frame.length < descriptorEnd + 1) throw badFrame("the frame header is truncated");
  const headerChecksum = (xxh32(frame.subarray(4, descriptorEnd)) >>> 8) & 0xff;
  if (frame[descriptorEnd] !== headerChecksum) throw badFrame("the header checksum does not match");
  if (flg & FLG_CONTENT_SIZE) {
    const low = readU32LE(frame, 6);
    const high = readU32LE(frame, 10);
    if (high !== 0 || low !== expectedSize) {
      const declared = high * 2 ** 32 + low;
      throw new FormatError(
        "decompressed_size_mismatch",
        `the LZ4 frame's content-size field says ${declared} bytes but the chunk header declares ${expectedSize}`,
      );
    }
  }

  let at = descriptorEnd + 1;
  let out: Uint8Array | undefined;
  let produced = 0;
  let blockIndex = 0;
  for (; ; blockIndex++) {
    if (frame.length - at < 4) throw badFrame("the frame ends before its end mark");
    const word = readU32LE(frame, at);
    at += 4;
    if (word === 0) break;
    const stored = (word & STORED_BLOCK_BIT) !== 0;
    const dataLength = word & BLOCK_SIZE_MASK;
    if (dataLength > blockMaxSize) {
      throw badFrame(`block ${blockIndex} is ${dataLength} bytes, more than the frame's maximum block size ${blockMaxSize}`);
    }
    const dataStart = at;
    const dataEnd = at + dataLength;
    if (dataEnd + (hasBlockChecksums ? 4 : 0) > frame.length) throw badFrame(`block ${blockIndex} is truncated`);
    at = dataEnd;
    if (hasBlockChecksums) {
      if (xxh32(frame.subarray(dataStart, dataEnd)) !== readU32LE(frame, at)) {
        throw badFrame(`block ${blockIndex}'s checksum does not match`);
      }
      at += 4;
    }

    const remaining = expectedSize - produced;
    // The tighter of the two limits decides which error a too-large block gets.
    const overflowKind = remaining <= blockMaxSize ? "declared_size" : "block_max";
    const room = Math.min(remaining, blockMaxSize);
    if (stored) {
      if (dataLength > room) throw overflowError(overflowKind, blockIndex, room);
      out ??= allocateOutput(expectedSize);
      out.set(frame.subarray(dataStart, dataEnd), produced);
      produced += dataLength;
    } else if (dataLength < LZ4_NATIVE_BLOCK_MIN_BYTES) {
      out ??= allocateOutput(expectedSize);
      const windowStart = linked ? 0 : produced;
      const limit = produced + room;
      produced = decodeBlockInto(frame, dataStart, dataEnd, out, produced, limit, windowStart, overflowKind, blockIndex);
    } else {
      const dictionary = linked && produced > 0 && out !== undefined ? out.subarray(Math.max(0, produced - LINKED_WINDOW_BYTES), produced) : undefined;
      const decoded = decodeBlockNative(frame, dataStart, dataLength, room, dictionary, overflowKind, blockIndex);
      const isOnlyBlock = out === undefined && frame.length - at >= 4 && readU32LE(frame, at) === 0;
      if (isOnlyBlock && decoded.length === expectedSize) {
        // The common case (a chunk in one block): hand out the native result without a copy.
        out = new Uint8Array(decoded.buffer, decoded.byteOffset, decoded.byteLength);
      } else {
        out ??= allocateOutput(expectedSize);
        out.set(decoded, produced);
      }
      produced += decoded.length;
    }
  }

  if (hasContentChecksum) {
    if (frame.length - at < 4) throw badFrame("the content checksum is missing");
    const content = out === undefined ? new Uint8Array(0) : out.subarray(0, produced);
    if (xxh32(content) !== readU32LE(frame, at)) throw badFrame("the content checksum does not match");
    at += 4;
  }
  if (at !== frame.length) {
    throw badFrame(`${frame.length - at} unexpected bytes follow the end of the frame`);
  }
  if (produced !== expectedSize) {
    throw new FormatError("decompressed_size_mismatch", `the LZ4 frame decodes to ${produced} bytes but the chunk header declares ${expectedSize}`);
  }
  return out ?? new Uint8Array(0);
}

// ---------------------------------------------------------------------------------------------
// Frame encoding
// ---------------------------------------------------------------------------------------------

/** lz4_flex's `BlockSize::Auto` rule (since 0.11) for a frame written in one call. */
function defaultBlockMaxSize(length: number): Lz4BlockMaxSize {
  if (length <= 65_536) return 65_536;
  return length <= 262_144 ? 262_144 : 4_194_304;
}

/**
 * Encodes `data` as one LZ4 frame. Defaults match lz4_flex's `FrameEncoder` as xet-core uses it
 * (independent blocks, auto block size, no checksums, no content size); the header checksum is
 * always written. A block that would not shrink is stored uncompressed, as reference encoders do.
 */
export function encodeLz4Frame(data: Uint8Array, options: Lz4FrameOptions = {}): Uint8Array {
  const blockMaxSize = options.blockMaxSize ?? defaultBlockMaxSize(data.length);
  const blockSizeCode = LZ4_BLOCK_MAX_SIZES.indexOf(blockMaxSize);
  if (blockSizeCode < 0) throw new RangeError(`block max size must be one of ${LZ4_BLOCK_MAX_SIZES.join(", ")}`);
  const linked = options.linkedBlocks ?? false;
  const blockChecksums = options.blockChecksums ?? false;
  const contentSize = options.contentSize ?? false;
  const contentChecksum = options.contentChecksum ?? false;

  const source = asBuffer(data);
  // Each entry is a block's stored bytes: native output minus its 4-byte size prefix, or the raw
  // input when compression would not make it smaller.
  const blocks: { bytes: Uint8Array; stored: boolean }[] = [];
  for (let start = 0; start < source.length; start += blockMaxSize) {
    const raw = source.subarray(start, Math.min(source.length, start + blockMaxSize));
    const compressed = linked && start > 0 ? compressSync(raw, source.subarray(Math.max(0, start - LINKED_WINDOW_BYTES), start)) : compressSync(raw);
    const body = compressed.subarray(4);
    blocks.push(body.length < raw.length ? { bytes: body, stored: false } : { bytes: raw, stored: true });
  }

  const descriptorLength = 2 + (contentSize ? 8 : 0);
  let total = 4 + descriptorLength + 1 + 4 + (contentChecksum ? 4 : 0);
  for (const block of blocks) total += 4 + block.bytes.length + (blockChecksums ? 4 : 0);

  const frame = new Uint8Array(total);
  frame.set(FRAME_MAGIC, 0);
  frame[4] =
    FLG_VERSION_01 |
    (linked ? 0 : FLG_BLOCK_INDEPENDENCE) |
    (blockChecksums ? FLG_BLOCK_CHECKSUM : 0) |
    (contentSize ? FLG_CONTENT_SIZE : 0) |
    (contentChecksum ? FLG_CONTENT_CHECKSUM : 0);
  frame[5] = (blockSizeCode + 4) << 4;
  let at = 6;
  if (contentSize) {
    writeU32LE(frame, 6, data.length >>> 0);
    writeU32LE(frame, 10, Math.floor(data.length / 2 ** 32));
    at = 14;
  }
  frame[at] = (xxh32(frame.subarray(4, at)) >>> 8) & 0xff;
  at++;
  for (const block of blocks) {
    writeU32LE(frame, at, (block.bytes.length | (block.stored ? STORED_BLOCK_BIT : 0)) >>> 0);
    at += 4;
    frame.set(block.bytes, at);
    at += block.bytes.length;
    if (blockChecksums) {
      writeU32LE(frame, at, xxh32(block.bytes));
      at += 4;
    }
  }
  writeU32LE(frame, at, 0);
  at += 4;
  if (contentChecksum) writeU32LE(frame, at, xxh32(data));
  return frame;
}
