/**
 * The scale-out metadata store: PostgreSQL through `pg`, shared by every castor node. It keeps
 * the SQLite store's semantics (see sqlite.ts and the contract suite) with what a shared server
 * adds: migrations under an advisory lock (postgres/schema.ts), exact "did I insert it?"
 * answers across connections, and shard registrations as one transaction of a few batched
 * statements in key order (postgres/cas.ts).
 *
 * The records live in one file per family, behind this one `MetadataStore`:
 * `postgres/connection.ts` (the pool), `postgres/hub.ts` (repositories, revisions, hub
 * tokens), `postgres/cas.ts` (xorbs, files, shards, dedup index) and `postgres/migration.ts`
 * (export and import for `castor migrate`).
 */
import type { Hash } from "../format/hash.js";
import type { FileRecord, ShardRegistration, XorbRecord } from "./cas.js";
import type { DatedFile, DatedXorb, DedupEntry, FileRepoLink, Sha256IndexEntry, ShardRow } from "./migration.js";
import { PostgresCasRecords } from "./postgres/cas.js";
import { PostgresConnection, type PostgresStoreOptions } from "./postgres/connection.js";
import { PostgresHubRecords } from "./postgres/hub.js";
import { PostgresMigrationRecords } from "./postgres/migration.js";
import type { HubToken, MetadataStore, NewHubToken, Repo, RepoType, Revision, RevisionKind } from "./store.js";

export { DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_POOL_SIZE, PostgresConnectionError, type PostgresStoreOptions } from "./postgres/connection.js";
export { MIGRATIONS, PostgresSchemaError } from "./postgres/schema.js";

export class PostgresMetadataStore implements MetadataStore {
  /**
   * Connects to `databaseUrl` (a `postgres://` URL), brings the schema up to date and returns
   * the store. PostgresConnectionError when the server cannot be reached or refuses the login;
   * PostgresSchemaError when a newer castor migrated the database.
   */
  static async open(databaseUrl: string, options: PostgresStoreOptions = {}): Promise<PostgresMetadataStore> {
    return new PostgresMetadataStore(await PostgresConnection.open(databaseUrl, options));
  }

  /** Most connections this store holds at once. */
  readonly poolSize: number;
  private readonly hub: PostgresHubRecords;
  private readonly cas: PostgresCasRecords;
  private readonly migration: PostgresMigrationRecords;

  private constructor(private readonly connection: PostgresConnection) {
    this.poolSize = connection.poolSize;
    this.hub = new PostgresHubRecords(connection);
    this.cas = new PostgresCasRecords(connection);
    this.migration = new PostgresMigrationRecords(connection, this.hub, this.cas);
  }

  // Hub records (postgres/hub.ts)
  createRepo(type: RepoType, name: string): Promise<Repo> {
    return this.hub.createRepo(type, name);
  }
  getRepo(type: RepoType, name: string): Promise<Repo | null> {
    return this.hub.getRepo(type, name);
  }
  getRepoById(id: number): Promise<Repo | null> {
    return this.hub.getRepoById(id);
  }
  listRepos(): Promise<Repo[]> {
    return this.hub.listRepos();
  }
  createRevision(repoId: number, name: string, kind: RevisionKind): Promise<Revision> {
    return this.hub.createRevision(repoId, name, kind);
  }
  getRevision(repoId: number, name: string): Promise<Revision | null> {
    return this.hub.getRevision(repoId, name);
  }
  listRevisions(repoId: number): Promise<Revision[]> {
    return this.hub.listRevisions(repoId);
  }
  createHubToken(token: NewHubToken): Promise<HubToken> {
    return this.hub.createHubToken(token);
  }
  findHubTokenBySecretHash(secretHash: string): Promise<HubToken | null> {
    return this.hub.findHubTokenBySecretHash(secretHash);
  }
  listHubTokens(): Promise<HubToken[]> {
    return this.hub.listHubTokens();
  }
  revokeHubToken(id: string): Promise<boolean> {
    return this.hub.revokeHubToken(id);
  }

  // CAS records (postgres/cas.ts)
  putXorb(xorb: XorbRecord): Promise<boolean> {
    return this.cas.putXorb(xorb);
  }
  getXorbs(hashes: readonly Hash[]): Promise<Map<string, XorbRecord>> {
    return this.cas.getXorbs(hashes);
  }
  getXorbSize(hash: Hash): Promise<number | null> {
    return this.cas.getXorbSize(hash);
  }
  registerShard(registration: ShardRegistration): Promise<boolean> {
    return this.cas.registerShard(registration);
  }
  getFile(hash: Hash): Promise<FileRecord | null> {
    return this.cas.getFile(hash);
  }
  isFileInRepo(fileHash: Hash, repoId: number): Promise<boolean> {
    return this.cas.isFileInRepo(fileHash, repoId);
  }
  findFileBySha256(repoId: number, sha256: Uint8Array): Promise<Hash | null> {
    return this.cas.findFileBySha256(repoId, sha256);
  }
  findDedupXorbs(chunkHash: Hash, limit: number): Promise<Hash[]> {
    return this.cas.findDedupXorbs(chunkHash, limit);
  }

  // Migration (postgres/migration.ts)
  importRepo(repo: Omit<Repo, "id">): ReturnType<MetadataStore["importRepo"]> {
    return this.migration.importRepo(repo);
  }
  importRevisions(revisions: readonly Revision[]): Promise<number> {
    return this.migration.importRevisions(revisions);
  }
  importHubTokens(tokens: readonly HubToken[]): Promise<number> {
    return this.migration.importHubTokens(tokens);
  }
  exportXorbs(after: string | null, limit: number): ReturnType<MetadataStore["exportXorbs"]> {
    return this.migration.exportXorbs(after, limit);
  }
  importXorbs(xorbs: readonly DatedXorb[]): Promise<number> {
    return this.migration.importXorbs(xorbs);
  }
  exportFiles(after: string | null, limit: number): ReturnType<MetadataStore["exportFiles"]> {
    return this.migration.exportFiles(after, limit);
  }
  importFiles(files: readonly DatedFile[]): Promise<number> {
    return this.migration.importFiles(files);
  }
  exportFileRepoLinks(after: string | null, limit: number): ReturnType<MetadataStore["exportFileRepoLinks"]> {
    return this.migration.exportFileRepoLinks(after, limit);
  }
  importFileRepoLinks(links: readonly FileRepoLink[]): Promise<number> {
    return this.migration.importFileRepoLinks(links);
  }
  exportSha256Index(after: string | null, limit: number): ReturnType<MetadataStore["exportSha256Index"]> {
    return this.migration.exportSha256Index(after, limit);
  }
  importSha256Index(entries: readonly Sha256IndexEntry[]): Promise<number> {
    return this.migration.importSha256Index(entries);
  }
  exportShards(after: string | null, limit: number): ReturnType<MetadataStore["exportShards"]> {
    return this.migration.exportShards(after, limit);
  }
  importShards(shards: readonly ShardRow[]): Promise<number> {
    return this.migration.importShards(shards);
  }
  exportDedupEntries(after: string | null, limit: number): ReturnType<MetadataStore["exportDedupEntries"]> {
    return this.migration.exportDedupEntries(after, limit);
  }
  importDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    return this.migration.importDedupEntries(entries);
  }

  async ping(): Promise<void> {
    await this.connection.query("ping", "SELECT 1", []);
  }

  close(): Promise<void> {
    return this.connection.close();
  }
}
