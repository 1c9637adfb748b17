/**
 * The CAS half of the metadata seam: xorbs with their per-chunk tables, files with their
 * terms, the file ↔ repository links, accepted shards, and the global-dedup index.
 *
 * Xorbs and files are content-addressed and therefore immutable once recorded: a backend
 * stores their tables packed (one row per xorb / file, layouts below) and callers may cache
 * them freely. The packing codecs live here, not in a backend, so SQLite and PostgreSQL store
 * byte-identical blobs.
 *
 * Hashes returned by a store are plain `Uint8Array`s (never `Buffer`s), so `assert.deepEqual`
 * compares them with hashes built any other way. They may be views into one buffer per record:
 * treat them as read-only.
 */
import { bytesToPlainHex, HASH_BYTES, hashToHex, type Hash } from "../format/hash.js";
import type { RepoType } from "../format/repo.js";
import { MAX_XORB_CHUNKS } from "../format/xorb.js";
import { CorruptRecordError, InvalidRecordError } from "./errors.js";
import type { FileRecord, FileTerm, Lease, ShardRegistration, StoredChunk, XorbRecord } from "./records.js";

export type { FileRecord, FileTerm, ShardRegistration, StoredChunk, XorbRecord } from "./records.js";

/**
 * A shard registration packed into a few typed arrays: the form the CAS service builds. An
 * object per file and term cost ~1 KB of heap per file, which for a shard of 340,000 files was
 * most of the memory a registration held (and 8 of them at once exhausted the heap). Stores
 * take either form (`packShardRegistration` turns objects into this).
 */
export interface PackedShardRegistration {
  shardHash: Hash;
  repoId: number;
  files: PackedFiles;
  /** (chunk hash, xorb hash) pairs of the global-dedup index, 64 bytes each, oldest first. */
  dedupEntries: Uint8Array;
}

/**
 * Files with distinct hashes, in shard order. File `i`: hash at `hashes[32·i ..]`, size
 * `sizes[i]`, SHA-256 at `sha256s[32·i ..]` when `hasSha256[i]` is 1 (both arrays are null when
 * no file has one), terms `terms[PACKED_TERM_BYTES · termStarts[i] .. PACKED_TERM_BYTES ·
 * termStarts[i + 1])` in the stored layout (`packFileTerms`), so a store writes them as they are.
 */
export interface PackedFiles {
  count: number;
  hashes: Uint8Array;
  sizes: Float64Array;
  sha256s: Uint8Array | null;
  hasSha256: Uint8Array | null;
  /** count + 1 entries. */
  termStarts: Uint32Array;
  terms: Uint8Array;
}

/** The bytes per packed dedup entry: chunk hash then xorb hash. */
export const PACKED_DEDUP_ENTRY_BYTES = 2 * HASH_BYTES;

/**
 * Writes validate only what the store needs to keep records decodable (hash lengths, integer
 * ranges, chunk counts) and throw InvalidRecordError otherwise, storing nothing; checking that
 * a record is *true* (hashes, lengths, ranges inside xorbs) is the CAS service's job. A row that
 * no longer decodes makes reads throw CorruptRecordError instead of crashing the process.
 */
export interface CasMetadataStore {
  /**
   * Records a fully validated, already stored xorb. Returns true when this call inserted it,
   * false when it was already recorded (the first record is kept unchanged); of many concurrent
   * calls for one hash — in this process or any other on the same database — exactly one
   * returns true. With `lease` (the uploader's, taken before it stored the blob: gc.ts), the
   * record is written only if the garbage collector has not condemned the xorb since, and
   * BeingCollectedError is thrown (nothing written) otherwise.
   */
  putXorb(xorb: XorbRecord, lease?: Lease): Promise<boolean>;
  /**
   * The recorded xorbs among `hashes` (missing ones are absent from the map), keyed by hex
   * string form (`hashToHex`). Duplicates in `hashes` are fine; any number may be asked at once.
   */
  getXorbs(hashes: readonly Hash[]): Promise<Map<string, XorbRecord>>;
  /**
   * The stored chunk tables of the recorded xorbs among `hashes` (PACKED_CHUNK_BYTES per chunk,
   * length checked), keyed like `getXorbs`: for readers that visit hundreds of thousands of
   * chunks (shard validation) without building an object per chunk.
   */
  getChunkTables(hashes: readonly Hash[]): Promise<Map<string, Uint8Array>>;
  /** Serialized lengths of recorded xorbs, without loading chunk tables (for HEAD). */
  getXorbSize(hash: Hash): Promise<number | null>;

