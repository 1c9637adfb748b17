/**
 * Hub routes about repositories as wholes: who am I, create / delete / list / info / settings,
 * branches, tags, refs and commit history, plus the calls clients make that castor answers
 * without doing anything (card validation, the CLI's agent-harness registry). The LFS batch
 * call is in lfs-routes.ts.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { requireRepoType } from "../../hub/names.js";
import { HubError, notSupported } from "../../hub/errors.js";
import { RepoExistsError, type HubRepositories, type RepoAddress } from "../../hub/repositories.js";
import type { Caller } from "../../hub/access.js";
import type { Repo } from "../../metadata/store.js";
import { bearerToken } from "../cas-auth.js";
import { hubTokenAccepted } from "../hub-limits.js";
import { addressOf, repoTypeOfPlural, API_REVISION_SEGMENT, revisionAndPath, urlPrefixOf } from "./address.js";
import { commitJson, repoSummaryJson, siblingJson } from "./render.js";

export interface HubRouteDeps {
  repos: HubRepositories;
  /**
   * Base of every URL handed out (`url`, `commitUrl`, `Link`) in the answer to a request;
   * clients must use it as HF_ENDPOINT (src/http/public-url.ts).
   */
  publicUrl: (request: FastifyRequest) => string;
}

interface RepoParams {
  types: string;
  namespace: string;
  name: string;
}

/** Commits per page of `GET …/commits/{rev}`, and at most (`?limit=`). */
const COMMITS_PAGE = 50;
const MAX_COMMITS_PAGE = 1000;

/** `?limit=` as the tree route reads it: clamped to 1…MAX_COMMITS_PAGE, the default when not a number. */
function commitsLimit(text: string): number {
  return Math.max(1, Math.min(Number.parseInt(text, 10) || COMMITS_PAGE, MAX_COMMITS_PAGE));
}

export async function callerOfRequest(deps: HubRouteDeps, request: FastifyRequest): Promise<Caller> {
  const token = bearerToken(request.headers.authorization);
  if (token === null) throw new HubError(401, "malformed Authorization header: expected `Bearer hf_…`");
  const caller = await deps.repos.caller(token);
  if (caller.token !== null) hubTokenAccepted(request);
  return caller;
}

export function repoUrl(deps: HubRouteDeps, request: FastifyRequest, repo: Pick<Repo, "type" | "name">): string {
  return `${deps.publicUrl(request)}/${urlPrefixOf(repo.type)}${repo.name}`;
}

/**
 * The answer of create and move: the repository's URL and name; when the name is taken, the
 * Hub's 409 carrying the URL of the repository that holds it (clients parse it even when they
 * tolerate the conflict).
 */
export async function answerNamingRepo(deps: HubRouteDeps, request: FastifyRequest, reply: FastifyReply, named: () => Promise<Repo>) {
  try {
    const repo = await named();
    return { url: repoUrl(deps, request, repo), name: repo.name, id: repo.name };
  } catch (err) {
    if (err instanceof RepoExistsError)
      return reply
        .code(409)
        .header("x-error-message", err.message)
        .send({ error: err.message, url: repoUrl(deps, request, err.repo) });
    throw err;
  }
}

export function stringField(body: Record<string, unknown>, field: string, required: boolean): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) {
    if (required) throw new HubError(400, `the request body needs a string "${field}"`);
    return undefined;
  }
  if (typeof value !== "string") throw new HubError(400, `"${field}" must be a string`);
  return value;
}

export function jsonBody(request: FastifyRequest): Record<string, unknown> {
  const body = request.body ?? {};
  if (typeof body !== "object" || Array.isArray(body)) throw new HubError(400, "the request body must be a JSON object");
  return body as Record<string, unknown>;
}

/** `private: true|false` or `visibility: "private"|"public"`; undefined when neither is given. */
function visibilityOf(body: Record<string, unknown>): boolean | undefined {
  if (typeof body.private === "boolean") return body.private;
  if (body.visibility === "private" || body.visibility === "public") return body.visibility === "private";
  if (body.private !== undefined && body.private !== null) throw new HubError(400, '"private" must be true or false');
  return undefined;
}

/** `{name, organization, type}` of repos/create and repos/delete: `name` may itself be `ns/name`. */
function namedRepo(body: Record<string, unknown>): { type: string; namespace: string | null; name: string } {
  const type = stringField(body, "type", false) ?? "model";
  const full = stringField(body, "name", true)!;
  const organization = stringField(body, "organization", false) ?? null;
  const slash = full.indexOf("/");
  return slash === -1 ? { type, namespace: organization, name: full } : { type, namespace: full.slice(0, slash), name: full.slice(slash + 1) };
}

