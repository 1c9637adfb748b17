/**
 * `castor fsck`, read-only: checks that what the metadata store records is backed by intact
 * blobs and that the records agree with one another. Nothing is changed (no `--repair` yet).
 *
 * Three passes, each paging through one record family with the migration exports (so memory is
 * bounded by a page, never by the size of the store):
 *
 * 1. xorbs: every recorded xorb's blob exists and re-validates as that xorb, streamed through
 *    the same `XorbValidator` uploads go through (hash, every chunk decoded and hashed, no
 *    footer), and its chunk table equals the record's (length, chunk hashes and offsets);
 * 2. files: every term of every file names a recorded xorb, with a chunk range inside the
 *    xorb's chunk count and an unpacked length equal to the chunks' uncompressed lengths; a term
 *    on a xorb found damaged in pass 1 is reported too (the file cannot be reconstructed);
 * 3. the dedup index: every entry names a recorded xorb.
 *
 * Problems are collected and returned; an exception means the check itself could not run
 * (store unreachable, a record that no longer decodes).
 */
import { FormatError } from "../format/errors.js";
import { hashToHex } from "../format/hash.js";
import { XorbValidator } from "../format/xorb.js";
import type { XorbRecord } from "../metadata/cas.js";
import { exportPages, type ExportPage } from "../metadata/migration.js";
import type { MetadataStore } from "../metadata/store.js";
import { blobKey, isBlobStoreError, type BlobStore } from "../storage/blob-store.js";

export type FsckProblemKind =
  /** A recorded xorb has no blob. */
  | "xorb_missing"
  /** A recorded xorb's blob does not validate as that xorb, or differs from its record. */
  | "xorb_corrupt"
  /** A file term names a xorb that is not recorded. */
  | "file_missing_xorb"
  /** A file term's chunk range or length does not fit its xorb's record. */
  | "file_bad_term"
  /** A file term names a xorb whose blob is missing or corrupt. */
  | "file_damaged_xorb"
  /** A dedup index entry names a xorb that is not recorded. */
  | "dedup_missing_xorb";

export interface FsckProblem {
  kind: FsckProblemKind;
  /** What is damaged: `xorb <hex>`, `file <hex>` or `chunk <hex>` (a dedup entry). */
  subject: string;
  /** The xorb involved, hex, when the subject is not that xorb itself. */
  xorb?: string;
  message: string;
}

export interface FsckCounts {
  xorbs: number;
  /** Blob bytes read and validated. */
  xorbBytes: number;
  files: number;
  fileTerms: number;
  dedupEntries: number;
}

export interface FsckReport {
  counts: FsckCounts;
  /** Problems found, in the order found; at most `MAX_REPORTED_PROBLEMS` are listed. */
  problems: FsckProblem[];
  /** All problems found, listed or not: 0 means the store is intact. */
  problemCount: number;
}

export interface FsckOptions {
  /** Receives progress lines (no newline). */
  progress?: (line: string) => void;
  /** A progress line after every this many xorbs (default 1000)… */
  progressEveryXorbs?: number;
  /** …or this many blob bytes validated (default 1 GiB), whichever comes first. */
  progressEveryBytes?: number;
  /** Rows per export page (default: 256 xorbs or files, 2000 dedup entries); tests page small. */
  maxPageRows?: number;
}

const LARGE_ROW_PAGE = 256;
const SMALL_ROW_PAGE = 2000;
/** Problems kept in the report at most; the rest are counted only (a wrecked store would fill memory). */
export const MAX_REPORTED_PROBLEMS = 10_000;