  /**
   * Registers files, links and dedup entries atomically. Returns true when the shard was new,
   * false when a shard with the same hash was registered before. Either way every part is
   * written insert-or-ignore, so a repeat completes a registration and links its files to
   * `repoId` (a repository that re-uploads a known shard gains access to its files):
   * - a file hash already recorded keeps its first record (`replacesBrokenRecord` says the one
   *   exception); within one registration the first occurrence of a file hash wins and later
   *   ones are skipped entirely;
   * - the SHA-256 index is per repository and the latest registration of a digest wins;
   * - a dedup entry already present keeps its place in the oldest-first order.
   * NotFoundError when `repoId` names no repository; InvalidRecordError for an unstorable
   * record. Either way nothing of the registration is stored.
   */
  registerShard(registration: ShardRegistration | PackedShardRegistration): Promise<boolean>;
  getFile(hash: Hash): Promise<FileRecord | null>;
  /** Whether `fileHash` was registered by a shard uploaded with a token of repository `repoId`. */
  isFileInRepo(fileHash: Hash, repoId: number): Promise<boolean>;
  /**
   * The same asked by the repository's type and name, in one query: every reconstruction asks
   * it (access can change, so it is never cached), and on PostgreSQL the repository lookup
   * before it was a round trip of its own.
   */
  isFileInNamedRepo(fileHash: Hash, type: RepoType, name: string): Promise<boolean>;
  /** File hash registered in `repoId` whose SHA-256 is `sha256` (raw digest), if any. */
  findFileBySha256(repoId: number, sha256: Uint8Array): Promise<Hash | null>;
  /** Xorbs holding an indexed chunk, oldest registration first, at most `limit` (≥ 0) of them. */
  findDedupXorbs(chunkHash: Hash, limit: number): Promise<Hash[]>;
}

// ---------------------------------------------------------------------------------------------
// Packed tables. No library packs fixed-width records with raw hashes more compactly or
// cheaply than a DataView does, so these few lines are hand-written.

/**
 * A xorb's chunk table: one 40-byte record per chunk, in xorb order —
 * bytes 0..32 chunk hash (raw), 32..36 uncompressed length (u32 LE),
 * 36..40 serialized end offset E[i] (u32 LE).
 */
export const PACKED_CHUNK_BYTES = 40;

/**
 * A file's term list: one 44-byte record per term, in file order —
 * bytes 0..32 xorb hash (raw), 32..36 chunk start (u32 LE), 36..40 chunk end, exclusive
 * (u32 LE), 40..44 unpacked length (u32 LE).
 */
export const PACKED_TERM_BYTES = 44;

/**
 * Upper bound on a file's terms, far above what a shard can carry (a 64 MiB shard holds at most
 * ~1.4 M 48-byte records): decoding never builds more records than this from a stored row.
 */
export const MAX_FILE_TERMS = 1 << 22;

const U32_MAX = 0xffff_ffff;

export function checkHash(value: unknown, what: string): asserts value is Hash {
  if (!(value instanceof Uint8Array) || value.length !== HASH_BYTES) {
    const got = value instanceof Uint8Array ? `${value.length} bytes` : typeof value;
    throw new InvalidRecordError(`${what} must be ${HASH_BYTES} raw bytes, got ${got}`);
  }
}

