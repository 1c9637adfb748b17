/**
 * Signed transfer URLs: castor's answer to docs/protocol.md §8.7. Real clients fetch xorb bytes
 * with no Authorization header, so each URL authorises itself:
 *
 *     {publicUrl}/v1/transfer/{xorb hex}?x={expiry, unix ms}&r={ranges}&s={signature}
 *
 * - `r` lists the signed byte ranges (inclusive ends, ascending, disjoint) compactly: each range
 *   is `{gap}.{length}` in base 36, where `gap` counts the bytes between the previous range's
 *   end (or byte 0) and this range's start. Offsets inside a 64 MiB xorb take 8 decimal digits
 *   each (`s-e,` ≈ 18 characters a range); a chunk-sized gap and length in base 36 take ~4 each
 *   (≈ 10 characters a range), so an 8 KiB URL carries ~800 ranges instead of ~450.
 * - `x` is the expiry in milliseconds since the epoch: `now + CASTOR_TRANSFER_URL_TTL`. A URL is
 *   valid while `now < x`, so the configured lifetime holds to the millisecond (whole seconds
 *   would cut up to a second off, which matters with a TTL of 1). It is unrelated to the
 *   lifetime of the access token that obtained the URL.
 * - `s` is HMAC-SHA256 (base64url, 43 characters) with the server's URL key over the PATH AND
 *   QUERY before `&s=`, byte for byte, exactly as castor's router receives it. Any changed byte
 *   of the path or query breaks it.
 *
 * Canonical path: the MAC never covers the scheme, host or the path prefix of
 * `CASTOR_PUBLIC_URL`. It covers `/v1/transfer/…` — the URL relative to the public URL — which
 * is what castor sees when a proxy mounts it under a prefix (`https://example.com/cas` →
 * castor receives `/v1/transfer/…`, since every castor route lives at `/v1/…`). So any node
 * behind the same public URL, sharing `CASTOR_URL_KEY`, verifies any node's URLs, and moving
 * the public host does not invalidate URLs in flight.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { hashToHex, type Hash } from "../format/hash.js";
import { byteRange, type ByteRange } from "../format/ranges.js";

export interface TransferUrlSigner {
  /** A URL authorising GETs of exactly these byte ranges (inclusive ends, ascending, disjoint) of the xorb. */
  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string;
}

/** What a verified URL authorises. */
export interface VerifiedTransfer {
  /** The xorb, in the hash string form (as in the path). */
  readonly xorbHex: string;
  /** The signed ranges, ascending and disjoint. */
  readonly ranges: readonly ByteRange[];
  readonly expiresAtMs: number;
}

/** The transfer route's view of the URL authority (`HmacTransferUrls` implements it). */
export interface TransferUrlVerifier {
  /** Verifies the request target (path and query as received); throws `TransferUrlError`. */
  verify(pathAndQuery: string): VerifiedTransfer;
}

export const TRANSFER_PATH_PREFIX = "/v1/transfer/";

/**
 * Longest path + query accepted. Node refuses request heads over 16 KiB (its default
 * `maxHeaderSize`) anyway; the reconstruction API keeps URLs under 8 KiB.
 */
export const MAX_TRANSFER_TARGET_CHARS = 16 * 1024;

/** A URL key shorter than this is a configuration bug (keys.ts generates 43 characters). */
export const MIN_URL_KEY_BYTES = 32;

export type TransferUrlRejection =
  /** Not of the transfer URL form at all (missing or extra query parameters, bad path). */
  | "malformed"
  /** The signature does not match: the URL was altered or signed with another key. */
  | "bad_signature"
  /** Genuine but past its expiry. */
  | "expired"
  /** No Range header. */
  | "range_missing"
  /** A Range header that is neither the full signed list nor exactly one signed range. */
  | "range_not_signed";

/** Every refusal of a transfer request; the route answers 403 with the message. */
export class TransferUrlError extends Error {
  override readonly name = "TransferUrlError";
  constructor(
    readonly reason: TransferUrlRejection,
    message: string,
  ) {
    super(message);
  }
}

export interface HmacTransferUrlOptions {
  /** The HMAC key (`CastorKeys.urlKey`); the same on every node behind one public URL. */
  key: Uint8Array;
  /** Base of the URLs (`CASTOR_PUBLIC_URL`, no trailing slash); a function when known only after binding. */
  publicUrl: string | (() => string);
  /** Lifetime of a URL in seconds (`CASTOR_TRANSFER_URL_TTL`), ≥ 1. */
  ttlSeconds: number;
  /** Clock in ms since the epoch; tests pin it. */
  now?: () => number;
}

const REFRESH_HINT = "request fresh URLs from the reconstruction API (GET /v2/reconstructions/{file_id})";
const SIGNATURE_CHARS = 43;
const SIGNATURE_PARAM = "&s=";
const HEX64 = /^[0-9a-f]{64}$/;
/** `x` then `r`, nothing else: the signed query is compared byte for byte, so its form is fixed. */
const SIGNED_QUERY = /^x=(0|[1-9][0-9]{0,15})&r=([0-9a-z.,]+)$/;
/** Base 36 of at most 10 digits stays below 2^53; no leading zeros, so every value has one spelling. */
const BASE36_NUMBER = /^(?:0|[1-9a-z][0-9a-z]{0,9})$/;

