/**
 * Checking an uploaded shard against castor's own xorb records (docs/protocol.md §6.8): every
 * term's range must lie inside its xorb, its byte count and verification ("range") hash must
 * match the stored chunks, and the file hash is recomputed from the stored (hash, length) of
 * every chunk of every term; a xorb block must list exactly the stored chunks. What passes is
 * returned as the packed registration the metadata store writes.
 *
 * Everything works on the shard's bytes and typed arrays: the blocks are found by offset
 * (format/shard-blocks.ts), stored chunk tables are read packed (`getChunkTables`), files and
 * dedup entries are collected into packed arrays (`PackedFiles`, `DistinctKeys`). Per file of the
 * shard that is a few hundred bytes, against ~2 KB of objects per file before.
 *
 * Work that a shard can repeat for free is done once: a verification hash per distinct (xorb,
 * range), merkle nodes of a xorb's chunks from the second time the xorb is named on
 * (format/file-hash-builder.ts), and a repeated file block (hf.js writes one per uploaded path) is
 * verified once. Validation yields to the event loop every SLICE_MS of work.
 */
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { FileHashBuilder, MAX_MEMO_SOURCE_ID, MerkleMemo, type LeafSource } from "../format/file-hash-builder.js";
import { HASH_BYTES, KeyedHasher, VERIFICATION_KEY, hashToHex, type Hash } from "../format/hash.js";
import { canonicalizeFileBlock, canonicalizeXorbBlock, CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE } from "../format/shard.js";
import {
  chunkFlags,
  chunkRecordAt,
  chunkUnpackedBytes,
  fileBlockTermCount,
  metadataExtRecordAt,
  termChunkEnd,
  termChunkStart,
  termRecordAt,
  termUnpackedBytes,
  verificationRecordAt,
  xorbBlockChunkCount,
  type UploadShardBlocks,
} from "../format/shard-blocks.js";
import { MAX_XORB_CHUNKS } from "../format/xorb.js";
import { PACKED_CHUNK_BYTES, PACKED_DEDUP_ENTRY_BYTES, PACKED_TERM_BYTES, type CasMetadataStore, type PackedFiles } from "../metadata/cas.js";
import { DistinctKeys, TooManyCollisionsError } from "./distinct-keys.js";
import { ShardRejectedError } from "./shard-rejection.js";

/** What a validation needs besides the shard. */
export interface ValidationOptions {
  metadata: Pick<CasMetadataStore, "getChunkTables">;
  /** Bytes of stored chunk tables kept loaded at once, besides the batch being loaded. */
  loadedBytesBudget: number;
  /** Called after slices of work with the file and xorb blocks checked so far. */
  onProgress?: (verified: number) => void;
  /** Checked between slices: validation stops with its reason. */
  signal?: AbortSignal;
}

/** What a validated shard registers. */
export interface ValidatedShard {
  files: PackedFiles;
  /** (chunk hash, xorb hash) pairs, distinct, oldest first. */
  dedupEntries: Uint8Array;
}

/**
 * How long validation runs before it yields to the event loop, so heartbeats and other
 * requests are served during a long validation. Measured in time, not in work: a chunk
 * reference and a file block cost very different amounts.
 */
const SLICE_MS = 20;
/** The shortest slice: below it, yielding costs more than the slice's work. */
const MIN_SLICE_MS = 2;
/**
 * Validations in progress in this process. They share SLICE_MS: each runs for SLICE_MS ÷ their
 * number before it yields, so the event loop comes round as often with eight large shards in
 * progress as with one (with a whole slice each, other requests waited behind all of them).
 */
let validationsRunning = 0;
/** Work units (chunk references) between two looks at the clock. */
const WORK_BETWEEN_CLOCK_CHECKS = 256;
/** What a file or xorb block counts for besides its chunks, in chunk references. */
const BLOCK_WORK = 16;
/** Distinct xorbs fetched per metadata query: at most 16 × 8,192 chunks, ~5 MiB of tables, past the loaded budget. */
const XORBS_PER_LOAD = 16;
/** Memory a loaded xorb costs besides its arrays (objects, map entry, hex key). */
const LOADED_XORB_OVERHEAD_BYTES = 512;
/** Verification hashes remembered per validation (1 MiB of hashes). */
const MAX_REMEMBERED_RANGES = 1 << 15;
/** Bytes per loaded chunk: its hash and its offset. */
const LOADED_CHUNK_BYTES = HASH_BYTES + 8;
/** The most stored chunk tables one validation holds: its budget plus one batch of the largest xorbs. */
export function maxLoadedBytes(loadedBytesBudget: number): number {
  return loadedBytesBudget + XORBS_PER_LOAD * (MAX_XORB_CHUNKS * LOADED_CHUNK_BYTES + LOADED_XORB_OVERHEAD_BYTES);
}

