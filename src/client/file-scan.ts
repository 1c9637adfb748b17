/**
 * Reading a file for upload: its bytes in batches of whole chunks (content-defined boundaries,
 * docs/protocol.md §4), each chunk's hash, and the file's SHA-256.
 *
 * A batch is one buffer holding whole chunks back to back. The bytes after its last cut (a
 * partial chunk) are carried to the front of the next batch's buffer, so every chunk is one
 * contiguous view and none is assembled from pieces.
 *
 * Buffers are handed back with `release` once their chunks are packed, and reused: a fresh
 * multi-MiB buffer costs page faults on first touch (~1.3 ms per MiB measured here), far more
 * than reading into it.
 *
 * Everything but the SHA-256 of large files (file-digest.ts) runs on the calling thread. A
 * worker thread for the boundary search was measured and dropped: with the WebAssembly scanner
 * (gear-scan.ts) a 256 MiB upload needs ~1.6 s of CPU in all, and on 2 cores shared with the
 * server a second thread that needs castor's modules only added contention (and, under tsx,
 * ~0.4 s of start-up per process).
 */
import { createHash } from "node:crypto";
import { open, type FileHandle } from "node:fs/promises";
import { ChunkBoundaryScanner, HASH_BYTES, MAX_CHUNK_SIZE, chunkHash, type MerkleEntry } from "../format/index.js";
import { WORKER_DIGEST_MIN_BYTES, sha256OfFileInWorker, type PendingDigest } from "./file-digest.js";
import { GearBoundaryScanner } from "./gear-scan.js";

/** Bytes read per batch: large enough that per-read overhead vanishes, small enough to reuse. */
export const SCAN_READ_BYTES = 4 * 1024 * 1024;
/** A batch buffer: one read plus the partial chunk carried in front of it. */
export const SCAN_BUFFER_BYTES = SCAN_READ_BYTES + MAX_CHUNK_SIZE;
/** Released buffers kept for reuse. */
const MAX_SPARE_BUFFERS = 4;

export interface ScannedBatch {
  /** The batch buffer; whole chunks fill `bytes[0, ends[ends.length - 1])`. */
  bytes: Uint8Array;
  /** End offset of each chunk in `bytes`; chunk i starts at `ends[i - 1]` (0 for i = 0). */
  ends: Uint32Array;
  /** The chunks' hashes, 32 bytes each: chunk i's at `32 · i`. */
  hashes: Uint8Array;
}

/** Bytes of whole chunks in a batch. */
export function batchChunkBytes(batch: Pick<ScannedBatch, "ends">): number {
  return batch.ends.length === 0 ? 0 : batch.ends[batch.ends.length - 1];
}

/** Appends a batch's chunks to `leaves` as Merkle leaves (hash copied out of the reused batch buffer, size). */
export function pushBatchLeaves(batch: Pick<ScannedBatch, "ends" | "hashes">, leaves: MerkleEntry[]): void {
  let start = 0;
  for (let i = 0; i < batch.ends.length; i++) {
    leaves.push({ hash: batch.hashes.slice(i * HASH_BYTES, (i + 1) * HASH_BYTES), size: batch.ends[i] - start });
    start = batch.ends[i];
  }
}

type BoundaryScanner = Pick<ChunkBoundaryScanner, "bytesSeen" | "update" | "finish">;

/** The pure core: boundaries, carry-over and hashes for a stream of reads. */
export class ChunkBatcher {
  private readonly scanner: BoundaryScanner;
  private readonly carry = new Uint8Array(MAX_CHUNK_SIZE);
  private carryLength = 0;

  /** `scanner` is for tests; the WebAssembly one is used wherever it runs. */
  constructor(scanner: BoundaryScanner = GearBoundaryScanner.create() ?? new ChunkBoundaryScanner()) {
    this.scanner = scanner;
  }

  /** Copies the carried partial chunk to the front of `buffer`; returns where new bytes go. */
  begin(buffer: Uint8Array): number {
    if (buffer.length < this.carryLength + 1) throw new RangeError("a batch buffer must hold the carried partial chunk and new bytes");
    buffer.set(this.carry.subarray(0, this.carryLength), 0);
    return this.carryLength;
  }

