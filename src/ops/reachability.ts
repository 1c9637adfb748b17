/**
 * What the repositories' refs reach: every commit of every branch and tag with all its
 * ancestors, every tree of those commits, and the files those trees name — the live set of a
 * garbage collection (gc.ts). A missing commit or tree stops the walk with an error: with part
 * of a history unreadable, nothing can be declared unreachable (fsck says what is damaged).
 */
import { hashFromHex } from "../format/hash.js";
import type { SeenRef } from "../metadata/gc.js";
import type { MetadataStore } from "../metadata/store.js";

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
  histories: Map<number, ReachableHistory>;
}

/** Part of a history is missing: the walk cannot tell what is reachable. */
export class DamagedHistoryError extends Error {
  override readonly name = "DamagedHistoryError";
}

type HistoryReader = Pick<MetadataStore, "listRepos" | "listRevisions" | "getCommit" | "getTree">;

export async function walkReachable(store: HistoryReader, onRepository?: (walked: number, total: number) => void): Promise<Reachable> {
  const reachable: Reachable = { files: new HashPrefixSet(), inline: new HashPrefixSet(), histories: new Map() };
  const repos = await store.listRepos();
  for (const [index, repo] of repos.entries()) {
    const revisions = await store.listRevisions(repo.id);
    const history: ReachableHistory = {
      repoId: repo.id,
      refs: revisions.map((revision) => ({ name: revision.name, commitOid: revision.commitOid })),
      commits: new Set(),
      trees: new Set(),
    };
    const where = `${repo.type}:${repo.name}`;
    const commitsToWalk = revisions.flatMap((revision) => (revision.commitOid === null ? [] : [revision.commitOid]));
    const treesToWalk: string[] = [];
    while (commitsToWalk.length > 0) {
      const oid = commitsToWalk.pop()!;
      if (history.commits.has(oid)) continue;
      history.commits.add(oid);
      const commit = await store.getCommit(repo.id, oid);
      if (commit === null) throw new DamagedHistoryError(`commit ${oid} of ${where} is missing: run castor fsck`);
      commitsToWalk.push(...commit.parentOids);
      treesToWalk.push(commit.treeOid);
    }
    while (treesToWalk.length > 0) {
      const oid = treesToWalk.pop()!;
      if (history.trees.has(oid)) continue;
      history.trees.add(oid);
      const tree = await store.getTree(repo.id, oid);
      if (tree === null) throw new DamagedHistoryError(`tree ${oid} of ${where} is missing: run castor fsck`);
      for (const entry of tree.entries) {
        if (entry.type === "directory") treesToWalk.push(entry.oid);
        else if (entry.xetHash !== null) reachable.files.add(hashFromHex(entry.xetHash));
        else reachable.inline.add(Buffer.from(entry.sha256, "hex"));
      }
    }
    reachable.histories.set(repo.id, history);
    onRepository?.(index + 1, repos.length);
  }
  return reachable;
}
