/**
 * Server-side file reconstruction: the bytes of a registered file, rebuilt from its terms and
 * streamed, for plain HTTP downloads (`GET /{repo}/resolve/{rev}/{path}`) by clients that do
 * not speak Xet (curl, wget, browsers).
 *
 *     const file = await reader.open(fileHash);      // null: no such file registered
 *     file.size;                                     // to check a Range header against
 *     file.read({ start, end });                     // a Readable of bytes start..end (inclusive)
 *     const body = await file.body({ start, end });  // the same bytes for an HTTP response:
 *     await body.writeTo(response);                  //   written straight to it
 *
 * A file is its terms in order, a term chunks [a, b) of one xorb (docs/protocol.md §8.3). The
 * reader walks the terms overlapping the requested bytes and cuts them into *spans*: runs of
 * whole chunks of one term holding at most `maxSpanBytes` of the stored xorb. Each span is one
 * ranged blob read, located through the xorb's chunk table (§5.5); only the chunks overlapping
 * the range are read, and the first and last are trimmed after decoding (file-spans.ts).
 *
 * Verification: a span's chunks are decoded (none / LZ4 / BG4+LZ4) one at a time just before
 * they are sent, and each must have the header its chunk table entry implies and decode to
 * bytes that hash to the chunk hash recorded when the xorb was uploaded. A damaged or tampered
 * blob therefore fails the read with a `FileReadError` before any of its wrong bytes goes out.
 * (Bytes of the chunks before it may have been sent; an HTTP response is then cut short, which
 * clients detect against its Content-Length.)
 *
 * Memory is bounded whatever the file's size: `readAheadSpans` spans are read ahead of the one
 * being decoded — so the disk or S3 works while the CPU decodes — and decoded bytes go out
 * under the consumer's backpressure. A consumer that stops reading leaves at most
 * 1 + `readAheadSpans` spans requested; destroying the stream (or the response) aborts the reads
 * in progress, and its 'close' (or `writeTo`) waits until every blob handle they opened is
 * released. Chunk tables are loaded as the walk reaches their xorbs (a few terms' worth per
 * metadata query), and the last few are kept for files whose terms come back to a xorb.
 *
 * Memory is also not copied: an uncompressed chunk goes out as a view into its span buffer
 * (decoded chunks are fresh memory anyway). Span buffers are reused, because fresh multi-MiB
 * buffers must be faulted in by the kernel, which costs more than decoding them, and a copy of
 * each uncompressed chunk into fresh memory cost as much (docs/design.md §8.7). So a span buffer
 * is given back only once nothing reads it any more: `writeTo` gives it back in the callback of
 * the socket write of its last chunk; the `Readable`, which cannot know when its consumer is
 * done with a piece, gives back only buffers none of whose bytes it pushed.
 *
 * Not here: who may read which file (the route checks the file belongs to the repository).
 */
import type { Writable } from "node:stream";
import { Readable } from "node:stream";
import { hashToHex, ZERO_HASH, type Hash } from "../format/hash.js";
import { drainedOrClosed } from "../writable-drain.js";
import type { FileRecord, FileTerm } from "../metadata/cas.js";
import { FileReadError, SpanBuffers, SpanFeed, SpanPlanner, XorbTables, type FileMetadata, type LoadedSpan, type SpanSource } from "./file-spans.js";

export { FileReadError, type FileReadErrorCode, type FileMetadata, type SpanSource } from "./file-spans.js";

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
   * Decoded bytes a `read()` stream buffers for a slow consumer before it stops decoding
   * (default 64 KiB, about one chunk); a consumer calling `read()` on it gets the buffered
   * pieces concatenated, a copy that grows with it. `body()` writes ~1 MiB batches instead.
   */
  highWaterMark?: number;
}

export interface FileReaderDeps extends FileReaderOptions {
  /** Where file and xorb records come from; a caching wrapper may stand in for the store. */
  metadata: FileMetadata;
  /** Where xorb bytes are stored (`xorbs/<hex>` keys); positional reads are used where offered. */
  blobs: SpanSource;
}

/**
 * Tried with `npm run bench -- file-read` on the shared 2-core machine: 1 or 4 spans of read-ahead,
 * 1 or 8 MiB spans and a 256 KiB or 1 MiB high-water mark did no better, within its noise.
 */
