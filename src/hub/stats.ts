/**
 * Storage statistics (`castor stats`, `GET /api/stats`, the server's daily samples): how many
 * bytes the repositories hold, and how many castor stores for them.
 *
 * What is counted:
 * - The live files of a repository are the files of the trees at the heads of its branches and
 *   tags. A file is its path and git oid (the blob id of its content, or for a Xet-stored file
 *   of its LFS pointer, which names the content's SHA-256 and size): the same file at the same
 *   path in several refs counts once per repository; another version at that path, or the same
 *   content at another path, counts separately.
 * - Logical bytes: Σ sizes of the live files. The total is the sum over repositories, so
 *   content two repositories both hold counts twice.
 * - Stored bytes: the bytes of distinct content the live files need — the serialized lengths
 *   of the distinct xorbs their terms name, plus the sizes of their distinct inline blobs
 *   (`inline/<sha256>` in the blob store). A repository's figure is what its own live files
 *   need, so repositories sharing xorbs each count them: per-repository figures overlap and do
 *   not add up to the total, which counts each xorb and inline blob once.
 * - Unique bytes: the same distinct content before compression — the uncompressed lengths of
 *   those xorbs plus the inline blobs (stored whole).
 * - Deduplication ratio: logical / unique bytes, what storing each chunk once saves.
 * - Compression ratio: unique / stored bytes, what compressing the chunks in xorbs saves. The
 *   two multiply to logical / stored bytes.
 * - Recorded xorbs: every xorb the metadata records, referenced by a live file or not. Their
 *   bytes beyond the live xorbs' are what a garbage collection could reclaim: xorbs of deleted
 *   files, of files only older commits hold, of uploads never committed.
 * Shard objects, metadata and blob-store overhead are not counted.
 *
 * How: repositories → revisions → head commits → trees, each (tree, path) once per repository;
 * the distinct Xet file hashes → their xorbs (`fileXorbs`), then the xorbs' sizes
 * (`xorbFootprints`), both in batches; sums over all xorbs by the database (`xorbTotals`).
 * Memory holds hashes, never file records or chunk tables: per repository its live (path, oid)
 * pairs, file hashes and xorbs, across repositories the xorbs and inline blobs counted so far.
 * It is not a snapshot: writes during the walk may or may not be counted.
 */
import { hashFromHex, hashToHex } from "../format/hash.js";
import type { MetadataStore, Repo, StatsSample, StorageTotals, TreeFileEntry, XorbFootprint } from "../metadata/store.js";
import type { StorageStatsAnswer } from "../wire/hub.js";
import { formatRepoRef } from "./names.js";

/** What the walk reads. */
export type StatsStore = Pick<
  MetadataStore,
  "listRepos" | "listRevisions" | "getCommit" | "getTree" | "fileXorbs" | "xorbFootprints" | "xorbTotals" | "recordStatsSample" | "listStatsSamples"
>;

/** What one repository's live files hold and need (the totals' fields of the same names, for one repository). */
export type LiveContent = Pick<StorageTotals, "files" | "logicalBytes" | "storedBytes" | "uniqueBytes" | "xorbs" | "chunks" | "inlineBlobs" | "inlineBytes">;

export interface RepoStorage extends LiveContent {
  type: Repo["type"];
  name: string;
}

export interface StorageStats {
  /** When the walk began; its UTC day is the day of the sample it gives. */
  takenAt: Date;
  totals: StorageTotals;
  /** In creation order. */
  repositories: RepoStorage[];
}

/** File hashes, and then xorb hashes, per metadata query. */
const BATCH = 1000;

/** Sums of live content; one per repository and one for the total, fed the same records. */
class Tally {
  files = 0;
  logicalBytes = 0;
  xorbs = 0;
  chunks = 0;
  xorbBytes = 0;
  xorbUncompressedBytes = 0;
  inlineBlobs = 0;
  inlineBytes = 0;

  addXorb(footprint: XorbFootprint): void {
    this.xorbs++;
    this.chunks += footprint.chunks;
    this.xorbBytes += footprint.serializedLength;
    this.xorbUncompressedBytes += footprint.uncompressedLength;
  }

