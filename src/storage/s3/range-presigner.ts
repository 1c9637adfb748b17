/**
 * The S3 store's `RangePresigner` (CASTOR_TRANSFER_MODE=presigned): presigned GETs of one byte
 * range of an object, so clients fetch bytes from the object store directly.
 *
 * What a presigned URL grants (AWS Signature V4, query form; checked against Ceph RGW in
 * test/scaleout/presigned.test.ts and the S3 contract suite):
 * - `Range` is a SIGNED header (`X-Amz-SignedHeaders=host;range`): the holder must send exactly
 *   `Range: bytes=<first>-<last>` of the span; any other Range, or none, breaks the signature
 *   and the store answers 403. So the URL is range-restricted — on stores that verify every
 *   signed header, as AWS S3 and RGW do. A store that skipped that check would serve the whole
 *   object to the holder.
 * - It stays valid until its lifetime runs out (at most 7 days, SigV4's limit) and cannot be
 *   revoked short of rotating the access key; with temporary credentials (an instance role) it
 *   also dies with the session that signed it.
 * - It carries the access key id (never the secret) in `X-Amz-Credential`.
 *
 * Why the signature is computed here and not by the SDK's presigner: `getSignedUrl` costs
 * 0.8–1 ms of CPU per URL (measured on a 2-core machine; it resolves the endpoint rules and
 * builds a middleware stack each time), and a reconstruction answer needs one URL per range —
 * hundreds for a large file — on the request's hot path, where castor's own HMAC URLs cost
 * microseconds. SigV4 itself is one SHA-256 and one HMAC per URL, so `presign` does exactly
 * that, synchronously: ~9 µs per URL on the same machine. The SDK stays the authority on
 * everything else: at start-up it presigns one template URL, from which the endpoint,
 * addressing style (path or virtual host), encoded bucket and prefix, region and fixed query
 * parameters are taken; and the signer must reproduce that URL byte for byte at the same
 * instant, or `create` refuses to start.
 */
import { createHash, createHmac } from "node:crypto";
import { GetObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { ZERO_HASH } from "../../format/hash.js";
import {
  blobKey,
  checkByteSpan,
  parseBlobKey,
  rangeHeaderOf,
  type BlobKey,
  type ByteSpan,
  type RangePresigner,
  type RangePresignerOptions,
} from "../blob-store.js";

/** What presigning needs of the S3 blob store (`S3BlobStore` has this shape). */
export interface PresignableStore {
  readonly client: S3Client;
  readonly bucket: string;
  /** The object name of a blob key, prefix included. */
  objectKeyOf(key: BlobKey): string;
}

interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

/** Where every URL points and how it is scoped, read from the SDK's template URL. */
interface UrlShape {
  /** Everything before the blob key: scheme, host, encoded bucket (path style) and prefix. */
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
/**
 * The object the template URL is signed for. Blob keys are lowercase hex, a kind and one "/",
 * none of which URI encoding changes, so every key is appended to the template's base as it is.
 */
const TEMPLATE_KEY = blobKey("xorbs", ZERO_HASH);

export class S3RangePresigner implements RangePresigner {
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
   * produces the identical URL; refuses (before castor listens) when no credentials can be
   * resolved or when the two disagree. `ttlSeconds` is trusted to be within SigV4's limit
   * (loadConfig checks it; the SDK refuses the template otherwise).
   */
  static async create(store: PresignableStore, options: RangePresignerOptions): Promise<S3RangePresigner> {
    const { ttlSeconds } = options;
    const now = options.now ?? Date.now;
    const credentials = await resolveCredentials(store.client);
    const templateSpan = { offset: 0, length: 1 };
    // Whole seconds: SigV4 dates have no finer unit, so the comparison below is exact.
    const signingDate = new Date(Math.floor(now() / 1000) * 1000);
    const template = await getSignedUrl(
      store.client,
      new GetObjectCommand({ Bucket: store.bucket, Key: store.objectKeyOf(TEMPLATE_KEY), Range: rangeHeaderOf(templateSpan) }),
      { expiresIn: ttlSeconds, signingDate },
    );
    const signer = new S3RangePresigner(store, parseTemplate(template), credentials, ttlSeconds, now);
    const ours = signer.presignAt(TEMPLATE_KEY, templateSpan, signingDate.getTime());
    if (ours !== template) {
      throw new Error(
        `CASTOR_TRANSFER_MODE=presigned: castor's presigned URL for this S3 endpoint differs from the AWS SDK's, so clients could be refused; use CASTOR_TRANSFER_MODE=proxy and report the endpoint setup.\n  SDK:    ${redactSignature(template)}\n  castor: ${redactSignature(ours)}`,
      );
    }
    return signer;
  }

  /**
   * Renews the credentials from the SDK's provider (memoized there, so normally no request);
   * called before each reconstruction answer is rendered so that `presign` can stay
   * synchronous and still follow rotating temporary credentials.
   */
  async refresh(): Promise<void> {
    const fresh = await resolveCredentials(this.store.client);
    const held = this.credentials;
    // Replaced only when changed: the per-second parts are kept for the credentials object.
    if (fresh.accessKeyId !== held.accessKeyId || fresh.secretAccessKey !== held.secretAccessKey || fresh.sessionToken !== held.sessionToken) {
      this.credentials = fresh;
    }
  }

  presign(key: BlobKey, span: ByteSpan): string {
    const validKey = parseBlobKey(key);
    // The form only: an infinite size accepts every well-formed span.
    checkByteSpan(validKey, span, Number.POSITIVE_INFINITY);
    return this.presignAt(validKey, span, this.now());
  }

  private presignAt(key: BlobKey, span: ByteSpan, nowMs: number): string {
    const query = this.queryAt(nowMs);
    const canonicalRequest = `GET\n${this.shape.basePath}${key}\n${query.canonical}\nhost:${this.shape.host}\nrange:${rangeHeaderOf(span)}\n\n${SIGNED_HEADERS}\n${this.shape.payloadHash}`;
    const stringToSign = `${query.stringToSignHead}${createHash("sha256").update(canonicalRequest).digest("hex")}`;
    const signature = createHmac("sha256", query.signingKey).update(stringToSign).digest("hex");
    return `${this.shape.base}${key}?${query.beforeSignature}X-Amz-Signature=${signature}${query.afterSignature}`;
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

/** Reads the URL shape out of the SDK's template URL for `TEMPLATE_KEY` (see the file comment). */
function parseTemplate(template: string): UrlShape {
  const queryAt = template.indexOf("?");
  const withoutQuery = queryAt < 0 ? template : template.slice(0, queryAt);
  const unexpected = (what: string) =>
    new Error(`CASTOR_TRANSFER_MODE=presigned: the AWS SDK's presigned URL has an unexpected form (${what}); use CASTOR_TRANSFER_MODE=proxy`);
  if (queryAt < 0 || !withoutQuery.endsWith(TEMPLATE_KEY)) throw unexpected("no query, or the object name is not at the end of the path");
  const base = withoutQuery.slice(0, -TEMPLATE_KEY.length);
  const url = new URL(template);
  const basePath = url.pathname.slice(0, url.pathname.length - TEMPLATE_KEY.length);
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
