/**
 * When each path last changed: the `lastCommit` of expanded tree listings and paths-info
 * (`expand=true`), which `hf models ls`, `list_repo_tree(expand=True)` and `HfFileSystem`
 * show. Castor stores no per-path history, so it walks the commits back from the listed one
 * along first parents (castor's commits have one parent) and compares the entry's git id
 * (blob or tree) at each path with the parent's: the newest commit where it differs — or where
 * the parent lacks the path — changed it last.
 *
 * The walk is bounded by `LAST_COMMIT_WALK` commits per request. A path unchanged over that
 * many commits gets no `lastCommit` (the field is optional for clients), rather than a commit
 * that did not change it. Trees are loaded once per request and only where ids differ: a folder
 * whose tree id is the same in both commits is not opened, so a walk over commits that touched
 * other folders costs a commit lookup per step.
 */
import { trimSlashes } from "../format/repo.js";
import type { CommitRecord, MetadataStore, Repo, TreeEntry } from "../metadata/store.js";
import { TreeReader } from "./paths.js";

/** Commits walked at most per request to find when its paths last changed. */
export const LAST_COMMIT_WALK = 1000;

/**
 * The commit that last changed each of `paths` (as they are in `start`; "" or missing paths
 * are ignored), for those changed within `LAST_COMMIT_WALK` commits of `start`.
 */
export async function lastCommits(
  store: Pick<MetadataStore, "getCommit" | "getTree">,
  repo: Repo,
  start: CommitRecord,
  paths: string[],
  walk = LAST_COMMIT_WALK,
): Promise<Map<string, CommitRecord>> {
  const reader = new TreeReader(store, repo.id);
  const children = new Map<string, TreeEntry | null>();
  /** The entry `name` of the tree `treeOid`, null when there is none. */
  const child = async (treeOid: string, name: string): Promise<TreeEntry | null> => {
    const key = `${treeOid}/${name}`;
    let entry = children.get(key);
    if (entry === undefined) {
      entry = (await reader.tree(treeOid)).entries.find((e) => e.name === name) ?? null;
      children.set(key, entry);
    }
    return entry;
  };
  /** The git id (blob or tree) at `segments` below the root tree `rootOid`, null when nothing is there. */
  const idAt = async (rootOid: string, segments: string[]): Promise<string | null> => {
    let entry: TreeEntry | null = { type: "directory", name: "", oid: rootOid };
    for (const name of segments) {
      if (entry === null || entry.type !== "directory") return null;
      entry = await child(entry.oid, name);
    }
    return entry?.oid ?? null;
  };

  const pending = new Map<string, string[]>();
  for (const path of paths) {
    const clean = trimSlashes(path, { leading: true });
    if (clean !== "" && (await idAt(start.treeOid, clean.split("/"))) !== null) pending.set(path, clean.split("/"));
  }
  const found = new Map<string, CommitRecord>();
  let current = start;
  for (let walked = 1; pending.size > 0; walked++) {
    const parentOid = current.parentOids[0];
    const parent = parentOid === undefined ? null : await store.getCommit(repo.id, parentOid);
    if (parent === null || parent.treeOid !== current.treeOid) {
      for (const [path, segments] of pending) {
        const here = await idAt(current.treeOid, segments);
        const before = parent === null ? null : await idAt(parent.treeOid, segments);
        if (here !== before) {
          found.set(path, current);
          pending.delete(path);
        }
      }
    }
    if (parent === null || walked >= walk) break;
    current = parent;
  }
  return found;
}
