/** Paths of files inside a repository (rules in format/repo.ts), and what a commit holds at a path. */
import type { MetadataStore, TreeEntry, TreeFileEntry, TreeRecord } from "../metadata/store.js";
import { repoPathProblem } from "../format/repo.js";
import { HubError } from "./errors.js";
import { quote } from "./names.js";

/** The path's segments; HubError 400 for an invalid path. */
export function requirePath(path: string): string[] {
  const problem = repoPathProblem(path);
  if (problem !== null) throw new HubError(400, `invalid path ${quote(path)}: ${problem}`);
  return path.split("/");
}

/** Loads a repository's trees, each once per instance (one request's worth of lookups). */
export class TreeReader {
  private readonly loaded = new Map<string, Promise<TreeRecord>>();

  constructor(
    private readonly store: Pick<MetadataStore, "getTree">,
    private readonly repoId: number,
  ) {}

  tree(oid: string): Promise<TreeRecord> {
    let tree = this.loaded.get(oid);
    if (tree === undefined) {
      tree = this.store.getTree(this.repoId, oid).then((found) => {
        // Trees are written with the commit that names them, in one transaction: a missing one is damage.
        if (found === null) throw new Error(`tree ${oid} of repository #${this.repoId} is missing from the metadata store`);
        return found;
      });
      this.loaded.set(oid, tree);
    }
    return tree;
  }

  /**
   * The entry at `path` below the root tree `rootOid`, or null when nothing is there. The
   * empty path is the root directory itself.
   */
  async entryAt(rootOid: string, path: string): Promise<TreeEntry | { type: "directory"; name: ""; oid: string } | null> {
    if (path === "") return { type: "directory", name: "", oid: rootOid };
    let tree = await this.tree(rootOid);
    const segments = path.split("/");
    for (let i = 0; i < segments.length; i++) {
      const entry = tree.entries.find((e) => e.name === segments[i]);
      if (entry === undefined) return null;
      if (i === segments.length - 1) return entry;
      if (entry.type !== "directory") return null;
      tree = await this.tree(entry.oid);
    }
    return null;
  }

  /** The file at `path`, or null when there is none (or a directory is there). */
  async fileAt(rootOid: string, path: string): Promise<TreeFileEntry | null> {
    const entry = await this.entryAt(rootOid, path);
    return entry !== null && entry.type === "file" ? entry : null;
  }

  /**
   * Every entry below the tree `oid`, depth first in git's order, a directory before its
   * contents; paths are prefixed with `prefix` (the tree's own path, or "").
   */
  async *walk(oid: string, prefix: string, recursive: boolean): AsyncGenerator<{ path: string; entry: TreeEntry }> {
    const tree = await this.tree(oid);
    for (const entry of tree.entries) {
      const path = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
      yield { path, entry };
      if (recursive && entry.type === "directory") yield* this.walk(entry.oid, path, true);
    }
  }
}
