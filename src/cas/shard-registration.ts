/**
 * Shard registration (`POST /v1/shards`, `/v2/shards`; docs/protocol.md §6.7–§6.8, §7.2): check
 * an uploaded shard against castor's own xorb records, store it, and register its files, their
 * repository link and the global-dedup entries in ONE metadata transaction.
 *
 * Every check uses castor's stored chunk tables, never what the shard claims about them: a
 * term's range must lie inside its xorb, its byte count and verification ("range") hash must
 * match the stored chunks, and the file hash is recomputed from the stored (hash, length) of
 * every chunk of every term. A correct range hash proves the uploader had the chunk hashes,
 * which dedup answers only ever disclose keyed (§3.6, §3.7).
 *
 * Nothing is written before the whole shard validated, and the registration is one
 * `registerShard` call, so a rejected or interrupted upload leaves no file, link or dedup
 * entry behind. The shard blob is stored first: a crash between the two leaves an
 * unreferenced blob that a retry finds already present.
 */
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { createHash } from "node:crypto";
import { DEFAULT_MAX_SHARD_CHUNK_REFS } from "../config.js";
import { FormatError } from "../format/errors.js";
import { ChunkTable } from "../format/ranges.js";
import { KeyedHasher, MerkleTreeBuilder, fileHashOf, hashEquals, hashToHex, isGlobalDedupEligible, verificationHashOf, type Hash } from "../format/hash.js";
import {
  canonicalizeFileBlock,
  canonicalizeShardHeader,
  canonicalizeXorbBlock,
  hasGlobalDedupFlag,
  parseUploadShardInSteps,
  type ParsedShardFile,
  type ParsedUploadShard,
  type ShardXorb,
} from "../format/shard.js";
import type { CasMetadataStore, FileRecord, FileTerm, XorbRecord } from "../metadata/cas.js";
import { BeingCollectedError } from "../metadata/errors.js";
import { blobKey, type BlobStore } from "../storage/blob-store.js";

export type ShardRejectionCode =
  /** The body exceeds the configured cap (HTTP 413). */
  | "shard_too_large"
  /** The files of the shard reference more chunks in all than the configured cap (HTTP 413). */
  | "too_many_chunk_references"
  /** A file's terms reference more chunks than its size allows at the smallest chunk real clients cut. */
  | "chunk_references_exceed_file_size"
  /** The bytes are not a well-formed shard (the format layer's message says why). */
  | "invalid_shard"
  /** A file with terms carries no verification entries. */
  | "missing_verification"
  /** A term or xorb block names a xorb castor has not stored. */
  | "missing_xorb"
  /** A term's chunk range does not lie inside its xorb. */
  | "term_out_of_range"
  /** A term's unpacked byte count differs from the stored chunk lengths of its range. */
  | "term_length_mismatch"
  /** A term's verification hash differs from the one computed over the stored chunk hashes. */
  | "verification_mismatch"
  /** The file hash differs from the one computed over the stored chunks of its terms. */
  | "file_hash_mismatch"
  /** A xorb block's chunk hashes or lengths differ from the stored xorb. */
  | "xorb_block_mismatch";

