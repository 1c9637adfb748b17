/**
 * Shard registration (`POST /v1/shards`, `/v2/shards`; docs/protocol.md §6.7–§6.8, §7.2): admit
 * an uploaded shard against this process's budget, check it against castor's own xorb records,
 * store it, and register its files, their repository link and the global-dedup entries in ONE
 * metadata transaction.
 *
 * In two steps, so a route can answer a refusal of admission with its own status before it
 * starts streaming progress: `admit` charges the budget (shard-admission.ts), reads the body and
 * parses it, and bounds its work; `registerAdmitted` validates (shard-validation.ts), stores and
 * registers, and gives the charge back whatever happens. `register` does both.
 *
 * Every check uses castor's stored chunk tables, never what the shard claims about them. A
 * correct range hash proves the uploader had the chunk hashes, which dedup answers only ever
 * disclose keyed (§3.6, §3.7).
 *
 * Nothing is written before the whole shard validated, and the registration is one
 * `registerShard` call, so a rejected or interrupted upload leaves no file, link or dedup
 * entry behind. The shard blob is stored first: a crash between the two leaves an
 * unreferenced blob that a retry finds already present.
 */
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { createHash } from "node:crypto";
import { DEFAULT_MAX_SHARD_CHUNK_REFS, DEFAULT_SHARD_ADMISSION_WAIT_MS, defaultShardMemoryBudget } from "../config.js";
import { FormatError } from "../format/errors.js";
import { KeyedHasher, hashToHex, type Hash } from "../format/hash.js";
import { canonicalizeShardHeader } from "../format/shard.js";
import {
  SHARD_RECORDS_PER_STEP,
  fileBlockTermCount,
  readUploadShardBlocksInSteps,
  termChunkEnd,
  termChunkStart,
  termRecordAt,
  termUnpackedBytes,
  type UploadShardBlocks,
} from "../format/shard-blocks.js";
import { PACKED_DEDUP_ENTRY_BYTES, type CasMetadataStore } from "../metadata/cas.js";
import { BeingCollectedError } from "../metadata/errors.js";
import { blobKey, type BlobStore } from "../storage/blob-store.js";
import { ShardAdmission, type Release, type ShardCharge } from "./shard-admission.js";
import { ShardRejectedError } from "./shard-rejection.js";
import { maxLoadedBytes, validateShard } from "./shard-validation.js";

export { ShardRejectedError, type ShardRejectionCode } from "./shard-rejection.js";

export interface ShardProgress {
  /** File blocks and xorb blocks checked so far. */
  verified: number;
  /** File blocks plus xorb blocks of the shard. */
  total: number;
}

export interface RegisterShardOptions {
  /** Numeric id of the uploading token's repository; every file of the shard is linked to it. */
  repoId: number;
  /** Called once validation starts (verified 0), after slices of validation work and when all is verified. */
  onProgress?: (progress: ShardProgress) => void;
  /** Called when validation passed and the shard is being stored ("uploading") and registered ("syncing"). */
  onCommitting?: (stage: "uploading" | "syncing") => void;
  /** Stops the work between slices (the client went away); nothing is registered then. */
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

/** An upload body whose length is known before it is read (a spooled request body). */
export interface ShardBody {
  readonly length: number;
  /** The whole body in one buffer. */
  read(): Promise<Uint8Array>;
}

/** A shard that was admitted, read and parsed: it holds its charge until `registerAdmitted` ends. */
export interface AdmittedShard {
  readonly blocks: UploadShardBlocks;
  readonly release: Release;
}

export interface ShardRegistrationDeps {
  metadata: Pick<CasMetadataStore, "getChunkTables" | "registerShard">;
  blobs: Pick<BlobStore, "putIfAbsent">;
  /** `config.maxShardBytes`. */
  maxShardBytes: number;
  /** `config.maxShardChunkRefs`: chunk references a shard's files may make in all (default DEFAULT_MAX_SHARD_CHUNK_REFS). */
  maxChunkReferences?: number;
  /** Bytes of stored chunk tables one validation keeps loaded (default DEFAULT_LOADED_BYTES_BUDGET). */
  loadedBytesBudget?: number;
  /**
   * What the registrations in progress may hold in all: memory (`config.shardMemoryBudget`,
   * default a quarter of the heap limit) and chunk references (default twice
   * `maxChunkReferences`: two of the largest shards at once).
   */
  budget?: Partial<ShardCharge>;
  /** The longest a registration waits for its turn (`config.shardAdmissionWaitMs`, default 10 s). */
  admissionWaitMs?: number;
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

/** Bytes of stored chunk tables one validation keeps loaded (~200,000 chunks); past it the oldest are dropped. */
const DEFAULT_LOADED_BYTES_BUDGET = 8 * 1024 * 1024;

/**
 * What a registration builds per byte of its body, at most: the block offsets, the packed files
 * and terms, the dedup entries and the tables finding repeats. Shards of files without terms
 * come closest (~1.3 bytes per byte); the bound leaves room for the arrays that grow by
 * doubling. docs/design.md §8.13 has the measured figures.
 */
const DERIVED_BYTES_PER_BODY_BYTE = 2;

/** What every registration holds besides its body and its loaded tables: the merkle memo, remembered range hashes, buffers. */
const FIXED_REGISTRATION_BYTES = 12 * 1024 * 1024;

/** Bytes of the canonical shard hashed between two yields (BLAKE3 runs at ~1 GB/s here). */
const CONTENT_HASH_BYTES_PER_SLICE = 8 * 1024 * 1024;

/**
 * Identity of a shard's content: BLAKE3 under castor's own key (domain separation from every
 * protocol hash) over the canonical form (format/shard.ts `canonicalizeUploadShard`).
 */
const SHARD_CONTENT_KEY = new Uint8Array(createHash("sha256").update("castor shard content v1").digest());

export class ShardRegistrationService {
  /** The body cap; routes use it as their `bodyLimit`. */
  readonly maxShardBytes: number;
  readonly admission: ShardAdmission;
  private readonly maxChunkReferences: number;
  private readonly loadedBytesBudget: number;

