/**
 * The upstream hub as a second source of repositories behind the hub (docs/design.md §4c): a
 * name castor does not hold, that `CASTOR_UPSTREAM_REPOS` admits and the upstream knows, is a
 * read-only mirrored repository.
 *
 * - Repositories: looked up upstream on first use and kept as `repos` rows flagged `mirror`
 *   (private when the upstream's is private or gated); a name the upstream does not know is
 *   remembered as such for `CASTOR_UPSTREAM_REFRESH`.
 * - Revisions: a commit id is immutable; a branch, tag or other name is asked again once its
 *   answer is older than the refresh time (a "not found" too). When the upstream cannot be
 *   reached, the last known answer is used, with a log line; a name never resolved answers
 *   502 (504 on a timeout) at once.
 * - Snapshots: the tree of a commit is listed upstream once (recursively, every page) and stored
 *   as the repository's commit and trees under the upstream's ids, so every listing, paths-info,
 *   sibling and resolve works from castor's records, also while the upstream is down. History
 *   (`commits`) and expanded listings (`lastCommit`) are asked of the upstream and kept in
 *   memory, being immutable per commit.
 * - Files: served from castor's store when held; otherwise filled (fills.ts) — streamed to the
 *   first client while one fetch fills the store — and from then on held, until gc evicts them.
 * - Access (rule 7 of the mirror): public mirrored repositories need a valid local token, or none
 *   with `CASTOR_UPSTREAM_ANONYMOUS=1`; private and gated ones a token whose scope names the
 *   repository or its namespace (or all repositories). Writes are refused (403, read-only).
 */
import { LRUCache } from "lru-cache";
import type { Readable } from "node:stream";
import { Readable as ReadableStream } from "node:stream";
import type { FileReader } from "../cas/file-reader.js";
import { resolveFileRange, type RangeSpec } from "../cas/reconstruction.js";
import type { XorbIngestService } from "../cas/xorb-ingest.js";
import { isGitOid } from "../format/git.js";
import { ReconstructionQueries, type Reconstruction } from "../client/reconstruction-query.js";
import { hashFromHex, type Hash } from "../format/hash.js";
import { chunkRange, type ByteRange } from "../format/ranges.js";
import { multiRangeFetchJson, rangeDescriptorJson, reconstructionV2Json, termJson, type FetchSource } from "../format/reconstruction.js";
import { covers, type Caller } from "../hub/access.js";
import { HubError } from "../hub/errors.js";
import type { MirroredRepositories, UpstreamXorbRange } from "../hub/mirrored.js";
import type { MirrorStatus } from "../wire/hub.js";
import type { MirrorCounters } from "../metrics.js";
import { formatRepoRef, quote } from "../hub/names.js";
import { TreeReader } from "../hub/paths.js";
import type { RepoType } from "../format/repo.js";
import { AlreadyExistsError, type CommitRecord, type MetadataStore, type Repo, type TreeFileEntry } from "../metadata/store.js";
import { blobKeyFromHex, type BlobStore } from "../storage/blob-store.js";
import { isUpstreamError } from "../upstream/errors.js";
import { UpstreamHub, type UpstreamRepoRef, type UpstreamTreeEntry } from "../upstream/hub.js";
import { MirrorFillError, registrationHash } from "./fill-common.js";
import { MirrorFills, type FillJob } from "./fills.js";
import { fillInlineFile } from "./inline-fill.js";
import { SpanTaps } from "./span-taps.js";
import { treesOf, upstreamHubError } from "./upstream-answers.js";
import { UpstreamXorbs } from "./upstream-xorbs.js";
import { fillXetFile, type FillResult } from "./xet-fill.js";

export interface MirrorSettings {
  /** The upstream hub's base URL. */
  url: string;
  /** castor's identity upstream; null: anonymous. */
  token: string | null;
  /** `TYPE:NAMESPACE/NAME` globs (`*` within one part); empty: every repository. */
  repos: readonly string[];
  /** How long an answer about a branch, tag or missing name is trusted. */
  refreshMs: number;
  /** Whether clients without a token may pull public upstream repositories. */
  anonymous: boolean;
}

