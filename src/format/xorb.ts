/**
 * The xorb format (docs/protocol.md §5): an incremental validator for uploaded bodies, a
 * serializer for castor's own client and tests, the `CasObjectInfo` footer (v1 writer; v1 and
 * legacy v0 parser) and the chunk-range → byte-range mapping of §5.5.
 *
 * Everything is hand-written because no library speaks this format; the codecs underneath
 * (LZ4 frames, BG4, BLAKE3) come from `compression.ts` and `hash.ts`.
 *
 * Longer than most files on purpose: the validator, the footer and the serializer share the
 * layout constants and the footer-ident checks of one byte format, and read best side by side
 * (the validator must accept exactly what the serializer writes).
 */
import {
  CompressionScheme,
  MAX_CHUNK_COMPRESSED_BYTES,
  MAX_CHUNK_UNCOMPRESSED_BYTES,
  compressChunk,
  compressChunkBest,
  decompressChunk,
  isCompressionScheme,
} from "./compression.js";
import { FormatError, isFormatError } from "./errors.js";
import { HASH_BYTES, chunkHash, hashEquals, hashToHex, xorbHash, type Hash } from "./hash.js";

// ---------------------------------------------------------------------------------------------
// Constants and limits

export const XORB_CHUNK_HEADER_BYTES = 8;
/** xet-core's `MAX_XORB_CHUNKS`; hf.js uses the same. */
export const MAX_XORB_CHUNKS = 8192;
/** xet-core cuts xorbs on this many uncompressed bytes (`MAX_XORB_BYTES`). */
export const MAX_XORB_UNCOMPRESSED_BYTES = 64 * 1024 * 1024;

// Footer layout constants (§5.4).
const FOOTER_IDENT = Uint8Array.of(0x58, 0x45, 0x54, 0x42, 0x4c, 0x4f, 0x42); // "XETBLOB"
const FOOTER_HASHES_IDENT = Uint8Array.of(0x58, 0x42, 0x4c, 0x42, 0x48, 0x53, 0x48); // "XBLBHSH"
const FOOTER_BOUNDARIES_IDENT = Uint8Array.of(0x58, 0x42, 0x4c, 0x42, 0x42, 0x4e, 0x44); // "XBLBBND"
const FOOTER_IDENT_BYTES = 7;
const FOOTER_VERSION_V0 = 0;
const FOOTER_VERSION_V1 = 1;
const FOOTER_HASHES_VERSION = 0;
const FOOTER_BOUNDARIES_VERSION = 1;
const FOOTER_NONCE_BYTES = 4;
const FOOTER_V1_FIXED_BYTES = 92;
const FOOTER_V1_BYTES_PER_CHUNK = 40;
const FOOTER_V0_FIXED_BYTES = 60;
const FOOTER_V0_BYTES_PER_CHUNK = 36;

/** `info_length` of a v1 footer for `numChunks` chunks (the trailing u32 not included). */
export function xorbFooterInfoLength(numChunks: number): number {
  return FOOTER_V1_FIXED_BYTES + FOOTER_V1_BYTES_PER_CHUNK * numChunks;
}

/** The largest legal footer region (footer + its u32 length) for `numChunks` chunks. */
export function maxXorbFooterBytes(numChunks: number): number {
  // v1 is the larger layout (v0 has no unpacked offsets), so it bounds both versions.
  return xorbFooterInfoLength(numChunks) + 4;
}

/**
 * Room left for the footer in `DEFAULT_MAX_XORB_BODY_BYTES`: a round 512 KiB, above the largest
 * legal footer (`maxXorbFooterBytes(MAX_XORB_CHUNKS)`, 327,776 bytes), as the README documents.
 */
const XORB_FOOTER_ALLOWANCE_BYTES = 512 * 1024;

/**
 * The one default cap on a whole xorb body (67,698,688 bytes), for the server and the client
 * alike: §5.6's recommendation — 64 MiB of incompressible chunks stored uncompressed, plus an
 * 8-byte header for each of up to 8,192 chunks — plus the footer allowance. The server takes it
 * as `CASTOR_MAX_XORB_BYTES`' default; the client refuses a xorb range longer than it, so it
 * accepts everything a server with the default may have stored.
 */
export const DEFAULT_MAX_XORB_BODY_BYTES = MAX_XORB_UNCOMPRESSED_BYTES + XORB_CHUNK_HEADER_BYTES * MAX_XORB_CHUNKS + XORB_FOOTER_ALLOWANCE_BYTES;

/** Protocol limits a xorb must respect; validators may be given tighter ones, never looser. */
export interface XorbLimits {
  maxChunks: number;
  maxUncompressedBytes: number;
  maxChunkUncompressedBytes: number;
  maxChunkCompressedBytes: number;
}

