/**
 * How the upstream hub's answers become castor's: a recursive listing of a commit's files as the
 * trees castor stores for its snapshot, and a refusal or failure as the error the hub answers
 * with, naming the upstream.
 */
import { compareTreeItems, gitTreeId } from "../format/git.js";
import { HubError } from "../hub/errors.js";
import type { TreeEntry, TreeRecord } from "../metadata/records.js";
import type { UpstreamError } from "../upstream/errors.js";
import type { UpstreamTreeEntry } from "../upstream/hub.js";

/**
 * The trees of a recursive listing: one per folder (the upstream's id for each subfolder), the
 * root's id computed as git computes a tree's (the listing does not state it).
 */
export function treesOf(entries: readonly UpstreamTreeEntry[]): { root: string; trees: TreeRecord[] } {
  const folders = new Map<string, { oid: string | null; entries: TreeEntry[] }>([["", { oid: null, entries: [] }]]);
  const folder = (path: string) => {
    let found = folders.get(path);
    if (found === undefined) {
      found = { oid: null, entries: [] };
      folders.set(path, found);
    }
    return found;
  };
  for (const entry of entries) {
    const slash = entry.path.lastIndexOf("/");
    const parent = slash === -1 ? "" : entry.path.slice(0, slash);
    const name = entry.path.slice(slash + 1);
    if (entry.type === "directory") {
      folder(entry.path).oid = entry.oid;
      folder(parent).entries.push({ type: "directory", name, oid: entry.oid });
    } else {
      folder(parent).entries.push({ type: "file", name, oid: entry.oid, size: entry.size, sha256: entry.lfs?.oid ?? "", xetHash: entry.xetHash });
    }
  }
  // Folders a listing names only through their contents get an id computed from those (deepest first).
  const paths = [...folders.keys()].sort((a, b) => b.split("/").length - a.split("/").length);
  for (const path of paths) {
    const current = folders.get(path)!;
    current.entries.sort(compareTreeItems);
    if (current.oid === null) current.oid = gitTreeId(current.entries);
    if (path === "") continue;
    const slash = path.lastIndexOf("/");
    const parent = folder(slash === -1 ? "" : path.slice(0, slash));
    const name = path.slice(slash + 1);
    if (!parent.entries.some((entry) => entry.type === "directory" && entry.name === name)) parent.entries.push({ type: "directory", name, oid: current.oid });
  }
  const root = folders.get("")!;
  root.entries.sort(compareTreeItems);
  root.oid = gitTreeId(root.entries);
  return { root: root.oid, trees: [...folders.values()].map((f) => ({ oid: f.oid!, entries: f.entries })) };
}

/** How the hub answers an upstream failure. */
export function upstreamHubError(error: UpstreamError, what: string, origin: string): HubError {
  switch (error.kind) {
    case "not_found": {
      const code = error.code === "RevisionNotFound" || error.code === "EntryNotFound" ? error.code : "RepoNotFound";
      return new HubError(404, `${what}: the upstream hub ${origin} does not have it (${error.message})`, code);
    }
    case "gated":
      return new HubError(
        403,
        `${what}: the upstream hub ${origin} does not let castor's identity (CASTOR_UPSTREAM_TOKEN) download this gated repository: ${error.message}`,
        "GatedRepo",
      );
    case "rate_limited": {
      const seconds = Math.max(1, Math.ceil((error.details.retryAfterMs ?? 60_000) / 1000));
      return new HubError(429, `${what}: the upstream hub ${origin} limits castor's requests; try again in ${seconds} s`, undefined, undefined, seconds);
    }
    case "timeout":
      return new HubError(504, `${what}: the upstream hub ${origin} did not answer in time, and castor holds no copy: ${error.message}`);
    case "unreachable":
      return new HubError(502, `${what}: the upstream hub ${origin} cannot be reached, and castor holds no copy: ${error.message}`);
    default:
      return new HubError(502, `${what}: ${error.message}`);
  }
}