export interface MirrorLog {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
}

export interface MirrorDeps {
  settings: MirrorSettings;
  store: MetadataStore;
  blobs: BlobStore;
  xorbs: Pick<XorbIngestService, "storeValidated">;
  reader: Pick<FileReader, "open" | "openTerms">;
  log: MirrorLog;
  /** For tests: the upstream client (default: one for `settings`). */
  upstream?: UpstreamHub;
  /** This node's name in fill claims (default: random per process). */
  node?: string;
  now?: () => Date;
}

/** A commit as the refs and commits listings of a mirrored repository give it (fields not known are empty). */
function listedCommit(oid: string, fields: Partial<CommitRecord> = {}): CommitRecord {
  return { oid, treeOid: "", parentOids: [], title: "", message: "", author: "", createdAt: new Date(0), object: "", ...fields };
}

/**
 * How long a transfer request for a range a fill will bring waits for it: under the 120 s a
 * client (hf_xet) waits for a silent answer, long enough for a fill of tens of GB to reach it.
 */
const UPSTREAM_RANGE_WAIT_MS = 110_000;
/** Files served count as a use at most this often per file (each use is a write). */
const TOUCH_INTERVAL_MS = 60_000;
/** Entries of the in-memory caches of immutable upstream answers. */
const CACHE_ENTRIES = 2_000;

export class MirrorSource implements MirroredRepositories {
  readonly upstream: UpstreamHub;
  servedBytes = 0;
  private counters: MirrorCounters | null = null;
  readonly fills: MirrorFills;
  private readonly settings: MirrorSettings;
  private readonly admitted: RegExp[];
  private readonly now: () => Date;
  /** Names the upstream does not know, until when that answer is trusted. */
  private readonly misses = new Map<string, number>();
  private readonly snapshots = new Map<string, Promise<CommitRecord>>();
  private readonly commitPages = new LRUCache<string, { commits: CommitRecord[]; more: boolean }>({ max: CACHE_ENTRIES });
  private readonly lastCommitsCache = new LRUCache<string, CommitRecord | "none">({ max: 50 * CACHE_ENTRIES });
  private readonly xetEntries = new LRUCache<string, Map<string, { path: string; entry: TreeFileEntry }>>({ max: 64 });
  private readonly touched = new LRUCache<string, number>({ max: 50 * CACHE_ENTRIES });
  private readonly upstreamXorbs: UpstreamXorbs;
  /** Upstream ranges this node's fills are fetching, for clients of castor's CAS reading along. */
  private readonly taps = new SpanTaps();
  /** Upstream xorbs of fills that failed lately, with why: their transfer requests answer that at once. */
  private readonly failedXorbs = new LRUCache<string, string>({ max: 10_000, ttl: 60_000 });

  constructor(private readonly deps: MirrorDeps) {
    this.settings = deps.settings;
    this.now = deps.now ?? (() => new Date());
    this.admitted = deps.settings.repos.map(globToRegExp);
    this.upstream =
      deps.upstream ?? new UpstreamHub({ url: deps.settings.url, token: deps.settings.token, onRequest: (outcome) => this.counters?.upstreamRequest(outcome) });
    this.upstreamXorbs = new UpstreamXorbs({
      store: deps.store,
      blobs: deps.blobs,
      localFills: () => this.fills.inProgress,
      tapped: (xorbHex, range) => this.taps.read(xorbHex, range),
      failure: (xorbHex) => this.failedXorbs.get(xorbHex),
    });
    this.fills = new MirrorFills({
      claims: deps.store.mirror,
      node: deps.node,
      now: this.now,
      onFinished: (key, outcome) => {
        if (outcome.ok) {
          if (outcome.result !== null)
            deps.log.info({ file: key, fetchedBytes: outcome.result.fetchedBytes, heldBytes: outcome.result.heldBytes }, "mirror: file fetched and stored");
        } else {
          deps.log.warn({ file: key, error: (outcome.error as Error)?.message }, "mirror: a fill failed, nothing of it was published");
        }
      },
    });
  }

