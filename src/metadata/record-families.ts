/**
 * A `MetadataStore` made of one object per record family — what both backends are: their
 * `repos` (repositories, revisions), `tokens`, `history` (commits, trees, branch heads), `cas`,
 * `gc` (leases and the collector's deletions), `migration` and `stats` (storage-statistics
 * samples and reads) records live in files of their own (sqlite/, postgres/) and this class
 * presents them as the one store the rest of castor uses. A backend adds only `ping` and
 * `close`.
 */
import type { Hash } from "../format/hash.js";
import type { CondemnableKind, CondemnedBlob, CondemnedXorb, DeletedFile, GcRecords, Lease, LeaseKind, MaintenanceRun, SeenRef } from "./gc.js";
import type { CasMetadataStore, FileRecord, PackedShardRegistration, ShardRegistration, XorbRecord } from "./cas.js";
import type { StatsMetadata, StatsSample, XorbFootprint, XorbTotals } from "./stats.js";
import type { DatedFile, DatedXorb, DedupEntry, FileRepoLink, MetadataMigration, RepoCommit, RepoTree, Sha256IndexEntry, ShardRow } from "./migration.js";
import type {
  BranchAdvance,
  BranchAdvanceOutcome,
  CommitRecord,
  HubMetadataStore,
  HubToken,
  MetadataStore,
  NewHubToken,
  Repo,
  RepoInit,
  RepoType,
  Revision,
  RevisionKind,
  TreeRecord,
} from "./store.js";

/** Repositories and their revisions. */
export type RepoRecords = Pick<
  HubMetadataStore,
  | "createRepo"
  | "getRepo"
  | "getRepoById"
  | "listRepos"
  | "setRepoPrivate"
  | "renameRepo"
  | "deleteRepo"
  | "createRevision"
  | "deleteRevision"
  | "getRevision"
  | "listRevisions"
>;
/** Hub tokens with their repository links. */
export type TokenRecords = Pick<HubMetadataStore, "createHubToken" | "findHubTokenBySecretHash" | "listHubTokens" | "revokeHubToken">;
/** Commits, trees and moving branches to new commits. */
export type HistoryRecords = Pick<HubMetadataStore, "getCommit" | "commitOidsWithPrefix" | "getTree" | "advanceBranch">;

export interface RecordFamilies {
  repos: RepoRecords;
  tokens: TokenRecords;
  history: HistoryRecords;
  cas: CasMetadataStore;
  gc: GcRecords;
  migration: MetadataMigration;
  stats: StatsMetadata;
}

export abstract class RecordFamiliesStore implements MetadataStore {
  protected constructor(private readonly families: RecordFamilies) {}

  // Repositories and revisions
  createRepo(type: RepoType, name: string, init?: RepoInit): Promise<Repo> {
    return this.families.repos.createRepo(type, name, init);
  }
  getRepo(type: RepoType, name: string): Promise<Repo | null> {
    return this.families.repos.getRepo(type, name);
  }
  getRepoById(id: number): Promise<Repo | null> {
    return this.families.repos.getRepoById(id);
  }
  listRepos(): Promise<Repo[]> {
    return this.families.repos.listRepos();
  }
  setRepoPrivate(repoId: number, isPrivate: boolean): Promise<boolean> {
    return this.families.repos.setRepoPrivate(repoId, isPrivate);
  }
  renameRepo(repoId: number, name: string): Promise<boolean> {
    return this.families.repos.renameRepo(repoId, name);
  }
  deleteRepo(repoId: number): Promise<boolean> {
    return this.families.repos.deleteRepo(repoId);
  }
  createRevision(repoId: number, name: string, kind: RevisionKind, commitOid?: string | null): Promise<Revision> {
    return this.families.repos.createRevision(repoId, name, kind, commitOid);
  }
  deleteRevision(repoId: number, name: string): Promise<boolean> {
    return this.families.repos.deleteRevision(repoId, name);
  }
  getRevision(repoId: number, name: string): Promise<Revision | null> {
    return this.families.repos.getRevision(repoId, name);
  }
  listRevisions(repoId: number): Promise<Revision[]> {
    return this.families.repos.listRevisions(repoId);
  }