/**
 * Signs and verifies transfer URLs with an HMAC key. `sign` runs ~160 times per reconstruction
 * response, so it does one string build and one HMAC and nothing else (see bench/transfer.ts).
 */
export class HmacTransferUrls implements TransferUrlSigner, TransferUrlVerifier {
  private readonly key: Buffer;
  private readonly publicUrl: () => string;
  private readonly ttlMs: number;
  private readonly now: () => number;

  constructor(options: HmacTransferUrlOptions) {
    if (options.key.byteLength < MIN_URL_KEY_BYTES) {
      throw new TypeError(
        `the transfer-URL key has ${options.key.byteLength} bytes; it needs at least ${MIN_URL_KEY_BYTES} (set CASTOR_URL_KEY to 32+ characters or let castor generate one)`,
      );
    }
    if (!Number.isSafeInteger(options.ttlSeconds) || options.ttlSeconds < 1) {
      throw new TypeError(`the transfer-URL lifetime must be a whole number of seconds ≥ 1, got ${String(options.ttlSeconds)}`);
    }
    // A private copy: the caller's buffer may be reused or wiped.
    this.key = Buffer.from(options.key);
    const { publicUrl } = options;
    this.publicUrl = typeof publicUrl === "function" ? publicUrl : () => publicUrl;
    this.ttlMs = options.ttlSeconds * 1000;
    this.now = options.now ?? Date.now;
  }

  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    return this.publicUrl() + this.signTarget(xorbHash, ranges);
  }

  /** The signed URL relative to the public URL: `/v1/transfer/{hex}?x=…&r=…&s=…`. */
  signTarget(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    const signed = `${TRANSFER_PATH_PREFIX}${hashToHex(xorbHash)}?x=${Math.floor(this.now()) + this.ttlMs}&r=${encodeRanges(ranges)}`;
    if (signed.length + SIGNATURE_PARAM.length + SIGNATURE_CHARS > MAX_TRANSFER_TARGET_CHARS) {
      throw new RangeError(
        `${ranges.length} ranges make a transfer URL longer than ${MAX_TRANSFER_TARGET_CHARS} characters, which no server accepts: split them over several URLs`,
      );
    }
    return signed + SIGNATURE_PARAM + this.mac(signed);
  }

  verify(pathAndQuery: string): VerifiedTransfer {
    if (pathAndQuery.length > MAX_TRANSFER_TARGET_CHARS) {
      throw malformed(`it is longer than ${MAX_TRANSFER_TARGET_CHARS} characters`);
    }
    const queryAt = pathAndQuery.indexOf("?");
    if (queryAt === -1) throw malformed("it has no signed query string");
    const xorbHex = pathAndQuery.slice(TRANSFER_PATH_PREFIX.length, queryAt);
    if (!pathAndQuery.startsWith(TRANSFER_PATH_PREFIX) || !HEX64.test(xorbHex)) {
      throw malformed("its path is not /v1/transfer/<64 lowercase hex digits>");
    }
    const signatureAt = pathAndQuery.lastIndexOf(SIGNATURE_PARAM);
    if (signatureAt < queryAt) throw malformed("its query has no signature parameter `s`");

    const signed = pathAndQuery.slice(0, signatureAt);
    // Compared as text: the exact 43-character spelling is required, so no two spellings of one
    // signature exist. Lengths are public; only equal lengths reach the constant-time compare.
    const given = Buffer.from(pathAndQuery.slice(signatureAt + SIGNATURE_PARAM.length), "utf8");
    const expected = Buffer.from(this.mac(signed), "utf8");
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw new TransferUrlError(
        "bad_signature",
        `The transfer URL's signature does not match: the URL was altered (every byte of its path and query is signed) or was signed with another server key; ${REFRESH_HINT}`,
      );
    }

    // Only URLs this server signed get here, so a parse failure below is a castor bug, not an attack.
    const query = SIGNED_QUERY.exec(signed.slice(queryAt + 1));
    const expiresAtMs = query ? Number(query[1]) : NaN;
    const ranges = query ? decodeRanges(query[2]) : null;
    if (ranges === null || !Number.isSafeInteger(expiresAtMs)) {
      throw malformed("its signed query is not of the form x=<expiry>&r=<ranges>");
    }
    if (this.now() >= expiresAtMs) {
      throw new TransferUrlError("expired", `The transfer URL expired at ${new Date(expiresAtMs).toISOString()}; ${REFRESH_HINT}`);
    }
    return { xorbHex, ranges, expiresAtMs };
  }

  private mac(signed: string): string {
    // UTF-8, not latin1: latin1 keeps only the low byte of a character, so two different
    // targets could share a MAC.
    return createHmac("sha256", this.key).update(signed, "utf8").digest("base64url");
  }
}

function malformed(why: string): TransferUrlError {
  return new TransferUrlError("malformed", `This is not a valid castor transfer URL (${why}; expected /v1/transfer/<xorb hash>?x=…&r=…&s=…): ${REFRESH_HINT}`);
}

