/**
 * CAS access tokens for the client: the hub's token operation
 * (`GET {endpoint}/api/{type}s/{ns}/{name}/xet-{read|write}-token/{revision}`, authorised by
 * the hub token) answers `{accessToken, exp, casUrl}`; `TokenProvider` keeps one and fetches a
 * new one shortly before it expires — 30 s ahead like xet-core, or half the token's lifetime
 * when that is shorter, so a server configured with very short tokens is not asked again on
 * every request. Concurrent callers share one refresh.
 *
 * Repository references are checked only for shape here (`TYPE:NS/NAME`); the hub applies its
 * full naming rules and answers 400/404 with its own message.
 */
import { REPO_TYPES, type RepoType } from "../format/repo.js";
import { CastorClientError } from "./errors.js";
import { type HttpClient, readJson } from "./http.js";

export interface RepoRef {
  type: RepoType;
  /** `namespace/name`. */
  name: string;
}

export type TokenAccess = "read" | "write";

/** What the hub hands out: a bearer token for the CAS at `casUrl` until `exp` (unix seconds). */
export interface CasCredentials {
  accessToken: string;
  /** Without a trailing slash. */
  casUrl: string;
  exp: number;
}

/** xet-core's refresh margin. */
export const DEFAULT_REFRESH_MARGIN_SECONDS = 30;
/** Clients may assume at most this many characters for `accessToken` and `casUrl` (docs/interface.md §8). */
const MAX_TOKEN_FIELD_CHARS = 64_000;
const MAX_TOKEN_RESPONSE_BYTES = 2 * MAX_TOKEN_FIELD_CHARS + 4096;
const NAME_PART = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** `"model:alice/bert"` → `{ type: "model", name: "alice/bert" }`; a `usage` error otherwise. */
export function parseRepoRef(text: string): RepoRef {
  const bad = (why: string) =>
    new CastorClientError("usage", `repository must be TYPE:NAMESPACE/NAME, e.g. model:alice/bert (${why}); got ${JSON.stringify(text.slice(0, 200))}`);
  const colon = text.indexOf(":");
  if (colon < 0) throw bad("no ':' after the type");
  const type = text.slice(0, colon);
  if (!(REPO_TYPES as readonly string[]).includes(type)) throw bad(`the type is one of ${REPO_TYPES.join(", ")}`);
  const name = text.slice(colon + 1);
  const parts = name.split("/");
  if (parts.length !== 2 || !parts.every((part) => NAME_PART.test(part))) {
    throw bad("the name is two parts of letters, digits, '.', '_' or '-' separated by one '/'");
  }
  return { type: type as RepoType, name };
}

export function formatRepoRef(repo: RepoRef): string {
  return `${repo.type}:${repo.name}`;
}

/** The token operation's URL; the revision is one path segment, so a '/' in it is encoded. */
export function tokenUrl(endpoint: string, repo: RepoRef, access: TokenAccess, revision: string): string {
  const [namespace, name] = repo.name.split("/");
  const base = endpoint.replace(/\/+$/, "");
  return `${base}/api/${repo.type}s/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/xet-${access}-token/${encodeURIComponent(revision)}`;
}

export interface TokenProviderOptions {
  /** The hub's base URL (castor serves the hub operation itself). */
  endpoint: string;
  /** null: ask without one (a public repository of a hub that hands out read tokens anonymously). */
  hubToken: string | null;
  repo: RepoRef;
  revision: string;
  access: TokenAccess;
  http: HttpClient;
  /** Milliseconds one request for a token may take (see `HttpRequest.timeoutMs`). */
  timeoutMs?: number;
  /** Milliseconds since the epoch; injectable for tests. */
  now?: () => number;
  refreshMarginSeconds?: number;
}

export class TokenProvider {
  private current: CasCredentials | null = null;
  /** Seconds before `exp` at which `current` is replaced. */
  private margin = 0;
  private refreshing: Promise<CasCredentials> | null = null;
  private fetches = 0;
  private readonly now: () => number;
  private readonly marginLimit: number;

  constructor(private readonly options: TokenProviderOptions) {
    this.now = options.now ?? Date.now;
    this.marginLimit = options.refreshMarginSeconds ?? DEFAULT_REFRESH_MARGIN_SECONDS;
    if (!(this.marginLimit >= 0)) throw new RangeError("refreshMarginSeconds must be ≥ 0");
  }

  /** How many times the hub was asked for a token. */
  get tokenRequests(): number {
    return this.fetches;
  }

  /** A token valid for at least the refresh margin, fetching a new one when needed. */
  async get(): Promise<CasCredentials> {
    const current = this.current;
    if (current !== null && current.exp - this.now() / 1000 > this.margin) return current;
    this.refreshing ??= this.fetchToken().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  /** Drops `stale` (e.g. after the CAS answered 401 to it) so the next `get` fetches anew. */
  invalidate(stale: CasCredentials): void {
    if (this.current === stale) this.current = null;
  }

  private async fetchToken(): Promise<CasCredentials> {
    const { endpoint, hubToken, repo, revision, access, http } = this.options;
    const what = `asking the hub at ${endpoint.replace(/\/+$/, "")} for a ${access} token for ${formatRepoRef(repo)} at revision ${JSON.stringify(revision)}`;
    this.fetches++;
    const response = await http.request({
      what,
      url: tokenUrl(endpoint, repo, access, revision),
      headers: hubToken === null ? {} : { authorization: `Bearer ${hubToken}` },
      timeoutMs: this.options.timeoutMs,
      hints: {
        401: "check the hub token given with --hub-token or CASTOR_HUB_TOKEN",
        403: `the hub token does not grant ${access} access to ${formatRepoRef(repo)}`,
        404: "check the repository and revision; an administrator creates them with 'castor repo create' and 'castor revision create'",
      },
    });
    const credentials = parseTokenResponse(await readJson(response, MAX_TOKEN_RESPONSE_BYTES, what), what);
    const lifetime = credentials.exp - this.now() / 1000;
    // A token that lives shorter than twice the margin is renewed at half its life instead.
    this.margin = Math.max(0, Math.min(this.marginLimit, lifetime / 2));
    this.current = credentials;
    return credentials;
  }
}

function parseTokenResponse(body: unknown, what: string): CasCredentials {
  const bad = (why: string) => new CastorClientError("protocol", `${what}: the answer is not a token response: ${why}`);
  if (body === null || typeof body !== "object") throw bad("not a JSON object");
  const { accessToken, exp, casUrl } = body as Record<string, unknown>;
  if (typeof accessToken !== "string" || accessToken.length === 0 || accessToken.length > MAX_TOKEN_FIELD_CHARS) {
    throw bad(`accessToken must be a string of 1..${MAX_TOKEN_FIELD_CHARS} characters`);
  }
  if (typeof exp !== "number" || !Number.isFinite(exp)) throw bad("exp must be a number (unix seconds)");
  if (typeof casUrl !== "string" || casUrl.length === 0 || casUrl.length > MAX_TOKEN_FIELD_CHARS) {
    throw bad(`casUrl must be a string of 1..${MAX_TOKEN_FIELD_CHARS} characters`);
  }
  let parsed: URL;
  try {
    parsed = new URL(casUrl);
  } catch {
    throw bad("casUrl is not a URL");
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw bad("casUrl must be an http(s) URL");
  return { accessToken, exp, casUrl: casUrl.replace(/\/+$/, "") };
}
