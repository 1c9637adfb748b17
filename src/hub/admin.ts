/**
 * What administrators and the web interface ask about the store as a whole: storage statistics
 * (stats.ts defines every number) with their daily samples, a repository's live content, how
 * much of a file other files share (sharing.ts), and the last gc and fsck runs. Storage figures
 * that depend on xorbs other repositories share, and everything about the whole store, are for
 * administrators only.
 */
import type { GcRecords, MaintenanceRun } from "../metadata/gc.js";
import type { StatsSample } from "../metadata/store.js";
import type { MirrorStatus } from "../wire/hub.js";
import { isAdmin, requireAdmin, type Caller } from "./access.js";
import type { HistoryService } from "./histories.js";
import type { MirroredRepositories } from "./mirrored.js";
import { formatRepoRef, parseRepoRef } from "./names.js";
import type { RepoAddress, RepositoryService } from "./repositories.js";
import { chunkSharing, type ChunkSharing, type SharingStore } from "./sharing.js";
import { liveContentOf, ratiosOf, type LiveContent, type StatsStore, type StorageStats, type StorageStatsService } from "./stats.js";

export type AdminStore = StatsStore & SharingStore & Pick<GcRecords, "lastMaintenanceRuns">;

/** A repository's live content: files and logical bytes for readers; stored bytes and the ratios for administrators. */
export type RepoStorageAnswer = Pick<LiveContent, "files" | "logicalBytes"> | (LiveContent & ReturnType<typeof ratiosOf>);

/** How a file's chunks are shared; a file stored inline has no chunks. */
export type FileSharing = { path: string; size: number; xet: boolean } & ChunkSharing;

export interface AdminServiceDeps {
  store: AdminStore;
  repos: RepositoryService;
  history: HistoryService;
  stats: StorageStatsService;
  /** The upstream hub castor mirrors, when it mirrors one. */
  mirror?: MirroredRepositories;
}

export class AdminService {
  constructor(private readonly deps: AdminServiceDeps) {}

  /** The statistics (computed once for callers asking at the same time) and the last `historyDays` daily samples (all when undefined). */
  async storageStats(caller: Caller, historyDays: number | undefined, what: string): Promise<{ stats: StorageStats; history: StatsSample[] }> {
    requireAdmin(caller, what);
    const stats = await this.deps.stats.measureShared();
    return { stats, history: await this.deps.stats.history(historyDays) };
  }

  /** A repository's live content, for anyone who may read it; the figures that depend on other repositories for administrators only. */
  async repoStorage(caller: Caller, address: RepoAddress): Promise<RepoStorageAnswer> {
    const repo = await this.deps.repos.find(caller, address);
    const content = await liveContentOf(this.deps.store, repo);
    if (!isAdmin(caller)) return { files: content.files, logicalBytes: content.logicalBytes };
    return { ...content, ...ratiosOf(content) };
  }

  /** How many chunks of the file at `path` of `revision` other live files share. */
  async sharing(caller: Caller, repoRef: string, revision: string, path: string, what: string): Promise<FileSharing> {
    requireAdmin(caller, what);
    const repo = await this.deps.repos.find(caller, parseRepoRef(repoRef));
    const { commit } = await this.deps.repos.resolve(repo, revision);
    const file = await this.deps.history.fileAt(repo, commit, path);
    const answer = { path, size: file.size, xet: file.xetHash !== null };
    if (file.xetHash === null) return { ...answer, chunks: 0, bytes: 0, sharedChunks: 0, sharedBytes: 0, otherFiles: 0, repositories: [] };
    const sharing = await chunkSharing(this.deps.store, repo, path, file.xetHash);
    if (sharing === null) throw new Error(`the Xet file of ${path} has no record in the metadata store: run castor fsck`);
    return { ...answer, ...sharing };
  }

  /** What the mirror holds and saved; the upstream null when castor mirrors no hub. */
  async mirrorStatus(caller: Caller, what: string): Promise<MirrorStatus> {
    requireAdmin(caller, what);
    return this.deps.mirror === undefined ? { upstream: null } : this.deps.mirror.status();
  }

  /** The last gc and fsck runs. */
  async maintenanceRuns(caller: Caller, what: string): Promise<MaintenanceRun[]> {
    requireAdmin(caller, what);
    return this.deps.store.lastMaintenanceRuns();
  }

  /** `TYPE:NS/NAME` of every repository by id, for naming a token's coverage. */
  async repoRefsById(caller: Caller): Promise<Map<number, string>> {
    const { repos } = await this.deps.repos.list(caller);
    return new Map(repos.map((repo) => [repo.id, formatRepoRef(repo)]));
  }
}
