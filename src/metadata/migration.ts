/**
 * The migration half of the metadata seam (`castor migrate`): everything a store holds, read
 * out page by page in key order, and written into another store with the original times.
 *
 * - Exports page through one table in its primary-key order: `after` is the `next` cursor of
 *   the previous page (null for the first), an opaque string only the same backend reads.
 *   Cursors are positions, not snapshots: rows added behind the cursor meanwhile are missed,
 *   which is why a migration is run (again) once the source server has stopped.
 * - Imports are insert-or-ignore and return how many rows they changed, so a repeated or
 *   interrupted copy completes without duplicates, and a repeat that finds everything in place
 *   reports 0 everywhere. A batch is written in one transaction: all of it or nothing.
 * - Repository ids belong to one store. Rows naming repositories (revisions, token coverage,
 *   commits, trees, file links, the SHA-256 index) are exported with the source's ids; the
 *   caller maps them to the target's (from `importRepo`) before importing.
 * - Repositories, revisions and tokens are few and have list methods already (`listRepos`,
 *   `listRevisions`, `listHubTokens`); only their imports are here. Histories (commits, trees)
 *   grow with every commit and are paged like the CAS tables.
 * - Where a record is mutable, the import carries the source's state onto a record already
 *   present, so a migration run again after the source stopped picks up what changed since
 *   the first run: a repository's visibility, a revision's commit (never back to none), a
 *   token's revocation (never undone).
 */
import type { Hash } from "../format/hash.js";
import { storedHash, type FileRecord, type XorbRecord } from "./cas.js";
import type { CommitRecord, HubToken, Repo, Revision, TreeRecord } from "./store.js";

/** Rows per export page at most; memory per page is bounded by this times the largest row. */
export const MAX_EXPORT_PAGE_ROWS = 10_000;

export interface ExportPage<T> {
  rows: T[];
  /** Cursor of the next page, or null when this page reached the end of the table. */
  next: string | null;
}

export interface DatedXorb extends XorbRecord {
  createdAt: Date;
}

export interface DatedFile extends FileRecord {
  createdAt: Date;
}

export interface ShardRow {
  hash: Hash;
  createdAt: Date;
}

export interface FileRepoLink {
  fileHash: Hash;
  repoId: number;
}

export interface Sha256IndexEntry {
  repoId: number;
  /** Raw SHA-256 digest. */
  sha256: Uint8Array;
  fileHash: Hash;
}

export interface DedupEntry {
  chunkHash: Hash;
  xorbHash: Hash;
}

/** A commit of the repository `repoId`. */
export interface RepoCommit extends CommitRecord {
  repoId: number;
}

/** A tree of the repository `repoId`. */
export interface RepoTree extends TreeRecord {
  repoId: number;
}

export interface MetadataMigration {
  /**
   * The repository of that type and name with its original creation time and visibility, or
   * the one already there (then `inserted: false`; its time is kept and its visibility set to
   * the imported one). Unlike `createRepo`, no `main` branch is created: revisions are
   * imported as they are.
   */
  importRepo(repo: Omit<Repo, "id">): Promise<{ repo: Repo; inserted: boolean }>;
  /**
   * Insert by (repository, name), in the given order. A revision already present keeps its
   * kind and time; it takes the imported commit when that is not null and the kinds agree
   * (counted as a change). NotFoundError (nothing stored) for an unknown repository id.
   */
  importRevisions(revisions: readonly Revision[]): Promise<number>;
  /**
   * Insert-or-ignore by id, with the token's repository links, times and revocation. A token
   * already present keeps its record and coverage, except that a revocation the import carries
   * is applied (a revoked token is never made usable again); both count as a change. AlreadyExistsError
   * when another id holds the secret hash; NotFoundError for an unknown repository id; nothing
   * of the batch is stored either way.
   */
  importHubTokens(tokens: readonly HubToken[]): Promise<number>;

  /** Commits in (repository id, oid) order. */
  exportCommits(after: string | null, limit: number): Promise<ExportPage<RepoCommit>>;
  /** Insert-or-ignore by (repository, oid). NotFoundError (nothing stored) for an unknown repository id; InvalidRecordError for an unstorable record. */
  importCommits(commits: readonly RepoCommit[]): Promise<number>;

