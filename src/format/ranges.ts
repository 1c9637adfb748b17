/**
 * The ranges of the protocol, and the one chunk table that maps between them (docs/protocol.md
 * §5.5, §8). Three kinds, branded so that one cannot be passed where another is expected —
 * their fields are the same `{start, end}`, and their ends mean different things:
 *
 * - `ChunkRange`: chunks `[start, end)` of one xorb, END EXCLUSIVE (a term's `range`, V1
 *   `range`, V2 `chunks`).
 * - `ByteRange`: bytes `[start, end]` of a serialized xorb, END INCLUSIVE, as an HTTP Range
 *   header names them (V1 `url_range`, V2 `bytes`, and what transfer URLs sign).
 * - `HalfOpenByteRange`: bytes `[start, end)` of a file, END EXCLUSIVE: a Range header once
 *   resolved against the file's size, which the planner slices terms with.
 *
 * The constructors only brand: they check nothing, so a parser or planner validates first.
 */

declare const chunkRangeBrand: unique symbol;
declare const byteRangeBrand: unique symbol;
declare const halfOpenByteRangeBrand: unique symbol;

/** Chunks `[start, end)` of one xorb: `end` exclusive. */
export interface ChunkRange {
  readonly start: number;
  readonly end: number;
  readonly [chunkRangeBrand]: true;
}

/** Bytes `[start, end]` of a serialized xorb: `end` INCLUSIVE, as in `Range: bytes=start-end`. */
export interface ByteRange {
  readonly start: number;
  readonly end: number;
  readonly [byteRangeBrand]: true;
}

/** Bytes `[start, end)` of a file: `end` exclusive; `start === end` only for the empty file. */
export interface HalfOpenByteRange {
  readonly start: number;
  readonly end: number;
  readonly [halfOpenByteRangeBrand]: true;
}

export function chunkRange(start: number, end: number): ChunkRange {
  return { start, end } as ChunkRange;
}

export function byteRange(start: number, end: number): ByteRange {
  return { start, end } as ByteRange;
}

export function halfOpenByteRange(start: number, end: number): HalfOpenByteRange {
  return { start, end } as HalfOpenByteRange;
}

/** What a chunk table is built from: one entry per chunk (a stored xorb's chunk records have this shape). */
export interface ChunkExtent {
  /** End of the chunk in the serialized xorb: header and payload of every chunk up to this one. */
  readonly serializedEnd: number;
  readonly uncompressedLength: number;
}

/**
 * A xorb's chunks as prefix sums, each array holding `chunkCount + 1` entries: entry `i` is
 * where chunk `i` starts and entry `chunkCount` the total, so the extent of chunks `[a, b)` is
 * `offsets[b] - offsets[a]` with no special case for chunk 0. (The xorb footer stores the
 * spec's E[] and U[] instead — the ENDS of chunks, `chunkCount` entries: that is
 * `serializedOffsets.subarray(1)`.)
 */
export class ChunkTable {
  private constructor(
    /** Where chunk i starts in the serialized xorb (a xorb is at most 64 MiB, so u32 holds it). */
    readonly serializedOffsets: Uint32Array,
    /** Where chunk i's data starts among the xorb's uncompressed bytes. */
    readonly unpackedOffsets: Float64Array,
  ) {}

  /** Built as given: callers that read stored records check them first. */
  static of(chunks: ArrayLike<ChunkExtent>): ChunkTable {
    const count = chunks.length;
    const serialized = new Uint32Array(count + 1);
    const unpacked = new Float64Array(count + 1);
    for (let i = 0; i < count; i++) {
      const chunk = chunks[i];
      serialized[i + 1] = chunk.serializedEnd;
      unpacked[i + 1] = unpacked[i] + chunk.uncompressedLength;
    }
    return new ChunkTable(serialized, unpacked);
  }

  get chunkCount(): number {
    return this.serializedOffsets.length - 1;
  }

  /** Memory held by the arrays. */
  get byteLength(): number {
    return this.serializedOffsets.byteLength + this.unpackedOffsets.byteLength;
  }

  /** Uncompressed bytes of chunks `[start, end)`. */
  unpackedLength(start: number, end: number): number {
    return this.unpackedOffsets[end] - this.unpackedOffsets[start];
  }

  /** The serialized bytes holding exactly `chunks`, end inclusive as a Range header wants them. */
  serializedRange(chunks: ChunkRange): ByteRange {
    return byteRange(this.serializedOffsets[chunks.start], this.serializedOffsets[chunks.end] - 1);
  }

  /**
   * The chunk among `[start, end)` holding uncompressed byte `offset` of the xorb (counted from
   * the xorb's first chunk): the first one whose data ends after it, or `end` when none does.
   * A binary search, so cutting a term at a file offset never walks its chunks.
   */
  chunkHoldingUnpackedByte(offset: number, start: number, end: number): number {
    const offsets = this.unpackedOffsets;
    let lo = start;
    let hi = end;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (offsets[mid + 1] > offset) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
}
