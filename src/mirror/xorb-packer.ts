/**
 * Packs chunks the mirror fetched and verified into castor's own xorbs: each chunk's serialized
 * form (8-byte header and payload, as the upstream compressed it) is copied as it is — no
 * recompression — into the xorb being built, which is stored once it is full and sealed (at most
 * `targetBytes` serialized, 64 MiB uncompressed and 8,192 chunks, the protocol's limits).
 *
 * A chunk's place is known at once (which xorb of the packer, which index); the xorb's hash only
 * once it is sealed. Stores run in the background, at most `maxStoring` at once: `add` waits
 * when more are pending, so memory stays bounded however large the file.
 */
import { xorbHash, type Hash } from "../format/hash.js";
import { MAX_CHUNK_COMPRESSED_BYTES } from "../format/compression.js";
import { MAX_XORB_CHUNKS, MAX_XORB_UNCOMPRESSED_BYTES, XORB_CHUNK_HEADER_BYTES } from "../format/xorb.js";
import type { StoredChunk, XorbRecord } from "../metadata/cas.js";

/** Where a packed chunk went: xorb `xorb` of the packer (0, 1, …), chunk `index` of it. */
export interface PackedPlace {
  xorb: number;
  index: number;
}

/** Stores a sealed xorb (XorbIngestService.storeValidated). */
export type StoreXorb = (record: XorbRecord, bytes: Uint8Array) => Promise<unknown>;

/** Serialized bytes of a mirror xorb: a quarter of the clients' 64 MiB, so a fill holds little memory. */
export const DEFAULT_MIRROR_XORB_BYTES = 16 * 1024 * 1024;

export class XorbPacker {
  private buffer: Uint8Array | null = null;
  private filled = 0;
  private uncompressed = 0;
  private chunks: StoredChunk[] = [];
  private readonly hashes: Promise<Hash>[] = [];
  private readonly storing = new Set<Promise<unknown>>();
  /** Serialized bytes of every xorb sealed so far. */
  bytesPacked = 0;

  constructor(
    private readonly store: StoreXorb,
    private readonly targetBytes = DEFAULT_MIRROR_XORB_BYTES,
    private readonly maxStoring = 2,
  ) {}

  /** Xorbs sealed or being built. */
  get xorbCount(): number {
    return this.hashes.length + (this.chunks.length > 0 ? 1 : 0);
  }

  /** Appends one chunk; `serialized` is its header and payload, `hash` and `length` what it decodes to. */
  async add(serialized: Uint8Array, hash: Hash, length: number): Promise<PackedPlace> {
    const full =
      this.chunks.length === MAX_XORB_CHUNKS || this.filled + serialized.length > this.targetBytes || this.uncompressed + length > MAX_XORB_UNCOMPRESSED_BYTES;
    if (this.chunks.length > 0 && full) await this.seal();
    this.buffer ??= new Uint8Array(this.targetBytes + XORB_CHUNK_HEADER_BYTES + MAX_CHUNK_COMPRESSED_BYTES);
    this.buffer.set(serialized, this.filled);
    this.filled += serialized.length;
    this.uncompressed += length;
    // A copy of the hash: the caller's may be a view into a buffer it reuses.
    this.chunks.push({ hash: hash.slice(), uncompressedLength: length, serializedEnd: this.filled });
    return { xorb: this.hashes.length, index: this.chunks.length - 1 };
  }

  /** Seals the xorb being built and waits for every store; the hashes of the packer's xorbs, in order. */
  async finish(): Promise<Hash[]> {
    if (this.chunks.length > 0) await this.seal();
    return Promise.all(this.hashes);
  }

  /** Waits for stores in flight (a failed fill, so nothing is left writing behind it); never throws. */
  async settle(): Promise<void> {
    await Promise.allSettled(this.hashes);
  }

  private async seal(): Promise<void> {
    while (this.storing.size >= this.maxStoring) await Promise.race(this.storing);
    const chunks = this.chunks;
    const bytes = this.buffer!.slice(0, this.filled);
    const record: XorbRecord = {
      hash: xorbHash(chunks.map((chunk) => ({ hash: chunk.hash, size: chunk.uncompressedLength }))),
      serializedLength: this.filled,
      uncompressedLength: this.uncompressed,
      chunks,
    };
    this.bytesPacked += this.filled;
    this.chunks = [];
    this.filled = 0;
    this.uncompressed = 0;
    const stored = this.store(record, bytes).then(() => record.hash);
    const tracked = stored.finally(() => this.storing.delete(tracked));
    // A failure surfaces through finish(); this keeps it from being unhandled meanwhile.
    tracked.catch(() => undefined);
    this.storing.add(tracked);
    this.hashes.push(stored);
    stored.catch(() => undefined);
  }
}
