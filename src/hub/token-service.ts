/**
 * Hub tokens, for every transport: who a bearer secret stands for, creating, listing and
 * revoking tokens (administrators only: the operator's `castor token …`, or an admin token on
 * the web UI's routes), and the checks behind the token operation
 * (`GET /api/{type}s/{ns}/{name}/cas-{read|write}-token/{rev}`), which trades a hub token for a
 * CAS token of one repository.
 */
import { AlreadyExistsError, NotFoundError, type Access, type HubToken, type MetadataStore, type Repo, type RepoType } from "../metadata/store.js";
import { callerOf, requireAdmin, type Caller } from "./access.js";
import { HubError } from "./errors.js";
import { parseRepoRef, quote, repoNameProblem, repoTypeProblem, requireNamespace, revisionNameProblem } from "./names.js";
import type { RepositoryService } from "./repositories.js";
import { generateHubTokenId, generateHubTokenSecret, hashHubTokenSecret } from "./tokens.js";

export type TokenStore = Pick<MetadataStore, "createHubToken" | "findHubTokenBySecretHash" | "listHubTokens" | "revokeHubToken">;

export type TokenGrant = {
  ok: true;
  repo: Repo;
  /** The revision or commit id asked for. */
  revision: string;
  /** Public id of the hub token that was used (for the CAS token's subject and for logs). */
  hubTokenId: string;
};
/** 429, 502 and 504: a mirrored repository whose upstream limits castor, fails or does not answer. */
export type TokenDenial = { ok: false; status: 400 | 401 | 403 | 404 | 429 | 502 | 504; message: string };

export interface TokenRequest {
  /** The bearer value from `Authorization`, undefined when the header is absent. */
  hubToken: string | undefined;
  /** Singular: `model`, `dataset` or `space`. */
  repoType: string;
  /** `namespace/name`. */
  repoName: string;
  /** Already URL-decoded; may contain `/`. */
  revision: string;
  access: Access;
}

export interface CreateTokenOptions {
  /** `TYPE:NS/NAME` references, or "all" for every repository, present and future. */
  repos: string[] | "all";
  /** Namespaces covered wholly (repositories created there later included). */
  namespaces?: string[];
  /** The user the token acts for; null for none. */
  owner?: string | null;
  access: Access;
  /** null = never expires. */
  expiresAt: Date | null;
}

/** A token listing more repositories than this is almost certainly a mistake (and an unbounded write). */
export const MAX_REPOS_PER_TOKEN = 1000;
const ID_ATTEMPTS = 3;