const verificationHasher = new KeyedHasher(VERIFICATION_KEY);

/** A stored xorb as validation reads it: its chunk hashes back to back and the offsets of their data. */
interface LoadedXorb extends LeafSource {
  readonly hex: string;
  readonly chunkCount: number;
  /** Memory it holds, for the loader's budget. */
  readonly bytes: number;
  /** Terms that named it so far: from the second on, its merkle nodes are remembered. */
  uses: number;
  /** Verification hashes computed for its ranges, by range key → index into the validation's pool. */
  ranges: Map<number, number> | null;
}

/**
 * Validates the shard in `blocks` (whose every block's reserved fields are canonicalized in
 * place once checked). Throws ShardRejectedError for what castor refuses.
 */
export async function validateShard(blocks: UploadShardBlocks, options: ValidationOptions): Promise<ValidatedShard> {
  const run = new ValidationRun(blocks, options);
  validationsRunning++;
  try {
    return await run.validate();
  } catch (error) {
    if (error instanceof TooManyCollisionsError) {
      throw new ShardRejectedError("invalid_shard", `invalid shard: its file hashes or chunk hashes collide as no real shard's do (${error.message})`, {
        cause: error,
      });
    }
    throw error;
  } finally {
    validationsRunning--;
  }
}

class ValidationRun {
  private readonly bytes: Uint8Array;
  private readonly view: DataView;
  /**
   * Byte offset of every record naming a xorb, in validation order: the terms of all file
   * blocks, then the xorb blocks' headers (their xorb hash is their first 32 bytes).
   */
  private readonly references: Uint32Array;
  /** Loaded xorbs by hex; null = asked for and not stored. Insertion order = load order. */
  private readonly loaded = new Map<string, LoadedXorb | null>();
  private loadedBytes = 0;
  /** references[0 .. loadedUntil) have been looked up. */
  private loadedUntil = 0;
  private nextMemoId = 0;
  private readonly memo = new MerkleMemo();
  /** Builds each file's hash in turn. */
  private readonly tree = new FileHashBuilder(this.memo);
  /** Verification hashes of the ranges remembered in `LoadedXorb.ranges`. */
  private rangeHashes = new Uint8Array(64 * HASH_BYTES);
  private rangeCount = 0;
  /** The last reference looked up and its xorb: consecutive terms usually name one xorb. */
  private lastReferenceAt = -1;
  private lastXorb: LoadedXorb | null = null;

  private workSinceClockCheck = 0;
  private sliceStartedAt = performance.now();
  private verified = 0;

  // What is registered.
  private readonly fileHashes: DistinctKeys;
  /** Block offset of the first block of each registered file. */
  private readonly firstBlocks: Uint32Array;
  private readonly sizes: Float64Array;
  private sha256s: Uint8Array | null = null;
  private hasSha256: Uint8Array | null = null;
  private readonly termStarts: Uint32Array;
  private readonly terms: Uint8Array;
  private readonly termsView: DataView;
  private readonly dedupEntries: DistinctKeys;
  private readonly dedupKey = new Uint8Array(PACKED_DEDUP_ENTRY_BYTES);

