/**
 * Migration (`castor migrate --from DATA_DIR`, src/cli/migrate.ts): copies everything of one
 * store — in practice an embedded data dir — — repositories
 * (with their visibility), hub tokens (their secret hashes; the secrets were never stored),
 * objects of every blob kind (xorbs, shards, inline file contents), xorb chunk tables, files,
 * file ↔ repository links, the SHA-256 index, registered shards, the global-dedup index, and
 * the repositories' histories (trees, commits, revisions with the commits they point at) and
 * the daily storage statistics samples — into the configured target: normally PostgreSQL (`CASTOR_DATABASE_URL`) and S3
 * (`CASTOR_S3_*`), where several castor nodes then serve it.
 *
 * Idempotent: objects are put-if-absent and rows insert-or-ignore, so a run cut short is simply
 * run again and completes without duplicates; a run that finds everything in place copies
 * nothing. Objects are copied before the records that point at them, files and inline objects
 * before the trees that name them, trees before commits, commits before the revisions that
 * point at them: at every moment each record in the target has what it refers to.
 *
 * Repository ids are per store: the target numbers repositories its own way, and every row
 * naming one (revisions, commits, trees, token coverage, file links, the SHA-256 index) is
 * mapped. A repository the target already has (same type and name) is taken to be the same
 * one: the source's rows join it. Records the target holds already are kept as they are
 * (insert-or-ignore), except what a run after the source stopped must carry: a repository's
 * visibility, the commit a revision points at, a hub token's revocation.
 *
 * The source is read while it may still be in use, but rows written behind a scan's cursor
 * are missed: stop the embedded server, then run (or run again) before starting the nodes.
 */
import { hashToHex } from "../format/hash.js";
import type { HubToken, MetadataStore, ScanPage } from "../metadata/store.js";
import { BLOB_KINDS, blobKey, type BlobKey, type BlobKind, type BlobStore } from "../storage/blob-store.js";

/** Rows per scan page for tables of large rows (chunk tables, term lists, trees) and of small ones. */
const LARGE_ROW_PAGE = 256;
const SMALL_ROW_PAGE = 2000;
/** Trees per scan page: a tree of 10,000 entries is ~2 MB of text. */
const TREE_PAGE = 32;
/** The summary's name of each blob kind's objects. */
const OBJECT_STEPS: Record<BlobKind, string> = { xorbs: "xorb objects", shards: "shard objects", inline: "inline file objects" };
/** Tokens per import batch. */
const TOKEN_BATCH = 500;
/** Objects copied at once: enough to keep a network store busy, few enough for 2 cores. */
const DEFAULT_COPY_CONCURRENCY = 4;
/** Least time between two progress lines of one step. */
const PROGRESS_INTERVAL_MS = 1000;

export interface MigrationSource {
  metadata: MetadataStore;
  /** null when the data dir has no `blobs/` folder (its server never stored an object). */
  blobs: BlobStore | null;
}

export interface MigrationTarget {
  metadata: MetadataStore;
  blobs: BlobStore;
}

export interface MigrationOptions {
  /** Receives progress lines (no newline). */
  progress?: (line: string) => void;
  /** Objects copied at once; default 4. */
  concurrency?: number;
  /** Caps every export page (tests use small pages to exercise paging). */
  maxPageRows?: number;
  /** Clock for progress throttling; tests pin it. */
  now?: () => number;
}

/** One line of the summary: how many the source holds, and how many this run copied. */
export interface MigrationStep {
  name: string;
  inSource: number;
  copied: number;
}

/** A record in the source contradicts the data dir (a xorb recorded without its object). */
export class MigrationSourceError extends Error {
  override readonly name = "MigrationSourceError";
}

/**
 * Copies `source` into `target` (see the file comment) and reports every step. Throws on the
 * first failure; what was copied until then stays and is skipped by the next run.
 */
