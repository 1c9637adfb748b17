/**
 * A file's bytes as a fill produces them, handed to the clients reading that file meanwhile, so
 * the first client of an uncached file receives bytes while castor fetches them.
 *
 * A client asking for bytes `start..end` gets a `FillStream`. While the fill has not passed
 * `start`, the stream is *live*: it receives each piece as the fill writes it. Otherwise (a
 * client that came late), or once a live stream falls too far behind (its buffer full for
 * `stallMs`: one slow client must not hold up the fill for the others), it *catches up*: when
 * the fill completes, the rest of its range is read from the store, where the fill has just
 * published the file. If the fill fails, every stream is destroyed with the failure.
 *
 * Nothing a client receives completes the file before it is verified: the last piece written is
 * held back until `verified()` (the fill checked the bytes it wrote against the upstream's tree)
 * or `complete()` (the file is verified and published), and a failure before either destroys
 * the streams instead. A failure after `verified()` (storing the file) leaves the live streams
 * whole: their bytes are the file; only those catching up from the store see it. An HTTP response carrying a `FillStream` with the file's
 * Content-Length is therefore either whole and verified, or cut short — never a truncated
 * success.
 */
import { Readable } from "node:stream";

/** Reads bytes `start..end` (inclusive) of the file once it is stored. */
export type StoredRange = (start: number, end: number) => Promise<Readable>;

export interface BroadcastOptions {
  /** Bytes a live stream may hold unread before the fill waits for it (default 8 MiB). */
  highWaterMark?: number;
  /** How long the fill waits for a live stream with a full buffer before it lets it catch up later (default 5 s). */
  stallMs?: number;
}

const DEFAULT_HIGH_WATER_MARK = 8 * 1024 * 1024;
const DEFAULT_STALL_MS = 5_000;

export class FillBroadcast {
  /** Bytes released to streams so far (the held-back piece not included). */
  private released = 0;
  private held: Uint8Array | null = null;
  private readonly live = new Set<FillStream>();
  private readonly waiting = new Set<FillStream>();
  private outcome: { ok: true } | { ok: false; error: Error } | null = null;
  private readonly highWaterMark: number;
  private readonly stallMs: number;

  constructor(
    private readonly stored: StoredRange,
    options: BroadcastOptions = {},
  ) {
    this.highWaterMark = options.highWaterMark ?? DEFAULT_HIGH_WATER_MARK;
    this.stallMs = options.stallMs ?? DEFAULT_STALL_MS;
  }

  /** Bytes the fill has written so far. */
  get written(): number {
    return this.released + (this.held?.length ?? 0);
  }

  /** Whether any client reads along. */
  get hasReaders(): boolean {
    return this.live.size + this.waiting.size > 0;
  }

  /**
   * A stream of bytes `start..end` (inclusive): live when the fill has not released byte
   * `start` yet, catching up from the store otherwise. `end < start` is an empty range.
   */
  join(start: number, end: number): FillStream {
    const stream = new FillStream(this, start, end, this.highWaterMark);
    if (end < start) {
      stream.push(null);
      return stream;
    }
    if (this.outcome !== null) {
      if (this.outcome.ok) void stream.catchUp(this.stored);
      else stream.destroy(this.outcome.error);
      return stream;
    }
    (start >= this.released ? this.live : this.waiting).add(stream);
    return stream;
  }

  /** Whether a live stream waits for the bytes the fill writes next. */
  get wantsBytes(): boolean {
    return this.live.size > 0;
  }

  /** The fill's next `length` bytes went by unwritten (nobody read along): later readers read them from the store. */
  async skip(length: number): Promise<void> {
    if (this.held !== null) {
      const previous = this.held;
      this.held = null;
      await this.release(previous);
    }
    this.released += length;
  }

  /** The fill's next bytes, in file order. Resolves once the live streams have room for more. */
  async write(piece: Uint8Array): Promise<void> {
    if (piece.length === 0) return;
    const previous = this.held;
    this.held = piece;
    if (previous !== null) await this.release(previous);
  }

  /** The bytes written are the whole file, verified: the held-back piece goes out to the live streams. */
  async verified(): Promise<void> {
    if (this.outcome !== null || this.held === null) return;
    const last = this.held;
    this.held = null;
    await this.release(last);
  }

