/**
 * The records the metadata seam stores and returns, as plain types: what every record family
 * (store.ts, cas.ts, gc.ts, scan.ts, migration.ts, stats.ts) and both backends share. Declared
 * here, apart from the family interfaces, so that a family naming another's records imports
 * this module rather than that family (which would close an import cycle).
 */
import type { Hash } from "../format/hash.js";
import type { RepoType } from "../format/repo.js";

export { REPO_TYPES, type RepoType } from "../format/repo.js";

// ---------------------------------------------------------------------------------------------
// The hub: repositories, revisions, histories, hub tokens.

export type Access = "read" | "write";

export interface Repo {
  /** Internal numeric key; stable within one metadata store, and never reused after the repository is deleted. */
  id: number;
  type: RepoType;
  /** `namespace/name`. */
  name: string;
  createdAt: Date;
  /** Private repositories are seen only by tokens that cover them; public ones are readable by anyone. */
  private: boolean;
  /** Present (true) for a repository mirrored from the upstream hub (mirror.ts); absent for castor's own. */
  mirror?: true;
}

/** What a repository starts with: its visibility and the initial commit `main` points at. */
export interface RepoInit {
  private: boolean;
  commit: CommitRecord;
  /** The initial commit's (empty) root tree. */
  tree: TreeRecord;
}

export type RevisionKind = "branch" | "tag";

export interface Revision {
  repoId: number;
  /** May contain `/` (e.g. `feature/x`). */
  name: string;
  kind: RevisionKind;
  createdAt: Date;
  /**
   * The commit the branch or tag points at. null only for revisions made before castor kept
   * histories (and by `createRepo` without a `RepoInit`); the hub gives those an initial commit.
   */
  commitOid: string | null;
}

/**
 * One entry of a git tree as castor keeps it: git's own fields (name, kind, object id) plus
 * what listings need without opening the blob. Git orders entries by name with directories
 * compared as `name/`; the hub keeps that order and the store returns entries as given.
 */
export type TreeEntry = TreeDirectoryEntry | TreeFileEntry;

export interface TreeDirectoryEntry {
  type: "directory";
  /** One path segment. */
  name: string;
  /** The git tree id (40 hex). */
  oid: string;
}

export interface TreeFileEntry {
  type: "file";
  name: string;
  /** The git blob id (40 hex): of the content for inline files, of the LFS pointer for Xet-stored ones. */
  oid: string;
  /** Bytes of the file's content (not of its pointer). */
  size: number;
  /** SHA-256 of the content (64 hex): the blob-store key of inline content, the LFS oid of Xet-stored files. */
  sha256: string;
  /** Xet file hash (64 hex) of a Xet-stored file; null for inline files. */
  xetHash: string | null;
}

/** A git tree of one repository; `oid` is git's id of the tree object that `entries` serialize to. */
export interface TreeRecord {
  oid: string;
  entries: TreeEntry[];
}

/** A git commit of one repository. Immutable: clients cache by commit id forever. */
export interface CommitRecord {
  /** git's id of `object` (40 hex). */
  oid: string;
  treeOid: string;
  /** Empty for a repository's initial commit. */
  parentOids: string[];
  /** The message's first line (the commit's `summary`). */
  title: string;
  /** The whole message as written into the object. */
  message: string;
  /** The user name recorded as author and committer. */
  author: string;
  /** Whole seconds, git's resolution. */
  createdAt: Date;
  /** The commit object's text (without git's `commit <length>\0` header); hashing it gives `oid`. */
  object: string;
}

/** A commit to apply to a branch, atomically, only if the branch still points at `expectedHead`. */
export interface BranchAdvance {
  repoId: number;
  branch: string;
  expectedHead: string | null;
  commit: CommitRecord;
  /** The trees the commit introduces; trees the repository already has may be included and are kept once. */
  trees: TreeRecord[];
}

/** `moved`: the branch no longer points at `expectedHead` (nothing written); `no_branch`: no such branch (or it is a tag). */
export type BranchAdvanceOutcome = "advanced" | "moved" | "no_branch";

/**
 * A ref created, moved or deleted with the history it brings (a git push), applied only if the
 * ref is still as the change expects it.
 */
export interface RefChange {
  repoId: number;
  name: string;
  kind: RevisionKind;
  /** The commit the ref of this kind points at now; null: no revision of that name exists. */
  expected: string | null;
  /** The commit it points at afterwards; null deletes it. */
  target: string | null;
  /** Commits the target needs that the repository may not have yet; ones it has are kept once. */
  commits: CommitRecord[];
  /** The trees of those commits, likewise. */
  trees: TreeRecord[];
}

