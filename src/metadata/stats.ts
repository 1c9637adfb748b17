/**
 * The storage-statistics record family: daily samples of the store's totals, and the read-only
 * queries the statistics (hub/stats.ts) need that the other families do not answer cheaply —
 * a xorb's size and chunk count without its chunk table, the xorbs a file's terms name without
 * building its terms, and sums over every recorded xorb computed by the database.
 *
 * A sample is kept per UTC day: a later measurement of a day replaces an earlier one (never the
 * other way round), so the day's row is its last measurement, and several nodes and
 * `castor stats` sampling the same day write one row between them. The field list and the
 * codecs live here so both backends store the same columns.
 */
import { hashToHex, type Hash } from "../format/hash.js";
import { unpackFileTerms } from "./cas.js";
import { CorruptRecordError, InvalidRecordError } from "./errors.js";

/** What a sample records: the totals over all repositories (hub/stats.ts defines each). */
export interface StorageTotals {
  repositories: number;
  /** Live files, each (repository, path, git oid) once. */
  files: number;
  /** Σ sizes of the live files. */
  logicalBytes: number;
  /** Bytes of distinct content the live files need: their xorbs' serialized lengths plus their inline blobs. */
  storedBytes: number;
  /** The same distinct content before compression: their xorbs' uncompressed lengths plus their inline blobs. */
  uniqueBytes: number;
  /** Distinct xorbs the live files reference, and their chunks. */
  xorbs: number;
  chunks: number;
  /** Distinct inline blobs of the live files, and their bytes (part of `storedBytes`). */
  inlineBlobs: number;
  inlineBytes: number;
  /** Every recorded xorb, referenced or not: what the xorb store holds. */
  recordedXorbs: number;
  recordedXorbBytes: number;
  recordedChunks: number;
}

export interface StatsSample extends Omit<StorageTotals, "uniqueBytes"> {
  /** The UTC day the sample is of, `YYYY-MM-DD`. */
  day: string;
  takenAt: Date;
  /** null in samples recorded before castor measured it. */
  uniqueBytes: number | null;
}

/** A recorded xorb's size, read without its chunk table. */
export interface XorbFootprint {
  serializedLength: number;
  uncompressedLength: number;
  chunks: number;
}

/** Sums over every recorded xorb. */
export interface XorbTotals {
  xorbs: number;
  bytes: number;
  chunks: number;
}

export interface StatsMetadata {
  /**
   * Records the sample of `sample.day`, replacing the day's sample if this one was taken later
   * (`takenAt`; the same sample again changes nothing); true when this call stored it. InvalidRecordError (nothing stored) for a
   * day that is not `YYYY-MM-DD` or a total that is not a non-negative safe integer (`uniqueBytes`
   * may be null).
   */
  recordStatsSample(sample: StatsSample): Promise<boolean>;
  /** Every sample, oldest day first. */
  listStatsSamples(): Promise<StatsSample[]>;
  /** Count, Σ serialized lengths and Σ chunk counts of all recorded xorbs, summed by the database. */
  xorbTotals(): Promise<XorbTotals>;
  /** Footprints of the recorded xorbs among `hashes`, keyed by `hashToHex`; like `getXorbs` otherwise. */
  xorbFootprints(hashes: readonly Hash[]): Promise<Map<string, XorbFootprint>>;
  /**
   * The distinct xorbs each recorded file among `hashes` has terms on, in term order, keyed by
   * `hashToHex` (missing files are absent; an empty file maps to []).
   */
  fileXorbs(hashes: readonly Hash[]): Promise<Map<string, Hash[]>>;
}

/** Each total with its column name, in the tables' column order. */
export const STATS_TOTAL_COLUMNS: readonly (readonly [keyof StorageTotals, string])[] = [
  ["repositories", "repositories"],
  ["files", "files"],
  ["logicalBytes", "logical_bytes"],
  ["storedBytes", "stored_bytes"],
  ["xorbs", "xorbs"],
  ["chunks", "chunks"],
  ["inlineBlobs", "inline_blobs"],
  ["inlineBytes", "inline_bytes"],
  ["recordedXorbs", "recorded_xorbs"],
  ["recordedXorbBytes", "recorded_xorb_bytes"],
  ["recordedChunks", "recorded_chunks"],
  ["uniqueBytes", "unique_bytes"],
];

/** Totals absent (null) from samples recorded before castor measured them. */
const NULLABLE_TOTALS: ReadonlySet<keyof StorageTotals> = new Set(["uniqueBytes"]);

/** Whether `day` is a calendar day written `YYYY-MM-DD` (what a PostgreSQL `date` takes, 2024-02-30 not). */
function isDay(day: unknown): day is string {
  if (typeof day !== "string" || !/^\d{4}-\d{2}-\d{2}$/.test(day)) return false;
  const date = new Date(`${day}T00:00:00Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().startsWith(day);
}

/** InvalidRecordError unless `sample` can be stored; returns its totals in column order. */
export function checkStatsSample(sample: StatsSample): (number | null)[] {
  if (!isDay(sample?.day)) {
    throw new InvalidRecordError(`a statistics sample's day must be YYYY-MM-DD, got ${JSON.stringify(sample?.day)}`);
  }
  if (!(sample.takenAt instanceof Date) || Number.isNaN(sample.takenAt.getTime())) {
    throw new InvalidRecordError(`the statistics sample of ${sample.day} needs a valid takenAt date`);
  }
  return STATS_TOTAL_COLUMNS.map(([field]) => {
    const value = sample[field];
    if (value === null && NULLABLE_TOTALS.has(field)) return null;
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
      throw new InvalidRecordError(`${field} of the statistics sample of ${sample.day} must be a non-negative safe integer, got ${String(value)}`);
    }
    return value;
  });
}

/** The sample of a stored row (columns named as in STATS_TOTAL_COLUMNS, plus `day`). */
export function statsSampleOf(row: Record<string, unknown>, takenAt: Date): StatsSample {
  const sample = { day: row.day, takenAt } as StatsSample;
  for (const [field, column] of STATS_TOTAL_COLUMNS) {
    const value = row[column];
    if (value === null && NULLABLE_TOTALS.has(field)) {
      (sample as unknown as Record<string, null>)[field] = null;
      continue;
    }
    if (typeof value !== "number" || !Number.isSafeInteger(value)) {
      throw new CorruptRecordError(
        `the stored ${column} of the statistics sample of ${String(row.day)} is not an integer: the metadata database is damaged (restore it from a backup)`,
      );
    }
    sample[field] = value;
  }
  return sample;
}

/** The distinct xorbs of a stored file's packed terms, in term order (views into `terms`). */
export function termXorbs(fileHash: Hash, terms: Uint8Array): Hash[] {
  const distinct = new Map<string, Hash>();
  for (const term of unpackFileTerms(terms, `file ${hashToHex(fileHash)}`)) {
    const hex = hashToHex(term.xorbHash);
    if (!distinct.has(hex)) distinct.set(hex, term.xorbHash);
  }
  return [...distinct.values()];
}