  /** Trees in (repository id, oid) order. */
  exportTrees(after: string | null, limit: number): Promise<ExportPage<RepoTree>>;
  /** Insert-or-ignore by (repository, oid). NotFoundError (nothing stored) for an unknown repository id; InvalidRecordError for an unstorable record. */
  importTrees(trees: readonly RepoTree[]): Promise<number>;

  /** Xorbs in hash byte order. */
  exportXorbs(after: string | null, limit: number): Promise<ExportPage<DatedXorb>>;
  /** Insert-or-ignore by hash (the first record is kept). InvalidRecordError (nothing stored) for an unstorable record. */
  importXorbs(xorbs: readonly DatedXorb[]): Promise<number>;

  /** Files in hash byte order. */
  exportFiles(after: string | null, limit: number): Promise<ExportPage<DatedFile>>;
  /** Insert-or-ignore by hash. InvalidRecordError (nothing stored) for an unstorable record. */
  importFiles(files: readonly DatedFile[]): Promise<number>;

  /** File ↔ repository links in (file hash, repository id) order. */
  exportFileRepoLinks(after: string | null, limit: number): Promise<ExportPage<FileRepoLink>>;
  /** Insert-or-ignore. NotFoundError (nothing stored) when a file or repository is unknown. */
  importFileRepoLinks(links: readonly FileRepoLink[]): Promise<number>;

  /** The per-repository SHA-256 index in (repository id, digest) order. */
  exportSha256Index(after: string | null, limit: number): Promise<ExportPage<Sha256IndexEntry>>;
  /**
   * Sets each (repository, digest) entry to the given file, as the latest registration would;
   * counts only entries that were added or changed. NotFoundError (nothing stored) when a file
   * or repository is unknown.
   */
  importSha256Index(entries: readonly Sha256IndexEntry[]): Promise<number>;

  /** Registered shards in hash byte order. */
  exportShards(after: string | null, limit: number): Promise<ExportPage<ShardRow>>;
  /** Insert-or-ignore by hash. */
  importShards(shards: readonly ShardRow[]): Promise<number>;

  /**
   * The global-dedup index in chunk hash order, each chunk's xorbs oldest first. A page never
   * splits one chunk's entries (it may run past `limit` to finish the chunk it ends with).
   */
  exportDedupEntries(after: string | null, limit: number): Promise<ExportPage<DedupEntry>>;
  /**
   * Insert-or-ignore; entries new to the store are ordered after every entry already there,
   * in the order given. So a chunk's entries must come in one call, oldest first (as
   * `exportDedupEntries` pages them) for the "oldest first" answers to carry over.
   */
  importDedupEntries(entries: readonly DedupEntry[]): Promise<number>;
}

// ---------------------------------------------------------------------------------------------
// Paged exports. Both backends page every family by the same key and hand out the same cursor
// forms, so the keys, the cursor texts and the page cut are defined here once; a backend only
// reads the rows after a key.

/**
 * How one family is keyset-paged: the key after which a page starts (the lowest key for a null
 * cursor, i.e. the first page), as the values the backend's query takes, and the cursor of a
 * page's last row.
 */
export interface ExportKey<K extends readonly unknown[], T> {
  parse(cursor: string | null): K;
  cursorOf(last: T): string;
}

/** The export key of each paged family (the dedup index pages by chunk hash: `exportDedupPage`). */
export const EXPORT_KEYS = {
  commits: { parse: parseIdTextCursor, cursorOf: (last: RepoCommit) => idTextCursor(last.repoId, last.oid) },
  trees: { parse: parseIdTextCursor, cursorOf: (last: RepoTree) => idTextCursor(last.repoId, last.oid) },
  xorbs: { parse: parseHashKey, cursorOf: (last: DatedXorb) => hashCursor(last.hash) },
  files: { parse: parseHashKey, cursorOf: (last: DatedFile) => hashCursor(last.hash) },
  fileRepoLinks: { parse: parseHashIdCursor, cursorOf: (last: FileRepoLink) => hashIdCursor(last.fileHash, last.repoId) },
  sha256Index: { parse: parseIdHashCursor, cursorOf: (last: Sha256IndexEntry) => idHashCursor(last.repoId, last.sha256) },
  shards: { parse: parseHashKey, cursorOf: (last: ShardRow) => hashCursor(last.hash) },
} as const satisfies Record<string, ExportKey<readonly unknown[], never>>;

