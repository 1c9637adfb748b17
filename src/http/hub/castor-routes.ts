/**
 * castor's own JSON routes, below `/api/castor/` (a prefix the Hugging Face API does not use):
 * what the web interface needs that the Hub API has no call for. Thin handlers over the hub's
 * services (src/hub/admin.ts, token-service.ts).
 *
 * - `GET /api/castor/me`: who the bearer is, and whether it is an admin token (the interface
 *   shows the admin pages only then). Anonymous callers get `{anonymous: true}`.
 * - `GET /api/castor/repos/{type}s/{ns}/{name}/storage`: a repository's live files and logical
 *   bytes, for anyone who may read it; stored bytes and the ratios for admin tokens only,
 *   since they depend on xorbs other repositories share (like `GET /api/stats`).
 * - `GET /api/castor/sharing?repo=TYPE:NS/NAME&revision=R&path=P` (admin): how many chunks of
 *   a file other files share (hub/sharing.ts).
 * - `GET|POST /api/castor/tokens`, `DELETE /api/castor/tokens/{id}` (admin): `castor token
 *   list|create|revoke` over HTTP; the secret is in the answer to the POST only.
 * - `GET /api/castor/maintenance` (admin): the last gc and fsck runs.
 * - `POST /api/castor/download-links` `{repo, revision, path}`: for anyone who may read the
 *   file, a short-lived signed link to it at the revision's commit, which the browser's download
 *   manager follows without the token (auth/download-link.ts; `resolve` accepts it, caller.ts).
 *
 * Creating and deleting repositories and changing their visibility need no route here: the
 * Hub's own (`/api/repos/create`, `/api/repos/delete`, `PUT …/settings`) do it for admin tokens.
 */
import type { FastifyInstance } from "fastify";
import { isAdmin } from "../../hub/access.js";
import { HubError } from "../../hub/errors.js";
import { parseExpires } from "../../hub/expires.js";
import type { HubToken } from "../../hub/records.js";
import { hubTokenState } from "../../hub/tokens.js";
import * as wire from "../../wire/hub.js";
import { parseRepoRef } from "../../hub/names.js";
import { addressOf, urlPrefixOf } from "./address.js";
import { callerOfRequest } from "./caller.js";
import type { HubRouteDeps } from "./repo-routes.js";

/** A token as the admin page lists it: never its secret (not stored) nor its hash. */
function tokenJson(token: HubToken, refById: Map<number, string>, now: Date): wire.TokenInfo {
  return {
    id: token.id,
    owner: token.owner,
    access: token.access,
    repos: token.repos === "all" ? "all" : token.repos.map((id) => refById.get(id) ?? `#${id}`),
    namespaces: token.namespaces,
    state: hubTokenState(token, now),
    createdAt: token.createdAt.toISOString(),
    expiresAt: token.expiresAt?.toISOString() ?? null,
    revokedAt: token.revokedAt?.toISOString() ?? null,
  };
}

