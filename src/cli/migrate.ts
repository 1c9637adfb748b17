/**
 * `castor migrate --from DATA_DIR`: copies everything of an embedded data dir — repositories
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
 * The source is read while it may still be in use, but rows written behind an export's cursor
 * are missed: stop the embedded server, then run (or run again) before starting the nodes.
 */
import { constants as fsConstants } from "node:fs";
import { access, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { DEDUP_KEY_SEED_FILE_NAME, keysDir, SIGNING_KEY_FILE_NAME, URL_KEY_FILE_NAME } from "../auth/keys.js";
import { loadConfig, type CastorConfig } from "../config.js";
import { hashToHex } from "../format/hash.js";
import { openMetadataStore } from "../metadata/open.js";
import { METADATA_FILE_NAME, SqliteMetadataStore } from "../metadata/sqlite.js";
import type { ExportPage, HubToken, MetadataStore } from "../metadata/store.js";
import { BLOB_KINDS, blobKey, type BlobKey, type BlobKind, type BlobStore } from "../storage/blob-store.js";
import { openFsBlobStore } from "../storage/fs.js";
import { BLOBS_DIR_NAME, openBlobStore } from "../storage/open.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, UsageError, expectPositionals, formatTable, parseCommandLine, runCommand } from "./args.js";

const USAGE = `Usage: castor migrate --from DATA_DIR

Copies everything of the embedded data dir DATA_DIR (repositories, revisions, commits,
trees, hub tokens, xorbs, shards, inline files, the SHA-256 and dedup indexes, the daily
storage statistics samples) into the configured stores: PostgreSQL (CASTOR_DATABASE_URL) and
S3 (CASTOR_S3_BUCKET, CASTOR_S3_ENDPOINT, …). Safe to run again: an interrupted run
completes, a repeated one copies nothing. Stop the embedded server first (or run again after
stopping it). Progress goes to stderr; the summary, and how to carry the server's keys to the
new nodes, to stdout.

  --from DATA_DIR   the embedded data dir to copy (the CASTOR_DATA_DIR of the old server)

${CONFIG_FLAGS_HELP}
`;

/** Rows per export page for tables of large rows (chunk tables, term lists, trees) and of small ones. */
const LARGE_ROW_PAGE = 256;
const SMALL_ROW_PAGE = 2000;
/** Trees per export page: a tree of 10,000 entries is ~2 MB of text. */
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
    const imported = await target.metadata.importRepo({ type: repo.type, name: repo.name, createdAt: repo.createdAt, private: repo.private });
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
    exporter: (after: string | null, limit: number) => Promise<ExportPage<T>>,
    importer: (rows: T[]) => Promise<number>,
  ): Promise<void> => {
    let inSource = 0;
    let copied = 0;
    let after: string | null = null;
    for (;;) {
      const page: ExportPage<T> = await exporter(after, pageRows(limit));
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
    (a, n) => source.metadata.exportXorbs(a, n),
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
    (a, n) => source.metadata.exportFiles(a, n),
    (files) => target.metadata.importFiles(files),
  );
  await copyPages(
    "file ↔ repository links",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.exportFileRepoLinks(a, n),
    (links) => target.metadata.importFileRepoLinks(links.map((link) => ({ ...link, repoId: mapRepo(link.repoId) }))),
  );
  await copyPages(
    "SHA-256 index entries",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.exportSha256Index(a, n),
    (entries) => target.metadata.importSha256Index(entries.map((entry) => ({ ...entry, repoId: mapRepo(entry.repoId) }))),
  );
  await copyPages(
    "registered shards",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.exportShards(a, n),
    (shards) => target.metadata.importShards(shards),
  );
  await copyPages(
    "dedup index entries",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.exportDedupEntries(a, n),
    (entries) => target.metadata.importDedupEntries(entries),
  );

  // Histories: trees (naming files and inline objects), commits (naming trees), then the
  // revisions that point at commits.
  await copyPages(
    "trees",
    TREE_PAGE,
    (a, n) => source.metadata.exportTrees(a, n),
    (trees) => target.metadata.importTrees(trees.map((tree) => ({ ...tree, repoId: mapRepo(tree.repoId) }))),
  );
  await copyPages(
    "commits",
    SMALL_ROW_PAGE,
    (a, n) => source.metadata.exportCommits(a, n),
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

export async function run(argv: string[]): Promise<number> {
  return runCommand("migrate", async () => {
    const args = parseCommandLine(argv, { from: { type: "string" } });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    expectPositionals(args.positionals, []);
    if (args.values.from === undefined || args.values.from === "") {
      throw new UsageError("--from DATA_DIR is required: the embedded data dir to copy (the old server's CASTOR_DATA_DIR)");
    }
    const from = resolve(args.values.from);
    const config = loadConfig(process.env, args.configFlags);
    await checkSource(from);
    checkTarget(config, from);

    const say = (line: string) => process.stderr.write(`castor migrate: ${line}\n`);
    say(`copying ${from} into ${describeTarget(config)}`);
    const steps = await withStores(config, from, (source, target) => migrateStores(source, target, { progress: say }));
    const copied = steps.reduce((sum, step) => sum + step.copied, 0);
    process.stdout.write(
      formatTable(
        ["WHAT", "IN SOURCE", "COPIED NOW"],
        steps.map((step) => [step.name, String(step.inSource), String(step.copied)]),
      ),
    );
    process.stdout.write(
      copied === 0
        ? "Nothing new to copy: the target already holds everything of the source.\n"
        : `Copied ${copied} objects and rows; running again copies nothing more.\n`,
    );
    process.stdout.write(await keysAdvice(from, config));
    return EXIT_OK;
  });
}

async function checkSource(from: string): Promise<void> {
  const info = await stat(from).catch(() => null);
  if (info === null || !info.isDirectory()) {
    throw new UsageError(`--from ${from} does not exist or is not a folder: give the embedded server's data dir (its CASTOR_DATA_DIR)`);
  }
  const database = join(from, METADATA_FILE_NAME);
  if (
    !(await access(database, fsConstants.R_OK).then(
      () => true,
      () => false,
    ))
  ) {
    throw new UsageError(`${from} is not a castor data dir: it has no readable ${METADATA_FILE_NAME}`);
  }
}

/** Refuses a target that is the source itself (the embedded stores of the same data dir). */
function checkTarget(config: CastorConfig, from: string): void {
  const sameDir = resolve(config.dataDir) === from;
  const same = [
    ...(config.databaseUrl === null && sameDir ? [`its metadata (${METADATA_FILE_NAME})`] : []),
    ...(config.s3 === null && sameDir ? [`its objects (${BLOBS_DIR_NAME}/)`] : []),
  ];
  if (same.length > 0) {
    throw new UsageError(
      `the target is ${from} itself (${same.join(" and ")}): set CASTOR_DATABASE_URL (PostgreSQL) and CASTOR_S3_BUCKET with the other CASTOR_S3_* settings to migrate into the scale-out stores`,
    );
  }
}

function describeTarget(config: CastorConfig): string {
  const metadata = config.databaseUrl !== null ? `PostgreSQL ${describeDatabaseUrl(config.databaseUrl)}` : `SQLite in ${config.dataDir}`;
  const objects =
    config.s3 !== null
      ? `S3 bucket ${config.s3.bucket}${config.s3.prefix ? ` (prefix ${config.s3.prefix})` : ""}${config.s3.endpoint ? ` at ${config.s3.endpoint}` : ""}`
      : `files in ${join(config.dataDir, BLOBS_DIR_NAME)}`;
  return `${metadata} and ${objects}`;
}

/** host:port/database, never the password. */
function describeDatabaseUrl(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    return `${url.hostname}:${url.port || "5432"}${url.pathname}`;
  } catch {
    return "(CASTOR_DATABASE_URL)";
  }
}

/** Opens both sides, runs `work`, closes everything (also on failure). */
async function withStores<T>(config: CastorConfig, from: string, work: (source: MigrationSource, target: MigrationTarget) => Promise<T>): Promise<T> {
  const opened: { close(): unknown }[] = [];
  // The S3 store stages bodies in a local folder; the migration's own, removed afterwards.
  let stagingRoot: string | undefined;
  try {
    const sourceMetadata = await SqliteMetadataStore.open(from);
    opened.push(sourceMetadata);
    const blobsDir = join(from, BLOBS_DIR_NAME);
    const sourceBlobs = (await stat(blobsDir).catch(() => null))?.isDirectory() ? await openFsBlobStore(blobsDir) : null;
    const targetMetadata = await openMetadataStore(config);
    opened.push(targetMetadata);
    if (config.s3 !== null) stagingRoot = await mkdtemp(join(tmpdir(), "castor-migrate-"));
    const targetBlobs: BlobStore = await openBlobStore({ dataDir: stagingRoot ?? config.dataDir, s3: config.s3 });
    opened.push({ close: () => targetBlobs.close?.() });
    return await work({ metadata: sourceMetadata, blobs: sourceBlobs }, { metadata: targetMetadata, blobs: targetBlobs });
  } finally {
    for (const store of opened.reverse()) await store.close();
    if (stagingRoot !== undefined) await rm(stagingRoot, { recursive: true, force: true });
  }
}

/**
 * How to give the new nodes the embedded server's keys, so that what it handed out stays valid:
 * CAS access tokens (signing key), transfer URLs (URL key), dedup answers clients cached (seed).
 * Hub tokens live in the database and need nothing. Secrets are never printed, only where they are.
 */
async function keysAdvice(from: string, config: CastorConfig): Promise<string> {
  const dir = keysDir(from);
  const read = (name: string) =>
    readFile(join(dir, name), "utf8").then(
      (text) => text.trim(),
      () => null,
    );
  const signingKey = await read(SIGNING_KEY_FILE_NAME);
  const urlKey = await read(URL_KEY_FILE_NAME);
  const dedupSeed = await read(DEDUP_KEY_SEED_FILE_NAME);
  if (signingKey === null && urlKey === null && dedupSeed === null) {
    return `\nKeys: ${dir} holds no keys (the embedded server never started): nothing to carry over.\n`;
  }
  const lines = [
    "",
    "Keys: start every node with the embedded server's keys, so the CAS access tokens, transfer URLs",
    "and dedup answers it handed out stay valid (hub tokens are in the database already):",
  ];
  const warnings: string[] = [];
  if (signingKey !== null) {
    lines.push(`  CASTOR_SIGNING_KEY_FILE=${join(dir, SIGNING_KEY_FILE_NAME)}   (copy this file to each node and point the setting at the copy)`);
    const configured =
      config.signingKeyFile === null
        ? null
        : await readFile(config.signingKeyFile, "utf8").then(
            (text) => text.trim(),
            () => "",
          );
    if (configured !== null && configured !== signingKey)
      warnings.push("CASTOR_SIGNING_KEY_FILE here names another key: CAS access tokens of the old server would be refused");
  }
  if (urlKey !== null) {
    lines.push(`  CASTOR_URL_KEY="$(cat ${join(dir, URL_KEY_FILE_NAME)})"`);
    if (config.urlKey !== null && config.urlKey !== urlKey) warnings.push("CASTOR_URL_KEY here differs: transfer URLs of the old server would be refused");
  }
  if (dedupSeed !== null) {
    lines.push(`  CASTOR_DEDUP_KEY_SEED="$(cat ${join(dir, DEDUP_KEY_SEED_FILE_NAME)})"`);
    if (config.dedupKeySeed !== null && config.dedupKeySeed !== dedupSeed)
      warnings.push("CASTOR_DEDUP_KEY_SEED here differs: dedup answers clients cached would no longer match");
  }
  lines.push("Keep CASTOR_PUBLIC_URL as it was, or put the nodes behind the same path, for old transfer URLs to reach them.");
  for (const warning of warnings) lines.push(`Warning: ${warning}.`);
  return `${lines.join("\n")}\n`;
}
