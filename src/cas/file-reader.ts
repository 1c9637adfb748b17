/**
 * Server-side file reconstruction: the bytes of a registered file, rebuilt from its terms and
 * streamed, for plain HTTP downloads (`GET /{repo}/resolve/{rev}/{path}`) by clients that do
 * not speak Xet (curl, wget, browsers).
 *
 *     const file = await reader.open(fileHash);      // null: no such file registered
 *     file.size;                                     // to check a Range header against
 *     file.read({ start, end });                     // a Readable of bytes start..end (inclusive)
 *
 * A file is its terms in order, a term chunks [a, b) of one xorb (docs/protocol.md §8.3). The
 * reader walks the terms overlapping the requested bytes and cuts them into *spans*: runs of
 * whole chunks of one term holding at most `maxSpanBytes` of the stored xorb. Each span is one
 * ranged blob read, located through the xorb's chunk table (§5.5); only the chunks overlapping
 * the range are read, and the first and last are trimmed after decoding.
 *
 * Verification: a span's chunks are decoded (none / LZ4 / BG4+LZ4) one at a time just before
 * they are pushed, and each must have the header its chunk table entry implies and decode to
 * bytes that hash to the chunk hash recorded when the xorb was uploaded. A damaged or tampered
 * blob therefore destroys the stream with a `FileReadError` before any of its wrong bytes goes
 * out. (Bytes of the chunks before it may have been sent; an HTTP response is then cut short,
 * which clients detect against its Content-Length.)
 *
 * Memory is bounded whatever the file's size: `readAheadSpans` spans are read ahead of the one
 * being decoded — so the disk or S3 works while the CPU decodes — and decoded bytes are pushed
 * chunk by chunk under the stream's backpressure. A consumer that stops reading leaves at most
 * 1 + `readAheadSpans` spans requested; destroying the stream aborts the reads in progress,
 * and its 'close' event waits until every blob handle they opened is released. Chunk tables
 * are loaded as the walk reaches their xorbs (a few terms' worth per metadata query), and the
 * last few are kept for files whose terms come back to a xorb.
 *
 * Span buffers are reused, and a reader keeps a few idle ones: fresh multi-MiB buffers must be
 * faulted in by the kernel, which cost more than decoding them (the in-process FileReader
 * doubled its MB/s with reuse; src/http/buffer-pool.ts found the same for the transfer route).
 * So no pushed byte may point into a span buffer: an uncompressed chunk is copied out, as
 * decoded chunks are fresh memory anyway.
 *
 * Not here: who may read which file (the route checks the file belongs to the repository).
 */
import { Readable, addAbortSignal } from "node:stream";
import { decompressChunk } from "../format/compression.js";
import { isFormatError } from "../format/errors.js";
import { HASH_BYTES, chunkHash, hashToHex, type Hash } from "../format/hash.js";
import { ChunkTable } from "../format/ranges.js";
import { XORB_CHUNK_HEADER_BYTES, readChunkHeader } from "../format/xorb.js";
import type { CasMetadataStore, FileRecord, XorbRecord } from "../metadata/cas.js";
import { blobKey, isBlobStoreError, type BlobKey, type BlobStore, type ByteSpan } from "../storage/blob-store.js";

// ---------------------------------------------------------------------------------------------
// Options

export interface FileReaderOptions {
  /**
   * Spans read ahead of the one being decoded (default 2). 0 reads one span at a time, leaving
   * the disk idle while the CPU decodes.
   */
  readAheadSpans?: number;
  /**
   * Largest blob read (default 4 MiB): a term covering a whole 64 MiB xorb is read in pieces
   * this big, so read-ahead never holds whole xorbs. A single chunk larger than this (at most
   * 256 KiB + its header) is still one span.
   */
  maxSpanBytes?: number;
  /**
   * Decoded bytes a stream buffers for a slow consumer before it stops decoding (default
   * 64 KiB, about one chunk). Piped into a response, the bytes mostly go out as they are pushed;
   * a consumer calling `read()` gets the buffered pieces concatenated, a copy that grows with it.
   */
  highWaterMark?: number;
}