  /** The upstream's origin, for messages. */
  get origin(): string {
    return this.upstream.origin;
  }

  countInto(counters: MirrorCounters): void {
    this.counters = counters;
  }

  /** Whether `CASTOR_UPSTREAM_REPOS` admits the repository. */
  admits(type: RepoType, name: string): boolean {
    return this.admitted.length === 0 || this.admitted.some((glob) => glob.test(`${type}:${name}`));
  }

  // --- repositories ---------------------------------------------------------------------------

  /**
   * The mirrored repository for a name castor does not hold: asked of the upstream (once per
   * refresh time for names it does not know) and recorded. Null when it is not admitted or the
   * upstream does not know it; the repository castor holds when another request created it
   * meanwhile (a local one wins).
   */
  async lookup(caller: Caller, type: RepoType, name: string): Promise<Repo | null> {
    if (!this.admits(type, name)) return null;
    // Anonymous callers may not pull through unless allowed: do not even ask.
    if (caller.grant === null && !this.settings.anonymous) return null;
    const key = `${type}:${name}`;
    const miss = this.misses.get(key);
    if (miss !== undefined && miss > this.now().getTime()) return null;
    let restricted: boolean;
    try {
      const info = await this.upstream.repoInfo({ type, name });
      restricted = info.private || info.gated;
    } catch (error) {
      if (isUpstreamError(error, "not_found")) {
        this.misses.set(key, this.now().getTime() + this.settings.refreshMs);
        return null;
      }
      throw this.hubErrorOf(error, `looking up ${key}`);
    }
    this.misses.delete(key);
    try {
      const repo = await this.deps.store.mirror.createMirroredRepo(type, name, restricted, this.now());
      this.deps.log.info({ repo: key }, `mirror: ${key} is mirrored from ${this.origin}`);
      return repo;
    } catch (error) {
      if (error instanceof AlreadyExistsError) return this.deps.store.getRepo(type, name);
      throw error;
    }
  }

  /** Rule 7: who may read a mirrored repository. */
  canRead(caller: Caller, repo: Repo): boolean {
    if (caller.grant === null) return this.settings.anonymous && !repo.private;
    return !repo.private || covers(caller.grant, repo);
  }

  /** The refusal of any write to a mirrored repository. */
  readOnly(repo: Repo): HubError {
    return new HubError(403, `${formatRepoRef(repo)} is a read-only mirror of ${this.origin}: change it there, or create a repository of another name here`);
  }

  // --- revisions ------------------------------------------------------------------------------

  /** The commit `revision` names in the mirrored repository, its snapshot stored. */
  async resolve(repo: Repo, revision: string): Promise<CommitRecord> {
    this.touchRepo(repo);
    if (isGitOid(revision)) {
      const known = await this.deps.store.getCommit(repo.id, revision);
      if (known !== null) return known;
      return this.snapshot(repo, revision, null);
    }
    const ref = await this.deps.store.mirror.getMirrorRef(repo.id, revision);
    const fresh = ref !== null && this.now().getTime() - ref.checkedAt.getTime() < this.settings.refreshMs;
    if (!fresh) {
      try {
        const info = await this.upstream.repoInfo(upstreamRef(repo), revision);
        await this.deps.store.mirror.putMirrorRef(repo.id, { name: revision, kind: ref?.kind ?? null, commitOid: info.sha, checkedAt: this.now() });
        const restricted = info.private || info.gated;
        if (restricted !== repo.private) await this.deps.store.setRepoPrivate(repo.id, restricted);
        return this.snapshot(repo, info.sha, info.lastModified);
      } catch (error) {
        if (isUpstreamError(error, "not_found")) {
          await this.deps.store.mirror.putMirrorRef(repo.id, { name: revision, kind: null, commitOid: null, checkedAt: this.now() });
          throw revisionNotFound(repo, revision, this.origin);
        }
        if (!(isUpstreamError(error) && error.isOutage) || ref === null) throw this.hubErrorOf(error, `resolving ${quote(revision)} of ${formatRepoRef(repo)}`);
        this.deps.log.warn(
          { repo: formatRepoRef(repo), revision, commit: ref.commitOid, checkedAt: ref.checkedAt.toISOString(), error: error.message },
          "mirror: the upstream hub cannot be reached; serving the last known answer for this revision",
        );
      }
    }
    if (ref.commitOid === null) throw revisionNotFound(repo, revision, this.origin);
    return this.snapshot(repo, ref.commitOid, null);
  }

