/**
 * The reconstruction answers on the wire (docs/protocol.md §8.5, §8.6; xet-core's `cas_types`):
 * their types, the JSON fragments the server writes them with, and the parser clients read
 * them with — one module, so writer and reader cannot drift apart.
 *
 *     V1 GET /v1/reconstructions/{file}  QueryReconstructionResponse
 *        { offset_into_first_range, terms: [CASReconstructionTerm],
 *          fetch_info: { xorb hex: [{ range, url, url_range }] } }
 *     V2 GET /v2/reconstructions/{file}  QueryReconstructionResponseV2
 *        { offset_into_first_range, terms: [CASReconstructionTerm],
 *          xorbs: { xorb hex: [{ url, ranges: [{ chunks, bytes }] }] } }
 *     CASReconstructionTerm              { hash, unpacked_length, range }
 *
 * Chunk ranges (`range`, `chunks`) end exclusive; byte ranges (`url_range`, `bytes`) end
 * inclusive, as the Range header that fetches them (see ranges.ts).
 *
 * The server writes answers by hand from these fragments rather than through JSON.stringify:
 * every value is a number, a 64-digit hex string or a URL already written as a JSON literal,
 * and a 10 GiB file's answer has hundreds of entries, where generic serialization costs
 * several times more (src/cas/reconstruction.ts renders, and caches the fragments).
 */
import { FormatError } from "./errors.js";
import { isHashHex } from "./hash.js";
import { byteRange, chunkRange, type ByteRange, type ChunkRange } from "./ranges.js";
import { DEFAULT_MAX_XORB_BODY_BYTES, MAX_XORB_CHUNKS, MAX_XORB_UNCOMPRESSED_BYTES, XORB_CHUNK_HEADER_BYTES } from "./xorb.js";

/** A term: `unpacked_length` bytes of the file, from chunks `range` of xorb `hash` (hex). */
export interface CASReconstructionTerm {
  readonly hash: string;
  readonly unpacked_length: number;
  readonly range: ChunkRange;
}

/** V1: one byte range of a xorb and the URL serving it. */
export interface CASReconstructionFetchInfo {
  readonly range: ChunkRange;
  readonly url: string;
  readonly url_range: ByteRange;
}

/** V2: one URL serving several byte ranges of a xorb (one multi-range GET, or one GET per range). */
export interface XorbMultiRangeFetch {
  readonly url: string;
  readonly ranges: readonly XorbRangeDescriptor[];
}

/** V2: chunks of a xorb and the bytes holding them. */
export interface XorbRangeDescriptor {
  readonly chunks: ChunkRange;
  readonly bytes: ByteRange;
}

export interface QueryReconstructionResponse {
  /** Bytes of the first term to skip: the requested range rarely starts on a chunk boundary. */
  readonly offset_into_first_range: number;
  readonly terms: readonly CASReconstructionTerm[];
  /** By xorb hash (hex). */
  readonly fetch_info: Readonly<Record<string, readonly CASReconstructionFetchInfo[]>>;
}

export interface QueryReconstructionResponseV2 {
  readonly offset_into_first_range: number;
  readonly terms: readonly CASReconstructionTerm[];
  /** By xorb hash (hex). */
  readonly xorbs: Readonly<Record<string, readonly XorbMultiRangeFetch[]>>;
}

export type ReconstructionVersion = 1 | 2;

// ---------------------------------------------------------------------------------------------
// Writing: each fragment is exactly one wire object; values are trusted (the planner made them).

/** A CASReconstructionTerm. */
export function termJson(xorbHex: string, unpackedLength: number, chunks: ChunkRange): string {
  return `{"hash":"${xorbHex}","unpacked_length":${unpackedLength},"range":{"start":${chunks.start},"end":${chunks.end}}}`;
}

/** A V2 XorbRangeDescriptor. */
export function rangeDescriptorJson(chunks: ChunkRange, bytes: ByteRange): string {
  return `{"chunks":{"start":${chunks.start},"end":${chunks.end}},"bytes":{"start":${bytes.start},"end":${bytes.end}}}`;
}

/** A V2 XorbMultiRangeFetch, from its URL as a JSON literal and its descriptors joined by commas. */
export function multiRangeFetchJson(urlJson: string, descriptorsJson: string): string {
  return `{"url":${urlJson},"ranges":[${descriptorsJson}]}`;
}

/** A V1 CASReconstructionFetchInfo around its URL: `[before the URL literal, after it]`. */
export function fetchInfoJsonAroundUrl(chunks: ChunkRange, bytes: ByteRange): [string, string] {
  return [`{"range":{"start":${chunks.start},"end":${chunks.end}},"url":`, `,"url_range":{"start":${bytes.start},"end":${bytes.end}}}`];
}

