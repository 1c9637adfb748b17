/**
 * The upstream hub, as a pull-through mirror asks it: the Hugging Face Hub API as
 * huggingface_hub calls it (`model_info`, `list_repo_tree`, `get_paths_info`, `list_repo_refs`,
 * `list_repo_commits`, `get_hf_file_metadata`, the Xet read token), answered by huggingface.co
 * or by another castor.
 *
 * What the real Hub does differently from castor, and how it is read here:
 * - `HEAD …/resolve/{rev}/{path}` of an LFS or Xet file answers a redirect to another host
 *   (a CDN, the Xet bridge) carrying the file's metadata (`X-Repo-Commit`, `X-Linked-Etag`,
 *   `X-Linked-Size`, `X-Xet-Hash`, `Link: <…>; rel="xet-auth"`): the HEAD is sent without
 *   following redirects and the 3xx itself is read, as the Python client does.
 * - `GET` of the same URL follows redirects; castor's token goes only to the upstream's own
 *   origin (dropped on a redirect to another host, by the transport).
 * - Refusals carry `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`,
 *   `GatedRepo`); a 401 on a repository URL without a code means "not found" for a caller that
 *   is not allowed to know more; 429 carries `Retry-After`, which is waited out a few times
 *   (up to `maxRetryAfterMs`) before the mirror gives up on the request.
 * - Tree listings are paginated with `Link: <…>; rel="next"`.
 *
 * Every request has a time limit (`timeoutMs`) and a short retry policy, so an upstream that
 * does not answer makes the mirror answer promptly (serving what it holds) instead of hanging.
 * The token is sent as `Authorization: Bearer` to the upstream only, and never appears in an
 * error message (URLs lose their query string there too).
 */
import { STATUS_CODES } from "node:http";
import { CasClient } from "../client/cas.js";
import { CastorClientError } from "../client/errors.js";
import { HttpClient, isTimeout, parseRetryAfter, readErrorMessage, readJson, redactUrl, type FetchFunction, type RetryPolicy } from "../client/http.js";
import { encodeRepoPath, nextLink } from "../client/hub.js";
import { TokenProvider } from "../client/token.js";
import type { RepoType } from "../format/repo.js";
import { UpstreamError } from "./errors.js";

export interface UpstreamHubOptions {
  /** The hub's base URL, e.g. `https://huggingface.co` (no trailing slash needed). */
  url: string;
  /** castor's own identity upstream (`CASTOR_UPSTREAM_TOKEN`); null: anonymous. */
  token: string | null;
  /** Milliseconds one metadata request may take before it counts as a failed attempt (default 15 s). */
  timeoutMs?: number;
  /** Retries of network failures and 5xx (default: 3 attempts in all, from 250 ms). */
  retry?: Partial<RetryPolicy>;
  /** Longest `Retry-After` of a 429 waited out before giving up (default 10 s), and how many times (default 2). */
  maxRetryAfterMs?: number;
  maxRateLimitWaits?: number;
  /** For tests: the transport, and how to wait. */
  fetch?: FetchFunction;
  sleep?: (ms: number) => Promise<void>;
  /** Told of every request's outcome (for metrics): `ok`, `not_found`, or an error kind. */
  onRequest?: (outcome: string) => void;
}

export interface UpstreamRepoRef {
  type: RepoType;
  /** `namespace/name`. */
  name: string;
}

export interface UpstreamRepoInfo {
  /** The repository's name as the upstream spells it. */
  id: string;
  /** The commit the revision asked for resolved to (40 hex). */
  sha: string;
  private: boolean;
  /** Gated repositories need each user's approval upstream. */
  gated: boolean;
  /** The commit's date, when the upstream says it. */
  lastModified: Date | null;
}

export interface UpstreamLastCommit {
  id: string;
  title: string;
  date: string;
}

export interface UpstreamFileEntry {
  type: "file";
  path: string;
  size: number;
  /** git blob id (of the LFS pointer for LFS and Xet files). */
  oid: string;
  /** LFS and Xet files: the content's SHA-256 and size. */
  lfs: { oid: string; size: number } | null;
  xetHash: string | null;
  lastCommit: UpstreamLastCommit | null;
}

export interface UpstreamFolderEntry {
  type: "directory";
  path: string;
  oid: string;
  lastCommit: UpstreamLastCommit | null;
}

