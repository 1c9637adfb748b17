/**
 * The metadata seam: everything castor remembers besides blob bytes. One interface, an
 * embedded SQLite implementation (default) and a PostgreSQL one (scale-out); both pass the
 * contract suite in test/contract/metadata-store.ts. All methods are async because the
 * PostgreSQL implementation is.
 *
 * This first part covers the hub (repositories, revisions, hub tokens). The CAS tables (xorbs,
 * files, shards, dedup index) are added by the write-path work.
 */

export const REPO_TYPES = ["model", "dataset", "space"] as const;
export type RepoType = (typeof REPO_TYPES)[number];

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
  /** Repository ids the token covers, or "all". */
  repos: number[] | "all";
  createdAt: Date;
  /** null = never expires. */
  expiresAt: Date | null;
  /** null = active. */
  revokedAt: Date | null;
}

export type NewHubToken = Omit<HubToken, "createdAt" | "revokedAt">;

/** Thrown when creating something that already exists (repo, revision, token id). */
export class AlreadyExistsError extends Error {
  override readonly name = "AlreadyExistsError";
}

export interface MetadataStore {
  /** Creates the repository and its `main` branch atomically. AlreadyExistsError if present. */
  createRepo(type: RepoType, name: string): Promise<Repo>;
  getRepo(type: RepoType, name: string): Promise<Repo | null>;
  getRepoById(id: number): Promise<Repo | null>;
  listRepos(): Promise<Repo[]>;

  /** AlreadyExistsError if the repository already has a revision of that name. */
  createRevision(repoId: number, name: string, kind: RevisionKind): Promise<Revision>;
  getRevision(repoId: number, name: string): Promise<Revision | null>;
  listRevisions(repoId: number): Promise<Revision[]>;

  createHubToken(token: NewHubToken): Promise<HubToken>;
  findHubTokenBySecretHash(secretHash: string): Promise<HubToken | null>;
  listHubTokens(): Promise<HubToken[]>;
  /** Marks the token revoked; false when no token has that id. Idempotent. */
  revokeHubToken(id: string): Promise<boolean>;

  /** Resolves when the store answers a trivial query (for /readyz). */
  ping(): Promise<void>;
  close(): Promise<void>;
}
