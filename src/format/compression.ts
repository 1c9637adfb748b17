/**
 * Chunk compression schemes of the xorb format (XET-PROTOCOL.md §5.3): None, LZ4 (one LZ4
 * frame) and ByteGrouping4LZ4 (an LZ4 frame of the BG4-split bytes). Scheme 99 ("Auto") is
 * internal to xet-core and never valid on the wire.
 */
import { bg4Regroup, bg4Split } from "./bg4.js";
import { FormatError } from "./errors.js";
import { decodeLz4Frame, encodeLz4Frame } from "./lz4.js";

export const CompressionScheme = { None: 0, LZ4: 1, ByteGrouping4LZ4: 2 } as const;
export type CompressionScheme = (typeof CompressionScheme)[keyof typeof CompressionScheme];

/** Largest uncompressed chunk (2 × the 64 KiB target) and largest compressed payload. */
export const MAX_CHUNK_UNCOMPRESSED_BYTES = 131_072;
export const MAX_CHUNK_COMPRESSED_BYTES = 262_144;

export function isCompressionScheme(value: number): value is CompressionScheme {
  return value === 0 || value === 1 || value === 2;
}

function checkUncompressedSize(size: number): void {
  if (!Number.isInteger(size) || size < 0 || size > MAX_CHUNK_UNCOMPRESSED_BYTES) {
    throw new FormatError(
      "chunk_too_large",
      `a chunk's uncompressed size must be 0..${MAX_CHUNK_UNCOMPRESSED_BYTES} bytes, got ${size}`,
    );
  }
}

/**
 * Decodes one chunk payload. The result has exactly `uncompressedSize` bytes or a FormatError
 * is thrown (`unknown_compression_scheme`, `bad_compression`, `decompressed_size_mismatch`);
 * no decoder ever allocates more than `uncompressedSize` (≤ 128 KiB) for the output.
 * The result may share memory with `payload` (scheme None).
 */
export function decompressChunk(scheme: number, payload: Uint8Array, uncompressedSize: number): Uint8Array {
  checkUncompressedSize(uncompressedSize);
  if (scheme === CompressionScheme.None) {
    if (payload.length !== uncompressedSize) {
      throw new FormatError(
        "decompressed_size_mismatch",
        `uncompressed chunk has ${payload.length} bytes but its header declares ${uncompressedSize}`,
      );
    }
    return payload;
  }
  if (scheme !== CompressionScheme.LZ4 && scheme !== CompressionScheme.ByteGrouping4LZ4) {
    throw new FormatError(
      "unknown_compression_scheme",
      `compression scheme ${scheme} is not one of 0 (None), 1 (LZ4), 2 (ByteGrouping4LZ4)`,
    );
  }
  if (payload.length > MAX_CHUNK_COMPRESSED_BYTES) {
    throw new FormatError(
      "chunk_too_large",
      `a compressed chunk may have at most ${MAX_CHUNK_COMPRESSED_BYTES} bytes, got ${payload.length}`,
    );
  }
  const decoded = decodeLz4Frame(payload, uncompressedSize);
  return scheme === CompressionScheme.LZ4 ? decoded : bg4Regroup(decoded);
}

/** Encodes one chunk with the given scheme (for castor's client and tests). */
export function compressChunk(data: Uint8Array, scheme: CompressionScheme): Uint8Array {
  checkUncompressedSize(data.length);
  switch (scheme) {
    case CompressionScheme.None:
      return data;
    case CompressionScheme.LZ4:
      return encodeLz4Frame(data);
    case CompressionScheme.ByteGrouping4LZ4:
      return encodeLz4Frame(bg4Split(data));
    default:
      throw new FormatError("unknown_compression_scheme", `cannot compress with unknown scheme ${String(scheme)}`);
  }
}

/**
 * Picks the smallest encoding among None, LZ4 and BG4+LZ4 (None unless strictly smaller),
 * as both real clients do.
 */
export function compressChunkBest(data: Uint8Array): { scheme: CompressionScheme; payload: Uint8Array } {
  checkUncompressedSize(data.length);
  let best: { scheme: CompressionScheme; payload: Uint8Array } = { scheme: CompressionScheme.None, payload: data };
  for (const scheme of [CompressionScheme.LZ4, CompressionScheme.ByteGrouping4LZ4] as const) {
    const payload = compressChunk(data, scheme);
    if (payload.length < best.payload.length) best = { scheme, payload };
  }
  return best;
}