  addInline(size: number): void {
    this.inlineBlobs++;
    this.inlineBytes += size;
  }

  content(): LiveContent {
    const { files, logicalBytes, xorbs, chunks, inlineBlobs, inlineBytes } = this;
    const storedBytes = this.xorbBytes + inlineBytes;
    const uniqueBytes = this.xorbUncompressedBytes + inlineBytes;
    return { files, logicalBytes, storedBytes, uniqueBytes, xorbs, chunks, inlineBlobs, inlineBytes };
  }
}

export interface ComputeOptions {
  now?: () => Date;
  /** Ends the walk between two queries (with the signal's reason). */
  signal?: AbortSignal;
}

export async function computeStorageStats(store: StatsStore, options: ComputeOptions = {}): Promise<StorageStats> {
  const takenAt = (options.now ?? (() => new Date()))();
  const { signal } = options;
  const total = new Tally();
  /** Xorbs and inline blobs (by SHA-256) already in `total`. */
  const countedXorbs = new Set<string>();
  const countedInline = new Set<string>();
  const repositories: RepoStorage[] = [];

  for (const repo of await store.listRepos()) {
    signal?.throwIfAborted();
    const content = await tallyRepo(store, repo, signal, {
      xorb: (hex, footprint) => {
        if (countedXorbs.has(hex)) return;
        countedXorbs.add(hex);
        total.addXorb(footprint);
      },
      inline: (sha256, size) => {
        if (countedInline.has(sha256)) return;
        countedInline.add(sha256);
        total.addInline(size);
      },
    });
    total.files += content.files;
    total.logicalBytes += content.logicalBytes;
    repositories.push({ type: repo.type, name: repo.name, ...content });
  }

  // Summed last, so every xorb a live file was found to reference is among them.
  const recorded = await store.xorbTotals();
  return {
    takenAt,
    totals: {
      repositories: repositories.length,
      ...total.content(),
      recordedXorbs: recorded.xorbs,
      recordedXorbBytes: recorded.bytes,
      recordedChunks: recorded.chunks,
    },
    repositories,
  };
}

/** What one repository's live files hold and need, measured alone (the web interface's repository size). */
export function liveContentOf(store: StatsStore, repo: Repo, signal?: AbortSignal): Promise<LiveContent> {
  return tallyRepo(store, repo, signal, { xorb: () => {}, inline: () => {} });
}

/** One repository's live content; `seen` hears of each of its xorbs and inline blobs, for the total. */
async function tallyRepo(
  store: StatsStore,
  repo: Repo,
  signal: AbortSignal | undefined,
  seen: { xorb: (hex: string, footprint: XorbFootprint) => void; inline: (sha256: string, size: number) => void },
): Promise<LiveContent> {
  const live = await liveFilesOf(store, repo, signal);
  const tally = new Tally();
  tally.files = live.files;
  tally.logicalBytes = live.logicalBytes;
  for (const [sha256, size] of live.inline) {
    tally.addInline(size);
    seen.inline(sha256, size);
  }
  const xorbs = await xorbsOfFiles(store, live.xetFiles, signal);
  for (const batch of batches(xorbs)) {
    signal?.throwIfAborted();
    for (const [hex, footprint] of await store.xorbFootprints(batch.map(hashFromHex))) {
      tally.addXorb(footprint);
      seen.xorb(hex, footprint);
    }
  }
  return tally.content();
}

interface LiveFiles {
  files: number;
  logicalBytes: number;
  /** Distinct Xet file hashes (hex). */
  xetFiles: Set<string>;
  /** Distinct inline blobs: SHA-256 → size. */
  inline: Map<string, number>;
}

