/**
 * Upstream xorb ranges as this node's fills fetch them, for clients reading the same ranges
 * through castor's CAS meanwhile (hf_xet, given the upstream's plan by
 * `MirrorSource.liveReconstruction`): a client's range of a range being fetched streams from
 * the fill's buffer as bytes arrive, instead of waiting until the fill has stored it.
 *
 * Nothing a client receives completes its range before the bytes are proven: the last byte of
 * a client's range is held back until the fill's range is verified — as the upstream xorb itself
 * (its chunks hash to its hash), or, for part of a xorb, once the whole file matched its Xet
 * hash — and a failure cuts the stream instead. A response with the range's Content-Length is
 * therefore whole and verified, or cut short.
 *
 * Taps live in memory, on the node running the fill; another node's client waits for the store
 * instead (upstream-xorbs.ts).
 */
import { Readable } from "node:stream";
import type { ByteRange } from "../format/ranges.js";

/** A fill's range being fetched: upstream xorb `xorbHex`, bytes `start..end` of it (inclusive) into `buffer`. */
export class SpanTap {
  /** Bytes of `buffer` filled so far. */
  private filled = 0;
  private outcome: { ok: true } | { ok: false; error: Error } | null = null;
  private readonly readers = new Set<TapReader>();

  constructor(
    readonly xorbHex: string,
    readonly start: number,
    readonly end: number,
    private readonly buffer: Uint8Array,
  ) {}

  covers(range: ByteRange): boolean {
    return this.outcome?.ok !== false && range.start >= this.start && range.end <= this.end;
  }

  /** Bytes `range` of the upstream xorb (within this range), as they arrive. */
  read(range: ByteRange): Readable {
    const reader = new TapReader(this, range.start - this.start, range.end - this.start + 1);
    this.readers.add(reader);
    reader.once("close", () => this.readers.delete(reader));
    reader.more();
    return reader;
  }

  /** The fetch has filled `filled` bytes of the buffer (a retried fetch refills the same bytes). */
  progress(filled: number): void {
    if (filled <= this.filled) return;
    this.filled = filled;
    for (const reader of this.readers) reader.more();
  }

  /** Every byte of the range is proven. */
  verified(): void {
    if (this.outcome !== null) return;
    this.filled = this.buffer.length;
    this.outcome = { ok: true };
    for (const reader of this.readers) reader.more();
  }

  failed(error: Error): void {
    if (this.outcome !== null) return;
    this.outcome = { ok: false, error };
    for (const reader of this.readers) reader.destroy(error);
  }

  /** @internal What a reader may send of bytes [from, to) of the buffer: up to the filled bytes, the last one only once verified. */
  available(from: number, to: number): { bytes: Uint8Array; done: boolean } | Error {
    if (this.outcome !== null && !this.outcome.ok) return this.outcome.error;
    const limit = this.outcome?.ok ? to : Math.min(this.filled, to - 1);
    return { bytes: this.buffer.subarray(from, Math.max(from, limit)), done: limit === to };
  }
}

class TapReader extends Readable {
  private next: number;
  private ended = false;

  constructor(
    private readonly tap: SpanTap,
    from: number,
    private readonly to: number,
  ) {
    // Small pieces: the bytes already sit in the tap's buffer.
    super({ highWaterMark: 4 * 1024 * 1024 });
    this.next = from;
  }

  /** Pushes what the tap has, as far as the client reads; ends once the last byte is pushed. */
  more(): void {
    if (this.destroyed || this.ended) return;
    const available = this.tap.available(this.next, this.to);
    if (available instanceof Error) return void this.destroy(available);
    let { bytes } = available;
    while (bytes.length > 0) {
      const piece = bytes.subarray(0, 1024 * 1024);
      bytes = bytes.subarray(piece.length);
      this.next += piece.length;
      // A view of the fill's buffer (a retried fetch writes the same bytes there again).
      if (!this.push(Buffer.from(piece.buffer, piece.byteOffset, piece.length)) && bytes.length > 0) return;
    }
    if (available.done && this.next >= this.to) {
      this.ended = true;
      this.push(null);
    }
  }

  override _read(): void {
    this.more();
  }
}

/** The taps of this node's fills, by upstream xorb. */
export class SpanTaps {
  private readonly byXorb = new Map<string, Set<SpanTap>>();

  open(xorbHex: string, start: number, end: number, buffer: Uint8Array): SpanTap {
    const tap = new SpanTap(xorbHex, start, end, buffer);
    const taps = this.byXorb.get(xorbHex) ?? new Set<SpanTap>();
    taps.add(tap);
    this.byXorb.set(xorbHex, taps);
    return tap;
  }

  close(tap: SpanTap): void {
    const taps = this.byXorb.get(tap.xorbHex);
    taps?.delete(tap);
    if (taps?.size === 0) this.byXorb.delete(tap.xorbHex);
  }

  /** A stream of bytes `range` of upstream xorb `xorbHex` when a fill here fetches a range holding them. */
  read(xorbHex: string, range: ByteRange): { body: Readable; length: number } | null {
    for (const tap of this.byXorb.get(xorbHex) ?? []) {
      if (tap.covers(range)) return { body: tap.read(range), length: range.end - range.start + 1 };
    }
    return null;
  }
}
