/**
 * Signed Git LFS object URLs: the `href` of the basic transfer's download and upload actions.
 * LFS clients do not all send credentials to an action's URL (`@huggingface/hub` forwards
 * none, as the Hub's actions are presigned storage URLs), so each URL authorises itself, for
 * one operation on one object of one repository, until it expires:
 *
 *     {publicUrl}/{prefix}{ns}/{name}.git/info/lfs/objects/{oid}?x={expiry, unix ms}&s={signature}
 *
 * `s` is HMAC-SHA256 (base64url) over the operation, the repository (type and name), the oid
 * and `x`, with a key derived from the server's URL key (CASTOR_URL_KEY) for this purpose alone,
 * so every node sharing that key verifies any node's URLs, and a transfer URL's signature is
 * never one of these.
 */
import { createHmac, timingSafeEqual } from "node:crypto";

export type LfsOperation = "download" | "upload";

export interface LfsObjectRef {
  operation: LfsOperation;
  /** `model`, `dataset` or `space`. */
  repoType: string;
  /** `namespace/name`. */
  repoName: string;
  /** The object's SHA-256, 64 hex digits. */
  oid: string;
}

const KEY_LABEL = "castor git-lfs object urls";

export class LfsObjectUrls {
  private readonly key: Buffer;
  private readonly ttlMs: number;

  constructor(
    urlKey: Uint8Array,
    ttlSeconds: number,
    private readonly now: () => number = Date.now,
  ) {
    this.key = createHmac("sha256", urlKey).update(KEY_LABEL).digest();
    this.ttlMs = ttlSeconds * 1000;
  }

  /** How long a signed URL stays valid, in seconds (the batch answer's `expires_in`). */
  get ttlSeconds(): number {
    return Math.floor(this.ttlMs / 1000);
  }

  /** The query (`x=…&s=…`) that authorises `ref` from now until the lifetime is over. */
  signQuery(ref: LfsObjectRef): string {
    const expires = this.now() + this.ttlMs;
    return `x=${expires}&s=${this.signature(ref, expires)}`;
  }

  /** Whether the query parameters `x` and `s` authorise `ref` now. */
  verify(ref: LfsObjectRef, expires: string | undefined, signature: string | undefined): boolean {
    if (expires === undefined || signature === undefined || !/^\d{1,15}$/.test(expires)) return false;
    const expected = Buffer.from(this.signature(ref, Number(expires)));
    const given = Buffer.from(signature);
    return given.length === expected.length && timingSafeEqual(given, expected) && this.now() < Number(expires);
  }

  private signature(ref: LfsObjectRef, expires: number): string {
    return createHmac("sha256", this.key).update(`${ref.operation}\n${ref.repoType}\n${ref.repoName}\n${ref.oid}\n${expires}`).digest("base64url");
  }
}
