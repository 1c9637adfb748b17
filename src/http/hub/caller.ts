/**
 * Who calls a hub route and what it may reach, decided before anything of the request's content
 * counts. Every hub route declares it in its config, and one hook (`installHubAccess`) checks it
 * in `preValidation`: after the per-client limits (hub-limits.ts, `onRequest`) and the limits
 * every body has as it arrives (its size and the body timeouts, raw-body.ts: 413 and 408, whoever
 * sends it), but before a JSON body that does not parse is refused (raw-body.ts
 * `UnparsedBody`) and before the params, query string and body are validated against the route's
 * schemas. So a request whose token is unusable, or that may not reach the repository it names,
 * gets its 401/403/404 whatever its body holds. The commit's NDJSON body is read by its handler
 * only, so a refused commit is answered before its upload is received:
 *
 *     app.post(url, { config: { hubAccess: { repo: "write" } }, schema }, async (request) => {
 *       const repo = repoOfRequest(request);      // found by the hook for this caller
 *       const caller = callerOfRequest(request);  // who the hook found the bearer to be
 *       …
 *     });
 *
 * The kinds of access (`HubAccess`):
 * - `"public"`: the answer is the same for everyone; the token is not even looked up (the
 *   calls clients make that castor answers without doing anything);
 * - `"caller"`: anyone, anonymous included; a token that is sent must be usable (401);
 * - `{ token: what }`: a hub token is required (401 without one);
 * - `{ admin: what }`: an admin token (401 without a token, 403 with another);
 * - `{ repo: "read" | "write" }`: the repository the URL names, which the caller must be
 *   allowed to read or write (RepositoryService.find: 401/404 as for a missing one, 403 for a
 *   public one it may only read). `address` says where the URL names it, when not in the
 *   `types`, `namespace` and `name` params of `/api/{types}/{namespace}/{name}/…`. With
 *   `downloadLinks` (reading only: `resolve`), a URL signed as a download link of the web
 *   interface (auth/download-link.ts) is the permission itself, whoever follows it: no token is
 *   looked at, and an altered or expired link is refused with 403. `signed` does the same for
 *   URLs castor signed for one request, Git LFS basic actions (auth/lfs-object-url.ts): it says
 *   whether the URL carries a signature, and refuses an altered or expired one. `repo` may be
 *   a function of the request when its body says what it asks (the LFS batch: an upload or a
 *   download). `refuseFirst` answers a
 *   request for a feature castor lacks the same whoever sends it (only an unusable token is
 *   refused before), as the routes of unsupported-routes.ts do.
 *
 * The rules themselves live in src/hub (access.ts, repositories.ts); the services check them again
 * on every call, so this hook decides only when the refusal is answered.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { DownloadLinkError, DownloadLinks } from "../../auth/download-link.js";
import { requireAdmin, requireToken, type Caller } from "../../hub/access.js";
import type { Hub } from "../../hub/index.js";
import type { Repo } from "../../hub/records.js";
import type { Intent, RepoAddress } from "../../hub/repositories.js";
import { hubTokenOf } from "../cas-auth.js";
import { HubError } from "../../hub/errors.js";
import { hubTokenAccepted } from "../hub-limits.js";
import { addressOf } from "./address.js";

export type HubAccess =
  | "public"
  | "caller"
  | { token: string }
  | { admin: string }
  | {
      repo: Intent | ((request: FastifyRequest) => Intent);
      address?: (params: Record<string, string>) => RepoAddress;
      downloadLinks?: boolean;
      /** Whether the request's URL carries a signature castor made for it (HubError 403 for a bad one): it is then the permission. */
      signed?: (request: FastifyRequest) => boolean;
      /** A refusal whoever asks (a feature castor lacks, named in the body), before the repository is looked at. */
      refuseFirst?: (request: FastifyRequest) => void;
    };

declare module "fastify" {
  interface FastifyContextConfig {
    /** Who may call a hub route (http/hub/caller.ts); every route of the hub's plugin declares it. */
    hubAccess?: HubAccess;
  }
}

const callers = new WeakMap<FastifyRequest, Caller>();
const repos = new WeakMap<FastifyRequest, Repo>();

/**
 * Installs the hook on the hub's plugin, and refuses (at startup) a route registered there
 * without `config.hubAccess`: who may call a route is never left to chance.
 */
export function installHubAccess(app: FastifyInstance, deps: { hub: Hub; downloadLinks: DownloadLinks }): void {
  const { hub } = deps;
  app.addHook("onRoute", (route) => {
    if (route.config?.hubAccess === undefined) throw new Error(`hub route ${route.method} ${route.url} declares no config.hubAccess (http/hub/caller.ts)`);
  });
  app.addHook("preValidation", async (request) => {
    const access = request.routeOptions.config.hubAccess;
    if (access === undefined || access === "public") return;
    if (typeof access === "object" && "repo" in access && access.downloadLinks === true && access.repo === "read" && DownloadLinks.isLink(request.url)) {
      verifyLink(deps.downloadLinks, request.url);
      repos.set(request, await hub.repos.linked(addressOfRoute(access, request)));
      return;
    }
    if (typeof access === "object" && "repo" in access && access.signed?.(request) === true) {
      repos.set(request, await hub.repos.linked(addressOfRoute(access, request)));
      return;
    }
    const caller = await authenticate(hub, request);
    if (access === "caller") return;
    if ("token" in access) requireToken(caller, access.token);
    else if ("admin" in access) requireAdmin(caller, access.admin);
    else {
      access.refuseFirst?.(request);
      const intent = typeof access.repo === "function" ? access.repo(request) : access.repo;
      repos.set(request, await hub.repos.find(caller, addressOfRoute(access, request), intent));
    }
  });
}

function addressOfRoute(access: { address?: (params: Record<string, string>) => RepoAddress }, request: FastifyRequest): RepoAddress {
  const params = request.params as Record<string, string>;
  return access.address?.(params) ?? addressOf(params.types, params.namespace, params.name);
}

/** 403 unless the download link `pathAndQuery` (as received) is genuine and current. */
function verifyLink(links: DownloadLinks, pathAndQuery: string): void {
  try {
    links.verify(pathAndQuery);
  } catch (error) {
    if (error instanceof DownloadLinkError) throw new HubError(403, error.message);
    throw error;
  }
}

/** 401 for a malformed `Authorization` header or a token that is not usable (access.ts `callerOf`). */
async function authenticate(hub: Hub, request: FastifyRequest): Promise<Caller> {
  const token = hubTokenOf(request.headers.authorization);
  if (token === null) throw new HubError(401, "malformed Authorization header: expected `Bearer hf_…` (or basic auth with the token as the password)");
  const caller = await hub.tokens.authenticate(token);
  if (caller.kind === "token") hubTokenAccepted(request);
  callers.set(request, caller);
  return caller;
}

/** The caller the hook found for a route that is not `"public"`. */
export function callerOfRequest(request: FastifyRequest): Caller {
  const caller = callers.get(request);
  // A route reading a caller it did not declare: a programming error, never an anonymous pass.
  if (caller === undefined)
    throw new Error(`hub route ${request.routeOptions.url} reads a caller it did not authenticate (hubAccess "public", or a download link)`);
  return caller;
}

/** The repository the hook found for a `{ repo }` route. */
export function repoOfRequest(request: FastifyRequest): Repo {
  const repo = repos.get(request);
  if (repo === undefined) throw new Error(`hub route ${request.routeOptions.url} reads a repository but declares no hubAccess { repo }`);
  return repo;
}