export interface FileReaderDeps extends FileReaderOptions {
  /** Where file and xorb records come from; a caching wrapper may stand in for the store. */
  metadata: Pick<CasMetadataStore, "getFile" | "getXorbs">;
  /** Where xorb bytes are stored (`xorbs/<hex>` keys); positional reads are used where offered. */
  blobs: SpanSource;
}

/** The part of a `BlobStore` the reader uses. */
export type SpanSource = Pick<BlobStore, "read" | "openSpan">;

/**
 * Tried with `npm run bench -- file-read` on the shared 2-core machine: 1 or 4 spans of read-ahead,
 * 1 or 8 MiB spans and a 256 KiB or 1 MiB high-water mark did no better, within its noise.
 */
export const DEFAULT_READ_AHEAD_SPANS = 2;
export const DEFAULT_MAX_SPAN_BYTES = 4 * 1024 * 1024;
export const DEFAULT_HIGH_WATER_MARK = 64 * 1024;

/**
 * Bytes of idle span buffers a reader keeps (at least one buffer): the read-ahead of a few
 * concurrent downloads with the defaults. More are allocated when needed and left to the GC.
 */
const IDLE_SPAN_BUFFER_BYTES = 32 * 1024 * 1024;

/** Terms looked ahead when a chunk table is missing: their missing xorbs come in the same query. */
const TABLE_LOOKAHEAD_TERMS = 8;
/** Chunk tables a stream keeps for terms that return to a xorb (≤ ~400 KiB each, typically ~50 KiB). */
const KEPT_TABLES = 16;

// ---------------------------------------------------------------------------------------------
// Errors

export type FileReadErrorCode =
  /** A term's xorb has no record, or its blob is not stored. */
  | "missing_xorb"
  /** A stored xorb's bytes disagree with its record: too short, a bad header, undecodable, or a wrong hash. */
  | "corrupt_xorb"
  /** The file's records disagree with each other (terms vs size, a term vs its xorb's chunk table). */
  | "inconsistent_records";

/**
 * Why a file cannot be served. Never the downloader's fault: every code means lost or damaged
 * data on the server, which an operator has to repair (re-upload the xorb, restore a backup).
 */
export class FileReadError extends Error {
  override readonly name = "FileReadError";
  constructor(
    readonly code: FileReadErrorCode,
    message: string,
  ) {
    super(message);
  }
}

// ---------------------------------------------------------------------------------------------
// The reader and its files

/** Bytes `start`..`end` of a file, both INCLUSIVE (as a Range header names them). */
export interface FileByteRange {
  start: number;
  end: number;
}

export class FileReader {
  private readonly metadata: FileReaderDeps["metadata"];
  private readonly blobs: SpanSource;
  private readonly options: Required<FileReaderOptions>;
  private readonly spanBuffers: SpanBuffers;

  constructor(deps: FileReaderDeps) {
    this.metadata = deps.metadata;
    this.blobs = deps.blobs;
    this.options = {
      readAheadSpans: checkedInteger(deps.readAheadSpans ?? DEFAULT_READ_AHEAD_SPANS, 0, "readAheadSpans"),
      maxSpanBytes: checkedInteger(deps.maxSpanBytes ?? DEFAULT_MAX_SPAN_BYTES, 1, "maxSpanBytes"),
      highWaterMark: checkedInteger(deps.highWaterMark ?? DEFAULT_HIGH_WATER_MARK, 1, "highWaterMark"),
    };
    this.spanBuffers = new SpanBuffers(this.options.maxSpanBytes);
  }

  /**
   * The registered file `fileHash`, ready to be read; null when no file of that hash is
   * registered. Rejects with `inconsistent_records` when its terms do not add up to its size.
   */
  async open(fileHash: Hash): Promise<StoredFile | null> {
    const record = await this.metadata.getFile(fileHash);
    if (record === null) return null;
    return new StoredFile(record, termOffsetsOf(record), { metadata: this.metadata, blobs: this.blobs, spanBuffers: this.spanBuffers, options: this.options });
  }
}

