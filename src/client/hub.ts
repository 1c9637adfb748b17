/**
 * The hub's repository routes, as castor's client uses them (the Hugging Face Hub API, see
 * castor's HUB-API notes §2 and §6), all authorised with the hub token:
 *
 * - `GET  /api/{type}s/{ns}/{name}/revision/{rev}`: the commit a revision names;
 * - `POST /api/{type}s/{ns}/{name}/commit/{branch}`: one NDJSON commit (`header`, then
 *   `lfsFile` operations naming Xet-uploaded content by SHA-256, inline `file` operations with
 *   base64 content, deletions);
 * - `GET  /api/{type}s/{ns}/{name}/tree/{rev}[/{path}]?recursive=…`: the files of a revision,
 *   page after page through `Link: <…>; rel="next"`;
 * - `POST /api/{type}s/{ns}/{name}/paths-info/{rev}`: what the revision holds at given paths
 *   (JSON `{"paths": […]}`), to tell whether a commit would change anything;
 * - `HEAD /{prefix}{ns}/{name}/resolve/{rev}/{path}` (prefix "" for models, `datasets/`,
 *   `spaces/`): what a file is — the commit (`X-Repo-Commit`), size, ETag (SHA-256 of a
 *   Xet-stored file, git blob id of an inline one) and, for Xet-stored files, `X-Xet-Hash`;
 *   `GET` of the same URL: an inline file's bytes.
 *
 * Refusals become a `HubStatusError` carrying the server's message (its JSON `error`, or the
 * `X-Error-Message` header of a body-less HEAD answer) and its `X-Error-Code`
 * (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`).
 *
 * Reads are retried like every other request of the client (http.ts). A commit is not
 * idempotent — applied twice it makes two commits — so it is sent again only when the
 * connection was never made (refused, or the name did not resolve): then nothing reached the
 * server. Any other failure is reported with the warning that the commit may have been applied.
 */
import { STATUS_CODES } from "node:http";
import { gitBlobId } from "../format/git.js";
import { CastorClientError, HttpStatusError } from "./errors.js";
import { isRetryableStatus, readErrorMessage, readJson, type HttpClient } from "./http.js";
import type { CommitAnswer, CommitLine, RepoInfo, TreeEntry } from "../wire/hub.js";
import { formatRepoRef, type RepoRef } from "./token.js";

/** One change of a commit. Paths are `/`-separated, relative to the repository's root. */
export type CommitOperation =
  /** Content uploaded through Xet (with a write token of this repository), named by its SHA-256. */
  | { kind: "lfsFile"; path: string; sha256: string; size: number }
  /** Content carried inside the commit (small files only: the hub caps inline files, 10 MiB by default). */
  | { kind: "file"; path: string; content: Uint8Array }
  | { kind: "deletedFile"; path: string }
  | { kind: "deletedFolder"; path: string };

export interface CommitRequest {
  /** The commit's title (one line). */
  summary: string;
  /** The rest of the commit message. */
  description?: string;
  /** The head the commit was built on: the hub refuses it (412) when the branch has moved since. */
  parentCommit?: string;
  operations: readonly CommitOperation[];
}

export interface CommitResult {
  /** The new commit's id (40 hex, a git commit id). */
  commitOid: string;
  /** `{endpoint}/{prefix}{ns}/{name}/commit/{commitOid}`. */
  commitUrl: string;
}

/** How a file is stored: through Xet (chunks in xorbs), or inline (the hub's blob store). */
export type FileStorage = "xet" | "inline";

export interface RepoFileEntry {
  type: "file";
  path: string;
  size: number;
  /** The git blob id (of the LFS pointer, for Xet-stored files). */
  oid: string;
  storage: FileStorage;
  /** Xet-stored files: the file hash (what `download` takes). */
  xetHash: string | null;
  /** Xet-stored files: the SHA-256 of the content. */
  sha256: string | null;
}

export interface RepoFolderEntry {
  type: "directory";
  path: string;
  oid: string;
}

export type RepoTreeEntry = RepoFileEntry | RepoFolderEntry;

