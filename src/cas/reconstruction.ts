/**
 * File reconstruction planning (docs/protocol.md §5.5, §8; docs/interface.md §4.1 operations 1 and 2), pure: no I/O.
 * What to fetch for a range of a file; reconstruction-render.ts writes it as a V1 or V2 answer.
 *
 * 1. `parseRangeHeader` + `resolveFileRange`: the `Range` header → a byte range of the file
 *    (§8.2). Numbers stay `bigint` until clamped to the file size (clients send ends near 2^64).
 * 2. `prepareXorb` / `prepareFile`: immutable metadata records turned, once, into prefix arrays
 *    (a xorb's ChunkTable; per-term file offsets), so a request never walks a xorb's chunks:
 *    cutting the first and last term is a binary search.
 * 3. `planReconstruction`: the terms of the range (§8.3) and, per xorb, the chunk ranges to
 *    fetch, merged only where they overlap or touch (§8.4) — never across a gap, whose bytes
 *    may belong to other files.
 *
 * The JSON fragments of a cached file's whole terms are rendered once and kept (PlannedTerm,
 * FetchRange), for the renderers.
 */
import { hashEquals, hashToHex, type Hash } from "../format/hash.js";
import { chunkRange, ChunkTable, halfOpenByteRange, type ByteRange, type ChunkRange, type HalfOpenByteRange } from "../format/ranges.js";
import { fetchInfoJsonAroundUrl, rangeDescriptorJson, termJson } from "../format/reconstruction.js";
import type { FileRecord, XorbRecord } from "../metadata/cas.js";

export type ReconstructionErrorCode =
  /** The Range header is not one `bytes=` range (HTTP 400). */
  | "malformed_range"
  /** The range is valid but selects nothing of the file (HTTP 416). */
  | "unsatisfiable_range"
  /**
   * The file is not registered in the token's repository, or not at all: one answer for both,
   * so a token learns nothing about other repositories (HTTP 404).
   */
  | "file_not_found"
  /** Stored records contradict each other (a bug or a damaged database; HTTP 500). */
  | "inconsistent_records";

export class ReconstructionError extends Error {
  override readonly name = "ReconstructionError";
  constructor(
    readonly code: ReconstructionErrorCode,
    message: string,
    /** For `unsatisfiable_range` once the file is known: its size, which a 416 names. */
    readonly fileSize?: number,
  ) {
    super(message);
  }
}

// ---------------------------------------------------------------------------------------------
// Range header (§8.2)

export type RangeSpec =
  /** No header: the whole file. */
  | { kind: "whole" }
  /** `bytes=first-last`, last inclusive. */
  | { kind: "closed"; first: bigint; last: bigint }
  /** `bytes=first-`. */
  | { kind: "open"; first: bigint }
  /** `bytes=-length`: the last `length` bytes. */
  | { kind: "suffix"; length: bigint };

/**
 * Digits accepted per number. u64 values have at most 20; anything beyond 40 is not a byte
 * offset, and refusing it keeps BigInt parsing of a hostile header cheap.
 */
export const MAX_RANGE_DIGITS = 40;

/** The unit is case-insensitive (RFC 9110 §14.1); one range only, as the interface says. */
const RANGE_RE = /^bytes=(\d*)-(\d*)$/i;

const RANGE_FORMS = "send one byte range: bytes=START-END (END inclusive), bytes=START- or bytes=-LENGTH";