function checkU32(value: unknown, what: string): asserts value is number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > U32_MAX) {
    throw new InvalidRecordError(`${what} must be an integer from 0 to ${U32_MAX}, got ${String(value)}`);
  }
}

function checkLength(value: unknown, what: string): asserts value is number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidRecordError(`${what} must be a non-negative safe integer, got ${String(value)}`);
  }
}

/** Checks the xorb's scalar fields and packs its chunk table (which checks every chunk). */
export function packXorbRecord(xorb: XorbRecord): Uint8Array {
  checkHash(xorb.hash, "xorb hash");
  const name = `xorb ${hashToHex(xorb.hash)}`;
  checkLength(xorb.serializedLength, `serialized length of ${name}`);
  checkLength(xorb.uncompressedLength, `uncompressed length of ${name}`);
  return packChunkTable(xorb.chunks, name);
}

export function packChunkTable(chunks: readonly StoredChunk[], name: string): Uint8Array {
  if (!Array.isArray(chunks) || chunks.length === 0 || chunks.length > MAX_XORB_CHUNKS) {
    const got = Array.isArray(chunks) ? `${chunks.length}` : typeof chunks;
    throw new InvalidRecordError(`${name} must have 1 to ${MAX_XORB_CHUNKS} chunks, got ${got}`);
  }
  const packed = new Uint8Array(chunks.length * PACKED_CHUNK_BYTES);
  const view = new DataView(packed.buffer);
  for (let i = 0; i < chunks.length; i++) {
    const chunk = chunks[i];
    const at = i * PACKED_CHUNK_BYTES;
    checkHash(chunk.hash, `hash of chunk ${i} of ${name}`);
    checkU32(chunk.uncompressedLength, `uncompressed length of chunk ${i} of ${name}`);
    checkU32(chunk.serializedEnd, `serialized end of chunk ${i} of ${name}`);
    packed.set(chunk.hash, at);
    view.setUint32(at + 32, chunk.uncompressedLength, true);
    view.setUint32(at + 36, chunk.serializedEnd, true);
  }
  return packed;
}

/**
 * Decodes a stored chunk table. Chunk hashes are views into `packed`, which must not be
 * reused by the caller (database drivers hand out a fresh buffer per row).
 */
export function unpackChunkTable(packed: Uint8Array, name: string): StoredChunk[] {
  const count = storedChunkTable(packed, name).length / PACKED_CHUNK_BYTES;
  const view = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
  const chunks = new Array<StoredChunk>(count);
  for (let i = 0; i < count; i++) {
    const at = i * PACKED_CHUNK_BYTES;
    chunks[i] = {
      hash: new Uint8Array(packed.buffer, packed.byteOffset + at, HASH_BYTES),
      uncompressedLength: view.getUint32(at + 32, true),
      serializedEnd: view.getUint32(at + 36, true),
    };
  }
  return chunks;
}

/** Checks the file's scalar fields and packs its terms (which checks every term). */
export function packFileRecord(file: FileRecord): Uint8Array {
  checkHash(file.hash, "file hash");
  const name = `file ${hashToHex(file.hash)}`;
  checkLength(file.size, `size of ${name}`);
  if (file.sha256 !== null) checkHash(file.sha256, `SHA-256 of ${name}`);
  return packFileTerms(file.terms, name);
}