  // Histories
  getCommit(repoId: number, oid: string): Promise<CommitRecord | null> {
    return this.families.history.getCommit(repoId, oid);
  }
  commitOidsWithPrefix(repoId: number, prefix: string, limit: number): Promise<string[]> {
    return this.families.history.commitOidsWithPrefix(repoId, prefix, limit);
  }
  getTree(repoId: number, oid: string): Promise<TreeRecord | null> {
    return this.families.history.getTree(repoId, oid);
  }
  advanceBranch(advance: BranchAdvance): Promise<BranchAdvanceOutcome> {
    return this.families.history.advanceBranch(advance);
  }

  // Hub tokens
  createHubToken(token: NewHubToken): Promise<HubToken> {
    return this.families.tokens.createHubToken(token);
  }
  findHubTokenBySecretHash(secretHash: string): Promise<HubToken | null> {
    return this.families.tokens.findHubTokenBySecretHash(secretHash);
  }
  listHubTokens(): Promise<HubToken[]> {
    return this.families.tokens.listHubTokens();
  }
  revokeHubToken(id: string): Promise<boolean> {
    return this.families.tokens.revokeHubToken(id);
  }

  // CAS records
  putXorb(xorb: XorbRecord, lease?: Lease): Promise<boolean> {
    return this.families.cas.putXorb(xorb, lease);
  }
  getXorbs(hashes: readonly Hash[]): Promise<Map<string, XorbRecord>> {
    return this.families.cas.getXorbs(hashes);
  }
  getChunkTables(hashes: readonly Hash[]): Promise<Map<string, Uint8Array>> {
    return this.families.cas.getChunkTables(hashes);
  }
  getXorbSize(hash: Hash): Promise<number | null> {
    return this.families.cas.getXorbSize(hash);
  }
  registerShard(registration: ShardRegistration | PackedShardRegistration): Promise<boolean> {
    return this.families.cas.registerShard(registration);
  }
  getFile(hash: Hash): Promise<FileRecord | null> {
    return this.families.cas.getFile(hash);
  }
  isFileInRepo(fileHash: Hash, repoId: number): Promise<boolean> {
    return this.families.cas.isFileInRepo(fileHash, repoId);
  }

  isFileInNamedRepo(fileHash: Hash, type: RepoType, name: string): Promise<boolean> {
    return this.families.cas.isFileInNamedRepo(fileHash, type, name);
  }
  findFileBySha256(repoId: number, sha256: Uint8Array): Promise<Hash | null> {
    return this.families.cas.findFileBySha256(repoId, sha256);
  }
  findDedupXorbs(chunkHash: Hash, limit: number): Promise<Hash[]> {
    return this.families.cas.findDedupXorbs(chunkHash, limit);
  }

