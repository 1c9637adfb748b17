/**
 * `CASTOR_TRANSFER_MODE=presigned`: reconstruction answers hand out presigned S3 GETs of the
 * xorb objects instead of castor's own transfer URLs, so clients fetch bytes from the object
 * store directly and castor serves JSON only. Each URL names one byte range, so V2 answers put
 * one range in each entry (S3 serves no multi-range GET) and V1 answers are unchanged.
 *
 * What a presigned URL grants (AWS Signature V4, query form; checked against Ceph RGW in
 * test/scaleout/presigned.test.ts):
 * - `Range` is a SIGNED header (`X-Amz-SignedHeaders=host;range`): the holder must send exactly
 *   `Range: bytes=<start>-<end>` of the entry; any other Range, or none, breaks the signature
 *   and the store answers 403. So the URL is range-restricted — on stores that verify every
 *   signed header, as AWS S3 and RGW do. A store that skipped that check would serve the whole
 *   object to the holder; the xorb objects then expose only chunk bytes of that xorb (castor
 *   stores no footer, so never the raw chunk-hash table), but possibly chunks of other files.
 * - It stays valid until `CASTOR_TRANSFER_URL_TTL` runs out (at most 7 days, SigV4's limit) and
 *   cannot be revoked short of rotating the access key; with temporary credentials (an instance
 *   role) it also dies with the session that signed it. Clients re-query on 403 either way.
 * - It carries the access key id (never the secret) in `X-Amz-Credential`.
 *
 * Why the signature is computed here and not by the SDK's presigner: `getSignedUrl` costs
 * 0.8–1 ms of CPU per URL (measured on a 2-core machine; it resolves the endpoint rules and
 * builds a middleware stack each time), and a reconstruction answer needs one URL per range —
 * hundreds for a large file — on the request's hot path, where castor's own HMAC URLs cost
 * microseconds. SigV4 itself is one SHA-256 and one HMAC per URL, so `sign` does exactly that,
 * synchronously: ~9 µs per URL on the same machine. The SDK stays the authority on everything else: at
 * start-up it presigns one template URL, from which the endpoint, addressing style (path or
 * virtual host), encoded bucket and prefix, region and fixed query parameters are taken; and the
 * signer must reproduce that URL byte for byte at the same instant, or `create` refuses to start.
 */
