/**
 * Rendering a reconstruction plan (reconstruction.ts) as the JSON answer (docs/protocol.md
 * §8.5, §8.6), pure: `renderV2` / `renderV1` sign one URL per V2 entry / V1 range and write the
 * body with the wire fragments of src/format/reconstruction.ts (whose parser reads them back)
 * and the fragments the plan's terms and ranges keep. Bodies are pure ASCII, so encoding them
 * is a copy.
 */
import type { Hash } from "../format/hash.js";
import type { ByteRange } from "../format/ranges.js";
import { multiRangeFetchJson, reconstructionV1Json, reconstructionV2Json } from "../format/reconstruction.js";
import type { FetchRange, PreparedXorb, ReconstructionPlan } from "./reconstruction.js";

/**
 * What the renderers need from transfer URLs; `TransferUrlSigner` of src/auth/transfer-url.ts
 * has this shape.
 */
export interface RangeUrlSigner {
  /** A URL authorising GETs of exactly these byte ranges (inclusive ends, ascending, disjoint) of the xorb. */
  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string;
  /**
   * Optional: the same URL already written as `jsonUrlLiteral` writes it. A signer that
   * remembers URLs (ReusingUrlSigner) remembers this form too, which spares the renderers one
   * JSON escape per entry — a large share of a 10 GiB file's response time.
   */
  signAsJson?(xorbHash: Hash, ranges: readonly ByteRange[]): string;
  /**
   * Optional: awaited before an answer is rendered. A signer whose key material can change
   * (presigned S3 URLs follow rotating credentials) renews it here, so `sign` stays synchronous.
   */
  refresh?(): Promise<void>;
}

/**
 * Clients and proxies commonly cap a URL and a header value at 8 KiB; production splits
 * entries at about this size too (§8.5).
 */
export const MAX_V2_URL_CHARS = 8192;
export const MAX_V2_RANGE_HEADER_CHARS = 8192;

export interface V2Limits {
  /** Longest URL of one entry. */
  maxUrlChars: number;
  /** Longest `bytes=a-b,c-d,…` value of one entry (what a multi-range GET sends). */
  maxRangeHeaderChars: number;
  /** Most ranges in one entry; default unbounded. 1 for URLs that serve one range each. */
  maxRangesPerEntry?: number;
}

const DEFAULT_V2_LIMITS: V2Limits = { maxUrlChars: MAX_V2_URL_CHARS, maxRangeHeaderChars: MAX_V2_RANGE_HEADER_CHARS };

/**
 * One range per V2 entry, for signers whose URLs serve exactly one range (presigned S3 GETs:
 * S3 answers no multi-range request). Safe for every client (§8.5): each entry is fetched with
 * one single-range GET of exactly its range.
 */
export const SINGLE_RANGE_V2_LIMITS: V2Limits = Object.freeze({ ...DEFAULT_V2_LIMITS, maxRangesPerEntry: 1 });

const RANGE_UNIT_PREFIX = "bytes=";

function termsJson(plan: ReconstructionPlan): string {
  let out = "";
  for (let i = 0; i < plan.terms.length; i++) out += (i === 0 ? "" : ",") + plan.terms[i].json;
  return out;
}

/**
 * The V2 body (QueryReconstructionResponseV2), pure ASCII. Each xorb's ranges go into as few
 * entries as the limits allow — one signed URL each — split where the multi-range header value
 * or the URL would exceed its limit, or past `maxRangesPerEntry` ranges.
 */
export function renderV2(plan: ReconstructionPlan, signer: RangeUrlSigner, limits: V2Limits = DEFAULT_V2_LIMITS): string {
  const entries = new EntryWriter(signer, limits);
  let xorbs = "";
  for (let f = 0; f < plan.fetches.length; f++) {
    const { xorb, ranges } = plan.fetches[f];
    xorbs += `${(f === 0 ? '"' : ',"') + xorb.hex}":[${entries.write(xorb, ranges)}]`;
  }
  return reconstructionV2Json(plan.offsetIntoFirstRange, termsJson(plan), xorbs);
}

