/**
 * Decoding a fetched xorb byte range: a run of complete chunks, each an 8-byte header
 * (version 0, 3-byte compressed size, scheme, 3-byte uncompressed size; docs/protocol.md §5.2)
 * and its payload, with nothing before, between or after them (§5.5).
 *
 * `XorbValidator` in src/format walks the same headers but keeps only hashes and offsets, as
 * the server needs; a downloader needs the decoded bytes, so the short walk is repeated here.
 * Every declared size is checked against the protocol limits and the bytes actually present
 * before it is used.
 *
 * `ChunkStreamDecoder` decodes while the range is still arriving: each chunk is decompressed
 * and hashed as soon as its last byte is in, so that work overlaps the network instead of
 * following it.
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

/**
 * Incremental decoder over one buffer that is filled from the front: call `advance(filled)`
 * whenever more bytes are in, `finish()` once the range is complete (or `fail(error)` if it
 * never will be). Readers may use chunks as soon as they are decoded: `decodedCount`,
 * `chunks[i]`, `hashes[i]`, and `whenDecoded(count)` to wait for more.
 */
export class ChunkStreamDecoder {
  readonly chunks: Uint8Array[] = [];
  readonly hashes: Hash[] = [];
  /** Where each decoded chunk (its header and payload) ends in `bytes`; chunk i starts where chunk i - 1 ends. */
  readonly ends: number[] = [];
  private uncompressedBytes = 0;
  /** Start of the first chunk not decoded yet. */
  private at = 0;
  private outcome: { error: unknown } | "finished" | null = null;
  private waiters: { count: number; resolve: () => void; reject: (error: unknown) => void }[] = [];

  constructor(
    /** The range's buffer, filled by the caller from the front. */
    readonly bytes: Uint8Array,
    private readonly expectedChunks: number,
    private readonly what: string,
  ) {}

  get decodedCount(): number {
    return this.chunks.length;
  }

  /**
   * Resolves once at least `count` chunks are decoded, or once the range is finished (the
   * caller then checks `decodedCount`); rejects with the range's failure.
   */
  whenDecoded(count: number): Promise<void> {
    if (this.outcome !== null && this.outcome !== "finished") return Promise.reject(this.outcome.error);
    if (this.chunks.length >= count || this.outcome === "finished") return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ count, resolve, reject }));
  }

  /** Marks the range as failed: every waiter, present and future, gets `error`. */
  fail(error: unknown): void {
    if (this.outcome !== null) return;
    this.outcome = { error };
    for (const waiter of this.waiters.splice(0)) waiter.reject(error);
  }

  /** Decodes every chunk that lies wholly within `bytes[0, filled)`. */
  advance(filled: number): void {
    const before = this.chunks.length;
    try {
      this.decodeUpTo(filled);
    } finally {
      if (this.chunks.length > before && this.waiters.length > 0) {
        const count = this.chunks.length;
        this.waiters = this.waiters.filter((waiter) => {
          if (waiter.count > count) return true;
          waiter.resolve();
          return false;
        });
      }
    }
  }

  private decodeUpTo(filled: number): void {
    const bytes = this.bytes;
    while (filled - this.at >= XORB_CHUNK_HEADER_BYTES) {
      const at = this.at;
      const index = this.chunks.length;
      if (index >= this.expectedChunks) throw this.bad(`${bytes.length - at} bytes follow the ${this.expectedChunks} chunks the range should hold`);
      const version = bytes[at];
      const compressedSize = bytes[at + 1] | (bytes[at + 2] << 8) | (bytes[at + 3] << 16);
      const scheme = bytes[at + 4];
      const uncompressedSize = bytes[at + 5] | (bytes[at + 6] << 8) | (bytes[at + 7] << 16);
      if (version !== 0) throw this.bad(`chunk ${index} at byte ${at} has header version ${version}, expected 0`);
      if (compressedSize > MAX_CHUNK_COMPRESSED_BYTES || uncompressedSize > MAX_CHUNK_UNCOMPRESSED_BYTES) {
        throw this.bad(
          `chunk ${index} at byte ${at} declares ${compressedSize} compressed / ${uncompressedSize} uncompressed bytes, beyond the protocol limits`,
        );
      }
      const payloadStart = at + XORB_CHUNK_HEADER_BYTES;
      if (bytes.length - payloadStart < compressedSize) {
        throw this.bad(`chunk ${index} at byte ${at} declares ${compressedSize} payload bytes, only ${bytes.length - payloadStart} remain`);
      }
      if (filled - payloadStart < compressedSize) return;
      let data: Uint8Array;
      try {
        data = decompressChunk(scheme, bytes.subarray(payloadStart, payloadStart + compressedSize), uncompressedSize);
      } catch (error) {
        if (isFormatError(error)) throw this.bad(`chunk ${index} at byte ${at}: ${error.message}`);
        throw error;
      }
      this.chunks.push(data);
      this.hashes.push(chunkHash(data));
      this.ends.push(payloadStart + compressedSize);
      this.uncompressedBytes += data.length;
      this.at = payloadStart + compressedSize;
    }
  }

  /** The decoded range, once `bytes` is complete; a `protocol` error if it is not whole chunks. */
  finish(): DecodedChunks {
    try {
      this.advance(this.bytes.length);
      if (this.at < this.bytes.length) {
        if (this.chunks.length >= this.expectedChunks) {
          throw this.bad(`${this.bytes.length - this.at} bytes follow the ${this.expectedChunks} chunks the range should hold`);
        }
        throw this.bad(`chunk ${this.chunks.length}'s header is cut off at byte ${this.at}`);
      }
      if (this.chunks.length !== this.expectedChunks) throw this.bad(`the range holds ${this.chunks.length} chunks, expected ${this.expectedChunks}`);
    } catch (error) {
      this.fail(error);
      throw error;
    }
    this.outcome = "finished";
    for (const waiter of this.waiters.splice(0)) waiter.resolve();
    return { chunks: this.chunks, hashes: this.hashes, uncompressedBytes: this.uncompressedBytes };
  }

  private bad(detail: string): CastorClientError {
    return new CastorClientError("protocol", `${this.what}: ${detail}`);
  }
}

/** Decodes a complete range at once. */
export function decodeChunkStream(bytes: Uint8Array, expectedChunks: number, what: string): DecodedChunks {
  return new ChunkStreamDecoder(bytes, expectedChunks, what).finish();
}
