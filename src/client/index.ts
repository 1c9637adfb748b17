/**
 * castor's own client, exported as `castor/client`:
 *
 *     import { uploadToRepo, downloadFile, listFiles } from "castor/client";
 *     const options = { endpoint, hubToken, repo: "model:alice/bert" };
 *     const { commit } = await uploadToRepo({ ...options, files: ["a.bin", "notes.txt"], pathInRepo: "weights" });
 *     for (const file of await listFiles(options)) console.log(file.path, file.size, file.storage);
 *     await downloadFile({ ...options, path: "weights/a.bin", output: "copy.bin" });
 *
 * Files travel through Xet: `upload` chunks them, stores the chunks the server does not have
 * yet and registers the files (by file hash) in the repository; `download` fetches a file by
 * its file hash. On top of that, repositories are git-style histories on the hub:
 * `uploadToRepo` uploads and then commits the files to a branch in one commit; `commit`
 * makes any commit (`lfsFile` operations name Xet-uploaded content by SHA-256);
 * `listFiles` lists a revision; `downloadFile` downloads a file by its path — through Xet when
 * the hub stores it there (`X-Xet-Hash`), by a plain GET checked against its git blob id
 * when it is stored inline.
 *
 * `CastorClient` does the same with tokens kept between calls; `client.hub` is the lower-level
 * `HubClient` (revision lookup, tree pages, HEAD of a file). It speaks only the protocol (the
 * hub's Hugging-Face-compatible routes, its token operation and the CAS API), so it works
 * against any Xet-compatible hub, and imports nothing of castor but the pure format layer.
 */
import type { Writable } from "node:stream";
import { CasClient } from "./cas.js";
import { DownloadRun, type ByteRangeRequest, type DownloadResult, type DownloadRunOptions } from "./download.js";
import { CastorClientError } from "./errors.js";
import { HttpClient, type FetchFunction, type RetryPolicy } from "./http.js";
import { HubClient, type CommitRequest, type CommitResult, type FileStorage, type RepoFileEntry, type RepoFileInfo } from "./hub.js";
import type { ProgressListener } from "./progress.js";
import { commitMessageOf, commitOperationsFor, downloadInlineFile, expandDirectories, repoPathsFor } from "./repo-files.js";
import { TokenProvider, parseRepoRef, type RepoRef, type TokenAccess } from "./token.js";
import { StaleCacheError, UploadRun, type UploadedFile, type UploadResult, type UploadRunOptions } from "./upload.js";

export { CastorClientError, HttpStatusError, isClientError, type ClientErrorKind } from "./errors.js";
export { removePartialOutputsSync } from "./download-output.js";
export { formatBytes, ProgressRenderer, type ProgressEvent, type ProgressListener, type ProgressOutput } from "./progress.js";
export { parseRepoRef, formatRepoRef, type RepoRef } from "./token.js";
export {
  HubClient,
  HubStatusError,
  type CommitOperation,
  type CommitRequest,
  type CommitResult,
  type FileStorage,
  type RepoFileEntry,
  type RepoFileInfo,
  type RepoFolderEntry,
  type RepoTreeEntry,
} from "./hub.js";
export { commitMessageOf, commitOperationsFor, expandDirectories, repoPathsFor } from "./repo-files.js";
export { repoPathProblem } from "../format/repo.js";
export type { RepoType } from "../format/repo.js";
export type { UploadResult, UploadedFile, UploadRunOptions } from "./upload.js";
export { DEFAULT_CACHE_MAX_BYTES, defaultCacheDir } from "./shard-cache.js";
export type { ByteRangeRequest, DownloadResult, DownloadRunOptions } from "./download.js";
export type { FetchFunction, RetryPolicy } from "./http.js";

export const DEFAULT_ENDPOINT = "http://127.0.0.1:8080";

export interface ClientOptions {
  /** castor's base URL (the hub operation); CAS calls go to the `casUrl` it hands out. */
  endpoint: string;
  /** A hub token (`hf_…`), as `castor token create` prints it. */
  hubToken: string;
  /** `TYPE:NAMESPACE/NAME`, e.g. `model:alice/bert`. */
  repo: string;
  /** Branch, tag or commit; default `main`. */
  revision?: string;
  /** For tests and proxies: the fetch implementation. */
  fetch?: FetchFunction;
  /** For tests: the clock, milliseconds since the epoch. */
  now?: () => number;
  retry?: Partial<RetryPolicy>;
  /** Seconds before expiry at which tokens are renewed; default 30 (xet-core). */
  refreshMarginSeconds?: number;
}

export class CastorClient {
  readonly repo: RepoRef;
  readonly revision: string;
  private readonly http: HttpClient;
  private readonly cas = new Map<TokenAccess, CasClient>();
  private hubClient: HubClient | null = null;

  constructor(private readonly options: ClientOptions) {
    this.repo = parseRepoRef(options.repo);
    this.revision = options.revision ?? "main";
    if (this.revision === "") throw new CastorClientError("usage", "the revision is empty; omit it for main");
    checkEndpoint(options.endpoint);
    if (typeof options.hubToken !== "string" || options.hubToken.trim() === "") {
      throw new CastorClientError("usage", "a hub token is required (castor token create prints one; pass it as --hub-token or CASTOR_HUB_TOKEN)");
    }
    this.http = new HttpClient({ fetch: options.fetch, retry: options.retry });
  }