export const DEFAULT_READ_AHEAD_SPANS = 2;
export const DEFAULT_MAX_SPAN_BYTES = 4 * 1024 * 1024;
export const DEFAULT_HIGH_WATER_MARK = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// The reader and its files

/** Bytes `start`..`end` of a file, both INCLUSIVE (as a Range header names them). */
export interface FileByteRange {
  start: number;
  end: number;
}

export class FileReader {
  private readonly metadata: FileMetadata;
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
    return this.fileOf(record);
  }

  /**
   * The bytes that `terms` name, read and verified as a registered file's are, though no file
   * of these terms is registered: how the mirror reads the chunks it holds already while it
   * assembles a file from them and from chunks it fetches.
   */
  openTerms(terms: readonly FileTerm[]): StoredFile {
    const size = terms.reduce((sum, term) => sum + term.unpackedLength, 0);
    return this.fileOf({ hash: ZERO_HASH, size, terms: [...terms], sha256: null });
  }

  private fileOf(record: FileRecord): StoredFile {
    return new StoredFile(record, termOffsetsOf(record), { metadata: this.metadata, blobs: this.blobs, spanBuffers: this.spanBuffers, options: this.options });
  }
}

/** What the streams of one `FileReader` share. */
interface ReaderContext {
  readonly metadata: FileMetadata;
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
    return new FileByteStream(this.feed(range), this.context.options.highWaterMark);
  }

  /**
   * The same bytes as `read`, for an HTTP response: resolves once the first chunk is read and
   * verified (rejecting as `read`'s stream would fail, before anything was sent, so the caller
   * can still answer with an error), with a `FileBody` to write to the response.
   */
  async body(range?: FileByteRange): Promise<FileBody> {
    const feed = this.feed(range);
    try {
      const span = await feed.next();
      // The range holds at least one byte (or the file is empty), so a first span exists unless the file is empty.
      const first = span === null ? null : feed.take(span);
      return new FileBody(feed, span, first);
    } catch (error) {
      await feed.close();
      throw error;
    }
  }

  private feed(range: FileByteRange | undefined): SpanFeed {
    const { start, end } = range ?? { start: 0, end: this.size - 1 };
    if (range !== undefined && !(Number.isSafeInteger(start) && Number.isSafeInteger(end) && 0 <= start && start <= end && end < this.size)) {
      throw new RangeError(`bytes ${start}-${end} are not a range within file ${hashToHex(this.hash)} of ${this.size} bytes`);
    }
    const { metadata, options, blobs, spanBuffers } = this.context;
    const planner = new SpanPlanner(this.record, this.termOffsets, new XorbTables(metadata, this.record), start, end + 1, options.maxSpanBytes);
    return new SpanFeed(planner, { blobs, spanBuffers, readAheadSpans: options.readAheadSpans }, start, end + 1);
  }
}

function termOffsetsOf(record: FileRecord): Float64Array {
  const offsets = new Float64Array(record.terms.length + 1);
  for (let k = 0; k < record.terms.length; k++) offsets[k + 1] = offsets[k] + record.terms[k].unpackedLength;
  const total = offsets[record.terms.length];
  if (total !== record.size) {
    throw new FileReadError(
      "inconsistent_records",
      `file ${hashToHex(record.hash)} records ${record.size} bytes but its terms hold ${total}: the metadata database is damaged`,
    );
  }
  return offsets;
}

function checkedInteger(value: number, min: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`${name} must be an integer ≥ ${min}, got ${value}`);
  return value;
}

// ---------------------------------------------------------------------------------------------
// The stream

/**
 * Pushes the verified chunks of the feed's spans in order.
 *
 * Flow: `_read` runs `pump`, which pushes chunks of the current span until `push` says the
 * consumer has enough (then the next `_read` resumes it) or the span is spent; it then waits
 * for the feed's next span.
 *
 * Uncompressed chunks are pushed as views into their span buffer, which is then not given back
 * for reuse (the consumer may hold the piece indefinitely): a span buffer is reused only when
 * all its chunks were decoded into fresh memory.
 */
class FileByteStream extends Readable {
  private current: LoadedSpan | null = null;
  /** Whether a piece of `current`'s buffer was pushed. */
  private lent = false;
  /** Set while the pump waits for a span read: `_read` calls then have nothing to add. */
  private waiting = false;

