/**
 * Repositories and their refs, for every transport: which repositories exist and who may see or
 * change them, their branches and tags, and what a revision names. Every method takes the
 * `Caller` and enforces what it may do (access.ts), so the HTTP routes, the admin commands (as the
 * operator) and the token operation follow one set of rules.
 *
 * `find` and `resolve` are where a repository and a revision are decided; the other services
 * start from what they return. A second source of repositories, the upstream hub castor mirrors
 * (mirrored.ts), answers there for names this store does not hold and for the mirrored
 * repositories it holds: read-only, read under the mirror's rules, their refs the upstream's.
 * Local names win.
 */
import { isGitOid } from "../format/git.js";
import {
  AlreadyExistsError,
  NotFoundError,
  type CommitRecord,
  type MetadataStore,
  type Repo,
  type RepoType,
  type Revision,
  type RevisionKind,
} from "../metadata/store.js";
import {
  authorOf,
  canRead,
  mayCreateIn,
  namespaceOf,
  repoNotFound,
  requireReadable,
  requireToken,
  requireWritable,
  ADMIN_AUTHOR,
  type Caller,
} from "./access.js";
import { HubError } from "./errors.js";
import { initialCommit } from "./history.js";
import type { MirroredRepositories } from "./mirrored.js";
import { formatRepoRef, quote, requireNamespace, requireRepoName, requireRepoType, requireNewRevisionName } from "./names.js";

/** A short commit id: 4 to 39 lowercase hex digits (git's shortest abbreviation is 4). */
const SHORT_COMMIT_ID = /^[0-9a-f]{4,39}$/;

export interface RepoAddress {
  type: RepoType;
  /** `namespace/name`. */
  name: string;
}

/** What a caller asks a repository for: reading it, or changing it. */
export type Intent = "read" | "write";

export interface RefsListing {
  branches: { name: string; commit: CommitRecord }[];
  tags: { name: string; commit: CommitRecord }[];
}

/** What `resolve` finds: the commit, and the branch or tag that named it (null for a commit id). */
export interface Resolved {
  commit: CommitRecord;
  revision: Revision | null;
}

export type RepositoryStore = Pick<
  MetadataStore,
  | "createRepo"
  | "getRepo"
  | "listRepos"
  | "deleteRepo"
  | "setRepoPrivate"
  | "renameRepo"
  | "createRevision"
  | "deleteRevision"
  | "getRevision"
  | "listRevisions"
  | "getCommit"
  | "commitOidsWithPrefix"
  | "advanceBranch"
>;

export class RepositoryService {
  constructor(
    private readonly store: RepositoryStore,
    private readonly now: () => Date = () => new Date(),
    /** The upstream hub castor mirrors (`CASTOR_UPSTREAM_URL`), when it mirrors one. */
    private readonly mirror?: MirroredRepositories,
  ) {}

  // --- repositories -------------------------------------------------------------------------

  /**
   * The repository at `address` if the caller may `read` (or `write`) it: 401/404 as for a
   * missing one when it may not see it, 403 when it may see but not change it. A name castor
   * does not hold may be the upstream's (looked up there the first time); a mirrored repository
   * is read-only (403 naming the upstream, for whoever may see it) and none at all once castor
   * mirrors no hub.
   */
  async find(caller: Caller, address: RepoAddress, intent: Intent = "read"): Promise<Repo> {
    const held = await this.store.getRepo(address.type, address.name);
    const repo = held ?? (await this.lookUpstream(caller, address));
    if (repo === null || !repo.mirror) return intent === "read" ? requireReadable(caller, repo, address) : requireWritable(caller, repo, address);
    if (!this.mayRead(caller, repo)) throw repoNotFound(caller, address);
    if (intent === "write") {
      // Anonymous callers learn first that writing needs a token, as for any repository.
      if (caller.grant === null) requireWritable(caller, repo, address);
      throw this.mirror?.readOnly(repo) ?? new HubError(403, `${formatRepoRef(repo)} is a read-only mirror of another hub's repository`);
    }
    return repo;
  }