export const XORB_LIMITS: Readonly<XorbLimits> = Object.freeze({
  maxChunks: MAX_XORB_CHUNKS,
  maxUncompressedBytes: MAX_XORB_UNCOMPRESSED_BYTES,
  maxChunkUncompressedBytes: MAX_CHUNK_UNCOMPRESSED_BYTES,
  maxChunkCompressedBytes: MAX_CHUNK_COMPRESSED_BYTES,
});

// ---------------------------------------------------------------------------------------------
// Public result types

export interface XorbChunkInfo {
  readonly hash: Hash;
  readonly uncompressedLength: number;
  /** E[i]: where this chunk (header + payload) ends in the serialized body, counted from 0. */
  readonly serializedEnd: number;
  /** U[i]: where this chunk ends in the concatenated uncompressed data. */
  readonly uncompressedEnd: number;
  readonly scheme: CompressionScheme;
}

export interface XorbInfo {
  /** Merkle root over (chunk hash, uncompressed length). */
  readonly hash: Hash;
  readonly chunks: readonly XorbChunkInfo[];
  /** Length of the chunk stream, footer excluded (= E[n-1]). */
  readonly serializedLength: number;
  /** Sum of all uncompressed chunk lengths (= U[n-1]). */
  readonly uncompressedLength: number;
  /** Whether the body carried a (validated) `CasObjectInfo` footer after the chunks. */
  readonly hasFooter: boolean;
}

// ---------------------------------------------------------------------------------------------
// Incremental validator

export interface XorbValidatorOptions extends Partial<XorbLimits> {
  /** The hash the upload claims (URL path); `finish()` fails with `hash_mismatch` otherwise. */
  expectedHash?: Hash;
  /** Cap on all bytes pushed, footer included (default `DEFAULT_MAX_XORB_BODY_BYTES`). */
  maxBodyBytes?: number;
}

/** Where the validator is in the body: expecting a chunk header, inside a payload, in the footer. */
const Phase = { Header: 0, Payload: 1, Footer: 2, Finished: 3 } as const;
type Phase = (typeof Phase)[keyof typeof Phase];

const EMPTY = new Uint8Array(0);

/**
 * Validates a xorb body pushed in pieces of any size, as they arrive from the network.
 *
 * Memory: at most one chunk payload (≤ 256 KiB, only when it straddles pieces) plus the
 * footer (bounded by the chunk limit) is held; payloads that arrive whole inside one piece are
 * decoded and hashed in place. Pieces are never retained after `push` returns, so callers may
 * reuse their buffers. The first `FormatError` poisons the validator: every later call throws it.
 */
export class XorbValidator {
  private readonly limits: XorbLimits;
  private readonly expectedHash: Hash | undefined;
  private readonly maxBodyBytes: number;
  private readonly maxFooterBytes: number;

  private phase: Phase = Phase.Header;
  private failure: FormatError | null = null;
  private received = 0;

  /** Start of the current chunk's header in the body (= end of the previous chunk). */
  private chunkStart = 0;
  private readonly headerBytes = new Uint8Array(XORB_CHUNK_HEADER_BYTES);
  private headerFill = 0;

  private scheme: CompressionScheme = CompressionScheme.None;
  private compressedSize = 0;
  private uncompressedSize = 0;
  /** Holds a payload that straddles pieces; allocated on first need, then reused. */
  private staging: Uint8Array | null = null;
  private stagingFill = 0;

  private footer: Uint8Array | null = null;
  private footerFill = 0;

  private readonly chunks: XorbChunkInfo[] = [];
  private uncompressedTotal = 0;

  constructor(options: XorbValidatorOptions = {}) {
    this.limits = resolveLimits(options);
    this.expectedHash = options.expectedHash;
    if (this.expectedHash !== undefined && this.expectedHash.length !== HASH_BYTES) {
      throw new RangeError(`expectedHash must have ${HASH_BYTES} bytes, got ${this.expectedHash.length}`);
    }
    const maxBody = options.maxBodyBytes ?? DEFAULT_MAX_XORB_BODY_BYTES;
    if (!Number.isSafeInteger(maxBody) || maxBody < 1) {
      throw new RangeError(`maxBodyBytes must be a positive integer, got ${maxBody}`);
    }
    this.maxBodyBytes = maxBody;
    this.maxFooterBytes = maxXorbFooterBytes(this.limits.maxChunks);
  }

  /** Bytes pushed so far. */
  get bytesReceived(): number {
    return this.received;
  }

  /** Chunks fully validated so far. */
  get chunkCount(): number {
    return this.chunks.length;
  }