export type UpstreamTreeEntry = UpstreamFileEntry | UpstreamFolderEntry;

export interface UpstreamRefs {
  branches: { name: string; commit: string }[];
  tags: { name: string; commit: string }[];
}

export interface UpstreamCommit {
  id: string;
  title: string;
  message: string;
  authors: string[];
  date: string | null;
}

/** What `HEAD …/resolve/{rev}/{path}` says, read off the answer or its cross-host redirect. */
export interface UpstreamFileMetadata {
  commit: string;
  /** Unquoted: the SHA-256 of LFS and Xet files, the git blob id of others. */
  etag: string;
  size: number;
  xetHash: string | null;
  /** The read-token route (`Link: <…>; rel="xet-auth"`), when the file is Xet-stored. */
  xetAuthUrl: string | null;
}

const DEFAULT_TIMEOUT_MS = 15_000;
const DEFAULT_RETRY: Partial<RetryPolicy> = { maxAttempts: 3, baseDelayMs: 250, maxDelayMs: 2_000 };
const DEFAULT_MAX_RETRY_AFTER_MS = 10_000;
const DEFAULT_RATE_LIMIT_WAITS = 2;
const MAX_JSON_BYTES = 4 * 1024 * 1024;
/** A tree page of the Hub: 1,000 entries (50 expanded) with paths up to a few KiB. */
const MAX_TREE_PAGE_BYTES = 64 * 1024 * 1024;
const MAX_TREE_PAGES = 100_000;
/** paths-info takes this many paths per request (what huggingface_hub sends at most). */
const PATHS_INFO_BATCH = 50;
const HEX40 = /^[0-9a-f]{40}$/;
const HEX64 = /^[0-9a-f]{64}$/;
/** Every 4xx but 429, handed back by the HTTP client for this module to read (408 is retried there). */
const FINAL_STATUSES: readonly number[] = Array.from({ length: 100 }, (_, i) => 400 + i).filter((status) => status !== 408);

const defaultSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class UpstreamHub {
  /** Without a trailing slash. */
  readonly url: string;
  private readonly http: HttpClient;
  private readonly timeoutMs: number;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(private readonly options: UpstreamHubOptions) {
    this.url = options.url.replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.sleep = options.sleep ?? defaultSleep;
    this.http = new HttpClient({ fetch: options.fetch, retry: { ...DEFAULT_RETRY, ...options.retry }, sleep: options.sleep, userAgent: "castor-mirror" });
  }

  /** The upstream's origin, for messages. */
  get origin(): string {
    return new URL(this.url).origin;
  }

  /** `model_info` / `dataset_info`: the repository at `revision` (default: its main branch). */
  async repoInfo(repo: UpstreamRepoRef, revision?: string): Promise<UpstreamRepoInfo> {
    const suffix = revision === undefined ? "" : `/revision/${encodeURIComponent(revision)}`;
    const what = `asking the upstream hub ${this.origin} about ${describe(repo)}${revision === undefined ? "" : ` at ${JSON.stringify(revision)}`}`;
    const body = await this.json(what, this.apiUrl(repo, suffix));
    if (body === null || typeof body !== "object") throw this.badAnswer(what, "the answer is not a JSON object");
    const { id, sha, private: isPrivate, gated, lastModified } = body as Record<string, unknown>;
    if (typeof sha !== "string" || !HEX40.test(sha)) throw this.badAnswer(what, 'the answer has no 40-hex "sha"');
    const date = typeof lastModified === "string" ? new Date(lastModified) : null;
    return {
      id: typeof id === "string" ? id : repo.name,
      sha,
      private: isPrivate === true,
      gated: gated !== undefined && gated !== false && gated !== null,
      lastModified: date !== null && !Number.isNaN(date.getTime()) ? date : null,
    };
  }

  /** `list_repo_tree`: the entries of `revision` below `path`, page after page. */
  async *listTree(
    repo: UpstreamRepoRef,
    revision: string,
    options: { path?: string; recursive?: boolean; expand?: boolean } = {},
  ): AsyncGenerator<UpstreamTreeEntry> {
    const path = (options.path ?? "").replace(/^\/+|\/+$/g, "");
    const what = `listing ${describe(repo)} at ${revision}${path === "" ? "" : ` below ${JSON.stringify(path)}`} on the upstream hub ${this.origin}`;
    const query = `recursive=${options.recursive === true}&expand=${options.expand === true}`;
    let url: string | null = this.apiUrl(repo, `/tree/${encodeURIComponent(revision)}${path === "" ? "" : `/${encodeRepoPath(path)}`}?${query}`);
    for (let pages = 1; url !== null; pages++) {
      if (pages > MAX_TREE_PAGES) throw this.badAnswer(what, `more than ${MAX_TREE_PAGES} pages`);
      const response = await this.send(what, url, { method: "GET" });
      const next = nextLink(response.headers.get("link"));
      const body = await this.readJson(response, MAX_TREE_PAGE_BYTES, what);
      if (!Array.isArray(body)) throw this.badAnswer(what, "the answer is not a JSON array");
      for (const item of body) yield this.treeEntry(item, what);
      url = next === null ? null : this.sameOrigin(next, url, what);
    }
  }

  /** `get_paths_info`: the entries at `paths` that exist (others are left out). */
  async pathsInfo(repo: UpstreamRepoRef, revision: string, paths: readonly string[], expand: boolean): Promise<UpstreamTreeEntry[]> {
    const what = `asking the upstream hub ${this.origin} about ${paths.length} path(s) of ${describe(repo)} at ${revision}`;
    const entries: UpstreamTreeEntry[] = [];
    for (let at = 0; at < paths.length; at += PATHS_INFO_BATCH) {
      const form = new URLSearchParams();
      for (const path of paths.slice(at, at + PATHS_INFO_BATCH)) form.append("paths", path);
      form.set("expand", String(expand));
      const response = await this.send(what, this.apiUrl(repo, `/paths-info/${encodeURIComponent(revision)}`), {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new TextEncoder().encode(form.toString()),
      });
      const body = await this.readJson(response, MAX_TREE_PAGE_BYTES, what);
      if (!Array.isArray(body)) throw this.badAnswer(what, "the answer is not a JSON array");
      for (const item of body) entries.push(this.treeEntry(item, what));
    }
    return entries;
  }

  /** `list_repo_refs`: branches and tags with the commits they point at. */
  async refs(repo: UpstreamRepoRef): Promise<UpstreamRefs> {
    const what = `listing the refs of ${describe(repo)} on the upstream hub ${this.origin}`;
    const body = (await this.json(what, this.apiUrl(repo, "/refs"))) as Record<string, unknown> | null;
    const list = (value: unknown, kind: string) => {
      if (!Array.isArray(value)) throw this.badAnswer(what, `"${kind}" is not an array`);
      return value.map((item) => {
        const { name, targetCommit } = (item ?? {}) as Record<string, unknown>;
        if (typeof name !== "string" || typeof targetCommit !== "string" || !HEX40.test(targetCommit)) {
          throw this.badAnswer(what, `an entry of "${kind}" has no name and 40-hex targetCommit`);
        }
        return { name, commit: targetCommit };
      });
    };
    return { branches: list(body?.branches, "branches"), tags: list(body?.tags ?? [], "tags") };
  }

  /** `list_repo_commits`, one page: the commits from `revision` back, and the next page's URL. */
  async commits(repo: UpstreamRepoRef, revision: string, page: { p?: number; limit?: number } = {}): Promise<{ commits: UpstreamCommit[]; more: boolean }> {
    const what = `listing the commits of ${describe(repo)} at ${revision} on the upstream hub ${this.origin}`;
    const query = new URLSearchParams();
    if (page.p !== undefined && page.p > 0) query.set("p", String(page.p));
    if (page.limit !== undefined) query.set("limit", String(page.limit));
    const url = this.apiUrl(repo, `/commits/${encodeURIComponent(revision)}${query.size === 0 ? "" : `?${query}`}`);
    const response = await this.send(what, url, { method: "GET" });
    const more = nextLink(response.headers.get("link")) !== null;
    const body = await this.readJson(response, MAX_JSON_BYTES, what);
    if (!Array.isArray(body)) throw this.badAnswer(what, "the answer is not a JSON array");
    const commits = body.map((item): UpstreamCommit => {
      const { id, title, message, authors, date } = (item ?? {}) as Record<string, unknown>;
      if (typeof id !== "string" || !HEX40.test(id)) throw this.badAnswer(what, 'a commit has no 40-hex "id"');
      return {
        id,
        title: typeof title === "string" ? title : "",
        message: typeof message === "string" ? message : "",
        authors: Array.isArray(authors) ? authors.map((author) => String((author as { user?: unknown } | null)?.user ?? "")).filter(Boolean) : [],
        date: typeof date === "string" ? date : null,
      };
    });
    return { commits, more };
  }

  /**
   * `get_hf_file_metadata`: HEAD of the file's URL, redirects not followed (the Hub answers LFS
   * and Xet files with a redirect to another host that carries the metadata); a same-origin
   * relative redirect (a renamed repository) is followed, as the Python client does.
   */
  async fileMetadata(repo: UpstreamRepoRef, revision: string, path: string): Promise<UpstreamFileMetadata> {
    const what = `asking the upstream hub ${this.origin} about ${JSON.stringify(path)} of ${describe(repo)} at ${revision}`;
    let url = this.fileUrl(repo, revision, path);
    for (let hops = 0; ; hops++) {
      const response = await this.send(what, url, { method: "HEAD", headers: { "accept-encoding": "identity" }, redirect: "manual", redirectsOk: true });
      await response.body?.cancel().catch(() => undefined);
      const header = (name: string) => response.headers.get(name);
      const location = header("location");
      if (response.status >= 300 && response.status < 400 && location !== null && header("x-repo-commit") === null && hops < 3) {
        const next = new URL(location, url);
        if (next.origin !== new URL(url).origin) throw this.badAnswer(what, "the redirect to another host carries no X-Repo-Commit");
        url = next.href;
        continue;
      }
      const commit = header("x-repo-commit");
      if (commit === null || !HEX40.test(commit)) throw this.badAnswer(what, "the answer has no 40-hex X-Repo-Commit");
      const etag = (header("x-linked-etag") ?? header("etag") ?? "")
        .trim()
        .replace(/^W\//, "")
        .replace(/^"(.*)"$/, "$1");
      if (etag === "") throw this.badAnswer(what, "the answer has no ETag");
      const sizeText = (header("x-linked-size") ?? header("content-length") ?? "").trim();
      const size = /^\d+$/.test(sizeText) ? Number(sizeText) : Number.NaN;
      if (!Number.isSafeInteger(size)) throw this.badAnswer(what, "the answer has no size (X-Linked-Size or Content-Length)");
      const xetHash = header("x-xet-hash");
      if (xetHash !== null && !HEX64.test(xetHash)) throw this.badAnswer(what, "X-Xet-Hash is not 64 hex characters");
      return { commit, etag, size, xetHash, xetAuthUrl: xetHash === null ? null : this.xetAuthUrl(header("link"), header("x-xet-refresh-route"), url) };
    }
  }

  /**
   * `GET` of the file's URL (redirects followed): the response whose body is the file's bytes
   * (or `range` of them); the caller reads or cancels it. A 2xx other than what was asked is
   * the caller's to check.
   */
  openFile(repo: UpstreamRepoRef, revision: string, path: string, range?: { start: number; end: number }): Promise<Response> {
    const what = `downloading ${JSON.stringify(path)} of ${describe(repo)} at ${revision} from the upstream hub ${this.origin}`;
    const headers: Record<string, string> = { "accept-encoding": "identity" };
    if (range !== undefined) headers.range = `bytes=${range.start}-${range.end}`;
    return this.send(what, this.fileUrl(repo, revision, path), { method: "GET", headers, bulk: true });
  }

  /**
   * The upstream's CAS for reading `repo`'s Xet files: read tokens from its token route at
   * `commit`, refreshed before they expire, and requests to the CAS URL they name (often
   * another host). The hub token goes to the token route only; CAS requests carry the CAS token.
   */
  cas(repo: UpstreamRepoRef, commit: string): CasClient {
    const tokens = new TokenProvider({
      endpoint: this.url,
      hubToken: this.options.token,
      repo,
      revision: commit,
      access: "read",
      http: this.http,
      timeoutMs: this.timeoutMs,
    });
    return new CasClient(this.http, tokens);
  }

  /** Translates a failure of the client code (the token route, the CAS) into an UpstreamError; others pass through. */
  failure(error: unknown, what: string): unknown {
    if (error instanceof UpstreamError || !(error instanceof CastorClientError)) return error;
    // The client's messages say what was asked of which host already; `what` adds the file or listing it was for.
    const message = error.message.startsWith(what) ? error.message : `${what}: ${error.message}`;
    if (error.kind === "network") {
      this.options.onRequest?.(isTimeout(error) ? "timeout" : "unreachable");
      return new UpstreamError(isTimeout(error) ? "timeout" : "unreachable", message, { cause: error });
    }
    const status = "status" in error && typeof error.status === "number" ? error.status : undefined;
    if (status === 401 || status === 403) return new UpstreamError("forbidden", message, { status, cause: error });
    if (status === 404) return new UpstreamError("not_found", message, { status, cause: error });
    if (status !== undefined && status >= 500) return new UpstreamError("unreachable", message, { status, cause: error });
    return new UpstreamError("bad_answer", message, { status, cause: error });
  }

  // ---------------------------------------------------------------------------------------------

  private apiUrl(repo: UpstreamRepoRef, suffix: string): string {
    const [namespace, name] = repo.name.split("/");
    return `${this.url}/api/${repo.type}s/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}${suffix}`;
  }

  private fileUrl(repo: UpstreamRepoRef, revision: string, path: string): string {
    const [namespace, name] = repo.name.split("/");
    const prefix = repo.type === "model" ? "" : `${repo.type}s/`;
    return `${this.url}/${prefix}${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/resolve/${encodeURIComponent(revision)}/${encodeRepoPath(path)}`;
  }

  private async json(what: string, url: string): Promise<unknown> {
    return this.readJson(await this.send(what, url, { method: "GET" }), MAX_JSON_BYTES, what);
  }

  private async readJson(response: Response, maxBytes: number, what: string): Promise<unknown> {
    try {
      return await readJson(response, maxBytes, what);
    } catch (error) {
      throw this.failure(error, what);
    }
  }

  /**
   * One request to the upstream hub with castor's token: a 2xx response (a 3xx too with
   * `redirectsOk`), or an UpstreamError saying why not. 429s are waited out up to
   * `maxRateLimitWaits` times when their Retry-After is short enough.
   */
  private async send(
    what: string,
    url: string,
    init: { method: "GET" | "HEAD" | "POST"; headers?: Record<string, string>; body?: Uint8Array; redirect?: "manual"; redirectsOk?: boolean; bulk?: boolean },
  ): Promise<Response> {
    const headers = { ...init.headers, ...(this.options.token === null ? {} : { authorization: `Bearer ${this.options.token}` }) };
    const maxWaits = this.options.maxRateLimitWaits ?? DEFAULT_RATE_LIMIT_WAITS;
    const maxRetryAfter = this.options.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS;
    for (let waits = 0; ; waits++) {
      let response: Response;
      try {
        response = await this.http.request({
          what,
          url,
          method: init.method,
          headers,
          body: init.body,
          redirect: init.redirect,
          bulk: init.bulk,
          timeoutMs: init.bulk ? undefined : this.timeoutMs,
          passStatuses: [...FINAL_STATUSES, ...(init.redirectsOk ? [301, 302, 303, 307, 308] : [])],
        });
      } catch (error) {
        throw this.failure(error, what);
      }
      if (response.ok || (init.redirectsOk && response.status >= 300 && response.status < 400)) {
        this.options.onRequest?.("ok");
        return response;
      }
      if (response.status === 429) {
        const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
        await response.body?.cancel().catch(() => undefined);
        if (waits < maxWaits && (retryAfter ?? 0) <= maxRetryAfter) {
          await this.sleep(retryAfter ?? 1000);
          continue;
        }
        this.options.onRequest?.("rate_limited");
        const after = retryAfter === null ? "" : ` (it asks to wait ${Math.ceil(retryAfter / 1000)} s)`;
        throw new UpstreamError("rate_limited", `${what}: the upstream hub limits castor's requests (429)${after}`, { status: 429, retryAfterMs: retryAfter });
      }
      throw await this.refusal(response, what, url);
    }
  }

  private async refusal(response: Response, what: string, url: string): Promise<UpstreamError> {
    const status = response.status;
    const code = response.headers.get("x-error-code");
    const said = (await readErrorMessage(response)) ?? response.headers.get("x-error-message");
    const phrase = STATUS_CODES[status] ?? "";
    const message = `${what}: ${redactUrl(url)} answered ${status} ${phrase}${code === null ? "" : ` (${code})`}${said ? `: ${said}` : ""}`;
    const details = { status, code };
    let kind: UpstreamError["kind"];
    if (code === "GatedRepo") kind = "gated";
    else if (code === "RepoNotFound" || code === "RevisionNotFound" || code === "EntryNotFound") kind = "not_found";
    else if (status === 404) kind = "not_found";
    // The Hub answers 401 for a repository it will not name to this caller: missing or private.
    else if (status === 401 && new URL(url).pathname.startsWith("/api/")) kind = "not_found";
    else if (status === 401) kind = "unauthorized";
    else if (status === 403) kind = "forbidden";
    else kind = "bad_answer";
    this.options.onRequest?.(kind);
    return new UpstreamError(kind, message, kind === "not_found" && code === null && status !== 404 ? { ...details, code: "RepoNotFound" } : details);
  }

  private badAnswer(what: string, why: string): UpstreamError {
    this.options.onRequest?.("bad_answer");
    return new UpstreamError("bad_answer", `${what}: ${why}`);
  }

  /** A next-page link must stay on the upstream's origin: castor's token goes with it. */
  private sameOrigin(link: string, from: string, what: string): string {
    let url: URL;
    try {
      url = new URL(link, from);
    } catch {
      throw this.badAnswer(what, "the next-page link is not a URL");
    }
    if (url.origin !== this.origin) throw this.badAnswer(what, `the next-page link points to ${url.origin}, another host`);
    return url.href;
  }

  /** The xet-auth route of a HEAD answer (`Link` or `X-Xet-Refresh-Route`), as an absolute URL. */
  private xetAuthUrl(link: string | null, refreshRoute: string | null, base: string): string | null {
    if (link !== null) {
      for (const match of link.matchAll(/<([^>]*)>([^,]*)/g)) {
        if (/rel="?xet-auth"?/i.test(match[2])) return new URL(match[1], base).href;
      }
    }
    return refreshRoute === null ? null : new URL(refreshRoute, base).href;
  }

  private treeEntry(item: unknown, what: string): UpstreamTreeEntry {
    const bad = (why: string) => this.badAnswer(what, `a tree entry ${why}`);
    if (item === null || typeof item !== "object") throw bad("is not a JSON object");
    const { type, path, oid, size, lfs, xetHash, lastCommit } = item as Record<string, unknown>;
    if (typeof path !== "string" || path === "") throw bad('has no "path"');
    if (typeof oid !== "string" || !HEX40.test(oid)) throw bad(`${JSON.stringify(path)} has no 40-hex "oid"`);
    const last = lastCommitOf(lastCommit);
    if (type === "directory") return { type, path, oid, lastCommit: last };
    if (type !== "file") throw bad(`${JSON.stringify(path)} has the type ${JSON.stringify(type)}`);
    if (!Number.isSafeInteger(size) || (size as number) < 0) throw bad(`${JSON.stringify(path)} has no "size"`);
    if (xetHash !== undefined && xetHash !== null && (typeof xetHash !== "string" || !HEX64.test(xetHash)))
      throw bad(`${JSON.stringify(path)} has a malformed "xetHash"`);
    let pointer: UpstreamFileEntry["lfs"] = null;
    if (lfs !== undefined && lfs !== null) {
      const { oid: sha256, size: lfsSize } = lfs as Record<string, unknown>;
      if (typeof sha256 !== "string" || !HEX64.test(sha256) || lfsSize !== size) throw bad(`${JSON.stringify(path)} has a malformed "lfs"`);
      pointer = { oid: sha256, size: lfsSize as number };
    }
    return { type, path, size: size as number, oid, lfs: pointer, xetHash: typeof xetHash === "string" ? xetHash : null, lastCommit: last };
  }
}

function lastCommitOf(value: unknown): UpstreamLastCommit | null {
  if (value === null || typeof value !== "object") return null;
  const { id, title, date } = value as Record<string, unknown>;
  if (typeof id !== "string" || !HEX40.test(id)) return null;
  return { id, title: typeof title === "string" ? title : "", date: typeof date === "string" ? date : "" };
}

function describe(repo: UpstreamRepoRef): string {
  return `${repo.type}:${repo.name}`;
}