  /** Uploads files and registers them in the repository; see upload.ts. */
  async upload(files: readonly string[], options: UploadRunOptions = {}): Promise<UploadResult> {
    const cas = this.casFor("write");
    try {
      return await new UploadRun(cas, options).run(files);
    } catch (error) {
      if (!(error instanceof StaleCacheError)) throw error;
      // The server lost xorbs the cache named (e.g. castor gc): forget this server's cache
      // and upload again; what the first attempt stored is found by global dedup or resent.
      await error.cache.clear();
      const result = await new UploadRun(cas, options).run(files);
      result.cache.retriedAfterStale = true;
      result.xorbs.bytesSent += error.bytesSent;
      return result;
    }
  }

  /** Downloads a file (or a byte range of it) by hash; see download.ts. */
  download(options: DownloadRunOptions): Promise<DownloadResult> {
    return new DownloadRun(this.casFor("read"), options).run();
  }

  /** The hub's repository routes for this client's repository (commits, listings, file lookups). */
  get hub(): HubClient {
    this.hubClient ??= new HubClient({ endpoint: this.options.endpoint, hubToken: this.options.hubToken, repo: this.repo, http: this.http });
    return this.hubClient;
  }

  /** Applies one commit to the client's revision, which must be a branch; see hub.ts. */
  commit(request: CommitRequest): Promise<CommitResult> {
    return this.hub.commit(this.revision, request);
  }

  /**
   * Applies the commit unless it would change nothing on the client's branch (every file
   * already at its path: `HubClient.unchangedHead`); then no commit is made and `commit` is the
   * branch's head, which holds the files (`committed: false`). A `parentCommit` other than the
   * head is sent, for the hub to refuse.
   */
  async commitChanges(request: CommitRequest): Promise<{ commit: CommitResult; committed: boolean }> {
    const head = await this.hub.unchangedHead(this.revision, request.operations);
    if (head !== null && (request.parentCommit === undefined || request.parentCommit === head)) {
      return { commit: { commitOid: head, commitUrl: this.hub.commitUrl(head) }, committed: false };
    }
    return { commit: await this.commit(request), committed: true };
  }

  /**
   * Uploads `files` through Xet, then commits them to the client's branch in one commit, at
   * the paths `repoPathsFor(files, options.pathInRepo)` gives: base names at the root by
   * default; one file: `pathInRepo` is its path (or its folder, ending with '/'); several: a
   * folder. Paths are checked before anything is read. Nothing is committed if the upload fails,
   * nor when the branch holds every file at its path already (`committed: false`; see `commitChanges`).
   */
  async uploadToRepo(files: readonly string[], options: RepoUploadRunOptions = {}): Promise<RepoUploadResult> {
    if (files.length === 0) throw new CastorClientError("usage", "no files to upload");
    const expanded = await expandDirectories(files);
    const paths = repoPathsFor(expanded.files, options.pathInRepo, expanded.names ?? undefined);
    const uploaded = await this.upload(expanded.files, options);
    const placed = uploaded.files.map((file, i) => ({ ...file, pathInRepo: paths[i] }));
    const { summary, description } = commitMessageOf(options.message, expanded.files.length);
    const { commit, committed } = await this.commitChanges({
      summary,
      description,
      parentCommit: options.parentCommit,
      operations: commitOperationsFor(placed),
    });
    return { ...uploaded, files: placed, commit, committed };
  }

  /** The files of the client's revision (recursively, below `path` if given), following every page. */
  listFiles(options: { path?: string } = {}): Promise<RepoFileEntry[]> {
    return this.hub.listFiles(this.revision, options);
  }

  /** What the hub says about the file at `path` in the client's revision (HEAD). */
  fileInfo(path: string): Promise<RepoFileInfo> {
    return this.hub.fileInfo(this.revision, path);
  }

  /**
   * Downloads the file at `path` in the client's revision: a Xet-stored file through the CAS
   * (verified against its file hash), an inline one by a plain GET (verified against its git
   * blob id). Nothing is written when the file does not exist (HubStatusError 404 EntryNotFound).
   */
  async downloadFile(options: FileDownloadRunOptions): Promise<FileDownloadResult> {
    const path = options.path.replace(/^(\.\/)+/, "").replace(/^\/+/, "");
    const info = await this.hub.fileInfo(this.revision, path);
    const base = { path, commit: info.commit, size: info.size, storage: info.storage, etag: info.etag };
    if (info.xetHash !== null) {
      const { path: _path, ...rest } = options;
      const result = await this.download({ ...rest, fileHash: info.xetHash, expectedSize: options.range === undefined ? info.size : undefined });
      return { ...base, fileHash: info.xetHash, bytesWritten: result.bytesWritten, verified: result.verified, resumedBytes: result.resumedBytes };
    }
    const result = await downloadInlineFile(this.hub, info, options);
    return { ...base, fileHash: null, resumedBytes: 0, ...result };
  }

