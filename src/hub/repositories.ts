/**
 * The hub as its HTTP clients see it: repositories a caller may read or write, their
 * revisions and commits, the files a commit holds, and new commits. Every method takes the
 * `Caller` and enforces what it may do (access.ts); the HTTP layer only translates.
 */
import { isGitOid } from "../format/git.js";
import { hashFromHex } from "../format/hash.js";
import { trimSlashes } from "../format/repo.js";
import {
  AlreadyExistsError,
  type CommitRecord,
  type MetadataStore,
  type Repo,
  type RepoType,
  type Revision,
  type TreeEntry,
  type TreeFileEntry,
} from "../metadata/store.js";
import { callerOf, canRead, namespaceOf, repoNotFound, requireReadable, requireWritable, type Caller } from "./access.js";
import { HubError } from "./errors.js";
import { HistoryWriter, initialCommit, type CommitOperation } from "./history.js";
import { formatRepoRef, quote, requireNamespace, requireNewRevisionName, requireRepoName, requireRepoType } from "./names.js";
import { lastCommits } from "./last-commits.js";
import { requireNewPath, TreeReader } from "./paths.js";
import { isStoredWhole } from "./stored-files.js";
import { ADMIN_AUTHOR } from "./service.js";

/** A short commit id: 4 to 39 lowercase hex digits (git's shortest abbreviation is 4). */
const SHORT_COMMIT_ID = /^[0-9a-f]{4,39}$/;

export interface RepoAddress {
  type: RepoType;
  /** `namespace/name`. */
  name: string;
}

export interface HubOptions {
  /** Files of at least this many bytes are uploaded through Xet (`lfs`); smaller ones inline, unless binary. */
  inlineMaxBytes: number;
  now?: () => Date;
}

export interface PreuploadFile {
  path: string;
  size: number;
  /** The first (up to) 512 bytes. */
  sample: Uint8Array;
}

export interface PreuploadAnswer {
  path: string;
  uploadMode: "regular" | "lfs";
  /** The current file's id when it is stored the way this upload would store it (the client then skips it). */
  oid?: string;
}

export interface ListedEntry {
  path: string;
  entry: TreeEntry;
}

export interface RefsListing {
  branches: { name: string; commit: CommitRecord }[];
  tags: { name: string; commit: CommitRecord }[];
}

/** The user a caller acts as: the token's owner, or its namespace-less admin stand-in. */
export function authorOf(caller: Caller): string {
  return caller.token?.owner ?? ADMIN_AUTHOR;
}

export class HubRepositories {
  private readonly writer: HistoryWriter;
  private readonly now: () => Date;

  constructor(
    private readonly store: MetadataStore,
    private readonly options: HubOptions,
  ) {
    this.now = options.now ?? (() => new Date());
    this.writer = new HistoryWriter(store, this.now);
  }

  caller(secret: string | undefined): Promise<Caller> {
    return callerOf(this.store, secret, this.now());
  }

  // --- repositories -------------------------------------------------------------------------

  /**
   * `POST /api/repos/create`. `namespace` null means the caller's own (the token's owner).
   * 409 (with the repository, for the Hub's `url`) when it exists and the caller can see it.
   */
  async createRepo(caller: Caller, type: string, namespace: string | null, name: string, isPrivate: boolean | undefined): Promise<Repo> {
    const repoType = requireRepoType(type);
    if (caller.token === null) throw new HubError(401, "creating a repository needs a hub token (HF_TOKEN)");
    const ns = namespace ?? caller.token.owner;
    if (ns === null) {
      throw new HubError(400, `this hub token has no user, so ${quote(name)} has no namespace: name the repository namespace/name`);
    }
    const repoName = requireRepoName(`${requireNamespace(ns)}/${name}`);
    const existing = await this.store.getRepo(repoType, repoName);
    if (existing !== null && canRead(caller, existing)) {
      throw new RepoExistsError(existing);
    }
    const token = caller.token;
    const mayCreate = token.access === "write" && (token.repos === "all" || token.namespaces.includes(ns));
    if (!mayCreate || existing !== null) {
      throw new HubError(403, `this hub token may not create repositories in ${quote(ns)}: use a write token created with --namespace ${ns} (or --all-repos)`);
    }
    const { commit, tree } = initialCommit(authorOf(caller), this.now());
    try {
      return await this.store.createRepo(repoType, repoName, { private: isPrivate ?? true, commit, tree });
    } catch (err) {
      if (err instanceof AlreadyExistsError) {
        const raced = await this.store.getRepo(repoType, repoName);
        if (raced !== null) throw new RepoExistsError(raced);
      }
      throw err;
    }
  }

