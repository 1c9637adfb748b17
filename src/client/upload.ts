/**
 * Uploading files (docs/protocol.md §3–§7, docs/interface.md §4.1 operations 3–5):
 *
 * 1. A write token from the hub (kept fresh by `TokenProvider`).
 * 2. Each file is read in 4 MiB batches of whole chunks (file-scan.ts: content-defined cuts
 *    found by a WebAssembly gear scanner, chunk hashes, the SHA-256 on the same bytes); batch
 *    buffers are reused, and memory never holds the whole file.
 * 3. Chunks gather in a small look-ahead window. The first chunk of every file and each chunk
 *    meeting the 1-in-1024 rule, unless already known, is asked about with
 *    `GET /v1/chunks/default/{hash}` (404 = miss; any other failure is also treated as a miss,
 *    as both real clients do). A hit is a shard whose chunk hashes are keyed with its footer
 *    key; its xorbs join the session's `ChunkIndex`. Only when the window's queries are
 *    answered is each chunk decided, so a hit also serves the chunks before it in the window.
 * 4. Known chunks become term pieces referencing their xorb; new chunks are packed into xorbs
 *    (≤ 64 MiB uncompressed — less toward the end, see `newBuilder` — ≤ 8,192 chunks). Each
 *    chunk not known on arrival starts compressing at once (`compressChunkBestAsync`: LZ4 on
 *    libuv's thread pool, in parallel with the reading). A full xorb is sealed and uploaded in
 *    the background through `node:http` (no body copies), at most `concurrency` at a time: the
 *    reader waits for a free slot, which bounds memory to a few xorbs; the bodies of sent
 *    xorbs are reused.
 * 5. When every file is read and every xorb acknowledged, ONE shard (more only past 64 MiB of
 *    records) registers all files — terms, one verification hash per term, the SHA-256 — and
 *    lists the new xorbs: `POST /v1/shards`.
 *
 * What the client already knows saves most of that (shard-cache.ts, `cacheDir`):
 *
 * - Every chunk not known yet is looked up in the local shard cache first (an in-memory set of
 *   indexed chunks; a hit loads one shard from disk); only a miss that is a first or
 *   1-in-1024 chunk then goes to global dedup. Each acknowledged xorb and each dedup answer is
 *   written to the cache, so a re-run after an interruption skips the xorbs already stored.
 * - A file whose first chunk turns out to be stored is first hashed whole (no compression, no
 *   sending) and asked about with `HEAD /v1/files/{file_id}`: when the token's repository
 *   has it already, nothing is sent for it and the shard leaves it out.
 * - A cache can be stale (the server lost a xorb since: `castor gc`). The server then refuses
 *   the shard (400, missing xorb); `StaleCacheError` tells the caller to clear the cache and
 *   upload again (`CastorClient.upload` does).
 */
import { stat } from "node:fs/promises";
import {
  HASH_BYTES,
  MAX_XORB_CHUNKS,
  MAX_XORB_UNCOMPRESSED_BYTES,
  compressChunkBestAsync,
  fileHash as computeFileHash,
  hashToHex,
  isGlobalDedupEligible,
  parseFullShard,
  serializeUploadShard,
  shardSha256FromDigest,
  type Hash,
  type MerkleEntry,
} from "../format/index.js";
import type { CasClient } from "./cas.js";
import { Limiter, TaskPool } from "../concurrency.js";
import { CastorClientError, HttpStatusError } from "./errors.js";
import { ScanError, batchChunkBytes, pushBatchLeaves, scanFile, type ScannedBatch } from "./file-scan.js";
import { readBodyBounded, readJson } from "./http.js";
import { ChunkIndex, FileBuilder, XorbBuilder, hashMapKey, planShards, toShardFile, type BuiltFile, type SealedXorb } from "./packing.js";
import type { ProgressListener } from "./progress.js";
import { DEFAULT_CACHE_MAX_BYTES, ShardCache } from "./shard-cache.js";

export interface UploadedFile {
  path: string;
  /** The file hash (hex string form): what `download` takes. */
  fileHash: string;
  size: number;
  /** Standard lowercase SHA-256 hex of the content. */
  sha256: string;
  /**
   * Bytes of this file's chunks that were sent (uncompressed size; packed into xorbs this
   * upload sent). The server may still have had some of them: see `xorbs.alreadyStored`.
   */
  newBytes: number;
  /** Bytes of chunks not sent: known stored on the server, or sent earlier in this upload. */
  dedupedBytes: number;
  /** The repository had the whole file already (`HEAD /v1/files/…`): nothing was sent or registered for it. */
  alreadyStored: boolean;
}

