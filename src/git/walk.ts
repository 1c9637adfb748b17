/**
 * Which objects a fetch sends: the commits reachable from the client's wants and not from what
 * it has, their trees and blobs minus those the client has, cut at a depth for shallow
 * clones and without blobs for partial ones.
 *
 * Commits are walked newest first (by committer time), the client's `have`s marking their
 * ancestry as already there, until only such commits are left: the walk stops at the boundary
 * instead of reading either side's whole history. The trees of the boundary commits are then
 * marked as present, so a fetch after one new commit sends only what that commit changed.
 * A shallow fetch walks breadth first instead, level by level down to its depth.
 *
 * Every object counts against `maxObjects` as it is found, so a request cannot make the walk
 * hold more than that many ids.
 */
import type { GitCommit, GitObjectSource, GitTreeEntry } from "./source.js";

export class GitProtocolError extends Error {
  override readonly name = "GitProtocolError";
}

export type ObjectFilter = { kind: "blob:none" } | { kind: "blob:limit"; bytes: number };

export interface FetchQuery {
  wants: readonly string[];
  haves: readonly string[];
  /** The client's shallow commits (it lacks their parents). */
  shallows: readonly string[];
  /** `deepen N`: commits at most N deep from the wants; 0 for the whole history. */
  depth: number;
  filter: ObjectFilter | null;
}

export interface PlannedObject {
  type: "commit" | "tree" | "blob";
  oid: string;
  /** Commits keep their body from the walk; trees and blobs are read again when packed. */
  body?: Buffer;
}

export interface FetchPlan {
  objects: PlannedObject[];
  /** Commits sent without their parents (the client's new shallow boundary). */
  shallow: string[];
  /** Client-shallow commits whose parents this fetch sends. */
  unshallow: string[];
}

const SUBMODULE_MODE = "160000";

/** Parses a `filter` argument; GitProtocolError for specs castor does not apply. */
export function parseFilter(spec: string): ObjectFilter {
  if (spec === "blob:none") return { kind: "blob:none" };
  const limit = /^blob:limit=(\d{1,15})([kmg]?)$/.exec(spec);
  if (limit !== null) {
    const scale = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[limit[2] as "" | "k" | "m" | "g"];
    return { kind: "blob:limit", bytes: Number(limit[1]) * scale };
  }
  throw new GitProtocolError(`the filter ${JSON.stringify(spec.slice(0, 80))} is not supported by castor: use --filter=blob:none or --filter=blob:limit=<n>`);
}

function passesFilter(filter: ObjectFilter | null, entry: GitTreeEntry): boolean {
  if (filter === null) return true;
  if (filter.kind === "blob:none") return false;
  return entry.size !== undefined && entry.size <= filter.bytes;
}

/** A max-heap of commits by committer time. */
class CommitQueue {
  private readonly heap: GitCommit[] = [];

  get size(): number {
    return this.heap.length;
  }

  push(commit: GitCommit): void {
    const heap = this.heap;
    heap.push(commit);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent].time >= heap[i].time) break;
      [heap[parent], heap[i]] = [heap[i], heap[parent]];
      i = parent;
    }
  }

  pop(): GitCommit | undefined {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0 && last !== undefined) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let largest = i;
        if (left < heap.length && heap[left].time > heap[largest].time) largest = left;
        if (right < heap.length && heap[right].time > heap[largest].time) largest = right;
        if (largest === i) break;
        [heap[largest], heap[i]] = [heap[i], heap[largest]];
        i = largest;
      }
    }
    return top;
  }

  values(): readonly GitCommit[] {
    return this.heap;
  }
}

export class FetchPlanner {
  private readonly objects: PlannedObject[] = [];
  /** Every object id planned or known to be on the client. */
  private readonly known = new Set<string>();
  private visited = 0;

  constructor(
    private readonly source: GitObjectSource,
    private readonly maxObjects: number,
  ) {}