  async readable(caller: Caller, address: RepoAddress): Promise<Repo> {
    return requireReadable(caller, await this.store.getRepo(address.type, address.name), address);
  }

  /**
   * The repository a signed download link names (auth/download-link.ts). The link is the read
   * permission itself, checked when it was issued to a caller who could read the repository.
   */
  async linked(address: RepoAddress): Promise<Repo> {
    const repo = await this.store.getRepo(address.type, address.name);
    if (repo === null) throw new HubError(404, `repository ${formatRepoRef(address)} not found: it was deleted or renamed since this download link was made`);
    return repo;
  }

  async writable(caller: Caller, address: RepoAddress): Promise<Repo> {
    return requireWritable(caller, await this.store.getRepo(address.type, address.name), address);
  }

  async deleteRepo(caller: Caller, address: RepoAddress): Promise<void> {
    const repo = await this.writable(caller, address);
    await this.store.deleteRepo(repo.id);
  }

  async setPrivate(caller: Caller, address: RepoAddress, isPrivate: boolean): Promise<Repo> {
    const repo = await this.writable(caller, address);
    await this.store.setRepoPrivate(repo.id, isPrivate);
    return { ...repo, private: isPrivate };
  }

  /**
   * `POST /api/repos/move`: renames a repository the caller may write to `toName` (same type),
   * which must be in a namespace the caller may create repositories in. 409 when the name is
   * taken by a repository the caller can see (403 when it cannot, as for create); the old name
   * then answers like any missing repository.
   */
  async moveRepo(caller: Caller, from: RepoAddress, toName: string): Promise<Repo> {
    const repo = await this.writable(caller, from);
    const target = requireRepoName(toName);
    if (target === repo.name) throw new HubError(400, `${formatRepoRef(repo)} is already named ${quote(target)}`);
    const token = caller.token!;
    const ns = namespaceOf(target);
    if (!(token.repos === "all" || token.namespaces.includes(ns))) {
      throw new HubError(403, `this hub token may not move repositories into ${quote(ns)}: use a write token created with --namespace ${ns} (or --all-repos)`);
    }
    try {
      if (!(await this.store.renameRepo(repo.id, target))) throw repoNotFound(caller, from);
    } catch (err) {
      if (!(err instanceof AlreadyExistsError)) throw err;
      // The name is taken (the store refused the rename): 409 naming the holder when the caller can see it.
      const existing = await this.store.getRepo(repo.type, target);
      throw existing !== null && canRead(caller, existing)
        ? new RepoExistsError(existing)
        : new HubError(403, `this hub token may not move ${formatRepoRef(repo)} to ${quote(target)}`);
    }
    return { ...repo, name: target };
  }

  /**
   * The repositories of `type` the caller can read, optionally of one namespace or matching a
   * search text, in creation order: at most `limit` of those after the one with id `afterId`
   * (keyset paging, so creations and deletions between pages neither repeat nor skip any).
   */
  async listRepos(
    caller: Caller,
    type: RepoType,
    filter: { author?: string; search?: string; afterId?: number; limit: number },
  ): Promise<{ items: { repo: Repo; head: CommitRecord | null }[]; more: boolean }> {
    const search = filter.search?.toLowerCase();
    const repos = (await this.store.listRepos()).filter(
      (repo) =>
        repo.type === type &&
        (filter.afterId === undefined || repo.id > filter.afterId) &&
        canRead(caller, repo) &&
        (filter.author === undefined || namespaceOf(repo.name) === filter.author) &&
        (search === undefined || repo.name.toLowerCase().includes(search)),
    );
    const items = [];
    for (const repo of repos.slice(0, filter.limit)) {
      const main = await this.store.getRevision(repo.id, "main");
      items.push({ repo, head: main?.commitOid ? await this.store.getCommit(repo.id, main.commitOid) : null });
    }
    return { items, more: repos.length > filter.limit };
  }