  /** The file is verified and stored: the held-back bytes go out, the streams end or catch up. */
  async complete(): Promise<void> {
    if (this.outcome !== null) return;
    await this.verified();
    this.outcome = { ok: true };
    // Live streams have everything unless the file was stored by another node (this one wrote
    // nothing): they read it from the store then, like the streams that came late.
    for (const stream of [...this.live, ...this.waiting]) void stream.catchUp(this.stored);
    this.live.clear();
    this.waiting.clear();
  }

  /** The fill failed: every stream ends with `error` (its client sees a cut response). */
  fail(error: Error): void {
    if (this.outcome !== null) return;
    this.outcome = { ok: false, error };
    this.held = null;
    for (const stream of [...this.live, ...this.waiting]) stream.destroy(error);
    this.live.clear();
    this.waiting.clear();
  }

  /** @internal a stream its client closed. */
  forget(stream: FillStream): void {
    this.live.delete(stream);
    this.waiting.delete(stream);
  }

  private async release(piece: Uint8Array): Promise<void> {
    const from = this.released;
    this.released += piece.length;
    const slow: FillStream[] = [];
    for (const stream of this.live) {
      if (!stream.deliver(piece, from)) slow.push(stream);
    }
    for (const stream of slow) {
      if (!(await stream.roomWithin(this.stallMs))) {
        // Behind by a whole buffer for too long: it reads the rest from the store later.
        this.live.delete(stream);
        if (!stream.destroyed) this.waiting.add(stream);
      }
    }
  }
}

/** One client's bytes `start..end` of a file being filled (see FillBroadcast). */
export class FillStream extends Readable {
  /**
   * Settles when the stream has its first bytes (or its end), or fails before any: a caller can
   * still answer with an error status then, instead of cutting a response short.
   */
  readonly started: Promise<void>;
  private markStarted!: (error?: Error) => void;
  /** The next byte of the file this stream needs. */
  private next: number;
  private room: (() => void) | null = null;
  private source: Readable | null = null;

  constructor(
    private readonly broadcast: FillBroadcast,
    start: number,
    private readonly end: number,
    highWaterMark: number,
  ) {
    super({ highWaterMark });
    this.next = start;
    this.started = new Promise<void>((resolve, reject) => {
      this.markStarted = (error) => (error === undefined ? resolve() : reject(error));
    });
    // Awaited by whoever cares; a stream nobody asks about must not leave a rejection unhandled,
    // nor a failure before its reader attached its own listener crash the process (the
    // reader's listeners still see every error).
    this.started.catch(() => undefined);
    this.on("error", () => undefined);
  }

  override push(chunk: unknown, encoding?: BufferEncoding): boolean {
    this.markStarted();
    return super.push(chunk, encoding);
  }

  override _read(): void {
    const room = this.room;
    this.room = null;
    room?.();
    this.source?.resume();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.markStarted(error ?? new Error("the stream was closed before its first bytes"));
    this.broadcast.forget(this);
    this.source?.destroy();
    this.room?.();
    callback(error);
  }

  /** @internal Pushes the part of `piece` (file bytes from `at`) this stream needs; false when its buffer is full. */
  deliver(piece: Uint8Array, at: number): boolean {
    if (this.destroyed || this.next > this.end) return true;
    const from = Math.max(this.next, at);
    const to = Math.min(this.end + 1, at + piece.length);
    if (from >= to) return true;
    this.next = to;
    const more = this.push(piece.subarray(from - at, to - at));
    if (this.next > this.end) this.push(null);
    return more;
  }

  /** @internal Resolves true once the client read enough to want more, false after `ms`. */
  roomWithin(ms: number): Promise<boolean> {
    if (this.destroyed || this.readableLength < this.readableHighWaterMark) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.room = null;
        resolve(false);
      }, ms);
      this.room = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }

  /** @internal Reads the rest of the range from the store, now that the file is there. */
  async catchUp(stored: StoredRange): Promise<void> {
    if (this.destroyed || this.next > this.end) return;
    try {
      const source = await stored(this.next, this.end);
      if (this.destroyed) {
        source.destroy();
        return;
      }
      this.source = source;
      source.on("data", (piece: Uint8Array) => {
        if (!this.push(piece)) source.pause();
      });
      source.once("end", () => this.push(null));
      source.once("error", (error) => this.destroy(error));
    } catch (error) {
      this.destroy(error instanceof Error ? error : new Error(String(error)));
    }
  }
}
