/**
 * `castor fsck [--repair]`: checks that what the metadata store records is backed by intact
 * blobs, that the records agree with one another and that every ref's history resolves; with
 * `repair`, removes from the indexes what is corrupt or dangling, so that clients upload it
 * anew instead of being handed it.
 *
 * Five passes, each paging through one record family with the migration exports, walking one
 * repository at a time or listing blobs in batches, so memory is bounded by a page, the largest
 * repository's history and a few HashPrefixSets, never by the size of the store:
 *
 * 1. xorbs: every recorded xorb's blob exists and re-validates as that xorb, streamed through
 *    the same `XorbValidator` uploads go through (hash, every chunk decoded and hashed, no
 *    footer), and its chunk table equals the record's (length, chunk hashes and offsets);
 * 2. files: every term of every file names a recorded xorb, with a chunk range inside the
 *    xorb's chunk count and an unpacked length equal to the chunks' uncompressed lengths; a term
 *    on a xorb found damaged in pass 1 is reported too (the file cannot be reconstructed);
 * 3. histories (reachability.ts): every commit of every branch and tag with its ancestors and
 *    every tree they reach is stored; every Xet file a reachable tree names is recorded, and
 *    every inline file's blob exists and hashes to the entry's SHA-256. The damaged files of
 *    pass 2 learn here which paths name them;
 * 4. the dedup index: every entry names a recorded xorb;
 * 5. orphan blobs, listed but not damage: xorb blobs without a record and inline blobs no
 *    reachable tree names (gc removes both), shard blobs without a shard record (gc keeps
 *    shard blobs by design). An upload in progress can show up here.
 *
 * Repairs go through the garbage collector's record methods (src/metadata/gc.ts), whose leases
 * keep them safe while servers run:
 * - a xorb whose blob is missing or corrupt — checked once more first, since it may have been
 *   collected and uploaded again meanwhile — is condemned whatever its leases (its record and
 *   dedup entries go), its blob deleted and the mark released: the dedup index stops handing it
 *   out and its next upload stores it anew;
 * - a damaged file (a term on a missing or damaged xorb, or outside its xorb) is deleted only
 *   when no ref reaches it, nothing used it since the run started and the whole history could
 *   be walked; a file a ref names is never deleted, but listed with its paths: its content is
 *   lost until a client uploads it again;
 * - dedup entries naming unrecorded xorbs are deleted;
 * - a corrupt inline blob is deleted like a xorb, so committing the same content stores it
 *   anew (the hub never overwrites a blob); its paths stay damaged until then.
 * Missing commits, trees, file records and inline blobs cannot be rebuilt from what is left.
 *
 * An exception means the check itself could not run (store unreachable, a record that no
 * longer decodes).
 */
import { hashFromHex, hashToHex, type Hash } from "../format/hash.js";
import type { XorbRecord } from "../metadata/cas.js";
import type { DatedFile, ScanPage } from "../metadata/records.js";
import { scanPages } from "../metadata/scan.js";
import type { MetadataStore } from "../metadata/store.js";
import type { BlobKey, BlobKind, BlobStore } from "../storage/blob-store.js";
import { blobHash, deleteCondemnedBlobs, forEachInFlight, keyBatches } from "./blobs.js";
import { checkXorb, inlineProblem, termMismatch, type FsckProblem, type FsckProblemKind } from "./fsck-checks.js";
import { HashPrefixSet, walkReachable, type Reachable, type ReachedFile } from "./reachability.js";

export type { FsckProblem, FsckProblemKind } from "./fsck-checks.js";

export interface FsckCounts {
  xorbs: number;
  /** Blob bytes read and validated. */
  xorbBytes: number;
  files: number;
  fileTerms: number;
  dedupEntries: number;
  repositories: number;
  commits: number;
  trees: number;
  /** Distinct files (Xet and inline) the reachable trees name, each checked once. */
  reachableFiles: number;
}

export interface OrphanTotals {
  blobs: number;
  bytes: number;
}

/** A damaged file that a ref names: its content is lost until a client uploads it again. */
export interface LiveDamagedFile {
  /** The Xet file hash, hex. */
  file: string;
  size: number;
  /** `<path> in <type>:<namespace>/<name>`, the first few found. */
  paths: string[];
  /** How many more paths name it. */
  morePaths: number;
}