  push(piece: Uint8Array): void {
    this.assertUsable();
    try {
      this.received += piece.length;
      if (this.received > this.maxBodyBytes) {
        throw new FormatError("xorb_too_large", `xorb body exceeds the limit of ${this.maxBodyBytes} bytes (${this.received} bytes received so far)`);
      }
      this.consume(piece);
    } catch (err) {
      throw this.poison(err);
    }
  }

  /** Ends the body: checks completeness and the footer, computes and checks the xorb hash. */
  finish(): XorbInfo {
    this.assertUsable();
    try {
      const info = this.complete();
      this.phase = Phase.Finished;
      return info;
    } catch (err) {
      throw this.poison(err);
    }
  }

  private assertUsable(): void {
    if (this.failure !== null) throw this.failure;
    if (this.phase === Phase.Finished) throw new Error("XorbValidator: finish() was already called");
  }

  private poison(err: unknown): unknown {
    if (isFormatError(err)) this.failure = err;
    return err;
  }

  private consume(piece: Uint8Array): void {
    const length = piece.length;
    let pos = 0;
    while (pos < length) {
      switch (this.phase) {
        case Phase.Header: {
          if (this.headerFill === 0 && length - pos >= XORB_CHUNK_HEADER_BYTES) {
            // Fast path: the whole header is inside this piece.
            if (isFooterIdentAt(piece, pos)) {
              this.beginFooter();
              continue;
            }
            this.beginChunk(piece, pos);
            pos += XORB_CHUNK_HEADER_BYTES;
          } else {
            const n = Math.min(XORB_CHUNK_HEADER_BYTES - this.headerFill, length - pos);
            this.headerBytes.set(piece.subarray(pos, pos + n), this.headerFill);
            this.headerFill += n;
            pos += n;
            if (this.headerFill < XORB_CHUNK_HEADER_BYTES) break;
            this.headerFill = 0;
            if (isFooterIdentAt(this.headerBytes, 0)) {
              this.beginFooter();
              this.appendFooter(this.headerBytes);
            } else {
              this.beginChunk(this.headerBytes, 0);
            }
          }
          break;
        }
        case Phase.Payload: {
          const available = length - pos;
          if (this.stagingFill === 0 && available >= this.compressedSize) {
            // Fast path: the payload is whole inside this piece — decode it in place.
            this.endChunk(piece.subarray(pos, pos + this.compressedSize));
            pos += this.compressedSize;
          } else {
            const staging = (this.staging ??= new Uint8Array(this.limits.maxChunkCompressedBytes));
            const n = Math.min(this.compressedSize - this.stagingFill, available);
            staging.set(piece.subarray(pos, pos + n), this.stagingFill);
            this.stagingFill += n;
            pos += n;
            if (this.stagingFill === this.compressedSize) {
              this.stagingFill = 0;
              this.endChunk(staging.subarray(0, this.compressedSize));
            }
          }
          break;
        }
        case Phase.Footer:
          this.appendFooter(pos === 0 ? piece : piece.subarray(pos));
          pos = length;
          break;
        case Phase.Finished:
          throw new Error("unreachable: push after finish");
      }
    }
  }

  /** Checks a chunk header entirely before any of its payload is buffered. */
  private beginChunk(src: Uint8Array, at: number): void {
    const index = this.chunks.length;
    const where = `chunk ${index} (header at byte ${this.chunkStart})`;
    const version = src[at];
    const compressedSize = src[at + 1] | (src[at + 2] << 8) | (src[at + 3] << 16);
    const scheme = src[at + 4];
    const uncompressedSize = src[at + 5] | (src[at + 6] << 8) | (src[at + 7] << 16);

    if (version !== 0) {
      throw new FormatError(
        "bad_chunk_header",
        `${where}: header version is ${version}, expected 0 — the bytes are neither a chunk header nor a "XETBLOB" footer`,
      );
    }
    if (index >= this.limits.maxChunks) {
      throw new FormatError("too_many_chunks", `${where}: a xorb may hold at most ${this.limits.maxChunks} chunks; split the data into more xorbs`);
    }
    if (!isCompressionScheme(scheme)) {
      throw new FormatError("unknown_compression_scheme", `${where}: unknown compression scheme ${scheme} (expected 0 None, 1 LZ4 or 2 ByteGrouping4LZ4)`);
    }
    if (uncompressedSize > this.limits.maxChunkUncompressedBytes) {
      throw new FormatError(
        "chunk_too_large",
        `${where}: uncompressed size ${uncompressedSize} exceeds the limit of ${this.limits.maxChunkUncompressedBytes} bytes`,
      );
    }
    if (compressedSize > this.limits.maxChunkCompressedBytes) {
      throw new FormatError("chunk_too_large", `${where}: compressed size ${compressedSize} exceeds the limit of ${this.limits.maxChunkCompressedBytes} bytes`);
    }
    if (scheme === CompressionScheme.None && compressedSize !== uncompressedSize) {
      throw new FormatError(
        "bad_chunk_header",
        `${where}: an uncompressed (scheme 0) chunk must declare equal sizes, got compressed ${compressedSize} and uncompressed ${uncompressedSize}`,
      );
    }
    if (this.uncompressedTotal + uncompressedSize > this.limits.maxUncompressedBytes) {
      throw new FormatError(
        "xorb_too_large",
        `${where}: the xorb's uncompressed size would reach ${this.uncompressedTotal + uncompressedSize} bytes, over the limit of ${this.limits.maxUncompressedBytes}; split the data into more xorbs`,
      );
    }
    this.scheme = scheme;
    this.compressedSize = compressedSize;
    this.uncompressedSize = uncompressedSize;
    this.phase = Phase.Payload;
    // A zero-byte payload completes now: no later byte would trigger it.
    if (compressedSize === 0) this.endChunk(EMPTY);
  }