/** What `HEAD …/resolve/{rev}/{path}` says about a file. */
export interface RepoFileInfo {
  path: string;
  /** The revision asked for. */
  revision: string;
  /** The commit it resolved to (`X-Repo-Commit`). */
  commit: string;
  size: number;
  storage: FileStorage;
  /** Xet-stored files: the file hash (`X-Xet-Hash`). */
  xetHash: string | null;
  /** Unquoted ETag: the SHA-256 of a Xet-stored file, the git blob id of an inline one. */
  etag: string;
}

/** A hub refusal: the status, the server's message and its `X-Error-Code`. */
export class HubStatusError extends HttpStatusError {
  override readonly name: string = "HubStatusError";
  constructor(
    status: number,
    serverMessage: string | null,
    /** `RepoNotFound`, `RevisionNotFound`, `EntryNotFound`, or null. */
    readonly errorCode: string | null,
    message: string,
  ) {
    super(status, serverMessage, message);
  }
}

export interface HubClientOptions {
  /** The hub's base URL: castor's public URL (`CASTOR_PUBLIC_URL`). */
  endpoint: string;
  hubToken: string;
  repo: RepoRef;
  http: HttpClient;
  /** For tests: how to wait before sending a commit again. */
  sleep?: (ms: number) => Promise<void>;
}

const ALL_ERROR_STATUSES: readonly number[] = Array.from({ length: 200 }, (_, i) => 400 + i);
/**
 * The error statuses HttpClient hands back at once, so that this module reads the hub's message
 * and code; the transient ones (408, 429, 5xx but 501) are retried there first.
 */
const FINAL_STATUSES: readonly number[] = ALL_ERROR_STATUSES.filter((status) => !isRetryableStatus(status));
const MAX_JSON_ANSWER_BYTES = 1024 * 1024;
/** A tree page: 1,000 entries of paths up to 4 KiB each, with room to spare. */
const MAX_TREE_PAGE_BYTES = 64 * 1024 * 1024;
/** Paths asked about per paths-info request (the hub takes up to 10,000). */
const PATHS_INFO_BATCH = 1000;
/** Pages followed at most: a loop of `next` links must end. */
const MAX_TREE_PAGES = 1_000_000;
/** Attempts at a commit whose connection could not be made. */
const COMMIT_ATTEMPTS = 4;
const COMMIT_RETRY_DELAY_MS = 250;
/** Network failures that happen before anything is sent: a commit may be sent again after them. */
const NOTHING_SENT_CODES: ReadonlySet<string> = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]);
const HEX40 = /^[0-9a-f]{40}$/;
const HEX64 = /^[0-9a-f]{64}$/;

const defaultSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** `a/b c/d` → `a/b%20c/d`: each segment encoded, the `/` kept. */
export function encodeRepoPath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

/** The NDJSON body of a commit (HUB-API §6). */
export function encodeCommit(request: CommitRequest): Uint8Array {
  if (typeof request.summary !== "string" || request.summary.trim() === "") throw new CastorClientError("usage", "the commit message is empty");
  if (request.parentCommit !== undefined && !HEX40.test(request.parentCommit)) {
    throw new CastorClientError("usage", `parentCommit must be a 40-hex commit id, got ${JSON.stringify(request.parentCommit.slice(0, 100))}`);
  }
  const header = {
    summary: request.summary,
    description: request.description ?? "",
    ...(request.parentCommit === undefined ? {} : { parentCommit: request.parentCommit }),
  };
  const line = (item: CommitLine) => JSON.stringify(item);
  const lines = [line({ key: "header", value: header })];
  for (const op of request.operations) {
    if (typeof op.path !== "string" || op.path === "") throw new CastorClientError("usage", "a commit operation has no path");
    switch (op.kind) {
      case "lfsFile":
        if (!HEX64.test(op.sha256)) throw new CastorClientError("usage", `${op.path}: the SHA-256 must be 64 lowercase hex characters`);
        if (!Number.isSafeInteger(op.size) || op.size < 0) throw new CastorClientError("usage", `${op.path}: the size must be a whole number of bytes`);
        lines.push(line({ key: "lfsFile", value: { path: op.path, algo: "sha256", oid: op.sha256, size: op.size } }));
        break;
      case "file":
        lines.push(line({ key: "file", value: { content: Buffer.from(op.content).toString("base64"), path: op.path, encoding: "base64" } }));
        break;
      case "deletedFile":
      case "deletedFolder":
        lines.push(line({ key: op.kind, value: { path: op.path } }));
        break;
      default:
        throw new CastorClientError("usage", `unknown commit operation ${JSON.stringify((op as { kind?: unknown }).kind)}`);
    }
  }
  return Buffer.from(`${lines.join("\n")}\n`);
}