  private lookUpstream(caller: Caller, address: RepoAddress): Promise<Repo | null> {
    return this.mirror === undefined ? Promise.resolve(null) : this.mirror.lookup(caller, address.type, address.name);
  }

  /**
   * Whether the caller may read `repo`: under the mirror's rules for a mirrored one. Without the
   * mirror (castor mirrors no hub any more, or an admin command) only the operator sees the
   * mirrored repositories castor holds, e.g. to name one in a token.
   */
  private mayRead(caller: Caller, repo: Repo): boolean {
    if (!repo.mirror) return canRead(caller, repo);
    return this.mirror !== undefined ? this.mirror.canRead(caller, repo) : caller.kind === "operator";
  }

  /**
   * Creates a repository and its `main` branch (an empty initial commit by the caller's user).
   * `name` is `namespace/name`, or a bare name in the namespace of the caller's user (as
   * `POST /api/repos/create` without an organization). Private unless asked otherwise. 409
   * RepoExistsError (naming it) when it exists and the caller can see it; 403 when the caller may
   * not create repositories in the namespace.
   */
  async create(caller: Caller, type: string, name: string, options: { private?: boolean } = {}): Promise<Repo> {
    const repoType = requireRepoType(type);
    requireToken(caller, "creating a repository");
    let repoName = name;
    if (!name.includes("/")) {
      const owner = caller.grant.owner;
      if (owner === null) {
        throw new HubError(400, `this hub token has no user, so ${quote(name)} has no namespace: name the repository namespace/name`);
      }
      repoName = `${requireNamespace(owner)}/${name}`;
    }
    repoName = requireRepoName(repoName);
    const namespace = namespaceOf(repoName);
    let existing = await this.store.getRepo(repoType, repoName);
    if (existing?.mirror && mayCreateIn(caller, namespace)) {
      // Local names win: the mirrored repository of that name gives way (its content stays, evictable).
      await this.store.deleteRepo(existing.id);
      existing = null;
    }
    if (existing !== null && this.mayRead(caller, existing)) throw new RepoExistsError(existing);
    if (!mayCreateIn(caller, namespace) || existing !== null) {
      throw new HubError(
        403,
        `this hub token may not create repositories in ${quote(namespace)}: use a write token created with --namespace ${namespace} (or --all-repos)`,
      );
    }
    const { commit, tree } = initialCommit(authorOf(caller), this.now());
    try {
      return await this.store.createRepo(repoType, repoName, { private: options.private ?? true, commit, tree });
    } catch (err) {
      if (err instanceof AlreadyExistsError) {
        const raced = await this.store.getRepo(repoType, repoName);
        if (raced !== null) throw new RepoExistsError(raced);
      }
      throw err;
    }
  }

  /**
   * The repository a signed URL names: a download link (auth/download-link.ts) or a Git LFS
   * action (auth/lfs-object-url.ts); the transport verifies the signature. The link is the
   * permission itself (to read, or for an LFS upload action to send that one object), checked
   * when it was issued to a caller who could: `find` for that caller, then.
   */
  async linked(address: RepoAddress): Promise<Repo> {
    const repo = await this.store.getRepo(address.type, address.name);
    if (repo === null || (repo.mirror && this.mirror === undefined)) {
      throw new HubError(404, `repository ${formatRepoRef(address)} not found: it was deleted or renamed since this signed link was made`);
    }
    return repo;
  }

  async delete(caller: Caller, address: RepoAddress): Promise<void> {
    const repo = await this.find(caller, address, "write");
    await this.store.deleteRepo(repo.id);
  }

  async setPrivate(caller: Caller, address: RepoAddress, isPrivate: boolean): Promise<Repo> {
    const repo = await this.find(caller, address, "write");
    await this.store.setRepoPrivate(repo.id, isPrivate);
    return { ...repo, private: isPrivate };
  }