/** The parsed header; `undefined` (no header) is the whole file. ReconstructionError otherwise. */
export function parseRangeHeader(value: string | undefined): RangeSpec {
  if (value === undefined) return { kind: "whole" };
  const text = value.trim();
  const match = RANGE_RE.exec(text);
  const shown = JSON.stringify(text.length > 100 ? `${text.slice(0, 100)}…` : text);
  if (match === null) {
    const why = /^bytes=.*,/i.test(text) ? "several ranges in one request are not supported" : "it is not a byte range";
    throw new ReconstructionError("malformed_range", `Malformed Range header ${shown} (${why}): ${RANGE_FORMS}`);
  }
  const [, firstDigits, lastDigits] = match;
  if (firstDigits.length > MAX_RANGE_DIGITS || lastDigits.length > MAX_RANGE_DIGITS) {
    throw new ReconstructionError("malformed_range", `Malformed Range header ${shown} (a number has more than ${MAX_RANGE_DIGITS} digits): ${RANGE_FORMS}`);
  }
  if (firstDigits === "") {
    if (lastDigits === "") throw new ReconstructionError("malformed_range", `Malformed Range header ${shown} (no number): ${RANGE_FORMS}`);
    return { kind: "suffix", length: BigInt(lastDigits) };
  }
  const first = BigInt(firstDigits);
  if (lastDigits === "") return { kind: "open", first };
  const last = BigInt(lastDigits);
  if (first > last) {
    throw new ReconstructionError("unsatisfiable_range", `The Range bytes=${first}-${last} is unsatisfiable: its start is after its end`);
  }
  return { kind: "closed", first, last };
}

/**
 * The requested range clamped to a file of `size` bytes. A start at or past the end is
 * unsatisfiable (416) — except start 0 of the empty file, which selects nothing and answers 200.
 */
export function resolveFileRange(spec: RangeSpec, size: number): HalfOpenByteRange {
  const fileSize = BigInt(size);
  let start: bigint;
  let end: bigint;
  switch (spec.kind) {
    case "whole":
      return halfOpenByteRange(0, size);
    case "closed":
      start = spec.first;
      end = spec.last + 1n;
      break;
    case "open":
      start = spec.first;
      end = fileSize;
      break;
    case "suffix":
      start = spec.length >= fileSize ? 0n : fileSize - spec.length;
      end = fileSize;
      break;
  }
  if (start >= fileSize) {
    if (size === 0 && start === 0n) return halfOpenByteRange(0, 0);
    throw new ReconstructionError(
      "unsatisfiable_range",
      `The Range starts at byte ${start}, at or past the end of the file (${size} bytes): request a range that starts before byte ${size}`,
      size,
    );
  }
  return halfOpenByteRange(Number(start), Number(end < fileSize ? end : fileSize));
}

// ---------------------------------------------------------------------------------------------
// Prepared (cached) forms of the immutable records

export interface PreparedXorb {
  readonly hash: Hash;
  readonly hex: string;
  readonly chunks: ChunkTable;
  /** Memory held, for the cache's byte budget. */
  readonly footprintBytes: number;
}

/** Per-object overhead assumed for cache accounting (headers, hidden classes, map entries). */
const OBJECT_OVERHEAD_BYTES = 200;

export function prepareXorb(record: XorbRecord): PreparedXorb {
  const count = record.chunks.length;
  const hex = hashToHex(record.hash);
  if (count === 0) throw new ReconstructionError("inconsistent_records", `the stored xorb ${hex} has no chunks`);
  let previousEnd = 0;
  for (let i = 0; i < count; i++) {
    const { serializedEnd } = record.chunks[i];
    // Every chunk has an 8-byte header, so serialized ends strictly increase.
    if (!(serializedEnd > previousEnd)) {
      throw new ReconstructionError("inconsistent_records", `the stored chunk table of xorb ${hex} is not ascending at chunk ${i}`);
    }
    previousEnd = serializedEnd;
  }
  const chunks = ChunkTable.of(record.chunks);
  return {
    // A copy: the stored hash may be a view into the record's whole packed chunk table.
    hash: new Uint8Array(record.hash),
    hex,
    chunks,
    footprintBytes: chunks.byteLength + hex.length * 2 + OBJECT_OVERHEAD_BYTES,
  };
}

