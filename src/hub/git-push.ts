/**
 * A git push, as the hub applies it: each ref update of the push becomes one compare-and-set
 * of the revision with the commits and trees it brings (`MetadataStore.updateRef`), under the
 * rules of every other way of writing a repository.
 *
 * - Who: a write token covering the repository (checked before the pack is read).
 * - Which refs: branches (`refs/heads/NAME`) and tags (`refs/tags/NAME`) with the hub's
 *   revision names; a branch and a tag cannot share a name, as in the Hub API.
 * - What: commits in UTF-8; trees of regular files (mode 100644) and folders, with paths the
 *   hub accepts, in git's canonical form (castor recomputes every tree id from what it stores,
 *   and a tree that does not come out the same is refused, so the ids castor serves are the
 *   pushed ones). A file is stored inline (up to the inline limit, which the pack reader holds
 *   objects to), or, when it is a Git LFS pointer to content the repository holds (uploaded by
 *   `git lfs push` through the LFS batch API), as that Xet file: its git id is the pointer's,
 *   as for every Xet file. Annotated tags, executable files, symbolic links and submodules
 *   have no place in castor's histories and are refused with what to do instead.
 * - How: `old` must be where the ref is (else "fetch first"); `main` moves only forward (a
 *   rewrite of its history is refused, as a Hub commit never rewrites it) and is never
 *   deleted; other branches and tags may be forced or deleted. A Hub commit racing the push
 *   either lands first (the push is then refused as stale) or rebases onto the pushed commit.
 */
import { gitTreeId, lfsPointer, parseCommitObject, parseTreeObject, GitObjectError, type PushCommand, type PushObjects } from "../format/git.js";
import { hashToHex, type Hash } from "../format/hash.js";
import type { CommitRecord, MetadataStore, Repo, RevisionKind, TreeEntry, TreeFileEntry, TreeRecord } from "../metadata/store.js";
import type { Caller } from "./access.js";
import { HubError } from "./errors.js";
import { xetFileEntry } from "./history.js";
import { TaskPool } from "../concurrency.js";
import { InlineBlobs } from "./inline-blobs.js";
import { newRevisionNameProblem, quote, revisionNameProblem } from "./names.js";
import { nameCollision, nameCollisionKey, requireNewPath } from "./paths.js";
import type { RepoAddress, RepositoryService } from "./repositories.js";
import { isStoredWhole } from "./stored-files.js";

export type PushStore = Pick<
  MetadataStore,
  "getCommit" | "getTree" | "getRevision" | "updateRef" | "findFileBySha256" | "getFile" | "xorbFootprints" | "leaseObjects"
>;

const LFS_POINTER = /^version https:\/\/git-lfs\.github\.com\/spec\/v1\noid sha256:([0-9a-f]{64})\nsize (\d{1,15})\n$/;
/** A pointer is ~130 bytes; git-lfs itself reads at most this many to recognise one. */
const MAX_POINTER_BYTES = 1024;

/** A push refused as a whole or for one ref: the message goes to the pusher. */
class Refusal extends Error {}

function refuse(message: string): never {
  throw new Refusal(message);
}

const MODE_ADVICE: Readonly<Record<string, string>> = {
  "100755": "is executable (mode 100755), which castor does not keep: run git update-index --chmod=-x on it and commit again",
  "120000": "is a symbolic link, which castor does not keep: commit the file it points to instead",
  "160000": "is a submodule, which castor does not keep: commit its files instead",
};

/** Inline files stored at once just before a ref moves (each a durable write of a few milliseconds). */
const WRITES_IN_FLIGHT = 32;

export class HubPushes {
  constructor(
    private readonly repos: Pick<RepositoryService, "find">,
    private readonly store: PushStore,
    private readonly inline: InlineBlobs,
    /** Most commits, trees and files one ref update may bring or walk (CASTOR_GIT_MAX_OBJECTS). */
    private readonly maxObjects: number,
  ) {}

  /** The repository a push may write: HubError 401/403/404 otherwise (checked before the pack is read). */
  writable(caller: Caller, address: RepoAddress): Promise<Repo> {
    return this.repos.find(caller, address, "write");
  }

  /**
   * Applies each command on its own to the repository at `address`, which the caller must still
   * be allowed to write; per command, null when applied or the reason it was refused.
   */
  async apply(caller: Caller, address: RepoAddress, commands: readonly PushCommand[], objects: PushObjects): Promise<(string | null)[]> {
    const repo = await this.writable(caller, address);
    const results: (string | null)[] = [];
    for (const command of commands) {
      try {
        await this.applyOne(repo, command, objects);
        results.push(null);
      } catch (error) {
        if (error instanceof Refusal || error instanceof HubError) results.push(error.message);
        else throw error;
      }
    }
    return results;
  }