  /**
   * `buffer[start, start + length)` was just read (start = what `begin` returned); `last` ends
   * the stream, cutting the final, possibly short, chunk.
   */
  complete(buffer: Uint8Array, start: number, length: number, last: boolean): ScannedBatch {
    // Stream offset of buffer[0]: the carried bytes were fed to the scanner before.
    const base = this.scanner.bytesSeen - start;
    const cuts = this.scanner.update(buffer.subarray(start, start + length));
    if (last) cuts.push(...this.scanner.finish());
    const ends = new Uint32Array(cuts.length);
    const hashes = new Uint8Array(cuts.length * HASH_BYTES);
    let chunkStart = 0;
    for (let i = 0; i < cuts.length; i++) {
      const end = cuts[i] - base;
      ends[i] = end;
      hashes.set(chunkHash(buffer.subarray(chunkStart, end)), i * HASH_BYTES);
      chunkStart = end;
    }
    const tail = buffer.subarray(chunkStart, start + length);
    this.carry.set(tail, 0);
    this.carryLength = tail.length;
    return { bytes: buffer, ends, hashes };
  }
}

/** A read failure, with the system error code when there is one. */
export class ScanError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface FileScan extends AsyncIterable<ScannedBatch> {
  /** The file's SHA-256 (raw digest); call once every batch was read. */
  sha256(): Promise<Uint8Array>;
  /** Gives a batch's buffer back once nothing refers to its bytes any more. */
  release(batch: ScannedBatch): void;
}

/**
 * Scans `path` (`size` bytes as stat said: large files get their SHA-256 from a worker thread,
 * see file-digest.ts); a failing open or read ends the iteration with a `ScanError`.
 */
export function scanFile(path: string, size: number): FileScan {
  return new PooledFileScan(path, size >= WORKER_DIGEST_MIN_BYTES);
}

class PooledFileScan implements FileScan {
  private readonly spare: Uint8Array[] = [];
  private digest: Promise<Uint8Array> | null = null;

  constructor(
    private readonly path: string,
    private readonly digestInWorker: boolean,
  ) {}

  async *[Symbol.asyncIterator](): AsyncIterator<ScannedBatch> {
    let handle: FileHandle;
    try {
      handle = await open(this.path, "r");
    } catch (error) {
      throw asScanError(error);
    }
    let pending: PendingDigest | null = null;
    let complete = false;
    try {
      const batcher = new ChunkBatcher();
      const sha256 = this.digestInWorker ? null : createHash("sha256");
      if (this.digestInWorker) {
        pending = sha256OfFileInWorker(this.path);
        this.digest = pending.digest;
        // Awaited only at the end; an I/O failure meanwhile must not go unhandled.
        this.digest.catch(() => undefined);
      }
      let position = 0;
      for (;;) {
        const buffer = this.spare.pop() ?? new Uint8Array(SCAN_BUFFER_BYTES);
        const start = batcher.begin(buffer);
        let bytesRead: number;
        try {
          ({ bytesRead } = await handle.read(buffer, start, SCAN_READ_BYTES, position));
        } catch (error) {
          throw asScanError(error);
        }
        position += bytesRead;
        sha256?.update(buffer.subarray(start, start + bytesRead));
        const last = bytesRead === 0;
        if (last && sha256 !== null) this.digest = Promise.resolve(new Uint8Array(sha256.digest()));
        complete = last;
        yield batcher.complete(buffer, start, bytesRead, last);
        if (last) return;
      }
    } finally {
      // Abandoned (a failed upload): the worker must not go on reading a file nobody waits for.
      if (!complete) void pending?.cancel();
      await handle.close().catch(() => undefined);
    }
  }

  async sha256(): Promise<Uint8Array> {
    if (this.digest === null) throw new Error("the scan has not reached the end of the file");
    try {
      return await this.digest;
    } catch (error) {
      throw asScanError(error);
    }
  }

  release(batch: ScannedBatch): void {
    if (this.spare.length < MAX_SPARE_BUFFERS && batch.bytes.length === SCAN_BUFFER_BYTES) this.spare.push(batch.bytes);
  }
}

function asScanError(error: unknown): ScanError {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return new ScanError(error instanceof Error ? error.message : String(error), typeof code === "string" ? code : undefined, { cause: error });
}
