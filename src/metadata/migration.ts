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
import type { FileRecord, XorbRecord } from "./cas.js";
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

/**
 * The page of `rows` read with `limit`: a full page may have more rows after it, from the cursor
 * of its last row; a short page is the end.
 */
export function exportPage<T>(rows: T[], limit: number, cursorOf: (last: T) => string): ExportPage<T> {
  return { rows, next: rows.length < limit ? null : cursorOf(rows[rows.length - 1]) };
}

/** Checks an export page size; a caller bug otherwise. */
export function checkPageLimit(limit: number): void {
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_EXPORT_PAGE_ROWS) {
    throw new RangeError(`an export page holds 1 to ${MAX_EXPORT_PAGE_ROWS} rows, got ${String(limit)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Cursors: the last key of a page, as text. Both backends use the same forms.

const HASH_CURSOR = /^[0-9a-f]{64}$/;
const HASH_ID_CURSOR = /^([0-9a-f]{64}):(-?\d{1,16})$/;
const ID_HASH_CURSOR = /^(-?\d{1,16}):([0-9a-f]{64})$/;
const ID_TEXT_CURSOR = /^(-?\d{1,16}):([\s\S]*)$/;

function badCursor(cursor: string): RangeError {
  return new RangeError(`malformed export cursor ${JSON.stringify(cursor.slice(0, 100))}: pass the \`next\` of the previous page, or null for the first`);
}

/** Cursor of a table keyed by one hash. */
export function hashCursor(hash: Uint8Array): string {
  return Buffer.from(hash.buffer, hash.byteOffset, hash.byteLength).toString("hex");
}

/** The hash after which a page starts; empty (below every hash) for the first page. */
export function parseHashCursor(cursor: string | null): Buffer {
  if (cursor === null) return Buffer.alloc(0);
  if (!HASH_CURSOR.test(cursor)) throw badCursor(cursor);
  return Buffer.from(cursor, "hex");
}

/** Cursor of a table keyed by (hash, repository id). */
export function hashIdCursor(hash: Uint8Array, id: number): string {
  return `${hashCursor(hash)}:${id}`;
}

export function parseHashIdCursor(cursor: string | null): [Buffer, number] {
  if (cursor === null) return [Buffer.alloc(0), Number.MIN_SAFE_INTEGER];
  const match = HASH_ID_CURSOR.exec(cursor);
  if (match === null || !Number.isSafeInteger(Number(match[2]))) throw badCursor(cursor);
  return [Buffer.from(match[1], "hex"), Number(match[2])];
}

/** Cursor of a table keyed by (repository id, hash). */
export function idHashCursor(id: number, hash: Uint8Array): string {
  return `${id}:${hashCursor(hash)}`;
}

export function parseIdHashCursor(cursor: string | null): [number, Buffer] {
  if (cursor === null) return [Number.MIN_SAFE_INTEGER, Buffer.alloc(0)];
  const match = ID_HASH_CURSOR.exec(cursor);
  if (match === null || !Number.isSafeInteger(Number(match[1]))) throw badCursor(cursor);
  return [Number(match[1]), Buffer.from(match[2], "hex")];
}

/** Cursor of a table keyed by (repository id, text), such as a git oid. */
export function idTextCursor(id: number, text: string): string {
  return `${id}:${text}`;
}

export function parseIdTextCursor(cursor: string | null): [number, string] {
  if (cursor === null) return [Number.MIN_SAFE_INTEGER, ""];
  const match = ID_TEXT_CURSOR.exec(cursor);
  if (match === null || !Number.isSafeInteger(Number(match[1]))) throw badCursor(cursor);
  return [Number(match[1]), match[2]];
}

/**
 * Cuts a dedup page fetched with `LIMIT limit` (rows in chunk order) so that it never splits a
 * chunk's entries: when the page is full, the entries of its last chunk are dropped (the next
 * page starts with them) — unless that chunk is all the page holds; then `completeChunk` loads
 * all of its entries.
 */
export async function wholeChunkPage(
  rows: DedupEntry[],
  limit: number,
  completeChunk: (chunkHash: Hash) => Promise<DedupEntry[]>,
): Promise<ExportPage<DedupEntry>> {
  if (rows.length < limit) return { rows, next: null };
  const lastChunk = rows[rows.length - 1].chunkHash;
  let keep = rows.length;
  while (keep > 0 && Buffer.compare(rows[keep - 1].chunkHash, lastChunk) === 0) keep--;
  if (keep === 0) return { rows: await completeChunk(lastChunk), next: hashCursor(lastChunk) };
  const kept = rows.slice(0, keep);
  return { rows: kept, next: hashCursor(kept[keep - 1].chunkHash) };
}
