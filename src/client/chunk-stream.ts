/**
 * Decoding a fetched xorb byte range: a run of complete chunks, each an 8-byte header
 * (version 0, 3-byte compressed size, scheme, 3-byte uncompressed size; XET-PROTOCOL.md §5.2)
 * and its payload, with nothing before, between or after them (§5.5).
 *
 * `XorbValidator` in src/format walks the same headers but keeps only hashes and offsets, as
 * the server needs; a downloader needs the decoded bytes, so the short walk is repeated here.
 * Every declared size is checked against the protocol limits and the bytes actually present
 * before it is used.
 */
import {
  MAX_CHUNK_COMPRESSED_BYTES,
  MAX_CHUNK_UNCOMPRESSED_BYTES,
  XORB_CHUNK_HEADER_BYTES,
  chunkHash,
  decompressChunk,
  isFormatError,
  type Hash,
} from "../format/index.js";
import { CastorClientError } from "./errors.js";

export interface DecodedChunks {
  /** Uncompressed chunk bytes, in order (may be views into the fetched bytes). */
  chunks: Uint8Array[];
  /** Each chunk's hash (§3.1), computed from the decoded bytes. */
  hashes: Hash[];
  uncompressedBytes: number;
}

export function decodeChunkStream(bytes: Uint8Array, expectedChunks: number, what: string): DecodedChunks {
  const bad = (detail: string) => new CastorClientError("protocol", `${what}: ${detail}`);
  const chunks: Uint8Array[] = [];
  const hashes: Hash[] = [];
  let uncompressedBytes = 0;
  let at = 0;
  while (at < bytes.length) {
    const index = chunks.length;
    if (index >= expectedChunks) throw bad(`${bytes.length - at} bytes follow the ${expectedChunks} chunks the range should hold`);
    if (bytes.length - at < XORB_CHUNK_HEADER_BYTES) throw bad(`chunk ${index}'s header is cut off at byte ${at}`);
    const version = bytes[at];
    const compressedSize = bytes[at + 1] | (bytes[at + 2] << 8) | (bytes[at + 3] << 16);
    const scheme = bytes[at + 4];
    const uncompressedSize = bytes[at + 5] | (bytes[at + 6] << 8) | (bytes[at + 7] << 16);
    if (version !== 0) throw bad(`chunk ${index} at byte ${at} has header version ${version}, expected 0`);
    if (compressedSize > MAX_CHUNK_COMPRESSED_BYTES || uncompressedSize > MAX_CHUNK_UNCOMPRESSED_BYTES) {
      throw bad(`chunk ${index} at byte ${at} declares ${compressedSize} compressed / ${uncompressedSize} uncompressed bytes, beyond the protocol limits`);
    }
    const payloadStart = at + XORB_CHUNK_HEADER_BYTES;
    if (bytes.length - payloadStart < compressedSize) {
      throw bad(`chunk ${index} at byte ${at} declares ${compressedSize} payload bytes, only ${bytes.length - payloadStart} remain`);
    }
    let data: Uint8Array;
    try {
      data = decompressChunk(scheme, bytes.subarray(payloadStart, payloadStart + compressedSize), uncompressedSize);
    } catch (error) {
      if (isFormatError(error)) throw bad(`chunk ${index} at byte ${at}: ${error.message}`);
      throw error;
    }
    chunks.push(data);
    hashes.push(chunkHash(data));
    uncompressedBytes += data.length;
    at = payloadStart + compressedSize;
  }
  if (chunks.length !== expectedChunks) throw bad(`the range holds ${chunks.length} chunks, expected ${expectedChunks}`);
  return { chunks, hashes, uncompressedBytes };
}