/** What the streams of one `FileReader` share. */
interface ReaderContext {
  readonly metadata: FileReaderDeps["metadata"];
  readonly blobs: SpanSource;
  readonly spanBuffers: SpanBuffers;
  readonly options: Required<FileReaderOptions>;
}

/** A registered file: its size, and its bytes as a stream. */
export class StoredFile {
  readonly hash: Hash;
  readonly size: number;

  /** @internal built by `FileReader.open` */
  constructor(
    private readonly record: FileRecord,
    /** File offset where each term starts; entry `terms.length` is the size. */
    private readonly termOffsets: Float64Array,
    private readonly context: ReaderContext,
  ) {
    this.hash = record.hash;
    this.size = record.size;
  }

  /**
   * Streams bytes `range.start`..`range.end` (inclusive), or the whole file. The caller has
   * checked the range against `size` (a RangeError otherwise: an empty file has no byte to
   * name, so it is read whole). Reading starts when the stream is first read; failures destroy
   * it with a `FileReadError` (or the blob store's own error for I/O failures).
   */
  read(range?: FileByteRange): Readable {
    const { start, end } = range ?? { start: 0, end: this.size - 1 };
    if (range !== undefined && !(Number.isSafeInteger(start) && Number.isSafeInteger(end) && 0 <= start && start <= end && end < this.size)) {
      throw new RangeError(`bytes ${start}-${end} are not a range within file ${hashToHex(this.hash)} of ${this.size} bytes`);
    }
    const { metadata, options } = this.context;
    const planner = new SpanPlanner(this.record, this.termOffsets, new XorbTables(metadata, this.record), start, end + 1, options.maxSpanBytes);
    return new FileByteStream(planner, this.context, start, end + 1);
  }
}

function termOffsetsOf(record: FileRecord): Float64Array {
  const offsets = new Float64Array(record.terms.length + 1);
  for (let k = 0; k < record.terms.length; k++) offsets[k + 1] = offsets[k] + record.terms[k].unpackedLength;
  const total = offsets[record.terms.length];
  if (total !== record.size) {
    throw new FileReadError("inconsistent_records", `file ${hashToHex(record.hash)} records ${record.size} bytes but its terms hold ${total}: the metadata database is damaged`);
  }
  return offsets;
}

function checkedInteger(value: number, min: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`${name} must be an integer ≥ ${min}, got ${value}`);
  return value;
}

// ---------------------------------------------------------------------------------------------
// The stream

/** A span whose bytes are in memory, and how far its chunks have been pushed. */
interface LoadedSpan {
  readonly plan: SpanPlan;
  /** The span's stored bytes: chunks `plan.firstChunk` .. `plan.endChunk - 1`, headers included. */
  readonly bytes: Uint8Array;
  /** The next chunk to decode and push. */
  chunk: number;
  /** File offset of that chunk's first byte. */
  fileOffset: number;
}

/**
 * Pushes the decoded bytes of planned spans in order, with `readAheadSpans` span reads running
 * ahead of the span being pushed.
 *
 * Flow: `_read` runs `pump`, which pushes chunks of the current span until `push` says the
 * consumer has enough (then the next `_read` resumes it) or the span is spent; it then takes
 * the next span from `loads`, topping the read-ahead back up first, and waits for it if it is
 * still being read. Spans are planned one after another (`planning` chains them, since each
 * continues where the last one ended) and read as soon as they are planned.
 */
class FileByteStream extends Readable {
  /** Spans planned and being read or read, in file order; the first is the next to push. */
  private readonly loads: Promise<LoadedSpan | null>[] = [];
  /** Every span read not yet settled, so that destroy can wait for their handles to close. */
  private readonly unsettled = new Set<Promise<unknown>>();
  private readonly abort = new AbortController();
  private planning: Promise<SpanPlan | null> = Promise.resolve(null);
  private planEnded = false;
  private current: LoadedSpan | null = null;
  /** Set while the pump waits for a span read: `_read` calls then have nothing to add. */
  private waiting = false;

  constructor(
    private readonly planner: SpanPlanner,
    private readonly context: ReaderContext,
    /** The requested bytes of the file, END EXCLUSIVE. */
    private readonly rangeStart: number,
    private readonly rangeEnd: number,
  ) {
    super({ highWaterMark: context.options.highWaterMark });
  }

