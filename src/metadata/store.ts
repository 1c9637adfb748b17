/**
 * The metadata seam: everything castor remembers besides blob bytes. One interface, an
 * embedded SQLite implementation (default) and a PostgreSQL one (scale-out); both pass the
 * contract suite in test/contract/metadata-store.ts. All methods are async because the
 * PostgreSQL implementation is.
 *
 * It has two halves: the hub (repositories, revisions, commits and trees, hub tokens),
 * declared here with the history codecs in history.ts, and the CAS (xorbs, files, shards,
 * dedup index), declared in cas.ts with the packed-table codecs; the export/import
 * methods `castor migrate` copies a store with (migration.ts); and the storage-statistics
 * samples and reads (stats.ts).
 *
 * Rules every implementation keeps (the contract suite checks them):
 * - No caching: each call reads the database, so a write by another process (an admin command
 *   next to a running server, another node) is visible to the very next call.
 * - Lists come back in creation order, so output does not depend on a backend's collation.
 * - Dates round-trip to the millisecond.
 * - The store records facts and does not judge them: it returns revoked and expired tokens
 *   as they are; deciding whether a token is usable is the hub's job.
 * - Names are stored exactly as given (case-sensitive); validating them is the hub's job.
 */

import type { RepoType } from "../format/repo.js";
import type { CasMetadataStore } from "./cas.js";
import type { GcRecords } from "./gc.js";
import type { MetadataMigration } from "./migration.js";
import type { StatsMetadata } from "./stats.js";

export type { CasMetadataStore, FileRecord, FileTerm, ShardRegistration, StoredChunk, XorbRecord } from "./cas.js";
export type {
  DatedFile,
  DatedXorb,
  DedupEntry,
  ExportPage,
  FileRepoLink,
  MetadataMigration,
  RepoCommit,
  RepoTree,
  Sha256IndexEntry,
  ShardRow,
} from "./migration.js";

export type { StatsMetadata, StatsSample, StorageTotals, XorbFootprint, XorbTotals } from "./stats.js";

export { REPO_TYPES, type RepoType } from "../format/repo.js";

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

export { AlreadyExistsError, CorruptRecordError, InvalidRecordError, NotFoundError } from "./errors.js";

/** The hub's records: repositories, their revisions and histories, hub tokens. */
export interface HubMetadataStore {
  /**
   * Creates the repository and its `main` branch atomically; with `init`, also its initial tree
   * and commit, which `main` points at. Without `init` the repository is private and `main` has
   * no commit. AlreadyExistsError if present; InvalidRecordError (nothing stored) for an
   * unstorable tree or commit (history.ts says what is checked).
   */
  createRepo(type: RepoType, name: string, init?: RepoInit): Promise<Repo>;
  getRepo(type: RepoType, name: string): Promise<Repo | null>;
  getRepoById(id: number): Promise<Repo | null>;
  /** Every repository, in creation order. */
  listRepos(): Promise<Repo[]>;
  /** false when there is no repository with that id. */
  setRepoPrivate(repoId: number, isPrivate: boolean): Promise<boolean>;
  /**
   * Gives the repository a new `namespace/name` (same type); everything else — id, revisions,
   * commits, token links, file links — stays, being keyed by id. AlreadyExistsError (nothing
   * changed) when a repository of that type already has the name; false when there is no
   * repository with that id.
   */
  renameRepo(repoId: number, name: string): Promise<boolean>;
  /**
   * Deletes the repository with everything that is only its: revisions, commits, trees, its
   * token links, file links and SHA-256 index, in one transaction. Tokens stay (without the
   * link); file records, xorbs, shards, the dedup index and blobs are shared by content and
   * stay too. false when there is no repository with that id.
   */
  deleteRepo(repoId: number): Promise<boolean>;

  /**
   * AlreadyExistsError if the repository already has a revision of that name (whatever its
   * kind); NotFoundError if there is no repository with that id. `commitOid` (default null) is
   * stored as given: whether the repository has that commit is the hub's to check.
   */
  createRevision(repoId: number, name: string, kind: RevisionKind, commitOid?: string | null): Promise<Revision>;
  /** false when the repository has no revision of that name. */
  deleteRevision(repoId: number, name: string): Promise<boolean>;
  getRevision(repoId: number, name: string): Promise<Revision | null>;
  /** The repository's revisions in creation order (`main` first); empty for an unknown id. */
  listRevisions(repoId: number): Promise<Revision[]>;

  getCommit(repoId: number, oid: string): Promise<CommitRecord | null>;
  /**
   * Ids of the repository's commits that start with `prefix` (lowercase hex), in order, at most
   * `limit`: how a short commit id is looked up (two answers mean it is ambiguous).
   */
  commitOidsWithPrefix(repoId: number, prefix: string, limit: number): Promise<string[]>;
  getTree(repoId: number, oid: string): Promise<TreeRecord | null>;
  /**
   * Stores the commit and its trees and moves the branch to it, all in one transaction, if the
   * branch still points at `expectedHead`; otherwise writes nothing. Also how a legacy branch
   * (commitOid null) gets its first commit. Of concurrent advances from the same head — in
   * this process or any other on the same database — exactly one answers "advanced".
   * InvalidRecordError (nothing written) for an unstorable tree or commit.
   */
  advanceBranch(advance: BranchAdvance): Promise<BranchAdvanceOutcome>;

  /**
   * Stores the token and its repository links atomically. Duplicate repository ids collapse.
   * AlreadyExistsError if the id or the secret hash is taken; NotFoundError (and nothing
   * stored) if a listed repository id does not exist.
   */
  createHubToken(token: NewHubToken): Promise<HubToken>;
  /** The token with that secret hash, revoked or expired ones included; null if none. */
  findHubTokenBySecretHash(secretHash: string): Promise<HubToken | null>;
  /** Every token, revoked and expired ones included, in creation order. */
  listHubTokens(): Promise<HubToken[]>;
  /**
   * Marks the token revoked; false when no token has that id. Idempotent: revoking again
   * returns true and keeps the first `revokedAt`.
   */
  revokeHubToken(id: string): Promise<boolean>;
}

/** Everything castor keeps besides blobs, one record family per interface. */
export interface MetadataStore extends HubMetadataStore, CasMetadataStore, GcRecords, MetadataMigration, StatsMetadata {
  /** Resolves when the store answers a trivial query (for /readyz). */
  ping(): Promise<void>;
  close(): Promise<void>;
}