  private async applyOne(repo: Repo, command: PushCommand, objects: PushObjects): Promise<void> {
    const { kind, name } = refOf(command.ref, command.old === null);
    const current = await this.store.getRevision(repo.id, name);
    if (current !== null && current.kind !== kind) refuse(`${quote(name)} is a ${current.kind} in castor, and branches and tags share their names there`);
    if ((current?.commitOid ?? null) !== command.old) {
      refuse(`${command.ref} is at ${current?.commitOid ?? "nothing"} now, not at ${command.old ?? "nothing"}: fetch first, then push again`);
    }
    if (command.new === null) {
      if (kind === "branch" && name === "main") refuse("the main branch cannot be deleted");
      await this.change(repo, { name, kind, expected: command.old, target: null, commits: [], trees: [] });
      return;
    }
    const history = await new HistoryImport(repo, this.store, objects, this.maxObjects).run(command.new);
    if (kind === "branch" && name === "main" && command.old !== null && !(await this.descends(repo, history.commits, command.new, command.old))) {
      refuse(
        "main moves only forward: this push rewrites its history (non-fast-forward), which castor refuses on main; merge or rebase onto it instead, or push to another branch",
      );
    }
    // Until the ref moves, only leases keep the Xet files named from a collection that marked before (src/metadata/gc.ts).
    if (history.xetFiles.length > 0) await this.store.leaseObjects("file", history.xetFiles);
    // The files stored inline reach the blob store only now, once the whole update checked out.
    await this.storeInline(history.inlineBlobs, objects);
    await this.change(repo, { name, kind, expected: command.old, target: command.new, commits: history.commits, trees: history.trees });
  }

  private async change(
    repo: Repo,
    change: { name: string; kind: RevisionKind; expected: string | null; target: string | null; commits: CommitRecord[]; trees: TreeRecord[] },
  ): Promise<void> {
    if ((await this.store.updateRef({ repoId: repo.id, ...change })) === "moved") {
      refuse(`${change.name} moved while the push was applied (a Hub commit or another push landed first): fetch, merge and push again`);
    }
  }

  /** Writes the pushed blobs that become inline files (leased, unless stored already). */
  private async storeInline(blobs: readonly string[], objects: PushObjects): Promise<void> {
    const pool = new TaskPool(WRITES_IN_FLIGHT);
    try {
      for (const oid of blobs) {
        await pool.submit(async () => {
          const object = await objects.get(oid);
          if (object === null) throw new Error(`the pushed blob ${oid} left the push's objects while it was applied`);
          await this.inline.write(object.data);
        });
      }
      await pool.drain();
    } finally {
      await pool.settle();
    }
  }

  /** Whether `ancestor` is reachable from `head` through the new commits and the repository's own. */
  private async descends(repo: Repo, pushed: readonly CommitRecord[], head: string, ancestor: string): Promise<boolean> {
    const known = new Map(pushed.map((commit) => [commit.oid, commit]));
    const seen = new Set<string>([head]);
    let frontier = [head];
    while (frontier.length > 0) {
      const next: string[] = [];
      for (const oid of frontier) {
        if (oid === ancestor) return true;
        if (seen.size > this.maxObjects) refuse(`cannot tell whether the push is a fast-forward within ${this.maxObjects} commits`);
        const commit = known.get(oid) ?? (await this.store.getCommit(repo.id, oid));
        for (const parent of commit?.parentOids ?? []) {
          if (seen.has(parent)) continue;
          seen.add(parent);
          next.push(parent);
        }
      }
      frontier = next;
    }
    return false;
  }
}

/** The revision a ref names; a ref being created must have a name a new revision may take. */
function refOf(ref: string, creating: boolean): { kind: RevisionKind; name: string } {
  const kind: RevisionKind | null = ref.startsWith("refs/heads/") ? "branch" : ref.startsWith("refs/tags/") ? "tag" : null;
  if (kind === null) refuse(`castor keeps branches (refs/heads/…) and tags (refs/tags/…) only, not ${ref}`);
  const name = ref.slice(kind === "branch" ? "refs/heads/".length : "refs/tags/".length);
  const problem = creating ? newRevisionNameProblem(name) : revisionNameProblem(name);
  if (problem !== null) refuse(problem);
  return { kind, name };
}

/**
 * The commits and trees one ref update brings, as castor's records: the pushed commits not yet
 * in the repository, their trees not yet in it, their files stored (inline) or found (Xet).
 */