  /**
   * Renames a repository the caller may write to `toName` (same type), which must be in a
   * namespace the caller may create repositories in. 409 when the name is taken by a repository
   * the caller can see (403 when it cannot, as for create); the old name then answers like any
   * missing repository.
   */
  async move(caller: Caller, from: RepoAddress, toName: string): Promise<Repo> {
    const repo = await this.find(caller, from, "write");
    const target = requireRepoName(toName);
    if (target === repo.name) throw new HubError(400, `${formatRepoRef(repo)} is already named ${quote(target)}`);
    const namespace = namespaceOf(target);
    if (!mayCreateIn(caller, namespace)) {
      throw new HubError(
        403,
        `this hub token may not move repositories into ${quote(namespace)}: use a write token created with --namespace ${namespace} (or --all-repos)`,
      );
    }
    // Local names win over mirrored ones here too.
    const mirrored = await this.store.getRepo(repo.type, target);
    if (mirrored?.mirror) await this.store.deleteRepo(mirrored.id);
    try {
      if (!(await this.store.renameRepo(repo.id, target))) throw repoNotFound(caller, from);
    } catch (err) {
      if (!(err instanceof AlreadyExistsError)) throw err;
      // The name is taken (the store refused the rename): 409 naming the holder when the caller can see it.
      const existing = await this.store.getRepo(repo.type, target);
      throw existing !== null && this.mayRead(caller, existing)
        ? new RepoExistsError(existing)
        : new HubError(403, `this hub token may not move ${formatRepoRef(repo)} to ${quote(target)}`);
    }
    return { ...repo, name: target };
  }

  /**
   * The repositories the caller can read (of `type`, one namespace, or matching a search text
   * when given), in creation order: at most `limit` of those after the one with id `afterId`
   * (keyset paging, so creations and deletions between pages neither repeat nor skip any).
   */
  async list(
    caller: Caller,
    filter: { type?: RepoType; author?: string; search?: string; afterId?: number; limit?: number } = {},
  ): Promise<{ repos: Repo[]; more: boolean }> {
    const search = filter.search?.toLowerCase();
    const repos = (await this.store.listRepos()).filter(
      (repo) =>
        (filter.type === undefined || repo.type === filter.type) &&
        (filter.afterId === undefined || repo.id > filter.afterId) &&
        this.mayRead(caller, repo) &&
        (filter.author === undefined || namespaceOf(repo.name) === filter.author) &&
        (search === undefined || repo.name.toLowerCase().includes(search)),
    );
    const limit = filter.limit ?? repos.length;
    return { repos: repos.slice(0, limit), more: repos.length > limit };
  }

  /**
   * The commit `main` points at (null for a legacy repository whose main has none yet); for a
   * mirrored repository, what the upstream said last (listings never ask it).
   */
  async mainHead(repo: Repo): Promise<CommitRecord | null> {
    if (repo.mirror && this.mirror !== undefined) return this.mirror.listedHead(repo);
    const main = await this.store.getRevision(repo.id, "main");
    return main?.commitOid ? this.store.getCommit(repo.id, main.commitOid) : null;
  }

  // --- refs ---------------------------------------------------------------------------------

  /**
   * The commit `revision` names: a branch, a tag or a commit id of the repository (all 40
   * digits, or an unambiguous prefix of at least 4, as git takes them), or `HEAD` (git's name for
   * the default branch, `main`, which `@huggingface/hub`'s modelInfo asks for; no branch or tag
   * may be created with that name, but one made before castor refused it still wins). 404
   * RevisionNotFound otherwise, also for an ambiguous prefix.
   */
  async resolve(repo: Repo, revision: string): Promise<Resolved> {
    // A mirrored repository's revisions are the upstream's (mirror/source.ts: asked again once CASTOR_UPSTREAM_REFRESH passed).
    if (repo.mirror && this.mirror !== undefined) return { commit: await this.mirror.resolve(repo, revision), revision: null };
    const named = (await this.store.getRevision(repo.id, revision)) ?? (revision === "HEAD" ? await this.store.getRevision(repo.id, "main") : null);
    if (named !== null) return { commit: await this.headOf(repo, named), revision: named };
    if (isGitOid(revision)) {
      const commit = await this.store.getCommit(repo.id, revision);
      if (commit !== null) return { commit, revision: null };
    } else if (SHORT_COMMIT_ID.test(revision)) {
      const oids = await this.store.commitOidsWithPrefix(repo.id, revision, 2);
      if (oids.length > 1) {
        throw new HubError(
          404,
          `revision ${quote(revision)} is ambiguous in ${formatRepoRef(repo)}: several commit ids start with it; give more digits`,
          "RevisionNotFound",
        );
      }
      const commit = oids.length === 1 ? await this.store.getCommit(repo.id, oids[0]) : null;
      if (commit !== null) return { commit, revision: null };
    }
    throw new HubError(404, `revision ${quote(revision)} not found in ${formatRepoRef(repo)}`, "RevisionNotFound");
  }

