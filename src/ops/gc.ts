/**
 * Garbage collection (`castor gc`): removes what no ref of any repository reaches any more and
 * no client has used within the grace window — file records, the xorbs only they used with
 * their dedup index entries and blobs, inline blobs, and unreachable commits and trees.
 *
 * A run, in order; every step works in batches, each batch one metadata transaction:
 *
 * 0. finish: blobs an earlier run condemned but did not delete (it stopped) are deleted now;
 * 1. mark: walk every ref of every repository (reachability.ts);
 * 2. history: commits and trees no ref reaches, per repository, if its refs did not move;
 * 3. files: records created before the cutoff that no reachable tree names; the xorbs of every
 *    file that stays (reachable, young, or leased meanwhile) are the live xorbs;
 * 4. xorbs: records created before the cutoff that no live file uses are condemned (record and
 *    dedup entries deleted), their blobs deleted, the marks released; then xorb blobs without
 *    any record (an upload that died between blob and record) the same way;
 * 5. inline blobs no reachable tree names;
 * 6. leases older than the cutoff are pruned.
 *
 * The cutoff is the run's start minus the grace window. Safety against clients working during
 * the run comes from leases checked inside each deleting transaction (src/metadata/gc.ts), so
 * the snapshot the mark took may be stale without losing anything; a run that is killed at any
 * point leaves a consistent store, and the next run completes its work.
 */
import { hashToHex, type Hash } from "../format/hash.js";
import type { CondemnableKind } from "../metadata/gc.js";
import type { MirroredFile, MirroredFileCursor } from "../metadata/mirror.js";
import { scanPages } from "../metadata/scan.js";
import type { MetadataStore } from "../metadata/store.js";
import type { BlobStore } from "../storage/blob-store.js";
import { blobHash, condemnableKey, deleteCondemnedBlobs, keyBatches } from "./blobs.js";
import { HashPrefixSet, walkReachable, type Reachable } from "./reachability.js";

/** Objects per batch (one transaction each) unless the caller says otherwise. */
export const DEFAULT_GC_BATCH = 500;
/** Rows per export page while scanning files and xorbs. */
const SCAN_PAGE_ROWS = 2_000;

export interface GcOptions {
  /** Objects younger than this (or used this recently) are kept. */
  graceMs: number;
  /** Report what would be removed, remove nothing. */
  dryRun?: boolean;
  /** Objects per batch. */
  batchSize?: number;
  now?: () => Date;
  progress?: (line: string) => void;
  /** Called after the mark, before anything is swept (tests make clients act here). */
  afterMark?: () => Promise<void>;
  /** Stops the run between two batches (a server shutting down); the next run finishes the work. */
  signal?: AbortSignal;
  /** Evict mirrored files not used for this long (`castor gc --mirror-unused 30d`). */
  mirrorUnusedMs?: number;
  /** Evict the least recently used mirrored files until they hold at most this many bytes (CASTOR_UPSTREAM_MAX_BYTES). */
  mirrorMaxBytes?: number;
}

export interface ReclaimedTotals {
  objects: number;
  bytes: number;
}

export interface GcReport {
  dryRun: boolean;
  startedAt: Date;
  finishedAt: Date;
  /** Objects created or used before this were eligible. */
  cutoff: Date;
  reachable: { repositories: number; commits: number; trees: number; files: number; inlineBlobs: number };
  /** What was removed (in a dry run: what would be, leases not considered). */
  removed: {
    /** File records; bytes are the files' sizes (logical bytes, no blob). */
    files: ReclaimedTotals;
    /** Xorbs (records and blobs); bytes are blob bytes. */
    xorbs: ReclaimedTotals;
    /** Chunks of the removed xorbs (their dedup index entries, if any, went with them). */
    chunks: number;
    /** Xorb blobs that had no record. */
    orphanXorbBlobs: ReclaimedTotals;
    inlineBlobs: ReclaimedTotals;
    commits: number;
    trees: number;
  };
  /**
   * Mirrored files evicted (forgotten by the mirror, their content then collected unless a local
   * repository's file uses it); bytes are the files' sizes. In a dry run: what would be.
   */
  evicted: ReclaimedTotals;
  /** Blob deletions an earlier, interrupted run left and this one finished. */
  finishedFromEarlierRun: number;
  /** Repositories whose refs moved during the run (their history is swept next time). */
  historiesSkipped: number;
  leasesPruned: number;
  /** Where the run's time went, so a slow run can be told apart by step (`npm run bench -- gc`). */
  phasesMs: GcPhases;
}

