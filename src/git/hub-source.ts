/**
 * The one place git meets the hub: a repository a caller may read or push to, seen as git
 * objects, through the hub's services (src/hub) like every other transport. Access and revisions
 * are the hub's to decide (`repos.find`, `repos.refs`); commits and trees are the hub's records
 * by id (`history.commit`, `history.tree`), whose ids are already git's; a blob is what
 * `files.gitBlob` reads: an inline file's bytes, or for a file stored through Xet the Git LFS
 * pointer the hub's tree ids were computed from; a push's ref updates are applied by
 * `pushes.apply`, with the rules of a Hub commit.
 */
import { buffer } from "node:stream/consumers";
import type { Caller } from "../hub/access.js";
import { notSupported } from "../hub/errors.js";
import type { Hub } from "../hub/index.js";
import type { Repo, TreeFileEntry } from "../hub/records.js";
import type { RepoAddress } from "../hub/repositories.js";
import type { GitCommit, GitObjectSource, GitPushTarget, GitRef, GitTree, PushObjects, PushCommand } from "./source.js";

/** The hub's services git calls. */
export type GitHub = Pick<Hub, "repos" | "history" | "files" | "pushes">;

const FILE_MODE = "100644";
const DIRECTORY_MODE = "40000";

/** Repositories as git sees them, for the callers the hub lets see or change them. */
export class HubGit {
  constructor(private readonly hub: GitHub) {}

  /** The repository at `address` as the caller may read it; HubError (401/404) otherwise. */
  async readable(caller: Caller, address: RepoAddress): Promise<HubGitSource> {
    const repo = await this.hub.repos.find(caller, address, "read");
    // A mirrored repository's snapshots are single commits, their history and files the upstream's.
    if (repo.mirror)
      throw notSupported("git clone and fetch of a mirrored repository", "download it through the Hub API (hf download), or clone it from the upstream hub");
    return new HubGitSource(this.hub, caller, repo);
  }

  /** The repository at `address` as the caller may push to it; HubError (401/403/404) otherwise. */
  async writable(caller: Caller, address: RepoAddress): Promise<HubGitSource> {
    return new HubGitSource(this.hub, caller, await this.hub.pushes.writable(caller, address));
  }
}

export class HubGitSource implements GitObjectSource, GitPushTarget {
  readonly head = "refs/heads/main";
  /** The file entries of the trees read so far, by blob id: how `blob()` finds a blob's content. */
  private readonly files = new Map<string, TreeFileEntry>();

  constructor(
    private readonly hub: GitHub,
    private readonly caller: Caller,
    readonly repo: Repo,
  ) {}

  push(commands: readonly PushCommand[], objects: PushObjects): Promise<(string | null)[]> {
    return this.hub.pushes.apply(this.caller, this.repo, commands, objects);
  }

  async refs(): Promise<GitRef[]> {
    const listing = await this.hub.repos.refs(this.repo);
    const refs = [
      ...listing.branches.map(({ name, commit }) => ({ name: `refs/heads/${name}`, oid: commit.oid })),
      ...listing.tags.map(({ name, commit }) => ({ name: `refs/tags/${name}`, oid: commit.oid })),
    ];
    // git lists refs in byte order of their names.
    return refs.sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name)));
  }

  async commit(oid: string): Promise<GitCommit | null> {
    const record = await this.hub.history.commit(this.repo, oid);
    if (record === null) return null;
    return {
      oid: record.oid,
      tree: record.treeOid,
      parents: record.parentOids,
      time: Math.floor(record.createdAt.getTime() / 1000),
      body: Buffer.from(record.object, "utf8"),
    };
  }

  async tree(oid: string): Promise<GitTree | null> {
    const record = await this.hub.history.tree(this.repo, oid);
    if (record === null) return null;
    return {
      oid: record.oid,
      entries: record.entries.map((entry) => {
        if (entry.type === "directory") return { mode: DIRECTORY_MODE, name: entry.name, oid: entry.oid };
        this.files.set(entry.oid, entry);
        return { mode: FILE_MODE, name: entry.name, oid: entry.oid, size: this.hub.files.gitBlob(entry).size };
      }),
    };
  }

  async blob(oid: string): Promise<Buffer | null> {
    const file = this.files.get(oid);
    if (file === undefined) return null;
    const blob = this.hub.files.gitBlob(file);
    if (blob.size === 0) return Buffer.alloc(0);
    const bytes = await blob.read(0, blob.size);
    return Buffer.isBuffer(bytes) ? bytes : buffer(bytes);
  }
}
