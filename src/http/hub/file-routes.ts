/**
 * Hub routes about the files of a revision: tree listings, paths-info, preupload and the
 * NDJSON commit.
 *
 * The commit body is read as a stream, one line at a time, each line bounded: inline file
 * contents go to the blob store (content-addressed, so a refused commit leaves at most an
 * unreferenced object) as their lines arrive, and only the operations' small descriptions are
 * kept until the commit is applied in one step.
 */
import type { Readable } from "node:stream";
import type { FastifyInstance } from "fastify";
import { leaseForWrite } from "../../cas/leases.js";
import { TaskPool } from "../../client/concurrency.js";
import { gitBlobId } from "../../format/git.js";
import { HubError, notSupported } from "../../hub/errors.js";
import type { CommitOperation } from "../../hub/history.js";
import { sha256Hex } from "../../hub/history.js";
import type { HubRepositories, ListedEntry, PreuploadFile } from "../../hub/repositories.js";
import type { GcRecords } from "../../metadata/gc.js";
import type { CommitRecord, Repo } from "../../metadata/store.js";
import { blobKeyFromHex, type BlobStore } from "../../storage/blob-store.js";
import { addressOf, API_REVISION_SEGMENT, revisionAndPath, urlPrefixOf } from "./address.js";
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
/** Operations per commit at most (the hf CLI's folder uploader commits at most 1,000 files at once). */
export const MAX_COMMIT_OPERATIONS = 100_000;
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
  app.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string", bodyLimit: PATHS_INFO_BODY_LIMIT }, (_request, body, done) => {
    done(null, new URLSearchParams(body as string));
  });
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
        const next = `${deps.publicUrl()}/api/${types}/${repo.name}/tree/${commit.oid}${pathPart}?recursive=${recursive}&expand=${expand}${limitPart}&cursor=${cursor}`;
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
    const { header, operations } = await readCommitPayload(request.body, deps);
    const commit = await deps.repos.commit(caller, address, revision, header, operations);
    return { commitOid: commit.oid, commitUrl: `${deps.publicUrl()}/${urlPrefixOf(address.type)}${address.name}/commit/${commit.oid}`, success: true };
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

type CommitHeader = { summary: string; description: string; parentCommit?: string };

/**
 * Inline contents are stored concurrently while the body is read: each store is a durable write
 * (two fsyncs) of several milliseconds, which one after another made a commit of 2,500 small
 * files take 20 s. Many small files may be in flight; large ones (up to the inline limit each)
 * few, which bounds the memory held to about 4 MiB + 4 lines.
 */
const SMALL_INLINE_BYTES = 64 * 1024;
const SMALL_WRITES_IN_FLIGHT = 64;
const LARGE_WRITES_IN_FLIGHT = 4;

interface InlineWrites {
  small: TaskPool;
  large: TaskPool;
}

/** Parses the NDJSON commit, storing inline contents as they arrive. HubError 400/413 for bad input. */
async function readCommitPayload(body: Readable, deps: HubFileRouteDeps): Promise<{ header: CommitHeader; operations: CommitOperation[] }> {
  const writes: InlineWrites = { small: new TaskPool(SMALL_WRITES_IN_FLIGHT), large: new TaskPool(LARGE_WRITES_IN_FLIGHT) };
  try {
    const payload = await parseCommitLines(body, deps, writes);
    await Promise.all([writes.small.drain(), writes.large.drain()]);
    return payload;
  } finally {
    await Promise.all([writes.small.settle(), writes.large.settle()]);
  }
}