/**
 * One export page: checks `limit`, reads at most `limit` rows after the key of `after` (in key
 * order) and gives a full page the cursor of its last row; a short page is the end.
 */
export async function pagedExport<K extends readonly unknown[], T>(
  key: ExportKey<K, T>,
  after: string | null,
  limit: number,
  readAfter: (afterKey: K) => T[] | Promise<T[]>,
): Promise<ExportPage<T>> {
  checkPageLimit(limit);
  const rows = await readAfter(key.parse(after));
  return { rows, next: rows.length < limit ? null : key.cursorOf(rows[rows.length - 1]) };
}

/** Checks an export page size; a caller bug otherwise. */
function checkPageLimit(limit: number): void {
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_EXPORT_PAGE_ROWS) {
    throw new RangeError(`an export page holds 1 to ${MAX_EXPORT_PAGE_ROWS} rows, got ${String(limit)}`);
  }
}

// Stored rows of the families whose columns both backends name and type alike.

interface FileRepoRow {
  file_hash: Uint8Array;
  repo_id: number;
}

export function fileRepoLinkOf(row: FileRepoRow): FileRepoLink {
  return { fileHash: storedHash(row.file_hash, "file hash of a link"), repoId: row.repo_id };
}

interface Sha256IndexRow {
  repo_id: number;
  sha256: Uint8Array;
  file_hash: Uint8Array;
}

/**
 * A page of the SHA-256 index without the entries whose file the repository no longer holds
 * (`held` false: the collector finds a deleted file's entries by key, and an entry under a
 * digest the file was not recorded with stays behind, never answered). Pages run over every
 * row, so the skipped ones never end an export early.
 */
export async function exportHeldSha256Page(
  after: string | null,
  limit: number,
  readAfter: (
    afterKey: readonly [number, Uint8Array],
  ) => (Sha256IndexRow & { held: number | boolean })[] | Promise<(Sha256IndexRow & { held: number | boolean })[]>,
): Promise<ExportPage<Sha256IndexEntry>> {
  const page = await pagedExport<readonly [number, Uint8Array], Sha256IndexEntry & { held: boolean }>(EXPORT_KEYS.sha256Index, after, limit, async (key) =>
    (await readAfter(key)).map((row) => ({ ...sha256IndexEntryOf(row), held: Boolean(row.held) })),
  );
  return { rows: page.rows.filter((row) => row.held).map(({ held: _held, ...entry }) => entry), next: page.next };
}

export function sha256IndexEntryOf(row: Sha256IndexRow): Sha256IndexEntry {
  return {
    repoId: row.repo_id,
    sha256: storedHash(row.sha256, "digest in the SHA-256 index"),
    fileHash: storedHash(row.file_hash, "file hash in the SHA-256 index"),
  };
}

interface DedupRow {
  chunk_hash: Uint8Array;
  xorb_hash: Uint8Array;
}

function dedupEntryOf(row: DedupRow): DedupEntry {
  return {
    chunkHash: storedHash(row.chunk_hash, "chunk hash in the dedup index"),
    xorbHash: storedHash(row.xorb_hash, "xorb hash in the dedup index"),
  };
}

/**
 * One page of the dedup index, which never splits a chunk's entries. `readAfter` reads at most
 * `limit` rows after a chunk hash, in chunk order (each chunk's entries oldest first);
 * `readChunk` all entries of one chunk. When the page is full, the entries of its last chunk are
 * dropped (the next page starts with them) — unless that chunk is all the page holds; then
 * `readChunk` loads all of its entries.
 */
