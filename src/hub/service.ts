/**
 * The hub: repositories, revisions, hub tokens, and the checks behind the token operation
 * (`GET /api/{type}s/{ns}/{name}/cas-{read|write}-token/{rev}`). Both the HTTP layer and the
 * admin commands call this; neither talks to the metadata store about hub things directly.
 */
import {
  AlreadyExistsError,
  NotFoundError,
  type Access,
  type HubToken,
  type MetadataStore,
  type Repo,
  type RepoType,
  type Revision,
  type RevisionKind,
} from "../metadata/store.js";
import { isGitOid } from "../format/git.js";
import { callerOf, requireReadable, requireWritable, type Caller } from "./access.js";
import { HubError } from "./errors.js";
import { initialCommit } from "./history.js";
import {
  formatRepoRef,
  parseRepoRef,
  quote,
  repoNameProblem,
  repoTypeProblem,
  requireRepoName,
  requireNamespace,
  requireRepoType,
  requireNewRevisionName,
  revisionNameProblem,
} from "./names.js";
import { generateHubTokenId, generateHubTokenSecret, hashHubTokenSecret } from "./tokens.js";

export { HubError } from "./errors.js";
export { parseRepoRef, formatRepoRef } from "./names.js";
export { parseExpires } from "./expires.js";

export type TokenGrant = {
  ok: true;
  repo: Repo;
  /** The revision or commit id asked for. */
  revision: string;
  /** Public id of the hub token that was used (for the CAS token's subject and for logs). */
  hubTokenId: string;
};
export type TokenDenial = { ok: false; status: 400 | 401 | 403 | 404; message: string };

/** Author of the commits made by admin commands rather than by a user's token. */
export const ADMIN_AUTHOR = "castor";

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

export class HubService {
  constructor(
    private readonly store: MetadataStore,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /**
   * HubError 400 for an invalid type or name, 409 when it exists. Creates the `main` branch
   * too, pointing at an initial commit by `author`. Private unless asked otherwise.
   */
  async createRepo(type: string, name: string, options: { private?: boolean; author?: string } = {}): Promise<Repo> {
    const repoType = requireRepoType(type);
    const repoName = requireRepoName(name);
    try {
      const { commit, tree } = initialCommit(options.author ?? ADMIN_AUTHOR, this.now());
      return await this.store.createRepo(repoType, repoName, { private: options.private ?? true, commit, tree });
    } catch (err) {
      if (err instanceof AlreadyExistsError) {
        throw new HubError(409, `repository ${formatRepoRef({ type: repoType, name: repoName })} already exists`);
      }
      throw err;
    }
  }

  listRepos(): Promise<Repo[]> {
    return this.store.listRepos();
  }

  /** HubError 400 for a bad reference, name or kind; 404 for an unknown repository; 409 when the name is taken. */
  async createRevision(repoRef: string, name: string, kind: RevisionKind): Promise<Revision> {
    const ref = parseRepoRef(repoRef);
    requireNewRevisionName(name);
    if (kind !== "branch" && kind !== "tag") throw new HubError(400, `revision kind must be branch or tag; got ${quote(String(kind))}`);
    const repo = await this.requireRepo(ref.type, ref.name);
    try {
      // A new revision starts at main's head, as `git branch NAME main` would.
      const main = await this.store.getRevision(repo.id, "main");
      return await this.store.createRevision(repo.id, name, kind, main?.commitOid ?? null);
    } catch (err) {
      if (err instanceof AlreadyExistsError) {
        throw new HubError(409, `revision ${quote(name)} already exists in ${formatRepoRef(repo)}`);
      }
      if (err instanceof NotFoundError) throw new HubError(404, `repository ${formatRepoRef(repo)} does not exist`);
      throw err;
    }
  }

  /**
   * Creates a hub token and returns its secret, which exists nowhere else afterwards.
   * HubError 400 for bad options (no repositories, bad access, expiry not in the future),
   * 404 for an unknown repository.
   */
  async createToken(opts: CreateTokenOptions): Promise<{ secret: string; token: HubToken }> {
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
      for (const ref of opts.repos) {
        const { type, name } = parseRepoRef(ref);
        repos.push((await this.requireRepo(type, name)).id);
      }
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

  listTokens(): Promise<HubToken[]> {
    return this.store.listHubTokens();
  }

  /** false when no token has that id; revoking a revoked token is true and changes nothing. */
  revokeToken(id: string): Promise<boolean> {
    return this.store.revokeHubToken(id);
  }

  /**
   * The token operation's checks, in the interface's order: 401 (hub token), 400 (names),
   * 404 (repository, or not readable by the caller, or revision), 403 (access). The revision
   * is a branch, a tag or a commit id of the repository (clients ask read tokens at commit ids).
   * A public repository grants read tokens to anonymous callers too.
   */
  async authorizeTokenRequest(req: TokenRequest): Promise<TokenGrant | TokenDenial> {
    let caller: Caller;
    try {
      caller = await callerOf(this.store, req.hubToken, this.now());
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
      return caller.token === null
        ? deny(401, "a hub token is required: send Authorization: Bearer hf_… with a token from `castor token create`")
        : deny(400, problem);
    }

    const type = req.repoType as RepoType;
    const wanted = { type, name: req.repoName };
    try {
      // The interface's order: a repository or revision the caller cannot see (404) before access (403).
      const repo = requireReadable(caller, await this.store.getRepo(type, req.repoName), wanted);
      if (!(await this.findRevisionOrCommit(repo, req.revision))) {
        return deny(404, `revision ${quote(req.revision)} not found in ${formatRepoRef(wanted)}`);
      }
      if (req.access === "write") requireWritable(caller, repo, wanted);
      return { ok: true, repo, revision: req.revision, hubTokenId: caller.token?.id ?? "anonymous" };
    } catch (err) {
      if (err instanceof HubError) return deny(err.status as TokenDenial["status"], err.message);
      throw err;
    }
  }

  /** Whether `name` is a revision of the repository or one of its commit ids. */
  private async findRevisionOrCommit(repo: Repo, name: string): Promise<boolean> {
    if ((await this.store.getRevision(repo.id, name)) !== null) return true;
    return isGitOid(name) && (await this.store.getCommit(repo.id, name)) !== null;
  }

  private async requireRepo(type: RepoType, name: string): Promise<Repo> {
    const repo = await this.store.getRepo(type, name);
    if (repo === null) throw new HubError(404, `repository ${formatRepoRef({ type, name })} does not exist`);
    return repo;
  }
}

function deny(status: TokenDenial["status"], message: string): TokenDenial {
  return { ok: false, status, message };
}
