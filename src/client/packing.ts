/**
 * The pure part of uploading, kept free of I/O so it can be tested exhaustively:
 *
 * - `ChunkIndex`: where a chunk already lives — in a xorb built in this session (raw chunk
 *   hashes) or in a xorb the server reported through a global-dedup answer (chunk hashes keyed
 *   with that answer's footer key, §3.7);
 * - `XorbBuilder`: packs new chunks, each compressed (`compressChunkBest`, or ahead of time by
 *   the caller) and written into the xorb body as it arrives, until the next one would pass
 *   8,192 chunks or the xorb's byte limit (64 MiB uncompressed at most);
 * - `FileBuilder`: a file's terms (consecutive chunks of one xorb form one term), the
 *   verification hash of each term over the RAW chunk hashes (which the uploader has because
 *   it holds the data), and the file hash;
 * - `planShards`: the file and xorb blocks of one batch cut into as few shards as the size
 *   limit allows (normally one).
 */
import {
  CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE,
  CompressionScheme,
  KeyedHasher,
  MAX_XORB_CHUNKS,
  MAX_CHUNK_UNCOMPRESSED_BYTES,
  MAX_XORB_UNCOMPRESSED_BYTES,
  SHARD_HEADER_BYTES,
  SHARD_RECORD_BYTES,
  XORB_CHUNK_HEADER_BYTES,
  compressChunkBest,
  fileHash,
  hashEquals,
  hashToHex,
  isGlobalDedupEligible,
  isZeroHash,
  verificationHash,
  writeChunkHeader,
  xorbHash,
  type Hash,
  type MerkleEntry,
  type ParsedFullShard,
  type ShardContent,
  type ShardFile,
  type ShardXorb,
  type XorbChunkInfo,
  type XorbInfo,
} from "../format/index.js";

/** A xorb that terms can reference; a session xorb's hash is known once it is sealed. */
export class XorbHandle {
  private sealedHash: Hash | null;

  constructor(
    readonly origin: "session" | "server",
    hash: Hash | null,
    /**
     * The xorb's chunk hashes in order as this client knows them: raw for a session xorb,
     * keyed with `keyer` for one from a dedup answer. Used to extend a match chunk by chunk.
     */
    readonly chunkHashes: Hash[],
    readonly keyer: ChunkKeyer | null,
    /** A server xorb known from the local shard cache (which may be stale), not from the server itself. */
    readonly fromCache = false,
  ) {
    this.sealedHash = hash;
  }

  get hash(): Hash {
    if (this.sealedHash === null) throw new Error("a xorb still being built has no hash yet");
    return this.sealedHash;
  }

  get isSealed(): boolean {
    return this.sealedHash !== null;
  }

  seal(hash: Hash): void {
    if (this.sealedHash !== null) throw new Error("xorb sealed twice");
    this.sealedHash = hash;
  }
}

export interface ChunkLocation {
  xorb: XorbHandle;
  index: number;
}

/** Map key of a hash: its 32 bytes as a latin1 string (cheaper than hex). */
export function hashMapKey(hash: Hash): string {
  return Buffer.from(hash.buffer, hash.byteOffset, hash.byteLength).toString("latin1");
}

/** One dedup-answer key: the keyed form of chunk hashes and the chunks found under it. */
export class ChunkKeyer {
  private readonly hasher: KeyedHasher;
  readonly byKeyedHash = new Map<string, ChunkLocation>();

  constructor(readonly key: Hash) {
    this.hasher = new KeyedHasher(key);
  }

  keyed(chunkHash: Hash): Hash {
    return this.hasher.hash(chunkHash);
  }
}

/**
 * Everything this session knows about where chunks are stored. Lookups prefer continuing the
 * previous chunk's xorb at the next index, so repeated content still forms long terms.
 */
export class ChunkIndex {
  private readonly sessionChunks = new Map<string, ChunkLocation>();
  private readonly keyers = new Map<string, ChunkKeyer>();
  private readonly serverXorbs = new Set<string>();

  /** Records a chunk just packed into a session xorb. */
  addSessionChunk(hash: Hash, location: ChunkLocation): void {
    const key = hashMapKey(hash);
    if (!this.sessionChunks.has(key)) this.sessionChunks.set(key, location);
  }