  /** Decodes and hashes one complete payload; `payload` may be a view into a caller's piece. */
  private endChunk(payload: Uint8Array): void {
    const index = this.chunks.length;
    let data: Uint8Array;
    try {
      data = decompressChunk(this.scheme, payload, this.uncompressedSize);
    } catch (err) {
      if (isFormatError(err)) {
        throw new FormatError(err.code, `chunk ${index} (header at byte ${this.chunkStart}): ${err.message}`);
      }
      throw err;
    }
    if (data.length !== this.uncompressedSize) {
      throw new FormatError(
        "decompressed_size_mismatch",
        `chunk ${index} (header at byte ${this.chunkStart}): decodes to ${data.length} bytes but its header declares ${this.uncompressedSize}`,
      );
    }
    // Hashed before returning: `data` may alias the staging buffer or the caller's piece.
    const hash = chunkHash(data);
    const serializedEnd = this.chunkStart + XORB_CHUNK_HEADER_BYTES + this.compressedSize;
    this.uncompressedTotal += this.uncompressedSize;
    this.chunks.push({
      hash,
      uncompressedLength: this.uncompressedSize,
      serializedEnd,
      uncompressedEnd: this.uncompressedTotal,
      scheme: this.scheme,
    });
    this.chunkStart = serializedEnd;
    this.phase = Phase.Header;
  }

  private beginFooter(): void {
    this.phase = Phase.Footer;
    this.footer = new Uint8Array(Math.min(this.maxFooterBytes, 4096));
    this.footerFill = 0;
  }

  private appendFooter(bytes: Uint8Array): void {
    const needed = this.footerFill + bytes.length;
    if (needed > this.maxFooterBytes) {
      throw new FormatError(
        "bad_footer",
        `the footer starting at byte ${this.chunkStart} is longer than the largest legal footer (${this.maxFooterBytes} bytes for ${this.limits.maxChunks} chunks); bytes after the chunks must be exactly one CasObjectInfo footer and its u32 length`,
      );
    }
    let footer = this.footer!;
    if (needed > footer.length) {
      const grown = new Uint8Array(Math.min(this.maxFooterBytes, Math.max(needed, footer.length * 2)));
      grown.set(footer.subarray(0, this.footerFill));
      this.footer = footer = grown;
    }
    footer.set(bytes, this.footerFill);
    this.footerFill = needed;
  }

  private complete(): XorbInfo {
    const index = this.chunks.length;
    if (this.phase === Phase.Header && this.headerFill > 0) {
      const partial = this.headerBytes.subarray(0, this.headerFill);
      const what = startsLikeFooter(partial) ? "a footer" : `chunk ${index}'s 8-byte header`;
      throw new FormatError("truncated", `xorb body is truncated: it ends ${this.headerFill} byte(s) into ${what} at byte ${this.chunkStart}`);
    }
    if (this.phase === Phase.Payload) {
      throw new FormatError(
        "truncated",
        `xorb body is truncated: chunk ${index} (header at byte ${this.chunkStart}) declares ${this.compressedSize} payload bytes but only ${this.stagingFill} arrived`,
      );
    }
    if (index === 0) {
      throw new FormatError("empty_xorb", "xorb has no chunks; a xorb must contain at least one chunk");
    }
    const hash = xorbHash(this.chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength })));
    const hasFooter = this.phase === Phase.Footer;
    if (hasFooter) {
      const footer = parseXorbFooter(this.footer!.subarray(0, this.footerFill), this.limits.maxChunks);
      checkFooterAgainst(footer, this.chunks, hash, this.chunkStart);
    }
    if (this.expectedHash !== undefined && !hashEquals(hash, this.expectedHash)) {
      throw new FormatError("hash_mismatch", `xorb hash of the uploaded chunks is ${hashToHex(hash)}, but the upload names ${hashToHex(this.expectedHash)}`);
    }
    return {
      hash,
      chunks: this.chunks,
      serializedLength: this.chunkStart,
      uncompressedLength: this.uncompressedTotal,
      hasFooter,
    };
  }
}