  /** The repository's branches and tags, as the upstream lists them now (or as last seen, when it cannot be reached). */
  async refs(repo: Repo): Promise<{ branches: { name: string; commit: CommitRecord }[]; tags: { name: string; commit: CommitRecord }[] }> {
    try {
      const refs = await this.upstream.refs(upstreamRef(repo));
      const checkedAt = this.now();
      for (const [kind, list] of [
        ["branch", refs.branches],
        ["tag", refs.tags],
      ] as const) {
        for (const { name, commit } of list) await this.deps.store.mirror.putMirrorRef(repo.id, { name, kind, commitOid: commit, checkedAt });
      }
      const entry = ({ name, commit }: { name: string; commit: string }) => ({ name, commit: listedCommit(commit) });
      return { branches: refs.branches.map(entry), tags: refs.tags.map(entry) };
    } catch (error) {
      if (!(isUpstreamError(error) && error.isOutage)) throw this.hubErrorOf(error, `listing the refs of ${formatRepoRef(repo)}`);
      this.deps.log.warn({ repo: formatRepoRef(repo), error: error.message }, "mirror: the upstream hub cannot be reached; listing the last known refs");
      const known = (await this.deps.store.mirror.listMirrorRefs(repo.id)).filter((ref) => ref.commitOid !== null);
      const of = (kind: "branch" | "tag") => known.filter((ref) => ref.kind === kind).map((ref) => ({ name: ref.name, commit: listedCommit(ref.commitOid!) }));
      return { branches: of("branch"), tags: of("tag") };
    }
  }

  /** What `main` pointed at when the upstream was last asked; null when never (listings never ask it). */
  async listedHead(repo: Repo): Promise<CommitRecord | null> {
    const main = await this.deps.store.mirror.getMirrorRef(repo.id, "main");
    return main?.commitOid ? this.deps.store.getCommit(repo.id, main.commitOid) : null;
  }

  /** What the mirror holds and saved (`GET /api/castor/mirror`). */
  async status(): Promise<MirrorStatus> {
    const totals = await this.deps.store.mirror.mirroredTotals();
    return { upstream: this.origin, files: totals.files, bytes: totals.bytes, fetchedBytes: totals.fetchedBytes, servedBytes: this.servedBytes };
  }

  /** A page of the history from `commit` (the upstream's listing, kept in memory). */
  async commitsFrom(repo: Repo, commit: CommitRecord, skip: number, limit: number): Promise<{ commits: CommitRecord[]; more: boolean }> {
    const page = Math.floor(skip / limit);
    const key = `${repo.id}:${commit.oid}:${page}:${limit}`;
    const cached = this.commitPages.get(key);
    if (cached !== undefined) return cached;
    try {
      const { commits, more } = await this.upstream.commits(upstreamRef(repo), commit.oid, { p: page, limit });
      const listed = {
        commits: commits.map((c) =>
          listedCommit(c.id, {
            title: c.title,
            message: c.message === "" ? c.title : `${c.title}\n\n${c.message}`,
            author: c.authors[0] ?? "",
            createdAt: c.date === null ? new Date(0) : new Date(c.date),
          }),
        ),
        more,
      };
      this.commitPages.set(key, listed);
      return listed;
    } catch (error) {
      throw this.hubErrorOf(error, `listing the history of ${formatRepoRef(repo)}`);
    }
  }

