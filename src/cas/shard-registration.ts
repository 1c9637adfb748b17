/**
 * Shard registration (`POST /v1/shards`, `/v2/shards`; XET-PROTOCOL.md §6.7–§6.8, §7.2): check
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
import { FormatError } from "../format/errors.js";
import {
  KeyedHasher,
  fileHash as computeFileHash,
  hashEquals,
  hashToHex,
  isGlobalDedupEligible,
  verificationHash,
  type Hash,
  type MerkleEntry,
} from "../format/hash.js";
import { hasGlobalDedupFlag, parseUploadShard, type ParsedShardFile, type ParsedUploadShard, type ShardXorb } from "../format/shard.js";
import type { CasMetadataStore, FileRecord, FileTerm, XorbRecord } from "../metadata/cas.js";
import { blobKey, type BlobStore } from "../storage/blob-store.js";

export type ShardRejectionCode =
  /** The body exceeds the configured cap (HTTP 413). */
  | "shard_too_large"
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

/** A shard castor refuses; `status` is the HTTP answer (400, or 413 for an oversized body). */
export class ShardRejectedError extends Error {
  override readonly name = "ShardRejectedError";
  constructor(
    readonly code: ShardRejectionCode,
    message: string,
    readonly status: 400 | 413 = 400,
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
  /** Chunk records kept loaded during one validation (default `DEFAULT_LOADED_CHUNK_BUDGET`). */
  loadedChunkBudget?: number;
}

/**
 * Work between two yields to the event loop, in chunks visited (~5 µs each with the file and
 * range hashes, bench/shard.ts): a slice stays near 40 ms, so heartbeats and other requests
 * are served during a long validation.
 */
const WORK_PER_SLICE = 8_192;
/** Distinct xorbs fetched per metadata query. */
const XORBS_PER_LOAD = 32;
/**
 * Chunk records kept loaded at once (~150 bytes each). The references of a shard are
 * untrusted and may name many large xorbs; past this budget the oldest loaded xorbs are
 * dropped and reloaded if named again, so memory stays bounded whatever the shard says.
 */
export const DEFAULT_LOADED_CHUNK_BUDGET = 1 << 18;

/**
 * Identity of a shard's content: BLAKE3 under castor's own key (domain separation from every
 * protocol hash) over the canonical form `canonicalizeUploadShard` leaves in place.
 */
const SHARD_CONTENT_KEY = new Uint8Array(createHash("sha256").update("castor shard content v1").digest());
const shardContentHasher = new KeyedHasher(SHARD_CONTENT_KEY);

export class ShardRegistrationService {
  /** The body cap; routes use it as their `bodyLimit`. */
  readonly maxShardBytes: number;
  private readonly loadedChunkBudget: number;