export function packFileTerms(terms: readonly FileTerm[], name: string): Uint8Array {
  if (!Array.isArray(terms) || terms.length > MAX_FILE_TERMS) {
    const got = Array.isArray(terms) ? `${terms.length}` : typeof terms;
    throw new InvalidRecordError(`${name} must have at most ${MAX_FILE_TERMS} terms, got ${got}`);
  }
  const packed = new Uint8Array(terms.length * PACKED_TERM_BYTES);
  const view = new DataView(packed.buffer);
  for (let i = 0; i < terms.length; i++) {
    const term = terms[i];
    const at = i * PACKED_TERM_BYTES;
    checkHash(term.xorbHash, `xorb hash of term ${i} of ${name}`);
    checkU32(term.chunkStart, `chunk start of term ${i} of ${name}`);
    checkU32(term.chunkEnd, `chunk end of term ${i} of ${name}`);
    checkU32(term.unpackedLength, `unpacked length of term ${i} of ${name}`);
    packed.set(term.xorbHash, at);
    view.setUint32(at + 32, term.chunkStart, true);
    view.setUint32(at + 36, term.chunkEnd, true);
    view.setUint32(at + 40, term.unpackedLength, true);
  }
  return packed;
}

/** Decodes stored terms; xorb hashes are views into `packed` (see unpackChunkTable). */
export function unpackFileTerms(packed: Uint8Array, name: string): FileTerm[] {
  const count = packed.length / PACKED_TERM_BYTES;
  if (!Number.isInteger(count) || count > MAX_FILE_TERMS) {
    throw new CorruptRecordError(
      `the stored terms of ${name} have ${packed.length} bytes, not at most ${MAX_FILE_TERMS} records of ${PACKED_TERM_BYTES}: the metadata database is damaged (restore it from a backup)`,
    );
  }
  const view = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
  const terms = new Array<FileTerm>(count);
  for (let i = 0; i < count; i++) {
    const at = i * PACKED_TERM_BYTES;
    terms[i] = {
      xorbHash: new Uint8Array(packed.buffer, packed.byteOffset + at, HASH_BYTES),
      chunkStart: view.getUint32(at + 32, true),
      chunkEnd: view.getUint32(at + 36, true),
      unpackedLength: view.getUint32(at + 40, true),
    };
  }
  return terms;
}

// ---------------------------------------------------------------------------------------------
// Shard registrations, packed

function isPackedRegistration(registration: ShardRegistration | PackedShardRegistration): registration is PackedShardRegistration {
  return registration.dedupEntries instanceof Uint8Array;
}

/**
 * The packed form of a registration, checked as every write is (InvalidRecordError naming the
 * first bad record): objects are packed, a file hash they repeat keeps its first occurrence; a
 * packed registration is checked for its shape and returned as it is.
 */
export function packShardRegistration(registration: ShardRegistration | PackedShardRegistration): PackedShardRegistration {
  const { shardHash, repoId } = registration;
  checkHash(shardHash, "shard hash");
  if (!Number.isSafeInteger(repoId)) throw new InvalidRecordError(`repository id must be an integer, got ${String(repoId)}`);
  if (isPackedRegistration(registration)) {
    checkPackedFiles(registration.files);
    if (registration.dedupEntries.length % PACKED_DEDUP_ENTRY_BYTES !== 0) {
      throw new InvalidRecordError(`packed dedup entries must be ${PACKED_DEDUP_ENTRY_BYTES} bytes each, got ${registration.dedupEntries.length} bytes`);
    }
    return registration;
  }
  const kept: FileRecord[] = [];
  const keptTerms: Uint8Array[] = [];
  const seen = new Set<string>();
  for (const file of registration.files) {
    const terms = packFileRecord(file);
    const key = bytesToPlainHex(file.hash);
    if (seen.has(key)) continue;
    seen.add(key);
    kept.push(file);
    keptTerms.push(terms);
  }
  const count = kept.length;
  const withSha256 = kept.some((file) => file.sha256 !== null);
  const files: PackedFiles = {
    count,
    hashes: new Uint8Array(count * HASH_BYTES),
    sizes: new Float64Array(count),
    sha256s: withSha256 ? new Uint8Array(count * HASH_BYTES) : null,
    hasSha256: withSha256 ? new Uint8Array(count) : null,
    termStarts: new Uint32Array(count + 1),
    terms: new Uint8Array(keptTerms.reduce((sum, terms) => sum + terms.length, 0)),
  };
  for (let i = 0; i < count; i++) {
    const file = kept[i];
    files.hashes.set(file.hash, i * HASH_BYTES);
    files.sizes[i] = file.size;
    if (file.sha256 !== null) {
      files.sha256s!.set(file.sha256, i * HASH_BYTES);
      files.hasSha256![i] = 1;
    }
    files.terms.set(keptTerms[i], files.termStarts[i] * PACKED_TERM_BYTES);
    files.termStarts[i + 1] = files.termStarts[i] + keptTerms[i].length / PACKED_TERM_BYTES;
  }
  const dedupEntries = new Uint8Array(registration.dedupEntries.length * PACKED_DEDUP_ENTRY_BYTES);
  registration.dedupEntries.forEach((entry, i) => {
    checkHash(entry.chunkHash, `chunk hash of dedup entry ${i}`);
    checkHash(entry.xorbHash, `xorb hash of dedup entry ${i}`);
    dedupEntries.set(entry.chunkHash, i * PACKED_DEDUP_ENTRY_BYTES);
    dedupEntries.set(entry.xorbHash, i * PACKED_DEDUP_ENTRY_BYTES + HASH_BYTES);
  });
  return { shardHash, repoId, files, dedupEntries };
}