/** Validates a whole body at once (one `push`, then `finish`). */
export function validateXorb(body: Uint8Array, options?: XorbValidatorOptions): XorbInfo {
  const validator = new XorbValidator(options);
  validator.push(body);
  return validator.finish();
}

function resolveLimits(options: Partial<XorbLimits>): XorbLimits {
  const resolved = { ...XORB_LIMITS };
  for (const key of Object.keys(XORB_LIMITS) as (keyof XorbLimits)[]) {
    const value = options[key];
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || value < 1 || value > XORB_LIMITS[key]) {
      throw new RangeError(`${key} must be an integer in 1..${XORB_LIMITS[key]} (the protocol limit), got ${value}`);
    }
    resolved[key] = value;
  }
  return resolved;
}

function isFooterIdentAt(bytes: Uint8Array, at: number): boolean {
  // A chunk header starts with version 0, so a first byte of 'X' already rules out a chunk.
  if (bytes[at] !== FOOTER_IDENT[0]) return false;
  for (let i = 1; i < FOOTER_IDENT_BYTES; i++) if (bytes[at + i] !== FOOTER_IDENT[i]) return false;
  return true;
}

function startsLikeFooter(partial: Uint8Array): boolean {
  for (let i = 0; i < partial.length && i < FOOTER_IDENT_BYTES; i++) if (partial[i] !== FOOTER_IDENT[i]) return false;
  return partial.length > 0;
}

// ---------------------------------------------------------------------------------------------
// Footer

export interface XorbFooter {
  /** 1 for the current layout, 0 for the legacy one (no unpacked offsets). */
  readonly version: 0 | 1;
  readonly xorbHash: Hash;
  readonly chunkHashes: readonly Hash[];
  /** E[i] as stored. */
  readonly serializedEnds: readonly number[];
  /** U[i] as stored; null in a v0 footer. */
  readonly uncompressedEnds: readonly number[] | null;
}

/**
 * Parses a footer region: from its "XETBLOB" ident through the trailing u32 `info_length`
 * (which must equal the region's length − 4). Checks every ident, version, the three chunk
 * counts, both section offsets and the order of the offsets. The contents are claims: callers
 * compare them against what they computed. The 16-byte buffer (nonce + reserved) is ignored,
 * as xet-core's reader does.
 */
