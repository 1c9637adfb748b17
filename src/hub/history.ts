/**
 * Writing a repository's history: building the trees and the commit that a list of file
 * operations makes from a branch's head, and moving the branch to it atomically.
 *
 * The new trees are built in memory from the head's trees (only the folders an operation
 * touches are loaded and rewritten; the others keep their ids) and handed to the store with
 * the commit in one `advanceBranch`, which moves the branch only if it still points at the
 * head the commit was built on. If another commit landed meanwhile, the operations are applied
 * again on the new head — unless the client pinned the parent (`parentCommit`), which then
 * gets 412, as on the Hub. A refused operation leaves the branch where it was.
 */
import { createHash } from "node:crypto";
import { commitMessage, compareTreeItems, gitBlobId, gitCommitBody, gitObjectId, gitTreeId, lfsPointer, userSignature } from "../format/git.js";
import { hashToHex, type Hash } from "../format/hash.js";
import type { CommitRecord, MetadataStore, Repo, TreeEntry, TreeFileEntry, TreeRecord } from "../metadata/store.js";
import { HubError } from "./errors.js";
import { InlineBlobs } from "./inline-blobs.js";
import { coverWithLfs, GITATTRIBUTES_PATH } from "./lfs-attributes.js";
import { quote } from "./names.js";
import { nameCollision, nameCollisionKey, requireNewPath, requirePath, TreeReader } from "./paths.js";

/** One change of a commit, as the Hub's NDJSON commit payload names them. */
export type CommitOperation =
  /** A file stored inline: its content is already in the blob store under its SHA-256. */
  | { kind: "file"; path: string; size: number; sha256: string; oid: string }
  /** A file stored through Xet, named by the SHA-256 of its content; `size` absent for copies. */
  | { kind: "lfsFile"; path: string; sha256: string; size?: number }
  | { kind: "deletedFile"; path: string }
  | { kind: "deletedFolder"; path: string };

export interface CommitRequest {
  repo: Repo;
  branch: string;
  /** `parentCommit`: the head the client built on; 412 when the branch has moved from it. */
  parentCommit?: string;
  summary: string;
  description: string;
  author: string;
  operations: CommitOperation[];
  /**
   * Writes the commit's inline contents (the `file` operations' bytes) to the blob store. Called
   * once, after every operation applied cleanly and before the branch moves, so a refused commit
   * writes none of them.
   */
  storeContents?: () => Promise<void>;
  /** The content of an inline file this commit adds, before `storeContents` stored it (null: not one of them). */
  contentOf?: (sha256: string) => Promise<Buffer | null>;
}

/** Concurrent commits to one branch are rebased this many times before the request fails. */
const MAX_ATTEMPTS = 8;

export const INITIAL_COMMIT_TITLE = "initial commit";

/** The initial commit of a repository: an empty tree, no parent. */
export function initialCommit(author: string, at: Date): { commit: CommitRecord; tree: TreeRecord } {
  const tree: TreeRecord = { oid: gitTreeId([]), entries: [] };
  return { tree, commit: buildCommit(tree.oid, [], INITIAL_COMMIT_TITLE, "", author, at) };
}

export function buildCommit(treeOid: string, parents: string[], summary: string, description: string, author: string, at: Date): CommitRecord {
  const seconds = Math.floor(at.getTime() / 1000);
  const signature = userSignature(author, seconds);
  const message = commitMessage(summary, description);
  const object = gitCommitBody({ tree: treeOid, parents, author: signature, committer: signature, message });
  return {
    oid: gitObjectId("commit", object),
    treeOid,
    parentOids: parents,
    title: message.slice(0, message.indexOf("\n")),
    message,
    author,
    createdAt: new Date(seconds * 1000),
    object,
  };
}