/** Checks that the arrays of `files` agree with each other and every size is storable. */
function checkPackedFiles(files: PackedFiles): void {
  const { count, hashes, sizes, sha256s, hasSha256, termStarts, terms } = files;
  const shapeIsRight =
    Number.isSafeInteger(count) &&
    count >= 0 &&
    hashes.length === count * HASH_BYTES &&
    sizes.length >= count &&
    termStarts.length === count + 1 &&
    termStarts[0] === 0 &&
    terms.length === termStarts[count] * PACKED_TERM_BYTES &&
    (sha256s === null) === (hasSha256 === null) &&
    (sha256s === null || (sha256s.length === count * HASH_BYTES && hasSha256!.length >= count));
  if (!shapeIsRight) throw new InvalidRecordError("the packed files of a shard registration have arrays of inconsistent lengths");
  for (let i = 0; i < count; i++) {
    checkLength(sizes[i], `size of file ${i} of the registration`);
    const termCount = termStarts[i + 1] - termStarts[i];
    if (termCount < 0 || termCount > MAX_FILE_TERMS)
      throw new InvalidRecordError(`file ${i} of the registration must have 0 to ${MAX_FILE_TERMS} terms, got ${termCount}`);
  }
}

/** The hash of file `i` of packed files (a view). */
export function packedFileHash(files: PackedFiles, i: number): Hash {
  return files.hashes.subarray(i * HASH_BYTES, (i + 1) * HASH_BYTES);
}

/** The SHA-256 of file `i` of packed files (a view), or null. */
export function packedFileSha256(files: PackedFiles, i: number): Uint8Array | null {
  return files.hasSha256?.[i] === 1 ? files.sha256s!.subarray(i * HASH_BYTES, (i + 1) * HASH_BYTES) : null;
}

/** The stored form of file `i`'s terms (a view; see `packFileTerms`). */
export function packedFileTerms(files: PackedFiles, i: number): Uint8Array {
  return files.terms.subarray(files.termStarts[i] * PACKED_TERM_BYTES, files.termStarts[i + 1] * PACKED_TERM_BYTES);
}

/** File `i` of packed files as a record (for the rare paths that compare records). */
export function packedFileRecord(files: PackedFiles, i: number): FileRecord {
  const hash = packedFileHash(files, i);
  return { hash, size: files.sizes[i], terms: unpackFileTerms(packedFileTerms(files, i), `file ${hashToHex(hash)}`), sha256: packedFileSha256(files, i) };
}

/** The chunk hash of dedup entry `i` (a view). */
export function packedDedupChunk(entries: Uint8Array, i: number): Hash {
  return entries.subarray(i * PACKED_DEDUP_ENTRY_BYTES, i * PACKED_DEDUP_ENTRY_BYTES + HASH_BYTES);
}