/** A QueryReconstructionResponseV2 from its terms and `xorbs` members, each already joined by commas. */
export function reconstructionV2Json(offsetIntoFirstRange: number, termsJson: string, xorbsMembersJson: string): string {
  return `{"offset_into_first_range":${offsetIntoFirstRange},"terms":[${termsJson}],"xorbs":{${xorbsMembersJson}}}`;
}

/** A QueryReconstructionResponse (V1) from its terms and `fetch_info` members, each already joined by commas. */
export function reconstructionV1Json(offsetIntoFirstRange: number, termsJson: string, fetchInfoMembersJson: string): string {
  return `{"offset_into_first_range":${offsetIntoFirstRange},"terms":[${termsJson}],"fetch_info":{${fetchInfoMembersJson}}}`;
}

// ---------------------------------------------------------------------------------------------
// Reading

/**
 * Longest URL accepted. castor keeps URLs under 8 KiB and presigned S3 URLs are shorter still;
 * this only stops a hostile answer from handing out megabyte strings per entry.
 */
export const MAX_FETCH_URL_CHARS = 64 * 1024;

const HTTP_URL = /^https?:\/\//i;

/** Parses a V1 answer (already JSON-decoded): every field checked and copied. FormatError otherwise. */
export function parseReconstructionV1(body: unknown): QueryReconstructionResponse {
  const reader = new AnswerReader(1, body);
  const fetchInfo = reader.xorbMap("fetch_info", (entry, xorbHex) => {
    const chunks = reader.chunks(entry.range, xorbHex);
    return { range: chunks, url: reader.url(entry.url, xorbHex), url_range: reader.bytes(entry.url_range, chunks, xorbHex) };
  });
  return { offset_into_first_range: reader.offset, terms: reader.terms, fetch_info: fetchInfo };
}

/** Parses a V2 answer (already JSON-decoded): every field checked and copied. FormatError otherwise. */
export function parseReconstructionV2(body: unknown): QueryReconstructionResponseV2 {
  const reader = new AnswerReader(2, body);
  const xorbs = reader.xorbMap("xorbs", (entry, xorbHex) => ({ url: reader.url(entry.url, xorbHex), ranges: reader.descriptors(entry.ranges, xorbHex) }));
  return { offset_into_first_range: reader.offset, terms: reader.terms, xorbs };
}

export function parseReconstruction(body: unknown, version: ReconstructionVersion): QueryReconstructionResponse | QueryReconstructionResponseV2 {
  return version === 2 ? parseReconstructionV2(body) : parseReconstructionV1(body);
}

type JsonObject = Record<string, unknown>;

/**
 * The checks both versions share, in the order of the fields: the root, the offset and the
 * terms on construction, then the version's map of xorbs. `bad` names the version in every message.
 */
class AnswerReader {
  private readonly root: JsonObject;
  readonly offset: number;
  readonly terms: CASReconstructionTerm[];

  constructor(
    private readonly version: ReconstructionVersion,
    body: unknown,
  ) {
    if (body === null || typeof body !== "object" || Array.isArray(body)) throw this.bad("not a JSON object");
    this.root = body as JsonObject;
    const offset = this.root.offset_into_first_range;
    if (!isCount(offset, MAX_XORB_UNCOMPRESSED_BYTES)) throw this.bad("offset_into_first_range is not a byte count within one term");
    this.offset = offset;
    this.terms = this.readTerms(this.root.terms);
  }

  private bad(detail: string): FormatError {
    return new FormatError("bad_reconstruction", `invalid V${this.version} reconstruction: ${detail}`);
  }

  private readTerms(value: unknown): CASReconstructionTerm[] {
    if (!Array.isArray(value)) throw this.bad("terms is not an array");
    return (value as unknown[]).map((raw, i) => {
      if (raw === null || typeof raw !== "object") throw this.bad(`term ${i} is not an object`);
      const { hash, range, unpacked_length: unpackedLength } = raw as JsonObject;
      if (typeof hash !== "string" || !isHashHex(hash)) throw this.bad(`term ${i} has no xorb hash`);
      const { start, end } = (range ?? {}) as JsonObject;
      if (!isCount(start, MAX_XORB_CHUNKS) || !isCount(end, MAX_XORB_CHUNKS) || start >= end) {
        throw this.bad(`term ${i} has no chunk range [start, end) within ${MAX_XORB_CHUNKS} chunks`);
      }
      if (!isCount(unpackedLength, MAX_XORB_UNCOMPRESSED_BYTES) || unpackedLength === 0) throw this.bad(`term ${i} has no unpacked_length within one xorb`);
      return { hash, unpacked_length: unpackedLength, range: chunkRange(start, end) };
    });
  }