  /** How many CAS tokens were requested from the hub so far, by access. */
  tokenRequests(access: TokenAccess): number {
    return this.cas.get(access)?.tokens.tokenRequests ?? 0;
  }

  private casFor(access: TokenAccess): CasClient {
    let cas = this.cas.get(access);
    if (cas === undefined) {
      const tokens = new TokenProvider({
        endpoint: this.options.endpoint,
        hubToken: this.options.hubToken,
        repo: this.repo,
        revision: this.revision,
        access,
        http: this.http,
        now: this.options.now,
        refreshMarginSeconds: this.options.refreshMarginSeconds,
      });
      cas = new CasClient(this.http, tokens);
      this.cas.set(access, cas);
    }
    return cas;
  }
}

function checkEndpoint(endpoint: string): void {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    throw new CastorClientError("usage", `the endpoint must be an http(s) URL such as ${DEFAULT_ENDPOINT}, got ${JSON.stringify(endpoint)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new CastorClientError("usage", `the endpoint must be an http(s) URL such as ${DEFAULT_ENDPOINT}, got ${JSON.stringify(endpoint)}`);
  }
}

export interface UploadOptions extends ClientOptions, UploadRunOptions {
  files: string[];
}

/** Uploads `files` to `repo`: per file its hash, size, SHA-256 and what deduplication saved. */
export function upload(options: UploadOptions): Promise<UploadResult> {
  return new CastorClient(options).upload(options.files, options);
}

export interface DownloadOptions extends ClientOptions, DownloadRunOptions {}

/** Downloads the file `fileHash` (or `range` of it) from `repo` into `output`. */
export function download(options: DownloadOptions): Promise<DownloadResult> {
  return new CastorClient(options).download(options);
}

export interface RepoUploadRunOptions extends UploadRunOptions {
  /** Where the files go in the repository; see `CastorClient.uploadToRepo`. */
  pathInRepo?: string;
  /** The commit message (first line: title); default "Upload N files with castor". */
  message?: string;
  /** Refuse the commit (412) if the branch is no longer at this commit. */
  parentCommit?: string;
}

export interface RepoUploadedFile extends UploadedFile {
  /** Where the file is in the repository. */
  pathInRepo: string;
}

export interface RepoUploadResult extends UploadResult {
  files: RepoUploadedFile[];
  /** The commit made, or (`committed: false`) the branch's head, which already held every file as uploaded. */
  commit: CommitResult;
  /** False when nothing changed: no commit was made, as `hf upload` makes none. */
  committed: boolean;
}

export interface FileDownloadRunOptions {
  /** The file's path in the repository. */
  path: string;
  /** A path (written through a temporary file) or a stream. */
  output: string | Writable;
  range?: ByteRangeRequest;
  onProgress?: ProgressListener;
  /** End a stream output when done (default true; false for stdout). */
  endOutput?: boolean;
  /** Xet-stored files: resume from a partial file an interrupted run left (default true). */
  resume?: boolean;
  /** Xet-stored files: see `DownloadRunOptions`. */
  windowBytes?: number;
  concurrency?: number;
  bufferBytes?: number;
}

export interface FileDownloadResult {
  path: string;
  /** The commit the revision resolved to. */
  commit: string;
  /** The file's size (the output may be a range of it). */
  size: number;
  storage: FileStorage;
  /** The ETag: SHA-256 of a Xet-stored file, git blob id of an inline one. */
  etag: string;
  /** Xet-stored files: the file hash. */
  fileHash: string | null;
  bytesWritten: number;
  /** Bytes kept from the partial file an interrupted run left (Xet-stored files, whole-file downloads). */
  resumedBytes: number;
  /**
   * `file-hash` (Xet, whole file) or `git-blob-id` (inline): the content checked out;
   * `chunks`: a range of a Xet-stored file, every chunk decoded to its declared size;
   * `size`: an inline file whose ETag is no git blob id, only its length was checked.
   */
  verified: "file-hash" | "git-blob-id" | "chunks" | "size";
}

export interface RepoUploadOptions extends ClientOptions, RepoUploadRunOptions {
  files: string[];
}

/** Uploads `files` to `repo` and commits them to `revision` (a branch, default main). */
export function uploadToRepo(options: RepoUploadOptions): Promise<RepoUploadResult> {
  return new CastorClient(options).uploadToRepo(options.files, options);
}

export interface FileDownloadOptions extends ClientOptions, FileDownloadRunOptions {}

/** Downloads the file at `path` of `repo` at `revision` (default main) into `output`. */
export function downloadFile(options: FileDownloadOptions): Promise<FileDownloadResult> {
  return new CastorClient(options).downloadFile(options);
}

export interface ListFilesOptions extends ClientOptions {
  /** Only the files below this folder. */
  path?: string;
}

/** The files of `repo` at `revision` (default main): path, size, storage (xet / inline), hashes. */
export function listFiles(options: ListFilesOptions): Promise<RepoFileEntry[]> {
  return new CastorClient(options).listFiles(options);
}
