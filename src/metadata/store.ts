/**
 * The metadata seam: everything castor remembers besides blob bytes. One interface, an
 * embedded SQLite implementation (default) and a PostgreSQL one (scale-out); both pass the
 * contract suites in test/contract/. All methods are async because the PostgreSQL
 * implementation is.
 *
 * It is made of record families, each an interface of its own: the hub's (repositories and
 * revisions, histories, hub tokens: declared here, with the history codecs in history.ts), the
 * CAS (xorbs, files, shards, dedup index: cas.ts, with the packed-table codecs), garbage
 * collection (leases and deletions: gc.ts), scans of whole tables in key order (gc, fsck and
 * migration read them: scan.ts), imports (`castor migrate`: migration.ts) and storage
 * statistics (stats.ts). The records themselves are plain types in records.ts.
 *
 * Rules every implementation keeps (the contract suites check them):
 * - No caching: each call reads the database, so a write by another process (an admin command
 *   next to a running server, another node) is visible to the very next call.
 * - Lists come back in creation order, so output does not depend on a backend's collation.
 * - Dates round-trip to the millisecond.
 * - The store records facts and does not judge them: it returns revoked and expired tokens
 *   as they are; deciding whether a token is usable is the hub's job.
 * - Names are stored exactly as given (case-sensitive); validating them is the hub's job.
 */
import type { CasMetadataStore } from "./cas.js";
import type { GcRecords } from "./gc.js";
import type { MetadataMigration } from "./migration.js";
import type { MirrorRecords } from "./mirror.js";
import type {
  BranchAdvance,
  BranchAdvanceOutcome,
  CommitRecord,
  HubToken,
  NewHubToken,
  RefChange,
  RefChangeOutcome,
  Repo,
  RepoInit,
  RepoType,
  Revision,
  RevisionKind,
  TreeRecord,
} from "./records.js";
import type { ScanRecords } from "./scan.js";
import type { StatsMetadata } from "./stats.js";

export type * from "./records.js";
export { REPO_TYPES } from "./records.js";
export type { CasMetadataStore } from "./cas.js";
export type { GcRecords } from "./gc.js";
export type { MetadataMigration } from "./migration.js";
export type { MirrorRecords } from "./mirror.js";
export type { ScanRecords } from "./scan.js";
export type { StatsMetadata, StatsSample, StorageTotals, XorbFootprint, XorbTotals } from "./stats.js";
export { AlreadyExistsError, CorruptRecordError, InvalidRecordError, NotFoundError } from "./errors.js";

/** Repositories and their revisions. */
export interface RepoRecords {
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
}

/** Commits, trees and moving branches to new commits. */
export interface HistoryRecords {
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
   * Stores the commits and trees and creates, moves or deletes the revision, all in one
   * transaction, if the revision is still as `expected` says; otherwise writes nothing. Of
   * concurrent changes from the same state — in this process or any other on the same
   * database — exactly one answers "changed". InvalidRecordError (nothing written) for an
   * unstorable tree or commit.
   */
  updateRef(change: RefChange): Promise<RefChangeOutcome>;
}

/** Hub tokens with their repository links. */
export interface TokenRecords {
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

/** The hub's records: repositories, their revisions and histories, hub tokens. */
export type HubMetadataStore = RepoRecords & HistoryRecords & TokenRecords;

/**
 * Everything castor keeps besides blobs: one record family per interface (record-families.ts
 * lists them and composes a backend's family objects into one store).
 */
export interface MetadataStore extends RepoRecords, HistoryRecords, TokenRecords, CasMetadataStore, GcRecords, ScanRecords, MetadataMigration, StatsMetadata {
  /** What the mirror of an upstream hub remembers (mirror.ts), a family callers reach directly. */
  readonly mirror: MirrorRecords;
  /** Resolves when the store answers a trivial query (for /readyz). */
  ping(): Promise<void>;
  close(): Promise<void>;
}
