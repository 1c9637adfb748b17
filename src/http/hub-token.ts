/**
 * The hub's token operation: a hub token (`Authorization: Bearer hf_…`) is exchanged for a
 * CAS access token scoped to one repository, one revision and `read` or `write`.
 *
 *     GET /api/{repo_type}s/{namespace}/{name}/cas-{read|write}-token/{revision}
 *     GET /api/{repo_type}s/{namespace}/{name}/xet-{read|write}-token/{revision}
 *
 * The interface spells the operation `cas-…`; real clients (xet-core, huggingface_hub,
 * huggingface.js) build `xet-…`, so both are served. The revision is the rest of the path:
 * clients URL-encode a `/` in it (`feature%2Fx`) but a raw `feature/x` is accepted too, since
 * nothing else can follow the revision. Query parameters (`?create_pr=1`) are ignored: pull
 * requests are refused where they would be made, by preupload and commit.
 *
 * The answer carries the token in the JSON body, which current clients read, and in
 * `X-Xet-*` headers, which older huggingface_hub versions read.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { CasScope, CasTokenIssuer } from "../auth/cas-token.js";
import type { TokenService } from "../hub/token-service.js";
import type { RepoType } from "../hub/records.js";
import { CasTokenAnswer, RepoParams } from "../wire/hub.js";
import { bearerToken } from "./cas-auth.js";
import { ERROR_BODY_SCHEMA, HttpError } from "./errors.js";
import { hubTokenAccepted } from "./hub-limits.js";

/** The part of the hub's token service this route needs. */
export type TokenRequestAuthorizer = Pick<TokenService, "authorizeTokenRequest">;

export interface HubTokenRouteDeps {
  tokens: TokenRequestAuthorizer;
  issuer: CasTokenIssuer;
  /** The base of `casUrl` in the answer to a request (src/http/public-url.ts). */
  publicUrl: (request: FastifyRequest) => string;
}

/** The path carries the type in the plural. */
const REPO_TYPE_BY_PATH_SEGMENT: Readonly<Record<string, RepoType>> = {
  models: "model",
  datasets: "dataset",
  spaces: "space",
};

const OPERATION_SPELLINGS = ["cas", "xet"] as const;
const ACCESSES: readonly CasScope[] = ["read", "write"];

/**
 * The path's parts are checked by the token service (in the interface's order: the hub token
 * first), so the params schema only says what they are.
 */
const SCHEMA = { params: RepoParams, response: { 200: CasTokenAnswer, "4xx": ERROR_BODY_SCHEMA } } as const;

type TokenPathParams = RepoParams;

export async function hubTokenRoutes(app: FastifyInstance, deps: HubTokenRouteDeps): Promise<void> {
  for (const spelling of OPERATION_SPELLINGS) {
    for (const access of ACCESSES) {
      const base = `/api/:types/:namespace/:name/${spelling}-${access}-token`;
      const handler = (request: FastifyRequest<{ Params: TokenPathParams }>, reply: FastifyReply) => issueToken(deps, access, request, reply);
      app.get<{ Params: TokenPathParams }>(`${base}/*`, { schema: SCHEMA }, handler);
      // Without a revision segment: answered (400) rather than left to the generic 404, so the client learns what is missing.
      app.get<{ Params: TokenPathParams }>(base, { schema: SCHEMA }, handler);
    }
  }
}

async function issueToken(
  deps: HubTokenRouteDeps,
  access: CasScope,
  request: FastifyRequest<{ Params: TokenPathParams }>,
  reply: FastifyReply,
): Promise<CasTokenAnswer> {
  const { types: repoTypes, namespace, name } = request.params;
  const revision = request.params["*"] ?? "";
  const repoType = Object.hasOwn(REPO_TYPE_BY_PATH_SEGMENT, repoTypes) ? REPO_TYPE_BY_PATH_SEGMENT[repoTypes] : undefined;
  if (repoType === undefined) {
    throw new HttpError(400, `Unknown repository type segment ${JSON.stringify(repoTypes)} in the token path: use models, datasets or spaces`);
  }
  if (revision === "") {
    throw new HttpError(400, `The token path names no revision: append one, e.g. /api/${repoTypes}/${namespace}/${name}/cas-${access}-token/main`);
  }

  const hubToken = bearerToken(request.headers.authorization) ?? undefined;
  const decision = await deps.tokens.authorizeTokenRequest({ hubToken, repoType, repoName: `${namespace}/${name}`, revision, access });
  // Only an unusable token is answered 401 when one was sent; any other answer means it was valid.
  if (hubToken !== undefined && (decision.ok || decision.status !== 401)) hubTokenAccepted(request);
  if (!decision.ok) {
    const headers: Record<string, string> = decision.status === 401 ? { "www-authenticate": 'Bearer realm="castor"' } : {};
    throw new HttpError(decision.status, decision.message, headers);
  }

  const { token, claims } = await deps.issuer.issue({
    repo: { type: decision.repo.type, id: decision.repo.name },
    rev: decision.revision,
    scope: access,
  });
  const casUrl = deps.publicUrl(request);
  reply.headers({
    "cache-control": "no-store",
    "x-xet-access-token": token,
    "x-xet-token-expiration": String(claims.exp),
    "x-xet-cas-url": casUrl,
  });
  return { accessToken: token, exp: claims.exp, casUrl };
}