export interface UploadResult {
  files: UploadedFile[];
  totalBytes: number;
  newBytes: number;
  dedupedBytes: number;
  xorbs: {
    /** Xorbs the server stored for the first time. */
    inserted: number;
    /** Xorbs the server already had (`was_inserted: false`). */
    alreadyStored: number;
    /** Serialized bytes sent. */
    bytesSent: number;
  };
  shards: { sent: number; registered: number };
  globalDedup: { queries: number; hits: number; failures: number };
  /** The local shard cache: shards loaded from it, and whether a stale one forced a second attempt. */
  cache: { enabled: boolean; hits: number; retriedAfterStale: boolean };
}

export interface UploadRunOptions {
  onProgress?: ProgressListener;
  /** Xorbs uploaded at once (each holds up to 64 MiB in memory); default 4. */
  concurrency?: number;
  /**
   * The local shard cache's folder (shard-cache.ts; `defaultCacheDir()` is where the CLI keeps
   * it); absent or null: no cache, only global dedup.
   */
  cacheDir?: string | null;
  /** Bound of the cache, bytes of shards across all servers; default 256 MiB. */
  cacheMaxBytes?: number;
}

/**
 * The server refused the shard while it named xorbs known only from the local cache: the
 * cache is stale. Clear it (`cache.clear()`) and upload again.
 */
export class StaleCacheError extends CastorClientError {
  override readonly name: string = "StaleCacheError";
  constructor(
    readonly cache: ShardCache,
    /** Serialized bytes this attempt sent, for the caller's report. */
    readonly bytesSent: number,
    cause: HttpStatusError,
  ) {
    super("http", `${cause.message} (the local shard cache named xorbs this server no longer has)`, { cause });
  }
}

/** The smallest xorb `newBuilder` plans for the end of an upload. */
const MIN_TAIL_XORB_BYTES = 8 * 1024 * 1024;
/** Spare xorb bodies kept for reuse: a fresh 64 MiB buffer costs ~80 ms of page faults. */
const MAX_SPARE_BODIES = 2;
/** Chunks decided together once their dedup queries are answered. */
const LOOKAHEAD_BYTES = 8 * 1024 * 1024;
const DEDUP_QUERY_CONCURRENCY = 4;
/** A dedup answer is a shard, which the spec caps at 64 MiB. */
const MAX_DEDUP_ANSWER_BYTES = 64 * 1024 * 1024 + 4096;
const MAX_SMALL_JSON_BYTES = 64 * 1024;
export const DEFAULT_UPLOAD_CONCURRENCY = 4;

interface PendingChunk {
  data: Uint8Array;
  hash: Hash;
  /** Started on arrival for a chunk not known then, so it runs while later chunks are read. */
  compressed: Promise<Compressed> | null;
}

type Compressed = Awaited<ReturnType<typeof compressChunkBestAsync>>;

export class UploadRun {
  private readonly index = new ChunkIndex();
  private readonly spareBodies: Uint8Array[] = [];
  private builder: XorbBuilder;
  private readonly xorbBlocks: SealedXorb["block"][] = [];
  private readonly pool: TaskPool;
  private readonly dedupLimiter = new Limiter(DEDUP_QUERY_CONCURRENCY);
  /** Chunks already looked up (cache, then global dedup): never twice in a run. */
  private readonly queried = new Set<string>();
  private cache: ShardCache | null = null;
  /** Whether any chunk was resolved from the cache (then a refused shard means a stale cache). */
  private usedCache = false;
  /** Chunks at which a file starts: indexed in the cache with their xorb. */
  private readonly fileStarts = new Set<string>();
  private readonly result: UploadResult = {
    files: [],
    totalBytes: 0,
    newBytes: 0,
    dedupedBytes: 0,
    xorbs: { inserted: 0, alreadyStored: 0, bytesSent: 0 },
    shards: { sent: 0, registered: 0 },
    globalDedup: { queries: 0, hits: 0, failures: 0 },
    cache: { enabled: false, hits: 0, retriedAfterStale: false },
  };
  private bytesTotal = 0;
  private bytesDone = 0;

  constructor(
    private readonly cas: CasClient,
    private readonly options: UploadRunOptions = {},
  ) {
    this.pool = new TaskPool(options.concurrency ?? DEFAULT_UPLOAD_CONCURRENCY);
    this.builder = this.newBuilder();
  }