  override _read(): void {
    if (!this.waiting) this.pump();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.abort.abort();
    // 'close' only once every read has let go of its blob handle or stream.
    Promise.allSettled([...this.unsettled]).then(() => callback(error));
  }

  private pump(): void {
    try {
      // Pushing either spends the current span (which clears it) or fills the consumer's buffer.
      if (this.current !== null && !this.pushChunks(this.current)) return;
      this.topUpReadAhead();
      this.waiting = true;
      this.loads.shift()!.then(
        (loaded) => {
          this.waiting = false;
          if (this.destroyed) return;
          if (loaded === null) {
            this.push(null);
            return;
          }
          this.current = loaded;
          this.pump();
        },
        (error: unknown) => {
          this.waiting = false;
          this.destroy(error as Error);
        },
      );
    } catch (error) {
      this.destroy(error as Error);
    }
  }

  /**
   * Decodes, verifies, trims and pushes the span's remaining chunks; once the last one is out,
   * gives the span's buffer back and clears `current`. False when the consumer has enough for now.
   */
  private pushChunks(span: LoadedSpan): boolean {
    const { plan, bytes } = span;
    let wanted = true;
    while (wanted && span.chunk < plan.endChunk) {
      const data = decodeVerifiedChunk(plan, bytes, span.chunk);
      const from = Math.max(0, this.rangeStart - span.fileOffset);
      const to = Math.min(data.length, this.rangeEnd - span.fileOffset);
      span.chunk++;
      span.fileOffset += data.length;
      if (to > from) {
        // An uncompressed chunk is a view into the span buffer, which is about to be reused.
        const kept = data.buffer === bytes.buffer ? data.slice(from, to) : data.subarray(from, to);
        const piece = Buffer.from(kept.buffer, kept.byteOffset, kept.length);
        wanted = this.push(piece);
      }
    }
    if (span.chunk === plan.endChunk) {
      this.current = null;
      this.context.spanBuffers.give(bytes);
    }
    return wanted;
  }

  /**
   * Plans and starts span reads until `readAheadSpans` + 1 are queued (the next one and those
   * ahead of it). Once a plan turned out to be the last, no more are queued; a few plans queued
   * before that was known simply resolve to null too.
   */
  private topUpReadAhead(): void {
    while (this.loads.length <= this.context.options.readAheadSpans && !this.planEnded) {
      const plan = this.planning.then(() => (this.abort.signal.aborted ? null : this.planner.next()));
      this.planning = plan;
      const load = plan.then((planned) => {
        if (planned === null) {
          this.planEnded = true;
          return null;
        }
        return this.load(planned);
      });
      // Awaited in order by the pump; a failure it never reaches (destroyed first) must not
      // count as an unhandled rejection.
      load.catch(() => undefined);
      this.unsettled.add(load);
      load.finally(() => this.unsettled.delete(load)).catch(() => undefined);
      this.loads.push(load);
    }
  }

  private async load(plan: SpanPlan): Promise<LoadedSpan> {
    const bytes = await readSpan(this.context, plan.xorb, plan.bytes, this.abort.signal);
    return { plan, bytes, chunk: plan.firstChunk, fileOffset: plan.fileOffset };
  }
}

// ---------------------------------------------------------------------------------------------
// Planning: terms → spans

/** Chunks `firstChunk` .. `endChunk - 1` of one term's xorb, read with one blob read. */
interface SpanPlan {
  readonly xorb: XorbTable;
  readonly firstChunk: number;
  readonly endChunk: number;
  /** The stored bytes holding exactly those chunks. */
  readonly bytes: ByteSpan;
  /** File offset of the first chunk's first byte (before the requested start, for a trimmed first chunk). */
  readonly fileOffset: number;
}

/**
 * Walks the terms overlapping [rangeStart, rangeEnd) and cuts them into spans: the first term
 * from the chunk holding rangeStart, the last through the chunk holding rangeEnd − 1, both
 * found by binary search in the xorb's chunk table. `next()` calls must not overlap.
 */