/**
 * Wall-clock milliseconds of each step of a run, named as in the module comment (`orphans` is
 * the second half of step 4: xorb blobs without a record). `blobDeletes` is not a step but the
 * part of `finish`, `xorbs`, `orphans` and `inline` spent deleting blobs and releasing their
 * marks: one delete per blob, a round trip on S3 and an unlink plus a folder fsync on disk.
 */
export interface GcPhases {
  finish: number;
  mark: number;
  history: number;
  files: number;
  xorbs: number;
  orphans: number;
  inline: number;
  leases: number;
  blobDeletes: number;
}

/** What `/metrics` shows of a run (`castor_maintenance_last_run_total{command="gc"}`). */
export function gcTotals(report: GcReport): Record<string, number> {
  const { removed } = report;
  return {
    files: removed.files.objects,
    file_bytes: removed.files.bytes,
    xorbs: removed.xorbs.objects,
    xorb_bytes: removed.xorbs.bytes,
    chunks: removed.chunks,
    orphan_xorb_blobs: removed.orphanXorbBlobs.objects,
    orphan_xorb_blob_bytes: removed.orphanXorbBlobs.bytes,
    inline_blobs: removed.inlineBlobs.objects,
    inline_blob_bytes: removed.inlineBlobs.bytes,
    commits: removed.commits,
    trees: removed.trees,
    reclaimed_bytes: removed.xorbs.bytes + removed.orphanXorbBlobs.bytes + removed.inlineBlobs.bytes,
    mirror_evicted_files: report.evicted.objects,
    mirror_evicted_bytes: report.evicted.bytes,
  };
}

export async function collectGarbage(store: MetadataStore, blobs: BlobStore, options: GcOptions): Promise<GcReport> {
  return new Collector(store, blobs, options).run();
}

class Collector {
  private readonly dryRun: boolean;
  private readonly batchSize: number;
  private readonly say: (line: string) => void;
  private readonly startedAt: Date;
  private readonly cutoff: Date;
  private readonly report: GcReport;

  constructor(
    private readonly store: MetadataStore,
    private readonly blobs: BlobStore,
    private readonly options: GcOptions,
  ) {
    if (!Number.isFinite(options.graceMs) || options.graceMs < 0) throw new RangeError(`the grace window must be >= 0 ms, got ${options.graceMs}`);
    this.dryRun = options.dryRun ?? false;
    this.batchSize = options.batchSize ?? DEFAULT_GC_BATCH;
    if (!Number.isSafeInteger(this.batchSize) || this.batchSize < 1) throw new RangeError(`the batch size must be a whole number >= 1, got ${this.batchSize}`);
    this.say = options.progress ?? (() => undefined);
    this.startedAt = (options.now ?? (() => new Date()))();
    this.cutoff = new Date(this.startedAt.getTime() - options.graceMs);
    const none = (): ReclaimedTotals => ({ objects: 0, bytes: 0 });
    this.report = {
      dryRun: this.dryRun,
      startedAt: this.startedAt,
      finishedAt: this.startedAt,
      cutoff: this.cutoff,
      reachable: { repositories: 0, commits: 0, trees: 0, files: 0, inlineBlobs: 0 },
      removed: { files: none(), xorbs: none(), chunks: 0, orphanXorbBlobs: none(), inlineBlobs: none(), commits: 0, trees: 0 },
      evicted: none(),
      finishedFromEarlierRun: 0,
      historiesSkipped: 0,
      leasesPruned: 0,
      phasesMs: { finish: 0, mark: 0, history: 0, files: 0, xorbs: 0, orphans: 0, inline: 0, leases: 0, blobDeletes: 0 },
    };
  }

