/**
 * How many of a file's chunks other files share: what deduplication saves on one file, as the
 * web interface's file view shows it (`GET /api/castor/sharing`).
 *
 * A chunk of a Xet-stored file is a (xorb, chunk index) its terms name. Another file shares it
 * when its own terms name the same one: an upload that deduplicated against the first (or the
 * other way round) references the very chunk already stored, never a copy of it. "Other files"
 * are the live files (hub/stats.ts says which) of every repository at another place than the
 * one asked about: another path, or another repository — the identical file at another place
 * shares every chunk. Inline files have no chunks.
 *
 * Cost: the live-file walk of `castor stats` (all repositories' trees), then the xorbs of the
 * distinct Xet files (`fileXorbs`, batched), then the full term lists of only those files that
 * have a xorb in common with this one. Memory holds the distinct live file hashes.
 */
import { hashFromHex, hashToHex } from "../format/hash.js";
import type { FileRecord, MetadataStore, Repo } from "../metadata/store.js";
import { formatRepoRef } from "./names.js";
import { batches, forEachLiveFile } from "./stats.js";

export type SharingStore = Pick<MetadataStore, "listRepos" | "listRevisions" | "getCommit" | "getTree" | "getFile" | "getXorbs" | "fileXorbs">;

export interface ChunkSharing {
  /** Distinct chunks the file's terms name, and their uncompressed bytes. */
  chunks: number;
  bytes: number;
  /** Of those, the ones another live file also names. */
  sharedChunks: number;
  sharedBytes: number;
  /** Other live files (a place: repository and path) that share at least one chunk. */
  otherFiles: number;
  /** The repositories those files are in (`type:ns/name`), sorted. */
  repositories: string[];
}

/** Each chunk as "xorb-hex index". */
function chunkKeys(file: FileRecord, visit: (key: string, xorbHex: string, index: number) => void): void {
  for (const term of file.terms) {
    const xorb = hashToHex(term.xorbHash);
    for (let index = term.chunkStart; index < term.chunkEnd; index++) visit(`${xorb} ${index}`, xorb, index);
  }
}

/**
 * The sharing of the Xet file `xetHash` found at `path` of `repo`; null when the metadata has no
 * record of the file (castor fsck reports that).
 */
export async function chunkSharing(store: SharingStore, repo: Repo, path: string, xetHash: string, signal?: AbortSignal): Promise<ChunkSharing | null> {
  const file = await store.getFile(hashFromHex(xetHash));
  if (file === null) return null;

  // The file's chunks with their sizes, read from its xorbs' chunk tables.
  const xorbHexes = new Set<string>();
  chunkKeys(file, (_key, xorb) => xorbHexes.add(xorb));
  const xorbs = await store.getXorbs([...xorbHexes].map(hashFromHex));
  const sizes = new Map<string, number>();
  chunkKeys(file, (key, xorb, index) => sizes.set(key, xorbs.get(xorb)?.chunks[index]?.uncompressedLength ?? 0));

  // Every other place of a live Xet file: file hash → the repositories holding it there.
  const places = new Map<string, { count: number; repos: Set<string> }>();
  for (const other of await store.listRepos()) {
    signal?.throwIfAborted();
    await forEachLiveFile(store, other, signal, (otherPath, entry) => {
      if (entry.xetHash === null || (other.id === repo.id && otherPath === path && entry.xetHash === xetHash)) return;
      const found = places.get(entry.xetHash) ?? { count: 0, repos: new Set<string>() };
      found.count++;
      found.repos.add(formatRepoRef(other));
      places.set(entry.xetHash, found);
    });
  }

  const shared = new Set<string>();
  const sharing: { count: number; repos: Set<string> }[] = [];
  const copies = places.get(xetHash);
  if (copies !== undefined) {
    for (const key of sizes.keys()) shared.add(key);
    sharing.push(copies);
  }
  const others = [...places.keys()].filter((hash) => hash !== xetHash);
  for (const batch of batches(others)) {
    signal?.throwIfAborted();
    for (const [hex, otherXorbs] of await store.fileXorbs(batch.map(hashFromHex))) {
      if (!otherXorbs.some((xorb) => xorbHexes.has(hashToHex(xorb)))) continue;
      // A xorb in common: whether chunks are too takes the other file's terms.
      const other = await store.getFile(hashFromHex(hex));
      if (other === null) continue;
      let shares = false;
      chunkKeys(other, (key) => {
        if (!sizes.has(key)) return;
        shares = true;
        shared.add(key);
      });
      if (shares) sharing.push(places.get(hex)!);
    }
  }

  let bytes = 0;
  for (const size of sizes.values()) bytes += size;
  let sharedBytes = 0;
  for (const key of shared) sharedBytes += sizes.get(key)!;
  return {
    chunks: sizes.size,
    bytes,
    sharedChunks: shared.size,
    sharedBytes,
    otherFiles: sharing.reduce((sum, place) => sum + place.count, 0),
    repositories: [...new Set(sharing.flatMap((place) => [...place.repos]))].sort(),
  };
}