  async run(paths: readonly string[]): Promise<UploadResult> {
    if (paths.length === 0) throw new CastorClientError("usage", "no files to upload");
    const sizes = await Promise.all(paths.map(regularFileSize));
    this.bytesTotal = sizes.reduce((sum, size) => sum + size, 0);
    this.builder = this.newBuilder();
    // Credentials are checked before any reading: a wrong token should not wait for 10 GB of chunking.
    const { casUrl } = await this.cas.tokens.get();
    if (this.options.cacheDir != null) {
      this.cache = await ShardCache.open(this.options.cacheDir, casUrl, this.options.cacheMaxBytes ?? DEFAULT_CACHE_MAX_BYTES);
      this.result.cache.enabled = true;
    }
    try {
      const built: { path: string; file: BuiltFile | StoredFile; newBytes: number }[] = [];
      for (const [i, path] of paths.entries()) {
        const stored = await this.storedFile(path, sizes[i]);
        built.push(stored !== null ? { path, file: stored, newBytes: 0 } : { path, ...(await this.readFile(path, sizes[i])) });
      }
      if (this.builder.chunkCount > 0) await this.sealAndSend();
      this.progress("uploading");
      await this.pool.drain();

      this.progress("registering");
      const shardFiles = built.flatMap(({ file }) => ("terms" in file ? [toShardFile(file)] : []));
      if (shardFiles.length > 0 || this.xorbBlocks.length > 0) {
        for (const content of planShards({ files: shardFiles, xorbs: this.xorbBlocks })) {
          await this.sendShard(serializeUploadShard(content, { kind: "xet-core" }));
        }
      }
      for (const { path, file, newBytes } of built) {
        this.result.files.push({
          path,
          fileHash: hashToHex(file.fileHash),
          size: file.size,
          sha256: hashToHex(file.sha256),
          newBytes,
          dedupedBytes: file.size - newBytes,
          alreadyStored: !("terms" in file),
        });
        this.result.totalBytes += file.size;
        this.result.newBytes += newBytes;
      }
      this.result.dedupedBytes = this.result.totalBytes - this.result.newBytes;
      await this.cache?.evict();
      return this.result;
    } catch (error) {
      // Let uploads in flight end before reporting, so no request outlives the call.
      await this.pool.settle();
      await this.cache?.flush();
      throw error;
    }
  }

  /**
   * A file the repository already has, asked about before anything of it is sent: only when
   * its first chunk is stored (else the file cannot be) is it hashed whole — chunk hashes and
   * SHA-256, no compression — and its file hash asked about with `HEAD /v1/files/{id}`.
   */
  private async storedFile(path: string, size: number): Promise<StoredFile | null> {
    if (size === 0) return null;
    const first = await firstChunkHash(path);
    if (first === null) return null;
    if (!this.index.has(first)) {
      const key = hashMapKey(first);
      if (!this.queried.has(key)) {
        this.queried.add(key);
        await this.lookUp(first, true);
      }
      if (!this.index.has(first)) return null;
    }
    const doneBefore = this.bytesDone;
    const leaves: MerkleEntry[] = [];
    const scan = scanFile(path, size);
    try {
      for await (const batch of scan) {
        pushBatchLeaves(batch, leaves);
        this.bytesDone += batchChunkBytes(batch);
        scan.release(batch);
        this.progress("checking", path);
      }
      const fileHash = computeFileHash(leaves);
      const sha256 = shardSha256FromDigest(await scan.sha256());
      if ((await this.cas.fileSize(fileHash)) === size) return { fileHash, size, sha256 };
    } catch (error) {
      if (error instanceof ScanError) throw ioError(path, error);
      throw error;
    }
    // Not stored as a whole: the file is read again, this time for upload.
    this.bytesDone = doneBefore;
    return null;
  }