export interface PreparedFile {
  readonly hash: Hash;
  readonly size: number;
  /** The distinct xorbs of the file, in order of first appearance. */
  readonly xorbs: readonly PreparedXorb[];
  /** The file's terms, uncut; a request returns these objects for every term it keeps whole. */
  readonly terms: readonly PlannedTerm[];
  /** File offset where each term starts; entry `terms.length` is the file size. */
  readonly termOffsets: Float64Array;
  /** Memory held by the file, its rendered fragments included (its xorbs are accounted separately). */
  readonly footprintBytes: number;
}

/**
 * Bytes a term may hold once requests have rendered it: the term object and its JSON, its
 * whole-term fetch range with its descriptor and V1 fragments (~450 bytes measured, rounded up).
 */
const TERM_FOOTPRINT_BYTES = 600;

/**
 * Checks the file against its xorbs (every term inside its xorb, its stored length equal to
 * the chunks' lengths, the size equal to the sum) — registration checked all of this, so a
 * mismatch means a damaged database — and builds the per-term arrays.
 */
export function prepareFile(file: FileRecord, xorbsByHex: ReadonlyMap<string, PreparedXorb>): PreparedFile {
  const termCount = file.terms.length;
  const name = `file ${hashToHex(file.hash)}`;
  const terms = new Array<PlannedTerm>(termCount);
  const termOffsets = new Float64Array(termCount + 1);
  const xorbs: PreparedXorb[] = [];
  const seen = new Set<PreparedXorb>();
  let offset = 0;
  let previous: PreparedXorb | null = null;
  for (let k = 0; k < termCount; k++) {
    const term = file.terms[k];
    // Consecutive terms usually share a xorb: skip the hex conversion and lookup for repeats.
    const xorb: PreparedXorb = previous !== null && hashEquals(previous.hash, term.xorbHash) ? previous : xorbOfTerm(xorbsByHex, term.xorbHash, k, name);
    previous = xorb;
    const { chunkStart: a, chunkEnd: b } = term;
    const chunkCount = xorb.chunks.chunkCount;
    if (!(a < b && b <= chunkCount)) {
      throw new ReconstructionError("inconsistent_records", `term ${k} of ${name} covers chunks [${a}, ${b}) outside xorb ${xorb.hex} (${chunkCount} chunks)`);
    }
    const length = xorb.chunks.unpackedLength(a, b);
    if (length !== term.unpackedLength) {
      throw new ReconstructionError(
        "inconsistent_records",
        `term ${k} of ${name} records ${term.unpackedLength} bytes but chunks [${a}, ${b}) of xorb ${xorb.hex} hold ${length}`,
      );
    }
    if (!seen.has(xorb)) {
      seen.add(xorb);
      xorbs.push(xorb);
    }
    terms[k] = new PlannedTerm(xorb, a, b, length);
    termOffsets[k] = offset;
    offset += length;
  }
  termOffsets[termCount] = offset;
  if (offset !== file.size) {
    throw new ReconstructionError("inconsistent_records", `${name} records ${file.size} bytes but its terms hold ${offset}`);
  }
  return {
    hash: new Uint8Array(file.hash),
    size: file.size,
    xorbs,
    terms,
    termOffsets,
    footprintBytes: termCount * (TERM_FOOTPRINT_BYTES + 8) + xorbs.length * 8 + OBJECT_OVERHEAD_BYTES,
  };
}

function xorbOfTerm(xorbsByHex: ReadonlyMap<string, PreparedXorb>, xorbHash: Hash, k: number, name: string): PreparedXorb {
  const hex = hashToHex(xorbHash);
  const xorb = xorbsByHex.get(hex);
  if (xorb === undefined) {
    throw new ReconstructionError("inconsistent_records", `term ${k} of ${name} references xorb ${hex}, which has no stored record`);
  }
  return xorb;
}

// ---------------------------------------------------------------------------------------------
// Planning (§8.3, §8.4)

/**
 * A term of a reconstruction (docs/interface.md §2.2): chunks [chunkStart, chunkEnd) of `xorb`. Its JSON
 * and fetch range are built on first use and kept, so a cached file's whole terms are rendered
 * once, not per request.
 */
