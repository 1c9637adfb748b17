/**
 * castor's own client, exported as `castor/client`:
 *
 *     import { upload, download } from "castor/client";
 *     const { files } = await upload({ endpoint, hubToken, repo: "model:alice/bert", files: ["a.bin"] });
 *     await download({ endpoint, hubToken, repo: "model:alice/bert", fileHash: files[0].fileHash, output: "copy.bin" });
 *
 * `CastorClient` does the same with tokens kept between calls. It speaks only the protocol
 * (the hub's token operation and the CAS API), so it works against any Xet-compatible server,
 * and imports nothing of castor but the pure format layer.
 */
import { CasClient } from "./cas.js";
import { DownloadRun, type DownloadResult, type DownloadRunOptions } from "./download.js";
import { CastorClientError } from "./errors.js";
import { HttpClient, type FetchFunction, type RetryPolicy } from "./http.js";
import { TokenProvider, parseRepoRef, type RepoRef, type TokenAccess } from "./token.js";
import { UploadRun, type UploadResult, type UploadRunOptions } from "./upload.js";

export { CastorClientError, HttpStatusError, isClientError, type ClientErrorKind } from "./errors.js";
export { formatBytes, ProgressRenderer, type ProgressEvent, type ProgressListener, type ProgressOutput } from "./progress.js";
export { parseRepoRef, formatRepoRef, type RepoRef } from "./token.js";
export type { RepoType } from "../format/repo.js";
export type { UploadResult, UploadedFile, UploadRunOptions } from "./upload.js";
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
  upload(files: readonly string[], options: UploadRunOptions = {}): Promise<UploadResult> {
    return new UploadRun(this.casFor("write"), options).run(files);
  }

  /** Downloads a file (or a byte range of it) by hash; see download.ts. */
  download(options: DownloadRunOptions): Promise<DownloadResult> {
    return new DownloadRun(this.casFor("read"), options).run();
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