  // --- revisions ----------------------------------------------------------------------------

  /**
   * The commit `revision` names: a branch, a tag or a commit id of the repository (all 40
   * digits, or an unambiguous prefix of at least 4, as git takes them), or `HEAD` (git's name for
   * the default branch, `main`, which `@huggingface/hub`'s modelInfo asks for; no branch or tag
   * may be created with that name, but one made before castor refused it still wins). 404
   * RevisionNotFound otherwise, also for an ambiguous prefix.
   */
  async resolve(repo: Repo, revision: string): Promise<{ commit: CommitRecord; revision: Revision | null }> {
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
    const listing: RefsListing = { branches: [], tags: [] };
    for (const revision of await this.store.listRevisions(repo.id)) {
      const commit = await this.headOf(repo, revision);
      (revision.kind === "branch" ? listing.branches : listing.tags).push({ name: revision.name, commit });
    }
    return listing;
  }

  /** A branch or tag at the commit `from` names (default: `main`'s head). */
  async createRevision(caller: Caller, address: RepoAddress, name: string, kind: "branch" | "tag", from: string | undefined): Promise<Revision> {
    const repo = await this.writable(caller, address);
    requireNewRevisionName(name);
    const { commit } = await this.resolve(repo, from ?? "main");
    try {
      return await this.store.createRevision(repo.id, name, kind, commit.oid);
    } catch (err) {
      if (err instanceof AlreadyExistsError) throw new HubError(409, `${quote(name)} already exists in ${formatRepoRef(repo)}`);
      throw err;
    }
  }

  async deleteRevision(caller: Caller, address: RepoAddress, name: string, kind: "branch" | "tag"): Promise<void> {
    const repo = await this.writable(caller, address);
    const revision = await this.store.getRevision(repo.id, name);
    if (revision === null || revision.kind !== kind) throw new HubError(404, `${kind} ${quote(name)} not found in ${formatRepoRef(repo)}`, "RevisionNotFound");
    if (name === "main") throw new HubError(400, "the main branch cannot be deleted");
    await this.store.deleteRevision(repo.id, name);
  }

  /** Up to `limit` commits from `start` back along first parents, after skipping `skip`. */
  async commitsFrom(repo: Repo, start: CommitRecord, skip: number, limit: number): Promise<{ commits: CommitRecord[]; more: boolean }> {
    const commits: CommitRecord[] = [];
    let current: CommitRecord | null = start;
    for (let index = 0; current !== null && commits.length <= limit; index++) {
      if (index >= skip) commits.push(current);
      const parent: string | undefined = current.parentOids[0];
      current = parent === undefined ? null : await this.store.getCommit(repo.id, parent);
    }
    const more = commits.length > limit;
    return { commits: commits.slice(0, limit), more };
  }

  // --- files --------------------------------------------------------------------------------

  /** The file at `path` in `commit`; 404 EntryNotFound when there is none. */
  async fileAt(repo: Repo, commit: CommitRecord, path: string): Promise<TreeFileEntry> {
    const file = await new TreeReader(this.store, repo.id).fileAt(commit.treeOid, path);
    if (file === null) throw entryNotFound(path, commit);
    return file;
  }

  /**
   * Entries below `path` (the root for ""), `offset` onwards, at most `limit`; 404 EntryNotFound
   * when `path` is not a folder. `more` says whether entries follow.
   */
  async listTree(
    repo: Repo,
    commit: CommitRecord,
    path: string,
    recursive: boolean,
    offset: number,
    limit: number,
  ): Promise<{ entries: ListedEntry[]; more: boolean }> {
    const reader = new TreeReader(this.store, repo.id);
    const folder = await reader.entryAt(commit.treeOid, path);
    if (folder === null || folder.type !== "directory") throw entryNotFound(path, commit);
    const entries: ListedEntry[] = [];
    let index = 0;
    for await (const listed of reader.walk(folder.oid, path, recursive)) {
      if (index++ < offset) continue;
      if (entries.length === limit) return { entries, more: true };
      entries.push(listed);
    }
    return { entries, more: false };
  }