  /**
   * The commit a revision points at. Branches made before castor kept histories point at none:
   * they get the initial commit here, once (a concurrent caller's identical write wins the race).
   */
  private async headOf(repo: Repo, revision: Revision): Promise<CommitRecord> {
    for (;;) {
      if (revision.commitOid !== null) {
        const commit = await this.store.getCommit(repo.id, revision.commitOid);
        if (commit === null) throw new Error(`commit ${revision.commitOid} of ${formatRepoRef(repo)} is missing from the metadata store`);
        return commit;
      }
      const { commit, tree } = initialCommit(ADMIN_AUTHOR, repo.createdAt);
      await this.store.advanceBranch({ repoId: repo.id, branch: revision.name, expectedHead: null, commit, trees: [tree] });
      const again = await this.store.getRevision(repo.id, revision.name);
      if (again === null) throw new HubError(404, `revision ${quote(revision.name)} not found in ${formatRepoRef(repo)}`, "RevisionNotFound");
      revision = again;
    }
  }

  async refs(repo: Repo): Promise<RefsListing> {
    if (repo.mirror && this.mirror !== undefined) return this.mirror.refs(repo);
    const listing: RefsListing = { branches: [], tags: [] };
    for (const revision of await this.store.listRevisions(repo.id)) {
      const commit = await this.headOf(repo, revision);
      (revision.kind === "branch" ? listing.branches : listing.tags).push({ name: revision.name, commit });
    }
    return listing;
  }

  /**
   * A branch or tag at the commit `from` names (default: `main`'s head, as `git branch NAME`
   * would). 400 for a name git would refuse, `HEAD`, or one that looks like a commit id
   * (names.ts `requireNewRevisionName`: each would be read as something else); 409 when the
   * repository has a revision of that name.
   */
  async createRevision(caller: Caller, address: RepoAddress, name: string, kind: RevisionKind, from?: string): Promise<Revision> {
    if (kind !== "branch" && kind !== "tag") throw new HubError(400, `revision kind must be branch or tag; got ${quote(String(kind))}`);
    const repo = await this.find(caller, address, "write");
    requireNewRevisionName(name);
    const { commit } = await this.resolve(repo, from ?? "main");
    try {
      return await this.store.createRevision(repo.id, name, kind, commit.oid);
    } catch (err) {
      if (err instanceof AlreadyExistsError) throw new HubError(409, `${quote(name)} already exists in ${formatRepoRef(repo)}`);
      if (err instanceof NotFoundError) throw repoNotFound(caller, address);
      throw err;
    }
  }

  async deleteRevision(caller: Caller, address: RepoAddress, name: string, kind: RevisionKind): Promise<void> {
    const repo = await this.find(caller, address, "write");
    const revision = await this.store.getRevision(repo.id, name);
    if (revision === null || revision.kind !== kind) throw new HubError(404, `${kind} ${quote(name)} not found in ${formatRepoRef(repo)}`, "RevisionNotFound");
    if (name === "main") throw new HubError(400, "the main branch cannot be deleted");
    await this.store.deleteRevision(repo.id, name);
  }
}

/** `create` or `move` found the name taken by a repository the caller can see (the Hub answers 409 with its URL). */
export class RepoExistsError extends HubError {
  constructor(readonly repo: Repo) {
    super(409, `repository ${formatRepoRef(repo)} already exists`);
  }
}