  async plan(query: FetchQuery): Promise<FetchPlan> {
    const wantedCommits: GitCommit[] = [];
    const otherWants: string[] = [];
    for (const oid of new Set(query.wants)) {
      const commit = await this.source.commit(oid);
      if (commit !== null) wantedCommits.push(commit);
      else otherWants.push(oid);
    }
    const shallows = new Set(query.shallows);
    const haves: GitCommit[] = [];
    for (const oid of new Set(query.haves)) {
      const commit = await this.source.commit(oid);
      if (commit !== null) haves.push(commit);
    }

    const { commits, boundary, shallow, unshallow } =
      query.depth > 0 ? await this.walkToDepth(wantedCommits, haves, shallows, query.depth) : await this.walkByTime(wantedCommits, haves, shallows);

    for (const commit of boundary) await this.markTreePresent(commit.tree);
    for (const commit of commits) this.add({ type: "commit", oid: commit.oid, body: commit.body });
    for (const commit of commits) await this.addTree(commit.tree, query.filter);
    if (otherWants.length > 0) await this.addOtherWants(otherWants, query.filter);
    return { objects: this.objects, shallow, unshallow };
  }

  private count(): void {
    if (++this.visited > this.maxObjects) {
      throw new GitProtocolError(
        `this fetch involves more than ${this.maxObjects} objects, the limit of this server (CASTOR_GIT_MAX_OBJECTS): fetch fewer refs or a shallower history (--depth)`,
      );
    }
  }

  private add(object: PlannedObject): void {
    this.count();
    this.known.add(object.oid);
    this.objects.push(object);
  }

  /**
   * The commits to send, newest first: reachable from `wants` and not from `haves`. Commits
   * reachable from both are marked as the client's; the walk ends when only such commits are
   * queued. A client-shallow commit passes no mark to its parents (the client lacks them).
   */
  private async walkByTime(wants: GitCommit[], haves: GitCommit[], shallows: Set<string>) {
    const uninteresting = new Set<string>();
    const queued = new Set<string>();
    const queue = new CommitQueue();
    const enqueue = (commit: GitCommit) => {
      if (queued.has(commit.oid)) return;
      queued.add(commit.oid);
      this.count();
      queue.push(commit);
    };
    for (const commit of haves) {
      uninteresting.add(commit.oid);
      enqueue(commit);
    }
    for (const commit of wants) enqueue(commit);

    const commits: GitCommit[] = [];
    const loaded = new Map<string, GitCommit>([...haves, ...wants].map((commit) => [commit.oid, commit]));
    while (queue.size > 0 && queue.values().some((commit) => !uninteresting.has(commit.oid))) {
      const commit = queue.pop()!;
      const mark = uninteresting.has(commit.oid);
      if (mark && shallows.has(commit.oid)) continue;
      if (!mark) commits.push(commit);
      for (const parentOid of commit.parents) {
        if (mark) uninteresting.add(parentOid);
        if (queued.has(parentOid)) continue;
        const parent = await this.source.commit(parentOid);
        if (parent === null) throw new Error(`commit ${commit.oid} names the parent ${parentOid}, which the repository does not have`);
        loaded.set(parent.oid, parent);
        enqueue(parent);
      }
    }
    // Only the edge matters: the client's commits that a sent commit names as a parent.
    const marked = [...new Set(commits.flatMap((commit) => commit.parents))].filter((oid) => uninteresting.has(oid)).map((oid) => loaded.get(oid)!);
    for (const oid of uninteresting) this.known.add(oid);
    return { commits, boundary: marked, shallow: [] as string[], unshallow: [] as string[] };
  }

