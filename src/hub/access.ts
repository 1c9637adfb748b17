/**
 * Who is calling and what they may do. Every call into the hub's services names its `Caller`:
 * anonymous (an HTTP request without `Authorization`), a usable hub token (an unknown, revoked or
 * expired token is refused outright, never downgraded to anonymous, so a user with a stale
 * `HF_TOKEN` learns it at once), or the operator — the admin commands working on the data dir,
 * which may do anything and write as `castor`. The mirror and git transports name theirs the
 * same way, so every rule below holds for every transport.
 *
 * A token covers a repository when it lists it, covers all repositories, or covers the
 * repository's namespace. Reading needs coverage or a public repository; writing needs
 * coverage and a write token. A repository the caller cannot read is reported exactly like a
 * missing one, so tokens cannot probe which private repositories exist.
 */
import type { HubToken, MetadataStore, Repo } from "../metadata/store.js";
import { HubError } from "./errors.js";
import { formatRepoRef } from "./names.js";
import { hashHubTokenSecret, hubTokenState, isPlausibleHubTokenSecret } from "./tokens.js";

/** What a caller may reach: a hub token's coverage and access, or the operator's (everything). */
export type Grant = Pick<HubToken, "access" | "repos" | "namespaces" | "owner">;

export type Caller =
  /** An HTTP request without `Authorization`. */
  | { kind: "anonymous"; token: null; grant: null }
  /** A request with a usable hub token: it may do what the token grants. */
  | { kind: "token"; token: HubToken; grant: Grant }
  /** The admin commands (`castor repo|revision|token …`) on the server's stores. */
  | { kind: "operator"; token: null; grant: Grant };

export const ANONYMOUS: Caller = { kind: "anonymous", token: null, grant: null };

/** The user the operator's commits are written by (and tokens without a user). */
export const ADMIN_AUTHOR = "castor";

export const OPERATOR: Caller = { kind: "operator", token: null, grant: { access: "write", repos: "all", namespaces: [], owner: null } };

export function tokenCaller(token: HubToken): Caller {
  return { kind: "token", token, grant: token };
}

/** The user a caller acts as: its token's owner, or `castor`. */
export function authorOf(caller: Caller): string {
  return caller.grant?.owner ?? ADMIN_AUTHOR;
}

/** 401 for a token that is present but not usable. */
export async function callerOf(store: Pick<MetadataStore, "findHubTokenBySecretHash">, secret: string | undefined, now: Date): Promise<Caller> {
  if (secret === undefined || secret === "") return ANONYMOUS;
  const token = isPlausibleHubTokenSecret(secret) ? await store.findHubTokenBySecretHash(hashHubTokenSecret(secret)) : null;
  // The holder of a revoked or expired token learns only what it could tell from its own token's history.
  const state = token === null ? "unknown" : hubTokenState(token, now);
  if (state !== "active") {
    const why =
      state === "revoked"
        ? "was revoked (castor token revoke)"
        : state === "expired"
          ? "has expired"
          : "is invalid or expired: this server does not know it (a token made with 'castor token create' on another data dir is unknown here)";
    throw new HubError(401, `the hub token ${why}: create a new one with \`castor token create\` on this server's data dir`);
  }
  return tokenCaller(token!);
}

export function namespaceOf(repoName: string): string {
  return repoName.slice(0, repoName.indexOf("/"));
}

export function covers(grant: Grant, repo: Pick<Repo, "id" | "name">): boolean {
  return grant.repos === "all" || grant.repos.includes(repo.id) || grant.namespaces.includes(namespaceOf(repo.name));
}

export function canRead(caller: Caller, repo: Repo): boolean {
  return !repo.private || (caller.grant !== null && covers(caller.grant, repo));
}

/** Whether the caller may create repositories in `namespace` (a write grant for all repositories or for that namespace). */
export function mayCreateIn(caller: Caller, namespace: string): boolean {
  const grant = caller.grant;
  return grant !== null && grant.access === "write" && (grant.repos === "all" || grant.namespaces.includes(namespace));
}

/** The error for a repository that is missing or that the caller may not read. */
export function repoNotFound(caller: Caller, repo: Pick<Repo, "type" | "name">): HubError {
  const ref = formatRepoRef(repo);
  // The operator sees every repository: a missing one simply does not exist.
  if (caller.kind === "operator") return new HubError(404, `repository ${ref} does not exist`, "RepoNotFound");
  // Anonymous callers get 401, as on the Hub: "send a token" is the useful hint for them.
  return caller.grant === null
    ? new HubError(
        401,
        `a hub token is required: repository ${ref} is private or does not exist; send Authorization: Bearer hf_… (HF_TOKEN) with a token that covers it`,
        "RepoNotFound",
      )
    : new HubError(404, `repository ${ref} not found (or this hub token does not cover it)`, "RepoNotFound");
}

/** HubError unless the caller may read `repo` (which may be null: missing). */
export function requireReadable(caller: Caller, repo: Repo | null, wanted: Pick<Repo, "type" | "name">): Repo {
  if (repo === null || !canRead(caller, repo)) throw repoNotFound(caller, wanted);
  return repo;
}

/** HubError 401 for an anonymous caller: `what` (e.g. "creating a repository") needs a hub token. */
export function requireToken(caller: Caller, what: string): asserts caller is Exclude<Caller, { kind: "anonymous" }> {
  if (caller.grant === null) throw new HubError(401, `${what} needs a hub token: send Authorization: Bearer hf_… (HF_TOKEN)`);
}

/** HubError unless the caller may write to `repo`: 401 anonymous, 404 unseen, 403 read-only. */
export function requireWritable(caller: Caller, repo: Repo | null, wanted: Pick<Repo, "type" | "name">): Repo {
  if (caller.grant === null)
    throw new HubError(
      401,
      "a hub token is required to write: send Authorization: Bearer hf_… (HF_TOKEN) with a write token from `castor token create --access write`",
    );
  const token = caller.grant;
  if (repo === null || !covers(token, repo)) {
    if (repo === null || repo.private) throw repoNotFound(caller, wanted);
    throw new HubError(
      403,
      `this hub token does not cover ${formatRepoRef(repo)}, which is public: anyone may read it, only covering write tokens may change it`,
    );
  }
  if (token.access !== "write") {
    throw new HubError(403, `this hub token is read-only: writing to ${formatRepoRef(repo)} needs a write token (castor token create --access write)`);
  }
  return repo;
}

/**
 * An admin token: write access to every repository (`castor token create --all-repos --access
 * write`), the one kind of token that may already change anything in the hub.
 */
export function isAdminToken(token: Grant): boolean {
  return token.repos === "all" && token.access === "write";
}

/** Whether the caller is an administrator: the operator, or a caller with an admin token. */
export function isAdmin(caller: Caller): boolean {
  return caller.grant !== null && isAdminToken(caller.grant);
}

/** HubError unless the caller is an administrator: 401 anonymous, 403 any other token. */
export function requireAdmin(caller: Caller, what: string): void {
  const hint = "a hub token with write access to all repositories (castor token create --all-repos --access write)";
  if (caller.grant === null) throw new HubError(401, `${what} needs ${hint}: send Authorization: Bearer hf_…`);
  if (!isAdmin(caller)) throw new HubError(403, `${what} needs ${hint}; this token is not one`);
}