  /** The version's `{xorb hex: [entry]}` map, `name`, each entry read by `readEntry`. */
  xorbMap<T>(name: string, readEntry: (entry: JsonObject, xorbHex: string) => T): Record<string, T[]> {
    const value = this.root[name];
    if (value === null || typeof value !== "object" || Array.isArray(value)) throw this.bad(`${name} is not an object`);
    const map: Record<string, T[]> = {};
    for (const [xorbHex, entries] of Object.entries(value as JsonObject)) {
      if (!isHashHex(xorbHex)) throw this.bad(`key ${JSON.stringify(xorbHex.slice(0, 80))} is not a xorb hash`);
      if (!Array.isArray(entries)) throw this.bad(`the entry list of xorb ${xorbHex} is not an array`);
      map[xorbHex] = (entries as unknown[]).map((entry) => {
        if (entry === null || typeof entry !== "object") throw this.bad(`an entry of xorb ${xorbHex} is not an object`);
        return readEntry(entry as JsonObject, xorbHex);
      });
    }
    return map;
  }

  url(value: unknown, xorbHex: string): string {
    if (typeof value !== "string" || !HTTP_URL.test(value)) throw this.bad(`an entry of xorb ${xorbHex} has no http(s) url`);
    if (value.length > MAX_FETCH_URL_CHARS) throw this.bad(`an entry of xorb ${xorbHex} has a url longer than ${MAX_FETCH_URL_CHARS} characters`);
    return value;
  }

  /** V2 `ranges`: at least one descriptor. */
  descriptors(value: unknown, xorbHex: string): XorbRangeDescriptor[] {
    if (!Array.isArray(value) || value.length === 0) throw this.bad(`an entry of xorb ${xorbHex} has no ranges`);
    return (value as unknown[]).map((raw) => {
      const descriptor = (raw ?? {}) as JsonObject;
      const chunks = this.chunks(descriptor.chunks, xorbHex);
      return { chunks, bytes: this.bytes(descriptor.bytes, chunks, xorbHex) };
    });
  }

  chunks(value: unknown, xorbHex: string): ChunkRange {
    const { start, end } = (value ?? {}) as JsonObject;
    if (!isCount(start, MAX_XORB_CHUNKS) || !isCount(end, MAX_XORB_CHUNKS) || start >= end) {
      throw this.bad(`a range of xorb ${xorbHex} has no chunk range within ${MAX_XORB_CHUNKS} chunks`);
    }
    return chunkRange(start, end);
  }

  /** The byte range of `chunks`: at least a header per chunk, at most a xorb. */
  bytes(value: unknown, chunks: ChunkRange, xorbHex: string): ByteRange {
    const { start, end } = (value ?? {}) as JsonObject;
    if (!isCount(start, Number.MAX_SAFE_INTEGER) || !isCount(end, Number.MAX_SAFE_INTEGER) || start > end) {
      throw this.bad(`a range of xorb ${xorbHex} has no byte range`);
    }
    const length = end - start + 1;
    const chunkCount = chunks.end - chunks.start;
    if (length > DEFAULT_MAX_XORB_BODY_BYTES || length < chunkCount * XORB_CHUNK_HEADER_BYTES) {
      throw this.bad(`a range of xorb ${xorbHex} spans ${length} bytes, impossible for ${chunkCount} chunks`);
    }
    return byteRange(start, end);
  }
}

function isCount(value: unknown, max: number): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 && value <= max;
}

// ---------------------------------------------------------------------------------------------
// Using an answer

/** One byte range of a xorb and the URL serving it, whichever version listed it. */
export interface FetchSource {
  readonly xorbHex: string;
  readonly url: string;
  readonly chunks: ChunkRange;
  readonly bytes: ByteRange;
}

/** The sources an answer lists, by xorb hex, in the answer's order. */
export function fetchSourcesOf(answer: QueryReconstructionResponse | QueryReconstructionResponseV2): Map<string, FetchSource[]> {
  const sources = new Map<string, FetchSource[]>();
  if ("xorbs" in answer) {
    for (const [xorbHex, entries] of Object.entries(answer.xorbs)) {
      sources.set(
        xorbHex,
        entries.flatMap((entry) => entry.ranges.map(({ chunks, bytes }) => ({ xorbHex, url: entry.url, chunks, bytes }))),
      );
    }
  } else {
    for (const [xorbHex, entries] of Object.entries(answer.fetch_info)) {
      sources.set(
        xorbHex,
        entries.map((entry) => ({ xorbHex, url: entry.url, chunks: entry.range, bytes: entry.url_range })),
      );
    }
  }
  return sources;
}

/** Whether `source` holds every chunk of `term` (§8.4: each term lies inside one listed range of its xorb). */
export function coversTerm(source: FetchSource, term: CASReconstructionTerm): boolean {
  return source.chunks.start <= term.range.start && term.range.end <= source.chunks.end;
}