export async function fsckStores(metadata: MetadataStore, blobs: BlobStore, options: FsckOptions = {}): Promise<FsckReport> {
  const say = options.progress ?? (() => undefined);
  const everyXorbs = options.progressEveryXorbs ?? 1000;
  const everyBytes = options.progressEveryBytes ?? 1024 ** 3;
  const pageRows = (rows: number) => Math.min(rows, options.maxPageRows ?? rows);
  const counts: FsckCounts = { xorbs: 0, xorbBytes: 0, files: 0, fileTerms: 0, dedupEntries: 0 };
  const problems: FsckProblem[] = [];
  let problemCount = 0;
  const report = (problem: FsckProblem) => {
    problemCount++;
    if (problems.length < MAX_REPORTED_PROBLEMS) problems.push(problem);
  };
  /** Hex of xorbs found missing or corrupt, for pass 2. Damage is rare, so this stays small. */
  const damaged = new Set<string>();

  // 1. xorbs against their blobs.
  let xorbsAtLine = 0;
  let bytesAtLine = 0;
  for await (const xorb of pages((after, limit) => metadata.exportXorbs(after, limit), pageRows(LARGE_ROW_PAGE))) {
    const problem = await checkXorb(blobs, xorb);
    counts.xorbs++;
    counts.xorbBytes += problem === null ? xorb.serializedLength : 0;
    if (problem !== null) {
      damaged.add(hashToHex(xorb.hash));
      report(problem);
    }
    if (counts.xorbs - xorbsAtLine >= everyXorbs || counts.xorbBytes - bytesAtLine >= everyBytes) {
      xorbsAtLine = counts.xorbs;
      bytesAtLine = counts.xorbBytes;
      say(`xorbs: ${counts.xorbs} checked (${counts.xorbBytes} bytes validated), ${problemCount} problems so far…`);
    }
  }
  say(`xorbs: ${counts.xorbs} checked (${counts.xorbBytes} bytes validated)`);

  // 2. file terms against the xorb records.
  for await (const page of exportPages((after, limit) => metadata.exportFiles(after, limit), pageRows(LARGE_ROW_PAGE))) {
    const xorbs = await metadata.getXorbs(page.flatMap((file) => file.terms.map((term) => term.xorbHash)));
    for (const file of page) {
      counts.files++;
      const subject = `file ${hashToHex(file.hash)}`;
      /** Damaged xorbs this file was reported for already: once per file and xorb, not per term. */
      const reportedDamaged = new Set<string>();
      file.terms.forEach((term, index) => {
        counts.fileTerms++;
        const hex = hashToHex(term.xorbHash);
        const at = `term ${index}`;
        const record = xorbs.get(hex);
        if (record === undefined) {
          report({ kind: "file_missing_xorb", subject, xorb: hex, message: `${at} names xorb ${hex}, which is not recorded` });
          return;
        }
        const bad = termMismatch(record, term.chunkStart, term.chunkEnd, term.unpackedLength);
        if (bad !== null) report({ kind: "file_bad_term", subject, xorb: hex, message: `${at} on xorb ${hex}: ${bad}` });
        else if (damaged.has(hex) && !reportedDamaged.has(hex)) {
          reportedDamaged.add(hex);
          report({ kind: "file_damaged_xorb", subject, xorb: hex, message: `${at} uses xorb ${hex}, whose blob is missing or corrupt` });
        }
      });
    }
    say(`files: ${counts.files} checked…`);
  }
  say(`files: ${counts.files} checked (${counts.fileTerms} terms)`);

  // 3. the dedup index against the xorb records.
  for await (const page of exportPages((after, limit) => metadata.exportDedupEntries(after, limit), pageRows(SMALL_ROW_PAGE))) {
    const xorbs = await metadata.getXorbs(page.map((entry) => entry.xorbHash));
    for (const entry of page) {
      counts.dedupEntries++;
      const hex = hashToHex(entry.xorbHash);
      if (!xorbs.has(hex)) {
        report({
          kind: "dedup_missing_xorb",
          subject: `chunk ${hashToHex(entry.chunkHash)}`,
          xorb: hex,
          message: `dedup entry names xorb ${hex}, which is not recorded`,
        });
      }
    }
  }
  say(`dedup index: ${counts.dedupEntries} entries checked`);
  if (problemCount > problems.length) say(`${problemCount} problems found; only the first ${problems.length} are listed`);
  return { counts, problems, problemCount };
}

/** The first problem of one recorded xorb's blob, or null when it is intact. */
async function checkXorb(blobs: BlobStore, xorb: XorbRecord): Promise<FsckProblem | null> {
  const hex = hashToHex(xorb.hash);
  const subject = `xorb ${hex}`;
  const corrupt = (why: string): FsckProblem => ({ kind: "xorb_corrupt", subject, message: `the blob of xorb ${hex} ${why}` });
  const key = blobKey("xorbs", xorb.hash);
  const size = await blobs.size(key);
  if (size === null) return { kind: "xorb_missing", subject, message: `xorb ${hex} is recorded but its blob ${key} is missing` };
  if (size !== xorb.serializedLength) return corrupt(`has ${size} bytes where its record says ${xorb.serializedLength}`);

  // Streamed piece by piece: the validator holds at most one chunk, never the whole blob.
  const validator = new XorbValidator({ expectedHash: xorb.hash });
  let stream;
  try {
    stream = await blobs.read(key);
  } catch (error) {
    // Deleted between size() and read().
    if (isBlobStoreError(error, "not_found")) return { kind: "xorb_missing", subject, message: `xorb ${hex} is recorded but its blob ${key} is missing` };
    throw error;
  }
  let info;
  try {
    for await (const piece of stream as AsyncIterable<Uint8Array>) validator.push(piece);
    info = validator.finish();
  } catch (error) {
    if (error instanceof FormatError) return corrupt(`does not validate: ${error.message}`);
    throw error;
  } finally {
    stream.destroy();
  }
  if (info.hasFooter) return corrupt("carries a footer, which castor never stores");
  if (info.serializedLength !== xorb.serializedLength || info.uncompressedLength !== xorb.uncompressedLength || info.chunks.length !== xorb.chunks.length) {
    return corrupt(
      `validates with ${info.chunks.length} chunks, ${info.serializedLength} bytes (${info.uncompressedLength} uncompressed) where its record says ${xorb.chunks.length}, ${xorb.serializedLength} (${xorb.uncompressedLength})`,
    );
  }
  for (let i = 0; i < info.chunks.length; i++) {
    const found = info.chunks[i];
    const recorded = xorb.chunks[i];
    if (
      Buffer.compare(found.hash, recorded.hash) !== 0 ||
      found.serializedEnd !== recorded.serializedEnd ||
      found.uncompressedLength !== recorded.uncompressedLength
    ) {
      return corrupt(`differs from its record's chunk table at chunk ${i}`);
    }
  }
  return null;
}

/** Why chunks [start, end) with `unpacked` bytes do not fit `xorb`'s record, or null. */
function termMismatch(xorb: XorbRecord, start: number, end: number, unpacked: number): string | null {
  const count = xorb.chunks.length;
  if (!(start >= 0 && start < end && end <= count)) return `chunk range [${start}, ${end}) lies outside the xorb's ${count} chunks`;
  let length = 0;
  for (let i = start; i < end; i++) length += xorb.chunks[i].uncompressedLength;
  if (length !== unpacked) return `chunks [${start}, ${end}) hold ${length} bytes but the term says ${unpacked}`;
  return null;
}

/** Every row of a paged export, one at a time. */
async function* pages<T>(exporter: (after: string | null, limit: number) => Promise<ExportPage<T>>, limit: number): AsyncGenerator<T> {
  for await (const rows of exportPages(exporter, limit)) yield* rows;
}