async function parseCommitLines(
  body: Readable,
  deps: HubFileRouteDeps,
  writes: InlineWrites,
): Promise<{ header: CommitHeader; operations: CommitOperation[] }> {
  // A base64 line of the largest inline file, plus room for the JSON around it.
  const maxLineBytes = Math.ceil(deps.inlineMaxBytes / 3) * 4 + 64 * 1024;
  let header: CommitHeader | undefined;
  const operations: CommitOperation[] = [];
  let lineNumber = 0;
  for await (const line of readLines(body, maxLineBytes)) {
    lineNumber++;
    if (line.trim() === "") continue;
    let item: { key?: unknown; value?: unknown };
    try {
      item = JSON.parse(line);
    } catch {
      throw new HubError(400, `commit line ${lineNumber} is not JSON: send one JSON object per line`);
    }
    const value = (typeof item?.value === "object" && item.value !== null ? item.value : {}) as Record<string, unknown>;
    if (item.key === "header") {
      if (header !== undefined) throw new HubError(400, `commit line ${lineNumber}: a second header`);
      header = commitHeaderOf(value);
      continue;
    }
    if (header === undefined) throw new HubError(400, 'the commit must start with a {"key": "header"} line');
    if (operations.length >= MAX_COMMIT_OPERATIONS) throw new HubError(413, `a commit takes at most ${MAX_COMMIT_OPERATIONS} operations: split it`);
    operations.push(await operationOf(item.key, value, lineNumber, deps, writes));
  }
  if (header === undefined) throw new HubError(400, 'the commit is empty: it needs a {"key": "header"} line');
  return { header, operations };
}

function commitHeaderOf(value: Record<string, unknown>): CommitHeader {
  const { summary, description, parentCommit } = value;
  if (typeof summary !== "string") throw new HubError(400, 'the commit header needs a "summary"');
  if (description !== undefined && description !== null && typeof description !== "string") throw new HubError(400, '"description" must be a string');
  if (parentCommit !== undefined && parentCommit !== null && (typeof parentCommit !== "string" || !/^[0-9a-f]{40}$/.test(parentCommit))) {
    throw new HubError(400, '"parentCommit" must be a 40-hex commit id');
  }
  return { summary, description: (description as string | undefined) ?? "", ...(typeof parentCommit === "string" ? { parentCommit } : {}) };
}

async function operationOf(
  key: unknown,
  value: Record<string, unknown>,
  lineNumber: number,
  deps: HubFileRouteDeps,
  writes: InlineWrites,
): Promise<CommitOperation> {
  const path = value.path;
  if (typeof path !== "string") throw new HubError(400, `commit line ${lineNumber}: the operation needs a "path"`);
  switch (key) {
    case "file": {
      if (typeof value.content !== "string" || (value.encoding !== undefined && value.encoding !== "base64")) {
        throw new HubError(400, `commit line ${lineNumber}: a file needs base64 "content"`);
      }
      const content = Buffer.from(value.content, "base64");
      if (content.length >= deps.inlineMaxBytes && content.length > 0) {
        throw new HubError(
          413,
          `${JSON.stringify(path)} is ${content.length} bytes: files of ${deps.inlineMaxBytes} bytes or more must be uploaded through Xet (install hf_xet)`,
        );
      }
      const sha256 = sha256Hex(content);
      const pool = content.length <= SMALL_INLINE_BYTES ? writes.small : writes.large;
      await pool.submit(async () => {
        await leaseForWrite(deps.store, "inline", Buffer.from(sha256, "hex"));
        await deps.blobs.putIfAbsent(blobKeyFromHex("inline", sha256), content);
      });
      return { kind: "file", path, size: content.length, sha256, oid: gitBlobId(content) };
    }
    case "lfsFile": {
      const { oid, algo, size } = value;
      if (typeof oid !== "string" || !/^[0-9a-f]{64}$/.test(oid) || (algo !== undefined && algo !== "sha256")) {
        throw new HubError(400, `commit line ${lineNumber}: an lfsFile needs "oid", a 64-hex SHA-256`);
      }
      if (size !== undefined && !(Number.isSafeInteger(size) && (size as number) >= 0))
        throw new HubError(400, `commit line ${lineNumber}: "size" must be a whole number of bytes`);
      return { kind: "lfsFile", path, sha256: oid, ...(size === undefined ? {} : { size: size as number }) };
    }
    case "deletedFile":
      return { kind: "deletedFile", path };
    case "deletedFolder":
      return { kind: "deletedFolder", path: path.replace(/\/+$/, "") };
    default:
      throw new HubError(
        400,
        `commit line ${lineNumber}: unknown operation ${JSON.stringify(String(key).slice(0, 40))} (castor takes file, lfsFile, deletedFile, deletedFolder)`,
      );
  }
}