/** A file entry for content of `size` bytes with this SHA-256, stored through Xet as `xetHash`. */
export function xetFileEntry(name: string, sha256: string, size: number, xetHash: string): TreeFileEntry {
  return { type: "file", name, oid: gitBlobId(lfsPointer(sha256, size)), size, sha256, xetHash };
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/**
 * A folder being edited: its entries by name, subfolders opened on demand. `dirty` marks the
 * folders whose tree must be rewritten; `added`, the names this commit added to it.
 */
interface EditableFolder {
  entries: Map<string, TreeEntry>;
  opened: Map<string, EditableFolder>;
  dirty: boolean;
  added: Set<string>;
}

export class HistoryWriter {
  constructor(
    private readonly store: Pick<MetadataStore, "getTree" | "getCommit" | "getRevision" | "advanceBranch" | "findFileBySha256" | "getFile" | "leaseObjects">,
    private readonly now: () => Date = () => new Date(),
    /** Where `.gitattributes` is read and written (lfs-attributes.ts); without it, commits leave it alone. */
    private readonly inline?: InlineBlobs,
  ) {}

  /** Applies the commit; returns the new commit. HubError for every refusal, nothing written then. */
  async commit(request: CommitRequest): Promise<CommitRecord> {
    const { repo, branch } = request;
    for (const op of request.operations) {
      if (op.kind === "file" || op.kind === "lfsFile") requireNewPath(op.path);
      else requirePath(op.path);
    }
    let xetEntries: Map<string, { size: number; xetHash: string }> | undefined;
    let contentsStored = false;

    for (let attempt = 1; ; attempt++) {
      const head = await this.branchHead(repo, branch, "commits go to branches");
      if (request.parentCommit !== undefined && request.parentCommit !== head) {
        throw new HubError(
          412,
          `the branch ${quote(branch)} is at ${head ?? "no commit"}, not at the parent commit ${request.parentCommit} this commit was built on: fetch it again and retry`,
        );
      }

      xetEntries ??= await this.resolveXetFiles(repo, request.operations, head);
      const reader = new TreeReader(this.store, repo.id);
      const root = await this.open(reader, head === null ? null : await this.rootTreeOf(repo.id, head));
      for (const op of request.operations) await this.apply(reader, root, op, xetEntries, head);
      const attributes = await this.coverXetFiles(root, request);
      const trees: TreeRecord[] = [];
      const rootOid = this.seal(root, trees);
      const commit = buildCommit(rootOid, head === null ? [] : [head], request.summary, request.description, request.author, this.now());
      if (!contentsStored) {
        await request.storeContents?.();
        contentsStored = true;
      }
      // The .gitattributes this attempt wrote, stored like the commit's own inline files: only now.
      if (attributes !== null) await this.inline!.write(attributes);

      const outcome = await this.store.advanceBranch({ repoId: repo.id, branch, expectedHead: head, commit, trees });
      if (outcome === "advanced") return commit;
      if (outcome === "no_branch") throw branchNotFound(repo, branch);
      if (request.parentCommit !== undefined) {
        throw new HubError(412, `the branch ${quote(branch)} moved while this commit was applied: fetch it again and retry`);
      }
      if (attempt >= MAX_ATTEMPTS) throw keptMoving(branch);
    }
  }

  /**
   * Replaces the branch's history with one parentless commit of its head's tree (the Hub's
   * `super_squash_history`): what only the old commits reached becomes garbage for `castor gc`.
   */
  async squash(repo: Repo, branch: string, message: string, author: string): Promise<CommitRecord> {
    for (let attempt = 1; ; attempt++) {
      const head = await this.branchHead(repo, branch, "only branches are squashed");
      if (head === null) throw new HubError(400, `the branch ${quote(branch)} has no commit to squash`);
      const { summary, description } = splitMessage(message);
      const commit = buildCommit(await this.rootTreeOf(repo.id, head), [], summary, description, author, this.now());
      const outcome = await this.store.advanceBranch({ repoId: repo.id, branch, expectedHead: head, commit, trees: [] });
      if (outcome === "advanced") return commit;
      if (outcome === "no_branch") throw branchNotFound(repo, branch);
      if (attempt >= MAX_ATTEMPTS) throw keptMoving(branch);
    }
  }

  /** The commit `branch` points at; 404 when there is no such revision, 400 (`tagRefusal`) for a tag. */
  private async branchHead(repo: Repo, branch: string, tagRefusal: string): Promise<string | null> {
    const revision = await this.store.getRevision(repo.id, branch);
    if (revision === null) throw branchNotFound(repo, branch);
    if (revision.kind !== "branch") throw new HubError(400, `${quote(branch)} is a tag: ${tagRefusal}`);
    return revision.commitOid;
  }

  private async rootTreeOf(repoId: number, commitOid: string): Promise<string> {
    const commit = await this.store.getCommit(repoId, commitOid);
    if (commit === null) throw new Error(`commit ${commitOid} of repository #${repoId} is missing from the metadata store`);
    return commit.treeOid;
  }

  /**
   * The tree entries of every `lfsFile`, keyed by SHA-256. Content counts only if a shard
   * uploaded with this repository's write token registered it: knowing a SHA-256 is not enough
   * to commit (and then download) content stored for another repository. An `lfsFile` without
   * a size is a copy (`CommitOperationCopy` of a file the repository holds): no bytes move, the
   * new entry names the same Xet file; content the repository does not have is 404
   * `EntryNotFound` at `head` for a copy, 400 for an upload (HUB-API R8).
   */
  private async resolveXetFiles(repo: Repo, operations: CommitOperation[], head: string | null): Promise<Map<string, { size: number; xetHash: string }>> {
    const found = new Map<string, { size: number; xetHash: string }>();
    const leased: Hash[] = [];
    for (const op of operations) {
      if (op.kind !== "lfsFile" || found.has(op.sha256)) continue;
      const fileHash = await this.store.findFileBySha256(repo.id, Buffer.from(op.sha256, "hex"));
      const file = fileHash === null ? null : await this.store.getFile(fileHash);
      if ((fileHash === null || file === null) && op.size === undefined) {
        throw new HubError(
          404,
          `cannot copy to ${quote(op.path)}: ${repo.type}:${repo.name} holds no content with SHA-256 ${op.sha256} (copy a file of this repository, at any revision)`,
          "EntryNotFound",
          head ?? undefined,
        );
      }
      if (fileHash === null || file === null) {
        throw new HubError(
          400,
          `lfsFile ${quote(op.path)}: no content with SHA-256 ${op.sha256} was uploaded to ${repo.type}:${repo.name} (upload it through Xet with this repository's write token first)`,
        );
      }
      found.set(op.sha256, { size: file.size, xetHash: hashToHex(fileHash) });
      leased.push(fileHash);
    }
    // Until the commit lands, only a lease keeps these files from a garbage collection that
    // marked before it (src/metadata/gc.ts).
    await this.store.leaseObjects("file", leased);
    for (const op of operations) {
      if (op.kind === "lfsFile" && op.size !== undefined && op.size !== found.get(op.sha256)!.size) {
        throw new HubError(
          400,
          `lfsFile ${quote(op.path)}: size ${op.size} does not match the ${found.get(op.sha256)!.size} bytes uploaded with SHA-256 ${op.sha256}`,
        );
      }
    }
    return found;
  }

  /**
   * Adds the paths of the Xet files this commit writes to the root `.gitattributes` when it
   * does not give them `filter=lfs` yet, so that git clones check them out through git-lfs
   * (lfs-attributes.ts says why). A `.gitattributes` that is a folder, or stored through Xet,
   * is left as it is.
   */
  private async coverXetFiles(root: EditableFolder, request: CommitRequest): Promise<Buffer | null> {
    const paths = request.operations.filter((op) => op.kind === "lfsFile").map((op) => op.path);
    if (paths.length === 0 || this.inline === undefined) return null;
    const existing = root.entries.get(GITATTRIBUTES_PATH);
    if (existing !== undefined && (existing.type === "directory" || existing.xetHash !== null)) return null;
    // A .gitattributes this commit writes too is not stored yet: the commit's contents hold it.
    const current = existing === undefined ? null : ((await request.contentOf?.(existing.sha256)) ?? (await this.inline.read(existing)));
    const updated = coverWithLfs(current === null ? null : current.toString("utf8"), paths);
    if (updated === null) return null;
    const content = Buffer.from(updated, "utf8");
    const stored = InlineBlobs.describe(content);
    root.entries.set(GITATTRIBUTES_PATH, { type: "file", name: GITATTRIBUTES_PATH, oid: stored.oid, size: stored.size, sha256: stored.sha256, xetHash: null });
    root.dirty = true;
    return content;
  }

  private async open(reader: TreeReader, oid: string | null): Promise<EditableFolder> {
    const entries = new Map<string, TreeEntry>();
    if (oid !== null) for (const entry of (await reader.tree(oid)).entries) entries.set(entry.name, entry);
    return { entries, opened: new Map(), dirty: false, added: new Set() };
  }

  /** The folder at `segments` below `root`; with `create`, missing folders are made. null when absent. */
  private async folderAt(reader: TreeReader, root: EditableFolder, segments: string[], create: boolean, path: string): Promise<EditableFolder[] | null> {
    const chain = [root];
    let folder = root;
    for (let i = 0; i < segments.length; i++) {
      const name = segments[i];
      let child = folder.opened.get(name);
      if (child === undefined) {
        const entry = folder.entries.get(name);
        if (entry !== undefined && entry.type === "file") {
          if (!create) return null;
          throw new HubError(400, `cannot write ${quote(path)}: ${quote(segments.slice(0, i + 1).join("/"))} is a file`);
        }
        if (entry === undefined && !create) return null;
        child = await this.open(reader, entry === undefined ? null : entry.oid);
        folder.opened.set(name, child);
        if (entry === undefined) {
          folder.entries.set(name, { type: "directory", name, oid: "" });
          folder.added.add(name);
        }
      }
      chain.push(child);
      folder = child;
    }
    return chain;
  }

  private async apply(
    reader: TreeReader,
    root: EditableFolder,
    op: CommitOperation,
    xetFiles: Map<string, { size: number; xetHash: string }>,
    head: string | null,
  ): Promise<void> {
    const segments = op.path.split("/");
    const name = segments.pop()!;
    const markDirty = (chain: EditableFolder[]) =>
      chain.forEach((folder) => {
        folder.dirty = true;
      });
    const missing = () => new HubError(404, `${quote(op.path)} does not exist in the branch's head commit`, "EntryNotFound", head ?? undefined);

    if (op.kind === "file" || op.kind === "lfsFile") {
      const chain = (await this.folderAt(reader, root, segments, true, op.path))!;
      const folder = chain[chain.length - 1];
      const existing = folder.entries.get(name);
      if (existing !== undefined && existing.type === "directory") throw new HubError(400, `cannot write ${quote(op.path)}: it is a folder`);
      const entry: TreeFileEntry =
        op.kind === "file"
          ? { type: "file", name, oid: op.oid, size: op.size, sha256: op.sha256, xetHash: null }
          : xetFileEntry(name, op.sha256, xetFiles.get(op.sha256)!.size, xetFiles.get(op.sha256)!.xetHash);
      folder.entries.set(name, entry);
      if (existing === undefined) folder.added.add(name);
      markDirty(chain);
      return;
    }

    const chain = await this.folderAt(reader, root, segments, false, op.path);
    const folder = chain?.[chain.length - 1];
    const existing = folder?.entries.get(name);
    const wanted = op.kind === "deletedFile" ? "file" : "directory";
    if (chain === null || folder === undefined || existing === undefined || existing.type !== wanted) throw missing();
    folder.entries.delete(name);
    folder.opened.delete(name);
    markDirty(chain);
  }

  /**
   * Gives every rewritten folder its new tree (collected into `out`) and returns the folder's
   * tree id. Folders left empty disappear, as in git; the root stays even when empty. A name
   * the commit added that another of its folder's names equals but for case or normalization
   * is refused here, once every operation is applied (a rename in case deletes the old name).
   */
  private seal(folder: EditableFolder, out: TreeRecord[], path = ""): string {
    for (const [name, child] of folder.opened) {
      if (!child.dirty) continue;
      const oid = this.seal(child, out, path === "" ? name : `${path}/${name}`);
      if (child.entries.size === 0) folder.entries.delete(name);
      else folder.entries.set(name, { type: "directory", name, oid });
    }
    if (folder.added.size > 0) refuseNameCollisions(folder, path);
    const isRoot = path === "";
    const entries = [...folder.entries.values()].sort(compareTreeItems);
    const oid = gitTreeId(entries);
    if (folder.dirty && (isRoot || entries.length > 0)) out.push({ oid, entries });
    return oid;
  }
}

/** HubError 400 when a name `folder` gained equals another of its names but for case or Unicode normalization (paths.ts). */
function refuseNameCollisions(folder: EditableFolder, path: string): void {
  const byKey = new Map<string, string>();
  for (const name of folder.entries.keys()) {
    const key = nameCollisionKey(name);
    const other = byKey.get(key);
    if (other === undefined) byKey.set(key, name);
    else if (folder.added.has(name)) throw nameCollision(path, name, other);
    else if (folder.added.has(other)) throw nameCollision(path, other, name);
  }
}

function branchNotFound(repo: Repo, branch: string): HubError {
  return new HubError(404, `branch ${quote(branch)} not found in ${repo.type}:${repo.name}`, "RevisionNotFound");
}

function keptMoving(branch: string): HubError {
  return new HubError(409, `the branch ${quote(branch)} kept moving under concurrent commits; retry`);
}

/** A message's first line (the summary) and the rest, as a commit keeps them. */
function splitMessage(message: string): { summary: string; description: string } {
  const newline = message.indexOf("\n");
  return newline === -1 ? { summary: message, description: "" } : { summary: message.slice(0, newline), description: message.slice(newline + 1).trim() };
}