export function parseXorbFooter(region: Uint8Array, maxChunks: number = MAX_XORB_CHUNKS): XorbFooter {
  const bad = (detail: string) => new FormatError("bad_footer", `xorb footer is invalid: ${detail}`);
  const view = new DataView(region.buffer, region.byteOffset, region.byteLength);
  if (region.length < FOOTER_V0_FIXED_BYTES + 4) {
    throw bad(`${region.length} bytes is shorter than the smallest footer (${FOOTER_V0_FIXED_BYTES + 4})`);
  }
  if (!isFooterIdentAt(region, 0)) throw bad('it does not start with "XETBLOB"');
  const infoLength = view.getUint32(region.length - 4, true);
  if (infoLength !== region.length - 4) {
    throw bad(`info_length is ${infoLength} but ${region.length - 4} footer bytes precede it (extra or missing bytes after the chunks?)`);
  }
  const version = region[7];
  const xorbHashBytes = region.slice(8, 8 + HASH_BYTES);
  const readU32s = (at: number, n: number): number[] => {
    const out = new Array<number>(n);
    for (let i = 0; i < n; i++) out[i] = view.getUint32(at + 4 * i, true);
    return out;
  };
  const readHashes = (at: number, n: number): Hash[] => {
    const out = new Array<Hash>(n);
    for (let i = 0; i < n; i++) out[i] = region.slice(at + HASH_BYTES * i, at + HASH_BYTES * (i + 1));
    return out;
  };
  const checkCount = (n: number, expectedInfoLength: number) => {
    if (n > maxChunks) throw bad(`num_chunks ${n} exceeds the limit of ${maxChunks}`);
    if (expectedInfoLength !== infoLength) {
      throw bad(`num_chunks ${n} implies info_length ${expectedInfoLength}, but it is ${infoLength}`);
    }
  };

  let footer: XorbFooter;
  if (version === FOOTER_VERSION_V1) {
    if (region.length < FOOTER_V1_FIXED_BYTES + 4) {
      throw bad(`${region.length} bytes is shorter than the smallest v1 footer (${FOOTER_V1_FIXED_BYTES + 4})`);
    }
    if (!bytesEqualAt(region, 40, FOOTER_HASHES_IDENT)) throw bad('the hash section does not start with "XBLBHSH"');
    if (region[47] !== FOOTER_HASHES_VERSION) throw bad(`hashes_version is ${region[47]}, expected ${FOOTER_HASHES_VERSION}`);
    const n = view.getUint32(48, true);
    // Bounding n through info_length first keeps every offset below inside the region.
    checkCount(n, xorbFooterInfoLength(n));
    const boundaries = 52 + HASH_BYTES * n;
    if (!bytesEqualAt(region, boundaries, FOOTER_BOUNDARIES_IDENT)) {
      throw bad('the boundary section does not start with "XBLBBND"');
    }
    if (region[boundaries + 7] !== FOOTER_BOUNDARIES_VERSION) {
      throw bad(`boundaries_version is ${region[boundaries + 7]}, expected ${FOOTER_BOUNDARIES_VERSION}`);
    }
    const n2 = view.getUint32(boundaries + 8, true);
    const n3 = view.getUint32(64 + 40 * n, true);
    if (n2 !== n || n3 !== n) throw bad(`the three num_chunks fields disagree (${n}, ${n2}, ${n3})`);
    const hashesOffset = view.getUint32(68 + 40 * n, true);
    const boundariesOffset = view.getUint32(72 + 40 * n, true);
    if (hashesOffset !== 52 + 40 * n) {
      throw bad(`hashes_section_offset_from_end is ${hashesOffset}, expected ${52 + 40 * n}`);
    }
    if (boundariesOffset !== 40 + 8 * n) {
      throw bad(`boundary_section_offset_from_end is ${boundariesOffset}, expected ${40 + 8 * n}`);
    }
    footer = {
      version: 1,
      xorbHash: xorbHashBytes,
      chunkHashes: readHashes(52, n),
      serializedEnds: readU32s(64 + 32 * n, n),
      uncompressedEnds: readU32s(64 + 36 * n, n),
    };
  } else if (version === FOOTER_VERSION_V0) {
    const n = view.getUint32(40, true);
    checkCount(n, FOOTER_V0_FIXED_BYTES + FOOTER_V0_BYTES_PER_CHUNK * n);
    footer = {
      version: 0,
      xorbHash: xorbHashBytes,
      serializedEnds: readU32s(44, n),
      chunkHashes: readHashes(44 + 4 * n, n),
      uncompressedEnds: null,
    };
  } else {
    throw bad(`version is ${version}, expected ${FOOTER_VERSION_V1} (or legacy ${FOOTER_VERSION_V0})`);
  }

  let previous = 0;
  footer.serializedEnds.forEach((end, i) => {
    if (end < previous + XORB_CHUNK_HEADER_BYTES) {
      throw bad(`chunk_boundary_offsets[${i}] = ${end} leaves no room for chunk ${i}'s 8-byte header after byte ${previous}`);
    }
    previous = end;
  });
  previous = 0;
  footer.uncompressedEnds?.forEach((end, i) => {
    if (end < previous) throw bad(`unpacked_chunk_offsets[${i}] = ${end} is smaller than the previous offset ${previous}`);
    previous = end;
  });
  return footer;
}

function checkFooterAgainst(footer: XorbFooter, chunks: readonly XorbChunkInfo[], hash: Hash, footerStart: number): void {
  const bad = (detail: string) => new FormatError("bad_footer", `xorb footer at byte ${footerStart} does not match the chunks: ${detail}`);
  if (footer.chunkHashes.length !== chunks.length) {
    throw bad(`it lists ${footer.chunkHashes.length} chunks, the body has ${chunks.length}`);
  }
  for (let i = 0; i < chunks.length; i++) {
    const chunk = chunks[i];
    if (!hashEquals(footer.chunkHashes[i], chunk.hash)) {
      throw bad(`chunk hash ${i} is ${hashToHex(footer.chunkHashes[i])}, computed ${hashToHex(chunk.hash)}`);
    }
    if (footer.serializedEnds[i] !== chunk.serializedEnd) {
      throw bad(`chunk_boundary_offsets[${i}] is ${footer.serializedEnds[i]}, chunk ${i} ends at byte ${chunk.serializedEnd}`);
    }
    if (footer.uncompressedEnds !== null && footer.uncompressedEnds[i] !== chunk.uncompressedEnd) {
      throw bad(`unpacked_chunk_offsets[${i}] is ${footer.uncompressedEnds[i]}, computed ${chunk.uncompressedEnd}`);
    }
  }
  if (!hashEquals(footer.xorbHash, hash)) {
    throw bad(`its xorb hash is ${hashToHex(footer.xorbHash)}, computed ${hashToHex(hash)}`);
  }
}

/**
 * Writes the v1 footer for `info` followed by its u32 `info_length`, exactly as xet-core does.
 * `nonce` (4 bytes, default zero) fills the start of the buffer; it is not part of any hash.
 */