  private async readFile(path: string, size: number): Promise<{ file: BuiltFile; newBytes: number }> {
    const file = new FileBuilder();
    let window: PendingChunk[] = [];
    let windowBytes = 0;
    /** Batches whose chunks sit in the window: their buffers go back once it is decided. */
    let windowBatches: ScannedBatch[] = [];
    let queries: Promise<void>[] = [];
    let newBytes = 0;

    const admit = (data: Uint8Array, hash: Hash) => {
      const firstOfFile = file.chunkCount === 0 && window.length === 0;
      const known = this.index.has(hash);
      if (!known) {
        const key = hashMapKey(hash);
        const askServer = firstOfFile || isGlobalDedupEligible(hash);
        if (!this.queried.has(key) && (askServer || this.cache?.has(hash))) {
          this.queried.add(key);
          queries.push(this.lookUp(hash, askServer));
        }
      }
      let compressed: Promise<Compressed> | null = null;
      if (!known) {
        compressed = compressChunkBestAsync(data);
        // Awaited when the chunk is packed; one that turns out known is simply dropped.
        compressed.catch(() => undefined);
      }
      window.push({ data, hash, compressed });
      windowBytes += data.length;
    };
    const decideWindow = async () => {
      await Promise.all(queries);
      queries = [];
      for (const { data, hash, compressed } of window) {
        let location = this.index.lookup(hash, file.lastLocation);
        if (location === null) {
          if (!this.builder.canTake(data.length)) await this.sealAndSend();
          const payload = await (compressed ?? compressChunkBestAsync(data));
          location = { xorb: this.builder.handle, index: this.builder.add(data, hash, payload) };
          this.index.addSessionChunk(hash, location);
          newBytes += data.length;
          if (file.chunkCount === 0) this.fileStarts.add(hashMapKey(hash));
        } else if (location.xorb.origin === "server") {
          this.usedCache ||= location.xorb.fromCache;
        }
        file.addChunk(location, hash, data.length);
      }
      // A compression started for a chunk that turned out known still reads its batch.
      await Promise.allSettled(window.map((chunk) => chunk.compressed));
      window = [];
      windowBytes = 0;
      // Every chunk of these batches is packed (copied) or deduplicated: no view of them is left.
      for (const batch of windowBatches) scan.release(batch);
      windowBatches = [];
    };

    const scan = scanFile(path, size);
    try {
      for await (const batch of scan) {
        const chunkBytes = batchChunkBytes(batch);
        let start = 0;
        for (let i = 0; i < batch.ends.length; i++) {
          const end = batch.ends[i];
          // The hash may be kept (index, shard): a view of the batch's hash array, which unlike
          // its byte buffer is never reused.
          admit(batch.bytes.subarray(start, end), batch.hashes.subarray(i * HASH_BYTES, (i + 1) * HASH_BYTES));
          start = end;
        }
        windowBatches.push(batch);
        if (windowBytes >= LOOKAHEAD_BYTES) await decideWindow();
        this.bytesDone += chunkBytes;
        this.progress("reading", path);
      }
      await decideWindow();
      return { file: file.finish(shardSha256FromDigest(await scan.sha256())), newBytes };
    } catch (error) {
      if (error instanceof ScanError) throw ioError(path, error);
      throw error;
    }
  }

  /**
   * What is known about `hash`: the local cache's shard for it, then (if `askServer`: a first
   * or 1-in-1024 chunk, and the cache did not tell) global dedup.
   */
  private async lookUp(hash: Hash, askServer: boolean): Promise<void> {
    if (this.cache?.has(hash)) {
      const shard = await this.cache.load(hash);
      if (shard !== null) {
        this.index.importDedupShard(shard, { fromCache: true });
        this.result.cache.hits++;
      }
      if (this.index.has(hash)) return;
    }
    if (askServer) await this.queryGlobalDedup(hash);
  }

  /** Asks the server whether it stores `hash`; a hit adds the answer's xorbs to the index. */
  private queryGlobalDedup(hash: Hash): Promise<void> {
    const hex = hashToHex(hash);
    return this.dedupLimiter.run(async () => {
      this.result.globalDedup.queries++;
      try {
        const response = await this.cas.request({
          what: `asking global deduplication about chunk ${hex}`,
          path: `/v1/chunks/default/${hex}`,
          passStatuses: [404],
          // A rate-limited dedup query is a miss, not worth waiting for (xet-core does the same).
          retry: { maxAttempts: 2 },
        });
        if (response.status === 404) {
          await response.body?.cancel();
          return;
        }
        const bytes = await readBodyBounded(response, MAX_DEDUP_ANSWER_BYTES, `global dedup answer for ${hex}`);
        const shard = parseFullShard(bytes);
        this.index.importDedupShard(shard);
        if (shard.xorbs.length > 0) {
          this.result.globalDedup.hits++;
          this.cache?.putAnswer(bytes, hash);
        }
      } catch {
        // Dedup is an optimisation: without an answer the chunk is simply uploaded.
        this.result.globalDedup.failures++;
      }
    });
  }

  private async sealAndSend(): Promise<void> {
    const sealed = this.builder.seal();
    this.builder = this.newBuilder();
    this.xorbBlocks.push(sealed.block);
    await this.pool.submit(async () => {
      await this.sendXorb(sealed);
      // Stored: a re-run (after Ctrl-C, or of a near-duplicate) finds it in the cache.
      this.cache?.putXorb(sealed.block, (hash) => this.fileStarts.has(hashMapKey(hash)));
      // The request is answered: nothing reads the body any more.
      if (this.spareBodies.length < MAX_SPARE_BODIES) this.spareBodies.push(new Uint8Array(sealed.bytes.buffer));
    });
  }