  /** The commit that last changed each path (the upstream's expanded paths-info); paths it cannot say are absent. */
  async lastCommits(repo: Repo, commit: CommitRecord, paths: string[]): Promise<Map<string, CommitRecord>> {
    const found = new Map<string, CommitRecord>();
    const key = (path: string) => `${repo.id}:${commit.oid}:${path}`;
    const missing = paths.filter((path) => !this.lastCommitsCache.has(key(path)));
    if (missing.length > 0) {
      try {
        const entries = await this.upstream.pathsInfo(upstreamRef(repo), commit.oid, missing, true);
        for (const path of missing) this.lastCommitsCache.set(key(path), "none");
        for (const entry of entries) {
          if (entry.lastCommit === null) continue;
          const date = new Date(entry.lastCommit.date);
          this.lastCommitsCache.set(
            key(entry.path),
            listedCommit(entry.lastCommit.id, { title: entry.lastCommit.title, createdAt: Number.isNaN(date.getTime()) ? new Date(0) : date }),
          );
        }
      } catch (error) {
        // Expanded listings still answer, without lastCommit, while the upstream is away.
        if (!(isUpstreamError(error) && error.isOutage)) throw this.hubErrorOf(error, `listing ${formatRepoRef(repo)}`);
        this.deps.log.warn({ repo: formatRepoRef(repo), error: error.message }, "mirror: the upstream hub cannot be reached; listing without lastCommit");
      }
    }
    for (const path of paths) {
      const last = this.lastCommitsCache.get(key(path));
      if (last !== undefined && last !== "none") found.set(path, last);
    }
    return found;
  }

  /**
   * The stored snapshot of `sha`, listed upstream (every page, recursively) and stored first
   * when castor does not have it. One listing per commit however many ask at once.
   */
  private snapshot(repo: Repo, sha: string, date: Date | null): Promise<CommitRecord> {
    const key = `${repo.id}:${sha}`;
    let pending = this.snapshots.get(key);
    if (pending === undefined) {
      pending = this.storeSnapshot(repo, sha, date).finally(() => this.snapshots.delete(key));
      this.snapshots.set(key, pending);
    }
    return pending;
  }

  private async storeSnapshot(repo: Repo, sha: string, date: Date | null): Promise<CommitRecord> {
    const known = await this.deps.store.getCommit(repo.id, sha);
    if (known !== null) return known;
    const what = `listing ${formatRepoRef(repo)} at ${sha}`;
    try {
      // A commit id asked directly is checked to be one of this repository's, and dated.
      const createdAt = date ?? (await this.upstream.repoInfo(upstreamRef(repo), sha)).lastModified ?? new Date(0);
      const entries: UpstreamTreeEntry[] = [];
      for await (const entry of this.upstream.listTree(upstreamRef(repo), sha, { recursive: true })) entries.push(entry);
      const { root, trees } = treesOf(entries);
      const commit = listedCommit(sha, { treeOid: root, createdAt: new Date(Math.floor(createdAt.getTime() / 1000) * 1000) });
      await this.deps.store.mirror.putMirrorSnapshot(repo.id, commit, trees);
      return commit;
    } catch (error) {
      if (isUpstreamError(error, "not_found")) throw revisionNotFound(repo, sha, this.origin);
      throw this.hubErrorOf(error, what);
    }
  }

  // --- files ----------------------------------------------------------------------------------

  /**
   * Bytes `start..end` (inclusive) of a file of a mirrored repository: from castor's store when
   * it holds the file, otherwise streamed while it is fetched (and then held). `end < start`
   * for an empty range.
   */
  async read(repo: Repo, commit: CommitRecord, path: string, file: TreeFileEntry, start: number, end: number): Promise<Readable | "held"> {
    this.touchRepo(repo);
    if (end < start) return ReadableStream.from([]);
    const job = this.jobFor(repo, commit, path, file);
    if (await this.held(repo, file)) {
      this.counters?.read("hit");
      this.count(job, end - start + 1);
      // A Xet file is served as any file castor holds, by the route's own (faster) path; a git
      // file's blob is found by the git id the upstream's tree states, which only the mirror maps.
      return file.xetHash !== null ? "held" : job.stored(start, end);
    }
    this.counters?.read("miss");
    this.count(job, end - start + 1);
    const stream = this.fills.read(job, start, end);
    try {
      // A file that cannot be fetched at all is an error answer, not a response cut short.
      await stream.started;
    } catch (error) {
      throw this.hubErrorOf(error, `fetching ${quote(path)} of ${formatRepoRef(repo)}`);
    }
    return stream;
  }