  /**
   * Imports the xorbs of a global-dedup answer (a complete shard); returns how many were new.
   * A zero footer key means the hashes are raw (§3.7): they then join the session's map.
   */
  importDedupShard(shard: ParsedFullShard, options: { fromCache?: boolean } = {}): number {
    const key = shard.footer.hmacKey;
    let keyer: ChunkKeyer | null = null;
    if (!isZeroHash(key)) {
      const id = hashMapKey(key);
      keyer = this.keyers.get(id) ?? null;
      if (keyer === null) {
        keyer = new ChunkKeyer(key.slice());
        this.keyers.set(id, keyer);
      }
    }
    let imported = 0;
    for (const block of shard.xorbs) {
      const id = hashMapKey(block.xorbHash);
      if (this.serverXorbs.has(id)) continue;
      this.serverXorbs.add(id);
      imported++;
      // Copies: the parsed hashes are views into the whole answer, which would stay in memory.
      const hashes = block.chunks.map((chunk) => chunk.hash.slice());
      const xorb = new XorbHandle("server", block.xorbHash.slice(), hashes, keyer, options.fromCache ?? false);
      const map = keyer === null ? this.sessionChunks : keyer.byKeyedHash;
      hashes.forEach((hash, index) => {
        const mapKey = hashMapKey(hash);
        if (!map.has(mapKey)) map.set(mapKey, { xorb, index });
      });
    }
    return imported;
  }

  /** Where `hash` is stored, preferring the chunk right after `previous`; null if unknown. */
  lookup(hash: Hash, previous: ChunkLocation | null): ChunkLocation | null {
    const keyedCache = new Map<ChunkKeyer, Hash>();
    const keyedWith = (keyer: ChunkKeyer): Hash => {
      let keyed = keyedCache.get(keyer);
      if (keyed === undefined) {
        keyed = keyer.keyed(hash);
        keyedCache.set(keyer, keyed);
      }
      return keyed;
    };
    if (previous !== null) {
      const { xorb, index } = previous;
      const next = xorb.chunkHashes[index + 1];
      if (next !== undefined && hashEquals(next, xorb.keyer === null ? hash : keyedWith(xorb.keyer))) {
        return { xorb, index: index + 1 };
      }
    }
    const own = this.sessionChunks.get(hashMapKey(hash));
    if (own !== undefined) return own;
    for (const keyer of this.keyers.values()) {
      const found = keyer.byKeyedHash.get(hashMapKey(keyedWith(keyer)));
      if (found !== undefined) return found;
    }
    return null;
  }

  /** Whether the chunk is known, without preferring a position. */
  has(hash: Hash): boolean {
    return this.lookup(hash, null) !== null;
  }
}

// ---------------------------------------------------------------------------------------------

/** A xorb ready to upload: its serialized body and the xorb block the shard lists for it. */
export interface SealedXorb {
  handle: XorbHandle;
  bytes: Uint8Array;
  info: XorbInfo;
  block: ShardXorb;
}

interface PackedChunk {
  scheme: CompressionScheme;
  uncompressedLength: number;
  serializedEnd: number;
  flags: number;
}

/**
 * Collects new chunks for one xorb. Each chunk is compressed on arrival and written, header and
 * payload, straight into the xorb's body buffer, so sealing copies nothing and the caller's read
 * buffers are never retained.
 *
 * Why not `serializeXorb`: it re-derives every chunk hash (decoding each payload, then a BLAKE3
 * pass over all the data) and copies every payload once more, which was a fifth of an upload's
 * CPU. The packer already has the hashes, computed from the original bytes, and the xorb hash
 * in the upload URL is derived from them: the server decodes every chunk and refuses a body
 * that does not hash to that URL, so a payload that does not decode to its chunk can never be
 * stored — checking it here as well would decode everything twice.
 */
export class XorbBuilder {
  readonly handle: XorbHandle = new XorbHandle("session", null, [], null);
  private readonly chunks: PackedChunk[] = [];
  private body: Uint8Array | null = null;
  private bodyLength = 0;
  private uncompressed = 0;

  /**
   * @param allocateBody gives the body buffer, at least `capacity` bytes (any content: only
   *   written bytes are sent) — lets the uploader reuse the bodies of xorbs already sent.
   */
  constructor(
    private readonly limits: { maxChunks: number; maxUncompressedBytes: number } = {
      maxChunks: MAX_XORB_CHUNKS,
      maxUncompressedBytes: MAX_XORB_UNCOMPRESSED_BYTES,
    },
    private readonly allocateBody: (capacity: number) => Uint8Array = (capacity) => new Uint8Array(Buffer.allocUnsafeSlow(capacity).buffer),
  ) {}

  get chunkCount(): number {
    return this.chunks.length;
  }

