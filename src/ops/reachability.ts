/**
 * What the repositories' refs reach: every commit of every branch and tag with all its
 * ancestors, every tree of those commits, and the files those trees name — the live set of a
 * garbage collection (gc.ts) and the history check of `castor fsck` (fsck.ts).
 *
 * A missing commit or tree stops gc's walk with an error: with part of a history unreadable,
 * nothing can be declared unreachable. fsck instead collects every missing one (`onDamage`)
 * and walks on, to report all the damage in one run.
 */
import { hashFromHex } from "../format/hash.js";
import type { SeenRef } from "../metadata/gc.js";
import type { MetadataStore, Repo, TreeFileEntry } from "../metadata/store.js";

/**
 * A set of 32-byte hashes kept as their first 48 bits (a number), about a fifth of the memory
 * of hex strings for a million files. Two hashes sharing 48 bits are the same entry, which can
 * only make the collector keep something, never delete it.
 */
export class HashPrefixSet {
  private readonly prefixes = new Set<number>();

  add(hash: Uint8Array): void {
    this.prefixes.add(prefixOf(hash));
  }

  has(hash: Uint8Array): boolean {
    return this.prefixes.has(prefixOf(hash));
  }

  get size(): number {
    return this.prefixes.size;
  }
}

function prefixOf(hash: Uint8Array): number {
  return hash[0] * 2 ** 40 + hash[1] * 2 ** 32 + ((hash[2] << 24) >>> 0) + (hash[3] << 16) + (hash[4] << 8) + hash[5];
}

/** One repository's reachable history and the refs it was walked from. */
export interface ReachableHistory {
  repoId: number;
  refs: SeenRef[];
  commits: Set<string>;
  trees: Set<string>;
}

export interface Reachable {
  /** Xet files named by a reachable tree. */
  files: HashPrefixSet;
  /** SHA-256s of inline files named by a reachable tree. */
  inline: HashPrefixSet;
  /** Per repository id; empty when walked with `keepHistories: false`. */
  histories: Map<number, ReachableHistory>;
}

/** Part of a history is missing: the walk cannot tell what is reachable. */
export class DamagedHistoryError extends Error {
  override readonly name = "DamagedHistoryError";
}

/** A commit or tree that a ref, a commit or a tree names and the store does not have. */
export interface HistoryDamage {
  kind: "commit_missing" | "tree_missing";
  repo: Repo;
  oid: string;
  /** What is missing and what names it, in one sentence without a final period. */
  message: string;
}

/** A file entry of a reachable tree. */
export interface ReachedFile {
  repo: Repo;
  /** From the repository's root, through the first path its tree was reached by. */
  path: string;
  entry: TreeFileEntry;
  /**
   * Whether no tree walked before named the same content (Xet file or inline SHA-256), as far
   * as a HashPrefixSet tells: a check done per distinct file needs only these.
   */
  firstSeen: boolean;
}

export interface WalkOptions {
  /** After each repository, with what of it was walked. */
  onRepository?: (walked: number, total: number, history: ReachableHistory) => void;
  /**
   * Receives every missing commit or tree, and the walk goes on past it. Without it the walk
   * throws DamagedHistoryError at the first one.
   */
  onDamage?: (damage: HistoryDamage) => void;
  /** Receives the file entries of each tree walked (each distinct tree of a repository once). */
  onFiles?: (files: ReachedFile[]) => Promise<void>;
  /**
   * Whether `histories` keeps every repository's commits and trees (default true: gc sweeps by
   * them). false bounds memory to the largest repository's history.
   */
  keepHistories?: boolean;
}

type HistoryReader = Pick<MetadataStore, "listRepos" | "listRevisions" | "getCommit" | "getTree">;

export async function walkReachable(store: HistoryReader, options: WalkOptions = {}): Promise<Reachable> {
  const reachable: Reachable = { files: new HashPrefixSet(), inline: new HashPrefixSet(), histories: new Map() };
  const onDamage =
    options.onDamage ??
    ((damage: HistoryDamage) => {
      throw new DamagedHistoryError(`${damage.message}: run castor fsck`);
    });
  // A mirrored repository has no refs of its own: its snapshots are a cache kept whole, and its
  // files are live while the mirror holds them (gc.ts asks the mirror's records).
  const repos = (await store.listRepos()).filter((repo) => !repo.mirror);
  for (const [index, repo] of repos.entries()) {
    const history = await walkRepository(store, repo, reachable, onDamage, options.onFiles);
    if (options.keepHistories ?? true) reachable.histories.set(repo.id, history);
    options.onRepository?.(index + 1, repos.length, history);
  }
  return reachable;
}

/** A commit or tree still to walk, with what named it (for a damage report). */
interface ToWalk {
  oid: string;
  namedBy: string;
}

async function walkRepository(
  store: HistoryReader,
  repo: Repo,
  reachable: Reachable,
  onDamage: (damage: HistoryDamage) => void,
  onFiles: WalkOptions["onFiles"],
): Promise<ReachableHistory> {
  const revisions = await store.listRevisions(repo.id);
  const history: ReachableHistory = {
    repoId: repo.id,
    refs: revisions.map((revision) => ({ name: revision.name, commitOid: revision.commitOid })),
    commits: new Set(),
    trees: new Set(),
  };
  const where = `${repo.type}:${repo.name}`;
  const commitsToWalk = revisions.flatMap((revision): ToWalk[] =>
    revision.commitOid === null ? [] : [{ oid: revision.commitOid, namedBy: `${revision.kind} ${revision.name}` }],
  );
  const treesToWalk: (ToWalk & { path: string })[] = [];
  while (commitsToWalk.length > 0) {
    const { oid, namedBy } = commitsToWalk.pop()!;
    if (history.commits.has(oid)) continue;
    history.commits.add(oid);
    const commit = await store.getCommit(repo.id, oid);
    if (commit === null) {
      onDamage({ kind: "commit_missing", repo, oid, message: `commit ${oid} of ${where}, named by ${namedBy}, is missing` });
      continue;
    }
    for (const parent of commit.parentOids) commitsToWalk.push({ oid: parent, namedBy: `commit ${oid}` });
    treesToWalk.push({ oid: commit.treeOid, namedBy: `commit ${oid}`, path: "" });
  }
  while (treesToWalk.length > 0) {
    const { oid, namedBy, path } = treesToWalk.pop()!;
    if (history.trees.has(oid)) continue;
    history.trees.add(oid);
    const tree = await store.getTree(repo.id, oid);
    if (tree === null) {
      const at = path === "" ? "root tree" : `tree of ${path}/`;
      onDamage({ kind: "tree_missing", repo, oid, message: `${at} ${oid} of ${where}, named by ${namedBy}, is missing` });
      continue;
    }
    const files: ReachedFile[] = [];
    for (const entry of tree.entries) {
      const entryPath = path === "" ? entry.name : `${path}/${entry.name}`;
      if (entry.type === "directory") {
        treesToWalk.push({ oid: entry.oid, namedBy: `tree ${oid}`, path: entryPath });
        continue;
      }
      const [seen, hash] = entry.xetHash !== null ? [reachable.files, hashFromHex(entry.xetHash)] : [reachable.inline, Buffer.from(entry.sha256, "hex")];
      const firstSeen = !seen.has(hash);
      seen.add(hash);
      if (onFiles !== undefined) files.push({ repo, path: entryPath, entry, firstSeen });
    }
    if (files.length > 0) await onFiles?.(files);
  }
  return history;
}