  constructor(private readonly deps: ShardRegistrationDeps) {
    this.maxShardBytes = positiveInteger("maxShardBytes", deps.maxShardBytes);
    this.maxChunkReferences = positiveInteger("maxChunkReferences", deps.maxChunkReferences ?? DEFAULT_MAX_SHARD_CHUNK_REFS);
    this.loadedBytesBudget = deps.loadedBytesBudget ?? DEFAULT_LOADED_BYTES_BUDGET;
    if (!Number.isSafeInteger(this.loadedBytesBudget) || this.loadedBytesBudget < 0) {
      throw new RangeError(`loadedBytesBudget must be a non-negative integer, got ${this.loadedBytesBudget}`);
    }
    this.admission = new ShardAdmission({
      budget: {
        memoryBytes: deps.budget?.memoryBytes ?? defaultShardMemoryBudget(),
        chunkReferences: deps.budget?.chunkReferences ?? 2 * this.maxChunkReferences,
      },
      maxWaitMs: deps.admissionWaitMs ?? DEFAULT_SHARD_ADMISSION_WAIT_MS,
    });
  }

  /**
   * The memory a registration of a body of `bodyBytes` is charged: the body, what is built from
   * it, the stored chunk tables it may load, and a fixed part.
   */
  memoryCharge(bodyBytes: number): number {
    return bodyBytes * (1 + DERIVED_BYTES_PER_BODY_BYTE) + maxLoadedBytes(this.loadedBytesBudget) + FIXED_REGISTRATION_BYTES;
  }

  /**
   * Validates, stores and registers the shard in `body`: `admit`, then `registerAdmitted`.
   * The body is taken over (see `registerAdmitted`).
   */
  async register(body: Uint8Array | ShardBody, options: RegisterShardOptions): Promise<ShardRegistrationResult> {
    return this.registerAdmitted(await this.admit(body, options), options);
  }

  /**
   * Waits for the memory the shard will hold, reads the body, parses it, bounds the work it
   * asks for and waits for that too — all before any xorb is loaded. Throws ShardRejectedError
   * (413 too large, a malformed shard, too many chunk references), ShardAdmissionError when the
   * budget had no room in time (503), or the signal's reason. Charges nothing once it threw.
   */
  async admit(body: Uint8Array | ShardBody, options: { signal?: AbortSignal } = {}): Promise<AdmittedShard> {
    if (body.length > this.maxShardBytes) {
      throw new ShardRejectedError(
        "shard_too_large",
        `the shard has ${body.length} bytes, more than this server's limit of ${this.maxShardBytes}: split the upload into smaller shards`,
      );
    }
    const deadline = this.admission.deadline();
    const releaseMemory = await this.admission.admitMemory(this.memoryCharge(body.length), deadline, options.signal);
    let releaseWork: Release = () => {};
    const release = () => {
      releaseWork();
      releaseMemory();
    };
    try {
      const bytes = body instanceof Uint8Array ? body : await body.read();
      const blocks = await readInSlices(bytes, options.signal);
      requireVerification(blocks);
      const references = await checkChunkReferences(blocks, this.maxChunkReferences, options.signal);
      releaseWork = await this.admission.admitWork(references, deadline, options.signal);
      return { blocks, release };
    } catch (error) {
      release();
      throw error;
    }
  }

