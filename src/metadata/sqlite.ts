/**
 * The embedded metadata store: one SQLite file, `${dataDir}/metadata.sqlite`, through
 * better-sqlite3. WAL lets readers run beside a writer, and the busy timeout makes a second
 * process (an admin command next to the running server) wait for the write lock instead of
 * failing. Statements are prepared once; rows are never cached, so another process's writes
 * are seen by the next call.
 *
 * The WAL stays bounded: every statement runs to completion synchronously (no `iterate()`, no
 * read transaction spanning an await), so no read transaction outlives its call and the
 * automatic checkpoint (every 1000 pages) can always reset the log; `journal_size_limit` then
 * truncates a log that one large transaction (a big shard registration) grew past the limit.
 * The one transaction that spans awaits is a large shard registration's, on a connection of
 * its own (sqlite/shard-registration.ts); the other writes wait for it (sqlite/connection.ts).
 *
 * The records live in one file per family, behind this one `MetadataStore`:
 * `sqlite/schema.ts` (file, settings, migrations), `sqlite/hub.ts` (repositories, revisions,
 * hub tokens), `sqlite/cas.ts` (xorbs, files, shards, dedup index) and `sqlite/migration.ts`
 * (export and import for `castor migrate`).
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Hash } from "../format/hash.js";
import type { FileRecord, ShardRegistration, XorbRecord } from "./cas.js";
import type { DatedFile, DatedXorb, DedupEntry, FileRepoLink, Sha256IndexEntry, ShardRow } from "./migration.js";
import { SqliteCasRecords } from "./sqlite/cas.js";
import { SqliteConnection } from "./sqlite/connection.js";
import { SqliteHubRecords } from "./sqlite/hub.js";
import { SqliteMigrationRecords } from "./sqlite/migration.js";
import { METADATA_FILE_NAME } from "./sqlite/schema.js";
import type { HubToken, MetadataStore, NewHubToken, Repo, RepoType, Revision, RevisionKind } from "./store.js";

export { BUSY_TIMEOUT_MS, JOURNAL_SIZE_LIMIT_BYTES, METADATA_FILE_NAME, MIGRATIONS, MetadataSchemaError } from "./sqlite/schema.js";

export class SqliteMetadataStore implements MetadataStore {
  /** Opens (creating the folder, file and schema as needed) `${dataDir}/metadata.sqlite`. */
  static async open(dataDir: string): Promise<SqliteMetadataStore> {
    mkdirSync(dataDir, { recursive: true });
    return new SqliteMetadataStore(new SqliteConnection(join(dataDir, METADATA_FILE_NAME)));
  }

  readonly path: string;
  private readonly hub: SqliteHubRecords;
  private readonly cas: SqliteCasRecords;
  private readonly migration: SqliteMigrationRecords;
  private readonly ping_;

  private constructor(private readonly connection: SqliteConnection) {
    this.path = connection.path;
    this.hub = new SqliteHubRecords(connection);
    this.cas = new SqliteCasRecords(connection);
    this.migration = new SqliteMigrationRecords(connection, this.hub.sql, this.cas.sql);
    this.ping_ = connection.db.prepare<[], { ok: number }>("SELECT 1 AS ok");
  }

  // Hub records (sqlite/hub.ts)
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

  // CAS records (sqlite/cas.ts)
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

  // Migration (sqlite/migration.ts)
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
    this.ping_.get();
  }

  async close(): Promise<void> {
    this.cas.close();
    this.connection.close();
  }
}