  /**
   * Xorbs are 64 MiB until the bytes left to read would fill fewer than two, then half of what
   * is left (at least 8 MiB): the server still has to take the last xorb after the reading is
   * done, so a small last xorb shortens that tail (~0.25 s for 64 MiB here).
   */
  private newBuilder(): XorbBuilder {
    const left = Math.max(0, this.bytesTotal - this.bytesDone);
    const maxUncompressedBytes = Math.min(MAX_XORB_UNCOMPRESSED_BYTES, Math.max(MIN_TAIL_XORB_BYTES, Math.ceil(left / 2)));
    return new XorbBuilder({ maxChunks: MAX_XORB_CHUNKS, maxUncompressedBytes }, (capacity) => {
      const spare = this.spareBodies.pop();
      return spare !== undefined && spare.length >= capacity ? spare : new Uint8Array(capacity);
    });
  }

  private async sendXorb(xorb: SealedXorb): Promise<void> {
    const hex = hashToHex(xorb.info.hash);
    const what = `uploading xorb ${hex}`;
    const response = await this.cas.request({ what, method: "POST", path: `/v1/xorbs/default/${hex}`, body: xorb.bytes, bulk: true });
    const body = await readJson(response, MAX_SMALL_JSON_BYTES, what);
    const inserted = (body as { was_inserted?: unknown } | null)?.was_inserted;
    if (typeof inserted !== "boolean") throw new CastorClientError("protocol", `${what}: the answer has no boolean was_inserted`);
    if (inserted) this.result.xorbs.inserted++;
    else this.result.xorbs.alreadyStored++;
    this.result.xorbs.bytesSent += xorb.bytes.length;
    this.progress(this.bytesDone < this.bytesTotal ? "reading" : "uploading");
  }

  private async sendShard(bytes: Uint8Array): Promise<void> {
    const what = "registering the files (shard upload)";
    let response: Response;
    try {
      response = await this.cas.request({ what, method: "POST", path: "/v1/shards", body: bytes });
    } catch (error) {
      // Any other 400 would be a bug of this client; retrying without the cache shows it anyway.
      if (error instanceof HttpStatusError && error.status === 400 && this.usedCache && this.cache !== null) {
        throw new StaleCacheError(this.cache, this.result.xorbs.bytesSent, error);
      }
      throw error;
    }
    const body = await readJson(response, MAX_SMALL_JSON_BYTES, what);
    const result = (body as { result?: unknown } | null)?.result;
    if (result !== 0 && result !== 1) throw new CastorClientError("protocol", `${what}: the answer's result is not 0 or 1`);
    this.result.shards.sent++;
    if (result === 1) this.result.shards.registered++;
  }

  private progress(phase: "checking" | "reading" | "uploading" | "registering", file?: string): void {
    this.options.onProgress?.({
      operation: "upload",
      phase,
      bytesDone: this.bytesDone,
      bytesTotal: this.bytesTotal,
      transferredBytes: this.result.xorbs.bytesSent,
      ...(file === undefined ? {} : { file }),
    });
  }
}

/** A file the repository has already: what the result reports about it. */
interface StoredFile {
  fileHash: Hash;
  size: number;
  sha256: Hash;
}

/** The hash of the file's first chunk (read from its first batch only); null for an empty file. */
async function firstChunkHash(path: string): Promise<Hash | null> {
  // Size 0: a peek needs no SHA-256 worker.
  const scan = scanFile(path, 0);
  try {
    for await (const batch of scan) {
      // A batch without a cut (a file shorter than one chunk): its one chunk comes with the next.
      if (batch.ends.length > 0) return batch.hashes.slice(0, HASH_BYTES);
    }
  } catch (error) {
    if (error instanceof ScanError) throw ioError(path, error);
    throw error;
  }
  return null;
}

async function regularFileSize(path: string): Promise<number> {
  let info;
  try {
    info = await stat(path);
  } catch (error) {
    throw ioError(path, error);
  }
  if (!info.isFile()) throw new CastorClientError("io", `cannot upload ${path}: it is not a regular file`);
  return info.size;
}

function ioError(path: string, error: unknown): CastorClientError {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  const reason =
    code === "ENOENT"
      ? "no such file"
      : code === "EACCES"
        ? "permission denied"
        : code === "EISDIR"
          ? "it is a directory"
          : error instanceof Error
            ? error.message
            : String(error);
  return new CastorClientError("io", `cannot read ${path}: ${reason}`, { cause: error });
}
