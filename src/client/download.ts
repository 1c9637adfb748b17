/**
 * Downloading a file by its hash (docs/protocol.md §8, docs/interface.md §4.1 operations 1–2):
 *
 * 1. A read token from the hub.
 * 2. The file is reconstructed window by window (256 MiB by default, as xet-core starts):
 *    `GET /v2/reconstructions/{hash}` with `Range: bytes=S-E`, falling back to V1 for the
 *    rest of the download when V2 answers 404 or 501. A window shorter than asked for, or a
 *    416, is the end of the file.
 * 3. Each term needs one fetch range of its xorb. Ranges are fetched with single-range GETs
 *    (exactly one signed range per request, no multipart) read straight from the socket into
 *    their buffer (`HttpClient.getInto`), at most `concurrency` at once and at most
 *    `bufferBytes` of them held ahead of the writer — but
 *    the next range is always fetched while the current one is written, so the network never
 *    waits for the disk; a range several terms share is fetched once while it stays in that
 *    window. A 403 (expired URL) re-queries the window's reconstruction and retries with the
 *    fresh URL; a range whose connection breaks mid-way (an object store restarting behind the
 *    server) is fetched again, whole.
 * 4. Ranges are parsed chunk by chunk (8-byte headers), each chunk decompressed and hashed as
 *    soon as its bytes are in (while the rest of the range still arrives); terms are written in
 *    order — the first one from `offset_into_first_range`, the output cut at the requested
 *    end. A file output is written to a temporary file renamed into place on success and
 *    removed on failure; its range buffers are reused once written, since a fresh multi-MiB
 *    buffer costs more in page faults than filling it from the network.
 *
 * Resuming: a whole-file download into a path first looks for the partial file an earlier run
 * of the same download left (download-output.ts; only a killed run leaves one). Its bytes are
 * chunked as any upload chunks them — content-defined cuts found in a prefix are the file's
 * own cuts — and every whole chunk but the last is kept: their hashes join the file hash
 * check, and the download continues at the byte after them. A prefix that was damaged makes
 * that check fail, which removes the partial file: the next run starts afresh.
 *
 * What is verified: every chunk decodes to its declared length and every term to its
 * `unpacked_length`. When the download covers the whole file, the file hash is recomputed
 * from the chunk hashes (each chunk counted once, though windows overlap at a chunk) and must
 * equal the requested hash — any wrong byte fails the download. A partial range cannot be
 * tied to the file hash (that needs every chunk); there, each fetched range that turns out to
 * be a whole xorb is checked against the xorb hash, and the result says how many were.
 *
 * This file plans the windows, fetches the ranges and writes the terms; asking the
 * reconstruction API (step 2, and the fresh URLs of step 3) is reconstruction-query.ts, the
 * output file or stream download-output.ts.
 */
import { stat } from "node:fs/promises";
import type { Writable } from "node:stream";
import { fileHash, hashEquals, hashFromHex, isHashHex, isZeroHash, xorbHash, type FetchSource, type Hash, type MerkleEntry } from "../format/index.js";
import type { CasClient } from "./cas.js";
import { ChunkStreamDecoder } from "./chunk-stream.js";
import { Limiter } from "../concurrency.js";
import { fileSink, partialPathOf, streamSink, type Sink } from "./download-output.js";
import { ScanError, pushBatchLeaves, scanFile } from "./file-scan.js";
import { CastorClientError, HttpStatusError } from "./errors.js";
import type { ProgressListener } from "./progress.js";
import { ReconstructionQueries, ReconstructionWindow, spanKey, type Reconstruction } from "./reconstruction-query.js";

export interface ByteRangeRequest {
  /** First byte, from 0. */
  start: number;
  /** Last byte, inclusive; may lie past the end of the file (the output then stops there). */
  end: number;
}

export interface DownloadRunOptions {
  /** Hex string form of the file hash. */
  fileHash: string;
  /** A path (written through a temporary file) or a stream. */
  output: string | Writable;
  range?: ByteRangeRequest;
  onProgress?: ProgressListener;
  /** Bytes asked of the reconstruction API at once; default 256 MiB. */
  windowBytes?: number;
  /** Xorb ranges fetched at once; default 4. */
  concurrency?: number;
  /** Fetched bytes held ahead of the writer (the range being written and the next one may exceed it); default 64 MiB. */
  bufferBytes?: number;
  /** End a stream output when done (default true; false for stdout). */
  endOutput?: boolean;
  /** The file's size when the caller knows it (progress shows a total from the start); else asked with HEAD /v1/files. */
  expectedSize?: number;
  /** Resume from a partial file an interrupted run left (default true; whole-file downloads into a path only). */
  resume?: boolean;
}

