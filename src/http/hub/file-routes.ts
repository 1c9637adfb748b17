/**
 * Hub routes about the files of a revision: tree listings, paths-info, preupload and the
 * NDJSON commit.
 *
 * The commit body is read as a stream (raw-body.ts: timed out like any body), one line at a
 * time, each line bounded, and parsed by hub/commit-payload.ts: inline file contents are kept
 * aside (inline-contents.ts) and reach the blob store only once the whole commit has validated,
 * just before its branch moves; only the operations' small descriptions are kept in memory.
 */
import type { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { type CommitHeader, CommitPayloadParser, maxCommitLineBytes } from "../../hub/commit-payload.js";
import { HubError, notSupported } from "../../hub/errors.js";
import type { CommitOperation } from "../../hub/history.js";
import type { HubRepositories, ListedEntry, PreuploadFile } from "../../hub/repositories.js";
import type { GcRecords } from "../../metadata/gc.js";
import type { CommitRecord, Repo } from "../../metadata/store.js";
import type { BlobStore } from "../../storage/blob-store.js";
import { bodyPieces, parseTextBodies } from "../raw-body.js";
import { addressOf, API_REVISION_SEGMENT, revisionAndPath, urlPrefixOf } from "./address.js";
import { DEFAULT_INLINE_MEMORY_BYTES, InlineContents } from "./inline-contents.js";
import { readLines } from "./ndjson.js";
import { treeEntryJson } from "./render.js";
import { callerOfRequest, type HubRouteDeps } from "./repo-routes.js";

export interface HubFileRouteDeps extends HubRouteDeps {
  repos: HubRepositories;
  blobs: BlobStore;
  /** Leases inline blobs against a garbage collection running while they are written. */
  store: Pick<GcRecords, "leaseObjects">;
  /** Largest file a commit may carry inline (`config.hubInlineMaxBytes`). */
  inlineMaxBytes: number;
  /** Where a commit's inline contents wait on disk, past the first few MiB, until it has validated. */
  spoolDir: string;
}

interface RepoParams {
  types: string;
  namespace: string;
  name: string;
}

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

function truthy(value: string | undefined): boolean {
  return value === "true" || value === "1" || value === "True";
}

function refusePullRequests(query: { create_pr?: string }): void {
  if (truthy(query.create_pr)) throw notSupported("pull requests", "commit to a branch instead (create_branch, then upload with revision=BRANCH)");
}

function encodePath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

export async function fileRoutes(app: FastifyInstance, deps: HubFileRouteDeps): Promise<void> {
  // paths-info comes as a form (huggingface_hub) or JSON; the commit as NDJSON, read as a stream.
  parseTextBodies(app, "application/x-www-form-urlencoded", (text) => new URLSearchParams(text));
  app.addContentTypeParser("application/x-ndjson", (_request, payload, done) => done(null, payload));

  /** Listed entries as the Hub renders them; with `expand`, each with the commit that last changed it. */
  const entriesJson = async (repo: Repo, commit: CommitRecord, entries: ListedEntry[], expand: boolean) => {
    const last = expand
      ? await deps.repos.lastCommits(
          repo,
          commit,
          entries.map((entry) => entry.path),
        )
      : null;
    return entries.map((entry) => treeEntryJson(entry, last?.get(entry.path)));
  };

  app.get<{ Params: RepoParams; Querystring: { recursive?: string; expand?: string; cursor?: string; limit?: string } }>(
    "/api/:types/:namespace/:name/tree/*",
    async (request, reply) => {
      const caller = await callerOfRequest(deps, request);
      const { namespace, name, types } = request.params;
      const repo = await deps.repos.readable(caller, addressOf(types, namespace, name));
      const { revision, path } = revisionAndPath(request, API_REVISION_SEGMENT);
      const { commit } = await deps.repos.resolve(repo, revision);
      const recursive = truthy(request.query.recursive);
      const expand = truthy(request.query.expand);
      const offset = request.query.cursor === undefined ? 0 : Number.parseInt(Buffer.from(request.query.cursor, "base64url").toString(), 10);
      if (!Number.isSafeInteger(offset) || offset < 0) throw new HubError(400, "the tree cursor is not valid: use the Link header's next URL as given");
      const pageMax = expand ? EXPANDED_TREE_PAGE_ENTRIES : TREE_PAGE_ENTRIES;
      const limit = Math.max(1, Math.min(Number.parseInt(request.query.limit ?? String(pageMax), 10) || pageMax, pageMax));
      const page = await deps.repos.listTree(repo, commit, path, recursive, offset, limit);
      if (page.more) {
        const cursor = Buffer.from(String(offset + page.entries.length)).toString("base64url");
        const pathPart = path === "" ? "" : `/${encodePath(path)}`;
        const limitPart = request.query.limit === undefined ? "" : `&limit=${limit}`;
        // Pinned to the commit: the next page lists the same tree even if the branch moves meanwhile.
        const next = `${deps.publicUrl(request)}/api/${types}/${repo.name}/tree/${commit.oid}${pathPart}?recursive=${recursive}&expand=${expand}${limitPart}&cursor=${cursor}`;
        reply.header("link", `<${next}>; rel="next"`);
      }
      return entriesJson(repo, commit, page.entries, expand);
    },
  );

  app.post<{ Params: RepoParams; Querystring: { expand?: string } }>(
    "/api/:types/:namespace/:name/paths-info/*",
    { bodyLimit: PATHS_INFO_BODY_LIMIT },
    async (request) => {
      const caller = await callerOfRequest(deps, request);
      const { namespace, name, types } = request.params;
      const repo = await deps.repos.readable(caller, addressOf(types, namespace, name));
      const { commit } = await deps.repos.resolve(repo, revisionAndPath(request, API_REVISION_SEGMENT).revision);
      const body = request.body;
      const form = body instanceof URLSearchParams ? body : null;
      const json = form === null && typeof body === "object" && body !== null ? (body as { paths?: unknown; expand?: unknown }) : null;
      const paths = form !== null ? form.getAll("paths") : Array.isArray(json?.paths) ? json.paths : null;
      if (paths === null || !paths.every((p) => typeof p === "string")) throw new HubError(400, 'paths-info needs "paths": a list of file paths');
      // huggingface_hub sends the form field expand=True/False; JSON callers a boolean.
      const expand = truthy(form?.get("expand") ?? undefined) || json?.expand === true || truthy(request.query.expand);
      const most = expand ? MAX_EXPANDED_PATHS : MAX_PATHS_INFO_PATHS;
      if (paths.length > most) {
        throw new HubError(413, `paths-info takes at most ${most} paths per request${expand ? " with expand=true" : ""}: split the request`);
      }
      return entriesJson(repo, commit, await deps.repos.pathsInfo(repo, commit, paths as string[]), expand);
    },
  );

  app.post<{ Params: RepoParams; Querystring: { create_pr?: string } }>(
    "/api/:types/:namespace/:name/preupload/*",
    { bodyLimit: PREUPLOAD_BODY_LIMIT },
    async (request) => {
      refusePullRequests(request.query);
      const caller = await callerOfRequest(deps, request);
      const { namespace, name, types } = request.params;
      const repo = await deps.repos.writable(caller, addressOf(types, namespace, name));
      const { commit } = await deps.repos.resolve(repo, revisionAndPath(request, API_REVISION_SEGMENT).revision);
      const files = preuploadFiles(request.body);
      const answers = await deps.repos.preupload(repo, commit, files);
      return { files: answers.map((answer) => ({ ...answer, shouldIgnore: false })), commitOid: commit.oid };
    },
  );

  app.post<{ Params: RepoParams; Querystring: { create_pr?: string } }>("/api/:types/:namespace/:name/commit/*", async (request) => {
    refusePullRequests(request.query);
    const caller = await callerOfRequest(deps, request);
    const { namespace, name, types } = request.params;
    const address = addressOf(types, namespace, name);
    // Checked before the body is read, so a refused token costs no upload.
    await deps.repos.writable(caller, address);
    const { revision } = revisionAndPath(request, API_REVISION_SEGMENT);
    if (!isStream(request.body)) throw new HubError(415, "send the commit as Content-Type: application/x-ndjson");
    const contents = new InlineContents({ dir: deps.spoolDir, memoryBytes: DEFAULT_INLINE_MEMORY_BYTES });
    try {
      const { header, operations } = await readCommitPayload(request, deps.inlineMaxBytes, contents);
      const commit = await deps.repos.commit(caller, address, revision, header, operations, () => contents.store(deps.blobs, deps.store));
      return { commitOid: commit.oid, commitUrl: `${deps.publicUrl(request)}/${urlPrefixOf(address.type)}${address.name}/commit/${commit.oid}`, success: true };
    } finally {
      await contents.close();
    }
  });
}

function isStream(body: unknown): body is Readable {
  return typeof body === "object" && body !== null && typeof (body as Readable).pipe === "function";
}

function preuploadFiles(body: unknown): PreuploadFile[] {
  const files = (body as { files?: unknown } | null)?.files;
  if (!Array.isArray(files)) throw new HubError(400, 'preupload needs a JSON body {"files": [{"path", "sample", "size"}]}');
  if (files.length > MAX_PREUPLOAD_FILES) throw new HubError(413, `preupload takes at most ${MAX_PREUPLOAD_FILES} files per request`);
  return files.map((file: unknown, index) => {
    const { path, sample, size } = (file ?? {}) as Record<string, unknown>;
    if (typeof path !== "string" || typeof sample !== "string" || !Number.isSafeInteger(size) || (size as number) < 0) {
      throw new HubError(400, `preupload file #${index} needs "path" (string), "sample" (base64) and "size" (a whole number of bytes)`);
    }
    return { path, size: size as number, sample: Buffer.from(sample, "base64").subarray(0, 512) };
  });
}

/**
 * Parses the NDJSON commit (hub/commit-payload.ts), keeping inline contents in `contents`.
 * HubError 400/413 for bad input; a refusal before the body's end is answered at once, and
 * connection-limits.ts drops the rest of the body within the linger bounds.
 *
 * The body as a whole has no byte cap: its lines are bounded, and so is their number
 * (MAX_COMMIT_OPERATIONS); the body timeouts bound how long it may take.
 */
async function readCommitPayload(
  request: FastifyRequest,
  inlineMaxBytes: number,
  contents: InlineContents,
): Promise<{ header: CommitHeader; operations: CommitOperation[] }> {
  const payload = new CommitPayloadParser(inlineMaxBytes);
  for await (const line of readLines(bodyPieces(request, Number.POSITIVE_INFINITY), maxCommitLineBytes(inlineMaxBytes))) {
    const inline = payload.line(line);
    if (inline !== null) await contents.add(inline.sha256, inline.content);
  }
  return payload.finish();
}
