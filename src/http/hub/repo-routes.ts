/**
 * Hub routes about repositories as wholes: who am I, create / delete / list / info / settings,
 * branches, tags, refs and commit history, plus the calls clients make that castor answers
 * without doing anything (card validation, the CLI's agent-harness registry). The LFS batch
 * call is in lfs-routes.ts.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { DownloadLinks } from "../../auth/download-link.js";
import { Type } from "typebox";
import * as wire from "../../wire/hub.js";
import { requireRepoType } from "../../hub/names.js";
import { HubError, notSupported } from "../../hub/errors.js";
import type { Hub } from "../../hub/index.js";
import { RepoExistsError, type RepoAddress } from "../../hub/repositories.js";
import { addressOf, repoTypeOfPlural, API_REVISION_SEGMENT, revisionAndPath, urlPrefixOf } from "./address.js";
import { callerOfRequest, repoOfRequest } from "./caller.js";
import { commitJson, repoSummaryJson, siblingJson } from "./render.js";

export interface HubRouteDeps {
  hub: Hub;
  /**
   * Base of every URL handed out (`url`, `commitUrl`, `Link`) in the answer to a request;
   * clients must use it as HF_ENDPOINT (src/http/public-url.ts).
   */
  publicUrl: (request: FastifyRequest) => string;
  /** The web interface's signed download links (auth/download-link.ts): castor-routes.ts signs them, `resolve` accepts them. */
  downloadLinks: DownloadLinks;
}

type RepoParams = wire.RepoParams;

const INFO_SCHEMA = { params: wire.RepoParams, querystring: wire.RepoInfoQuery, response: { 200: wire.RepoInfo } };

/** Commits per page of `GET …/commits/{rev}`, and at most (`?limit=`). */
const COMMITS_PAGE = 50;
const MAX_COMMITS_PAGE = 1000;

/** `?limit=` as the tree route reads it: clamped to 1…MAX_COMMITS_PAGE, the default when not a number. */
function commitsLimit(text: string): number {
  return Math.max(1, Math.min(Number.parseInt(text, 10) || COMMITS_PAGE, MAX_COMMITS_PAGE));
}

export function repoUrl(deps: HubRouteDeps, request: FastifyRequest, repo: RepoAddress): string {
  return `${deps.publicUrl(request)}/${urlPrefixOf(repo.type)}${repo.name}`;
}

/**
 * The answer of create and move: the repository's URL and name; when the name is taken, the
 * Hub's 409 carrying the URL of the repository that holds it (clients parse it even when they
 * tolerate the conflict).
 */
