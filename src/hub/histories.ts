/**
 * Reading a repository's history: its commits back along first parents, the entries of its
 * trees, the files at paths, and the commit that last changed each. Starts from a repository and
 * a commit that `RepositoryService.find` and `resolve` gave (they decide who may read what), and
 * reads git objects by their ids, so the same calls serve the Hub API and a git transport. A
 * mirrored repository's snapshots are stored commits and trees too; its history back from a
 * commit and the last commit of each path are the upstream's (mirrored.ts).
 */
import { trimSlashes } from "../format/repo.js";
import type { CommitRecord, MetadataStore, Repo, TreeEntry, TreeFileEntry, TreeRecord } from "../metadata/store.js";
import { HubError } from "./errors.js";
import { lastCommits } from "./last-commits.js";
import type { MirroredRepositories } from "./mirrored.js";
import { quote } from "./names.js";
import { TreeReader } from "./paths.js";

export interface ListedEntry {
  path: string;
  entry: TreeEntry;
}

export type HistoryStore = Pick<MetadataStore, "getCommit" | "getTree">;

export class HistoryService {
  constructor(
    private readonly store: HistoryStore,
    /** The upstream hub castor mirrors, when it mirrors one. */
    private readonly mirror?: MirroredRepositories,
  ) {}

  /** A commit of the repository by its id; null when it has none of that id. */
  commit(repo: Repo, oid: string): Promise<CommitRecord | null> {
    return this.store.getCommit(repo.id, oid);
  }

  /** A tree of the repository by its id; null when it has none of that id. */
  tree(repo: Repo, oid: string): Promise<TreeRecord | null> {
    return this.store.getTree(repo.id, oid);
  }

  /** Up to `limit` commits from `start` back along first parents, after skipping `skip`. */
  async commitsFrom(repo: Repo, start: CommitRecord, skip: number, limit: number): Promise<{ commits: CommitRecord[]; more: boolean }> {
    if (repo.mirror && this.mirror !== undefined) return this.mirror.commitsFrom(repo, start, skip, limit);
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
    if (repo.mirror && this.mirror !== undefined) return this.mirror.lastCommits(repo, commit, paths);
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
}

export function entryNotFound(path: string, commit: CommitRecord): HubError {
  return new HubError(404, `${quote(path)} does not exist at commit ${commit.oid}`, "EntryNotFound", commit.oid);
}
