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
 */
import { stat } from "node:fs/promises";
import {
  HASH_BYTES,
  MAX_XORB_CHUNKS,
  MAX_XORB_UNCOMPRESSED_BYTES,
  compressChunkBestAsync,
  hashToHex,
  isGlobalDedupEligible,
  parseFullShard,
  serializeUploadShard,
  shardSha256FromDigest,
  type Hash,
} from "../format/index.js";
import type { CasClient } from "./cas.js";
import { Limiter, TaskPool } from "./concurrency.js";
import { CastorClientError } from "./errors.js";
import { ScanError, batchChunkBytes, scanFile, type ScannedBatch } from "./file-scan.js";
import { readBodyBounded, readJson } from "./http.js";
import { ChunkIndex, FileBuilder, XorbBuilder, hashMapKey, planShards, toShardFile, type BuiltFile, type SealedXorb } from "./packing.js";
import type { ProgressListener } from "./progress.js";

export interface UploadedFile {
  path: string;
  /** The file hash (hex string form): what `download` takes. */
  fileHash: string;
  size: number;
  /** Standard lowercase SHA-256 hex of the content. */
  sha256: string;
  /** Bytes of chunks this upload stored for the first time. */
  newBytes: number;
  /** Bytes of chunks found already stored (earlier in this upload or on the server). */
  dedupedBytes: number;
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
}

export interface UploadRunOptions {
  onProgress?: ProgressListener;
  /** Xorbs uploaded at once (each holds up to 64 MiB in memory); default 4. */
  concurrency?: number;
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
  private readonly queried = new Set<string>();
  private readonly result: UploadResult = {
    files: [],
    totalBytes: 0,
    newBytes: 0,
    dedupedBytes: 0,
    xorbs: { inserted: 0, alreadyStored: 0, bytesSent: 0 },
    shards: { sent: 0, registered: 0 },
    globalDedup: { queries: 0, hits: 0, failures: 0 },
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
    await this.cas.tokens.get();
    try {
      const built: { path: string; file: BuiltFile; newBytes: number }[] = [];
      for (const [i, path] of paths.entries()) built.push({ path, ...(await this.readFile(path, sizes[i])) });
      if (this.builder.chunkCount > 0) await this.sealAndSend();
      this.progress("uploading");
      await this.pool.drain();

      this.progress("registering");
      const shardFiles = built.map(({ file }) => toShardFile(file));
      for (const content of planShards({ files: shardFiles, xorbs: this.xorbBlocks })) {
        await this.sendShard(serializeUploadShard(content, { kind: "xet-core" }));
      }
      for (const { path, file, newBytes } of built) {
        this.result.files.push({
          path,
          fileHash: hashToHex(file.fileHash),
          size: file.size,
          sha256: hashToHex(file.sha256),
          newBytes,
          dedupedBytes: file.size - newBytes,
        });
        this.result.totalBytes += file.size;
        this.result.newBytes += newBytes;
      }
      this.result.dedupedBytes = this.result.totalBytes - this.result.newBytes;
      return this.result;
    } catch (error) {
      // Let uploads in flight end before reporting, so no request outlives the call.
      await this.pool.settle();
      throw error;
    }
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
      if ((firstOfFile || isGlobalDedupEligible(hash)) && !this.queried.has(hashMapKey(hash)) && !this.index.has(hash)) {
        this.queried.add(hashMapKey(hash));
        queries.push(this.queryGlobalDedup(hash));
      }
      let compressed: Promise<Compressed> | null = null;
      if (!this.index.has(hash)) {
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
        const shard = parseFullShard(await readBodyBounded(response, MAX_DEDUP_ANSWER_BYTES, `global dedup answer for ${hex}`));
        this.index.importDedupShard(shard);
        if (shard.xorbs.length > 0) this.result.globalDedup.hits++;
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
    const response = await this.cas.request({ what, method: "POST", path: "/v1/shards", body: bytes });
    const body = await readJson(response, MAX_SMALL_JSON_BYTES, what);
    const result = (body as { result?: unknown } | null)?.result;
    if (result !== 0 && result !== 1) throw new CastorClientError("protocol", `${what}: the answer's result is not 0 or 1`);
    this.result.shards.sent++;
    if (result === 1) this.result.shards.registered++;
  }

  private progress(phase: "reading" | "uploading" | "registering", file?: string): void {
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
