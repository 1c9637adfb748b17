/**
 * The scan record family: every row of a table, page by page in its primary-key order, for the
 * work that reads whole stores — garbage collection (src/ops/gc.ts), `castor fsck`
 * (src/ops/fsck.ts) and migration (src/ops/migrate.ts), which imports what it scans into another
 * store (migration.ts).
 *
 * `after` is the `next` cursor of the previous page (null for the first), an opaque string only
 * the same backend reads. Cursors are positions, not snapshots: rows added behind the cursor
 * meanwhile are missed.
 */
import type { Hash } from "../format/hash.js";
import { storedHash } from "./cas.js";
import type { DatedFile, DatedXorb, DedupEntry, FileRepoLink, RepoCommit, RepoTree, ScanPage, Sha256IndexEntry, ShardRow } from "./records.js";

export type { ScanPage } from "./records.js";

/** Rows per scan page at most; memory per page is bounded by this times the largest row. */
export const MAX_SCAN_PAGE_ROWS = 10_000;

export interface ScanRecords {
  /** Commits in (repository id, oid) order. */
  scanCommits(after: string | null, limit: number): Promise<ScanPage<RepoCommit>>;
  /** Trees in (repository id, oid) order. */
  scanTrees(after: string | null, limit: number): Promise<ScanPage<RepoTree>>;
  /** Xorbs in hash byte order. */
  scanXorbs(after: string | null, limit: number): Promise<ScanPage<DatedXorb>>;
  /** Files in hash byte order. */
  scanFiles(after: string | null, limit: number): Promise<ScanPage<DatedFile>>;
  /** File ↔ repository links in (file hash, repository id) order. */
  scanFileRepoLinks(after: string | null, limit: number): Promise<ScanPage<FileRepoLink>>;
  /** The per-repository SHA-256 index in (repository id, digest) order. */
  scanSha256Index(after: string | null, limit: number): Promise<ScanPage<Sha256IndexEntry>>;
  /** Registered shards in hash byte order. */
  scanShards(after: string | null, limit: number): Promise<ScanPage<ShardRow>>;
  /**
   * The global-dedup index in chunk hash order, each chunk's xorbs oldest first. A page never
   * splits one chunk's entries (it may run past `limit` to finish the chunk it ends with).
   */
  scanDedupEntries(after: string | null, limit: number): Promise<ScanPage<DedupEntry>>;
}

// ---------------------------------------------------------------------------------------------
// Paged scans. Both backends page every family by the same key and hand out the same cursor
// forms, so the keys, the cursor texts and the page cut are defined here once; a backend only
// reads the rows after a key.

/**
 * How one family is keyset-paged: the key after which a page starts (the lowest key for a null
 * cursor, i.e. the first page), as the values the backend's query takes, and the cursor of a
 * page's last row.
 */
export interface ScanKey<K extends readonly unknown[], T> {
  parse(cursor: string | null): K;
  cursorOf(last: T): string;
}

/** The scan key of each paged family (the dedup index pages by chunk hash: `scanDedupPage`). */
export const SCAN_KEYS = {
  commits: { parse: parseIdTextCursor, cursorOf: (last: RepoCommit) => idTextCursor(last.repoId, last.oid) },
  trees: { parse: parseIdTextCursor, cursorOf: (last: RepoTree) => idTextCursor(last.repoId, last.oid) },
  xorbs: { parse: parseHashKey, cursorOf: (last: DatedXorb) => hashCursor(last.hash) },
  files: { parse: parseHashKey, cursorOf: (last: DatedFile) => hashCursor(last.hash) },
  fileRepoLinks: { parse: parseHashIdCursor, cursorOf: (last: FileRepoLink) => hashIdCursor(last.fileHash, last.repoId) },
  sha256Index: { parse: parseIdHashCursor, cursorOf: (last: Sha256IndexEntry) => idHashCursor(last.repoId, last.sha256) },
  shards: { parse: parseHashKey, cursorOf: (last: ShardRow) => hashCursor(last.hash) },
} as const satisfies Record<string, ScanKey<readonly unknown[], never>>;

/**
 * One scan page: checks `limit`, reads at most `limit` rows after the key of `after` (in key
 * order) and gives a full page the cursor of its last row; a short page is the end.
 */
export async function pagedScan<K extends readonly unknown[], T>(
  key: ScanKey<K, T>,
  after: string | null,
  limit: number,
  readAfter: (afterKey: K) => T[] | Promise<T[]>,
): Promise<ScanPage<T>> {
  checkPageLimit(limit);
  const rows = await readAfter(key.parse(after));
  return { rows, next: rows.length < limit ? null : key.cursorOf(rows[rows.length - 1]) };
}

/** Checks a scan page size; a caller bug otherwise. */
function checkPageLimit(limit: number): void {
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_SCAN_PAGE_ROWS) {
    throw new RangeError(`a scan page holds 1 to ${MAX_SCAN_PAGE_ROWS} rows, got ${String(limit)}`);
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
 * row, so the skipped ones never end a scan early.
 */
export async function scanHeldSha256Page(
  after: string | null,
  limit: number,
  readAfter: (
    afterKey: readonly [number, Uint8Array],
  ) => (Sha256IndexRow & { held: number | boolean })[] | Promise<(Sha256IndexRow & { held: number | boolean })[]>,
): Promise<ScanPage<Sha256IndexEntry>> {
  const page = await pagedScan<readonly [number, Uint8Array], Sha256IndexEntry & { held: boolean }>(SCAN_KEYS.sha256Index, after, limit, async (key) =>
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
export async function scanDedupPage(
  after: string | null,
  limit: number,
  readAfter: (afterChunk: Buffer) => DedupRow[] | Promise<DedupRow[]>,
  readChunk: (chunkHash: Hash) => DedupRow[] | Promise<DedupRow[]>,
): Promise<ScanPage<DedupEntry>> {
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
  return new RangeError(`malformed scan cursor ${JSON.stringify(cursor.slice(0, 100))}: pass the \`next\` of the previous page, or null for the first`);
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

/** Every page's rows of a scan, page by page. */
export async function* scanPages<T>(scan: (after: string | null, limit: number) => Promise<ScanPage<T>>, limit: number): AsyncGenerator<T[]> {
  for (let after: string | null = null; ; ) {
    const page: ScanPage<T> = await scan(after, limit);
    if (page.rows.length > 0) yield page.rows;
    if (page.next === null) return;
    after = page.next;
  }
}