/** Repositories per page of `GET /api/{type}s` (and the largest `limit`); the Hub pages at 1,000 too. */
const LIST_PAGE = 1000;

export async function repoRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  const address = (request: FastifyRequest<{ Params: RepoParams }>): RepoAddress =>
    addressOf(request.params.types, request.params.namespace, request.params.name);

  app.get("/api/whoami-v2", async (request) => {
    const caller = await callerOfRequest(deps, request);
    const token = caller.token;
    if (token === null) throw new HubError(401, "whoami needs a hub token: send Authorization: Bearer hf_… (HF_TOKEN)");
    const name = token.owner ?? token.id;
    return {
      type: "user",
      id: name,
      name,
      fullname: name,
      email: null,
      emailVerified: false,
      isPro: false,
      canPay: false,
      avatarUrl: "",
      orgs: token.namespaces.filter((ns) => ns !== token.owner).map((ns) => ({ type: "org", name: ns, fullname: ns, id: ns })),
      auth: { type: "access_token", accessToken: { displayName: token.id, role: token.access, createdAt: token.createdAt.toISOString() } },
    };
  });

  app.post("/api/repos/create", async (request, reply) => {
    const caller = await callerOfRequest(deps, request);
    const body = jsonBody(request);
    const { type, namespace, name } = namedRepo(body);
    // `@huggingface/hub`'s createRepo({files}) sends them base64 in this body; refused rather
    // than dropped, before anything is created.
    if (Array.isArray(body.files) && body.files.length > 0) {
      throw notSupported("uploading files at repository creation", "create the repository, then upload the files (uploadFiles or commit)");
    }
    return answerNamingRepo(deps, request, reply, () => deps.repos.createRepo(caller, type, namespace, name, visibilityOf(body)));
  });

  app.delete("/api/repos/delete", async (request) => {
    const caller = await callerOfRequest(deps, request);
    const { type, namespace, name } = namedRepo(jsonBody(request));
    if (namespace === null) throw new HubError(400, "name the repository to delete as namespace/name");
    await deps.repos.deleteRepo(caller, { type: requireRepoType(type), name: `${namespace}/${name}` });
    return {};
  });

  app.get<{ Params: { types: string }; Querystring: Record<string, string | undefined> }>("/api/:types", async (request, reply) => {
    const caller = await callerOfRequest(deps, request);
    const type = repoTypeOfPlural(request.params.types);
    const { author, search, limit, cursor } = request.query;
    const pageSize = Math.min(Math.max(Number.parseInt(limit ?? "", 10) || LIST_PAGE, 1), LIST_PAGE);
    const afterId = cursor === undefined ? undefined : Number.parseInt(Buffer.from(cursor, "base64url").toString(), 10);
    if (afterId !== undefined && !(Number.isSafeInteger(afterId) && afterId >= 0)) {
      throw new HubError(400, "the listing cursor is not valid: use the Link header's next URL as given");
    }
    const { items, more } = await deps.repos.listRepos(caller, type, { author, search, afterId, limit: pageSize });
    if (more) {
      // The same query (filters, page size) from after the last repository listed.
      const query = new URLSearchParams(
        Object.entries(request.query).filter((entry): entry is [string, string] => entry[0] !== "cursor" && typeof entry[1] === "string"),
      );
      query.set("cursor", Buffer.from(String(items.at(-1)!.repo.id)).toString("base64url"));
      reply.header("link", `<${deps.publicUrl(request)}/api/${request.params.types}?${query}>; rel="next"`);
    }
    return items.map(({ repo, head }) => repoSummaryJson(repo, head));
  });

  const info = async (request: FastifyRequest<{ Params: RepoParams; Querystring: { blobs?: string } }>, revisionName: string) => {
    const caller = await callerOfRequest(deps, request);
    const repo = await deps.repos.readable(caller, address(request));
    const { commit } = await deps.repos.resolve(repo, revisionName);
    const blobs = request.query.blobs === "true" || request.query.blobs === "1";
    const files = await deps.repos.allFiles(repo, commit);
    return {
      ...repoSummaryJson(repo, commit),
      siblings: files.map(({ path, entry }) => siblingJson(path, entry, blobs)),
      ...(repo.type === "space" ? { sdk: "static" } : {}),
    };
  };
  app.get<{ Params: RepoParams; Querystring: { blobs?: string } }>("/api/:types/:namespace/:name", (request) => info(request, "main"));
  app.get<{ Params: RepoParams; Querystring: { blobs?: string } }>("/api/:types/:namespace/:name/revision/*", (request) =>
    info(request, revisionAndPath(request, API_REVISION_SEGMENT).revision),
  );

  app.put<{ Params: RepoParams }>("/api/:types/:namespace/:name/settings", async (request) => {
    const caller = await callerOfRequest(deps, request);
    const body = jsonBody(request);
    if (body.gated !== undefined && body.gated !== false) {
      throw notSupported("gated repositories", "make the repository private and give users hub tokens instead");
    }
    const isPrivate = visibilityOf(body);
    if (isPrivate === undefined) {
      await deps.repos.writable(caller, address(request));
      return {};
    }
    const repo = await deps.repos.setPrivate(caller, address(request), isPrivate);
    return { private: repo.private };
  });

  app.post<{ Params: RepoParams }>("/api/:types/:namespace/:name/branch/*", async (request) => {
    const caller = await callerOfRequest(deps, request);
    const body = jsonBody(request);
    const branch = revisionAndPath(request, API_REVISION_SEGMENT).revision;
    await deps.repos.createRevision(caller, address(request), branch, "branch", stringField(body, "startingPoint", false));
    return {};
  });
  app.delete<{ Params: RepoParams }>("/api/:types/:namespace/:name/branch/*", async (request) => {
    const caller = await callerOfRequest(deps, request);
    await deps.repos.deleteRevision(caller, address(request), revisionAndPath(request, API_REVISION_SEGMENT).revision, "branch");
    return {};
  });
  // The Hub's tag route names the revision to tag in the path and the tag in the body.
  app.post<{ Params: RepoParams }>("/api/:types/:namespace/:name/tag/*", async (request) => {
    const caller = await callerOfRequest(deps, request);
    const tag = stringField(jsonBody(request), "tag", true)!;
    await deps.repos.createRevision(caller, address(request), tag, "tag", revisionAndPath(request, API_REVISION_SEGMENT).revision);
    return {};
  });
  app.delete<{ Params: RepoParams }>("/api/:types/:namespace/:name/tag/*", async (request) => {
    const caller = await callerOfRequest(deps, request);
    await deps.repos.deleteRevision(caller, address(request), revisionAndPath(request, API_REVISION_SEGMENT).revision, "tag");
    return {};
  });

  // huggingface_hub's super_squash_history: the branch becomes one commit of its current files.
  app.post<{ Params: RepoParams }>("/api/:types/:namespace/:name/super-squash/*", async (request) => {
    const caller = await callerOfRequest(deps, request);
    const branch = revisionAndPath(request, API_REVISION_SEGMENT).revision;
    const commit = await deps.repos.squash(caller, address(request), branch, stringField(jsonBody(request), "message", false));
    return { commitId: commit.oid };
  });

  app.get<{ Params: RepoParams }>("/api/:types/:namespace/:name/refs", async (request) => {
    const caller = await callerOfRequest(deps, request);
    const repo = await deps.repos.readable(caller, address(request));
    const refs = await deps.repos.refs(repo);
    return {
      branches: refs.branches.map(({ name, commit }) => ({ name, ref: `refs/heads/${name}`, targetCommit: commit.oid })),
      tags: refs.tags.map(({ name, commit }) => ({ name, ref: `refs/tags/${name}`, targetCommit: commit.oid })),
      converts: [],
    };
  });

  app.get<{ Params: RepoParams; Querystring: { p?: string; limit?: string } }>("/api/:types/:namespace/:name/commits/*", async (request, reply) => {
    const caller = await callerOfRequest(deps, request);
    const repo = await deps.repos.readable(caller, address(request));
    const { commit } = await deps.repos.resolve(repo, revisionAndPath(request, API_REVISION_SEGMENT).revision);
    const page = Math.max(0, Number.parseInt(request.query.p ?? "0", 10) || 0);
    // `limit` (@huggingface/hub's listCommits batchSize) sets the page size; it travels on in the next link.
    const limit = request.query.limit === undefined ? COMMITS_PAGE : commitsLimit(request.query.limit);
    const { commits, more } = await deps.repos.commitsFrom(repo, commit, page * limit, limit);
    if (more) {
      // Pinned to the commit, so later pages do not shift when the branch moves meanwhile.
      const limitPart = request.query.limit === undefined ? "" : `&limit=${limit}`;
      const next = `${deps.publicUrl(request)}/api/${request.params.types}/${repo.name}/commits/${commit.oid}?p=${page + 1}${limitPart}`;
      reply.header("link", `<${next}>; rel="next"`);
    }
    return commits.map(commitJson);
  });

  // Clients validate a model card whenever a commit adds README.md; castor accepts any card.
  app.post("/api/validate-yaml", async () => ({ errors: [], warnings: [] }));
  // The hf CLI asks for its agent-harness registry on every start; the empty registry is cached by it for a day.
  app.get("/api/agent-harnesses", async () => ({ standardEnvVars: [], harnesses: {} }));
}