/** The live files of `repo` (see the file comment), summed. */
async function liveFilesOf(store: StatsStore, repo: Repo, signal: AbortSignal | undefined): Promise<LiveFiles> {
  const live: LiveFiles = { files: 0, logicalBytes: 0, xetFiles: new Set(), inline: new Map() };
  await forEachLiveFile(store, repo, signal, (_path, entry) => {
    live.files++;
    live.logicalBytes += entry.size;
    if (entry.xetHash !== null) live.xetFiles.add(entry.xetHash);
    else live.inline.set(entry.sha256, entry.size);
  });
  return live;
}

/**
 * Calls `visit` once for each live file of `repo` (each (path, oid) once, see the file comment),
 * walking the trees at the heads of its branches and tags. Also how the web interface finds the
 * files that share chunks with one (hub/sharing.ts).
 */
export async function forEachLiveFile(
  store: Pick<StatsStore, "listRevisions" | "getCommit" | "getTree">,
  repo: Repo,
  signal: AbortSignal | undefined,
  visit: (path: string, entry: TreeFileEntry) => void,
): Promise<void> {
  const missing = (what: string) => new Error(`${what} of ${formatRepoRef(repo)} is missing from the metadata store (run castor fsck)`);
  const pending: { oid: string; path: string }[] = [];
  for (const revision of await store.listRevisions(repo.id)) {
    // A branch made before castor kept histories, never committed to since: no files.
    if (revision.commitOid === null) continue;
    const commit = await store.getCommit(repo.id, revision.commitOid);
    if (commit === null) throw missing(`commit ${revision.commitOid} (${revision.kind} ${revision.name})`);
    pending.push({ oid: commit.treeOid, path: "" });
  }
  // A tree seen at the same path again holds the same (path, oid) pairs: walked once. Keys are
  // "oid path" (an oid has no space).
  const seenTrees = new Set<string>();
  const seenFiles = new Set<string>();
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const treeKey = `${next.oid} ${next.path}`;
    if (seenTrees.has(treeKey)) continue;
    seenTrees.add(treeKey);
    signal?.throwIfAborted();
    const tree = await store.getTree(repo.id, next.oid);
    if (tree === null) throw missing(`tree ${next.oid}`);
    for (const entry of tree.entries) {
      const path = next.path === "" ? entry.name : `${next.path}/${entry.name}`;
      if (entry.type === "directory") {
        pending.push({ oid: entry.oid, path });
        continue;
      }
      const fileKey = `${entry.oid} ${path}`;
      if (seenFiles.has(fileKey)) continue;
      seenFiles.add(fileKey);
      visit(path, entry);
    }
  }
}

/** The distinct xorbs (hex) the files' terms name; a file without a record adds none (castor fsck reports it). */
async function xorbsOfFiles(store: StatsStore, files: Set<string>, signal: AbortSignal | undefined): Promise<Set<string>> {
  const xorbs = new Set<string>();
  for (const batch of batches(files)) {
    signal?.throwIfAborted();
    for (const fileXorbs of (await store.fileXorbs(batch.map(hashFromHex))).values()) {
      for (const xorb of fileXorbs) xorbs.add(hashToHex(xorb));
    }
  }
  return xorbs;
}