export interface FsckReport {
  counts: FsckCounts;
  /** Problems and orphan blobs found, in the order found; at most `MAX_REPORTED_PROBLEMS`. */
  problems: FsckProblem[];
  /** Damage found, listed or not (orphan blobs are not damage): 0 means the store is intact. */
  problemCount: number;
  /** Problems and orphan blobs found but not listed. */
  unlisted: number;
  /** Whether repairs were made (`repair`). */
  repaired: boolean;
  /** Damage left: `problemCount` less what the repairs fixed. */
  remaining: number;
  /** Orphan blobs by kind. */
  orphans: Record<BlobKind, OrphanTotals>;
  /** Damaged files refs name (at most `MAX_REPORTED_PROBLEMS`). */
  liveDamagedFiles: LiveDamagedFile[];
  /**
   * false when a commit or tree is missing: then what is unreachable cannot be told, so no file
   * record is deleted and inline blobs are not listed as orphans.
   */
  historyComplete: boolean;
}

export interface FsckOptions {
  /** Remove what is corrupt or dangling (see the file comment). */
  repair?: boolean;
  /** Receives progress lines (no newline). */
  progress?: (line: string) => void;
  /** A progress line after every this many xorbs (default 1000)… */
  progressEveryXorbs?: number;
  /** …or this many blob bytes validated (default 1 GiB), whichever comes first. */
  progressEveryBytes?: number;
  /** Rows per export page (default: 256 xorbs or files, 2000 dedup entries); tests page small. */
  maxPageRows?: number;
  now?: () => Date;
}

const LARGE_ROW_PAGE = 256;
const SMALL_ROW_PAGE = 2000;
/** Problems kept in the report at most; the rest are counted only (a wrecked store would fill memory). */
export const MAX_REPORTED_PROBLEMS = 10_000;
/** Paths listed per damaged file. */
const MAX_PATHS_SHOWN = 3;
/** Store lookups and blob reads in flight at once while the history is checked. */
const CHECKS_IN_FLIGHT = 16;
/** A history progress line after every this many distinct files checked. */
const PROGRESS_EVERY_FILES = 10_000;
/** Blob keys per orphan lookup, and file records per deletion (one transaction each). */
const BATCH = 500;

export async function fsckStores(metadata: MetadataStore, blobs: BlobStore, options: FsckOptions = {}): Promise<FsckReport> {
  return new Fsck(metadata, blobs, options).run();
}

/** What to do about the damage a repair cannot undo: nothing left in the stores holds what is lost. */
const UNREPAIRABLE: Partial<Record<FsckProblemKind, string>> = {
  commit_missing: "left: restore the metadata database from a backup",
  tree_missing: "left: restore the metadata database from a backup",
  file_missing: "left: upload the file again",
  inline_missing: "left: commit the file's content again",
};

/** Problems found, listed up to the cap, and how many of them the repairs fixed. */
class Findings {
  readonly listed: FsckProblem[] = [];
  damage = 0;
  fixed = 0;
  unlisted = 0;

  constructor(private readonly repairing: boolean) {}

  /** Records a problem (damage unless an orphan); the caller may keep it to note its repair. */
  add(problem: FsckProblem): FsckProblem {
    if (this.repairing) problem.repair ??= UNREPAIRABLE[problem.kind];
    if (problem.kind !== "orphan_blob") this.damage++;
    if (this.listed.length < MAX_REPORTED_PROBLEMS) this.listed.push(problem);
    else this.unlisted++;
    return problem;
  }

  repaired(problems: readonly FsckProblem[], note: string): void {
    for (const problem of problems) problem.repair = note;
    this.fixed += problems.length;
  }

  left(problems: readonly FsckProblem[], note: string): void {
    for (const problem of problems) problem.repair = note;
  }
}

/** A damaged blob (xorb or inline) and its problem, for the repair. */
interface DamagedBlob {
  hash: Hash;
  problem: FsckProblem;
}

/** A file found damaged in pass 2, with the paths pass 3 finds naming it. */
interface DamagedFile {
  hash: Hash;
  size: number;
  problems: FsckProblem[];
  /** `<path> in <repository>`; one file is rarely at many paths, though many trees name each path. */
  paths: Set<string>;
}