export interface DownloadResult {
  fileHash: string;
  bytesWritten: number;
  /**
   * `file-hash`: the whole file was downloaded and hashes to `fileHash`; `chunks`: a part was
   * downloaded, every chunk decoded to its declared size (see `xorbsVerified`).
   */
  verified: "file-hash" | "chunks";
  /** Fetched ranges that held a whole xorb and matched its hash. */
  xorbsVerified: number;
  reconstructionVersion: 1 | 2;
  rangesFetched: number;
  bytesFetched: number;
  /** Bytes kept from the partial file of an interrupted run (0: downloaded from the start). */
  resumedBytes: number;
}

export const DEFAULT_WINDOW_BYTES = 256 * 1024 * 1024;
export const DEFAULT_DOWNLOAD_CONCURRENCY = 4;
export const DEFAULT_BUFFER_BYTES = 64 * 1024 * 1024;
/** Ranges fetched ahead of the writer whatever their size: the next one overlaps the write. */
const MIN_RANGES_AHEAD = 1;

// ---------------------------------------------------------------------------------------------

export class DownloadRun {
  private readonly queries: ReconstructionQueries;
  private readonly limiter: Limiter;
  private readonly windowBytes: number;
  private readonly bufferBytes: number;
  private rangesFetched = 0;
  private bytesFetched = 0;
  private xorbsVerified = 0;
  private bytesWritten = 0;
  /** Output size once known: from the range, or from the window that reaches the file's end. */
  private bytesTotal: number | null = null;
  /** Range buffers, reused only when the sink lets go of written buffers. */
  private buffers = new RangeBufferPool(false);

  constructor(
    private readonly cas: CasClient,
    private readonly options: DownloadRunOptions,
  ) {
    this.queries = new ReconstructionQueries(cas, options.fileHash);
    this.limiter = new Limiter(options.concurrency ?? DEFAULT_DOWNLOAD_CONCURRENCY);
    this.windowBytes = options.windowBytes ?? DEFAULT_WINDOW_BYTES;
    this.bufferBytes = options.bufferBytes ?? DEFAULT_BUFFER_BYTES;
    if (!Number.isSafeInteger(this.windowBytes) || this.windowBytes < 1) throw new RangeError("windowBytes must be a positive integer");
  }

  async run(): Promise<DownloadResult> {
    const { fileHash: hex, range, output } = this.options;
    if (!isHashHex(hex)) {
      throw new CastorClientError("usage", `a file hash is 64 lowercase hexadecimal characters, got ${JSON.stringify(hex.slice(0, 100))}`);
    }
    if (range !== undefined) checkRange(range);
    const expected = hashFromHex(hex);
    // Check credentials before creating any output.
    if (!isZeroHash(expected)) await this.cas.tokens.get();

    if (range === undefined && !isZeroHash(expected)) this.bytesTotal = this.options.expectedSize ?? (await this.cas.fileSize(expected));
    let resume: ResumePoint | null = null;
    let sink: Sink;
    if (typeof output === "string") {
      const partial = partialPathOf(output, hex);
      if (range === undefined && !isZeroHash(expected) && this.options.resume !== false) resume = await resumePoint(partial, this.bytesTotal);
      sink = await fileSink(output, partial, resume?.offset ?? 0);
    } else {
      sink = streamSink(output, this.options.endOutput ?? true);
    }
    this.bytesWritten = resume?.offset ?? 0;
    this.buffers = new RangeBufferPool(sink.releasesWrittenBuffers);
    try {
      const verified = await this.transfer(hex, expected, sink, resume);
      await sink.commit();
      return {
        fileHash: hex,
        bytesWritten: this.bytesWritten,
        verified,
        xorbsVerified: this.xorbsVerified,
        reconstructionVersion: this.queries.version,
        rangesFetched: this.rangesFetched,
        bytesFetched: this.bytesFetched,
        resumedBytes: resume?.offset ?? 0,
      };
    } catch (error) {
      // The server or the network failed, not the data: what arrived is kept for the next run to resume (its whole chunks, checked against the file hash at the end).
      const resumable = typeof output === "string" && range === undefined && !isZeroHash(expected) && this.options.resume !== false;
      const transient = error instanceof HttpStatusError ? error.status >= 500 : error instanceof CastorClientError && error.kind === "network";
      const kept = resumable && transient && this.bytesWritten > 0 ? await sink.keep() : null;
      if (kept === null) {
        await sink.abandon();
      } else if (error instanceof Error) {
        error.message += `; the ${this.bytesWritten} bytes received so far are kept in ${kept}: run the same download again to resume`;
      }
      throw error;
    }
  }