import { createHash, createHmac } from "node:crypto";
import { GetObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { ConfigError, MAX_PRESIGNED_URL_TTL_SECONDS } from "../config.js";
import { hashToHex, ZERO_HASH, type Hash } from "../format/hash.js";
import { blobKey, type BlobKey } from "../storage/blob-store.js";
import { byteRange, type ByteRange } from "../format/ranges.js";
import type { RangeUrlSigner } from "./reconstruction.js";

/** SigV4 presigned URLs live at most 7 days. */
export const MAX_PRESIGNED_TTL_SECONDS = MAX_PRESIGNED_URL_TTL_SECONDS;

/** What presigning needs of the S3 blob store (`S3BlobStore` has this shape). */
export interface PresignableStore {
  readonly client: S3Client;
  readonly bucket: string;
  /** The object name of a blob key, prefix included. */
  objectKeyOf(key: BlobKey): string;
}

export interface PresignedTransferOptions {
  /** `CASTOR_TRANSFER_URL_TTL`: lifetime of every URL, 1 s .. 7 days. */
  ttlSeconds: number;
  /** Clock in ms since the epoch; tests pin it. */
  now?: () => number;
}

interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

/** Where every URL points and how it is scoped, read from the SDK's template URL. */
interface UrlShape {
  /** Everything before `xorbs/<hex>`: scheme, host, encoded bucket (path style) and prefix. */
  base: string;
  /** Path part of `base`, the start of the canonical URI. */
  basePath: string;
  /** The Host header the SDK signs. */
  host: string;
  region: string;
  service: string;
  /** `X-Amz-Content-Sha256`: the payload hash line of the canonical request. */
  payloadHash: string;
  /** Encoded `name=value` query parameters that do not vary per URL (algorithm, signed headers, x-id, …). */
  fixedParams: string[];
}

interface SecondParts {
  second: number;
  /** The credentials object the parts were built with (replaced, never mutated, on refresh). */
  credentials: Credentials;
  canonical: string;
  stringToSignHead: string;
  signingKey: Buffer;
  /** `name=value&` pairs sorting before X-Amz-Signature, and `&name=value` pairs after it. */
  beforeSignature: string;
  afterSignature: string;
}

const ALGORITHM = "AWS4-HMAC-SHA256";
const SIGNED_HEADERS = "host;range";
/** Parameters this signer writes itself for every URL; all others are copied from the template. */
const PER_URL_PARAMS = new Set(["X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-Security-Token", "X-Amz-Signature"]);
const XORB_PATH_PREFIX = "xorbs/";
const HEX_CHARS = 64;

export class PresignedTransferUrls implements RangeUrlSigner {
  private credentials: Credentials;
  private signingKey: { dateStamp: string; secret: string; key: Buffer } | null = null;
  private second: SecondParts | null = null;

  private constructor(
    private readonly store: PresignableStore,
    private readonly shape: UrlShape,
    credentials: Credentials,
    private readonly ttlSeconds: number,
    private readonly now: () => number,
  ) {
    this.credentials = credentials;
  }

  /**
   * Reads the URL shape from one SDK-presigned template URL and checks that this signer
   * produces the identical URL; refuses (before castor listens) when the TTL is beyond SigV4's
   * 7 days, when no credentials can be resolved, or when the two disagree.
   */
  static async create(store: PresignableStore, options: PresignedTransferOptions): Promise<PresignedTransferUrls> {
    const { ttlSeconds } = options;
    if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds < 1 || ttlSeconds > MAX_PRESIGNED_TTL_SECONDS) {
      throw new ConfigError(
        `CASTOR_TRANSFER_URL_TTL must be from 1 to ${MAX_PRESIGNED_TTL_SECONDS} seconds (7 days, the longest a presigned S3 URL can live) with CASTOR_TRANSFER_MODE=presigned, got ${String(ttlSeconds)}`,
      );
    }
    const now = options.now ?? Date.now;
    const credentials = await resolveCredentials(store.client);
    const templateKey = blobKey("xorbs", ZERO_HASH);
    const templateRange = byteRange(0, 0);
    // Whole seconds: SigV4 dates have no finer unit, so the comparison below is exact.
    const signingDate = new Date(Math.floor(now() / 1000) * 1000);
    const template = await getSignedUrl(
      store.client,
      new GetObjectCommand({ Bucket: store.bucket, Key: store.objectKeyOf(templateKey), Range: rangeHeader(templateRange) }),
      { expiresIn: ttlSeconds, signingDate },
    );
    const signer = new PresignedTransferUrls(store, parseTemplate(template), credentials, ttlSeconds, now);
    const ours = signer.signAt(ZERO_HASH, templateRange, signingDate.getTime());
    if (ours !== template) {
      throw new Error(
        `CASTOR_TRANSFER_MODE=presigned: castor's presigned URL for this S3 endpoint differs from the AWS SDK's, so clients could be refused; use CASTOR_TRANSFER_MODE=proxy and report the endpoint setup.\n  SDK:    ${redactSignature(template)}\n  castor: ${redactSignature(ours)}`,
      );
    }
    return signer;
  }

  /**
   * Renews the credentials from the SDK's provider (memoized there, so normally no request);
   * called before each reconstruction answer is rendered so that `sign` can stay synchronous
   * and still follow rotating temporary credentials.
   */
  async refresh(): Promise<void> {
    const fresh = await resolveCredentials(this.store.client);
    const held = this.credentials;
    // Replaced only when changed: the per-second parts are kept for the credentials object.
    if (fresh.accessKeyId !== held.accessKeyId || fresh.secretAccessKey !== held.secretAccessKey || fresh.sessionToken !== held.sessionToken) {
      this.credentials = fresh;
    }
  }

  /** A presigned GET of exactly one byte range (inclusive end) of the xorb. */
  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    if (ranges.length !== 1) {
      throw new RangeError(`a presigned S3 URL covers exactly one byte range, ${ranges.length} were asked (render V2 with one range per entry)`);
    }
    return this.signAt(xorbHash, ranges[0], this.now());
  }

  private signAt(xorbHash: Hash, range: ByteRange, nowMs: number): string {
    const query = this.queryAt(nowMs);
    const hex = hashToHex(xorbHash);
    const canonicalRequest = `GET\n${this.shape.basePath}${XORB_PATH_PREFIX}${hex}\n${query.canonical}\nhost:${this.shape.host}\nrange:${rangeHeader(range)}\n\n${SIGNED_HEADERS}\n${this.shape.payloadHash}`;
    const stringToSign = `${query.stringToSignHead}${createHash("sha256").update(canonicalRequest).digest("hex")}`;
    const signature = createHmac("sha256", query.signingKey).update(stringToSign).digest("hex");
    return `${this.shape.base}${XORB_PATH_PREFIX}${hex}?${query.beforeSignature}X-Amz-Signature=${signature}${query.afterSignature}`;
  }

  /**
   * Everything of a URL that depends only on the second and the credentials, built once per
   * second: the canonical query, the head of the string to sign, the signing key and the
   * query around the signature.
   */
  private queryAt(nowMs: number): SecondParts {
    const second = Math.floor(nowMs / 1000);
    const cached = this.second;
    if (cached !== null && cached.second === second && cached.credentials === this.credentials) return cached;
    const { shape, credentials } = this;
    const amzDate = new Date(second * 1000).toISOString().replace(/[-:]|\.\d{3}/g, ""); // 20250102T030405Z
    const dateStamp = amzDate.slice(0, 8);
    const scope = `${dateStamp}/${shape.region}/${shape.service}/aws4_request`;
    const params = [
      ...shape.fixedParams,
      `X-Amz-Credential=${encodeRfc3986(`${credentials.accessKeyId}/${scope}`)}`,
      `X-Amz-Date=${amzDate}`,
      `X-Amz-Expires=${this.ttlSeconds}`,
    ];
    if (credentials.sessionToken !== undefined) params.push(`X-Amz-Security-Token=${encodeRfc3986(credentials.sessionToken)}`);
    // SigV4 sorts the query by name. No parameter name is a prefix of another, so sorting the
    // `name=value` pairs sorts by name.
    params.sort(byCodeUnits);
    const signatureAt = params.findIndex((pair) => pair > "X-Amz-Signature=");
    const before = signatureAt < 0 ? params : params.slice(0, signatureAt);
    const after = signatureAt < 0 ? [] : params.slice(signatureAt);
    const parts: SecondParts = {
      second,
      credentials,
      canonical: params.join("&"),
      stringToSignHead: `${ALGORITHM}\n${amzDate}\n${scope}\n`,
      signingKey: this.signingKeyFor(dateStamp),
      beforeSignature: before.map((pair) => `${pair}&`).join(""),
      afterSignature: after.map((pair) => `&${pair}`).join(""),
    };
    this.second = parts;
    return parts;
  }

  /** The day's signing key (four chained HMACs), kept until the date or the secret changes. */
  private signingKeyFor(dateStamp: string): Buffer {
    const { secretAccessKey } = this.credentials;
    const cached = this.signingKey;
    if (cached !== null && cached.dateStamp === dateStamp && cached.secret === secretAccessKey) return cached.key;
    const hmac = (key: string | Buffer, data: string) => createHmac("sha256", key).update(data).digest();
    const key = hmac(hmac(hmac(hmac(`AWS4${secretAccessKey}`, dateStamp), this.shape.region), this.shape.service), "aws4_request");
    this.signingKey = { dateStamp, secret: secretAccessKey, key };
    return key;
  }
}