  constructor(private readonly deps: ShardRegistrationDeps) {
    if (!Number.isSafeInteger(deps.maxShardBytes) || deps.maxShardBytes < 1) {
      throw new RangeError(`maxShardBytes must be a positive integer, got ${deps.maxShardBytes}`);
    }
    this.maxShardBytes = deps.maxShardBytes;
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
   */
  async register(body: Uint8Array, options: RegisterShardOptions): Promise<ShardRegistrationResult> {
    if (body.length > this.maxShardBytes) {
      throw new ShardRejectedError(
        "shard_too_large",
        `the shard has ${body.length} bytes, more than this server's limit of ${this.maxShardBytes}: split the upload into smaller shards`,
        413,
      );
    }
    let shard: ParsedUploadShard;
    try {
      shard = parseUploadShard(body);
    } catch (error) {
      if (error instanceof FormatError) throw new ShardRejectedError("invalid_shard", `invalid shard: ${error.message}`, 400, { cause: error });
      throw error;
    }
    requireVerification(shard.files);

    const run = new ValidationRun(shard, this.deps.metadata, this.loadedChunkBudget, options);
    run.report();
    const { files, dedupEntries } = await run.validate();
    run.report();

    options.signal?.throwIfAborted();
    const canonical = canonicalizeUploadShard(body, shard);
    const shardHash = shardContentHash(canonical);
    options.onCommitting?.("uploading");
    await this.deps.blobs.putIfAbsent(blobKey("shards", shardHash), canonical);
    options.signal?.throwIfAborted();
    options.onCommitting?.("syncing");
    const inserted = await this.deps.metadata.registerShard({ shardHash, repoId: options.repoId, files, dedupEntries });
    return { inserted, shardHash, files: files.length, dedupEntries: dedupEntries.length };
  }
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

/** A stored xorb as validation needs it: its record and, once asked for, its cumulative lengths. */
interface LoadedXorb {
  hex: string;
  record: XorbRecord;
  /** uncompressedEnds[i] = Σ lengths of chunks [0, i); length n + 1. */
  uncompressedEnds: Float64Array | null;
}

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
  private workSinceYield = 0;
  private verified = 0;
  private lastReported = -1;
  private readonly total: number;

  constructor(
    private readonly shard: ParsedUploadShard,
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

  async validate(): Promise<{ files: FileRecord[]; dedupEntries: { chunkHash: Hash; xorbHash: Hash }[] }> {
    const files: FileRecord[] = [];
    const seenFiles = new Set<string>();
    const dedupEntries: { chunkHash: Hash; xorbHash: Hash }[] = [];
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
      const where = `file ${fileHex} (file block ${index})`;
      const leaves: MerkleEntry[] = [];
      const terms: FileTerm[] = [];
      let firstXorbHex = "";
      let size = 0;
      for (let t = 0; t < file.terms.length; t++, reference++) {
        const term = file.terms[t];
        const xorb = await this.xorbAt(reference, () => `term ${t} of ${where}`);
        const chunks = xorb.record.chunks;
        if (t === 0) firstXorbHex = xorb.hex;
        if (term.chunkEnd > chunks.length) {
          throw new ShardRejectedError(
            "term_out_of_range",
            `term ${t} of ${where} references chunks [${term.chunkStart}, ${term.chunkEnd}) but xorb ${xorb.hex} has ${chunks.length} chunks`,
          );
        }
        const ends = uncompressedEndsOf(xorb);
        const storedBytes = ends[term.chunkEnd] - ends[term.chunkStart];
        if (storedBytes !== term.unpackedBytes) {
          throw new ShardRejectedError(
            "term_length_mismatch",
            `term ${t} of ${where} says chunks [${term.chunkStart}, ${term.chunkEnd}) of xorb ${xorb.hex} unpack to ${term.unpackedBytes} bytes, but they hold ${storedBytes}`,
          );
        }
        const rangeHashes: Hash[] = [];
        for (let c = term.chunkStart; c < term.chunkEnd; c++) {
          rangeHashes.push(chunks[c].hash);
          leaves.push({ hash: chunks[c].hash, size: chunks[c].uncompressedLength });
        }
        // requireVerification guarantees the entries of every file with terms.
        if (!hashEquals(verificationHash(rangeHashes), file.verificationHashes![t])) {
          throw new ShardRejectedError(
            "verification_mismatch",
            `verification entry ${t} of ${where} does not match chunks [${term.chunkStart}, ${term.chunkEnd}) of xorb ${xorb.hex}: it must be the verification hash of the chunk hashes of that range`,
          );
        }
        terms.push({ xorbHash: term.xorbHash, chunkStart: term.chunkStart, chunkEnd: term.chunkEnd, unpackedLength: term.unpackedBytes });
        size += storedBytes;
        this.workSinceYield += term.chunkEnd - term.chunkStart;
        if (this.workSinceYield >= WORK_PER_SLICE) await this.yieldSlice();
      }

      const expected = computeFileHash(leaves);
      if (!hashEquals(expected, file.fileHash)) {
        throw new ShardRejectedError(
          "file_hash_mismatch",
          `${where}: the file's chunks (${leaves.length} chunks, ${size} bytes) hash to ${hashToHex(expected)}, not to the file hash the shard gives`,
        );
      }
      if (!seenFiles.has(fileHex)) {
        seenFiles.add(fileHex);
        files.push({ hash: file.fileHash, size, terms, sha256: file.sha256Hex === null ? null : new Uint8Array(Buffer.from(file.sha256Hex, "hex")) });
        // The first chunk of every file is what hf.js (and xet-core) ask global dedup about (§7.1).
        if (leaves.length > 0) addDedupEntry(leaves[0].hash, file.terms[0].xorbHash, firstXorbHex);
      }
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
      await this.finishItem(1 + stored.length);
    }
    return { files, dedupEntries };
  }

  /** Counts a file or xorb block as verified; yields once a slice of work is done. */
  private async finishItem(work: number): Promise<void> {
    this.verified++;
    this.workSinceYield += work;
    if (this.workSinceYield >= WORK_PER_SLICE) await this.yieldSlice();
  }

  /** Lets the event loop run (heartbeats, other requests), then reports progress. */
  private async yieldSlice(): Promise<void> {
    this.workSinceYield = 0;
    await yieldToEventLoop();
    this.options.signal?.throwIfAborted();
    this.report();
  }

  /** The stored xorb of reference `index`, loading the next batch when needed. */
  private async xorbAt(index: number, describe: () => string): Promise<LoadedXorb> {
    if (index >= this.loadedUntil) await this.loadFrom(index);
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
      this.loaded.set(hex, record === undefined ? null : { hex, record, uncompressedEnds: null });
      if (record !== undefined) this.loadedChunks += record.chunks.length;
    }
    this.loadedUntil = end;
  }
}

function uncompressedEndsOf(xorb: LoadedXorb): Float64Array {
  if (xorb.uncompressedEnds === null) {
    const chunks = xorb.record.chunks;
    const ends = new Float64Array(chunks.length + 1);
    for (let i = 0; i < chunks.length; i++) ends[i + 1] = ends[i] + chunks[i].uncompressedLength;
    xorb.uncompressedEnds = ends;
  }
  return xorb.uncompressedEnds;
}

/**
 * A xorb block must list exactly the stored chunks. Only hashes and lengths are compared:
 * flags, byte offsets and `num_bytes_on_disk` are the writer's hints (xet-core writes 0 for
 * the latter), and castor answers dedup queries from its own records anyway.
 */
function checkXorbBlock(block: ShardXorb, record: XorbRecord, where: string): void {
  if (block.chunks.length !== record.chunks.length) {
    throw new ShardRejectedError(
      "xorb_block_mismatch",
      `${where} lists ${block.chunks.length} chunks, but the stored xorb has ${record.chunks.length}`,
    );
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

/**
 * Rewrites, in place, every field of an upload that carries no content so that every wire
 * variant of the same content has the same bytes up to `sectionsEnd` (§6.7): the header's
 * footer_size (0, a stale 200, or hf.js's 200), each xorb block's num_bytes_on_disk (0 from
 * xet-core, the serialized size from hf.js) and the reserved bytes readers ignore (which some
 * xet-core test builds fill). Returns the canonical bytes, a view of `body` — a valid
 * xet-core-style upload shard. Whatever followed the xorb section is left out.
 */
export function canonicalizeUploadShard(body: Uint8Array, shard: ParsedUploadShard): Uint8Array {
  const recordAt = (view: Uint8Array) => view.byteOffset - body.byteOffset;
  body.fill(0, 40, 48);
  for (const file of shard.files) {
    const header = recordAt(file.fileHash);
    body.fill(0, header + 40, header + 48);
    for (const term of file.terms) {
      const at = recordAt(term.xorbHash);
      body.fill(0, at + 32, at + 36);
    }
    for (const rangeHash of file.verificationHashes ?? []) {
      const at = recordAt(rangeHash);
      body.fill(0, at + 32, at + 48);
    }
    if (file.sha256 !== null) {
      const at = recordAt(file.sha256);
      body.fill(0, at + 32, at + 48);
    }
  }
  for (const xorb of shard.xorbs) {
    const header = recordAt(xorb.xorbHash);
    body.fill(0, header + 44, header + 48);
    for (const chunk of xorb.chunks) {
      const at = recordAt(chunk.hash);
      body.fill(0, at + 44, at + 48);
    }
  }
  return body.subarray(0, shard.sectionsEnd);
}

/** The content identity of a canonical shard (see canonicalizeUploadShard). */
export function shardContentHash(canonical: Uint8Array): Hash {
  return shardContentHasher.hash(canonical);
}
