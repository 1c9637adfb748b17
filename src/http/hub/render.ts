/**
 * The JSON Hugging Face clients read — tree entries, repository info, commits — built from the
 * domain records (src/hub), which know nothing of these field names. The shapes are declared in
 * src/wire/hub.ts, which the routes' response schemas and these functions' types share.
 */
import { lfsPointerSize } from "../../format/git.js";
import type { ListedEntry } from "../../hub/histories.js";
import type { CommitRecord, Repo, TreeFileEntry } from "../../hub/records.js";
import type * as wire from "../../wire/hub.js";

/**
 * A tree or paths-info entry: `size` always (clients index it), `lfs` + `xetHash` for
 * Xet-stored files, `lastCommit` when given (expanded listings; absent when not found within
 * the walk's bound).
 */
export function treeEntryJson({ path, entry }: ListedEntry, lastCommit?: CommitRecord): wire.TreeEntry {
  const json: wire.TreeEntry =
    entry.type === "directory" ? { type: "directory", path, oid: entry.oid, size: 0 } : { type: "file", path, oid: entry.oid, size: entry.size };
  if (entry.type === "file" && entry.xetHash !== null) {
    json.lfs = { oid: entry.sha256, size: entry.size, pointerSize: lfsPointerSize(entry.sha256, entry.size) };
    json.xetHash = entry.xetHash;
  }
  if (lastCommit !== undefined) json.lastCommit = { id: lastCommit.oid, title: lastCommit.title, date: lastCommit.createdAt.toISOString() };
  return json;
}

export function siblingJson(path: string, entry: TreeFileEntry, blobs: boolean): wire.Sibling {
  if (!blobs) return { rfilename: path };
  const sibling: wire.Sibling = { rfilename: path, size: entry.size, blobId: entry.oid };
  if (entry.xetHash !== null) sibling.lfs = { size: entry.size, sha256: entry.sha256, pointerSize: lfsPointerSize(entry.sha256, entry.size) };
  return sibling;
}

/** The fields of repository info and repository listings. */
export function repoSummaryJson(repo: Repo, head: CommitRecord | null): wire.RepoSummary {
  const [author] = repo.name.split("/");
  return {
    _id: `${repo.type}-${repo.id}`,
    id: repo.name,
    ...(repo.type === "model" ? { modelId: repo.name } : {}),
    author,
    sha: head?.oid,
    lastModified: (head?.createdAt ?? repo.createdAt).toISOString(),
    createdAt: repo.createdAt.toISOString(),
    private: repo.private,
    disabled: false,
    gated: false,
    downloads: 0,
    likes: 0,
    tags: [],
    // castor's own field (clients ignore it): a read-only mirror of the upstream hub's repository.
    ...(repo.mirror ? { mirror: true } : {}),
  };
}

export function commitJson(commit: CommitRecord): wire.Commit {
  const body = commit.message.slice(commit.title.length).trim();
  return {
    id: commit.oid,
    title: commit.title,
    message: body,
    authors: [{ user: commit.author }],
    date: commit.createdAt.toISOString(),
    parents: commit.parentOids,
  };
}