/** `moved`: the revision is not as `expected` says (another commit, another kind, there or not there); nothing was written. */
export type RefChangeOutcome = "changed" | "moved";

export interface HubToken {
  /** Public identifier shown by `token list` and used by `token revoke` (not the secret). */
  id: string;
  /** Hex SHA-256 of the secret `hf_…` string; the secret itself is never stored. */
  secretHash: string;
  access: Access;
  /** Repository ids the token covers (ascending, no duplicates), or "all". */
  repos: number[] | "all";
  createdAt: Date;
  /** null = never expires. */
  expiresAt: Date | null;
  /** null = active. */
  revokedAt: Date | null;
  /** The user the token acts for (`whoami`'s name, author of its commits); null for tokens made before castor had users. */
  owner: string | null;
  /**
   * Namespaces the token covers wholly, repositories created later included; a write token may
   * create repositories in them. Ascending, no duplicates.
   */
  namespaces: string[];
}

export type NewHubToken = Omit<HubToken, "createdAt" | "revokedAt" | "owner" | "namespaces"> & {
  owner?: string | null;
  namespaces?: string[];
};

// ---------------------------------------------------------------------------------------------
// The CAS: xorbs, files, shard registrations.

/** One chunk of a stored xorb, in xorb order. */
export interface StoredChunk {
  hash: Hash;
  uncompressedLength: number;
  /** End offset of this chunk (header + payload) in the serialized xorb: E[i] of §5.5. */
  serializedEnd: number;
}

export interface XorbRecord {
  hash: Hash;
  /** Serialized length as stored (chunks only, never a footer). */
  serializedLength: number;
  uncompressedLength: number;
  /** 1 to MAX_XORB_CHUNKS chunks. */
  chunks: StoredChunk[];
}

/** A term of a file: chunks [chunkStart, chunkEnd) of one xorb. */
export interface FileTerm {
  xorbHash: Hash;
  chunkStart: number;
  chunkEnd: number;
  /** Uncompressed bytes of the term. */
  unpackedLength: number;
}

export interface FileRecord {
  hash: Hash;
  /** Σ term lengths. */
  size: number;
  terms: FileTerm[];
  /** Raw SHA-256 digest of the whole file (standard byte order) when the uploader sent it. */
  sha256: Uint8Array | null;
}

/** Everything one accepted shard registers, written in ONE transaction. */
export interface ShardRegistration {
  /** Identity of the shard's content (so a re-upload of the identical shard answers result 0). */
  shardHash: Hash;
  /** Repository every file of the shard is linked to (the uploading token's repository). */
  repoId: number;
  /** Files in shard order; a file hash may repeat — the first occurrence wins. */
  files: FileRecord[];
  /**
   * Chunk hash → xorb hash entries of the global-dedup index. Their order is the index's
   * "oldest first" order among entries of this registration.
   */
  dedupEntries: { chunkHash: Hash; xorbHash: Hash }[];
}

// ---------------------------------------------------------------------------------------------
// Garbage collection.

/** A lease taken: the object is safe from the collector until the lease is older than a run's cutoff. */
export interface Lease {
  /** Advances each time the collector condemns the object: `putXorb` checks it did not. */
  epoch: number;
}

// ---------------------------------------------------------------------------------------------
// Rows of whole tables, as scans (scan.ts) read them and migration (migration.ts) writes them.

/** One page of a scan: rows in key order. */
export interface ScanPage<T> {
  rows: T[];
  /** Cursor of the next page, or null when this page reached the end of the table. */
  next: string | null;
}

export interface DatedXorb extends XorbRecord {
  createdAt: Date;
}

export interface DatedFile extends FileRecord {
  createdAt: Date;
}

export interface ShardRow {
  hash: Hash;
  createdAt: Date;
}

export interface FileRepoLink {
  fileHash: Hash;
  repoId: number;
}

export interface Sha256IndexEntry {
  repoId: number;
  /** Raw SHA-256 digest. */
  sha256: Uint8Array;
  fileHash: Hash;
}

export interface DedupEntry {
  chunkHash: Hash;
  xorbHash: Hash;
}

/** A commit of the repository `repoId`. */
export interface RepoCommit extends CommitRecord {
  repoId: number;
}

/** A tree of the repository `repoId`. */
export interface RepoTree extends TreeRecord {
  repoId: number;
}