/** The xorb hash of dedup entry `i` (a view). */
export function packedDedupXorb(entries: Uint8Array, i: number): Hash {
  return entries.subarray(i * PACKED_DEDUP_ENTRY_BYTES + HASH_BYTES, (i + 1) * PACKED_DEDUP_ENTRY_BYTES);
}

/**
 * A stored xorb's chunk table as stored (PACKED_CHUNK_BYTES per chunk), checked for its length;
 * CorruptRecordError otherwise. Readers that visit many chunks read it without unpacking it.
 */
export function storedChunkTable(packed: Uint8Array, name: string): Uint8Array {
  const count = packed.length / PACKED_CHUNK_BYTES;
  if (!Number.isInteger(count) || count === 0 || count > MAX_XORB_CHUNKS) {
    throw new CorruptRecordError(
      `the stored chunk table of ${name} has ${packed.length} bytes, not 1 to ${MAX_XORB_CHUNKS} records of ${PACKED_CHUNK_BYTES}: the metadata database is damaged (restore it from a backup)`,
    );
  }
  return packed;
}

/**
 * A hash read back from a stored row, as a plain Uint8Array view (drivers return Buffers);
 * CorruptRecordError unless it has exactly 32 bytes.
 */
export function storedHash(bytes: Uint8Array, what: string): Hash {
  if (bytes.length !== HASH_BYTES) {
    throw new CorruptRecordError(
      `a stored ${what} has ${bytes.length} bytes instead of ${HASH_BYTES}: the metadata database is damaged (restore it from a backup)`,
    );
  }
  return new Uint8Array(bytes.buffer, bytes.byteOffset, HASH_BYTES);
}

/** A `xorbs` row as both backends read it (the column names of their schemas). */
export interface XorbRow {
  hash: Uint8Array;
  serialized_length: number;
  uncompressed_length: number;
  chunks: Uint8Array;
}

/** A `files` row without its key, as both backends read it. */
export interface FileRow {
  size: number;
  sha256: Uint8Array | null;
  terms: Uint8Array;
}

/** The record of a stored xorb row; CorruptRecordError when the row no longer decodes. */
export function xorbRecordOf(row: XorbRow): XorbRecord {
  const hash = storedHash(row.hash, "xorb hash");
  return {
    hash,
    serializedLength: row.serialized_length,
    uncompressedLength: row.uncompressed_length,
    chunks: unpackChunkTable(row.chunks, `xorb ${hashToHex(hash)}`),
  };
}

/** The record of the stored file row of `hash`; CorruptRecordError when the row no longer decodes. */
export function fileRecordOf(hash: Hash, row: FileRow): FileRecord {
  const name = `file ${hashToHex(hash)}`;
  return {
    hash,
    size: row.size,
    terms: unpackFileTerms(row.terms, name),
    sha256: row.sha256 === null ? null : storedHash(row.sha256, `SHA-256 of ${name}`),
  };
}

/** The distinct xorbs a file's terms name. */
export function termXorbs(terms: readonly FileTerm[]): Hash[] {
  const xorbs = new Map<string, Hash>();
  for (const term of terms) xorbs.set(bytesToPlainHex(term.xorbHash), term.xorbHash);
  return [...xorbs.values()];
}

/**
 * Whether a registration's record of a file replaces the one recorded before: only when the
 * old one names a xorb that is no longer recorded (`castor fsck --repair` removed it as
 * damaged, so the file cannot be rebuilt) and the new one names only recorded xorbs — the
 * client uploaded the file again. Otherwise the first record stays, as for any immutable record.
 */
export function replacesBrokenRecord(old: readonly FileTerm[], incoming: readonly FileTerm[], isRecorded: (xorb: Hash) => boolean): boolean {
  return termXorbs(old).some((xorb) => !isRecorded(xorb)) && termXorbs(incoming).every(isRecorded);
}