export async function exportDedupPage(
  after: string | null,
  limit: number,
  readAfter: (afterChunk: Buffer) => DedupRow[] | Promise<DedupRow[]>,
  readChunk: (chunkHash: Hash) => DedupRow[] | Promise<DedupRow[]>,
): Promise<ExportPage<DedupEntry>> {
  checkPageLimit(limit);
  const rows = (await readAfter(parseHashCursor(after))).map(dedupEntryOf);
  if (rows.length < limit) return { rows, next: null };
  const lastChunk = rows[rows.length - 1].chunkHash;
  let keep = rows.length;
  while (keep > 0 && Buffer.compare(rows[keep - 1].chunkHash, lastChunk) === 0) keep--;
  if (keep === 0) return { rows: (await readChunk(lastChunk)).map(dedupEntryOf), next: hashCursor(lastChunk) };
  const kept = rows.slice(0, keep);
  return { rows: kept, next: hashCursor(kept[keep - 1].chunkHash) };
}

// ---------------------------------------------------------------------------------------------
// Cursors: the last key of a page, as text.

const HASH_CURSOR = /^[0-9a-f]{64}$/;
const HASH_ID_CURSOR = /^([0-9a-f]{64}):(-?\d{1,16})$/;
const ID_HASH_CURSOR = /^(-?\d{1,16}):([0-9a-f]{64})$/;
const ID_TEXT_CURSOR = /^(-?\d{1,16}):([\s\S]*)$/;

function badCursor(cursor: string): RangeError {
  return new RangeError(`malformed export cursor ${JSON.stringify(cursor.slice(0, 100))}: pass the \`next\` of the previous page, or null for the first`);
}

/** Cursor of a table keyed by one hash. */
function hashCursor(hash: Uint8Array): string {
  return Buffer.from(hash.buffer, hash.byteOffset, hash.byteLength).toString("hex");
}

/** The hash after which a page starts; empty (below every hash) for the first page. */
function parseHashCursor(cursor: string | null): Buffer {
  if (cursor === null) return Buffer.alloc(0);
  if (!HASH_CURSOR.test(cursor)) throw badCursor(cursor);
  return Buffer.from(cursor, "hex");
}

function parseHashKey(cursor: string | null): [Buffer] {
  return [parseHashCursor(cursor)];
}

/** Cursor of a table keyed by (hash, repository id). */
function hashIdCursor(hash: Uint8Array, id: number): string {
  return `${hashCursor(hash)}:${id}`;
}

function parseHashIdCursor(cursor: string | null): [Buffer, number] {
  if (cursor === null) return [Buffer.alloc(0), Number.MIN_SAFE_INTEGER];
  const match = HASH_ID_CURSOR.exec(cursor);
  if (match === null || !Number.isSafeInteger(Number(match[2]))) throw badCursor(cursor);
  return [Buffer.from(match[1], "hex"), Number(match[2])];
}

/** Cursor of a table keyed by (repository id, hash). */
function idHashCursor(id: number, hash: Uint8Array): string {
  return `${id}:${hashCursor(hash)}`;
}

function parseIdHashCursor(cursor: string | null): [number, Buffer] {
  if (cursor === null) return [Number.MIN_SAFE_INTEGER, Buffer.alloc(0)];
  const match = ID_HASH_CURSOR.exec(cursor);
  if (match === null || !Number.isSafeInteger(Number(match[1]))) throw badCursor(cursor);
  return [Number(match[1]), Buffer.from(match[2], "hex")];
}

/** Cursor of a table keyed by (repository id, text), such as a git oid. */
function idTextCursor(id: number, text: string): string {
  return `${id}:${text}`;
}

function parseIdTextCursor(cursor: string | null): [number, string] {
  if (cursor === null) return [Number.MIN_SAFE_INTEGER, ""];
  const match = ID_TEXT_CURSOR.exec(cursor);
  if (match === null || !Number.isSafeInteger(Number(match[1]))) throw badCursor(cursor);
  return [Number(match[1]), match[2]];
}

/** Every page's rows of a paged export, page by page (`castor fsck` and `gc` scan tables so). */
export async function* exportPages<T>(exporter: (after: string | null, limit: number) => Promise<ExportPage<T>>, limit: number): AsyncGenerator<T[]> {
  for (let after: string | null = null; ; ) {
    const page: ExportPage<T> = await exporter(after, limit);
    if (page.rows.length > 0) yield page.rows;
    if (page.next === null) return;
    after = page.next;
  }
}