class HistoryImport {
  private readonly commits = new Map<string, CommitRecord>();
  private readonly trees = new Map<string, TreeRecord>();
  /** Trees of the repository already seen to exist. */
  private readonly existingTrees = new Set<string>();
  /** File entries by blob id: those of trees read (the repository's or pushed), to name files the pack does not bring. */
  private readonly files = new Map<string, TreeFileEntry>();
  /** Root trees whose files are all in `files` already. */
  private readonly indexedRoots = new Set<string>();
  private readonly xetFiles: Hash[] = [];
  /** Pushed blobs that become inline files: stored once the update checked out. */
  private readonly inlineBlobs: string[] = [];
  private visited = 0;

  constructor(
    private readonly repo: Repo,
    private readonly store: PushStore,
    private readonly objects: PushObjects,
    private readonly maxObjects: number,
  ) {}

  async run(head: string): Promise<{ commits: CommitRecord[]; trees: TreeRecord[]; xetFiles: Hash[]; inlineBlobs: string[] }> {
    await this.collectCommits(head);
    // Oldest first, so that a commit's parents' trees are known when its own are converted.
    for (const commit of [...this.commits.values()].reverse()) await this.importTree(commit.treeOid, "", commit.parentOids);
    return { commits: [...this.commits.values()], trees: [...this.trees.values()], xetFiles: this.xetFiles, inlineBlobs: this.inlineBlobs };
  }

  private count(): void {
    if (++this.visited > this.maxObjects) refuse(`the push brings more than ${this.maxObjects} commits, trees and files (CASTOR_GIT_MAX_OBJECTS)`);
  }

  private async collectCommits(head: string): Promise<void> {
    const queue = [head];
    while (queue.length > 0) {
      const oid = queue.shift()!;
      if (this.commits.has(oid) || (await this.store.getCommit(this.repo.id, oid)) !== null) continue;
      this.count();
      const object = await this.objects.get(oid);
      if (object === null) refuse(`missing object: commit ${oid} is neither in the pack nor in the repository`);
      if (object.type === "tag") refuse(`annotated tags are not supported by castor: push a lightweight tag (git tag NAME, without -a, -m or -s)`);
      if (object.type !== "commit") refuse(`${oid} is a ${object.type}, not a commit`);
      const text = object.data.toString("utf8");
      if (!Buffer.from(text, "utf8").equals(object.data)) refuse(`commit ${oid} is not valid UTF-8, the only encoding castor keeps commits in`);
      let parsed: ReturnType<typeof parseCommitObject>;
      try {
        parsed = parseCommitObject(text);
      } catch (error) {
        if (error instanceof GitObjectError) refuse(`commit ${oid} is malformed: ${error.message}`);
        throw error;
      }
      if (parsed.encoding !== null && !/^utf-?8$/i.test(parsed.encoding))
        refuse(`commit ${oid} is in the ${parsed.encoding} encoding; castor keeps commits in UTF-8`);
      const newline = parsed.message.indexOf("\n");
      this.commits.set(oid, {
        oid,
        treeOid: parsed.tree,
        parentOids: parsed.parents,
        title: newline < 0 ? parsed.message : parsed.message.slice(0, newline),
        message: parsed.message,
        author: parsed.author.name,
        createdAt: new Date(parsed.committer.seconds * 1000),
        object: text,
      });
      queue.push(...parsed.parents);
    }
  }

  /** Converts a pushed tree (and the pushed trees below it); a tree the repository has is kept as it is. */
  private async importTree(oid: string, path: string, parents: readonly string[]): Promise<void> {
    if (this.trees.has(oid) || this.existingTrees.has(oid)) return;
    const existing = await this.store.getTree(this.repo.id, oid);
    if (existing !== null) {
      this.existingTrees.add(oid);
      return;
    }
    this.count();
    const object = await this.objects.get(oid);
    if (object === null) refuse(`missing object: tree ${oid} (${path === "" ? "the root folder" : quote(path)}) is neither in the pack nor in the repository`);
    if (object.type !== "tree") refuse(`${oid} is a ${object.type}, where a tree (${path === "" ? "the root folder" : quote(path)}) was expected`);
    let listed: ReturnType<typeof parseTreeObject>;
    try {
      listed = parseTreeObject(object.data);
    } catch (error) {
      if (error instanceof GitObjectError) refuse(`tree ${oid} is malformed: ${error.message}`);
      throw error;
    }
    const entries: TreeEntry[] = [];
    const names = new Map<string, string>();
    for (const entry of listed) {
      const full = path === "" ? entry.name : `${path}/${entry.name}`;
      try {
        requireNewPath(full);
        const same = names.get(nameCollisionKey(entry.name));
        if (same !== undefined) throw nameCollision(path, entry.name, same);
        names.set(nameCollisionKey(entry.name), entry.name);
      } catch (error) {
        if (error instanceof HubError) refuse(`the push holds a path castor does not accept: ${error.message}`);
        throw error;
      }
      if (entry.mode === "40000") {
        await this.importTree(entry.oid, full, parents);
        entries.push({ type: "directory", name: entry.name, oid: entry.oid });
      } else if (entry.mode === "100644") {
        entries.push({ ...(await this.fileEntry(entry.oid, full, parents)), name: entry.name });
      } else {
        refuse(`${quote(full)} ${MODE_ADVICE[entry.mode] ?? `has the mode ${entry.mode}, which git itself does not write`}`);
      }
    }
    if (gitTreeId(entries) !== oid) {
      refuse(
        `tree ${oid} (${path === "" ? "the root folder" : quote(path)}) is not in git's canonical form (entry order, modes or duplicate names); git fsck tells more`,
      );
    }
    this.trees.set(oid, { oid, entries });
  }