  get uncompressedBytes(): number {
    return this.uncompressed;
  }

  /** Serialized bytes held so far (chunk headers included). */
  get heldBytes(): number {
    return this.bodyLength;
  }

  canTake(length: number): boolean {
    return this.chunks.length < this.limits.maxChunks && this.uncompressed + length <= this.limits.maxUncompressedBytes;
  }

  /**
   * Appends a chunk (the caller checked `canTake`); returns its index in the xorb. `compressed`
   * is `compressChunkBest(data)` if the caller already has it (e.g. from
   * `compressChunkBestAsync`); otherwise it is computed here.
   */
  add(data: Uint8Array, hash: Hash, compressed?: { scheme: CompressionScheme; payload: Uint8Array }): number {
    if (!this.canTake(data.length)) throw new RangeError("the xorb is full: seal it and start another");
    if (data.length > MAX_CHUNK_UNCOMPRESSED_BYTES) throw new RangeError(`a chunk has at most ${MAX_CHUNK_UNCOMPRESSED_BYTES} bytes, got ${data.length}`);
    const { scheme, payload } = compressed ?? compressChunkBest(data);
    if (payload.length > data.length || (scheme === CompressionScheme.None && payload.length !== data.length)) {
      throw new RangeError(`chunk ${this.chunks.length}: a ${data.length}-byte chunk cannot have a ${payload.length}-byte payload`);
    }
    // Room for the largest possible xorb, taken once: payloads are never larger than their
    // chunk, so the limits bound the body.
    if (this.body === null) {
      const capacity = this.limits.maxUncompressedBytes + XORB_CHUNK_HEADER_BYTES * this.limits.maxChunks;
      this.body = this.allocateBody(capacity);
      if (this.body.length < capacity) throw new RangeError(`a xorb body needs ${capacity} bytes, the allocator gave ${this.body.length}`);
    }
    const at = this.bodyLength;
    writeChunkHeader(this.body, at, payload.length, scheme, data.length);
    this.body.set(payload, at + XORB_CHUNK_HEADER_BYTES);
    this.bodyLength = at + XORB_CHUNK_HEADER_BYTES + payload.length;
    this.uncompressed += data.length;
    this.chunks.push({
      scheme,
      uncompressedLength: data.length,
      serializedEnd: this.bodyLength,
      flags: isGlobalDedupEligible(hash) ? CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE : 0,
    });
    this.handle.chunkHashes.push(hash);
    return this.chunks.length - 1;
  }

  /** Hands out the body and gives the handle its hash; the builder is then spent. */
  seal(): SealedXorb {
    if (this.chunks.length === 0 || this.body === null) throw new RangeError("an empty xorb cannot be sealed");
    const hashes = this.handle.chunkHashes;
    const hash = xorbHash(this.chunks.map((chunk, i) => ({ hash: hashes[i], size: chunk.uncompressedLength })));
    let uncompressedEnd = 0;
    const chunks: XorbChunkInfo[] = this.chunks.map((chunk, i) => {
      uncompressedEnd += chunk.uncompressedLength;
      return { hash: hashes[i], uncompressedLength: chunk.uncompressedLength, serializedEnd: chunk.serializedEnd, uncompressedEnd, scheme: chunk.scheme };
    });
    const info: XorbInfo = { hash, chunks, serializedLength: this.bodyLength, uncompressedLength: uncompressedEnd, hasFooter: false };
    this.handle.seal(hash);
    const block: ShardXorb = {
      xorbHash: hash,
      flags: 0,
      numBytesInXorb: info.uncompressedLength,
      numBytesOnDisk: info.serializedLength,
      chunks: chunks.map((chunk, i) => ({
        hash: chunk.hash,
        byteRangeStart: chunk.uncompressedEnd - chunk.uncompressedLength,
        unpackedBytes: chunk.uncompressedLength,
        flags: this.chunks[i].flags,
      })),
    };
    const bytes = this.body.subarray(0, this.bodyLength);
    this.body = null;
    this.chunks.length = 0;
    return { handle: this.handle, bytes, info, block };
  }
}

// ---------------------------------------------------------------------------------------------

interface TermInProgress {
  xorb: XorbHandle;
  chunkStart: number;
  chunkEnd: number;
  bytes: number;
  /** Index in the file's chunk list of the term's first chunk. */
  firstFileChunk: number;
}