  /**
   * For the CAS: makes the Xet file `xetHash` of the mirrored repository readable through castor
   * (filled and linked to it) when a commit of it at `revision` names the file; false when none
   * does. What hf_xet's reconstruction of a file not held yet waits for.
   */
  async ensureXet(repo: Repo, revision: string, xetHash: string): Promise<boolean> {
    const hash = hashFromHex(xetHash);
    if (await this.xetHeld(repo, hash)) return true;
    const commit = await this.resolve(repo, revision);
    const found = await this.xetEntry(repo, commit, xetHash);
    if (found === null) return false;
    this.counters?.read("miss");
    await this.ensure(this.jobFor(repo, commit, found.path, found.entry));
    return this.deps.store.isFileInRepo(hash, repo.id);
  }

  /**
   * For the CAS: the V2 reconstruction of bytes `range` of a Xet file castor does not hold yet,
   * answered at once while the file is fetched (the fill starts here, or joins the one running).
   * Its terms and byte ranges are the upstream's — castor keeps every chunk byte for byte, under
   * the upstream xorb's hash when it fetched it whole, repacked otherwise — and its URLs castor's
   * own (`sign`): the transfer route serves each range once castor holds it (`upstreamXorbRange`),
   * so a client reads the file as it arrives instead of after it. Null when no commit of the
   * repository at `revision` names the file.
   */
  async liveReconstruction(
    repo: Repo,
    revision: string,
    xetHash: string,
    rangeSpec: RangeSpec,
    sign: (xorb: Hash, ranges: readonly ByteRange[]) => string,
  ): Promise<{ body: string; terms: number } | null> {
    const commit = await this.resolve(repo, revision);
    const found = await this.xetEntry(repo, commit, xetHash);
    if (found === null) return null;
    // A ReconstructionError (416, with the size) for a range at or past the end, as for any file.
    const span = resolveFileRange(rangeSpec, found.entry.size);
    const range = { start: span.start, end: span.end - 1 };
    this.counters?.read("miss");
    this.ensure(this.jobFor(repo, commit, found.path, found.entry)).catch(() => undefined);
    let reconstruction: Reconstruction | null;
    try {
      ({ reconstruction } = await new ReconstructionQueries(this.upstream.cas(upstreamRef(repo), commit.oid), xetHash).query(range.start, range.end));
    } catch (error) {
      throw this.hubErrorOf(
        this.upstream.failure(error, `asking the upstream hub ${this.origin} how to reconstruct ${xetHash}`),
        "reconstructing a mirrored file",
      );
    }
    if (reconstruction === null) return null;
    const ranges = new Map<string, Map<string, FetchSource>>();
    let terms = "";
    for (const [i, term] of reconstruction.terms.entries()) {
      terms += (i === 0 ? "" : ",") + termJson(term.xorbHex, term.unpackedLength, chunkRange(term.chunkStart, term.chunkEnd));
      const spans = ranges.get(term.xorbHex) ?? new Map<string, FetchSource>();
      spans.set(`${term.span.bytes.start}-${term.span.bytes.end}`, term.span);
      ranges.set(term.xorbHex, spans);
    }
    let xorbs = "";
    for (const [xorbHex, spans] of ranges) {
      const entries = [...spans.values()]
        .map((span) => multiRangeFetchJson(JSON.stringify(sign(hashFromHex(xorbHex), [span.bytes])), rangeDescriptorJson(span.chunks, span.bytes)))
        .join(",");
      xorbs += `${xorbs === "" ? "" : ","}"${xorbHex}":[${entries}]`;
    }
    return { body: reconstructionV2Json(reconstruction.offsetIntoFirstRange, terms, xorbs), terms: reconstruction.terms.length };
  }