  constructor(
    private readonly blocks: UploadShardBlocks,
    private readonly options: ValidationOptions,
  ) {
    this.bytes = blocks.bytes;
    this.view = blocks.view;
    const fileCount = blocks.fileBlocks.length;
    this.references = new Uint32Array(blocks.termCount + blocks.xorbBlocks.length);
    let r = 0;
    for (const at of blocks.fileBlocks) {
      const termCount = fileBlockTermCount(this.view, at);
      for (let t = 0; t < termCount; t++) this.references[r++] = termRecordAt(at, t);
    }
    for (const at of blocks.xorbBlocks) this.references[r++] = at;
    this.fileHashes = new DistinctKeys(HASH_BYTES, fileCount);
    this.firstBlocks = new Uint32Array(fileCount);
    this.sizes = new Float64Array(fileCount);
    this.termStarts = new Uint32Array(fileCount + 1);
    this.terms = new Uint8Array(blocks.termCount * PACKED_TERM_BYTES);
    this.termsView = new DataView(this.terms.buffer);
    this.dedupEntries = new DistinctKeys(PACKED_DEDUP_ENTRY_BYTES, fileCount);
  }

  async validate(): Promise<ValidatedShard> {
    const { fileBlocks, xorbBlocks } = this.blocks;
    let reference = 0;
    for (let index = 0; index < fileBlocks.length; index++) {
      const at = fileBlocks[index];
      const termCount = fileBlockTermCount(this.view, at);
      const first = this.fileHashes.indexOf(this.bytes, at);
      // A repeat of a block already verified: its checks would come out the same, and the first
      // block is the one registered. A block of the same file hash with other terms is checked.
      if (first === -1 || !this.sameTermsAndVerification(this.firstBlocks[first], at)) {
        await this.checkFile(at, index, reference, first === -1);
      }
      reference += termCount;
      canonicalizeFileBlock(this.blocks, at);
      await this.finishBlock(1);
    }

    for (let index = 0; index < xorbBlocks.length; index++, reference++) {
      const at = xorbBlocks[index];
      const xorb = await this.xorbAt(reference, () => `xorb block ${index}`);
      this.checkXorbBlock(at, xorb, `xorb block ${index} (xorb ${xorb.hex})`);
      for (let c = 0; c < xorb.chunkCount; c++) {
        if (isDedupEligibleAt(xorb.hashes, c * HASH_BYTES) || (chunkFlags(this.view, chunkRecordAt(at, c)) & CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE) !== 0) {
          this.addDedupEntry(xorb.hashes, c * HASH_BYTES, at);
        }
      }
      canonicalizeXorbBlock(this.blocks, at);
      await this.finishBlock(1 + xorb.chunkCount);
    }

    const count = this.fileHashes.count;
    return {
      files: {
        count,
        hashes: this.fileHashes.packed(),
        sizes: this.sizes.subarray(0, count),
        sha256s: this.sha256s?.subarray(0, count * HASH_BYTES) ?? null,
        hasSha256: this.hasSha256?.subarray(0, count) ?? null,
        termStarts: this.termStarts.subarray(0, count + 1),
        terms: this.terms.subarray(0, this.termStarts[count] * PACKED_TERM_BYTES),
      },
      dedupEntries: this.dedupEntries.packed(),
    };
  }