/** A shard castor refuses; the HTTP layer answers it by its `code` (src/http/errors.ts). */
export class ShardRejectedError extends Error {
  override readonly name = "ShardRejectedError";
  constructor(
    readonly code: ShardRejectionCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export interface ShardProgress {
  /** File blocks and xorb blocks checked so far. */
  verified: number;
  /** File blocks plus xorb blocks of the shard. */
  total: number;
}

export interface RegisterShardOptions {
  /** Numeric id of the uploading token's repository; every file of the shard is linked to it. */
  repoId: number;
  /** Called once the shard parsed (verified 0), after slices of validation work and when all is verified. */
  onProgress?: (progress: ShardProgress) => void;
  /** Called when validation passed and the shard is being stored ("uploading") and registered ("syncing"). */
  onCommitting?: (stage: "uploading" | "syncing") => void;
  /** Stops the validation between slices (the client went away); nothing is registered then. */
  signal?: AbortSignal;
}

export interface ShardRegistrationResult {
  /** false when the identical shard was registered before (its files are linked to the repository anyway). */
  inserted: boolean;
  /** The content identity the shard blob is stored under (see `shardContentHash`). */
  shardHash: Hash;
  /** Distinct files registered. */
  files: number;
  /** Dedup index entries written (before the store drops ones it already has). */
  dedupEntries: number;
}

export interface ShardRegistrationDeps {
  metadata: Pick<CasMetadataStore, "getXorbs" | "registerShard">;
  blobs: Pick<BlobStore, "putIfAbsent">;
  /** `config.maxShardBytes`. */
  maxShardBytes: number;
  /** `config.maxShardChunkRefs`: chunk references a shard's files may make in all (default: config's). */
  maxChunkReferences?: number;
  /** Chunk records kept loaded during one validation (default `DEFAULT_LOADED_CHUNK_BUDGET`). */
  loadedChunkBudget?: number;
}

/**
 * The smallest chunk a real client cuts anywhere but at the end of a file (docs/protocol.md §4,
 * §12: xet-core cuts at ≥ 8,192 bytes, huggingface.js at ≥ 8,128). A file of `size` bytes
 * therefore has at most ⌊size / 8128⌋ + 1 chunks; more references than that are not a file
 * any client produced, only work for the server (the same tiny chunks named over and over).
 */
const MIN_CLIENT_CHUNK_BYTES = 8128;

/**
 * Chunks a file may reference beyond that bound. Files of synthetic tests, the protocol's own
 * vectors among them, are made of a few tiny chunks (3 chunks in 3,565 bytes); this many extra
 * references cost nothing worth attacking.
 */
const SMALL_FILE_CHUNK_ALLOWANCE = 64;

/**
 * How long validation runs before it yields to the event loop, so heartbeats and other
 * requests are served during a long validation. Measured in time, not in work: a chunk
 * reference costs ~2 µs, but a file block costs tens of µs of its own (records, strings,
 * garbage), and a count of either alone let slices run for hundreds of milliseconds.
 */
const SLICE_MS = 20;
/** Work units (chunk references) between two looks at the clock. */
const WORK_BETWEEN_CLOCK_CHECKS = 256;
/** What a file or xorb block counts for besides its chunks, in chunk references. */
const BLOCK_WORK = 16;
/** Distinct xorbs fetched per metadata query. */
const XORBS_PER_LOAD = 32;
/** Bytes of the canonical shard hashed between two yields (BLAKE3 runs at ~1 GB/s here). */
const CONTENT_HASH_BYTES_PER_SLICE = 8 * 1024 * 1024;
/**
 * Chunk records kept loaded at once (~150 bytes each). The references of a shard are
 * untrusted and may name many large xorbs; past this budget the oldest loaded xorbs are
 * dropped and reloaded if named again, so memory stays bounded whatever the shard says.
 */
export const DEFAULT_LOADED_CHUNK_BUDGET = 1 << 18;

/**
 * Identity of a shard's content: BLAKE3 under castor's own key (domain separation from every
 * protocol hash) over the canonical form (format/shard.ts `canonicalizeUploadShard`).
 */
const SHARD_CONTENT_KEY = new Uint8Array(createHash("sha256").update("castor shard content v1").digest());

export class ShardRegistrationService {
  /** The body cap; routes use it as their `bodyLimit`. */
  readonly maxShardBytes: number;
  private readonly maxChunkReferences: number;
  private readonly loadedChunkBudget: number;

  constructor(private readonly deps: ShardRegistrationDeps) {
    this.maxShardBytes = positiveInteger("maxShardBytes", deps.maxShardBytes);
    this.maxChunkReferences = positiveInteger("maxChunkReferences", deps.maxChunkReferences ?? DEFAULT_MAX_SHARD_CHUNK_REFS);
    this.loadedChunkBudget = deps.loadedChunkBudget ?? DEFAULT_LOADED_CHUNK_BUDGET;
    if (!Number.isSafeInteger(this.loadedChunkBudget) || this.loadedChunkBudget < 0) {
      throw new RangeError(`loadedChunkBudget must be a non-negative integer, got ${this.loadedChunkBudget}`);
    }
  }

  /**
   * Validates, stores and registers the shard in `body`. The body is taken over: its reserved
   * and informational fields are rewritten in place to the canonical form that is hashed and
   * stored (the caller must not reuse it). Throws ShardRejectedError for a shard castor
   * refuses; any other error is a server-side failure worth retrying.
   *
   * Every step that grows with the shard runs in slices with yields to the event loop in
   * between, and the work a shard can cause is bounded before any of it is done
   * (`checkChunkReferences`), so no upload holds up other requests.
   */
  async register(body: Uint8Array, options: RegisterShardOptions): Promise<ShardRegistrationResult> {
    if (body.length > this.maxShardBytes) {
      throw new ShardRejectedError(
        "shard_too_large",
        `the shard has ${body.length} bytes, more than this server's limit of ${this.maxShardBytes}: split the upload into smaller shards`,
      );
    }
    const shard = await parseInSlices(body, options.signal);
    requireVerification(shard.files);
    checkChunkReferences(shard.files, this.maxChunkReferences);

    const run = new ValidationRun(shard, body, this.deps.metadata, this.loadedChunkBudget, options);
    run.report();
    const { files, dedupEntries } = await run.validate();
    run.report();

    options.signal?.throwIfAborted();
    canonicalizeShardHeader(body);
    const canonical = body.subarray(0, shard.sectionsEnd);
    const shardHash = await contentHashInSlices(canonical);
    options.signal?.throwIfAborted();
    options.onCommitting?.("uploading");
    await this.deps.blobs.putIfAbsent(blobKey("shards", shardHash), canonical);
    options.signal?.throwIfAborted();
    options.onCommitting?.("syncing");
    let inserted: boolean;
    try {
      inserted = await this.deps.metadata.registerShard({ shardHash, repoId: options.repoId, files, dedupEntries });
    } catch (error) {
      // A garbage collection removed a xorb after the checks above: the client uploads it again.
      if (error instanceof BeingCollectedError) throw new ShardRejectedError("missing_xorb", error.message, { cause: error });
      throw error;
    }
    return { inserted, shardHash, files: files.length, dedupEntries: dedupEntries.length };
  }
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

/** Parses the upload a slice at a time (a 65 MiB shard takes most of a second in all). */
async function parseInSlices(body: Uint8Array, signal: AbortSignal | undefined): Promise<ParsedUploadShard> {
  const steps = parseUploadShardInSteps(body);
  for (;;) {
    let next: IteratorResult<void, ParsedUploadShard>;
    try {
      next = steps.next();
    } catch (error) {
      if (error instanceof FormatError) throw new ShardRejectedError("invalid_shard", `invalid shard: ${error.message}`, { cause: error });
      throw error;
    }
    if (next.done) return next.value;
    await yieldToEventLoop();
    signal?.throwIfAborted();
  }
}

/** The content identity of a canonical shard, hashed a slice at a time. */
async function contentHashInSlices(canonical: Uint8Array): Promise<Hash> {
  // Its own hasher: registrations interleave at every yield.
  const hasher = new KeyedHasher(SHARD_CONTENT_KEY);
  hasher.start();
  for (let at = 0; at < canonical.length; at += CONTENT_HASH_BYTES_PER_SLICE) {
    hasher.update(canonical.subarray(at, at + CONTENT_HASH_BYTES_PER_SLICE));
    if (at + CONTENT_HASH_BYTES_PER_SLICE < canonical.length) await yieldToEventLoop();
  }
  return hasher.digest();
}

/**
 * The spec requires verification entries and both real clients send them; without them a
 * term would not prove possession of its chunks. A file without terms (the empty file) has
 * nothing to verify.
 */
function requireVerification(files: readonly ParsedShardFile[]): void {
  files.forEach((file, index) => {
    if (file.terms.length > 0 && file.verificationHashes === null) {
      throw new ShardRejectedError(
        "missing_verification",
        `file ${hashToHex(file.fileHash)} (file block ${index}) has ${file.terms.length} terms but no verification entries: the shard must carry one verification (range) hash per term, with flag 0x80000000 set`,
      );
    }
  });
}

/**
 * Bounds the work of a shard before any of it is done, from what its terms declare (the
 * declared byte counts are checked against the stored chunks later, so a lie is refused
 * then): a 48-byte term can name up to 8,192 chunks, and validation visits every chunk of
 * every term. Each file may reference at most as many chunks as its size allows at the
 * smallest chunk real clients cut (plus a small allowance), and all files together at most
 * `maxChunkReferences`.
 */
function checkChunkReferences(files: readonly ParsedShardFile[], maxChunkReferences: number): void {
  let total = 0;
  for (let index = 0; index < files.length; index++) {
    const file = files[index];
    let references = 0;
    let bytes = 0;
    for (const term of file.terms) {
      references += term.chunkEnd - term.chunkStart;
      bytes += term.unpackedBytes;
    }
    const allowed = Math.floor(bytes / MIN_CLIENT_CHUNK_BYTES) + 1 + SMALL_FILE_CHUNK_ALLOWANCE;
    if (references > allowed) {
      throw new ShardRejectedError(
        "chunk_references_exceed_file_size",
        `file ${hashToHex(file.fileHash)} (file block ${index}) references ${references} chunks for ${bytes} bytes, more than the ${allowed} a file of that size can have (chunks are at least ${MIN_CLIENT_CHUNK_BYTES} bytes except the last): list each chunk of the file once, in order`,
      );
    }
    total += references;
    if (total > maxChunkReferences) {
      throw new ShardRejectedError(
        "too_many_chunk_references",
        `the shard's files reference more than ${maxChunkReferences} chunks in all (this server's CASTOR_MAX_SHARD_CHUNK_REFS), reached at file block ${index}: upload the files in several smaller shards`,
      );
    }
  }
}

/** A stored xorb as validation needs it: its record and, once asked for, its chunk table. */
interface LoadedXorb {
  hex: string;
  record: XorbRecord;
  chunkTable: ChunkTable | null;
}

type DedupEntryList = { chunkHash: Hash; xorbHash: Hash }[];

/** One shard's validation: the xorb loader, the work counter and the progress reports. */
class ValidationRun {
  /**
   * Every xorb reference in validation order: all terms of all files, then the xorb blocks.
   * Views into the body; their string form is computed when needed rather than kept for all.
   */
  private readonly references: Hash[] = [];
  /** Loaded xorbs by hex; null = asked for and not stored. Insertion order = load order. */
  private readonly loaded = new Map<string, LoadedXorb | null>();
  private loadedChunks = 0;
  /** references[0 .. loadedUntil) have been looked up. */
  private loadedUntil = 0;
  private workSinceClockCheck = 0;
  private sliceStartedAt = performance.now();
  private verified = 0;
  private lastReported = -1;
  private readonly total: number;

  constructor(
    private readonly shard: ParsedUploadShard,
    /** The buffer the shard was parsed from; each block is canonicalized in it once checked. */
    private readonly body: Uint8Array,
    private readonly metadata: ShardRegistrationDeps["metadata"],
    private readonly loadedChunkBudget: number,
    private readonly options: RegisterShardOptions,
  ) {
    for (const file of shard.files) for (const term of file.terms) this.references.push(term.xorbHash);
    for (const xorb of shard.xorbs) this.references.push(xorb.xorbHash);
    this.total = shard.files.length + shard.xorbs.length;
  }

  /** Reports progress, unless nothing was verified since the last report. */
  report(): void {
    if (this.verified === this.lastReported) return;
    this.lastReported = this.verified;
    this.options.onProgress?.({ verified: this.verified, total: this.total });
  }

  async validate(): Promise<{ files: FileRecord[]; dedupEntries: DedupEntryList }> {
    const files: FileRecord[] = [];
    /** The first block of every file hash, by hex. */
    const firstBlocks = new Map<string, ParsedShardFile>();
    const dedupEntries: DedupEntryList = [];
    const seenDedupEntries = new Set<string>();
    const addDedupEntry = (chunkHash: Hash, xorbHash: Hash, xorbHex: string) => {
      const key = hashToHex(chunkHash) + xorbHex;
      if (seenDedupEntries.has(key)) return;
      seenDedupEntries.add(key);
      // A copy: the stored hash is a view into its xorb's whole chunk table, which would
      // otherwise stay in memory after the loader dropped the xorb.
      dedupEntries.push({ chunkHash: chunkHash.slice(), xorbHash });
    };

    let reference = 0;
    for (let index = 0; index < this.shard.files.length; index++) {
      const file = this.shard.files[index];
      const fileHex = hashToHex(file.fileHash);
      const first = firstBlocks.get(fileHex);
      if (first !== undefined && sameTermsAndVerification(first, file)) {
        // A repeat of a block already verified (hf.js writes one per uploaded path): its checks
        // would come out the same, and the first block is the one registered.
        reference += file.terms.length;
      } else {
        const checked = await this.checkFile(file, index, reference);
        reference += file.terms.length;
        if (first === undefined) {
          firstBlocks.set(fileHex, file);
          files.push(checked.record);
          // The first chunk of every file is what hf.js (and xet-core) ask global dedup about (§7.1).
          if (checked.firstChunk !== null) addDedupEntry(checked.firstChunk, file.terms[0].xorbHash, hashToHex(file.terms[0].xorbHash));
        }
      }
      canonicalizeFileBlock(this.body, file);
      await this.finishItem(1);
    }

    for (let index = 0; index < this.shard.xorbs.length; index++, reference++) {
      const block = this.shard.xorbs[index];
      const xorb = await this.xorbAt(reference, () => `xorb block ${index}`);
      const xorbHex = xorb.hex;
      const where = `xorb block ${index} (xorb ${xorbHex})`;
      checkXorbBlock(block, xorb.record, where);
      const stored = xorb.record.chunks;
      for (let c = 0; c < stored.length; c++) {
        if (isGlobalDedupEligible(stored[c].hash) || hasGlobalDedupFlag(block.chunks[c])) addDedupEntry(stored[c].hash, block.xorbHash, xorbHex);
      }
      canonicalizeXorbBlock(this.body, block);
      await this.finishItem(1 + stored.length);
    }
    return { files, dedupEntries };
  }

  /**
   * Checks one file block against the stored chunks, term by term, and returns its record
   * and its first chunk's hash. The file hash is built as the chunks are visited
   * (`MerkleTreeBuilder`), so memory stays small however many chunks the file has.
   */
  private async checkFile(file: ParsedShardFile, index: number, firstReference: number): Promise<{ record: FileRecord; firstChunk: Hash | null }> {
    // Only error messages use it; built per file it was a measurable share of a large shard's time.
    const where = () => `file ${hashToHex(file.fileHash)} (file block ${index})`;
    const tree = new MerkleTreeBuilder();
    const terms: FileTerm[] = [];
    let firstChunk: Hash | null = null;
    let size = 0;
    for (let t = 0; t < file.terms.length; t++) {
      const term = file.terms[t];
      const reference = firstReference + t;
      const describe = () => `term ${t} of ${where()}`;
      // Most terms name a xorb loaded already: no await (and no promise) for those.
      const xorb = reference < this.loadedUntil ? this.loadedXorbAt(reference, describe) : await this.xorbAt(reference, describe);
      const chunks = xorb.record.chunks;
      if (term.chunkEnd > chunks.length) {
        throw new ShardRejectedError(
          "term_out_of_range",
          `term ${t} of ${where()} references chunks [${term.chunkStart}, ${term.chunkEnd}) but xorb ${xorb.hex} has ${chunks.length} chunks`,
        );
      }
      const storedBytes = chunkTableOf(xorb).unpackedLength(term.chunkStart, term.chunkEnd);
      if (storedBytes !== term.unpackedBytes) {
        throw new ShardRejectedError(
          "term_length_mismatch",
          `term ${t} of ${where()} says chunks [${term.chunkStart}, ${term.chunkEnd}) of xorb ${xorb.hex} unpack to ${term.unpackedBytes} bytes, but they hold ${storedBytes}`,
        );
      }
      const count = term.chunkEnd - term.chunkStart;
      // requireVerification guarantees the entries of every file with terms.
      if (
        !hashEquals(
          verificationHashOf(count, (i) => chunks[term.chunkStart + i].hash),
          file.verificationHashes![t],
        )
      ) {
        throw new ShardRejectedError(
          "verification_mismatch",
          `verification entry ${t} of ${where()} does not match chunks [${term.chunkStart}, ${term.chunkEnd}) of xorb ${xorb.hex}: it must be the verification hash of the chunk hashes of that range`,
        );
      }
      for (let c = term.chunkStart; c < term.chunkEnd; c++) tree.push(chunks[c].hash, chunks[c].uncompressedLength);
      firstChunk ??= chunks[term.chunkStart].hash;
      terms.push({ xorbHash: term.xorbHash, chunkStart: term.chunkStart, chunkEnd: term.chunkEnd, unpackedLength: term.unpackedBytes });
      size += storedBytes;
      await this.didWork(count);
    }

    const chunkCount = tree.leafCount;
    const expected = fileHashOf(tree);
    if (!hashEquals(expected, file.fileHash)) {
      throw new ShardRejectedError(
        "file_hash_mismatch",
        `${where()}: the file's chunks (${chunkCount} chunks, ${size} bytes) hash to ${hashToHex(expected)}, not to the file hash the shard gives`,
      );
    }
    const sha256 = file.sha256Hex === null ? null : new Uint8Array(Buffer.from(file.sha256Hex, "hex"));
    return { record: { hash: file.fileHash, size, terms, sha256 }, firstChunk };
  }

  /** Counts a file or xorb block as verified (a block is worth several chunk references of work). */
  private async finishItem(work: number): Promise<void> {
    this.verified++;
    await this.didWork(BLOCK_WORK + work);
  }

  /** Counts work; once the slice has run SLICE_MS, lets the event loop run (heartbeats, other requests) and reports progress. */
  private async didWork(units: number): Promise<void> {
    this.workSinceClockCheck += units;
    if (this.workSinceClockCheck < WORK_BETWEEN_CLOCK_CHECKS) return;
    this.workSinceClockCheck = 0;
    if (performance.now() - this.sliceStartedAt < SLICE_MS) return;
    await yieldToEventLoop();
    this.sliceStartedAt = performance.now();
    this.options.signal?.throwIfAborted();
    this.report();
  }

  /** The stored xorb of reference `index`, loading the next batch when needed. */
  private async xorbAt(index: number, describe: () => string): Promise<LoadedXorb> {
    if (index >= this.loadedUntil) await this.loadFrom(index);
    return this.loadedXorbAt(index, describe);
  }

  /** The stored xorb of reference `index`, which is loaded already (`index < loadedUntil`). */
  private loadedXorbAt(index: number, describe: () => string): LoadedXorb {
    const hex = hashToHex(this.references[index]);
    const xorb = this.loaded.get(hex);
    if (xorb === undefined || xorb === null) {
      throw new ShardRejectedError(
        "missing_xorb",
        `${describe()} references xorb ${hex}, which this server does not have: upload every xorb with POST /v1/xorbs/default/{hash} before the shard that references it (a shard's xorb list does not create xorbs)`,
      );
    }
    return xorb;
  }

  /**
   * Drops loaded xorbs beyond the budget (oldest first), then loads the next XORBS_PER_LOAD
   * distinct xorbs not yet loaded from reference `index` on, in one query.
   */
  private async loadFrom(index: number): Promise<void> {
    for (const [hex, xorb] of this.loaded) {
      if (this.loadedChunks <= this.loadedChunkBudget) break;
      this.loaded.delete(hex);
      if (xorb !== null) this.loadedChunks -= xorb.record.chunks.length;
    }
    const wanted = new Map<string, Hash>();
    let end = index;
    for (; end < this.references.length; end++) {
      const hex = hashToHex(this.references[end]);
      if (this.loaded.has(hex) || wanted.has(hex)) continue;
      if (wanted.size === XORBS_PER_LOAD) break;
      wanted.set(hex, this.references[end]);
    }
    const records = await this.metadata.getXorbs([...wanted.values()]);
    for (const hex of wanted.keys()) {
      const record = records.get(hex);
      this.loaded.set(hex, record === undefined ? null : { hex, record, chunkTable: null });
      if (record !== undefined) this.loadedChunks += record.chunks.length;
    }
    this.loadedUntil = end;
  }
}

/** Whether two blocks of one file hash list the same terms with the same verification entries. */
function sameTermsAndVerification(a: ParsedShardFile, b: ParsedShardFile): boolean {
  if (a.terms.length !== b.terms.length) return false;
  for (let t = 0; t < a.terms.length; t++) {
    const x = a.terms[t];
    const y = b.terms[t];
    if (x.chunkStart !== y.chunkStart || x.chunkEnd !== y.chunkEnd || x.unpackedBytes !== y.unpackedBytes || !hashEquals(x.xorbHash, y.xorbHash)) return false;
    if (!hashEquals(a.verificationHashes![t], b.verificationHashes![t])) return false;
  }
  return true;
}

function chunkTableOf(xorb: LoadedXorb): ChunkTable {
  return (xorb.chunkTable ??= ChunkTable.of(xorb.record.chunks));
}

/**
 * A xorb block must list exactly the stored chunks. Only hashes and lengths are compared:
 * flags, byte offsets and `num_bytes_on_disk` are the writer's hints (xet-core writes 0 for
 * the latter), and castor answers dedup queries from its own records anyway.
 */
function checkXorbBlock(block: ShardXorb, record: XorbRecord, where: string): void {
  if (block.chunks.length !== record.chunks.length) {
    throw new ShardRejectedError("xorb_block_mismatch", `${where} lists ${block.chunks.length} chunks, but the stored xorb has ${record.chunks.length}`);
  }
  for (let c = 0; c < record.chunks.length; c++) {
    const listed = block.chunks[c];
    const stored = record.chunks[c];
    if (!hashEquals(listed.hash, stored.hash)) {
      throw new ShardRejectedError(
        "xorb_block_mismatch",
        `${where} lists chunk ${c} with hash ${hashToHex(listed.hash)}, but chunk ${c} of the stored xorb is ${hashToHex(stored.hash)}`,
      );
    }
    if (listed.unpackedBytes !== stored.uncompressedLength) {
      throw new ShardRejectedError(
        "xorb_block_mismatch",
        `${where} lists chunk ${c} with ${listed.unpackedBytes} bytes, but chunk ${c} of the stored xorb has ${stored.uncompressedLength}`,
      );
    }
  }
}
