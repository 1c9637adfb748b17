/**
 * Who is calling and what they may do. Every hub request starts by turning its
 * `Authorization` header into a `Caller`: anonymous (no header), or a usable hub token (an
 * unknown, revoked or expired token is refused outright, never downgraded to anonymous, so a
 * user with a stale `HF_TOKEN` learns it at once).
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

export interface Caller {
  /** null: no `Authorization` header. */
  token: HubToken | null;
}

export const ANONYMOUS: Caller = { token: null };

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
  return { token };
}

export function namespaceOf(repoName: string): string {
  return repoName.slice(0, repoName.indexOf("/"));
}

export function covers(token: HubToken, repo: Pick<Repo, "id" | "name">): boolean {
  return token.repos === "all" || token.repos.includes(repo.id) || token.namespaces.includes(namespaceOf(repo.name));
}

export function canRead(caller: Caller, repo: Repo): boolean {
  return !repo.private || (caller.token !== null && covers(caller.token, repo));
}

/** The error for a repository that is missing or that the caller may not read. */
export function repoNotFound(caller: Caller, repo: Pick<Repo, "type" | "name">): HubError {
  const ref = formatRepoRef(repo);
  // Anonymous callers get 401, as on the Hub: "send a token" is the useful hint for them.
  return caller.token === null
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

/** HubError unless the caller may write to `repo`: 401 anonymous, 404 unseen, 403 read-only. */
export function requireWritable(caller: Caller, repo: Repo | null, wanted: Pick<Repo, "type" | "name">): Repo {
  if (caller.token === null)
    throw new HubError(
      401,
      "a hub token is required to write: send Authorization: Bearer hf_… (HF_TOKEN) with a write token from `castor token create --access write`",
    );
  const token = caller.token;
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
export function isAdminToken(token: HubToken): boolean {
  return token.repos === "all" && token.access === "write";
}

/** HubError unless the caller holds an admin token: 401 anonymous, 403 any other token. */
export function requireAdmin(caller: Caller, what: string): void {
  const hint = "a hub token with write access to all repositories (castor token create --all-repos --access write)";
  if (caller.token === null) throw new HubError(401, `${what} needs ${hint}: send Authorization: Bearer hf_…`);
  if (!isAdminToken(caller.token)) throw new HubError(403, `${what} needs ${hint}; this token is not one`);
}