  private async transfer(hex: string, expected: Hash, sink: Sink, resume: ResumePoint | null): Promise<"file-hash" | "chunks"> {
    const range = this.options.range;
    const first = range?.start ?? resume?.offset ?? 0;
    const last = range?.end ?? Number.MAX_SAFE_INTEGER;
    // The empty file has no reconstruction to ask for (hf.js does not ask either).
    if (isZeroHash(expected)) {
      if (first > 0) throw new CastorClientError("usage", `the range starts at byte ${first}, past the end of the file (0 bytes)`);
      return "file-hash";
    }
    // Leaves of the file hash, when the download starts at byte 0 and may reach the end.
    const leaves: MerkleEntry[] | null = resume !== null ? resume.leaves : first === 0 ? [] : null;
    let leafBytes = resume?.offset ?? 0;
    let reachedEnd = false;

    if (range !== undefined) this.bytesTotal = range.end - range.start + 1;
    for (let windowStart = first; windowStart <= last; ) {
      const windowEnd = Math.min(last, windowStart + this.windowBytes - 1);
      const window = new ReconstructionWindow(this.queries, windowStart, windowEnd);
      const reconstruction = await window.load();
      if (reconstruction === null) {
        if (windowStart === first && first > 0) {
          const size = window.fileSize === null ? "" : ` (${window.fileSize} bytes)`;
          throw new CastorClientError("usage", `the range starts at byte ${first}, past the end of the file${size}`);
        }
        reachedEnd = true;
        break;
      }
      const wanted = windowEnd - windowStart + 1;
      const available = reconstruction.terms.reduce((sum, term) => sum + term.unpackedLength, 0) - reconstruction.offsetIntoFirstRange;
      if (available < wanted) this.bytesTotal = this.bytesWritten + Math.max(0, available);
      let filePosition = windowStart - reconstruction.offsetIntoFirstRange;
      const written = await this.writeWindow(window, reconstruction, sink, wanted, (chunkHash, length) => {
        if (leaves !== null) {
          if (filePosition === leafBytes) {
            leaves.push({ hash: chunkHash, size: length });
            leafBytes += length;
          } else if (filePosition + length > leafBytes) {
            throw new CastorClientError(
              "protocol",
              `reconstruction windows disagree: a chunk at byte ${filePosition} (${length} bytes) neither follows nor repeats the chunks before byte ${leafBytes}`,
            );
          }
        }
        filePosition += length;
      });
      if (written < wanted) {
        reachedEnd = true;
        break;
      }
      windowStart = windowEnd + 1;
    }

    if (leaves !== null && reachedEnd) {
      const actual = fileHash(leaves);
      if (!hashEquals(actual, expected)) {
        const output =
          typeof this.options.output === "string"
            ? `the output file was not kept${resume === null ? "" : " (nor the partial file it resumed, which may have been the damaged part: run again)"}`
            : "discard what was written to the output stream";
        throw new CastorClientError("integrity", `the downloaded content does not hash to ${hex}: the server sent wrong data; ${output}`);
      }
      return "file-hash";
    }
    return "chunks";
  }