  /**
   * Checks the file block at `at` against the stored chunks, term by term; when `registers`,
   * adds it to the files registered (with its first chunk as a dedup entry).
   */
  private async checkFile(at: number, index: number, firstReference: number, registers: boolean): Promise<void> {
    const { bytes, view } = this;
    // Only error messages use it.
    const where = () => `file ${hashToHex(bytes.subarray(at, at + HASH_BYTES))} (file block ${index})`;
    const termCount = fileBlockTermCount(view, at);
    const tree = this.tree;
    const file = this.fileHashes.count;
    const firstTerm = this.termStarts[file];
    let size = 0;
    for (let t = 0; t < termCount; t++) {
      const record = termRecordAt(at, t);
      const describe = () => `term ${t} of ${where()}`;
      const reference = firstReference + t;
      // Most terms name a xorb loaded already: no await (and no promise) for those.
      const xorb = reference < this.loadedUntil ? this.loadedXorbAt(reference, describe) : await this.xorbAt(reference, describe);
      const start = termChunkStart(view, record);
      const end = termChunkEnd(view, record);
      const unpacked = termUnpackedBytes(view, record);
      if (end > xorb.chunkCount) {
        throw new ShardRejectedError(
          "term_out_of_range",
          `term ${t} of ${where()} references chunks [${start}, ${end}) but xorb ${xorb.hex} has ${xorb.chunkCount} chunks`,
        );
      }
      const stored = xorb.unpackedOffsets[end] - xorb.unpackedOffsets[start];
      if (stored !== unpacked) {
        throw new ShardRejectedError(
          "term_length_mismatch",
          `term ${t} of ${where()} says chunks [${start}, ${end}) of xorb ${xorb.hex} unpack to ${unpacked} bytes, but they hold ${stored}`,
        );
      }
      if (!this.verificationMatches(xorb, start, end, verificationRecordAt(at, termCount, t))) {
        throw new ShardRejectedError(
          "verification_mismatch",
          `verification entry ${t} of ${where()} does not match chunks [${start}, ${end}) of xorb ${xorb.hex}: it must be the verification hash of the chunk hashes of that range`,
        );
      }
      xorb.uses++;
      tree.addRange(xorb, start, end, xorb.uses > 1);
      if (registers) {
        if (t === 0) this.addDedupEntry(xorb.hashes, start * HASH_BYTES, record);
        // The stored term layout (metadata/cas.ts `packFileTerms`).
        const packed = (firstTerm + t) * PACKED_TERM_BYTES;
        this.terms.set(bytes.subarray(record, record + HASH_BYTES), packed);
        this.termsView.setUint32(packed + HASH_BYTES, start, true);
        this.termsView.setUint32(packed + HASH_BYTES + 4, end, true);
        this.termsView.setUint32(packed + HASH_BYTES + 8, unpacked, true);
      }
      size += stored;
      await this.didWork(end - start);
    }

    const chunks = tree.leafCount;
    const expected = tree.fileHash();
    if (!sameBytes(expected, 0, bytes, at)) {
      throw new ShardRejectedError(
        "file_hash_mismatch",
        `${where()}: the file's chunks (${chunks} chunks, ${size} bytes) hash to ${hashToHex(expected)}, not to the file hash the shard gives`,
      );
    }
    if (!registers) return;
    this.fileHashes.add(bytes, at);
    this.firstBlocks[file] = at;
    this.sizes[file] = size;
    this.termStarts[file + 1] = firstTerm + termCount;
    const sha256At = metadataExtRecordAt(view, at, this.blocks.withVerification);
    if (sha256At !== -1) this.setSha256(file, sha256At);
  }

  /** Whether the verification record at `record` holds the verification hash of chunks [start, end) of `xorb`. */
  private verificationMatches(xorb: LoadedXorb, start: number, end: number, record: number): boolean {
    const key = start * (MAX_XORB_CHUNKS + 1) + end;
    const known = xorb.ranges?.get(key);
    if (known !== undefined) return sameBytes(this.rangeHashes, known * HASH_BYTES, this.bytes, record);
    // The chunk hashes of a range are contiguous: one call hashes them all.
    verificationHasher.start();
    verificationHasher.update(xorb.hashes.subarray(start * HASH_BYTES, end * HASH_BYTES));
    if (this.rangeCount === this.rangeHashes.length / HASH_BYTES) {
      if (this.rangeCount === MAX_REMEMBERED_RANGES) {
        const hash = verificationHasher.digest();
        return sameBytes(hash, 0, this.bytes, record);
      }
      const grown = new Uint8Array(this.rangeHashes.length * 2);
      grown.set(this.rangeHashes);
      this.rangeHashes = grown;
    }
    const slot = this.rangeCount++;
    verificationHasher.digestInto(this.rangeHashes, slot * HASH_BYTES);
    (xorb.ranges ??= new Map()).set(key, slot);
    return sameBytes(this.rangeHashes, slot * HASH_BYTES, this.bytes, record);
  }

  /** The SHA-256 record at `record` as the raw digest: xet-core stores each 8-byte group reversed (§2). */
  private setSha256(file: number, record: number): void {
    const count = this.firstBlocks.length;
    this.sha256s ??= new Uint8Array(count * HASH_BYTES);
    this.hasSha256 ??= new Uint8Array(count);
    for (let group = 0; group < HASH_BYTES; group += 8) {
      for (let i = 0; i < 8; i++) this.sha256s[file * HASH_BYTES + group + i] = this.bytes[record + group + 7 - i];
    }
    this.hasSha256[file] = 1;
  }