class SpanPlanner {
  /** The term being cut. */
  private term: number;
  /** Its xorb's table, once the term is entered; null before. */
  private xorb: XorbTable | null = null;
  /** Within an entered term: the next chunk to plan, and the end of the term's chunks to read. */
  private chunk = 0;
  private chunkEnd = 0;
  /** File offset of the next byte to plan: a term's start until the term is entered. */
  private offset: number;

  constructor(
    private readonly file: FileRecord,
    private readonly termOffsets: Float64Array,
    private readonly tables: XorbTables,
    private readonly rangeStart: number,
    private readonly rangeEnd: number,
    private readonly maxSpanBytes: number,
  ) {
    this.term = firstIndexAbove(termOffsets, 1, file.terms.length + 1, rangeStart) - 1;
    this.offset = termOffsets[this.term];
  }

  /** The next span, or null once the range is covered. */
  async next(): Promise<SpanPlan | null> {
    if (this.offset >= this.rangeEnd) return null;
    const xorb = this.xorb ?? (await this.enterTerm());
    const offsets = xorb.chunks.serializedOffsets;
    const first = this.chunk;
    let end = first + 1;
    while (end < this.chunkEnd && offsets[end + 1] - offsets[first] <= this.maxSpanBytes) end++;
    const plan: SpanPlan = {
      xorb,
      firstChunk: first,
      endChunk: end,
      bytes: { offset: offsets[first], length: offsets[end] - offsets[first] },
      fileOffset: this.offset,
    };
    this.offset += xorb.chunks.unpackedLength(first, end);
    if (end === this.chunkEnd) {
      this.term++;
      this.xorb = null;
    } else {
      this.chunk = end;
    }
    return plan;
  }

  private async enterTerm(): Promise<XorbTable> {
    const term = this.file.terms[this.term];
    const xorb = await this.tables.forTerm(this.term);
    const table = xorb.chunks;
    // Offsets in the table count from the xorb's first chunk; `base` is where the term starts.
    const base = table.unpackedOffsets[term.chunkStart];
    const termStart = this.termOffsets[this.term];
    const termEnd = this.termOffsets[this.term + 1];
    let first = term.chunkStart;
    if (termStart < this.rangeStart) first = table.chunkHoldingUnpackedByte(base + this.rangeStart - termStart, term.chunkStart, term.chunkEnd);
    let end = term.chunkEnd;
    if (termEnd > this.rangeEnd) end = table.chunkHoldingUnpackedByte(base + this.rangeEnd - 1 - termStart, first, term.chunkEnd) + 1;
    this.xorb = xorb;
    this.chunk = first;
    this.chunkEnd = end;
    this.offset = termStart + table.unpackedOffsets[first] - base;
    return xorb;
  }
}

/** Smallest i in [lo, hi) with values[i] > limit, or hi. */
function firstIndexAbove(values: Float64Array, lo: number, hi: number, limit: number): number {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] > limit) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// ---------------------------------------------------------------------------------------------
// Chunk tables

/** What a stream keeps of a xorb record: the chunk table and the chunk hashes, packed. */
class XorbTable {
  private constructor(
    readonly hex: string,
    readonly key: BlobKey,
    readonly chunks: ChunkTable,
    /** Chunk i's hash at bytes [32 i, 32 i + 32). */
    readonly chunkHashes: Uint8Array,
  ) {}

  /** Checks what the reader relies on: every chunk leaves room for its header. */
  static of(record: XorbRecord, hex: string): XorbTable {
    const count = record.chunks.length;
    const hashes = new Uint8Array(count * HASH_BYTES);
    let previousEnd = 0;
    for (let i = 0; i < count; i++) {
      const chunk = record.chunks[i];
      if (!(chunk.serializedEnd >= previousEnd + XORB_CHUNK_HEADER_BYTES)) {
        throw new FileReadError("inconsistent_records", `the chunk table of xorb ${hex} leaves no room for chunk ${i}'s header: the metadata database is damaged`);
      }
      previousEnd = chunk.serializedEnd;
      hashes.set(chunk.hash, i * HASH_BYTES);
    }
    return new XorbTable(hex, blobKey("xorbs", record.hash), ChunkTable.of(record.chunks), hashes);
  }
}