  /** The entries at `paths` that exist (files or folders), in the order asked. */
  async pathsInfo(repo: Repo, commit: CommitRecord, paths: string[]): Promise<ListedEntry[]> {
    const reader = new TreeReader(this.store, repo.id);
    const out: ListedEntry[] = [];
    for (const path of paths) {
      const entry = await reader.entryAt(commit.treeOid, trimSlashes(path, { leading: true }));
      if (entry !== null && entry.name !== "") out.push({ path, entry: entry as TreeEntry });
    }
    return out;
  }

  /** The commit that last changed each path of `commit` (last-commits.ts: a bounded walk; unfound paths are absent). */
  lastCommits(repo: Repo, commit: CommitRecord, paths: string[]): Promise<Map<string, CommitRecord>> {
    return lastCommits(this.store, repo, commit, paths);
  }

  /** Every file of the commit (for repository info's `siblings`). */
  async allFiles(repo: Repo, commit: CommitRecord): Promise<{ path: string; entry: TreeFileEntry }[]> {
    const files: { path: string; entry: TreeFileEntry }[] = [];
    for await (const { path, entry } of new TreeReader(this.store, repo.id).walk(commit.treeOid, "", true)) {
      if (entry.type === "file") files.push({ path, entry });
    }
    return files;
  }

  // --- writing ------------------------------------------------------------------------------

  /**
   * Which files travel inline and which through Xet: Xet for non-empty files of at least
   * `inlineMaxBytes` or with a NUL byte in their first 512 bytes (binary), inline otherwise.
   */
  async preupload(repo: Repo, commit: CommitRecord, files: PreuploadFile[]): Promise<PreuploadAnswer[]> {
    const reader = new TreeReader(this.store, repo.id);
    const answers: PreuploadAnswer[] = [];
    for (const file of files) {
      const lfs = file.size > 0 && (file.size >= this.options.inlineMaxBytes || file.sample.includes(0));
      requireNewPath(file.path);
      const current = await reader.fileAt(commit.treeOid, file.path);
      const answer: PreuploadAnswer = { path: file.path, uploadMode: lfs ? "lfs" : "regular" };
      // The client skips a file whose oid matches its own: only say it when it is exactly that id.
      if (current !== null && (current.xetHash !== null) === lfs && (await this.isWhole(current))) answer.oid = lfs ? current.sha256 : current.oid;
      answers.push(answer);
    }
    return answers;
  }

  /** Whether a tree entry's content can still be served (a Xet file whose xorbs are all recorded). */
  private async isWhole(entry: TreeFileEntry): Promise<boolean> {
    if (entry.xetHash === null) return true;
    const file = await this.store.getFile(hashFromHex(entry.xetHash));
    return file !== null && (await isStoredWhole(this.store, file));
  }

  /**
   * Applies a commit to `branch` of a repository the caller may write. `storeContents` writes the
   * inline files' bytes; it runs only once the commit is known to apply (see CommitRequest).
   */
  async commit(
    caller: Caller,
    address: RepoAddress,
    branch: string,
    header: { summary: string; description: string; parentCommit?: string },
    operations: CommitOperation[],
    storeContents?: () => Promise<void>,
  ): Promise<CommitRecord> {
    const repo = await this.writable(caller, address);
    if (isGitOid(branch) && (await this.store.getRevision(repo.id, branch)) === null) {
      throw new HubError(400, `commits go to a branch, not to the commit id ${branch}`);
    }
    if (header.summary.trim() === "") throw new HubError(400, "the commit summary is empty");
    return this.writer.commit({ repo, branch, ...header, author: authorOf(caller), operations, storeContents });
  }

  /** Squashes `branch` of a repository the caller may write to one commit (see HistoryWriter.squash). */
  async squash(caller: Caller, address: RepoAddress, branch: string, message: string | undefined): Promise<CommitRecord> {
    const repo = await this.writable(caller, address);
    const text = message?.trim() || `Super-squash branch '${branch}'`;
    return this.writer.squash(repo, branch, text, authorOf(caller));
  }
}

/** `createRepo` found the repository already there (the Hub answers 409 with its URL). */
export class RepoExistsError extends HubError {
  constructor(readonly repo: Repo) {
    super(409, `repository ${formatRepoRef(repo)} already exists`);
  }
}

export function entryNotFound(path: string, commit: CommitRecord): HubError {
  return new HubError(404, `${quote(path)} does not exist at commit ${commit.oid}`, "EntryNotFound", commit.oid);
}