  /** Adds (chunk hash `hashes[chunkAt ..]`, xorb hash `bytes[xorbAt ..]`) to the dedup entries unless present. */
  private addDedupEntry(hashes: Uint8Array, chunkAt: number, xorbAt: number): void {
    this.dedupKey.set(hashes.subarray(chunkAt, chunkAt + HASH_BYTES), 0);
    this.dedupKey.set(this.bytes.subarray(xorbAt, xorbAt + HASH_BYTES), HASH_BYTES);
    this.dedupEntries.add(this.dedupKey, 0);
  }

  /** Whether the file blocks at `a` and `b` list the same terms with the same verification entries (their hashes are equal). */
  private sameTermsAndVerification(a: number, b: number): boolean {
    const termCount = fileBlockTermCount(this.view, a);
    if (fileBlockTermCount(this.view, b) !== termCount) return false;
    // Terms and verification records follow the header back to back; bytes 32..36 of a term are ignored flags.
    for (let t = 0; t < termCount; t++) {
      const x = termRecordAt(a, t);
      const y = termRecordAt(b, t);
      if (!sameBytes(this.bytes, x, this.bytes, y)) return false;
      for (let i = 36; i < 48; i++) if (this.bytes[x + i] !== this.bytes[y + i]) return false;
      if (!sameBytes(this.bytes, verificationRecordAt(a, termCount, t), this.bytes, verificationRecordAt(b, termCount, t))) return false;
    }
    return true;
  }

  /**
   * A xorb block must list exactly the stored chunks. Only hashes and lengths are compared:
   * flags, byte offsets and `num_bytes_on_disk` are the writer's hints (xet-core writes 0 for
   * the latter), and castor answers dedup queries from its own records anyway.
   */
  private checkXorbBlock(at: number, xorb: LoadedXorb, where: string): void {
    const listed = xorbBlockChunkCount(this.view, at);
    if (listed !== xorb.chunkCount) {
      throw new ShardRejectedError("xorb_block_mismatch", `${where} lists ${listed} chunks, but the stored xorb has ${xorb.chunkCount}`);
    }
    for (let c = 0; c < listed; c++) {
      const record = chunkRecordAt(at, c);
      if (!sameBytes(xorb.hashes, c * HASH_BYTES, this.bytes, record)) {
        throw new ShardRejectedError(
          "xorb_block_mismatch",
          `${where} lists chunk ${c} with hash ${hashToHex(this.bytes.subarray(record, record + HASH_BYTES))}, but chunk ${c} of the stored xorb is ${hashToHex(xorb.hashes.subarray(c * HASH_BYTES, (c + 1) * HASH_BYTES))}`,
        );
      }
      const stored = xorb.unpackedOffsets[c + 1] - xorb.unpackedOffsets[c];
      if (chunkUnpackedBytes(this.view, record) !== stored) {
        throw new ShardRejectedError(
          "xorb_block_mismatch",
          `${where} lists chunk ${c} with ${chunkUnpackedBytes(this.view, record)} bytes, but chunk ${c} of the stored xorb has ${stored}`,
        );
      }
    }
  }

  /** Counts a file or xorb block as verified (a block is worth several chunk references of work). */
  private async finishBlock(work: number): Promise<void> {
    this.verified++;
    await this.didWork(BLOCK_WORK + work);
  }

  /** Counts work; once the slice has run its share of SLICE_MS, lets the event loop run (heartbeats, other requests) and reports progress. */
  private async didWork(units: number): Promise<void> {
    this.workSinceClockCheck += units;
    if (this.workSinceClockCheck < WORK_BETWEEN_CLOCK_CHECKS) return;
    this.workSinceClockCheck = 0;
    if (performance.now() - this.sliceStartedAt < Math.max(MIN_SLICE_MS, SLICE_MS / validationsRunning)) return;
    await yieldToEventLoop();
    this.sliceStartedAt = performance.now();
    this.options.signal?.throwIfAborted();
    this.options.onProgress?.(this.verified);
  }

  /** The stored xorb of reference `index`, loading the next batch when needed. */
  private async xorbAt(index: number, describe: () => string): Promise<LoadedXorb> {
    if (index >= this.loadedUntil) await this.loadFrom(index);
    return this.loadedXorbAt(index, describe);
  }