  /**
   * A shallow fetch: commits level by level from the wants down to `depth` (1: the wanted
   * commits alone). Commits the client has are not sent; their parents are the client's too,
   * except those of its shallow commits, which are sent (and the shallow commit unshallowed)
   * when they lie within the depth. Below a commit the client has, the walk goes on only when
   * the client is shallow somewhere: otherwise it has everything there.
   */
  private async walkToDepth(wants: GitCommit[], haves: GitCommit[], shallows: Set<string>, depth: number) {
    // A client's shallow commits are its own even when it does not list them as haves.
    const had = new Set([...haves.map((commit) => commit.oid), ...shallows]);
    const seen = new Set<string>();
    const commits: GitCommit[] = [];
    const boundary: GitCommit[] = [];
    const shallow: string[] = [];
    const unshallow: string[] = [];
    let level: GitCommit[] = [];
    for (const commit of wants) {
      if (seen.has(commit.oid)) continue;
      seen.add(commit.oid);
      level.push(commit);
    }
    for (let d = 1; level.length > 0; d++) {
      const next: GitCommit[] = [];
      for (const commit of level) {
        this.count();
        const descend = d < depth && commit.parents.length > 0;
        if (had.has(commit.oid)) {
          boundary.push(commit);
          if (shallows.has(commit.oid)) {
            if (descend) unshallow.push(commit.oid);
          } else {
            for (const parent of commit.parents) had.add(parent);
            if (shallows.size === 0) continue;
          }
        } else {
          commits.push(commit);
          if (!descend && commit.parents.length > 0) shallow.push(commit.oid);
        }
        if (!descend) continue;
        for (const parentOid of commit.parents) {
          if (seen.has(parentOid)) continue;
          seen.add(parentOid);
          const parent = await this.source.commit(parentOid);
          if (parent === null) throw new Error(`commit ${commit.oid} names the parent ${parentOid}, which the repository does not have`);
          next.push(parent);
        }
      }
      level = next;
    }
    return { commits, boundary, shallow, unshallow };
  }

  /** Marks a tree the client has, with everything in it, so that nothing of it is sent again. */
  private async markTreePresent(oid: string): Promise<void> {
    if (this.known.has(oid)) return;
    this.known.add(oid);
    this.count();
    const tree = await this.source.tree(oid);
    if (tree === null) throw new Error(`tree ${oid} is missing from the repository`);
    for (const entry of tree.entries) {
      if (entry.mode === "40000") await this.markTreePresent(entry.oid);
      else if (!this.known.has(entry.oid)) {
        this.known.add(entry.oid);
        this.count();
      }
    }
  }

  /** Plans a tree and what it holds that the client lacks (blobs as the filter allows). */
  private async addTree(oid: string, filter: ObjectFilter | null): Promise<void> {
    if (this.known.has(oid)) return;
    this.add({ type: "tree", oid });
    const tree = await this.source.tree(oid);
    if (tree === null) throw new Error(`tree ${oid} is missing from the repository`);
    for (const entry of tree.entries) {
      if (entry.mode === "40000") await this.addTree(entry.oid, filter);
      else if (entry.mode !== SUBMODULE_MODE && !this.known.has(entry.oid) && passesFilter(filter, entry)) this.add({ type: "blob", oid: entry.oid });
    }
  }

  /**
   * Wants that are not commits: trees and blobs a partial clone asks for later (`want` of any
   * object is allowed in protocol v2). They are looked for in the trees of the refs' commits
   * first, then of all their history; a blob is sent whatever the filter, as git does.
   */
  private async addOtherWants(wants: string[], filter: ObjectFilter | null): Promise<void> {
    const missing = new Set(wants);
    const found = new Map<string, "tree" | "blob">();
    const searched = new Set<string>();
    const search = async (treeOid: string): Promise<void> => {
      if (missing.size === 0 || searched.has(treeOid)) return;
      searched.add(treeOid);
      this.count();
      if (missing.delete(treeOid)) found.set(treeOid, "tree");
      const tree = await this.source.tree(treeOid);
      if (tree === null) throw new Error(`tree ${treeOid} is missing from the repository`);
      for (const entry of tree.entries) {
        if (entry.mode === "40000") await search(entry.oid);
        else if (missing.delete(entry.oid)) found.set(entry.oid, "blob");
      }
    };
    const refs = await this.source.refs();
    const commitsSeen = new Set<string>();
    let frontier: string[] = refs.map((ref) => ref.oid);
    // The refs' trees first (a lazy fetch usually asks for blobs of a recent checkout), then the history.
    while (missing.size > 0 && frontier.length > 0) {
      const next: string[] = [];
      for (const oid of frontier) {
        if (commitsSeen.has(oid)) continue;
        commitsSeen.add(oid);
        this.count();
        const commit = await this.source.commit(oid);
        if (commit === null) continue;
        await search(commit.tree);
        next.push(...commit.parents);
      }
      frontier = next;
    }
    if (missing.size > 0) throw new GitProtocolError(`upload-pack: not our ref ${[...missing][0]}`);
    for (const oid of wants) {
      if (found.get(oid) === "tree") await this.addTree(oid, filter);
      else if (!this.known.has(oid)) this.add({ type: "blob", oid });
    }
  }
}