class Fsck {
  private readonly counts: FsckCounts = {
    xorbs: 0,
    xorbBytes: 0,
    files: 0,
    fileTerms: 0,
    dedupEntries: 0,
    repositories: 0,
    commits: 0,
    trees: 0,
    reachableFiles: 0,
  };
  private readonly findings: Findings;
  private readonly orphans: Record<BlobKind, OrphanTotals> = { xorbs: { blobs: 0, bytes: 0 }, inline: { blobs: 0, bytes: 0 }, shards: { blobs: 0, bytes: 0 } };
  /** Keyed by hex. Damage is rare, so these stay small. */
  private readonly damagedXorbs = new Map<string, DamagedBlob>();
  /**
   * Every xorb recorded in pass 1, so passes 4 and 5 look up only the xorbs it does not hold.
   * A 48-bit prefix collision hides one dangling entry or orphan blob at worst, never damage
   * that the repair would act on wrongly.
   */
  private readonly recordedXorbs = new HashPrefixSet();
  private readonly damagedFiles = new Map<string, DamagedFile>();
  private readonly corruptInline = new Map<string, DamagedBlob>();
  private historyComplete = true;
  private readonly repair: boolean;
  private readonly say: (line: string) => void;
  private readonly startedAt: Date;

  constructor(
    private readonly metadata: MetadataStore,
    private readonly blobs: BlobStore,
    private readonly options: FsckOptions,
  ) {
    this.repair = options.repair ?? false;
    this.findings = new Findings(this.repair);
    this.say = options.progress ?? (() => undefined);
    this.startedAt = (options.now ?? (() => new Date()))();
  }

  private pageRows(rows: number): number {
    return Math.min(rows, this.options.maxPageRows ?? rows);
  }

  async run(): Promise<FsckReport> {
    await this.checkXorbs();
    await this.checkFiles();
    const reachable = await this.checkHistories();
    await this.checkDedupIndex();
    await this.listOrphanBlobs(reachable);
    if (this.repair) {
      await this.repairXorbs();
      await this.repairInline();
    }
    const liveDamagedFiles = await this.settleDamagedFiles(reachable);

    const { findings } = this;
    const found = findings.listed.length + findings.unlisted;
    if (findings.unlisted > 0) this.say(`${found} problems and orphan blobs found; only the first ${findings.listed.length} are listed`);
    const orphans = Object.values(this.orphans);
    await this.metadata.recordMaintenanceRun({
      kind: "fsck",
      startedAt: this.startedAt,
      finishedAt: new Date(),
      totals: {
        problems: findings.damage,
        remaining: findings.damage - findings.fixed,
        xorbs_checked: this.counts.xorbs,
        xorb_bytes_checked: this.counts.xorbBytes,
        files_checked: this.counts.files,
        orphan_blobs: orphans.reduce((total, orphan) => total + orphan.blobs, 0),
        orphan_blob_bytes: orphans.reduce((total, orphan) => total + orphan.bytes, 0),
      },
    });
    return {
      counts: this.counts,
      problems: findings.listed,
      problemCount: findings.damage,
      unlisted: findings.unlisted,
      repaired: this.repair,
      remaining: findings.damage - findings.fixed,
      orphans: this.orphans,
      liveDamagedFiles,
      historyComplete: this.historyComplete,
    };
  }

  /** Pass 1: xorbs against their blobs. */
  private async checkXorbs(): Promise<void> {
    const { counts } = this;
    const everyXorbs = this.options.progressEveryXorbs ?? 1000;
    const everyBytes = this.options.progressEveryBytes ?? 1024 ** 3;
    let xorbsAtLine = 0;
    let bytesAtLine = 0;
    for await (const xorb of rows((after, limit) => this.metadata.scanXorbs(after, limit), this.pageRows(LARGE_ROW_PAGE))) {
      const problem = await checkXorb(this.blobs, xorb);
      counts.xorbs++;
      this.recordedXorbs.add(xorb.hash);
      counts.xorbBytes += problem === null ? xorb.serializedLength : 0;
      if (problem !== null) this.damagedXorbs.set(hashToHex(xorb.hash), { hash: xorb.hash, problem: this.findings.add(problem) });
      if (counts.xorbs - xorbsAtLine >= everyXorbs || counts.xorbBytes - bytesAtLine >= everyBytes) {
        xorbsAtLine = counts.xorbs;
        bytesAtLine = counts.xorbBytes;
        this.say(`xorbs: ${counts.xorbs} checked (${counts.xorbBytes} bytes validated), ${this.findings.damage} problems so far…`);
      }
    }
    this.say(`xorbs: ${counts.xorbs} checked (${counts.xorbBytes} bytes validated)`);
  }