  /**
   * Writes one window's terms in order, fetching ranges ahead within the buffer budget;
   * `onChunk` sees every chunk of every term (hash, length) in file order. Returns the bytes
   * written for this window.
   */
  private async writeWindow(
    window: ReconstructionWindow,
    reconstruction: Reconstruction,
    sink: Sink,
    wanted: number,
    onChunk: (hash: Hash, length: number) => void,
  ): Promise<number> {
    const { terms } = reconstruction;
    const cache = new Map<string, RangeFetch>();
    let held = 0;
    let ahead = 0;
    const scheduleUpTo = (cursor: number) => {
      while (ahead < terms.length) {
        const span = terms[ahead].span;
        const key = spanKey(span);
        const entry = cache.get(key);
        if (entry !== undefined) {
          entry.uses++;
        } else {
          const bytes = spanLength(span);
          // Over the budget, still fetch the next range while the current one is written.
          if (ahead > cursor && held + bytes > this.bufferBytes && cache.size > MIN_RANGES_AHEAD) break;
          const buffer = this.buffers.take(bytes);
          const decoder = new ChunkStreamDecoder(buffer, span.chunks.end - span.chunks.start, describeSpan(span));
          const done = this.limiter
            .run(() => window.fetchSpan(span, (url) => this.fetchDecoded(span, url, decoder)))
            .catch((error: unknown) => {
              decoder.fail(error);
              throw error;
            });
          // Waited on through the decoder; this only keeps an early failure from being "unhandled".
          done.catch(() => undefined);
          cache.set(key, { buffer, decoder, done, uses: 1, bytes });
          held += bytes;
        }
        ahead++;
      }
    };

    let skip = reconstruction.offsetIntoFirstRange;
    let remaining = wanted;
    let parts: Uint8Array[] = [];
    const flush = async () => {
      if (parts.length === 0) return;
      const written = parts;
      parts = [];
      await sink.write(written);
      for (const part of written) this.bytesWritten += part.length;
      this.reportProgress();
    };
    try {
      for (let cursor = 0; cursor < terms.length; cursor++) {
        scheduleUpTo(cursor);
        const term = terms[cursor];
        const key = spanKey(term.span);
        const entry = cache.get(key)!;
        const { decoder } = entry;
        const from = term.chunkStart - term.span.chunks.start;
        const to = term.chunkEnd - term.span.chunks.start;
        let termBytes = 0;
        // Chunks are written as they are decoded, while the rest of their range still arrives.
        for (let c = from; c < to; c++) {
          if (decoder.decodedCount <= c) {
            await flush();
            await decoder.whenDecoded(c + 1);
            if (decoder.decodedCount <= c) throw new CastorClientError("protocol", `${describeSpan(term.span)}: the range ended before chunk ${c}`);
          }
          const chunk = decoder.chunks[c];
          termBytes += chunk.length;
          onChunk(decoder.hashes[c], chunk.length);
          if (remaining === 0) continue;
          if (skip >= chunk.length) {
            skip -= chunk.length;
            continue;
          }
          const part = chunk.subarray(skip, Math.min(chunk.length, skip + remaining));
          skip = 0;
          remaining -= part.length;
          parts.push(part);
        }
        if (termBytes !== term.unpackedLength) {
          throw new CastorClientError(
            "integrity",
            `chunks ${term.chunkStart}..${term.chunkEnd} of xorb ${term.xorbHex} unpack to ${termBytes} bytes, the reconstruction says ${term.unpackedLength}`,
          );
        }
        await flush();
        if (--entry.uses === 0) {
          cache.delete(key);
          held -= entry.bytes;
          // Written (and awaited) by every term that uses it: once its fetch is over, the buffer is free.
          await entry.done;
          this.buffers.give(entry.buffer);
        }
        if (remaining === 0) break;
      }
    } finally {
      // Fetches still running end before the window is left (their results are dropped).
      await Promise.allSettled([...cache.values()].map((entry) => entry.done));
    }
    return wanted - remaining;
  }

  /**
   * Fetches one range into its decoder's buffer, decoding as the bytes arrive; called through
   * the window, which knows the URLs. "expired" (a 403) delivers no byte to the decoder. A
   * range fetched again after its connection broke refills the buffer from the front with the
   * same bytes; the decoder goes on from the first chunk it has not decoded.
   */
  private async fetchDecoded(span: FetchSource, url: string, decoder: ChunkStreamDecoder): Promise<"expired" | "done"> {
    const what = describeSpan(span);
    const buffer = decoder.bytes;
    // No Authorization header: transfer URLs authorise themselves and must not see the token.
    const { status } = await this.cas.http.getInto(
      { what, url, headers: { range: `bytes=${span.bytes.start}-${span.bytes.end}` }, passStatuses: [403] },
      buffer,
      (filled) => decoder.advance(filled),
    );
    if (status === 403) return "expired";
    const decoded = decoder.finish();
    this.rangesFetched++;
    this.bytesFetched += buffer.length;
    const hash = hashFromHex(span.xorbHex);
    if (hashEquals(xorbHash(decoded.chunks.map((chunk, i) => ({ hash: decoded.hashes[i], size: chunk.length }))), hash)) {
      this.xorbsVerified++;
    }
    return "done";
  }