export function* batches<T>(items: Iterable<T>): Generator<T[]> {
  let batch: T[] = [];
  for (const item of items) {
    batch.push(item);
    if (batch.length === BATCH) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}

/** `YYYY-MM-DD` of `date` in UTC: the day a sample taken then is of. */
export function utcDay(date: Date): string {
  return date.toISOString().slice(0, 10);
}

/** Milliseconds from `now` to the next UTC midnight (never 0: at midnight, a whole day). */
export function msUntilNextUtcDay(now: Date): number {
  const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return next - now.getTime();
}

export function sampleOf(stats: StorageStats): StatsSample {
  return { day: utcDay(stats.takenAt), takenAt: stats.takenAt, ...stats.totals };
}

/** What the ratios are computed from; `uniqueBytes` is null in samples recorded before castor measured it. */
type RatioInputs = Pick<StorageTotals, "logicalBytes" | "storedBytes"> & { uniqueBytes: number | null };

/** Logical / unique bytes: what deduplication saves; null when there is nothing (or no measurement). */
export function dedupRatio(content: RatioInputs): number | null {
  return content.uniqueBytes === null || content.uniqueBytes === 0 ? null : content.logicalBytes / content.uniqueBytes;
}

/** Unique / stored bytes: what compression saves; null when nothing is stored (or no measurement). */
export function compressionRatio(content: RatioInputs): number | null {
  return content.uniqueBytes === null || content.storedBytes === 0 ? null : content.uniqueBytes / content.storedBytes;
}

/** Both ratios, as JSON answers show them beside the totals. */
export function ratiosOf(content: RatioInputs) {
  return { dedupRatio: dedupRatio(content), compressionRatio: compressionRatio(content) };
}

/** Recorded xorb bytes no live file references (never negative: a xorb recorded during the walk is in both). */
export function unreferencedXorbBytes(totals: Pick<StorageTotals, "recordedXorbBytes" | "storedBytes" | "inlineBytes">): number {
  return Math.max(0, totals.recordedXorbBytes - (totals.storedBytes - totals.inlineBytes));
}

/** Totals with what follows from them, as JSON answers and tables show them. */
function totalsJson<Totals extends Omit<StatsSample, "day" | "takenAt">>(totals: Totals) {
  return { ...totals, ...ratiosOf(totals), unreferencedXorbBytes: unreferencedXorbBytes(totals) };
}

/** The JSON of `GET /api/stats` and `castor stats --json` (its shape: src/wire/hub.ts): numbers of bytes are exact integers. */
export function storageStatsJson(stats: StorageStats, history: readonly StatsSample[]): StorageStatsAnswer {
  return {
    takenAt: stats.takenAt.toISOString(),
    totals: totalsJson(stats.totals),
    repositories: stats.repositories.map((repo) => ({ ...repo, ...ratiosOf(repo) })),
    history: historyJson(history),
  };
}

/** Daily samples as JSON, oldest first (`castor stats --history --json`, the API's `history`). */
export function historyJson(history: readonly StatsSample[]): StorageStatsAnswer["history"] {
  return history.map(({ day, takenAt, ...totals }) => ({ day, takenAt: takenAt.toISOString(), ...totalsJson(totals) }));
}

export interface StorageStatsServiceOptions {
  now?: () => Date;
}

/** Computing statistics and keeping daily samples, for the API, the CLI and the server's sampler (stats-sampler.ts). */
export class StorageStatsService {
  private readonly now: () => Date;
  private running: Promise<StorageStats> | null = null;

  constructor(
    private readonly store: StatsStore,
    options: StorageStatsServiceOptions = {},
  ) {
    this.now = options.now ?? (() => new Date());
  }

  /**
   * Computes the statistics, and keeps them as the sample of their UTC day: a day's sample is
   * its last measurement, whoever made it (the server, `castor stats`, `GET /api/stats`).
   */
  async measure(signal?: AbortSignal): Promise<StorageStats> {
    const stats = await computeStorageStats(this.store, { now: this.now, signal });
    // Nothing is written once stopped: the store may be closing.
    signal?.throwIfAborted();
    await this.store.recordStatsSample(sampleOf(stats));
    return stats;
  }

  /** `measure`, shared by the callers that ask while it runs: an admin polling the API starts one walk, not one per request. */
  measureShared(): Promise<StorageStats> {
    this.running ??= this.measure().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** The daily samples, oldest first; the last `limit` only when given. */
  async history(limit?: number): Promise<StatsSample[]> {
    const samples = await this.store.listStatsSamples();
    return limit === undefined ? samples : samples.slice(Math.max(0, samples.length - limit));
  }

  /**
   * Today's sample: the one kept already (by `castor stats`, another node, an earlier start), or
   * a new one (also when the kept one is from a castor that did not measure unique bytes yet).
   */
  async sampleToday(signal?: AbortSignal): Promise<StatsSample> {
    const latest = (await this.store.listStatsSamples()).at(-1);
    if (latest !== undefined && latest.day === utcDay(this.now()) && latest.uniqueBytes !== null) return latest;
    return sampleOf(await this.measure(signal));
  }
}