export async function migrateStores(source: MigrationSource, target: MigrationTarget, options: MigrationOptions = {}): Promise<MigrationStep[]> {
  const progress = new Progress(options.progress ?? (() => undefined), options.now ?? Date.now);
  const pageRows = (rows: number) => Math.min(rows, options.maxPageRows ?? rows);
  const steps: MigrationStep[] = [];
  const step = (name: string, inSource: number, copied: number) => {
    steps.push({ name, inSource, copied });
    progress.done(name, inSource, copied);
  };

  // Repositories first: every other row names one (mapped to the target's ids).
  const repoIds = new Map<number, number>();
  const repos = await source.metadata.listRepos();
  let reposCopied = 0;
  for (const repo of repos) {
    const imported = await target.metadata.importRepo({
      type: repo.type,
      name: repo.name,
      createdAt: repo.createdAt,
      private: repo.private,
      // A mirrored repository stays one; the mirror's cache (refs, files held) is not carried.
      ...(repo.mirror ? { mirror: true as const } : {}),
    });
    repoIds.set(repo.id, imported.repo.id);
    if (imported.inserted) reposCopied++;
  }
  step("repositories", repos.length, reposCopied);
  const mapRepo = (id: number): number => {
    const mapped = repoIds.get(id);
    if (mapped === undefined)
      throw new MigrationSourceError(`a row of the source names repository id ${id}, which the source does not list: the data dir's database is damaged`);
    return mapped;
  };

  const tokens = (await source.metadata.listHubTokens()).map(
    (token): HubToken => ({ ...token, repos: token.repos === "all" ? "all" : token.repos.map(mapRepo) }),
  );
  let tokensCopied = 0;
  for (let at = 0; at < tokens.length; at += TOKEN_BATCH) tokensCopied += await target.metadata.importHubTokens(tokens.slice(at, at + TOKEN_BATCH));
  step("hub tokens (secret hashes)", tokens.length, tokensCopied);

  // Objects of every kind before the records that point at them.
  const concurrency = options.concurrency ?? DEFAULT_COPY_CONCURRENCY;
  const sourceXorbs = new Set<string>();
  for (const kind of BLOB_KINDS) {
    const name = OBJECT_STEPS[kind];
    const { keys, copied } =
      source.blobs === null
        ? { keys: [], copied: 0 }
        : await copyObjects(kind, source.blobs, target.blobs, concurrency, (done, total) => progress.tick(name, done, total));
    if (kind === "xorbs") for (const key of keys) sourceXorbs.add(key);
    step(name, keys.length, copied);
  }

  const copyPages = async <T>(
    name: string,
    limit: number,
    exporter: (after: string | null, limit: number) => Promise<ScanPage<T>>,
    importer: (rows: T[]) => Promise<number>,
  ): Promise<void> => {
    let inSource = 0;
    let copied = 0;
    let after: string | null = null;
    for (;;) {
      const page: ScanPage<T> = await exporter(after, pageRows(limit));
      inSource += page.rows.length;
      if (page.rows.length > 0) copied += await importer(page.rows);
      progress.tick(name, inSource);
      if (page.next === null) break;
      after = page.next;
    }
    step(name, inSource, copied);
  };

  await copyPages(
    "xorbs (chunk tables)",
    LARGE_ROW_PAGE,
    (a, n) => source.metadata.scanXorbs(a, n),
    async (xorbs) => {
      for (const xorb of xorbs) {
        const key = blobKey("xorbs", xorb.hash);
        const size = sourceXorbs.has(key) ? await source.blobs!.size(key) : null;
        if (size !== xorb.serializedLength) {
          throw new MigrationSourceError(
            size === null
              ? `xorb ${hashToHex(xorb.hash)} is recorded in the source's database but its object is missing from the data dir's blobs/: the data dir is damaged (restore blobs/ from a backup)`
              : `the object of xorb ${hashToHex(xorb.hash)} has ${size} bytes but its record says ${xorb.serializedLength}: the data dir is damaged`,
          );
        }
      }
      return target.metadata.importXorbs(xorbs);
    },
  );
  await copyPages(
    "files",
    LARGE_ROW_PAGE,
    (a, n) => source.metadata.scanFiles(a, n),
    (files) => target.metadata.importFiles(files),
  );
  await copyPages(
    "file ↔ repository links",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.scanFileRepoLinks(a, n),
    (links) => target.metadata.importFileRepoLinks(links.map((link) => ({ ...link, repoId: mapRepo(link.repoId) }))),
  );
  await copyPages(
    "SHA-256 index entries",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.scanSha256Index(a, n),
    (entries) => target.metadata.importSha256Index(entries.map((entry) => ({ ...entry, repoId: mapRepo(entry.repoId) }))),
  );
  await copyPages(
    "registered shards",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.scanShards(a, n),
    (shards) => target.metadata.importShards(shards),
  );
  await copyPages(
    "dedup index entries",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.scanDedupEntries(a, n),
    (entries) => target.metadata.importDedupEntries(entries),
  );

  // Histories: trees (naming files and inline objects), commits (naming trees), then the
  // revisions that point at commits.
  await copyPages(
    "trees",
    TREE_PAGE,
    (a, n) => source.metadata.scanTrees(a, n),
    (trees) => target.metadata.importTrees(trees.map((tree) => ({ ...tree, repoId: mapRepo(tree.repoId) }))),
  );
  await copyPages(
    "commits",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.scanCommits(a, n),
    (commits) => target.metadata.importCommits(commits.map((commit) => ({ ...commit, repoId: mapRepo(commit.repoId) }))),
  );
  let revisionCount = 0;
  let revisionsCopied = 0;
  for (const repo of repos) {
    const revisions = await source.metadata.listRevisions(repo.id);
    revisionCount += revisions.length;
    revisionsCopied += await target.metadata.importRevisions(revisions.map((revision) => ({ ...revision, repoId: mapRepo(revision.repoId) })));
  }
  step("revisions", revisionCount, revisionsCopied);

  // The growth history `castor stats --history` shows. A day the target has a sample of
  // already (its nodes ran that day) keeps the target's.
  const samples = await source.metadata.listStatsSamples();
  let samplesCopied = 0;
  for (const sample of samples) if (await target.metadata.recordStatsSample(sample)) samplesCopied++;
  step("storage statistics samples", samples.length, samplesCopied);
  return steps;
}

