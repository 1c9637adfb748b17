/**
 * The garbage-collection half of the metadata seam: leases that keep objects alive while
 * uploads, registrations, dedup answers and commits use them, and the deletions `castor gc`
 * (src/ops/gc.ts) makes. Both backends pass the contract suite in test/contract/gc-records.ts.
 *
 * Why leases. The collector decides what is garbage from a snapshot (what the refs reach), but
 * clients keep working while it runs: a client re-uploads a xorb the store already has, a
 * dedup answer hands out a xorb no file uses any more, a shard registers a file that was
 * recorded long ago. Each of those *uses* an old object and stamps a lease on it (now). The
 * collector deletes an object only if it was created before the cutoff (now − grace) AND has no
 * lease from the cutoff on, checked in the same transaction that deletes it, so a use that
 * lands at any moment of the run wins over the deletion.
 *
 * Blobs (xorbs, inline files) cannot be deleted in the metadata transaction. The collector
 * first *condemns* them — record deleted, lease row marked `deleting`, the lease's epoch
 * advanced — then deletes the blobs, then releases the marks. While marked, a lease is refused
 * (the uploader waits for the blob to be gone and writes it anew), and `putXorb` with a lease
 * taken before the mark refuses too (its epoch changed): a record is never left naming a blob
 * the collector deleted. A collector that stops between condemning and releasing leaves the
 * marks behind; the next run finishes those deletions first (`condemned`).
 *
 * Lease rows are pruned once they are older than the cutoff (they protect nothing then).
 */
import { bytesToPlainHex, HASH_BYTES, hashToHex, type Hash } from "../format/hash.js";
import { PACKED_DEDUP_ENTRY_BYTES, PACKED_TERM_BYTES, type PackedShardRegistration } from "./cas.js";
import { BeingCollectedError } from "./errors.js";
import type { DedupEntry, Lease } from "./records.js";

export type { Lease } from "./records.js";

/** What a lease protects: a xorb (record and blob), a file record, an inline blob (keyed by SHA-256). */
export const LEASE_KINDS = ["xorb", "file", "inline"] as const;
export type LeaseKind = (typeof LEASE_KINDS)[number];

/** The blobs the collector condemns before deleting them. */
export type CondemnableKind = Exclude<LeaseKind, "file">;

/** A xorb the collector condemned: its record (if it had one) is deleted, its blob is next. */
export interface CondemnedXorb {
  hash: Hash;
  /** The deleted record's serialized length; null for a blob that had no record (an orphan). */
  serializedLength: number | null;
  /** Chunks of the deleted record (0 for an orphan). */
  chunks: number;
}

/** A blob condemned by a run that has not released it yet. */
export interface CondemnedBlob {
  kind: CondemnableKind;
  hash: Hash;
}

/** A file the collector deleted. */
export interface DeletedFile {
  hash: Hash;
  size: number;
}

/** A ref as the collector saw it when it marked (name → commit). */
export interface SeenRef {
  name: string;
  commitOid: string | null;
}

/** The last run of a maintenance command, kept for `/metrics` (and an admin page) on every node. */
export interface MaintenanceRun {
  kind: "gc" | "fsck";
  startedAt: Date;
  finishedAt: Date;
  /** gc: objects and bytes removed per kind; fsck: problems found and what was checked. Whole numbers. */
  totals: Record<string, number>;
}

export interface GcRecords {
  /**
   * Stamps a lease (now) on each object, in one transaction; returns the leases taken, keyed
   * by hex hash. An object the collector has condemned and not released is absent from the
   * answer: it is being deleted, and the caller must not rely on it (or must write it anew
   * once released). Objects need not exist: an upload leases a xorb before it stores it.
   */
  leaseObjects(kind: LeaseKind, hashes: readonly Hash[]): Promise<Map<string, Lease>>;

  /**
   * Deletes the files among `hashes` that were created before `cutoff` and carry no lease from
   * `cutoff` on, with their repository links and SHA-256 index entries, in one transaction.
   * Returns the files deleted.
   */
  deleteFiles(hashes: readonly Hash[], cutoff: Date): Promise<DeletedFile[]>;

  /**
   * Condemns the xorbs among `hashes` that carry no lease from `cutoff` on and whose record (if
   * any) was created before `cutoff`: deletes each one's record and dedup index entries and
   * marks its lease `deleting`, in one transaction. A hash without a record is an orphan blob
   * and is condemned too. Returns the xorbs condemned; delete their blobs, then `release`.
   *
   * A null `cutoff` condemns every one of them, leased or young: `castor fsck --repair` removes
   * xorbs whose blobs are missing or corrupt, which no lease makes whole. An upload that leased
   * one before fails at `putXorb` (its epoch changed) and stores the xorb anew once released.
   */
  condemnXorbs(hashes: readonly Hash[], cutoff: Date | null): Promise<CondemnedXorb[]>;