/** The exact `Range` header a client must send with the URL for `range` (inclusive end). */
export function rangeHeader(range: ByteRange): string {
  return `bytes=${range.start}-${range.end}`;
}

async function resolveCredentials(client: S3Client): Promise<Credentials> {
  let identity;
  try {
    identity = await client.config.credentials();
  } catch (err) {
    throw new Error(
      `CASTOR_TRANSFER_MODE=presigned needs S3 credentials to sign URLs with, and none could be resolved: set CASTOR_S3_ACCESS_KEY_ID and CASTOR_S3_SECRET_ACCESS_KEY (${(err as Error).message})`,
      { cause: err },
    );
  }
  return {
    accessKeyId: identity.accessKeyId,
    secretAccessKey: identity.secretAccessKey,
    ...(identity.sessionToken ? { sessionToken: identity.sessionToken } : {}),
  };
}

/** Reads the URL shape out of the SDK's template URL for `xorbs/<64 zeros>` (see the file comment). */
function parseTemplate(template: string): UrlShape {
  const queryAt = template.indexOf("?");
  const withoutQuery = queryAt < 0 ? template : template.slice(0, queryAt);
  const tail = XORB_PATH_PREFIX + "0".repeat(HEX_CHARS);
  const unexpected = (what: string) =>
    new Error(`CASTOR_TRANSFER_MODE=presigned: the AWS SDK's presigned URL has an unexpected form (${what}); use CASTOR_TRANSFER_MODE=proxy`);
  if (queryAt < 0 || !withoutQuery.endsWith(tail)) throw unexpected("no query, or the object name is not at the end of the path");
  const base = withoutQuery.slice(0, -tail.length);
  const url = new URL(template);
  const basePath = url.pathname.slice(0, url.pathname.length - tail.length);
  if (!base.endsWith(basePath)) throw unexpected("the path does not survive URL parsing unchanged");

  const fixedParams: string[] = [];
  let credential: string | undefined;
  let payloadHash = "UNSIGNED-PAYLOAD";
  for (const pair of template.slice(queryAt + 1).split("&")) {
    const name = pair.slice(0, pair.indexOf("="));
    if (name === "X-Amz-Credential") credential = decodeURIComponent(pair.slice(name.length + 1));
    if (name === "X-Amz-SignedHeaders" && decodeURIComponent(pair.slice(name.length + 1)) !== SIGNED_HEADERS) {
      throw unexpected(`it signs the headers ${pair.slice(name.length + 1)}, not ${SIGNED_HEADERS}`);
    }
    if (name === "X-Amz-Content-Sha256") payloadHash = decodeURIComponent(pair.slice(name.length + 1));
    if (!PER_URL_PARAMS.has(name)) fixedParams.push(pair);
  }
  // <access key id>/<yyyymmdd>/<region>/<service>/aws4_request
  const scope = credential?.split("/");
  if (scope === undefined || scope.length !== 5 || scope[4] !== "aws4_request") throw unexpected("no SigV4 credential scope");
  return { base, basePath, host: url.host, region: scope[2], service: scope[3], payloadHash, fixedParams };
}

/** SigV4's URI encoding: every byte but the unreserved characters A-Z a-z 0-9 - _ . ~ as %XX. */
function encodeRfc3986(text: string): string {
  return encodeURIComponent(text).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function redactSignature(url: string): string {
  return url.replace(/X-Amz-Signature=[0-9a-f]+/, "X-Amz-Signature=…");
}