/**
 * Copies every object of `kind` the target lacks (listed once on each side, so a repeated run
 * costs two listings); returns the source's keys and how many were copied.
 */
async function copyObjects(
  kind: BlobKind,
  source: BlobStore,
  target: BlobStore,
  concurrency: number,
  tick: (done: number, total: number) => void,
): Promise<{ keys: BlobKey[]; copied: number }> {
  const keys: BlobKey[] = [];
  for await (const key of source.list(`${kind}/`)) keys.push(key);
  const present = new Set<string>();
  for await (const key of target.list(`${kind}/`)) present.add(key);
  const missing = keys.filter((key) => !present.has(key));
  let next = 0;
  let copied = 0;
  let done = keys.length - missing.length;
  let failed = false;
  tick(done, keys.length);
  const worker = async () => {
    while (!failed && next < missing.length) {
      const key = missing[next++];
      try {
        // Streamed; the target publishes the object only once it is complete.
        if ((await target.putIfAbsent(key, await source.read(key))).inserted) copied++;
      } catch (err) {
        failed = true;
        throw err;
      }
      tick(++done, keys.length);
    }
  };
  // allSettled: every copy has stopped before the caller closes the stores.
  const workers = await Promise.allSettled(Array.from({ length: Math.max(1, Math.min(concurrency, missing.length)) }, worker));
  const failure = workers.find((result): result is PromiseRejectedResult => result.status === "rejected");
  if (failure) throw failure.reason;
  return { keys, copied };
}

/** Progress lines: at most one per step and second, plus one when a step ends. */
class Progress {
  private lastLineAt = new Map<string, number>();

  constructor(
    private readonly write: (line: string) => void,
    private readonly now: () => number,
  ) {}

  tick(name: string, done: number, total?: number): void {
    const now = this.now();
    const last = this.lastLineAt.get(name);
    if (last !== undefined && now - last < PROGRESS_INTERVAL_MS) return;
    this.lastLineAt.set(name, now);
    this.write(`${name}: ${done}${total === undefined ? "" : `/${total}`}…`);
  }

  done(name: string, inSource: number, copied: number): void {
    this.write(`${name}: ${inSource} in the source, ${copied} copied${inSource > copied ? `, ${inSource - copied} already there` : ""}`);
  }
}

// ---------------------------------------------------------------------------------------------
// The command
