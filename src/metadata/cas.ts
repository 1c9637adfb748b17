/**
 * The CAS half of the metadata seam: xorbs with their per-chunk tables, files with their
 * terms, the file ↔ repository links, accepted shards, and the global-dedup index.
 *
 * Xorbs and files are content-addressed and therefore immutable once recorded: a backend may
 * store their tables packed (one row per xorb / file) and callers may cache them freely.
 */
import type { Hash } from "../format/hash.js";

/** One chunk of a stored xorb, in xorb order. */
export interface StoredChunk {
  hash: Hash;
  uncompressedLength: number;
  /** End offset of this chunk (header + payload) in the serialized xorb: E[i] of §5.5. */
  serializedEnd: number;
}

export interface XorbRecord {
  hash: Hash;
  /** Serialized length as stored (chunks only, never a footer). */
  serializedLength: number;
  uncompressedLength: number;
  chunks: StoredChunk[];
}

/** A term of a file: chunks [chunkStart, chunkEnd) of one xorb. */
export interface FileTerm {
  xorbHash: Hash;
  chunkStart: number;
  chunkEnd: number;
  /** Uncompressed bytes of the term. */
  unpackedLength: number;
}

export interface FileRecord {
  hash: Hash;
  /** Σ term lengths. */
  size: number;
  terms: FileTerm[];
  /** Raw SHA-256 digest of the whole file (standard byte order) when the uploader sent it. */
  sha256: Uint8Array | null;
}

/** Everything one accepted shard registers, written in ONE transaction. */
export interface ShardRegistration {
  /** Identity of the shard's content (so a re-upload of the identical shard answers result 0). */
  shardHash: Hash;
  /** Repository every file of the shard is linked to (the uploading token's repository). */
  repoId: number;
  /** Files in shard order; a file hash may repeat — the first occurrence wins. */
  files: FileRecord[];
  /** Chunk hash → xorb hash entries of the global-dedup index. */
  dedupEntries: { chunkHash: Hash; xorbHash: Hash }[];
}

export interface CasMetadataStore {
  /**
   * Records a fully validated, already stored xorb. Returns true when this call inserted it,
   * false when it was already recorded; of many concurrent calls for one hash exactly one
   * returns true.
   */
  putXorb(xorb: XorbRecord): Promise<boolean>;
  /** The recorded xorbs among `hashes` (missing ones are absent from the map), keyed by hex string form. */
  getXorbs(hashes: readonly Hash[]): Promise<Map<string, XorbRecord>>;
  /** Serialized lengths of recorded xorbs, without loading chunk tables (for HEAD). */
  getXorbSize(hash: Hash): Promise<number | null>;

  /**
   * Registers files, links and dedup entries atomically. Returns true when the shard was new,
   * false when a shard with the same hash was registered before (its files are still linked to
   * `repoId`, so a repository that re-uploads a known shard gains access to its files).
   */
  registerShard(registration: ShardRegistration): Promise<boolean>;
  getFile(hash: Hash): Promise<FileRecord | null>;
  /** Whether `fileHash` was registered by a shard uploaded with a token of repository `repoId`. */
  isFileInRepo(fileHash: Hash, repoId: number): Promise<boolean>;
  /** File hash registered in `repoId` whose SHA-256 is `sha256` (raw digest), if any. */
  findFileBySha256(repoId: number, sha256: Uint8Array): Promise<Hash | null>;
  /** Xorbs holding an indexed chunk, oldest registration first. */
  findDedupXorbs(chunkHash: Hash, limit: number): Promise<Hash[]>;
}
