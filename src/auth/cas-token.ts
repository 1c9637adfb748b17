/**
 * CAS access tokens: JWTs signed with the hub's Ed25519 key (JWS `EdDSA`). A token names one
 * repository, one revision and a scope, and expires `CASTOR_TOKEN_TTL` seconds after issue.
 * The claims carry nothing node-specific, so any castor node holding the public key verifies
 * a token another node issued.
 */
import { randomBytes, type KeyObject } from "node:crypto";
import { SignJWT, errors as joseErrors, jwtVerify } from "jose";
import { REPO_TYPES, type RepoType } from "../metadata/store.js";

export type CasScope = "read" | "write";
export const CAS_SCOPES: readonly CasScope[] = ["read", "write"];

/** The one algorithm castor signs with and accepts; pinned so a token cannot pick another (or `none`). */
export const CAS_TOKEN_ALGORITHM = "EdDSA";

/**
 * Real tokens are ~400 characters; clients may assume up to 64,000. Anything longer is
 * rejected before it is decoded or verified.
 */
export const MAX_CAS_TOKEN_CHARS = 64_000;

export interface CasTokenClaims {
  /** `id` is the repository's `namespace/name`. */
  repo: { type: RepoType; id: string };
  /** The revision (branch or tag name) the token was issued for. */
  rev: string;
  scope: CasScope;
  /** Issue and expiry times, whole seconds since the epoch. */
  iat: number;
  exp: number;
  /** Unique per issue, so a refresh always yields a new token and logs can name a token without its signature. */
  jti: string;
}

export interface CasTokenRequest {
  repo: { type: RepoType; id: string };
  rev: string;
  scope: CasScope;
}

/** `write` includes `read`. */
export function scopeAllows(granted: CasScope, required: CasScope): boolean {
  return granted === "write" || required === "read";
}

export type CasTokenFailure = "malformed" | "forged" | "expired";

/** Why a presented token was refused; every reason maps to HTTP 401. */
export class CasTokenError extends Error {
  override readonly name = "CasTokenError";
  constructor(
    readonly reason: CasTokenFailure,
    message: string,
  ) {
    super(message);
  }
}

type Clock = () => Date;

export class CasTokenIssuer {
  constructor(
    private readonly signingKey: KeyObject,
    private readonly ttlSeconds: number,
    private readonly now: Clock = () => new Date(),
  ) {
    if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds < 1) throw new RangeError(`token TTL must be a whole number of seconds ≥ 1, got ${ttlSeconds}`);
  }

  async issue(request: CasTokenRequest): Promise<{ token: string; claims: CasTokenClaims }> {
    const iat = Math.floor(this.now().getTime() / 1000);
    const claims: CasTokenClaims = {
      repo: { type: request.repo.type, id: request.repo.id },
      rev: request.rev,
      scope: request.scope,
      iat,
      exp: iat + this.ttlSeconds,
      jti: randomBytes(16).toString("base64url"),
    };
    const token = await new SignJWT({ ...claims }).setProtectedHeader({ alg: CAS_TOKEN_ALGORITHM, typ: "JWT" }).sign(this.signingKey);
    return { token, claims };
  }
}

/** Verified tokens remembered, so a client's stream of requests pays for one signature check. */
export const VERIFIED_TOKEN_CACHE_ENTRIES = 10_000;

export class CasTokenVerifier {
  /** Token → its verified claims, oldest first (Map order); bounded, expiry re-checked on use. */
  private readonly verified = new Map<string, CasTokenClaims>();

  constructor(
    private readonly publicKey: KeyObject,
    private readonly now: Clock = () => new Date(),
  ) {}

  /**
   * The token's claims, or CasTokenError. Expiry is exact: a token is valid while the current
   * whole second is before `exp`, with no clock tolerance (the issuing node's clock is the
   * one that set `exp`, and clients refresh 30–60 s early).
   */
  async verify(token: string): Promise<CasTokenClaims> {
    const known = this.verified.get(token);
    if (known !== undefined) {
      if (Math.floor(this.now().getTime() / 1000) < known.exp) return known;
      this.verified.delete(token);
      throw new CasTokenError("expired", "the access token has expired");
    }
    const claims = await this.verifySignedToken(token);
    if (this.verified.size >= VERIFIED_TOKEN_CACHE_ENTRIES) {
      this.verified.delete(this.verified.keys().next().value as string);
    }
    this.verified.set(token, claims);
    return claims;
  }

  private async verifySignedToken(token: string): Promise<CasTokenClaims> {
    if (token.length > MAX_CAS_TOKEN_CHARS || !/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(token)) {
      throw new CasTokenError("malformed", "the access token is not a JWT");
    }
    let payload: unknown;
    try {
      ({ payload } = await jwtVerify(token, this.publicKey, {
        algorithms: [CAS_TOKEN_ALGORITHM],
        currentDate: this.now(),
        clockTolerance: 0,
        requiredClaims: ["iat", "exp"],
      }));
    } catch (error) {
      throw translateJoseError(error);
    }
    return checkClaimShapes(payload);
  }
}

function translateJoseError(error: unknown): CasTokenError | unknown {
  if (error instanceof joseErrors.JWTExpired) return new CasTokenError("expired", "the access token has expired");
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) {
    return new CasTokenError("forged", "the access token's signature does not verify with this server's key");
  }
  if (error instanceof joseErrors.JOSEAlgNotAllowed) {
    return new CasTokenError("forged", `the access token is not signed with ${CAS_TOKEN_ALGORITHM}`);
  }
  if (error instanceof joseErrors.JOSEError) return new CasTokenError("malformed", `the access token is invalid (${error.message})`);
  return error;
}

const REPO_ID = /^[^/\s]+\/[^/\s]+$/;

/**
 * The signature proves castor issued the token, so a wrong shape means a bug or a key shared
 * with something else; either way the token must not be trusted field by field.
 */
function checkClaimShapes(payload: unknown): CasTokenClaims {
  const p = payload as Record<string, unknown>;
  const repo = p.repo as Record<string, unknown> | null | undefined;
  const shapeOk =
    typeof repo === "object" &&
    repo !== null &&
    (REPO_TYPES as readonly unknown[]).includes(repo.type) &&
    typeof repo.id === "string" &&
    REPO_ID.test(repo.id) &&
    typeof p.rev === "string" &&
    p.rev.length > 0 &&
    (CAS_SCOPES as readonly unknown[]).includes(p.scope) &&
    Number.isSafeInteger(p.iat) &&
    Number.isSafeInteger(p.exp) &&
    (p.exp as number) > (p.iat as number) &&
    typeof p.jti === "string";
  if (!shapeOk) throw new CasTokenError("malformed", "the access token's claims are not those of a castor CAS token");
  // Frozen: the verifier hands the same object to every request made with this token.
  return Object.freeze({
    repo: Object.freeze({ type: repo!.type as RepoType, id: repo!.id as string }),
    rev: p.rev as string,
    scope: p.scope as CasScope,
    iat: p.iat as number,
    exp: p.exp as number,
    jti: p.jti as string,
  });
}