  /** For the transfer route: bytes `range` of upstream xorb `xorbHex` (see upstream-xorbs.ts); null when castor will not have them. */
  upstreamXorbRange(xorbHex: string, range: ByteRange): Promise<UpstreamXorbRange | null> {
    return this.upstreamXorbs.range(xorbHex, range, UPSTREAM_RANGE_WAIT_MS);
  }

  /** Fills a file (if castor does not hold it) and waits until it is stored: `castor mirror pull`. */
  async ensureFile(repo: Repo, commit: CommitRecord, path: string, file: TreeFileEntry): Promise<FillResult | null> {
    if (await this.held(repo, file)) return null;
    return this.ensure(this.jobFor(repo, commit, path, file));
  }

  private async ensure(job: FillJob): Promise<FillResult | null> {
    try {
      return await this.fills.ensure(job);
    } catch (error) {
      throw this.hubErrorOf(error, "fetching a file");
    }
  }

  /** Whether castor holds the file for this repository (linking a Xet file it holds for another one). */
  private async held(repo: Repo, file: TreeFileEntry): Promise<boolean> {
    if (file.xetHash !== null) return this.xetHeld(repo, hashFromHex(file.xetHash));
    return file.size === 0 || (await this.inlineSha256(file)) !== null;
  }

  private async xetHeld(repo: Repo, hash: Hash): Promise<boolean> {
    const { store } = this.deps;
    if (await store.isFileInRepo(hash, repo.id)) return true;
    const record = await store.getFile(hash);
    if (record === null) return false;
    // Held already (for another repository, or uploaded here): linked to this one, no fetch.
    await store.registerShard({ shardHash: registrationHash(hash), repoId: repo.id, files: [record], dedupEntries: [] });
    return true;
  }

  /** The SHA-256 of a git or plain LFS file castor holds, or null. */
  private async inlineSha256(file: Pick<TreeFileEntry, "oid" | "sha256">): Promise<string | null> {
    if (file.sha256 !== "" && (await this.deps.blobs.exists(blobKeyFromHex("inline", file.sha256)))) return file.sha256;
    const mirrored = await this.deps.store.mirror.findMirroredInline(file.oid);
    if (mirrored === null) return null;
    const sha256 = Buffer.from(mirrored.hash).toString("hex");
    return (await this.deps.blobs.exists(blobKeyFromHex("inline", sha256))) ? sha256 : null;
  }

  private jobFor(repo: Repo, commit: CommitRecord, path: string, file: TreeFileEntry): FillJob {
    const { store, blobs, reader } = this.deps;
    const onFetched = (bytes: number) => this.counters?.fetched(bytes);
    if (file.xetHash !== null) {
      const xetHash = file.xetHash;
      const hash = hashFromHex(xetHash);
      let planned: string[] = [];
      return {
        key: `xet:${xetHash}`,
        fill: (output) =>
          fillXetFile(
            {
              upstream: this.upstream,
              store,
              storeXorb: (record, bytes) => this.deps.xorbs.storeValidated(record, bytes),
              readTerms: (terms) => reader.openTerms(terms).read(),
              now: this.now,
              onFetched,
              onPlan: (xorbs) => {
                planned = xorbs;
              },
              taps: this.taps,
            },
            { repo: upstreamRef(repo), commit: commit.oid, path, repoId: repo.id, xetHash, size: file.size, sha256: file.sha256 === "" ? null : file.sha256 },
            output,
          ).catch((error: unknown) => {
            const why = String((this.hubErrorOf(error, `fetching ${quote(path)} of ${formatRepoRef(repo)}`) as Error)?.message ?? error);
            for (const xorb of planned) this.failedXorbs.set(xorb, why);
            throw error;
          }),
        isStored: () => this.held(repo, file),
        stored: async (start, end) => {
          const stored = await reader.open(hash);
          if (stored === null) throw new Error(`mirrored Xet file ${xetHash} is no longer registered`);
          return stored.read({ start, end });
        },
      };
    }
    return {
      key: `inline:${file.oid}`,
      fill: (output) =>
        fillInlineFile(
          { upstream: this.upstream, blobs, store, now: this.now, onFetched },
          { repo: upstreamRef(repo), commit: commit.oid, path, gitOid: file.oid, size: file.size, sha256: file.sha256 === "" ? null : file.sha256 },
          output,
        ),
      isStored: () => this.held(repo, file),
      stored: async (start, end) => {
        const sha256 = await this.inlineSha256(file);
        if (sha256 === null) throw new Error(`mirrored file ${file.oid} is no longer stored`);
        return blobs.read(blobKeyFromHex("inline", sha256), { offset: start, length: end - start + 1 });
      },
    };
  }