/** A file whose terms may still point at unsealed session xorbs. */
export interface BuiltFile {
  fileHash: Hash;
  size: number;
  terms: readonly TermInProgress[];
  verificationHashes: Hash[];
  /** The SHA-256 as a shard stores it (see `shardSha256FromDigest`). */
  sha256: Hash;
}

/** Accumulates one file's chunks in order and turns them into terms. */
export class FileBuilder {
  private readonly terms: TermInProgress[] = [];
  private readonly leaves: MerkleEntry[] = [];
  private size = 0;

  /** Where the last chunk went: the next lookup prefers the index after it. */
  get lastLocation(): ChunkLocation | null {
    const last = this.terms.at(-1);
    return last === undefined ? null : { xorb: last.xorb, index: last.chunkEnd - 1 };
  }

  get chunkCount(): number {
    return this.leaves.length;
  }

  addChunk(location: ChunkLocation, hash: Hash, length: number): void {
    const last = this.terms.at(-1);
    if (last !== undefined && last.xorb === location.xorb && last.chunkEnd === location.index) {
      last.chunkEnd++;
      last.bytes += length;
    } else {
      this.terms.push({
        xorb: location.xorb,
        chunkStart: location.index,
        chunkEnd: location.index + 1,
        bytes: length,
        firstFileChunk: this.leaves.length,
      });
    }
    this.leaves.push({ hash, size: length });
    this.size += length;
  }

  finish(sha256: Hash): BuiltFile {
    const verificationHashes = this.terms.map((term) =>
      verificationHash(this.leaves.slice(term.firstFileChunk, term.firstFileChunk + term.chunkEnd - term.chunkStart).map((leaf) => leaf.hash)),
    );
    return { fileHash: fileHash(this.leaves), size: this.size, terms: this.terms, verificationHashes, sha256 };
  }
}

/** The shard form of a built file; every xorb it references must be sealed by now. */
export function toShardFile(file: BuiltFile): ShardFile {
  return {
    fileHash: file.fileHash,
    terms: file.terms.map((term) => ({
      xorbHash: term.xorb.hash,
      unpackedBytes: term.bytes,
      chunkStart: term.chunkStart,
      chunkEnd: term.chunkEnd,
    })),
    verificationHashes: file.verificationHashes,
    sha256: file.sha256,
  };
}

// ---------------------------------------------------------------------------------------------

/** Shards above 64 MiB must be split (spec); this leaves room for nothing else. */
export const MAX_SHARD_BYTES = 64 * 1024 * 1024;

/** Header plus the two section bookends. */
const SHARD_FIXED_BYTES = SHARD_HEADER_BYTES + 2 * SHARD_RECORD_BYTES;

export function shardFileBytes(file: ShardFile): number {
  const records = 1 + file.terms.length * (file.verificationHashes === null ? 1 : 2) + (file.sha256 === null ? 0 : 1);
  return records * SHARD_RECORD_BYTES;
}

export function shardXorbBytes(xorb: ShardXorb): number {
  return (1 + xorb.chunks.length) * SHARD_RECORD_BYTES;
}

/**
 * Cuts one batch into shards of at most `maxBytes`, in order, xorb blocks first. Normally all
 * fits one shard. Splitting is safe because every xorb is uploaded before any shard, and the
 * server checks a file's terms against all stored xorbs, not only those of its own shard.
 */
export function planShards(content: ShardContent, maxBytes: number = MAX_SHARD_BYTES): ShardContent[] {
  const shards: { files: ShardFile[]; xorbs: ShardXorb[] }[] = [];
  let current = { files: [] as ShardFile[], xorbs: [] as ShardXorb[] };
  let size = SHARD_FIXED_BYTES;
  const place = (bytes: number, add: () => void, what: string) => {
    if (SHARD_FIXED_BYTES + bytes > maxBytes) {
      throw new RangeError(`${what} needs ${bytes} bytes of shard records, more than one shard of ${maxBytes} bytes holds`);
    }
    if (size + bytes > maxBytes) {
      shards.push(current);
      current = { files: [], xorbs: [] };
      size = SHARD_FIXED_BYTES;
    }
    add();
    size += bytes;
  };
  for (const xorb of content.xorbs) place(shardXorbBytes(xorb), () => current.xorbs.push(xorb), `xorb ${hashToHex(xorb.xorbHash)}`);
  for (const file of content.files) place(shardFileBytes(file), () => current.files.push(file), `file ${hashToHex(file.fileHash)}`);
  if (current.files.length > 0 || current.xorbs.length > 0 || shards.length === 0) shards.push(current);
  return shards;
}