  /** The entry of blob `oid` at `path`: from the pack (stored now), or a file the repository already names. */
  private async fileEntry(oid: string, path: string, parents: readonly string[]): Promise<TreeFileEntry> {
    const known = this.files.get(oid);
    if (known !== undefined) return known;
    const object = await this.objects.get(oid);
    if (object === null) {
      const found = await this.findInParents(oid, parents);
      if (found === null) refuse(`missing object: the file ${quote(path)} (blob ${oid}) is neither in the pack nor in the repository`);
      return found;
    }
    this.count();
    if (object.type !== "blob") refuse(`${oid} is a ${object.type}, where the file ${quote(path)} was expected`);
    const entry = (await this.lfsEntry(object.data, path)) ?? this.inlineEntry(oid, object.data);
    this.files.set(oid, entry);
    return entry;
  }

  /** A Git LFS pointer to content the repository holds, as that Xet file; null when the blob is no pointer. */
  private async lfsEntry(data: Buffer, path: string): Promise<TreeFileEntry | null> {
    if (data.length > MAX_POINTER_BYTES) return null;
    const pointer = LFS_POINTER.exec(data.toString("latin1"));
    if (pointer === null) return null;
    const [sha256, size] = [pointer[1], Number(pointer[2])];
    // A pointer written otherwise than git-lfs writes it keeps its own bytes as a plain file.
    if (!data.equals(Buffer.from(lfsPointer(sha256, size)))) return null;
    const fileHash = await this.store.findFileBySha256(this.repo.id, Buffer.from(sha256, "hex"));
    const file = fileHash === null ? null : await this.store.getFile(fileHash);
    if (fileHash === null || file === null || file.size !== size || !(await isStoredWhole(this.store, file))) {
      refuse(
        `the Git LFS object of ${quote(path)} (sha256 ${sha256}, ${size} bytes) is not on castor: push it first (git lfs push --all origin), then push again`,
      );
    }
    this.xetFiles.push(fileHash);
    return xetFileEntry("", sha256, size, hashToHex(fileHash));
  }

  private inlineEntry(oid: string, data: Buffer): TreeFileEntry {
    const stored = InlineBlobs.describe(data);
    this.inlineBlobs.push(oid);
    return { type: "file", name: "", oid: stored.oid, size: stored.size, sha256: stored.sha256, xetHash: null };
  }

  /**
   * A file the pack does not bring: one the client knew the repository has, usually in a
   * parent commit. The parents' whole trees are indexed once each (a rename or a copy finds its
   * file anywhere in them).
   */
  private async findInParents(oid: string, parents: readonly string[]): Promise<TreeFileEntry | null> {
    for (const parent of parents) {
      const commit = this.commits.get(parent) ?? (await this.store.getCommit(this.repo.id, parent));
      if (commit === null) continue;
      await this.indexRoot(commit.treeOid);
      const found = this.files.get(oid);
      if (found !== undefined) return found;
    }
    return null;
  }

  private async indexRoot(root: string): Promise<void> {
    if (this.indexedRoots.has(root)) return;
    this.indexedRoots.add(root);
    const pending = [root];
    while (pending.length > 0) {
      const oid = pending.pop()!;
      this.count();
      const tree = this.trees.get(oid) ?? (await this.store.getTree(this.repo.id, oid));
      if (tree === null) continue;
      for (const entry of tree.entries) {
        if (entry.type === "directory") pending.push(entry.oid);
        else if (!this.files.has(entry.oid)) this.files.set(entry.oid, entry);
      }
    }
  }
}