/** The `rel="next"` target of a `Link` header, or null. */
export function nextLink(header: string | null): string | null {
  if (header === null) return null;
  for (const match of header.matchAll(/<([^>]*)>([^,]*)/g)) {
    const params = match[2].split(";").map((param) =>
      param
        .trim()
        .toLowerCase()
        .replace(/\s*=\s*/, "="),
    );
    if (params.some((param) => param === 'rel="next"' || param === "rel=next")) return match[1];
  }
  return null;
}

/** Whether a network failure happened before the request could be sent (the cause chain names the code). */
function nothingSent(error: unknown): boolean {
  for (let cause: unknown = error, depth = 0; cause !== null && typeof cause === "object" && depth < 6; depth++) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === "string" && NOTHING_SENT_CODES.has(code)) return true;
    cause = (cause as { cause?: unknown }).cause;
  }
  return false;
}

function unquoteEtag(value: string | null): string | null {
  if (value === null) return null;
  return value
    .trim()
    .replace(/^W\//, "")
    .replace(/^"(.*)"$/, "$1");
}

export class HubClient {
  readonly endpoint: string;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(private readonly options: HubClientOptions) {
    this.endpoint = options.endpoint.replace(/\/+$/, "");
    this.sleep = options.sleep ?? defaultSleep;
  }

  get repo(): RepoRef {
    return this.options.repo;
  }

  /** `/api/{type}s/{ns}/{name}{suffix}`. */
  apiUrl(suffix: string): string {
    const [namespace, name] = this.repo.name.split("/");
    return `${this.endpoint}/api/${this.repo.type}s/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}${suffix}`;
  }

  /** `/{prefix}{ns}/{name}/resolve/{rev}/{path}`: a file's URL. */
  fileUrl(revision: string, path: string): string {
    const [namespace, name] = this.repo.name.split("/");
    const prefix = this.repo.type === "model" ? "" : `${this.repo.type}s/`;
    return `${this.endpoint}/${prefix}${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/resolve/${encodeURIComponent(revision)}/${encodeRepoPath(path)}`;
  }

  /** The commit id a branch, tag or commit id names (`GET …/revision/{rev}`). */
  async resolveRevision(revision: string): Promise<string> {
    const what = `looking up revision ${JSON.stringify(revision)} of ${formatRepoRef(this.repo)}`;
    const response = await this.send({ what, url: this.apiUrl(`/revision/${encodeURIComponent(revision)}`), method: "GET" });
    // Checked field by field: the server may be any Hub, and may be wrong.
    const body = (await readJson(response, MAX_JSON_ANSWER_BYTES, what)) as Partial<Record<keyof RepoInfo, unknown>> | null;
    const sha = body?.sha;
    if (typeof sha !== "string" || !HEX40.test(sha)) throw new CastorClientError("protocol", `${what}: the answer has no 40-hex "sha"`);
    return sha;
  }

  /** `/{prefix}{ns}/{name}/commit/{oid}`: a commit's page, as the hub's `commitUrl` names it. */
  commitUrl(commitOid: string): string {
    const [namespace, name] = this.repo.name.split("/");
    const prefix = this.repo.type === "model" ? "" : `${this.repo.type}s/`;
    return `${this.endpoint}/${prefix}${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/commit/${commitOid}`;
  }

  /**
   * The head commit of `branch` when applying `operations` to it would change nothing: every
   * operation puts at its path exactly the file already there — the same SHA-256 stored through
   * Xet for an `lfsFile`, the same git blob id stored inline for a `file` (the storage counts: the
   * tree would change). Null when something would change, when an operation deletes, or when the
   * branch does not exist yet (the commit creates it or is refused). The paths are looked up at
   * the head's commit id, so the answer describes that one commit even if the branch moves.
   * This is huggingface_hub's rule ("No files have been modified since last commit"): the hub
   * itself accepts a commit that changes nothing, as huggingface.co does.
   */
  async unchangedHead(branch: string, operations: readonly CommitOperation[]): Promise<string | null> {
    if (operations.some((op) => op.kind !== "lfsFile" && op.kind !== "file")) return null;
    let head: string;
    try {
      head = await this.resolveRevision(branch);
    } catch (error) {
      if (error instanceof HubStatusError && error.status === 404 && error.errorCode === "RevisionNotFound") return null;
      throw error;
    }
    const entries = await this.pathsInfo(
      head,
      operations.map((op) => op.path),
    );
    const current = new Map(entries.map((entry) => [entry.path, entry]));
    const unchanged = operations.every((op) => {
      const entry = current.get(op.path);
      if (entry?.type !== "file") return false;
      if (op.kind === "lfsFile") return entry.storage === "xet" && entry.sha256 === op.sha256 && entry.size === op.size;
      return op.kind === "file" && entry.storage === "inline" && entry.oid === gitBlobId(op.content);
    });
    return unchanged ? head : null;
  }

  /** What `revision` holds at `paths` (`POST …/paths-info/{rev}`): the entries that exist, files and folders. */
  async pathsInfo(revision: string, paths: readonly string[]): Promise<RepoTreeEntry[]> {
    const what = `looking up ${paths.length} path${paths.length === 1 ? "" : "s"} at ${JSON.stringify(revision)} in ${formatRepoRef(this.repo)}`;
    const entries: RepoTreeEntry[] = [];
    for (let start = 0; start < paths.length; start += PATHS_INFO_BATCH) {
      const body = Buffer.from(JSON.stringify({ paths: paths.slice(start, start + PATHS_INFO_BATCH), expand: false }));
      const response = await this.send({
        what,
        url: this.apiUrl(`/paths-info/${encodeURIComponent(revision)}`),
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      });
      const answer = await readJson(response, MAX_TREE_PAGE_BYTES, what);
      if (!Array.isArray(answer)) throw new CastorClientError("protocol", `${what}: the answer is not a JSON array`);
      for (const item of answer) entries.push(treeEntryOf(item, what));
    }
    return entries;
  }

  /**
   * Applies one commit to `branch`. Sent again only when the connection could not be made;
   * otherwise a failure may leave the commit applied, which the error message says.
   */
  async commit(branch: string, request: CommitRequest): Promise<CommitResult> {
    const body = encodeCommit(request);
    const count = request.operations.length;
    const what = `committing ${count} change${count === 1 ? "" : "s"} to branch ${JSON.stringify(branch)} of ${formatRepoRef(this.repo)}`;
    const maybeApplied = "the commit may have been applied: check the branch (castor repo files) before committing again";
    let response: Response;
    for (let attempt = 1; ; attempt++) {
      try {
        response = await this.options.http.request({
          what,
          url: this.apiUrl(`/commit/${encodeURIComponent(branch)}`),
          method: "POST",
          headers: { authorization: `Bearer ${this.options.hubToken}`, "content-type": "application/x-ndjson" },
          body,
          retry: false,
          passStatuses: ALL_ERROR_STATUSES,
        });
        break;
      } catch (error) {
        if (!(error instanceof CastorClientError) || error.kind !== "network") throw error;
        if (!nothingSent(error)) throw new CastorClientError("network", `${error.message}; ${maybeApplied}`, { cause: error });
        if (attempt >= COMMIT_ATTEMPTS) throw error;
        await this.sleep(COMMIT_RETRY_DELAY_MS * 2 ** (attempt - 1));
      }
    }
    if (!response.ok) {
      throw await hubError(response, what, {
        401: "check the hub token given with --hub-token or CASTOR_HUB_TOKEN",
        403: `the hub token does not grant write access to ${formatRepoRef(this.repo)}`,
        ...(response.status >= 500 ? { [response.status]: maybeApplied } : {}),
      });
    }
    const answer = (await readJson(response, MAX_JSON_ANSWER_BYTES, what)) as Partial<Record<keyof CommitAnswer, unknown>> | null;
    const { commitOid, commitUrl } = answer ?? {};
    if (typeof commitOid !== "string" || !HEX40.test(commitOid)) throw new CastorClientError("protocol", `${what}: the answer has no 40-hex "commitOid"`);
    return { commitOid, commitUrl: typeof commitUrl === "string" ? commitUrl : "" };
  }

  /**
   * The entries of `revision` below `path` (the root by default), all of them (`recursive`,
   * the default) or one folder's, following the hub's pages. Folders are listed too.
   */
  async *listTree(revision: string, options: { path?: string; recursive?: boolean } = {}): AsyncGenerator<RepoTreeEntry> {
    const path = (options.path ?? "").replace(/^\/+|\/+$/g, "");
    const recursive = options.recursive ?? true;
    const what = `listing the files of ${formatRepoRef(this.repo)} at ${JSON.stringify(revision)}${path === "" ? "" : ` below ${JSON.stringify(path)}`}`;
    let url: string | null = this.apiUrl(
      `/tree/${encodeURIComponent(revision)}${path === "" ? "" : `/${encodeRepoPath(path)}`}?recursive=${recursive}&expand=false`,
    );
    for (let pages = 1; url !== null; pages++) {
      if (pages > MAX_TREE_PAGES) throw new CastorClientError("protocol", `${what}: more than ${MAX_TREE_PAGES} pages`);
      const response = await this.send({ what, url, method: "GET" });
      const next = nextLink(response.headers.get("link"));
      const body = await readJson(response, MAX_TREE_PAGE_BYTES, what);
      if (!Array.isArray(body)) throw new CastorClientError("protocol", `${what}: the answer is not a JSON array`);
      for (const item of body) yield treeEntryOf(item, what);
      url = next === null ? null : this.sameOrigin(next, url, what);
    }
  }

  /** The files (not folders) of `revision`, recursively. */
  async listFiles(revision: string, options: { path?: string } = {}): Promise<RepoFileEntry[]> {
    const files: RepoFileEntry[] = [];
    for await (const entry of this.listTree(revision, { path: options.path, recursive: true })) {
      if (entry.type === "file") files.push(entry);
    }
    return files;
  }

  /** `HEAD` of the file's URL: its commit, size, storage and ETag. */
  async fileInfo(revision: string, path: string): Promise<RepoFileInfo> {
    const what = `looking up ${JSON.stringify(path)} at ${JSON.stringify(revision)} in ${formatRepoRef(this.repo)}`;
    const response = await this.send({ what, url: this.fileUrl(revision, path), method: "HEAD", headers: { "accept-encoding": "identity" } });
    await response.body?.cancel().catch(() => undefined);
    const header = (name: string) => response.headers.get(name);
    const commit = header("x-repo-commit");
    if (commit === null || !HEX40.test(commit)) throw new CastorClientError("protocol", `${what}: the answer has no 40-hex X-Repo-Commit`);
    const xetHash = header("x-xet-hash");
    if (xetHash !== null && !HEX64.test(xetHash)) throw new CastorClientError("protocol", `${what}: X-Xet-Hash is not 64 hex characters`);
    const etag = unquoteEtag(header("x-linked-etag") ?? header("etag"));
    if (etag === null || etag === "") throw new CastorClientError("protocol", `${what}: the answer has no ETag`);
    const sizeText = (header("x-linked-size") ?? header("content-length"))?.trim() ?? "";
    const size = /^\d+$/.test(sizeText) ? Number(sizeText) : NaN;
    if (!Number.isSafeInteger(size)) throw new CastorClientError("protocol", `${what}: the answer has no size (X-Linked-Size or Content-Length)`);
    return { path, revision, commit, size, storage: xetHash === null ? "inline" : "xet", xetHash, etag };
  }

  /** `GET` of the file's URL: the response whose body is the file's bytes (the caller reads or cancels it). */
  openFile(revision: string, path: string): Promise<Response> {
    const what = `downloading ${JSON.stringify(path)} at ${JSON.stringify(revision)} from ${formatRepoRef(this.repo)}`;
    return this.send({ what, url: this.fileUrl(revision, path), method: "GET", headers: { "accept-encoding": "identity" } });
  }

  /** A hub request with the hub token (reads only: it may be sent more than once); a 2xx response, or a HubStatusError. */
  private async send(request: {
    what: string;
    url: string;
    method: "GET" | "HEAD" | "POST";
    headers?: Record<string, string>;
    body?: Uint8Array;
  }): Promise<Response> {
    const response = await this.options.http.request({
      ...request,
      headers: { authorization: `Bearer ${this.options.hubToken}`, ...request.headers },
      passStatuses: FINAL_STATUSES,
    });
    if (response.ok) return response;
    throw await hubError(response, request.what, { 401: "check the hub token given with --hub-token or CASTOR_HUB_TOKEN" });
  }

  /** A `next` link, which must stay on the endpoint's origin: the hub token goes with it. */
  private sameOrigin(link: string, from: string, what: string): string {
    let url: URL;
    try {
      url = new URL(link, from);
    } catch {
      throw new CastorClientError("protocol", `${what}: the next-page link is not a URL`);
    }
    const expected = new URL(this.endpoint).origin;
    if (url.origin !== expected) {
      throw new CastorClientError(
        "protocol",
        `${what}: the hub's next-page link points to ${url.origin}, not to the endpoint ${expected}: use the server's public URL (CASTOR_PUBLIC_URL) as the endpoint`,
      );
    }
    return url.href;
  }
}

/** The hub's refusal as a HubStatusError: its JSON `error` (or `X-Error-Message`) and `X-Error-Code`. */
async function hubError(response: Response, what: string, hints: Readonly<Partial<Record<number, string>>>): Promise<HubStatusError> {
  const code = response.headers.get("x-error-code");
  const header = response.headers.get("x-error-message");
  const body = await readErrorMessage(response);
  const serverMessage = body ?? (header === null || header.trim() === "" ? null : header.trim());
  const phrase = STATUS_CODES[response.status];
  const hint = hints[response.status];
  const message =
    `${what}: ${response.status}${phrase === undefined ? "" : ` ${phrase}`}${code === null ? "" : ` (${code})`}` +
    `${serverMessage === null ? "" : `: ${serverMessage}`}${hint === undefined ? "" : ` (${hint})`}`;
  return new HubStatusError(response.status, serverMessage, code, message);
}

function treeEntryOf(item: unknown, what: string): RepoTreeEntry {
  const bad = (why: string) => new CastorClientError("protocol", `${what}: a tree entry ${why}`);
  if (item === null || typeof item !== "object") throw bad("is not a JSON object");
  const { type, path, oid, size, xetHash, lfs } = item as Partial<Record<keyof TreeEntry, unknown>>;
  if (typeof path !== "string" || path === "") throw bad('has no "path"');
  if (typeof oid !== "string") throw bad(`${JSON.stringify(path)} has no "oid"`);
  if (type === "directory") return { type, path, oid };
  if (type !== "file") throw bad(`${JSON.stringify(path)} has the unknown type ${JSON.stringify(type)}`);
  if (!Number.isSafeInteger(size) || (size as number) < 0) throw bad(`${JSON.stringify(path)} has no "size"`);
  if (xetHash !== undefined && xetHash !== null && (typeof xetHash !== "string" || !HEX64.test(xetHash)))
    throw bad(`${JSON.stringify(path)} has a malformed "xetHash"`);
  const sha256 = (lfs as { oid?: unknown } | undefined)?.oid;
  const isXet = typeof xetHash === "string";
  return {
    type,
    path,
    size: size as number,
    oid,
    storage: isXet ? "xet" : "inline",
    xetHash: isXet ? xetHash : null,
    sha256: isXet && typeof sha256 === "string" ? sha256 : null,
  };
}