  /**
   * Validates, stores and registers an admitted shard, then releases its charge (also when it
   * throws). Its body is taken over: reserved and informational fields are rewritten in place
   * to the canonical form that is hashed and stored. Throws ShardRejectedError for a shard
   * castor refuses; any other error is a server-side failure worth retrying.
   *
   * Every step that grows with the shard runs in slices with yields to the event loop in
   * between, so no upload holds up other requests.
   */
  async registerAdmitted(shard: AdmittedShard, options: RegisterShardOptions): Promise<ShardRegistrationResult> {
    try {
      const { blocks } = shard;
      const total = blocks.fileBlocks.length + blocks.xorbBlocks.length;
      let lastReported = -1;
      const report = (verified: number) => {
        if (verified === lastReported) return;
        lastReported = verified;
        options.onProgress?.({ verified, total });
      };
      report(0);
      const { files, dedupEntries } = await validateShard(blocks, {
        metadata: this.deps.metadata,
        loadedBytesBudget: this.loadedBytesBudget,
        onProgress: report,
        signal: options.signal,
      });
      report(total);

      options.signal?.throwIfAborted();
      canonicalizeShardHeader(blocks.bytes);
      const canonical = blocks.bytes.subarray(0, blocks.sectionsEnd);
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
      return { inserted, shardHash, files: files.count, dedupEntries: dedupEntries.length / PACKED_DEDUP_ENTRY_BYTES };
    } finally {
      shard.release();
    }
  }
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

/** Reads the upload's blocks a slice at a time (a 65 MiB shard takes a few hundred milliseconds in all). */
async function readInSlices(body: Uint8Array, signal: AbortSignal | undefined): Promise<UploadShardBlocks> {
  const steps = readUploadShardBlocksInSteps(body);
  for (;;) {
    let next: IteratorResult<void, UploadShardBlocks>;
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
 * nothing to verify. (Either every file block carries them or none does: the reader checks.)
 */
function requireVerification(blocks: UploadShardBlocks): void {
  if (blocks.withVerification || blocks.termCount === 0) return;
  const index = blocks.fileBlocks.findIndex((at) => fileBlockTermCount(blocks.view, at) > 0);
  const at = blocks.fileBlocks[index];
  throw new ShardRejectedError(
    "missing_verification",
    `file ${hashToHex(blocks.bytes.subarray(at, at + 32))} (file block ${index}) has ${fileBlockTermCount(blocks.view, at)} terms but no verification entries: the shard must carry one verification (range) hash per term, with flag 0x80000000 set`,
  );
}

/**
 * Bounds the work of a shard before any of it is done, from what its terms declare (the
 * declared byte counts are checked against the stored chunks later, so a lie is refused
 * then), and returns its chunk references: a 48-byte term can name up to 8,192 chunks, and
 * validation visits every chunk of every term. Each file may reference at most as many chunks
 * as its size allows at the smallest chunk real clients cut (plus a small allowance), and all
 * files together at most `maxChunkReferences`. Pauses every SHARD_RECORDS_PER_STEP terms.
 */
async function checkChunkReferences(blocks: UploadShardBlocks, maxChunkReferences: number, signal: AbortSignal | undefined): Promise<number> {
  const { view, fileBlocks } = blocks;
  let total = 0;
  let termsInStep = 0;
  for (let index = 0; index < fileBlocks.length; index++) {
    const at = fileBlocks[index];
    const termCount = fileBlockTermCount(view, at);
    let references = 0;
    let bytes = 0;
    for (let t = 0; t < termCount; t++) {
      const record = termRecordAt(at, t);
      references += termChunkEnd(view, record) - termChunkStart(view, record);
      bytes += termUnpackedBytes(view, record);
    }
    const allowed = Math.floor(bytes / MIN_CLIENT_CHUNK_BYTES) + 1 + SMALL_FILE_CHUNK_ALLOWANCE;
    if (references > allowed) {
      throw new ShardRejectedError(
        "chunk_references_exceed_file_size",
        `file ${hashToHex(blocks.bytes.subarray(at, at + 32))} (file block ${index}) references ${references} chunks for ${bytes} bytes, more than the ${allowed} a file of that size can have (chunks are at least ${MIN_CLIENT_CHUNK_BYTES} bytes except the last): list each chunk of the file once, in order`,
      );
    }
    total += references;
    if (total > maxChunkReferences) {
      throw new ShardRejectedError(
        "too_many_chunk_references",
        `the shard's files reference more than ${maxChunkReferences} chunks in all (this server's CASTOR_MAX_SHARD_CHUNK_REFS), reached at file block ${index}: upload the files in several smaller shards`,
      );
    }
    termsInStep += 1 + termCount;
    if (termsInStep >= SHARD_RECORDS_PER_STEP) {
      termsInStep = 0;
      await yieldToEventLoop();
      signal?.throwIfAborted();
    }
  }
  return total;
}