  /**
   * Condemns the inline blobs among `hashes` (SHA-256s) that carry no lease from `cutoff` on;
   * a null `cutoff` condemns them all (corrupt blobs, as for `condemnXorbs`).
   */
  condemnInline(hashes: readonly Hash[], cutoff: Date | null): Promise<Hash[]>;

  /**
   * Deletes the given dedup index entries whose xorb is not recorded, in one transaction that
   * checks the xorbs, so an entry whose xorb was recorded meanwhile stays (`castor fsck
   * --repair`: dangling entries would make clients dedup against a xorb nobody can fetch).
   * Returns how many were deleted.
   */
  deleteDanglingDedupEntries(entries: readonly DedupEntry[]): Promise<number>;

  /** Blobs condemned and not released yet (left by a run that stopped), at most `limit`. */
  condemned(limit: number): Promise<CondemnedBlob[]>;

  /**
   * Releases the marks of condemned blobs once their blobs are deleted: leases are taken again.
   * The lease row stays, stamped now, until a later run prunes it: a registration naming the
   * xorb meanwhile finds a lease without a record and knows it was collected.
   */
  release(kind: CondemnableKind, hashes: readonly Hash[]): Promise<void>;

  /** Deletes leases older than `cutoff` that mark nothing; returns how many. */
  pruneLeases(cutoff: Date): Promise<number>;

  /**
   * Deletes commits and trees of a repository that its refs no longer reach, in one
   * transaction — only if its refs are still exactly `refs` (what the collector walked), since
   * a ref created or moved meanwhile may reach them again. null when they changed (nothing
   * deleted); otherwise how many commits and trees were deleted.
   */
  deleteHistory(
    repoId: number,
    refs: readonly SeenRef[],
    commitOids: readonly string[],
    treeOids: readonly string[],
  ): Promise<{ commits: number; trees: number } | null>;

  /** Keeps `run` as the last of its kind (the one before is replaced). */
  recordMaintenanceRun(run: MaintenanceRun): Promise<void>;
  /** The last run of each kind that ran, gc before fsck. */
  lastMaintenanceRuns(): Promise<MaintenanceRun[]>;
}

/** The stored text of a run's totals; CorruptRecordError-free: a bad text reads as no totals. */
export function decodeTotals(text: string): Record<string, number> {
  try {
    const value: unknown = JSON.parse(text);
    if (value === null || typeof value !== "object" || Array.isArray(value)) return {};
    return Object.fromEntries(Object.entries(value).filter((entry): entry is [string, number] => Number.isSafeInteger(entry[1])));
  } catch {
    return {};
  }
}

/**
 * The distinct xorbs a registration relies on (its files' terms and its dedup entries), in
 * ascending byte order: the order leases are taken in, so two registrations sharing xorbs lock
 * them in the same order (PostgreSQL) and never deadlock.
 */
export function registrationXorbs(registration: PackedShardRegistration): Hash[] {
  const xorbs = new Map<string, Hash>();
  // Runs of records naming one xorb are the rule (a file's terms, a xorb's entries): the
  // previous hash is compared before a string key is made.
  const addFrom = (records: Uint8Array, recordBytes: number, hashAt: number) => {
    let previous = -1;
    for (let at = hashAt; at < records.length; at += recordBytes) {
      if (previous !== -1 && sameBytes(records, previous, at)) continue;
      previous = at;
      const hash = records.subarray(at, at + HASH_BYTES);
      xorbs.set(bytesToPlainHex(hash), hash);
    }
  };
  addFrom(registration.files.terms, PACKED_TERM_BYTES, 0);
  addFrom(registration.dedupEntries, PACKED_DEDUP_ENTRY_BYTES, HASH_BYTES);
  return [...xorbs.keys()].sort().map((key) => xorbs.get(key)!);
}

function sameBytes(bytes: Uint8Array, a: number, b: number): boolean {
  for (let i = 0; i < HASH_BYTES; i++) if (bytes[a + i] !== bytes[b + i]) return false;
  return true;
}

/**
 * What a registration throws for a xorb it names that is condemned now, or that has a lease
 * (every upload takes one) but no record: a collection removed it after the CAS service checked
 * the shard. A xorb that never had a lease is not judged here (the service checks existence).
 */
export function collectedXorb(xorb: Hash): BeingCollectedError {
  return new BeingCollectedError(`xorb ${hashToHex(xorb)} was removed by garbage collection: upload it again`);
}

/** What `putXorb` throws when the collector condemned the xorb after the uploader leased it. */
export function overtakenLease(xorb: Hash): BeingCollectedError {
  return new BeingCollectedError(`xorb ${hashToHex(xorb)} was removed by garbage collection while it was uploaded: upload it again`);
}

/** Whether a repository's refs (as stored) are exactly `seen`, in any order. */
export function sameRefs(stored: readonly { name: string; commit_oid: string | null }[], seen: readonly SeenRef[]): boolean {
  if (stored.length !== seen.length) return false;
  const seenByName = new Map(seen.map((ref) => [ref.name, ref.commitOid]));
  return stored.every((ref) => seenByName.has(ref.name) && seenByName.get(ref.name) === ref.commit_oid);
}