/** `{gap}.{length}` per range in base 36, joined by `,`. Validates what `sign` promises to callers. */
function encodeRanges(ranges: readonly ByteRange[]): string {
  if (ranges.length === 0) throw new RangeError("a transfer URL needs at least one byte range");
  let encoded = "";
  let nextFree = 0;
  for (let i = 0; i < ranges.length; i++) {
    const { start, end } = ranges[i];
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < nextFree || end < start) {
      throw new RangeError(
        `byte range #${i} {start: ${String(start)}, end: ${String(end)}} is invalid: ranges must be integers with start ≤ end (inclusive), ascending and disjoint`,
      );
    }
    if (i > 0) encoded += ",";
    encoded += `${(start - nextFree).toString(36)}.${(end - start + 1).toString(36)}`;
    nextFree = end + 1;
  }
  return encoded;
}

/** The inverse of `encodeRanges`, or null when `encoded` is not in its exact form. */
function decodeRanges(encoded: string): ByteRange[] | null {
  const ranges: ByteRange[] = [];
  let nextFree = 0;
  // The split is bounded by the target length checked in verify().
  for (const pair of encoded.split(",")) {
    const dot = pair.indexOf(".");
    const gapText = pair.slice(0, dot);
    const lengthText = pair.slice(dot + 1);
    if (dot === -1 || !BASE36_NUMBER.test(gapText) || !BASE36_NUMBER.test(lengthText)) return null;
    const start = nextFree + parseInt(gapText, 36);
    const length = parseInt(lengthText, 36);
    const end = start + length - 1;
    if (length < 1 || !Number.isSafeInteger(end)) return null;
    ranges.push(byteRange(start, end));
    nextFree = end + 1;
  }
  return ranges;
}

/** Longest Range header considered; Node caps the whole request head at 16 KiB anyway. */
const MAX_RANGE_HEADER_CHARS = 32 * 1024;
/** One `start-end` element, optional whitespace around it (RFC 9110 list syntax), canonical decimals. */
const RANGE_ELEMENT = /^[ \t]*(0|[1-9][0-9]{0,15})-(0|[1-9][0-9]{0,15})[ \t]*$/;

/**
 * The ranges a request may be served: its `Range` header must be exactly the signed list
 * (`bytes=s1-e1,s2-e2,…`, as hf.js and xet-core with multi-range fetching send it) or exactly
 * one signed range (`bytes=s-e`: xet-core by default splits an entry into one request per
 * range). A sub-range, a superset, a subset of several, a reordering, a suffix or open range
 * (`bytes=-n`, `bytes=n-`) are refused. Whitespace around the commas and at the ends is
 * tolerated, since HTTP list syntax allows it and it changes nothing; leading zeros, another
 * unit or whitespace inside a range are refused.
 */
export function selectRequestedRanges(signed: readonly ByteRange[], rangeHeader: string | undefined): readonly ByteRange[] {
  if (rangeHeader === undefined || rangeHeader.trim() === "") {
    throw new TransferUrlError(
      "range_missing",
      "A Range header is required: send `Range: bytes=<start>-<end>` with one of this URL's ranges, or all of them joined by commas, as listed in the reconstruction response",
    );
  }
  const header = rangeHeader.trim();
  const refused = () =>
    new TransferUrlError(
      "range_not_signed",
      `The Range header ${quote(header)} is not authorised by this URL: send exactly one of its signed ranges (bytes=<start>-<end>) or all of them in order (bytes=<s1>-<e1>,<s2>-<e2>,…), as listed in the reconstruction response`,
    );
  if (header.length > MAX_RANGE_HEADER_CHARS || !header.startsWith("bytes=")) throw refused();

  const elements = header.slice("bytes=".length).split(",", signed.length + 1);
  if (elements.length !== 1 && elements.length !== signed.length) throw refused();
  const requested: ByteRange[] = [];
  for (const element of elements) {
    const match = RANGE_ELEMENT.exec(element);
    if (!match) throw refused();
    requested.push(byteRange(Number(match[1]), Number(match[2])));
  }

  if (requested.length === signed.length && requested.every((range, i) => sameRange(range, signed[i]))) return signed;
  if (requested.length === 1) {
    const found = findByStart(signed, requested[0].start);
    if (found !== undefined && found.end === requested[0].end) return [found];
  }
  throw refused();
}

function sameRange(a: ByteRange, b: ByteRange): boolean {
  return a.start === b.start && a.end === b.end;
}

/** Binary search: signed lists hold up to ~1000 ranges and are ascending. */
function findByStart(ranges: readonly ByteRange[], start: number): ByteRange | undefined {
  let low = 0;
  let high = ranges.length - 1;
  while (low <= high) {
    const middle = (low + high) >>> 1;
    const candidate = ranges[middle];
    if (candidate.start === start) return candidate;
    if (candidate.start < start) low = middle + 1;
    else high = middle - 1;
  }
  return undefined;
}

function quote(text: string): string {
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}…` : text);
}