export class PlannedTerm {
  private renderedJson: string | undefined;
  private ownFetchRange: FetchRange | undefined;

  constructor(
    readonly xorb: PreparedXorb,
    readonly chunkStart: number,
    /** Exclusive. */
    readonly chunkEnd: number,
    readonly unpackedLength: number,
  ) {}

  /** The CASReconstructionTerm object. */
  get json(): string {
    return (this.renderedJson ??= termJson(this.xorb.hex, this.unpackedLength, chunkRange(this.chunkStart, this.chunkEnd)));
  }

  /** The fetch range of exactly this term's chunks. */
  get fetchRange(): FetchRange {
    return (this.ownFetchRange ??= FetchRange.of(this.xorb, this.chunkStart, this.chunkEnd));
  }
}

/**
 * A fetch range of one xorb: `chunks` and the serialized `bytes` holding exactly them. JSON
 * fragments are built on first use and kept.
 */
export class FetchRange {
  private descriptor: string | undefined;
  private v1Parts: [string, string] | undefined;

  constructor(
    readonly chunks: ChunkRange,
    readonly bytes: ByteRange,
  ) {}

  /** Chunks [a, b) of `xorb` (§5.5). */
  static of(xorb: PreparedXorb, a: number, b: number): FetchRange {
    const chunks = chunkRange(a, b);
    return new FetchRange(chunks, xorb.chunks.serializedRange(chunks));
  }

  /** The V2 XorbRangeDescriptor object. */
  get descriptorJson(): string {
    return (this.descriptor ??= rangeDescriptorJson(this.chunks, this.bytes));
  }

  /** The V1 CASReconstructionFetchInfo object around its URL: `[before the URL, after it]`. */
  get v1Json(): readonly [string, string] {
    return (this.v1Parts ??= fetchInfoJsonAroundUrl(this.chunks, this.bytes));
  }
}

export interface XorbFetch {
  readonly xorb: PreparedXorb;
  /** Sorted by chunk start, pairwise separated by at least one chunk. */
  readonly ranges: readonly FetchRange[];
}

export interface ReconstructionPlan {
  readonly offsetIntoFirstRange: number;
  readonly terms: readonly PlannedTerm[];
  /** One entry per distinct xorb of `terms`, in order of first appearance. */
  readonly fetches: readonly XorbFetch[];
}

export const EMPTY_PLAN: ReconstructionPlan = Object.freeze({ offsetIntoFirstRange: 0, terms: [], fetches: [] });

/**
 * The terms covering `range` (end exclusive, already clamped by `resolveFileRange`) and the
 * merged fetch ranges. Work is O(returned terms · log) — terms are found and cut by binary
 * search over the prepared arrays.
 */
export function planReconstruction(file: PreparedFile, range: HalfOpenByteRange): ReconstructionPlan {
  const { start: rangeStart, end: rangeEnd } = range;
  if (rangeStart >= rangeEnd) return EMPTY_PLAN;
  if (!(rangeStart >= 0 && rangeEnd <= file.size)) {
    throw new RangeError(`range [${rangeStart}, ${rangeEnd}) is not within the file's ${file.size} bytes`);
  }
  const offsets = file.termOffsets;
  const termCount = file.terms.length;
  // First term ending after rangeStart (whole terms ending at or before it are skipped), and
  // the first term starting at or after rangeEnd (not returned).
  const firstTerm = firstIndexAbove(offsets, 1, termCount + 1, rangeStart) - 1;
  const endTerm = firstIndexAtLeast(offsets, firstTerm + 1, termCount, rangeEnd);

  const terms: PlannedTerm[] = file.terms.slice(firstTerm, endTerm);
  let firstKeptByte = offsets[firstTerm];
  const first = terms[0];
  if (firstKeptByte < rangeStart) {
    // Keep the chunks from the one holding rangeStart (offsets in the table count from the xorb's start).
    const table = first.xorb.chunks;
    const base = table.unpackedOffsets[first.chunkStart];
    const a = table.chunkHoldingUnpackedByte(rangeStart - firstKeptByte + base, first.chunkStart, first.chunkEnd);
    firstKeptByte += table.unpackedOffsets[a] - base;
    terms[0] = cutTerm(first, a, first.chunkEnd);
  }
  const lastIndex = terms.length - 1;
  if (offsets[endTerm] > rangeEnd) {
    // Keep the chunks through the one holding byte rangeEnd - 1, the last one requested.
    const last = terms[lastIndex];
    const lastStart = lastIndex === 0 ? firstKeptByte : offsets[endTerm - 1];
    const table = last.xorb.chunks;
    const base = table.unpackedOffsets[last.chunkStart];
    const b = table.chunkHoldingUnpackedByte(rangeEnd - 1 - lastStart + base, last.chunkStart, last.chunkEnd - 1) + 1;
    terms[lastIndex] = cutTerm(last, last.chunkStart, b);
  }
  // A file whose terms all use different xorbs (the usual layout of a large file) needs no merging.
  const fetches = file.xorbs.length === termCount ? oneFetchPerTerm(terms) : mergeFetchRanges(terms);
  return { offsetIntoFirstRange: rangeStart - firstKeptByte, terms, fetches };
}

