/**
 * Hub routes about the files of a revision: tree listings, paths-info, preupload and the
 * NDJSON commit. The commit body is read as a stream by raw-body.ts (timed out like any body;
 * a refusal before its end is answered at once and connection-limits.ts drops the rest within
 * the linger bounds) and handed, piece by piece, to the file service (src/hub/files.ts), which
 * splits and parses it and keeps inline contents aside until the commit validates.
 */
import type { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { HubError, notSupported } from "../../hub/errors.js";
import type { ListedEntry } from "../../hub/histories.js";
import type { CommitRecord, Repo } from "../../hub/records.js";
import * as wire from "../../wire/hub.js";
import { bodyPieces, parseTextBodies } from "../raw-body.js";
import { addressOf, API_REVISION_SEGMENT, revisionAndPath, urlPrefixOf } from "./address.js";
import { callerOfRequest, repoOfRequest } from "./caller.js";
import { treeEntryJson } from "./render.js";
import type { HubRouteDeps } from "./repo-routes.js";

/** Entries per tree page; the Hub pages at about this size too. */
export const TREE_PAGE_ENTRIES = 1000;
/** Entries per tree page with `expand=true` (each needs its last commit found): the Hub's 50. */
export const EXPANDED_TREE_PAGE_ENTRIES = 50;
/** Paths per paths-info request with `expand=true` at most (413 beyond). */
export const MAX_EXPANDED_PATHS = 100;
/** Files per preupload request at most (clients send 256 at a time). */
const MAX_PREUPLOAD_FILES = 10_000;
const PREUPLOAD_BODY_LIMIT = 16 * 1024 * 1024;
const PATHS_INFO_BODY_LIMIT = 4 * 1024 * 1024;
const MAX_PATHS_INFO_PATHS = 10_000;

function truthy(value: string | boolean | undefined): boolean {
  return value === true || value === "true" || value === "1" || value === "True";
}

/**
 * `?create_pr=1` refused as the features castor lacks are (unsupported-routes.ts): whoever asks,
 * before the caller is looked at, so the answer says nothing about which repositories exist.
 */
async function refusePullRequests(request: FastifyRequest): Promise<void> {
  const { create_pr: createPr } = request.query as wire.PullRequestQuery;
  if (truthy(createPr)) throw notSupported("pull requests", "commit to a branch instead (create_branch, then upload with revision=BRANCH)");
}

function encodePath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

/** huggingface_hub's paths-info form (`paths` repeated, `expand=True`) in the shape of the JSON body. */
function pathsInfoForm(text: string): Record<string, unknown> {
  const form = new URLSearchParams(text);
  const expand = form.get("expand");
  return { paths: form.getAll("paths"), ...(expand === null ? {} : { expand }) };
}

export async function fileRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  // paths-info comes as a form (huggingface_hub) or JSON; the commit as NDJSON, read as a stream.
  parseTextBodies(app, "application/x-www-form-urlencoded", pathsInfoForm);
  app.addContentTypeParser("application/x-ndjson", (_request, payload, done) => done(null, payload));
  const read = { hubAccess: { repo: "read" } } as const;
  const write = { hubAccess: { repo: "write" } } as const;

  /** Listed entries as the Hub renders them; with `expand`, each with the commit that last changed it. */
  const entriesJson = async (repo: Repo, commit: CommitRecord, entries: ListedEntry[], expand: boolean) => {
    const last = expand
      ? await deps.hub.history.lastCommits(
          repo,
          commit,
          entries.map((entry) => entry.path),
        )
      : null;
    return entries.map((entry) => treeEntryJson(entry, last?.get(entry.path)));
  };

  app.get<{ Params: wire.RepoParams; Querystring: wire.TreeQuery }>(
    "/api/:types/:namespace/:name/tree/*",
    { config: read, schema: { params: wire.RepoParams, querystring: wire.TreeQuery, response: { 200: wire.TreeEntries } } },
    async (request, reply) => {
      const repo = repoOfRequest(request);
      const { revision, path } = revisionAndPath(request, API_REVISION_SEGMENT);
      const { commit } = await deps.hub.repos.resolve(repo, revision);
      const recursive = truthy(request.query.recursive);
      const expand = truthy(request.query.expand);
      const offset = request.query.cursor === undefined ? 0 : Number.parseInt(Buffer.from(request.query.cursor, "base64url").toString(), 10);
      if (!Number.isSafeInteger(offset) || offset < 0) throw new HubError(400, "the tree cursor is not valid: use the Link header's next URL as given");
      const pageMax = expand ? EXPANDED_TREE_PAGE_ENTRIES : TREE_PAGE_ENTRIES;
      const limit = Math.max(1, Math.min(Number.parseInt(request.query.limit ?? String(pageMax), 10) || pageMax, pageMax));
      const page = await deps.hub.history.listTree(repo, commit, path, recursive, offset, limit);
      if (page.more) {
        const cursor = Buffer.from(String(offset + page.entries.length)).toString("base64url");
        const pathPart = path === "" ? "" : `/${encodePath(path)}`;
        const limitPart = request.query.limit === undefined ? "" : `&limit=${limit}`;
        // Pinned to the commit: the next page lists the same tree even if the branch moves meanwhile.
        const next = `${deps.publicUrl(request)}/api/${request.params.types}/${repo.name}/tree/${commit.oid}${pathPart}?recursive=${recursive}&expand=${expand}${limitPart}&cursor=${cursor}`;
        reply.header("link", `<${next}>; rel="next"`);
      }
      return entriesJson(repo, commit, page.entries, expand);
    },
  );

  app.post<{ Params: wire.RepoParams; Querystring: wire.ExpandQuery; Body: wire.PathsInfoBody }>(
    "/api/:types/:namespace/:name/paths-info/*",
    {
      config: read,
      bodyLimit: PATHS_INFO_BODY_LIMIT,
      schema: { params: wire.RepoParams, querystring: wire.ExpandQuery, body: wire.PathsInfoBody, response: { 200: wire.TreeEntries } },
    },
    async (request) => {
      const repo = repoOfRequest(request);
      const { commit } = await deps.hub.repos.resolve(repo, revisionAndPath(request, API_REVISION_SEGMENT).revision);
      const { paths } = request.body;
      // huggingface_hub sends the form field expand=True/False; JSON callers a boolean.
      const expand = truthy(request.body.expand) || truthy(request.query.expand);
      const most = expand ? MAX_EXPANDED_PATHS : MAX_PATHS_INFO_PATHS;
      if (paths.length > most) {
        throw new HubError(413, `paths-info takes at most ${most} paths per request${expand ? " with expand=true" : ""}: split the request`);
      }
      return entriesJson(repo, commit, await deps.hub.history.pathsInfo(repo, commit, paths), expand);
    },
  );

  app.post<{ Params: wire.RepoParams; Querystring: wire.PullRequestQuery; Body: wire.PreuploadBody }>(
    "/api/:types/:namespace/:name/preupload/*",
    {
      config: write,
      onRequest: refusePullRequests,
      bodyLimit: PREUPLOAD_BODY_LIMIT,
      schema: { params: wire.RepoParams, querystring: wire.PullRequestQuery, body: wire.PreuploadBody, response: { 200: wire.PreuploadAnswer } },
    },
    async (request) => {
      const repo = repoOfRequest(request);
      const { commit } = await deps.hub.repos.resolve(repo, revisionAndPath(request, API_REVISION_SEGMENT).revision);
      const { files } = request.body;
      if (files.length > MAX_PREUPLOAD_FILES) throw new HubError(413, `preupload takes at most ${MAX_PREUPLOAD_FILES} files per request`);
      const answers = await deps.hub.files.preupload(
        repo,
        commit,
        files.map(({ path, size, sample }) => ({ path, size, sample: Buffer.from(sample, "base64").subarray(0, 512) })),
      );
      return { files: answers.map((answer) => ({ ...answer, shouldIgnore: false })), commitOid: commit.oid };
    },
  );

  app.post<{ Params: wire.RepoParams; Querystring: wire.PullRequestQuery }>(
    "/api/:types/:namespace/:name/commit/*",
    // The payload is NDJSON, parsed line by line as it arrives by the file service (commit-payload.ts).
    {
      config: write,
      onRequest: refusePullRequests,
      schema: { params: wire.RepoParams, querystring: wire.PullRequestQuery, response: { 200: wire.CommitAnswer } },
    },
    async (request) => {
      const { namespace, name, types } = request.params;
      const address = addressOf(types, namespace, name);
      const { revision } = revisionAndPath(request, API_REVISION_SEGMENT);
      if (!isStream(request.body)) throw new HubError(415, "send the commit as Content-Type: application/x-ndjson");
      // The body as a whole has no byte cap: its lines are bounded, and so is their number
      // (MAX_COMMIT_LINES, blank ones included); the body timeouts bound how long it may take.
      const commit = await deps.hub.files.commitPayload(callerOfRequest(request), address, revision, bodyPieces(request, Number.POSITIVE_INFINITY));
      return { commitOid: commit.oid, commitUrl: `${deps.publicUrl(request)}/${urlPrefixOf(address.type)}${address.name}/commit/${commit.oid}`, success: true };
    },
  );
}

function isStream(body: unknown): body is Readable {
  return typeof body === "object" && body !== null && typeof (body as Readable).pipe === "function";
}