  constructor(
    private readonly feed: SpanFeed,
    highWaterMark: number,
  ) {
    super({ highWaterMark });
  }

  override _read(): void {
    if (!this.waiting) this.pump();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    // 'close' only once every read has let go of its blob handle or stream.
    this.feed.close().then(() => callback(error));
  }

  private pump(): void {
    try {
      // Pushing either spends the current span (which clears it) or fills the consumer's buffer.
      if (this.current !== null && !this.pushChunks(this.current)) return;
      this.waiting = true;
      this.feed.next().then(
        (loaded) => {
          this.waiting = false;
          if (this.destroyed) return;
          if (loaded === null) {
            this.push(null);
            return;
          }
          this.current = loaded;
          this.lent = false;
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

  /** Pushes the span's remaining chunks; clears `current` once it is spent. False when the consumer has enough for now. */
  private pushChunks(span: LoadedSpan): boolean {
    let wanted = true;
    while (wanted && !this.feed.spent(span)) {
      const piece = this.feed.take(span);
      if (piece.length > 0) {
        if (piece.buffer === span.bytes.buffer) this.lent = true;
        wanted = this.push(Buffer.from(piece.buffer, piece.byteOffset, piece.length));
      }
    }
    if (this.feed.spent(span)) {
      this.current = null;
      if (!this.lent) this.feed.release(span);
    }
    return wanted;
  }
}

// ---------------------------------------------------------------------------------------------
// The writer for responses

/**
 * Verified chunks written per batch: the writes of a batch go out corked, as one `writev`, and
 * the next batch is decoded once the response has taken them (backpressure). About the
 * transfer route's 1 MiB reads, so both routes make the same system calls per byte.
 */
const WRITE_BATCH_BYTES = 1024 * 1024;

/**
 * A file's bytes ready to be written to an HTTP response (`StoredFile.body`), its first chunk
 * already verified. `writeTo` must be called once, or `close` if the body is not sent after all.
 *
 * Writes go straight to the response, views into span buffers included, each batch corked;
 * a span's buffer is given back in the callback of the write of its last chunk, which Node calls
 * once the socket has the bytes (writes complete in order, so the earlier ones too).
 */
export class FileBody {
  private started = false;

  /** @internal built by `StoredFile.body` */
  constructor(
    private readonly feed: SpanFeed,
    /** The first span, its first chunk taken (null for an empty file). */
    private readonly first: LoadedSpan | null,
    /** That chunk, verified and trimmed. */
    private readonly firstPiece: Uint8Array | null,
  ) {}

  /**
   * Writes the bytes to `out` (not ending it) under its backpressure. Resolves once all are
   * written, or early if `out` is destroyed (the client went away); rejects with the first
   * failure, after which `out` has received a correct prefix of the bytes. Either way every blob
   * handle is released first.
   *
   * `out` must be a socket or an HTTP response: a write's callback must mean that nothing reads
   * its buffer any more.
   */
  async writeTo(out: Writable): Promise<void> {
    if (this.started) throw new Error("a FileBody is written once");
    this.started = true;
    // A client that goes away stops the reads at once, not when the next write finds out.
    const stop = () => void this.feed.close();
    out.once("close", stop);
    try {
      let span = this.first;
      let pending = this.firstPiece;
      while (span !== null && !out.destroyed) {
        let batch = 0;
        let flowing = true;
        out.cork();
        try {
          while (batch < WRITE_BATCH_BYTES) {
            const piece = pending ?? this.feed.take(span);
            pending = null;
            if (this.feed.spent(span)) {
              // Nothing reads the buffer once this write is done (an empty last piece: never given back).
              const done = span;
              if (piece.length > 0) flowing = out.write(piece, () => this.feed.release(done));
              break;
            }
            if (piece.length > 0) flowing = out.write(piece);
            batch += piece.length;
          }
        } finally {
          out.uncork();
        }
        if (!flowing) await drainedOrClosed(out);
        if (this.feed.spent(span)) span = await this.feed.next();
      }
    } catch (error) {
      // Closing the feed when `out` closed aborts the read in progress: not a failure.
      if (!out.destroyed) throw error;
    } finally {
      out.off("close", stop);
      await this.feed.close();
    }
  }

  /** Gives up without writing: stops the reads and releases their handles. */
  close(): Promise<void> {
    this.started = true;
    return this.feed.close();
  }
}