function cutTerm(term: PlannedTerm, a: number, b: number): PlannedTerm {
  if (a === term.chunkStart && b === term.chunkEnd) return term;
  return new PlannedTerm(term.xorb, a, b, term.xorb.chunks.unpackedLength(a, b));
}

/** Smallest i in [lo, hi) with values[i] > limit, or hi. */
function firstIndexAbove(values: ArrayLike<number>, lo: number, hi: number, limit: number): number {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] > limit) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** Smallest i in [lo, hi) with values[i] >= limit, or hi. */
function firstIndexAtLeast(values: ArrayLike<number>, lo: number, hi: number, limit: number): number {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] >= limit) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/**
 * Per xorb, the terms' chunk ranges sorted by start and merged while the next one starts at or
 * before the current end (overlapping or adjacent). Ranges with a gap between them stay apart.
 */
export function mergeFetchRanges(terms: readonly PlannedTerm[]): XorbFetch[] {
  const spansByXorb = new Map<PreparedXorb, number[]>();
  for (const term of terms) {
    const spans = spansByXorb.get(term.xorb);
    if (spans === undefined) spansByXorb.set(term.xorb, [term.chunkStart, term.chunkEnd]);
    else spans.push(term.chunkStart, term.chunkEnd);
  }
  const fetches: XorbFetch[] = [];
  for (const [xorb, spans] of spansByXorb) {
    if (spans.length === 2) {
      fetches.push({ xorb, ranges: [FetchRange.of(xorb, spans[0], spans[1])] });
      continue;
    }
    const order: number[] = [];
    for (let i = 0; i < spans.length; i += 2) order.push(i);
    order.sort((x, y) => spans[x] - spans[y] || spans[x + 1] - spans[y + 1]);
    const ranges: FetchRange[] = [];
    let a = spans[order[0]];
    let b = spans[order[0] + 1];
    for (let i = 1; i < order.length; i++) {
      const nextA = spans[order[i]];
      const nextB = spans[order[i] + 1];
      if (nextA <= b) {
        if (nextB > b) b = nextB;
      } else {
        ranges.push(FetchRange.of(xorb, a, b));
        a = nextA;
        b = nextB;
      }
    }
    ranges.push(FetchRange.of(xorb, a, b));
    fetches.push({ xorb, ranges });
  }
  return fetches;
}

/** When no xorb appears twice among the terms, each term is its own fetch: no grouping needed. */
function oneFetchPerTerm(terms: readonly PlannedTerm[]): XorbFetch[] {
  const fetches: XorbFetch[] = new Array(terms.length);
  for (let i = 0; i < terms.length; i++) {
    const term = terms[i];
    fetches[i] = { xorb: term.xorb, ranges: [term.fetchRange] };
  }
  return fetches;
}