  /** The path and entry of the Xet file `xetHash` in `commit`, or null (an index of the commit's Xet files, kept for a few commits). */
  private async xetEntry(repo: Repo, commit: CommitRecord, xetHash: string): Promise<{ path: string; entry: TreeFileEntry } | null> {
    const key = `${repo.id}:${commit.oid}`;
    let index = this.xetEntries.get(key);
    if (index === undefined) {
      index = new Map();
      for await (const { path, entry } of new TreeReader(this.deps.store, repo.id).walk(commit.treeOid, "", true)) {
        if (entry.type === "file" && entry.xetHash !== null && !index.has(entry.xetHash)) index.set(entry.xetHash, { path, entry });
      }
      this.xetEntries.set(key, index);
    }
    return index.get(xetHash) ?? null;
  }

  /** Counts bytes served and stamps the file's last use (at most once a minute per file). */
  private count(job: FillJob, bytes: number): void {
    this.servedBytes += bytes;
    this.counters?.served(bytes);
    const now = this.now().getTime();
    const last = this.touched.get(job.key);
    if (last !== undefined && now - last < TOUCH_INTERVAL_MS) return;
    this.touched.set(job.key, now);
    const [kind, id] = job.key.split(":") as ["xet" | "inline", string];
    const touch = async () => {
      if (kind === "xet") return this.deps.store.mirror.touchMirroredFile("xet", hashFromHex(id), this.now());
      const mirrored = await this.deps.store.mirror.findMirroredInline(id);
      if (mirrored !== null) await this.deps.store.mirror.touchMirroredFile("inline", mirrored.hash, this.now());
    };
    touch().catch(() => undefined);
  }

  private touchRepo(repo: Repo): void {
    const key = `repo:${repo.id}`;
    const now = this.now().getTime();
    const last = this.touched.get(key);
    if (last !== undefined && now - last < TOUCH_INTERVAL_MS) return;
    this.touched.set(key, now);
    this.deps.store.mirror.touchMirroredRepo(repo.id, this.now()).catch(() => undefined);
  }

  /** A failure asking the upstream (or filling a file), as the hub answers it: naming the upstream, promptly. */
  hubErrorOf(error: unknown, what: string): unknown {
    if (error instanceof HubError) return error;
    if (error instanceof MirrorFillError) return new HubError(502, `${what}: ${error.message}`);
    if (!isUpstreamError(error)) return error;
    return upstreamHubError(error, what, this.origin);
  }
}

function revisionNotFound(repo: Repo, revision: string, origin: string): HubError {
  return new HubError(404, `revision ${quote(revision)} not found in ${formatRepoRef(repo)} (mirrored from ${origin})`, "RevisionNotFound");
}

function upstreamRef(repo: Pick<Repo, "type" | "name">): UpstreamRepoRef {
  return { type: repo.type, name: repo.name };
}

/** `model:org/*` → a pattern of whole `TYPE:NS/NAME` strings, `*` standing for any characters but `/` and `:`. */
export function globToRegExp(glob: string): RegExp {
  const escaped = glob.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[^/:]*");
  return new RegExp(`^${escaped}$`);
}