export async function castorRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  const { hub } = deps;
  app.get("/api/castor/me", { config: { hubAccess: "caller" }, schema: { response: { 200: wire.Me } } }, async (request) => {
    const caller = callerOfRequest(request);
    if (caller.kind !== "token") return { anonymous: true, admin: false };
    const { token } = caller;
    return { anonymous: false, id: token.id, user: token.owner, access: token.access, admin: isAdmin(caller) };
  });

  app.get<{ Params: wire.RepoParams }>(
    "/api/castor/repos/:types/:namespace/:name/storage",
    { config: { hubAccess: "caller" }, schema: { params: wire.RepoParams, response: { 200: wire.RepoStorage } } },
    async (request, reply) => {
      const { types, namespace, name } = request.params;
      const storage = await hub.admin.repoStorage(callerOfRequest(request), addressOf(types, namespace, name));
      reply.header("cache-control", "no-store");
      return storage;
    },
  );

  // Who may ask before what is asked: a token that may not see sharing learns nothing of the parameters (hubAccess is checked first).
  const sharing = "GET /api/castor/sharing";
  app.get<{ Querystring: wire.SharingQuery }>(
    "/api/castor/sharing",
    { config: { hubAccess: { admin: sharing } }, schema: { querystring: wire.SharingQuery, response: { 200: wire.Sharing } } },
    async (request) => {
      const { repo, revision, path } = request.query;
      return hub.admin.sharing(callerOfRequest(request), repo, revision, path, sharing);
    },
  );

  app.get(
    "/api/castor/tokens",
    { config: { hubAccess: { admin: "listing hub tokens" } }, schema: { response: { 200: wire.TokenList } } },
    async (request, reply) => {
      const caller = callerOfRequest(request);
      const tokens = await hub.tokens.list(caller);
      const refs = await hub.admin.repoRefsById(caller);
      const now = new Date();
      reply.header("cache-control", "no-store");
      return tokens.map((token) => tokenJson(token, refs, now));
    },
  );

  app.post<{ Body: wire.CreateTokenBody }>(
    "/api/castor/tokens",
    { config: { hubAccess: { admin: "POST /api/castor/tokens" } }, schema: { body: wire.CreateTokenBody, response: { 200: wire.CreatedToken } } },
    async (request, reply) => {
      const caller = callerOfRequest(request);
      const { access, repos, namespaces, owner, expires } = request.body;
      const now = new Date();
      const { secret, token } = await hub.tokens.create(caller, {
        repos: repos ?? [],
        namespaces: namespaces ?? [],
        owner: owner || null,
        access,
        expiresAt: expires === undefined || expires === null || expires === "" ? null : parseExpires(expires, now),
      });
      // The secret exists nowhere else: no cache may keep this answer.
      reply.header("cache-control", "no-store");
      return { secret, token: tokenJson(token, await hub.admin.repoRefsById(caller), now) };
    },
  );

  app.delete<{ Params: wire.TokenIdParams }>(
    "/api/castor/tokens/:id",
    { config: { hubAccess: { admin: "revoking hub tokens" } }, schema: { params: wire.TokenIdParams, response: { 200: wire.Done } } },
    async (request) => {
      if (!(await hub.tokens.revoke(callerOfRequest(request), request.params.id))) {
        throw new HubError(404, `no hub token has the id ${JSON.stringify(request.params.id)}`);
      }
      return {};
    },
  );

  app.post<{ Body: wire.DownloadLinkBody }>(
    "/api/castor/download-links",
    { config: { hubAccess: "caller" }, schema: { body: wire.DownloadLinkBody, response: { 200: wire.DownloadLink } } },
    async (request, reply) => {
      const repo = await hub.repos.find(callerOfRequest(request), parseRepoRef(request.body.repo));
      const { commit } = await hub.repos.resolve(repo, request.body.revision ?? "main");
      const { path } = request.body;
      await hub.history.fileAt(repo, commit, path);
      const resolvePath = `/${urlPrefixOf(repo.type)}${repo.name}/resolve/${commit.oid}/${path.split("/").map(encodeURIComponent).join("/")}`;
      const { url, expiresAt } = deps.downloadLinks.sign(resolvePath);
      // The link is a credential until it expires: no cache may keep it.
      reply.header("cache-control", "no-store");
      return { url, expiresAt: expiresAt.toISOString() };
    },
  );

  // What the mirror holds and saved: bytes of mirrored files, what fetching them cost upstream
  // (less when chunks were held already), and what this node served of them since it started.
  app.get(
    "/api/castor/mirror",
    { config: { hubAccess: { admin: "GET /api/castor/mirror" } }, schema: { response: { 200: wire.MirrorStatus } } },
    async (request, reply) => {
      reply.header("cache-control", "no-store");
      return hub.admin.mirrorStatus(callerOfRequest(request), "GET /api/castor/mirror");
    },
  );

  app.get(
    "/api/castor/maintenance",
    { config: { hubAccess: { admin: "GET /api/castor/maintenance" } }, schema: { response: { 200: wire.MaintenanceRuns } } },
    async (request, reply) => {
      const runs = await hub.admin.maintenanceRuns(callerOfRequest(request), "GET /api/castor/maintenance");
      reply.header("cache-control", "no-store");
      return runs.map((run) => ({
        kind: run.kind,
        startedAt: run.startedAt.toISOString(),
        finishedAt: run.finishedAt.toISOString(),
        totals: run.totals,
      }));
    },
  );
}