/**
 * The chunk tables of one stream's xorbs, loaded as terms need them: a missing table is
 * fetched together with those of the next few terms (one metadata query, not one per term),
 * and the last `KEPT_TABLES` used are kept.
 */
class XorbTables {
  /** By hex; Map order is least recently used first. */
  private readonly kept = new Map<string, XorbTable>();

  constructor(
    private readonly metadata: FileReaderDeps["metadata"],
    private readonly file: FileRecord,
  ) {}

  /** The table of term `k`'s xorb, checked to hold the term. */
  async forTerm(k: number): Promise<XorbTable> {
    const term = this.file.terms[k];
    const hex = hashToHex(term.xorbHash);
    if (!this.kept.has(hex)) await this.loadFrom(k);
    const xorb = this.kept.get(hex);
    if (xorb === undefined) {
      throw new FileReadError("missing_xorb", `term ${k} of file ${hashToHex(this.file.hash)} uses xorb ${hex}, which has no record`);
    }
    this.kept.delete(hex);
    this.kept.set(hex, xorb);
    const { chunkStart: a, chunkEnd: b } = term;
    const where = `term ${k} of file ${hashToHex(this.file.hash)}`;
    if (!(a < b && b <= xorb.chunks.chunkCount)) {
      throw new FileReadError("inconsistent_records", `${where} covers chunks [${a}, ${b}) outside xorb ${hex} (${xorb.chunks.chunkCount} chunks): the metadata database is damaged`);
    }
    const length = xorb.chunks.unpackedLength(a, b);
    if (length !== term.unpackedLength) {
      throw new FileReadError("inconsistent_records", `${where} records ${term.unpackedLength} bytes but chunks [${a}, ${b}) of xorb ${hex} hold ${length}: the metadata database is damaged`);
    }
    return xorb;
  }