/**
 * Packs ranges greedily into entries whose `bytes=…` value fits a budget. The URL's length is
 * the signer's business and known only after signing; when one comes out too long, the budget
 * shrinks in proportion (for the rest of the response, since the signer's encoding does not
 * change) and the entry is signed again — about one extra signature per response, and only for
 * xorbs with hundreds of ranges.
 */
class EntryWriter {
  private rangeBudget: number;

  constructor(
    private readonly signer: RangeUrlSigner,
    private readonly limits: V2Limits,
  ) {
    this.rangeBudget = limits.maxRangeHeaderChars;
  }

  write(xorb: PreparedXorb, ranges: readonly FetchRange[]): string {
    if (ranges.length === 1 || this.limits.maxRangesPerEntry === 1) {
      let out = "";
      for (let i = 0; i < ranges.length; i++) {
        out += (i === 0 ? "" : ",") + multiRangeFetchJson(signedJson(this.signer, xorb.hash, [ranges[i].bytes]), ranges[i].descriptorJson);
      }
      return out;
    }
    const maxRanges = this.limits.maxRangesPerEntry ?? Number.POSITIVE_INFINITY;
    let out = "";
    let first = 0;
    while (first < ranges.length) {
      let chars = RANGE_UNIT_PREFIX.length + rangeChars(ranges[first]);
      let end = first + 1;
      while (end < ranges.length && end - first < maxRanges && chars + 1 + rangeChars(ranges[end]) <= this.rangeBudget) {
        chars += 1 + rangeChars(ranges[end]);
        end++;
      }
      const group = ranges.slice(first, end);
      const url = this.signer.sign(
        xorb.hash,
        group.map((range) => range.bytes),
      );
      if (url.length > this.limits.maxUrlChars && group.length > 1) {
        this.rangeBudget = Math.min(chars - 1, Math.floor((chars * this.limits.maxUrlChars * 0.95) / url.length));
        continue;
      }
      let descriptors = "";
      for (let i = 0; i < group.length; i++) descriptors += (i === 0 ? "" : ",") + group[i].descriptorJson;
      out += (out === "" ? "" : ",") + multiRangeFetchJson(jsonUrlLiteral(url), descriptors);
      first = end;
    }
    return out;
  }
}

/** Characters of `start-end` in a Range header value. */
function rangeChars(range: FetchRange): number {
  return digitCount(range.bytes.start) + 1 + digitCount(range.bytes.end);
}

function digitCount(value: number): number {
  let digits = 1;
  while (value >= 10) {
    value = Math.floor(value / 10);
    digits++;
  }
  return digits;
}

const NON_ASCII = /[^\x00-\x7f]/;
const NON_ASCII_ALL = /[^\x00-\x7f]/g;

/**
 * A URL as a JSON string literal, in ASCII (non-ASCII as \uXXXX escapes) so that bodies are
 * pure ASCII and can be encoded as Latin-1, a plain copy. WHATWG-serialized URLs are ASCII
 * already; the escape is a guard against a signer that is not.
 */
export function jsonUrlLiteral(url: string): string {
  const quoted = JSON.stringify(url);
  return NON_ASCII.test(quoted) ? quoted.replace(NON_ASCII_ALL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`) : quoted;
}

function signedJson(signer: RangeUrlSigner, xorbHash: Hash, ranges: readonly ByteRange[]): string {
  return signer.signAsJson !== undefined ? signer.signAsJson(xorbHash, ranges) : jsonUrlLiteral(signer.sign(xorbHash, ranges));
}

/** The V1 body (QueryReconstructionResponse), pure ASCII: one signed URL per merged range. */
export function renderV1(plan: ReconstructionPlan, signer: RangeUrlSigner): string {
  let fetchInfo = "";
  for (let f = 0; f < plan.fetches.length; f++) {
    const { xorb, ranges } = plan.fetches[f];
    let entries = "";
    for (let i = 0; i < ranges.length; i++) {
      const range = ranges[i];
      const [beforeUrl, afterUrl] = range.v1Json;
      entries += (i === 0 ? "" : ",") + beforeUrl + signedJson(signer, xorb.hash, [range.bytes]) + afterUrl;
    }
    fetchInfo += `${(f === 0 ? '"' : ',"') + xorb.hex}":[${entries}]`;
  }
  return reconstructionV1Json(plan.offsetIntoFirstRange, termsJson(plan), fetchInfo);
}