  /** The stored xorb of reference `index`, which is loaded already (`index < loadedUntil`). */
  private loadedXorbAt(index: number, describe: () => string): LoadedXorb {
    const at = this.references[index];
    if (this.lastXorb !== null && sameBytes(this.bytes, this.lastReferenceAt, this.bytes, at)) return this.lastXorb;
    const hex = hashToHex(this.bytes.subarray(at, at + HASH_BYTES));
    const xorb = this.loaded.get(hex);
    if (xorb === undefined || xorb === null) {
      throw new ShardRejectedError(
        "missing_xorb",
        `${describe()} references xorb ${hex}, which this server does not have: upload every xorb with POST /v1/xorbs/default/{hash} before the shard that references it (a shard's xorb list does not create xorbs)`,
      );
    }
    this.lastReferenceAt = at;
    this.lastXorb = xorb;
    return xorb;
  }

  /**
   * Drops loaded xorbs beyond the budget (oldest first), then loads the next XORBS_PER_LOAD
   * distinct xorbs not yet loaded from reference `index` on, in one query. The references of
   * a shard are untrusted and may name many large xorbs: memory stays bounded whatever the
   * shard says, and a dropped xorb named again is loaded again.
   */
  private async loadFrom(index: number): Promise<void> {
    for (const [hex, xorb] of this.loaded) {
      if (this.loadedBytes <= this.options.loadedBytesBudget) break;
      this.loaded.delete(hex);
      if (xorb !== null) this.loadedBytes -= xorb.bytes;
    }
    const wanted = new Map<string, Hash>();
    let end = index;
    for (; end < this.references.length; end++) {
      const at = this.references[end];
      const hex = hashToHex(this.bytes.subarray(at, at + HASH_BYTES));
      if (this.loaded.has(hex) || wanted.has(hex)) continue;
      if (wanted.size === XORBS_PER_LOAD) break;
      wanted.set(hex, this.bytes.subarray(at, at + HASH_BYTES));
    }
    const tables = await this.options.metadata.getChunkTables([...wanted.values()]);
    for (const hex of wanted.keys()) {
      const table = tables.get(hex);
      const xorb = table === undefined ? null : this.loadedXorbOf(hex, table);
      this.loaded.set(hex, xorb);
      if (xorb !== null) this.loadedBytes += xorb.bytes;
    }
    this.loadedUntil = end;
  }

  /** A stored chunk table (PACKED_CHUNK_BYTES per chunk: hash, uncompressed length, serialized end) as validation reads it. */
  private loadedXorbOf(hex: string, table: Uint8Array): LoadedXorb {
    const chunkCount = table.length / PACKED_CHUNK_BYTES;
    const hashes = new Uint8Array(chunkCount * HASH_BYTES);
    const unpackedOffsets = new Float64Array(chunkCount + 1);
    const view = new DataView(table.buffer, table.byteOffset, table.byteLength);
    for (let c = 0; c < chunkCount; c++) {
      const at = c * PACKED_CHUNK_BYTES;
      hashes.set(table.subarray(at, at + HASH_BYTES), c * HASH_BYTES);
      unpackedOffsets[c + 1] = unpackedOffsets[c] + view.getUint32(at + HASH_BYTES, true);
    }
    const memoId = this.nextMemoId <= MAX_MEMO_SOURCE_ID ? this.nextMemoId++ : -1;
    return { hex, chunkCount, hashes, unpackedOffsets, memoId, uses: 0, ranges: null, bytes: chunkCount * LOADED_CHUNK_BYTES + LOADED_XORB_OVERHEAD_BYTES };
  }
}

/** Whether the 32 bytes at `a[aAt ..]` and `b[bAt ..]` are equal. */
function sameBytes(a: Uint8Array, aAt: number, b: Uint8Array, bAt: number): boolean {
  for (let i = 0; i < HASH_BYTES; i++) if (a[aAt + i] !== b[bAt + i]) return false;
  return true;
}

/**
 * The 1-in-1024 rule of global deduplication (§7.1, hash.ts `isGlobalDedupEligible`) for the
 * hash at `hashes[at ..]`: its last 64-bit word (little-endian, bytes 24..31) is ≡ 0 mod 1024,
 * i.e. byte 24 and the low two bits of byte 25 are zero.
 */
function isDedupEligibleAt(hashes: Uint8Array, at: number): boolean {
  return hashes[at + 24] === 0 && (hashes[at + 25] & 3) === 0;
}
