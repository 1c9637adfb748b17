/**
 * Chunk compression schemes of the xorb format (XET-PROTOCOL.md §5.3).
 * SEAM: this file's exported signatures are used by xorb.ts; the LZ4/BG4 bodies are being
 * filled in (lz4.ts, bg4.ts).
 */
import { FormatError } from "./errors.js";

export const CompressionScheme = { None: 0, LZ4: 1, ByteGrouping4LZ4: 2 } as const;
export type CompressionScheme = (typeof CompressionScheme)[keyof typeof CompressionScheme];

/** Largest uncompressed chunk (2 × the 64 KiB target) and largest compressed payload. */
export const MAX_CHUNK_UNCOMPRESSED_BYTES = 131_072;
export const MAX_CHUNK_COMPRESSED_BYTES = 262_144;

export function isCompressionScheme(value: number): value is CompressionScheme {
  return value === 0 || value === 1 || value === 2;
}

/**
 * Decodes one chunk payload. The result has exactly `uncompressedSize` bytes or a FormatError
 * is thrown (`unknown_compression_scheme`, `bad_compression`, `decompressed_size_mismatch`);
 * no decoder ever allocates more than `uncompressedSize` (≤ 128 KiB) for the output.
 * The result may share memory with `payload` (scheme None).
 */
export function decompressChunk(scheme: number, payload: Uint8Array, uncompressedSize: number): Uint8Array {
  if (scheme === CompressionScheme.None) {
    if (payload.length !== uncompressedSize) {
      throw new FormatError(
        "decompressed_size_mismatch",
        `uncompressed chunk has ${payload.length} bytes but its header declares ${uncompressedSize}`,
      );
    }
    return payload;
  }
  throw new FormatError("unknown_compression_scheme", `compression scheme ${scheme} is not supported yet`);
}

/** Encodes one chunk with the given scheme (for castor's client and tests). */
export function compressChunk(data: Uint8Array, scheme: CompressionScheme): Uint8Array {
  if (scheme === CompressionScheme.None) return data;
  throw new Error(`compression scheme ${scheme} is not available yet`);
}

/**
 * Picks the smallest encoding among None, LZ4 and BG4+LZ4 (None unless strictly smaller),
 * as both real clients do.
 */
export function compressChunkBest(data: Uint8Array): { scheme: CompressionScheme; payload: Uint8Array } {
  return { scheme: CompressionScheme.None, payload: data };
}