  /** Runs one step, adding its wall-clock time to `phasesMs[phase]`. */
  private async timed<T>(phase: keyof GcPhases, step: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await step();
    } finally {
      this.report.phasesMs[phase] += performance.now() - started;
    }
  }

  async run(): Promise<GcReport> {
    const { report } = this;
    this.say(`${this.dryRun ? "dry run: " : ""}removing what no ref reaches and nothing used since ${this.cutoff.toISOString()}`);
    if (!this.dryRun) await this.timed("finish", () => this.finishEarlierRun());
    const evicted = await this.timed("mark", () => this.evictMirrored());

    const reachable = await this.timed("mark", () =>
      walkReachable(this.store, {
        onRepository: (walked, total) => {
          if (walked % 100 === 0 || walked === total) this.say(`mark: walked ${walked}/${total} repositories`);
        },
      }),
    );
    await this.timed("mark", () => this.markMirrored(reachable, evicted));
    report.reachable = {
      repositories: reachable.histories.size,
      commits: sum([...reachable.histories.values()].map((history) => history.commits.size)),
      trees: sum([...reachable.histories.values()].map((history) => history.trees.size)),
      files: reachable.files.size,
      inlineBlobs: reachable.inline.size,
    };
    this.say(
      `mark: ${report.reachable.commits} commits, ${report.reachable.trees} trees, ${report.reachable.files} Xet files and ${report.reachable.inlineBlobs} inline files reachable`,
    );
    await this.options.afterMark?.();

    await this.timed("history", () => this.sweepHistories(reachable));
    const liveXorbs = await this.timed("files", () => this.sweepFiles(reachable));
    await this.timed("xorbs", () => this.sweepXorbs(liveXorbs));
    await this.timed("orphans", () => this.sweepOrphanXorbBlobs(liveXorbs));
    await this.timed("inline", () => this.sweepInlineBlobs(reachable));
    if (!this.dryRun) report.leasesPruned = await this.timed("leases", () => this.store.pruneLeases(this.cutoff));

    report.finishedAt = new Date();
    if (!this.dryRun) {
      await this.store.recordMaintenanceRun({ kind: "gc", startedAt: this.startedAt, finishedAt: report.finishedAt, totals: gcTotals(report) });
    }
    return report;
  }

  /**
   * Evicts mirrored files: those unused for `mirrorUnusedMs`, then the least recently used ones
   * until the rest hold at most `mirrorMaxBytes`. The mirror forgets them; what they alone used is
   * then collected like any unreachable content. Returns the keys evicted (in a dry run: that
   * would be, which the mark then leaves out of the live set).
   */
  private async evictMirrored(): Promise<Set<string>> {
    const { mirrorUnusedMs, mirrorMaxBytes } = this.options;
    const evicted = new Set<string>();
    if (mirrorUnusedMs === undefined && mirrorMaxBytes === undefined) return evicted;
    const unusedBefore = mirrorUnusedMs === undefined ? null : this.startedAt.getTime() - mirrorUnusedMs;
    let held = (await this.store.mirror.mirroredTotals()).bytes;
    const chosen: MirroredFile[] = [];
    let after: MirroredFileCursor | null = null;
    for (;;) {
      const page = await this.store.mirror.listMirroredFiles(after, SCAN_PAGE_ROWS);
      let more = page.length === SCAN_PAGE_ROWS;
      for (const file of page) {
        const unused = unusedBefore !== null && file.lastUsedAt.getTime() < unusedBefore;
        const over = mirrorMaxBytes !== undefined && held > mirrorMaxBytes;
        if (!unused && !over) {
          more = false;
          break;
        }
        chosen.push(file);
        held -= file.size;
      }
      if (!more) break;
      after = page.at(-1)!;
    }
    for (const file of chosen) evicted.add(mirroredKey(file));
    this.report.evicted = { objects: chosen.length, bytes: sum(chosen.map((file) => file.size)) };
    if (!this.dryRun) {
      for (const batch of batches(chosen, this.batchSize)) {
        this.options.signal?.throwIfAborted();
        await this.store.mirror.deleteMirroredFiles(batch);
      }
    }
    this.say(`mirror: ${chosen.length} mirrored files evicted (${this.report.evicted.bytes} bytes)`);
    return evicted;
  }

  /** Mirrored files the mirror holds are live, as if a ref reached them. */
  private async markMirrored(reachable: Reachable, evicted: ReadonlySet<string>): Promise<void> {
    let after: MirroredFileCursor | null = null;
    for (;;) {
      const page = await this.store.mirror.listMirroredFiles(after, SCAN_PAGE_ROWS);
      for (const file of page) {
        if (evicted.has(mirroredKey(file))) continue;
        (file.kind === "xet" ? reachable.files : reachable.inline).add(file.hash);
      }
      if (page.length < SCAN_PAGE_ROWS) return;
      after = page.at(-1)!;
    }
  }

  /** Deletes the blobs an interrupted run condemned; their records are gone already. */
  private async finishEarlierRun(): Promise<void> {
    for (;;) {
      const condemned = await this.store.condemned(this.batchSize);
      if (condemned.length === 0) return;
      for (const kind of ["xorb", "inline"] as const) {
        const hashes = condemned.filter((blob) => blob.kind === kind).map((blob) => blob.hash);
        await this.deleteBlobs(kind, hashes);
        this.report.finishedFromEarlierRun += hashes.length;
      }
      this.say(`finished ${this.report.finishedFromEarlierRun} blob deletions of an interrupted run`);
    }
  }

  private async sweepHistories(reachable: Reachable): Promise<void> {
    const unreachable = new Map<number, { commits: string[]; trees: string[] }>();
    const of = (repoId: number) => {
      let found = unreachable.get(repoId);
      if (found === undefined) unreachable.set(repoId, (found = { commits: [], trees: [] }));
      return found;
    };
    for await (const page of scanPages((after, limit) => this.store.scanCommits(after, limit), SCAN_PAGE_ROWS)) {
      for (const commit of page) if (!reachable.histories.get(commit.repoId)?.commits.has(commit.oid)) of(commit.repoId).commits.push(commit.oid);
    }
    for await (const page of scanPages((after, limit) => this.store.scanTrees(after, limit), SCAN_PAGE_ROWS)) {
      for (const tree of page) if (!reachable.histories.get(tree.repoId)?.trees.has(tree.oid)) of(tree.repoId).trees.push(tree.oid);
    }
    for (const [repoId, { commits, trees }] of unreachable) {
      const history = reachable.histories.get(repoId);
      // A repository created after the mark: nothing of it was walked, so nothing is swept.
      if (history === undefined) continue;
      if (this.dryRun) {
        this.report.removed.commits += commits.length;
        this.report.removed.trees += trees.length;
        continue;
      }
      for (let start = 0; start < Math.max(commits.length, trees.length); start += this.batchSize) {
        this.options.signal?.throwIfAborted();
        const deleted = await this.store.deleteHistory(
          repoId,
          history.refs,
          commits.slice(start, start + this.batchSize),
          trees.slice(start, start + this.batchSize),
        );
        if (deleted === null) {
          this.report.historiesSkipped++;
          break;
        }
        this.report.removed.commits += deleted.commits;
        this.report.removed.trees += deleted.trees;
      }
    }
    this.say(`history: ${this.report.removed.commits} unreachable commits and ${this.report.removed.trees} trees removed`);
  }

  /** Removes unreachable files; returns the xorbs the files that stay use. */
  private async sweepFiles(reachable: Reachable): Promise<HashPrefixSet> {
    const liveXorbs = new HashPrefixSet();
    const removed = this.report.removed.files;
    for await (const page of scanPages((after, limit) => this.store.scanFiles(after, limit), SCAN_PAGE_ROWS)) {
      const candidates = page.filter((file) => file.createdAt < this.cutoff && !reachable.files.has(file.hash));
      const gone = new Set<string>();
      for (const batch of batches(candidates, this.batchSize)) {
        if (this.dryRun) {
          for (const file of batch) gone.add(hashToHex(file.hash));
          removed.objects += batch.length;
          removed.bytes += sum(batch.map((file) => file.size));
          continue;
        }
        this.options.signal?.throwIfAborted();
        for (const file of await this.store.deleteFiles(
          batch.map((candidate) => candidate.hash),
          this.cutoff,
        )) {
          gone.add(hashToHex(file.hash));
          removed.objects++;
          removed.bytes += file.size;
        }
      }
      for (const file of page) {
        if (!gone.has(hashToHex(file.hash))) for (const term of file.terms) liveXorbs.add(term.xorbHash);
      }
    }
    this.say(`files: ${removed.objects} unreachable file records removed (${removed.bytes} bytes of file content)`);
    return liveXorbs;
  }

  private async sweepXorbs(liveXorbs: HashPrefixSet): Promise<void> {
    const removed = this.report.removed.xorbs;
    for await (const page of scanPages((after, limit) => this.store.scanXorbs(after, limit), SCAN_PAGE_ROWS)) {
      const candidates = page.filter((xorb) => xorb.createdAt < this.cutoff && !liveXorbs.has(xorb.hash));
      for (const batch of batches(candidates, this.batchSize)) {
        if (this.dryRun) {
          removed.objects += batch.length;
          removed.bytes += sum(batch.map((xorb) => xorb.serializedLength));
          this.report.removed.chunks += sum(batch.map((xorb) => xorb.chunks.length));
          continue;
        }
        this.options.signal?.throwIfAborted();
        const condemned = await this.store.condemnXorbs(
          batch.map((xorb) => xorb.hash),
          this.cutoff,
        );
        await this.deleteBlobs(
          "xorb",
          condemned.map((xorb) => xorb.hash),
        );
        // The mirror's runs into them would send a fill to chunks castor no longer has.
        await this.store.mirror.forgetChunkRuns(condemned.map((xorb) => xorb.hash));
        for (const xorb of condemned) {
          removed.objects++;
          removed.bytes += xorb.serializedLength ?? 0;
          this.report.removed.chunks += xorb.chunks;
        }
        this.say(`xorbs: ${removed.objects} removed so far (${removed.bytes} bytes)`);
      }
    }
    this.say(`xorbs: ${removed.objects} xorbs no live file uses removed (${removed.bytes} bytes)`);
  }

  /** Xorb blobs without a record: uploads that stopped between storing the blob and recording it. */
  private async sweepOrphanXorbBlobs(liveXorbs: HashPrefixSet): Promise<void> {
    const removed = this.report.removed.orphanXorbBlobs;
    for await (const keys of keyBatches(this.blobs.list("xorbs/"), this.batchSize)) {
      this.options.signal?.throwIfAborted();
      const hashes = keys.map((key) => blobHash(key)).filter((hash) => !liveXorbs.has(hash));
      if (hashes.length === 0) continue;
      const recorded = await this.store.xorbFootprints(hashes);
      const orphans = hashes.filter((hash) => !recorded.has(hashToHex(hash)));
      if (orphans.length === 0) continue;
      const sizes = await Promise.all(orphans.map((hash) => this.blobs.size(condemnableKey("xorb", hash))));
      const sizeOf = new Map(orphans.map((hash, i) => [hashToHex(hash), sizes[i] ?? 0]));
      const condemned = this.dryRun ? orphans : (await this.store.condemnXorbs(orphans, this.cutoff)).map((xorb) => xorb.hash);
      if (!this.dryRun) await this.deleteBlobs("xorb", condemned);
      removed.objects += condemned.length;
      removed.bytes += sum(condemned.map((hash) => sizeOf.get(hashToHex(hash)) ?? 0));
    }
    this.say(`xorbs: ${removed.objects} blobs without a record removed (${removed.bytes} bytes)`);
  }

  private async sweepInlineBlobs(reachable: Reachable): Promise<void> {
    const removed = this.report.removed.inlineBlobs;
    for await (const keys of keyBatches(this.blobs.list("inline/"), this.batchSize)) {
      this.options.signal?.throwIfAborted();
      const hashes = keys.map((key) => blobHash(key)).filter((hash) => !reachable.inline.has(hash));
      if (hashes.length === 0) continue;
      const condemned = this.dryRun ? hashes : await this.store.condemnInline(hashes, this.cutoff);
      const sizes = await Promise.all(condemned.map((hash) => this.blobs.size(condemnableKey("inline", hash))));
      if (!this.dryRun) await this.deleteBlobs("inline", condemned);
      removed.objects += condemned.length;
      removed.bytes += sum(sizes.map((size) => size ?? 0));
    }
    this.say(`inline: ${removed.objects} unreachable inline blobs removed (${removed.bytes} bytes)`);
  }

  private deleteBlobs(kind: CondemnableKind, hashes: readonly Hash[]): Promise<void> {
    return this.timed("blobDeletes", () => deleteCondemnedBlobs(this.store, this.blobs, kind, hashes));
  }
}

function* batches<T>(items: readonly T[], size: number): Generator<T[]> {
  for (let start = 0; start < items.length; start += size) yield items.slice(start, start + size);
}

function mirroredKey(file: Pick<MirroredFile, "kind" | "hash">): string {
  return `${file.kind}:${hashToHex(file.hash)}`;
}

function sum(values: readonly number[]): number {
  return values.reduce((total, value) => total + value, 0);
}