export async function answerNamingRepo(deps: HubRouteDeps, request: FastifyRequest, reply: FastifyReply, named: () => Promise<RepoAddress>) {
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

/** `private: true|false` or `visibility: "private"|"public"`; undefined when neither is given. */
function visibilityOf(body: { private?: boolean | null; visibility?: unknown }): boolean | undefined {
  if (typeof body.private === "boolean") return body.private;
  if (body.visibility === "private" || body.visibility === "public") return body.visibility === "private";
  return undefined;
}

/** `{name, organization, type}` of repos/create and repos/delete: `name` may itself be `ns/name`. */
function namedRepo(body: wire.NamedRepoBody): { type: string; namespace: string | null; name: string } {
  const type = body.type ?? "model";
  const organization = body.organization ?? null;
  const slash = body.name.indexOf("/");
  return slash === -1 ? { type, namespace: organization, name: body.name } : { type, namespace: body.name.slice(0, slash), name: body.name.slice(slash + 1) };
}

/** Gated repositories are refused as the features castor lacks are (unsupported-routes.ts), whoever asks. */
function refuseGating(request: FastifyRequest): void {
  const body = request.body;
  const gated = typeof body === "object" && body !== null ? (body as { gated?: unknown }).gated : undefined;
  if (gated !== undefined && gated !== false) throw notSupported("gated repositories", "make the repository private and give users hub tokens instead");
}

/** Repositories per page of `GET /api/{type}s` (and the largest `limit`); the Hub pages at 1,000 too. */
const LIST_PAGE = 1000;

export async function repoRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  const address = (request: FastifyRequest<{ Params: RepoParams }>): RepoAddress =>
    addressOf(request.params.types, request.params.namespace, request.params.name);
  const read = { hubAccess: { repo: "read" } } as const;
  const write = { hubAccess: { repo: "write" } } as const;

  app.get("/api/whoami-v2", { config: { hubAccess: { token: "whoami" } }, schema: { response: { 200: wire.WhoAmI } } }, async (request) => {
    const token = callerOfRequest(request).token;
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

  app.post<{ Body: wire.NamedRepoBody }>(
    "/api/repos/create",
    {
      config: { hubAccess: { token: "creating a repository" } },
      schema: { body: wire.NamedRepoBody, response: { 200: wire.RepoUrl, 409: wire.RepoConflict } },
    },
    async (request, reply) => {
      const caller = callerOfRequest(request);
      const { type, namespace, name } = namedRepo(request.body);
      // `@huggingface/hub`'s createRepo({files}) sends them base64 in this body; refused rather
      // than dropped, before anything is created.
      if (request.body.files !== undefined && request.body.files.length > 0) {
        throw notSupported("uploading files at repository creation", "create the repository, then upload the files (uploadFiles or commit)");
      }
      return answerNamingRepo(deps, request, reply, () =>
        deps.hub.repos.create(caller, type, namespace === null ? name : `${namespace}/${name}`, { private: visibilityOf(request.body) }),
      );
    },
  );

  app.delete<{ Body: wire.NamedRepoBody }>(
    "/api/repos/delete",
    { config: { hubAccess: { token: "deleting a repository" } }, schema: { body: wire.NamedRepoBody, response: { 200: wire.Done } } },
    async (request) => {
      const { type, namespace, name } = namedRepo(request.body);
      if (namespace === null) throw new HubError(400, "name the repository to delete as namespace/name");
      await deps.hub.repos.delete(callerOfRequest(request), { type: requireRepoType(type), name: `${namespace}/${name}` });
      return {};
    },
  );

  app.get<{ Params: wire.TypesParams; Querystring: wire.ListReposQuery }>(
    "/api/:types",
    {
      config: { hubAccess: "caller" },
      schema: { params: wire.TypesParams, querystring: wire.ListReposQuery, response: { 200: Type.Array(wire.RepoSummary) } },
    },
    async (request, reply) => {
      const type = repoTypeOfPlural(request.params.types);
      const { author, search, limit, cursor } = request.query;
      const pageSize = Math.min(Math.max(Number.parseInt(limit ?? "", 10) || LIST_PAGE, 1), LIST_PAGE);
      const afterId = cursor === undefined ? undefined : Number.parseInt(Buffer.from(cursor, "base64url").toString(), 10);
      if (afterId !== undefined && !(Number.isSafeInteger(afterId) && afterId >= 0)) {
        throw new HubError(400, "the listing cursor is not valid: use the Link header's next URL as given");
      }
      const { repos, more } = await deps.hub.repos.list(callerOfRequest(request), { type, author, search, afterId, limit: pageSize });
      if (more) {
        // The same query (filters, page size) from after the last repository listed.
        const query = new URLSearchParams(
          Object.entries(request.query).filter((entry): entry is [string, string] => entry[0] !== "cursor" && typeof entry[1] === "string"),
        );
        query.set("cursor", Buffer.from(String(repos.at(-1)!.id)).toString("base64url"));
        reply.header("link", `<${deps.publicUrl(request)}/api/${request.params.types}?${query}>; rel="next"`);
      }
      const items = [];
      for (const repo of repos) items.push(repoSummaryJson(repo, await deps.hub.repos.mainHead(repo)));
      return items;
    },
  );

  const info = async (request: FastifyRequest<{ Params: RepoParams; Querystring: wire.RepoInfoQuery }>, revisionName: string) => {
    const repo = repoOfRequest(request);
    const { commit } = await deps.hub.repos.resolve(repo, revisionName);
    const blobs = request.query.blobs === "true" || request.query.blobs === "1";
    const files = await deps.hub.history.allFiles(repo, commit);
    return {
      ...repoSummaryJson(repo, commit),
      siblings: files.map(({ path, entry }) => siblingJson(path, entry, blobs)),
      ...(repo.type === "space" ? { sdk: "static" } : {}),
    };
  };
  app.get<{ Params: RepoParams; Querystring: wire.RepoInfoQuery }>("/api/:types/:namespace/:name", { config: read, schema: INFO_SCHEMA }, (request) =>
    info(request, "main"),
  );
  app.get<{ Params: RepoParams; Querystring: wire.RepoInfoQuery }>(
    "/api/:types/:namespace/:name/revision/*",
    { config: read, schema: INFO_SCHEMA },
    (request) => info(request, revisionAndPath(request, API_REVISION_SEGMENT).revision),
  );

  app.put<{ Params: RepoParams; Body: wire.SettingsBody }>(
    "/api/:types/:namespace/:name/settings",
    {
      config: { hubAccess: { repo: "write", refuseFirst: refuseGating } },
      schema: { params: wire.RepoParams, body: wire.SettingsBody, response: { 200: wire.SettingsAnswer } },
    },
    async (request) => {
      const isPrivate = visibilityOf(request.body);
      if (isPrivate === undefined) return {};
      const repo = await deps.hub.repos.setPrivate(callerOfRequest(request), address(request), isPrivate);
      return { private: repo.private };
    },
  );

  app.post<{ Params: RepoParams; Body: wire.CreateBranchBody }>(
    "/api/:types/:namespace/:name/branch/*",
    { config: write, schema: { params: wire.RepoParams, body: wire.CreateBranchBody, response: { 200: wire.Done } } },
    async (request) => {
      const branch = revisionAndPath(request, API_REVISION_SEGMENT).revision;
      await deps.hub.repos.createRevision(callerOfRequest(request), address(request), branch, "branch", request.body.startingPoint ?? undefined);
      return {};
    },
  );
  app.delete<{ Params: RepoParams }>(
    "/api/:types/:namespace/:name/branch/*",
    { config: write, schema: { params: wire.RepoParams, response: { 200: wire.Done } } },
    async (request) => {
      await deps.hub.repos.deleteRevision(callerOfRequest(request), address(request), revisionAndPath(request, API_REVISION_SEGMENT).revision, "branch");
      return {};
    },
  );
  // The Hub's tag route names the revision to tag in the path and the tag in the body.
  app.post<{ Params: RepoParams; Body: wire.CreateTagBody }>(
    "/api/:types/:namespace/:name/tag/*",
    { config: write, schema: { params: wire.RepoParams, body: wire.CreateTagBody, response: { 200: wire.Done } } },
    async (request) => {
      const revision = revisionAndPath(request, API_REVISION_SEGMENT).revision;
      await deps.hub.repos.createRevision(callerOfRequest(request), address(request), request.body.tag, "tag", revision);
      return {};
    },
  );
  app.delete<{ Params: RepoParams }>(
    "/api/:types/:namespace/:name/tag/*",
    { config: write, schema: { params: wire.RepoParams, response: { 200: wire.Done } } },
    async (request) => {
      await deps.hub.repos.deleteRevision(callerOfRequest(request), address(request), revisionAndPath(request, API_REVISION_SEGMENT).revision, "tag");
      return {};
    },
  );

  // huggingface_hub's super_squash_history: the branch becomes one commit of its current files.
  app.post<{ Params: RepoParams; Body: wire.SquashBody }>(
    "/api/:types/:namespace/:name/super-squash/*",
    { config: write, schema: { params: wire.RepoParams, body: wire.SquashBody, response: { 200: wire.SquashAnswer } } },
    async (request) => {
      const branch = revisionAndPath(request, API_REVISION_SEGMENT).revision;
      const commit = await deps.hub.files.squash(callerOfRequest(request), address(request), branch, request.body.message ?? undefined);
      return { commitId: commit.oid };
    },
  );

  app.get<{ Params: RepoParams }>(
    "/api/:types/:namespace/:name/refs",
    { config: read, schema: { params: wire.RepoParams, response: { 200: wire.Refs } } },
    async (request) => {
      const refs = await deps.hub.repos.refs(repoOfRequest(request));
      return {
        branches: refs.branches.map(({ name, commit }) => ({ name, ref: `refs/heads/${name}`, targetCommit: commit.oid })),
        tags: refs.tags.map(({ name, commit }) => ({ name, ref: `refs/tags/${name}`, targetCommit: commit.oid })),
        converts: [],
      };
    },
  );

  app.get<{ Params: RepoParams; Querystring: wire.CommitsQuery }>(
    "/api/:types/:namespace/:name/commits/*",
    { config: read, schema: { params: wire.RepoParams, querystring: wire.CommitsQuery, response: { 200: wire.Commits } } },
    async (request, reply) => {
      const repo = repoOfRequest(request);
      const { commit } = await deps.hub.repos.resolve(repo, revisionAndPath(request, API_REVISION_SEGMENT).revision);
      const page = Math.max(0, Number.parseInt(request.query.p ?? "0", 10) || 0);
      // `limit` (@huggingface/hub's listCommits batchSize) sets the page size; it travels on in the next link.
      const limit = request.query.limit === undefined ? COMMITS_PAGE : commitsLimit(request.query.limit);
      const { commits, more } = await deps.hub.history.commitsFrom(repo, commit, page * limit, limit);
      if (more) {
        // Pinned to the commit, so later pages do not shift when the branch moves meanwhile.
        const limitPart = request.query.limit === undefined ? "" : `&limit=${limit}`;
        const next = `${deps.publicUrl(request)}/api/${request.params.types}/${repo.name}/commits/${commit.oid}?p=${page + 1}${limitPart}`;
        reply.header("link", `<${next}>; rel="next"`);
      }
      return commits.map(commitJson);
    },
  );

  // Clients validate a model card whenever a commit adds README.md; castor accepts any card.
  app.post("/api/validate-yaml", { config: { hubAccess: "public" }, schema: { response: { 200: wire.ValidateYamlAnswer } } }, async () => ({
    errors: [],
    warnings: [],
  }));
  // The hf CLI asks for its agent-harness registry on every start; the empty registry is cached by it for a day.
  app.get("/api/agent-harnesses", { config: { hubAccess: "public" }, schema: { response: { 200: wire.AgentHarnesses } } }, async () => ({
    standardEnvVars: [],
    harnesses: {},
  }));
}
