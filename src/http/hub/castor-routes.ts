/**
 * castor's own JSON routes, below `/api/castor/` (a prefix the Hugging Face API does not use):
 * what the web interface needs that the Hub API has no call for. Thin handlers over the hub's
 * services and the metadata store.
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
 *   manager follows without the token (auth/download-link.ts).
 *
 * Creating and deleting repositories and changing their visibility need no route here: the
 * Hub's own (`/api/repos/create`, `/api/repos/delete`, `PUT …/settings`) do it for admin tokens.
 */
import type { FastifyInstance } from "fastify";
import { isAdminToken, requireAdmin } from "../../hub/access.js";
import { HubError } from "../../hub/errors.js";
import { parseExpires } from "../../hub/expires.js";
import { formatRepoRef, parseRepoRef } from "../../hub/names.js";
import type { HubService } from "../../hub/service.js";
import { chunkSharing, type SharingStore } from "../../hub/sharing.js";
import { liveContentOf, ratiosOf, type StatsStore } from "../../hub/stats.js";
import { hubTokenState } from "../../hub/tokens.js";
import type { GcRecords } from "../../metadata/gc.js";
import type { HubToken, Repo } from "../../metadata/store.js";
import { addressOf, urlPrefixOf } from "./address.js";
import type { DownloadLinks } from "../../auth/download-link.js";
import { callerOfRequest, jsonBody, stringField, type HubRouteDeps } from "./repo-routes.js";

export interface CastorRouteDeps extends HubRouteDeps {
  store: StatsStore & SharingStore & Pick<GcRecords, "lastMaintenanceRuns">;
  downloadLinks: DownloadLinks;
  /** Hub tokens: the same service `castor token` uses. */
  tokens: Pick<HubService, "createToken" | "listTokens" | "revokeToken">;
}

/** A token as the admin page lists it: never its secret (not stored) nor its hash. */
function tokenJson(token: HubToken, refById: Map<number, string>, now: Date) {
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

function stringList(body: Record<string, unknown>, field: string): string[] {
  const value = body[field] ?? [];
  if (!Array.isArray(value) || !value.every((item) => typeof item === "string")) throw new HubError(400, `"${field}" must be a list of strings`);
  return value;
}

async function refsById(deps: CastorRouteDeps): Promise<Map<number, string>> {
  return new Map((await deps.store.listRepos()).map((repo: Repo) => [repo.id, formatRepoRef(repo)]));
}

export async function castorRoutes(app: FastifyInstance, deps: CastorRouteDeps): Promise<void> {
  app.get("/api/castor/me", async (request) => {
    const { token } = await callerOfRequest(deps, request);
    if (token === null) return { anonymous: true, admin: false };
    return { anonymous: false, id: token.id, user: token.owner, access: token.access, admin: isAdminToken(token) };
  });

  app.get<{ Params: { types: string; namespace: string; name: string } }>("/api/castor/repos/:types/:namespace/:name/storage", async (request, reply) => {
    const caller = await callerOfRequest(deps, request);
    const repo = await deps.repos.readable(caller, addressOf(request.params.types, request.params.namespace, request.params.name));
    const content = await liveContentOf(deps.store, repo);
    reply.header("cache-control", "no-store");
    if (caller.token === null || !isAdminToken(caller.token)) return { files: content.files, logicalBytes: content.logicalBytes };
    return { ...content, ...ratiosOf(content) };
  });

  app.get<{ Querystring: Record<string, unknown> }>("/api/castor/sharing", async (request) => {
    const caller = await callerOfRequest(deps, request);
    requireAdmin(caller, "GET /api/castor/sharing");
    const field = (name: string): string => {
      const value = request.query[name];
      if (typeof value !== "string" || value === "") throw new HubError(400, `?${name}= is required, once`);
      return value;
    };
    const ref = parseRepoRef(field("repo"));
    const repo = await deps.repos.readable(caller, ref);
    const { commit } = await deps.repos.resolve(repo, field("revision"));
    const path = field("path");
    const file = await deps.repos.fileAt(repo, commit, path);
    const answer = { path, size: file.size, xet: file.xetHash !== null };
    if (file.xetHash === null) return { ...answer, chunks: 0, bytes: 0, sharedChunks: 0, sharedBytes: 0, otherFiles: 0, repositories: [] };
    const sharing = await chunkSharing(deps.store, repo, path, file.xetHash);
    if (sharing === null) throw new Error(`the Xet file of ${path} has no record in the metadata store: run castor fsck`);
    return { ...answer, ...sharing };
  });

  app.post("/api/castor/download-links", async (request, reply) => {
    const caller = await callerOfRequest(deps, request);
    const body = jsonBody(request);
    const ref = parseRepoRef(stringField(body, "repo", true)!);
    const repo = await deps.repos.readable(caller, ref);
    const { commit } = await deps.repos.resolve(repo, stringField(body, "revision", false) ?? "main");
    const path = stringField(body, "path", true)!;
    await deps.repos.fileAt(repo, commit, path);
    const resolvePath = `/${urlPrefixOf(repo.type)}${repo.name}/resolve/${commit.oid}/${path.split("/").map(encodeURIComponent).join("/")}`;
    const { url, expiresAt } = deps.downloadLinks.sign(resolvePath);
    // The link is a credential until it expires: no cache may keep it.
    reply.header("cache-control", "no-store");
    return { url, expiresAt: expiresAt.toISOString() };
  });

  app.get("/api/castor/tokens", async (request, reply) => {
    requireAdmin(await callerOfRequest(deps, request), "GET /api/castor/tokens");
    const refs = await refsById(deps);
    const now = new Date();
    reply.header("cache-control", "no-store");
    return (await deps.tokens.listTokens()).map((token) => tokenJson(token, refs, now));
  });

  app.post("/api/castor/tokens", async (request, reply) => {
    requireAdmin(await callerOfRequest(deps, request), "POST /api/castor/tokens");
    const body = jsonBody(request);
    const access = stringField(body, "access", true);
    if (access !== "read" && access !== "write") throw new HubError(400, '"access" must be "read" or "write"');
    const repos = body.repos === "all" ? "all" : stringList(body, "repos");
    const expires = stringField(body, "expires", false);
    const now = new Date();
    const { secret, token } = await deps.tokens.createToken({
      repos,
      namespaces: stringList(body, "namespaces"),
      owner: stringField(body, "owner", false) || null,
      access,
      expiresAt: expires === undefined || expires === "" ? null : parseExpires(expires, now),
    });
    // The secret exists nowhere else: no cache may keep this answer.
    reply.header("cache-control", "no-store");
    return { secret, token: tokenJson(token, await refsById(deps), now) };
  });

  app.delete<{ Params: { id: string } }>("/api/castor/tokens/:id", async (request) => {
    requireAdmin(await callerOfRequest(deps, request), "DELETE /api/castor/tokens");
    if (!(await deps.tokens.revokeToken(request.params.id))) throw new HubError(404, `no hub token has the id ${JSON.stringify(request.params.id)}`);
    return {};
  });

  app.get("/api/castor/maintenance", async (request, reply) => {
    requireAdmin(await callerOfRequest(deps, request), "GET /api/castor/maintenance");
    reply.header("cache-control", "no-store");
    return (await deps.store.lastMaintenanceRuns()).map((run) => ({
      kind: run.kind,
      startedAt: run.startedAt.toISOString(),
      finishedAt: run.finishedAt.toISOString(),
      totals: run.totals,
    }));
  });
}