export class TokenService {
  constructor(
    private readonly store: TokenStore,
    private readonly repos: Pick<RepositoryService, "find" | "resolve">,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** The caller a hub token secret stands for (undefined or empty: anonymous); HubError 401 for an unusable token. */
  authenticate(secret: string | undefined): Promise<Caller> {
    return callerOf(this.store, secret, this.now());
  }

  /**
   * Creates a hub token and returns its secret, which exists nowhere else afterwards. For
   * administrators only. HubError 400 for bad options (no repositories, bad access, expiry not
   * in the future), 404 for an unknown repository.
   */
  async create(caller: Caller, opts: CreateTokenOptions): Promise<{ secret: string; token: HubToken }> {
    requireAdmin(caller, "creating hub tokens");
    if (opts.access !== "read" && opts.access !== "write") {
      throw new HubError(400, `access must be read or write; got ${quote(String(opts.access))}`);
    }
    if (opts.expiresAt !== null) {
      if (!(opts.expiresAt instanceof Date) || Number.isNaN(opts.expiresAt.getTime())) {
        throw new HubError(400, "expiry must be a valid date");
      }
      if (opts.expiresAt.getTime() <= this.now().getTime()) {
        throw new HubError(400, `expiry ${opts.expiresAt.toISOString()} is not in the future`);
      }
    }
    const namespaces = [...new Set(opts.namespaces ?? [])].sort();
    for (const namespace of namespaces) requireNamespace(namespace);
    const owner = opts.owner ?? null;
    if (owner !== null) requireNamespace(owner, "user name");
    let repos: number[] | "all";
    if (opts.repos === "all") {
      repos = "all";
    } else {
      if (opts.repos.length === 0 && namespaces.length === 0)
        throw new HubError(400, "a token needs at least one repository or namespace (or all repositories)");
      if (opts.repos.length > MAX_REPOS_PER_TOKEN) {
        throw new HubError(400, `a token may list at most ${MAX_REPOS_PER_TOKEN} repositories; use all repositories instead`);
      }
      repos = [];
      for (const ref of opts.repos) repos.push((await this.repos.find(caller, parseRepoRef(ref))).id);
    }

    // A collision of 48-bit ids (or 256-bit secrets) is unlikely enough that a few retries settle it.
    for (let attempt = 1; ; attempt++) {
      const secret = generateHubTokenSecret();
      try {
        const token = await this.store.createHubToken({
          id: generateHubTokenId(),
          secretHash: hashHubTokenSecret(secret),
          access: opts.access,
          repos,
          expiresAt: opts.expiresAt,
          owner,
          namespaces,
        });
        return { secret, token };
      } catch (err) {
        if (err instanceof AlreadyExistsError && attempt < ID_ATTEMPTS) continue;
        if (err instanceof NotFoundError) throw new HubError(404, "a repository of this token was deleted while it was being created; try again");
        throw err;
      }
    }
  }

  /** Every hub token, revoked and expired ones included (never their secrets: they are not stored). For administrators. */
  async list(caller: Caller): Promise<HubToken[]> {
    requireAdmin(caller, "listing hub tokens");
    return this.store.listHubTokens();
  }

  /** false when no token has that id; revoking a revoked token is true and changes nothing. For administrators. */
  async revoke(caller: Caller, id: string): Promise<boolean> {
    requireAdmin(caller, "revoking hub tokens");
    return this.store.revokeHubToken(id);
  }

  /**
   * The token operation's checks, in the interface's order: 401 (hub token), 400 (names),
   * 404 (repository, or not readable by the caller, or revision), 403 (access). The revision
   * is resolved as every other route resolves one (RepositoryService.resolve: a branch, a tag,
   * a commit id or a prefix of one, `HEAD`); clients ask read tokens at commit ids. A public
   * repository grants read tokens to anonymous callers too.
   */
  async authorizeTokenRequest(req: TokenRequest): Promise<TokenGrant | TokenDenial> {
    let caller: Caller;
    try {
      caller = await this.authenticate(req.hubToken);
    } catch (err) {
      if (err instanceof HubError) return deny(401, err.message);
      throw err;
    }
    const problem =
      repoTypeProblem(req.repoType) ??
      repoNameProblem(req.repoName) ??
      revisionNameProblem(req.revision) ??
      (req.access === "read" || req.access === "write" ? null : `token type must be read or write; got ${quote(String(req.access))}`);
    if (problem !== null) {
      // No public repository has an invalid name: without a token, the missing token is the answer (the interface's 401 before 400).
      return caller.grant === null
        ? deny(401, "a hub token is required: send Authorization: Bearer hf_… with a token from `castor token create`")
        : deny(400, problem);
    }

    const wanted = { type: req.repoType as RepoType, name: req.repoName };
    try {
      // The interface's order: a repository or revision the caller cannot see (404) before access (403).
      const repo = await this.repos.find(caller, wanted);
      await this.repos.resolve(repo, req.revision);
      // Found again for writing: a mirrored repository is read-only (its 403 names the upstream).
      if (req.access === "write") await this.repos.find(caller, wanted, "write");
      return { ok: true, repo, revision: req.revision, hubTokenId: caller.token?.id ?? "anonymous" };
    } catch (err) {
      if (err instanceof HubError) return deny(err.status as TokenDenial["status"], err.message);
      throw err;
    }
  }
}

function deny(status: TokenDenial["status"], message: string): TokenDenial {
  return { ok: false, status, message };
}
