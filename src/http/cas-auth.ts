/**
 * The one authentication hook of the CAS routes. A route opts in by declaring the scope it
 * needs in its config:
 *
 *     app.get("/v1/reconstructions/:fileId", { config: { casScope: "read" } }, handler)
 *
 * The hook runs in `onRequest`, before a single body byte is read: an upload without a valid
 * token is refused without receiving the upload. A missing, malformed, forged or expired
 * token → 401; a valid token of too low a scope → 403 (`write` includes `read`). On success
 * the verified claims are on `request.casAccess` (read them with `casAccessOf`).
 *
 * Repository isolation is the routes' part: a CAS route looks up what it serves *within* the
 * token's repository (`casAccessOf(request).repo`) and answers 404 when it is not there,
 * exactly as if it did not exist at all, so a token never reveals another repository's data
 * or even its existence.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { CasTokenError, scopeAllows, type CasScope, type CasTokenClaims, type CasTokenVerifier } from "../auth/cas-token.js";
import { HttpError } from "./errors.js";

declare module "fastify" {
  interface FastifyContextConfig {
    /** The scope a CAS route needs; routes without it are not CAS routes and skip the hook. */
    casScope?: CasScope;
  }
  interface FastifyRequest {
    /** The verified CAS token of a CAS route's request; null elsewhere. */
    casAccess: CasTokenClaims | null;
  }
}

const AUTHENTICATE_HEADER = "www-authenticate";

/**
 * Registers the hook on `app`: every route of `app` and of its child plugins gets it. castor's
 * CAS routes get it from their scope (cas-scope.ts).
 */
export function registerCasAuth(app: FastifyInstance, verifier: CasTokenVerifier): void {
  app.decorateRequest("casAccess", null);
  app.addHook("onRequest", async (request) => {
    const required = request.routeOptions.config.casScope;
    if (required === undefined) return;

    const token = bearerToken(request.headers.authorization);
    if (token === undefined) {
      throw unauthorized(
        request,
        "Missing access token: send `Authorization: Bearer <accessToken>` with a token from the hub's cas-read-token or cas-write-token operation",
      );
    }
    if (token === null) {
      throw unauthorized(request, "Malformed Authorization header: expected `Bearer <accessToken>` with a token from the hub's token operation");
    }

    let claims: CasTokenClaims;
    try {
      claims = await verifier.verify(token);
    } catch (error) {
      if (!(error instanceof CasTokenError)) throw error;
      const message =
        error.reason === "expired"
          ? "The access token has expired: get a new one from the hub's token operation"
          : `The access token was refused (${error.message}): get a new one from the hub's token operation`;
      throw unauthorized(request, message, error.reason === "expired" ? "expired" : "invalid");
    }

    if (!scopeAllows(claims.scope, required)) {
      throw new HttpError(
        403,
        `This operation needs a ${required} token but the access token has ${claims.scope} scope: get one from the hub's cas-${required}-token operation`,
        closeIfBodyPending(request),
      );
    }
    request.casAccess = claims;
  });
}

/**
 * The verified claims of a CAS route's request. Throws (→ 500) when the route forgot to
 * declare `casScope`, since serving it unauthenticated would be worse.
 */
export function casAccessOf(request: FastifyRequest): CasTokenClaims {
  // Undefined outside the scope that registered the hook.
  if (request.casAccess == null) {
    throw new Error(`route ${request.routeOptions.url ?? "?"} reads CAS claims but declares no casScope in its config`);
  }
  return request.casAccess;
}

/**
 * The token of an `Authorization: Bearer <token>` header: undefined when the header is
 * absent, null when it is present but not a bearer credential. The scheme is
 * case-insensitive (RFC 9110 §11.1).
 */
export function bearerToken(header: string | undefined): string | null | undefined {
  if (header === undefined || header === "") return undefined;
  const match = /^Bearer +([^\s]+) *$/i.exec(header);
  return match ? match[1] : null;
}

/**
 * The hub token of an `Authorization` header, as the Hub takes it: `Bearer <token>`, or HTTP
 * basic auth with the token as the password and any user name (what git and git-lfs send from
 * a credential helper; a token given as the user name with no password counts too). undefined
 * when the header is absent, null when it carries neither.
 */
export function hubTokenOf(header: string | undefined): string | null | undefined {
  const bearer = bearerToken(header);
  if (bearer !== null) return bearer;
  const match = /^Basic +([A-Za-z0-9+/=]+) *$/i.exec(header!);
  if (match === null) return null;
  const credentials = Buffer.from(match[1], "base64").toString("utf8");
  const colon = credentials.indexOf(":");
  if (colon < 0) return null;
  const password = credentials.slice(colon + 1);
  const secret = password === "" ? credentials.slice(0, colon) : password;
  return secret === "" ? null : secret;
}

function unauthorized(request: FastifyRequest, message: string, kind: "missing" | "expired" | "invalid" = "missing"): HttpError {
  const challenge = kind === "missing" ? 'Bearer realm="castor"' : `Bearer realm="castor", error="invalid_token"`;
  return new HttpError(401, message, { [AUTHENTICATE_HEADER]: challenge, ...closeIfBodyPending(request) });
}

/**
 * A refused upload would otherwise make the server read (and discard) the whole body, up to
 * the xorb limit, just to reuse the connection; closing it is cheaper for both sides.
 */
function closeIfBodyPending(request: FastifyRequest): Record<string, string> {
  const hasBody = request.headers["transfer-encoding"] !== undefined || Number(request.headers["content-length"] ?? 0) > 0;
  return hasBody ? { connection: "close" } : {};
}