  private reportProgress(): void {
    this.options.onProgress?.({
      operation: "download",
      phase: "downloading",
      bytesDone: this.bytesWritten,
      bytesTotal: this.bytesTotal,
      transferredBytes: this.bytesFetched,
    });
  }
}

/** Where a download resumes: the bytes kept and the hashes of their chunks. */
interface ResumePoint {
  offset: number;
  leaves: MerkleEntry[];
}

/**
 * The whole chunks of a partial file, the last one left out (it may have been cut short);
 * null when there is no partial file, nothing to keep, or it is longer than the file.
 */
async function resumePoint(partial: string, fileSize: number | null): Promise<ResumePoint | null> {
  const info = await stat(partial).catch(() => null);
  if (info === null || !info.isFile() || info.size === 0 || (fileSize !== null && info.size > fileSize)) return null;
  const leaves: MerkleEntry[] = [];
  const scan = scanFile(partial, 0);
  try {
    for await (const batch of scan) {
      pushBatchLeaves(batch, leaves);
      scan.release(batch);
    }
  } catch (error) {
    if (error instanceof ScanError) return null;
    throw error;
  }
  leaves.pop();
  const offset = leaves.reduce((sum, leaf) => sum + leaf.size, 0);
  return offset === 0 ? null : { offset, leaves };
}

/** A range being fetched for a window: its buffer, decoded progressively, and how many terms still need it. */
interface RangeFetch {
  buffer: Uint8Array;
  decoder: ChunkStreamDecoder;
  /** Settles when the fetch is over (decoded whole, or failed). */
  done: Promise<void>;
  uses: number;
  bytes: number;
}

function spanLength(span: FetchSource): number {
  return span.bytes.end - span.bytes.start + 1;
}

function describeSpan(span: FetchSource): string {
  return `downloading chunks ${span.chunks.start}..${span.chunks.end} of xorb ${span.xorbHex}`;
}

/**
 * Buffers for fetched ranges, reused when `reuse` is set. Ranges from 1 MiB up get a pooled
 * buffer of the next power-of-two size (only the bytes used are ever touched, so the rounding
 * costs address space, not memory); smaller ones a fresh one, which malloc serves cheaply.
 */
class RangeBufferPool {
  private static readonly MIN_POOLED_BYTES = 1024 * 1024;
  private static readonly MAX_SPARE_PER_SIZE = 2;
  private readonly spare = new Map<number, ArrayBuffer[]>();

  constructor(private readonly reuse: boolean) {}

  take(length: number): Uint8Array {
    if (!this.reuse || length < RangeBufferPool.MIN_POOLED_BYTES) return new Uint8Array(length);
    const size = 2 ** Math.ceil(Math.log2(length));
    const buffer = this.spare.get(size)?.pop() ?? new ArrayBuffer(size);
    return new Uint8Array(buffer, 0, length);
  }

  give(buffer: Uint8Array): void {
    if (!this.reuse || buffer.length < RangeBufferPool.MIN_POOLED_BYTES) return;
    const size = buffer.buffer.byteLength;
    const list = this.spare.get(size) ?? [];
    if (list.length < RangeBufferPool.MAX_SPARE_PER_SIZE && !list.includes(buffer.buffer as ArrayBuffer)) list.push(buffer.buffer as ArrayBuffer);
    this.spare.set(size, list);
  }
}

function checkRange(range: ByteRangeRequest): void {
  const ok = Number.isSafeInteger(range.start) && Number.isSafeInteger(range.end) && range.start >= 0 && range.end >= range.start;
  if (!ok) {
    throw new CastorClientError("usage", `a byte range needs whole numbers 0 ≤ start ≤ end (end inclusive), got ${range.start}-${range.end}`);
  }
}