export function serializeXorbFooter(info: Pick<XorbInfo, "hash" | "chunks">, nonce?: Uint8Array): Uint8Array {
  const n = info.chunks.length;
  if (nonce !== undefined && nonce.length !== FOOTER_NONCE_BYTES) {
    throw new RangeError(`a footer nonce has ${FOOTER_NONCE_BYTES} bytes, got ${nonce.length}`);
  }
  const infoLength = xorbFooterInfoLength(n);
  const out = new Uint8Array(infoLength + 4);
  const view = new DataView(out.buffer);
  out.set(FOOTER_IDENT, 0);
  out[7] = FOOTER_VERSION_V1;
  out.set(info.hash, 8);
  out.set(FOOTER_HASHES_IDENT, 40);
  out[47] = FOOTER_HASHES_VERSION;
  view.setUint32(48, n, true);
  const boundaries = 52 + HASH_BYTES * n;
  out.set(FOOTER_BOUNDARIES_IDENT, boundaries);
  out[boundaries + 7] = FOOTER_BOUNDARIES_VERSION;
  view.setUint32(boundaries + 8, n, true);
  for (let i = 0; i < n; i++) {
    const chunk = info.chunks[i];
    out.set(chunk.hash, 52 + HASH_BYTES * i);
    view.setUint32(64 + 32 * n + 4 * i, chunk.serializedEnd, true);
    view.setUint32(64 + 36 * n + 4 * i, chunk.uncompressedEnd, true);
  }
  view.setUint32(64 + 40 * n, n, true);
  view.setUint32(68 + 40 * n, 52 + 40 * n, true);
  view.setUint32(72 + 40 * n, 40 + 8 * n, true);
  if (nonce !== undefined) out.set(nonce, 76 + 40 * n);
  // The other 12 bytes of the 16-byte buffer are reserved and stay zero.
  view.setUint32(92 + 40 * n, infoLength, true);
  return out;
}

function bytesEqualAt(bytes: Uint8Array, at: number, expected: Uint8Array): boolean {
  for (let i = 0; i < expected.length; i++) if (bytes[at + i] !== expected[i]) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Serializer

/** A chunk to serialize: raw data (compressed here), or a payload already compressed. */
export type XorbChunkSource =
  | { readonly data: Uint8Array; readonly scheme?: CompressionScheme | "best" }
  | { readonly payload: Uint8Array; readonly scheme: CompressionScheme; readonly uncompressedLength: number };

export interface SerializeXorbOptions {
  /** Append a v1 footer (what older clients uploaded, and a convenient stored form). */
  footer?: boolean;
  /** 4-byte nonce for the footer buffer. */
  footerNonce?: Uint8Array;
}

export interface SerializedXorb {
  readonly bytes: Uint8Array;
  readonly info: XorbInfo;
}

/**
 * Builds a xorb body. Raw chunks default to the smallest encoding ("best"); pre-compressed
 * payloads are decoded once to compute their hash (which also proves they decode). Breaking a
 * protocol limit is the caller's mistake and throws a RangeError.
 */
export function serializeXorb(sources: readonly XorbChunkSource[], options: SerializeXorbOptions = {}): SerializedXorb {
  if (sources.length === 0) throw new RangeError("a xorb needs at least one chunk");
  if (sources.length > MAX_XORB_CHUNKS) {
    throw new RangeError(`a xorb holds at most ${MAX_XORB_CHUNKS} chunks, got ${sources.length}`);
  }
  const encoded: { scheme: CompressionScheme; payload: Uint8Array; data: Uint8Array }[] = [];
  let serializedLength = 0;
  let uncompressedLength = 0;
  sources.forEach((source, i) => {
    const declaredLength = "payload" in source ? source.uncompressedLength : source.data.length;
    if (!Number.isSafeInteger(declaredLength) || declaredLength < 0 || declaredLength > MAX_CHUNK_UNCOMPRESSED_BYTES) {
      throw new RangeError(`chunk ${i} has ${declaredLength} bytes; a chunk holds 0..${MAX_CHUNK_UNCOMPRESSED_BYTES}`);
    }
    let scheme: CompressionScheme;
    let payload: Uint8Array;
    let data: Uint8Array;
    if ("payload" in source) {
      if (source.payload.length > MAX_CHUNK_COMPRESSED_BYTES) {
        throw new RangeError(`chunk ${i}'s payload has ${source.payload.length} bytes; the limit is ${MAX_CHUNK_COMPRESSED_BYTES}`);
      }
      scheme = source.scheme;
      payload = source.payload;
      data = decompressChunk(scheme, payload, source.uncompressedLength);
    } else {
      data = source.data;
      if (source.scheme === undefined || source.scheme === "best") {
        ({ scheme, payload } = compressChunkBest(data));
      } else {
        scheme = source.scheme;
        payload = compressChunk(data, scheme);
      }
      if (payload.length > MAX_CHUNK_COMPRESSED_BYTES) {
        throw new RangeError(`chunk ${i} compresses to ${payload.length} bytes; the limit is ${MAX_CHUNK_COMPRESSED_BYTES}`);
      }
    }
    encoded.push({ scheme, payload, data });
    serializedLength += XORB_CHUNK_HEADER_BYTES + payload.length;
    uncompressedLength += data.length;
  });
  if (uncompressedLength > MAX_XORB_UNCOMPRESSED_BYTES) {
    throw new RangeError(`the chunks hold ${uncompressedLength} bytes; a xorb holds at most ${MAX_XORB_UNCOMPRESSED_BYTES}`);
  }

  const chunks: XorbChunkInfo[] = [];
  const footerBytes = options.footer ? maxXorbFooterBytes(encoded.length) : 0;
  const bytes = new Uint8Array(serializedLength + footerBytes);
  let at = 0;
  let uncompressedEnd = 0;
  for (const { scheme, payload, data } of encoded) {
    writeChunkHeader(bytes, at, payload.length, scheme, data.length);
    bytes.set(payload, at + XORB_CHUNK_HEADER_BYTES);
    at += XORB_CHUNK_HEADER_BYTES + payload.length;
    uncompressedEnd += data.length;
    chunks.push({ hash: chunkHash(data), uncompressedLength: data.length, serializedEnd: at, uncompressedEnd, scheme });
  }
  const hash = xorbHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength })));
  if (options.footer) bytes.set(serializeXorbFooter({ hash, chunks }, options.footerNonce), at);
  return {
    bytes,
    info: { hash, chunks, serializedLength, uncompressedLength, hasFooter: options.footer === true },
  };
}

