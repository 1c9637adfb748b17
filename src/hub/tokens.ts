/**
 * Hub token secrets and ids. A secret is `hf_` + 32 random bytes in base64url (43 characters
 * of [A-Za-z0-9_-]); only its SHA-256 is stored. Lookups go by that hash, so no comparison
 * ever runs over the secret itself and response times reveal nothing about stored tokens.
 * A fast unsalted hash is enough here: the secret has 256 bits of entropy, so there is
 * nothing for a slow password hash to protect against.
 */
import { createHash, randomBytes } from "node:crypto";
import type { HubToken } from "../metadata/store.js";

export const HUB_TOKEN_PREFIX = "hf_";
const SECRET_BYTES = 32;
/** Anything longer or outside this alphabet cannot be a castor hub token; refused before hashing. */
const PLAUSIBLE_SECRET = /^hf_[A-Za-z0-9_-]{1,256}$/;

export function generateHubTokenSecret(): string {
  return HUB_TOKEN_PREFIX + randomBytes(SECRET_BYTES).toString("base64url");
}

/** Public id shown by `token list`: `tok_` + 12 hex characters. */
export function generateHubTokenId(): string {
  return `tok_${randomBytes(6).toString("hex")}`;
}

export function isPlausibleHubTokenSecret(secret: string): boolean {
  return PLAUSIBLE_SECRET.test(secret);
}

/** Hex SHA-256 of the secret, the form stored and looked up. */
export function hashHubTokenSecret(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}

export type HubTokenState = "active" | "revoked" | "expired";

export function hubTokenState(token: HubToken, now: Date): HubTokenState {
  if (token.revokedAt !== null) return "revoked";
  if (token.expiresAt !== null && token.expiresAt.getTime() <= now.getTime()) return "expired";
  return "active";
}
