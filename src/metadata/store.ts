/**
 * The metadata seam: everything castor remembers besides blob bytes. One interface, an
 * embedded SQLite implementation (default) and a PostgreSQL one (scale-out); both pass the
 * contract suite in test/contract/metadata-store.ts. All methods are async because the
 * PostgreSQL implementation is.
 *
 * It has two halves: the hub (repositories, revisions, hub tokens), declared here, and the CAS
 * (xorbs, files, shards, dedup index), declared in cas.ts with the packed-table codecs; and
 * the export/import methods `castor migrate` copies a store with (migration.ts).
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
import type { MetadataMigration } from "./migration.js";

export type { CasMetadataStore, FileRecord, FileTerm, ShardRegistration, StoredChunk, XorbRecord } from "./cas.js";
export type {
  DatedFile,
  DatedXorb,
  DedupEntry,
  ExportPage,
  FileRepoLink,
  MetadataMigration,
  Sha256IndexEntry,
  ShardRow,
} from "./migration.js";

export { REPO_TYPES, type RepoType } from "../format/repo.js";

export type Access = "read" | "write";

export interface Repo {
  /** Internal numeric key; stable within one metadata store. */
  id: number;
  type: RepoType;
  /** `namespace/name`. */
  name: string;
  createdAt: Date;
}

export type RevisionKind = "branch" | "tag";

export interface Revision {
  repoId: number;
  /** May contain `/` (e.g. `feature/x`). */
  name: string;
  kind: RevisionKind;
  createdAt: Date;
}

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
}

export type NewHubToken = Omit<HubToken, "createdAt" | "revokedAt">;

export { AlreadyExistsError, CorruptRecordError, InvalidRecordError, NotFoundError } from "./errors.js";

/** The hub's records: repositories, their revisions, hub tokens. */
export interface HubMetadataStore {
  /** Creates the repository and its `main` branch atomically. AlreadyExistsError if present. */
  createRepo(type: RepoType, name: string): Promise<Repo>;
  getRepo(type: RepoType, name: string): Promise<Repo | null>;
  getRepoById(id: number): Promise<Repo | null>;
  /** Every repository, in creation order. */
  listRepos(): Promise<Repo[]>;

  /**
   * AlreadyExistsError if the repository already has a revision of that name (whatever its
   * kind); NotFoundError if there is no repository with that id.
   */
  createRevision(repoId: number, name: string, kind: RevisionKind): Promise<Revision>;
  getRevision(repoId: number, name: string): Promise<Revision | null>;
  /** The repository's revisions in creation order (`main` first); empty for an unknown id. */
  listRevisions(repoId: number): Promise<Revision[]>;

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
export interface MetadataStore extends HubMetadataStore, CasMetadataStore, MetadataMigration {
  /** Resolves when the store answers a trivial query (for /readyz). */
  ping(): Promise<void>;
  close(): Promise<void>;
}