  private async loadFrom(k: number): Promise<void> {
    const wanted = new Map<string, Hash>();
    const stop = Math.min(this.file.terms.length, k + TABLE_LOOKAHEAD_TERMS);
    for (let i = k; i < stop; i++) {
      const hash = this.file.terms[i].xorbHash;
      const hex = hashToHex(hash);
      if (!this.kept.has(hex)) wanted.set(hex, hash);
    }
    const records = await this.metadata.getXorbs([...wanted.values()]);
    for (const [hex, record] of records) {
      this.kept.set(hex, XorbTable.of(record, hex));
      // TABLE_LOOKAHEAD_TERMS < KEPT_TABLES, so this never evicts a table just loaded.
      if (this.kept.size > KEPT_TABLES) this.kept.delete(this.kept.keys().next().value!);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bytes: reading spans, decoding chunks

/**
 * Span buffers, reused: `take` one of at least a span's length, `give` it back once nothing
 * reads it any more. A buffer never given back (its stream was destroyed) is left to the GC.
 */
class SpanBuffers {
  private readonly idle: Buffer[] = [];
  private readonly maxIdle: number;

  constructor(private readonly bufferBytes: number) {
    this.maxIdle = Math.max(1, Math.floor(IDLE_SPAN_BUFFER_BYTES / bufferBytes));
  }

  /** Uninitialised: the caller fills it before reading it. */
  take(length: number): Uint8Array {
    // A span longer than the buffers is a single chunk bigger than maxSpanBytes: a one-off.
    const buffer = length > this.bufferBytes ? Buffer.allocUnsafeSlow(length) : (this.idle.pop() ?? Buffer.allocUnsafeSlow(this.bufferBytes));
    return new Uint8Array(buffer.buffer, buffer.byteOffset, length);
  }

  give(bytes: Uint8Array): void {
    if (bytes.buffer.byteLength !== this.bufferBytes || this.idle.length >= this.maxIdle) return;
    this.idle.push(Buffer.from(bytes.buffer, 0, this.bufferBytes));
  }
}

/**
 * The stored bytes of `span` of the xorb, read into a span buffer: by positional reads where
 * the store offers them (fs: no intermediate buffers), else from its range stream (S3).
 * Aborting stops the read and releases the handle or stream before the promise settles.
 */
async function readSpan(context: ReaderContext, xorb: XorbTable, span: ByteSpan, signal: AbortSignal): Promise<Uint8Array> {
  signal.throwIfAborted();
  const { blobs } = context;
  const bytes = context.spanBuffers.take(span.length);
  let filled = 0;
  try {
    if (blobs.openSpan) {
      const reader = await blobs.openSpan(xorb.key, span);
      try {
        while (filled < span.length) {
          signal.throwIfAborted();
          const n = await reader.read(bytes.subarray(filled), filled);
          if (n === 0) break;
          filled += n;
        }
      } finally {
        await reader.close();
      }
    } else {
      // Aborting destroys the stream (at once if already aborted), which ends the loop with an
      // AbortError; leaving the loop any other way destroys it too.
      const stream = addAbortSignal(signal, await blobs.read(xorb.key, span));
      for await (const piece of stream) {
        const part = piece as Uint8Array;
        if (filled + part.length > span.length) {
          throw new FileReadError("corrupt_xorb", `the blob store returned more than the ${span.length} bytes asked of xorb ${xorb.hex}`);
        }
        bytes.set(part, filled);
        filled += part.length;
      }
    }
  } catch (error) {
    if (isBlobStoreError(error, "not_found")) {
      throw new FileReadError("missing_xorb", `xorb ${xorb.hex} has a record but its blob is not stored: restore it or have a client upload it again`);
    }
    if (isBlobStoreError(error, "range_not_satisfiable")) {
      throw new FileReadError("corrupt_xorb", `the stored xorb ${xorb.hex} is shorter than its record says (bytes ${span.offset}-${span.offset + span.length - 1} are not all there): it is damaged`);
    }
    throw error;
  }
  if (filled !== span.length) {
    throw new FileReadError("corrupt_xorb", `the stored xorb ${xorb.hex} ended after ${filled} of the ${span.length} bytes at ${span.offset}: it is damaged`);
  }
  return bytes;
}

/**
 * Chunk `index` of the span, decoded and checked: its header must declare the sizes its chunk
 * table entry implies, its payload must decode, and the result must hash to the recorded chunk
 * hash. The result is a view into `bytes` for an uncompressed chunk.
 */
function decodeVerifiedChunk(plan: SpanPlan, bytes: Uint8Array, index: number): Uint8Array {
  const { xorb } = plan;
  const offsets = xorb.chunks.serializedOffsets;
  const start = offsets[index] - plan.bytes.offset;
  const end = offsets[index + 1] - plan.bytes.offset;
  const expectedLength = xorb.chunks.unpackedLength(index, index + 1);
  const damaged = (detail: string) =>
    new FileReadError("corrupt_xorb", `the stored xorb ${xorb.hex} is damaged: chunk ${index} (bytes ${offsets[index]}-${offsets[index + 1] - 1}) ${detail}`);

  const header = readChunkHeader(bytes, start);
  if (header.version !== 0 || header.compressedSize !== end - start - XORB_CHUNK_HEADER_BYTES || header.uncompressedSize !== expectedLength) {
    throw damaged(
      `has header version ${header.version}, ${header.compressedSize} payload bytes and ${header.uncompressedSize} uncompressed, where its record implies version 0, ${end - start - XORB_CHUNK_HEADER_BYTES} and ${expectedLength}`,
    );
  }
  let data: Uint8Array;
  try {
    data = decompressChunk(header.scheme, bytes.subarray(start + XORB_CHUNK_HEADER_BYTES, end), header.uncompressedSize);
  } catch (error) {
    if (isFormatError(error)) throw damaged(`does not decode: ${error.message}`);
    throw error;
  }
  const hash = chunkHash(data);
  const recorded = index * HASH_BYTES;
  for (let i = 0; i < HASH_BYTES; i++) {
    if (hash[i] !== xorb.chunkHashes[recorded + i]) throw damaged("decodes to bytes whose hash differs from the one recorded at upload");
  }
  return data;
}