  /** Pass 2: file terms against the xorb records. */
  private async checkFiles(): Promise<void> {
    for await (const page of scanPages((after, limit) => this.metadata.scanFiles(after, limit), this.pageRows(LARGE_ROW_PAGE))) {
      const xorbs = await this.metadata.getXorbs(page.flatMap((file) => file.terms.map((term) => term.xorbHash)));
      for (const file of page) {
        this.counts.files++;
        this.counts.fileTerms += file.terms.length;
        const problems = this.termProblems(file, xorbs).map((problem) => this.findings.add(problem));
        if (problems.length > 0) this.damagedFiles.set(hashToHex(file.hash), { hash: file.hash, size: file.size, problems, paths: new Set() });
      }
      this.say(`files: ${this.counts.files} checked…`);
    }
    this.say(`files: ${this.counts.files} checked (${this.counts.fileTerms} terms)`);
  }

  /** The problems of one file's terms: each bad term, and each missing or damaged xorb once. */
  private termProblems(file: DatedFile, xorbs: Map<string, XorbRecord>): FsckProblem[] {
    const subject = `file ${hashToHex(file.hash)}`;
    const problems: FsckProblem[] = [];
    const reported = new Set<string>();
    file.terms.forEach((term, index) => {
      const hex = hashToHex(term.xorbHash);
      const at = `term ${index}`;
      const record = xorbs.get(hex);
      const bad = record === undefined ? null : termMismatch(record, term.chunkStart, term.chunkEnd, term.unpackedLength);
      if (bad !== null) {
        problems.push({ kind: "file_bad_term", subject, xorb: hex, message: `${at} on xorb ${hex}: ${bad}` });
      } else if (reported.has(hex)) {
        // Once per file and xorb, not per term: a large file has thousands of terms.
      } else if (record === undefined) {
        reported.add(hex);
        problems.push({ kind: "file_missing_xorb", subject, xorb: hex, message: `${at} names xorb ${hex}, which is not recorded` });
      } else if (this.damagedXorbs.has(hex)) {
        reported.add(hex);
        problems.push({ kind: "file_damaged_xorb", subject, xorb: hex, message: `${at} uses xorb ${hex}, whose blob is missing or corrupt` });
      }
    });
    return problems;
  }

  /** Pass 3: every ref's history, and the files its trees name. */
  private async checkHistories(): Promise<Reachable> {
    const { counts } = this;
    let filesAtLine = 0;
    const reachable = await walkReachable(this.metadata, {
      keepHistories: false,
      onDamage: (damage) => {
        this.historyComplete = false;
        this.findings.add({ kind: damage.kind, subject: `${damage.kind === "commit_missing" ? "commit" : "tree"} ${damage.oid}`, message: damage.message });
      },
      onFiles: async (files) => {
        await this.checkReachedFiles(files);
        if (counts.reachableFiles - filesAtLine >= PROGRESS_EVERY_FILES) {
          filesAtLine = counts.reachableFiles;
          this.say(`history: ${counts.reachableFiles} files checked so far…`);
        }
      },
      onRepository: (walked, total, history) => {
        counts.repositories++;
        counts.commits += history.commits.size;
        counts.trees += history.trees.size;
        if (walked % 100 === 0 && walked < total) this.say(`history: ${walked}/${total} repositories walked…`);
      },
    });
    this.say(
      `history: ${counts.repositories} repositories walked (${counts.commits} commits, ${counts.trees} trees), ${counts.reachableFiles} distinct files they name checked`,
    );
    return reachable;
  }

  private async checkReachedFiles(files: readonly ReachedFile[]): Promise<void> {
    for (const file of files) {
      const damaged = file.entry.xetHash === null ? undefined : this.damagedFiles.get(file.entry.xetHash);
      damaged?.paths.add(`${file.path} in ${file.repo.type}:${file.repo.name}`);
    }
    const firstSeen = files.filter((file) => file.firstSeen);
    this.counts.reachableFiles += firstSeen.length;
    await forEachInFlight(firstSeen, CHECKS_IN_FLIGHT, async (file) => {
      const problem = file.entry.xetHash === null ? await inlineProblem(this.blobs, file) : await this.xetFileProblem(file, file.entry.xetHash);
      if (problem === null) return;
      this.findings.add(problem);
      if (problem.kind === "inline_corrupt") this.corruptInline.set(file.entry.sha256, { hash: Buffer.from(file.entry.sha256, "hex"), problem });
    });
  }

