/**
 * The machinery behind `FileReader` (file-reader.ts): terms cut into spans (`SpanPlanner`), the
 * chunk tables they are located with (`XorbTables`), spans read ahead into reused buffers and
 * their chunks decoded and verified one at a time (`SpanFeed`). Both ways of consuming a file —
 * the `Readable` and the writer for HTTP responses — drive a `SpanFeed`.
 */
import { addAbortSignal } from "node:stream";
import { decompressChunk } from "../format/compression.js";
import { isFormatError } from "../format/errors.js";
import { HASH_BYTES, chunkHash, hashToHex, type Hash } from "../format/hash.js";
import { ChunkTable } from "../format/ranges.js";
import { XORB_CHUNK_HEADER_BYTES, readChunkHeader } from "../format/xorb.js";
import type { CasMetadataStore, FileRecord, XorbRecord } from "../metadata/cas.js";
import { blobKey, isBlobStoreError, type BlobKey, type BlobStore, type ByteSpan } from "../storage/blob-store.js";

/** Where file and xorb records come from; a caching wrapper may stand in for the store. */
export type FileMetadata = Pick<CasMetadataStore, "getFile" | "getXorbs">;

/** The part of a `BlobStore` the reader uses. */
export type SpanSource = Pick<BlobStore, "read" | "openSpan">;

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
// The feed: spans read ahead, chunks decoded and verified

/** A span whose bytes are in memory, and how far its chunks have been taken. */
export interface LoadedSpan {
  readonly plan: SpanPlan;
  /** The span's stored bytes: chunks `plan.firstChunk` .. `plan.endChunk - 1`, headers included. */
  readonly bytes: Uint8Array;
  /** The next chunk to decode. */
  chunk: number;
  /** File offset of that chunk's first byte. */
  fileOffset: number;
}

export interface SpanFeedContext {
  readonly blobs: SpanSource;
  readonly spanBuffers: SpanBuffers;
  readonly readAheadSpans: number;
}

/**
 * The spans of one read, in file order, with `readAheadSpans` span reads running ahead of the
 * one being consumed (`next()`), and their chunks decoded, verified and trimmed to the range one
 * at a time (`take()`). Spans are planned one after another (`planning` chains them, since each
 * continues where the last one ended) and read as soon as they are planned. `close()` aborts the
 * reads in progress and resolves once every blob handle they opened is released.
 */
export class SpanFeed {
  /** Spans planned and being read or read, in file order; the first is the next one `next()` gives. */
  private readonly loads: Promise<LoadedSpan | null>[] = [];
  /** Every span read not yet settled, so that `close` can wait for their handles. */
  private readonly unsettled = new Set<Promise<unknown>>();
  private readonly abort = new AbortController();
  private planning: Promise<SpanPlan | null> = Promise.resolve(null);
  private planEnded = false;

  constructor(
    private readonly planner: SpanPlanner,
    private readonly context: SpanFeedContext,
    /** The requested bytes of the file, END EXCLUSIVE. */
    private readonly rangeStart: number,
    private readonly rangeEnd: number,
  ) {}

  /**
   * The next span once it is read, null after the last; tops the read-ahead back up first.
   * Calls must not overlap. Rejects with the read's error (an AbortError once closed).
   */
  next(): Promise<LoadedSpan | null> {
    this.topUpReadAhead();
    return this.loads.shift()!;
  }

  /** Whether every chunk of the span has been taken. */
  spent(span: LoadedSpan): boolean {
    return span.chunk === span.plan.endChunk;
  }

  /**
   * The span's next chunk, decoded, verified (throws a `FileReadError` otherwise) and trimmed
   * to the range — possibly empty. A view into `span.bytes` for an uncompressed chunk, else
   * fresh memory.
   */
  take(span: LoadedSpan): Uint8Array {
    const data = decodeVerifiedChunk(span.plan, span.bytes, span.chunk);
    const from = Math.max(0, this.rangeStart - span.fileOffset);
    const to = Math.min(data.length, this.rangeEnd - span.fileOffset);
    span.chunk++;
    span.fileOffset += data.length;
    return to > from ? data.subarray(from, to) : data.subarray(0, 0);
  }

  /** Gives the span's buffer back for reuse: only once nothing reads it any more. */
  release(span: LoadedSpan): void {
    this.context.spanBuffers.give(span.bytes);
  }

  /** Stops reading; resolves once every read has let go of its blob handle or stream. */
  close(): Promise<void> {
    this.abort.abort();
    return Promise.allSettled([...this.unsettled]).then(() => undefined);
  }

  /**
   * Plans and starts span reads until `readAheadSpans` + 1 are queued (the next one and those
   * ahead of it). Once a plan turned out to be the last, no more are queued; a few plans queued
   * before that was known simply resolve to null too.
   */
  private topUpReadAhead(): void {
    while (this.loads.length <= this.context.readAheadSpans && !this.planEnded) {
      const plan = this.planning.then(() => (this.abort.signal.aborted ? null : this.planner.next()));
      this.planning = plan;
      const load = plan.then((planned) => {
        if (planned === null) {
          this.planEnded = true;
          return null;
        }
        return this.load(planned);
      });
      // Awaited in order by the consumer; a failure it never reaches (closed first) must not
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
export interface SpanPlan {
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
export class SpanPlanner {
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
export class XorbTable {
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
        throw new FileReadError(
          "inconsistent_records",
          `the chunk table of xorb ${hex} leaves no room for chunk ${i}'s header: the metadata database is damaged`,
        );
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
export class XorbTables {
  /** By hex; Map order is least recently used first. */
  private readonly kept = new Map<string, XorbTable>();

  constructor(
    private readonly metadata: FileMetadata,
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
      throw new FileReadError(
        "inconsistent_records",
        `${where} covers chunks [${a}, ${b}) outside xorb ${hex} (${xorb.chunks.chunkCount} chunks): the metadata database is damaged`,
      );
    }
    const length = xorb.chunks.unpackedLength(a, b);
    if (length !== term.unpackedLength) {
      throw new FileReadError(
        "inconsistent_records",
        `${where} records ${term.unpackedLength} bytes but chunks [${a}, ${b}) of xorb ${hex} hold ${length}: the metadata database is damaged`,
      );
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
export class SpanBuffers {
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
async function readSpan(context: SpanFeedContext, xorb: XorbTable, span: ByteSpan, signal: AbortSignal): Promise<Uint8Array> {
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
      throw new FileReadError(
        "corrupt_xorb",
        `the stored xorb ${xorb.hex} is shorter than its record says (bytes ${span.offset}-${span.offset + span.length - 1} are not all there): it is damaged`,
      );
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