/** The fields of an 8-byte chunk header (docs/protocol.md §5.2), as stored: nothing is checked. */
export interface ChunkHeader {
  readonly version: number;
  readonly compressedSize: number;
  readonly scheme: number;
  readonly uncompressedSize: number;
}

/** Reads the chunk header at `at`; the caller checks that 8 bytes are there and judges the fields. */
export function readChunkHeader(bytes: Uint8Array, at: number): ChunkHeader {
  return {
    version: bytes[at],
    compressedSize: bytes[at + 1] | (bytes[at + 2] << 8) | (bytes[at + 3] << 16),
    scheme: bytes[at + 4],
    uncompressedSize: bytes[at + 5] | (bytes[at + 6] << 8) | (bytes[at + 7] << 16),
  };
}

/** Writes the 8-byte chunk header of docs/protocol.md §5.2 at `at`: version 0, u24 sizes little-endian. */
export function writeChunkHeader(out: Uint8Array, at: number, compressedSize: number, scheme: number, uncompressedSize: number): void {
  out[at] = 0;
  out[at + 1] = compressedSize & 0xff;
  out[at + 2] = (compressedSize >>> 8) & 0xff;
  out[at + 3] = (compressedSize >>> 16) & 0xff;
  out[at + 4] = scheme;
  out[at + 5] = uncompressedSize & 0xff;
  out[at + 6] = (uncompressedSize >>> 8) & 0xff;
  out[at + 7] = (uncompressedSize >>> 16) & 0xff;
}

// ---------------------------------------------------------------------------------------------
// Chunk ranges → bytes (§5.5)

function checkChunkRange(ends: ArrayLike<number>, start: number, end: number): void {
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end <= start || end > ends.length) {
    throw new RangeError(`chunk range [${start}, ${end}) is not a non-empty range within the xorb's ${ends.length} chunks`);
  }
}

/**
 * Serialized byte range `[start, end)` (end exclusive) holding chunks `[startChunk, endChunk)`,
 * given E[] (`serializedEnds`). The HTTP inclusive form is `start`–`end - 1`.
 */
export function chunkRangeToByteRange(serializedEnds: ArrayLike<number>, startChunk: number, endChunk: number): { start: number; end: number } {
  checkChunkRange(serializedEnds, startChunk, endChunk);
  return { start: startChunk === 0 ? 0 : serializedEnds[startChunk - 1], end: serializedEnds[endChunk - 1] };
}

/** Uncompressed length of chunks `[startChunk, endChunk)`, given U[] (`uncompressedEnds`). */
export function chunkRangeUncompressedLength(uncompressedEnds: ArrayLike<number>, startChunk: number, endChunk: number): number {
  checkChunkRange(uncompressedEnds, startChunk, endChunk);
  return uncompressedEnds[endChunk - 1] - (startChunk === 0 ? 0 : uncompressedEnds[startChunk - 1]);
}