  private async xetFileProblem(file: ReachedFile, xetHash: string): Promise<FsckProblem | null> {
    if ((await this.metadata.getFile(hashFromHex(xetHash))) !== null) return null;
    return {
      kind: "file_missing",
      subject: `file ${xetHash}`,
      message: `${file.path} in ${file.repo.type}:${file.repo.name} names Xet file ${xetHash}, which is not recorded: downloads of it fail`,
    };
  }

  /** Pass 4: the dedup index against the xorb records; repaired page by page. */
  private async checkDedupIndex(): Promise<void> {
    let removed = 0;
    for await (const page of scanPages((after, limit) => this.metadata.scanDedupEntries(after, limit), this.pageRows(SMALL_ROW_PAGE))) {
      this.counts.dedupEntries += page.length;
      // Only xorbs pass 1 did not see are looked up (a page of entries in chunk order names about
      // as many xorbs as it has entries), and only whether they are recorded: no chunk tables.
      const unknown = page.filter((entry) => !this.recordedXorbs.has(entry.xorbHash));
      const xorbs = unknown.length === 0 ? new Map() : await this.metadata.xorbFootprints(unknown.map((entry) => entry.xorbHash));
      const dangling = unknown.filter((entry) => !xorbs.has(hashToHex(entry.xorbHash)));
      const problems = dangling.map((entry) => {
        const hex = hashToHex(entry.xorbHash);
        const message = `dedup entry names xorb ${hex}, which is not recorded`;
        return this.findings.add({ kind: "dedup_missing_xorb", subject: `chunk ${hashToHex(entry.chunkHash)}`, xorb: hex, message });
      });
      if (!this.repair || dangling.length === 0) continue;
      // An entry not deleted had its xorb recorded meanwhile: it no longer dangles either.
      removed += await this.metadata.deleteDanglingDedupEntries(dangling);
      this.findings.repaired(problems, "entry removed from the dedup index");
    }
    this.say(`dedup index: ${this.counts.dedupEntries} entries checked${this.repair ? `, ${removed} dangling ones removed` : ""}`);
  }

  /** Pass 5: blobs nothing needs. */
  private async listOrphanBlobs(reachable: Reachable): Promise<void> {
    for await (const keys of keyBatches(this.blobs.list("xorbs/"), BATCH)) {
      const unknown = keys.filter((key) => !this.recordedXorbs.has(blobHash(key)));
      // Recorded after pass 1 (an upload meanwhile), or only unknown to the set: looked up.
      const recorded = unknown.length === 0 ? new Map() : await this.metadata.xorbFootprints(unknown.map((key) => blobHash(key)));
      await this.addOrphans(
        "xorbs",
        unknown.filter((key) => !recorded.has(hashToHex(blobHash(key)))),
        "has no xorb record (an upload stopped before recording it): castor gc removes it",
      );
    }
    if (this.historyComplete) {
      for await (const keys of keyBatches(this.blobs.list("inline/"), BATCH)) {
        await this.addOrphans(
          "inline",
          keys.filter((key) => !reachable.inline.has(blobHash(key))),
          "is named by no reachable tree: castor gc removes it",
        );
      }
    } else {
      this.say("inline: orphan blobs not listed: with part of the history missing, what is reachable cannot be told");
    }
    const shards = new HashPrefixSet();
    for await (const page of scanPages((after, limit) => this.metadata.scanShards(after, limit), this.pageRows(SMALL_ROW_PAGE))) {
      for (const shard of page) shards.add(shard.hash);
    }
    for await (const keys of keyBatches(this.blobs.list("shards/"), BATCH)) {
      await this.addOrphans(
        "shards",
        keys.filter((key) => !shards.has(blobHash(key))),
        "has no shard record: harmless (castor gc keeps shard blobs); delete it by hand if you like",
      );
    }
    const total = this.orphans.xorbs.blobs + this.orphans.inline.blobs + this.orphans.shards.blobs;
    this.say(`orphans: ${total} blobs nothing needs`);
  }