  // Garbage collection
  leaseObjects(kind: LeaseKind, hashes: readonly Hash[]): Promise<Map<string, Lease>> {
    return this.families.gc.leaseObjects(kind, hashes);
  }
  deleteFiles(hashes: readonly Hash[], cutoff: Date): Promise<DeletedFile[]> {
    return this.families.gc.deleteFiles(hashes, cutoff);
  }
  condemnXorbs(hashes: readonly Hash[], cutoff: Date | null): Promise<CondemnedXorb[]> {
    return this.families.gc.condemnXorbs(hashes, cutoff);
  }
  condemnInline(hashes: readonly Hash[], cutoff: Date | null): Promise<Hash[]> {
    return this.families.gc.condemnInline(hashes, cutoff);
  }
  deleteDanglingDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    return this.families.gc.deleteDanglingDedupEntries(entries);
  }
  condemned(limit: number): Promise<CondemnedBlob[]> {
    return this.families.gc.condemned(limit);
  }
  release(kind: CondemnableKind, hashes: readonly Hash[]): Promise<void> {
    return this.families.gc.release(kind, hashes);
  }
  pruneLeases(cutoff: Date): Promise<number> {
    return this.families.gc.pruneLeases(cutoff);
  }
  deleteHistory(repoId: number, refs: readonly SeenRef[], commitOids: readonly string[], treeOids: readonly string[]): ReturnType<GcRecords["deleteHistory"]> {
    return this.families.gc.deleteHistory(repoId, refs, commitOids, treeOids);
  }
  recordMaintenanceRun(run: MaintenanceRun): Promise<void> {
    return this.families.gc.recordMaintenanceRun(run);
  }
  lastMaintenanceRuns(): Promise<MaintenanceRun[]> {
    return this.families.gc.lastMaintenanceRuns();
  }

  // Migration
  importRepo(repo: Omit<Repo, "id">): ReturnType<MetadataStore["importRepo"]> {
    return this.families.migration.importRepo(repo);
  }
  importRevisions(revisions: readonly Revision[]): Promise<number> {
    return this.families.migration.importRevisions(revisions);
  }
  importHubTokens(tokens: readonly HubToken[]): Promise<number> {
    return this.families.migration.importHubTokens(tokens);
  }
  exportCommits(after: string | null, limit: number): ReturnType<MetadataStore["exportCommits"]> {
    return this.families.migration.exportCommits(after, limit);
  }
  importCommits(commits: readonly RepoCommit[]): Promise<number> {
    return this.families.migration.importCommits(commits);
  }
  exportTrees(after: string | null, limit: number): ReturnType<MetadataStore["exportTrees"]> {
    return this.families.migration.exportTrees(after, limit);
  }
  importTrees(trees: readonly RepoTree[]): Promise<number> {
    return this.families.migration.importTrees(trees);
  }
  exportXorbs(after: string | null, limit: number): ReturnType<MetadataStore["exportXorbs"]> {
    return this.families.migration.exportXorbs(after, limit);
  }
  importXorbs(xorbs: readonly DatedXorb[]): Promise<number> {
    return this.families.migration.importXorbs(xorbs);
  }
  exportFiles(after: string | null, limit: number): ReturnType<MetadataStore["exportFiles"]> {
    return this.families.migration.exportFiles(after, limit);
  }
  importFiles(files: readonly DatedFile[]): Promise<number> {
    return this.families.migration.importFiles(files);
  }
  exportFileRepoLinks(after: string | null, limit: number): ReturnType<MetadataStore["exportFileRepoLinks"]> {
    return this.families.migration.exportFileRepoLinks(after, limit);
  }
  importFileRepoLinks(links: readonly FileRepoLink[]): Promise<number> {
    return this.families.migration.importFileRepoLinks(links);
  }
  exportSha256Index(after: string | null, limit: number): ReturnType<MetadataStore["exportSha256Index"]> {
    return this.families.migration.exportSha256Index(after, limit);
  }
  importSha256Index(entries: readonly Sha256IndexEntry[]): Promise<number> {
    return this.families.migration.importSha256Index(entries);
  }
  exportShards(after: string | null, limit: number): ReturnType<MetadataStore["exportShards"]> {
    return this.families.migration.exportShards(after, limit);
  }
  importShards(shards: readonly ShardRow[]): Promise<number> {
    return this.families.migration.importShards(shards);
  }
  exportDedupEntries(after: string | null, limit: number): ReturnType<MetadataStore["exportDedupEntries"]> {
    return this.families.migration.exportDedupEntries(after, limit);
  }
  importDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    return this.families.migration.importDedupEntries(entries);
  }

  // Storage statistics
  recordStatsSample(sample: StatsSample): Promise<boolean> {
    return this.families.stats.recordStatsSample(sample);
  }
  listStatsSamples(): Promise<StatsSample[]> {
    return this.families.stats.listStatsSamples();
  }
  xorbTotals(): Promise<XorbTotals> {
    return this.families.stats.xorbTotals();
  }
  xorbFootprints(hashes: readonly Hash[]): Promise<Map<string, XorbFootprint>> {
    return this.families.stats.xorbFootprints(hashes);
  }
  fileXorbs(hashes: readonly Hash[]): Promise<Map<string, Hash[]>> {
    return this.families.stats.fileXorbs(hashes);
  }

  abstract ping(): Promise<void>;
  abstract close(): Promise<void>;
}