  private async addOrphans(kind: BlobKind, keys: readonly BlobKey[], why: string): Promise<void> {
    const sizes = await Promise.all(keys.map((key) => this.blobs.size(key)));
    keys.forEach((key, i) => {
      // Gone meanwhile: collected, or an upload's blob recorded since.
      if (sizes[i] === null) return;
      this.orphans[kind].blobs++;
      this.orphans[kind].bytes += sizes[i];
      this.findings.add({ kind: "orphan_blob", subject: `blob ${key}`, message: `${sizes[i]} bytes; ${why}` });
    });
  }

  /** Condemns each damaged xorb that is still recorded and still damaged, then deletes its blob. */
  private async repairXorbs(): Promise<void> {
    for (const { hash, problem } of this.damagedXorbs.values()) {
      const record = (await this.metadata.getXorbs([hash])).get(hashToHex(hash));
      if (record === undefined) {
        this.findings.repaired([problem], "already removed (by castor gc meanwhile)");
        continue;
      }
      if ((await checkXorb(this.blobs, record)) === null) {
        this.findings.repaired([problem], "intact on a second look: it was stored again meanwhile");
        continue;
      }
      await this.metadata.condemnXorbs([hash], null);
      await deleteCondemnedBlobs(this.metadata, this.blobs, "xorb", [hash]);
      this.findings.repaired([problem], "xorb removed (record, dedup entries, blob): its next upload stores it anew");
    }
    if (this.damagedXorbs.size > 0) this.say(`repair: ${this.damagedXorbs.size} damaged xorbs removed`);
  }

  /** Deletes corrupt inline blobs: the hub never overwrites a blob, so a new commit could not fix them. */
  private async repairInline(): Promise<void> {
    const damaged = [...this.corruptInline.values()];
    if (damaged.length === 0) return;
    const hashes = damaged.map((blob) => blob.hash);
    await this.metadata.condemnInline(hashes, null);
    await deleteCondemnedBlobs(this.metadata, this.blobs, "inline", hashes);
    this.findings.left(
      damaged.map((blob) => blob.problem),
      "corrupt blob removed: the file's content is lost until it is committed again",
    );
    this.say(`repair: ${damaged.length} corrupt inline blobs removed`);
  }

  /**
   * The damaged files refs name, listed; with `repair`, the others are deleted (if the whole
   * history was walked, since only then is "no ref names it" known).
   */
  private async settleDamagedFiles(reachable: Reachable): Promise<LiveDamagedFile[]> {
    const live: LiveDamagedFile[] = [];
    const unreachable: DamagedFile[] = [];
    for (const [hex, file] of this.damagedFiles) {
      if (reachable.files.has(file.hash)) {
        const paths = [...file.paths];
        if (live.length < MAX_REPORTED_PROBLEMS)
          live.push({ file: hex, size: file.size, paths: paths.slice(0, MAX_PATHS_SHOWN), morePaths: Math.max(0, paths.length - MAX_PATHS_SHOWN) });
        const named = paths.length === 0 ? "" : ` (${paths[0]})`;
        if (this.repair) this.findings.left(file.problems, `file kept: a ref names it${named}; its content is lost until it is uploaded again`);
      } else if (!this.historyComplete) {
        if (this.repair) this.findings.left(file.problems, "file kept: with part of the history missing, whether a ref names it cannot be told");
      } else {
        unreachable.push(file);
      }
    }
    if (!this.repair) return live;
    let deleted = 0;
    for (let start = 0; start < unreachable.length; start += BATCH) {
      const batch = unreachable.slice(start, start + BATCH);
      // The run's start as the cutoff: a file uploaded again or committed since then is kept.
      const gone = new Set(
        (
          await this.metadata.deleteFiles(
            batch.map((file) => file.hash),
            this.startedAt,
          )
        ).map((file) => hashToHex(file.hash)),
      );
      for (const file of batch) {
        if (gone.has(hashToHex(file.hash))) this.findings.repaired(file.problems, "file record removed: no ref names it");
        else this.findings.left(file.problems, "file kept: a client used it since fsck started; run fsck again");
      }
      deleted += gone.size;
    }
    if (this.damagedFiles.size > 0) this.say(`repair: ${deleted} damaged file records no ref names removed, ${live.length} that refs name kept`);
    return live;
  }
}

/** Every row of a paged export, one at a time. */
async function* rows<T>(exporter: (after: string | null, limit: number) => Promise<ScanPage<T>>, limit: number): AsyncGenerator<T> {
  for await (const page of scanPages(exporter, limit)) yield* page;
}
