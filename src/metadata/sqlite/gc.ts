/**
 * Garbage-collection records in the embedded store (../gc.ts): leases, and the deletions of a
 * collection. Each call is one IMMEDIATE transaction, which holds the database's write lock, so
 * a lease and the collector's check of it can never interleave.
 */
import type Database from "better-sqlite3";
import { bytesToPlainHex, type Hash } from "../../format/hash.js";
import { PACKED_CHUNK_BYTES, storedHash } from "../cas.js";
import {
  decodeTotals,
  sameRefs,
  type MaintenanceRun,
  type CondemnableKind,
  type CondemnedBlob,
  type CondemnedXorb,
  type DeletedFile,
  type GcRecords,
  type Lease,
  type LeaseKind,
  type SeenRef,
} from "../gc.js";
import type { DedupEntry } from "../migration.js";
import type { SqliteConnection } from "./connection.js";

/** The moment before which a condemnation looks: a null cutoff is after every lease and record. */
const cutoffTime = (cutoff: Date | null): number => cutoff?.getTime() ?? Number.POSITIVE_INFINITY;

/** A fresh epoch: 48 random bits, exact in a JavaScript number. */
const NEW_EPOCH = "(abs(random()) % 281474976710656)";

/** The lease statements, which shard registrations also run (on their own connection). */
export interface LeaseStatements {
  /** Stamps a lease unless the object is condemned; returns its epoch (no row: condemned). */
  lease: Database.Statement<[LeaseKind, Uint8Array, number], { epoch: number }>;
  leaseOf: Database.Statement<[LeaseKind, Uint8Array], { leased_at: number; deleting: number; epoch: number }>;
}

export function prepareLeaseStatements(db: Database.Database): LeaseStatements {
  return {
    lease: db.prepare<[LeaseKind, Uint8Array, number], { epoch: number }>(
      `INSERT INTO gc_leases (kind, hash, leased_at, deleting, epoch) VALUES (?, ?, ?, 0, ${NEW_EPOCH})
       ON CONFLICT (kind, hash) DO UPDATE SET leased_at = max(leased_at, excluded.leased_at) WHERE deleting = 0
       RETURNING epoch`,
    ),
    leaseOf: db.prepare<[LeaseKind, Uint8Array], { leased_at: number; deleting: number; epoch: number }>(
      "SELECT leased_at, deleting, epoch FROM gc_leases WHERE kind = ? AND hash = ?",
    ),
  };
}

/** Whether a lease from `cutoff` on protects the object (a condemned one is not protected). */
export function isLeasedSince(sql: LeaseStatements, kind: LeaseKind, hash: Uint8Array, cutoff: number): boolean {
  const row = sql.leaseOf.get(kind, hash);
  return row !== undefined && row.deleting === 0 && row.leased_at >= cutoff;
}

function prepareGcStatements(db: Database.Database) {
  return {
    ...prepareLeaseStatements(db),
    condemn: db.prepare<[CondemnableKind, Uint8Array]>(
      `INSERT INTO gc_leases (kind, hash, leased_at, deleting, epoch) VALUES (?, ?, 0, 1, ${NEW_EPOCH})
       ON CONFLICT (kind, hash) DO UPDATE SET deleting = 1, epoch = excluded.epoch`,
    ),
    xorbForGc: db.prepare<[Uint8Array], { created_at: number; serialized_length: number; chunks: Buffer }>(
      "SELECT created_at, serialized_length, chunks FROM xorbs WHERE hash = ?",
    ),
    deleteXorb: db.prepare<[Uint8Array]>("DELETE FROM xorbs WHERE hash = ?"),
    deleteDedup: db.prepare<[Uint8Array, Uint8Array]>("DELETE FROM dedup_chunks WHERE chunk_hash = ? AND xorb_hash = ?"),
    deleteDanglingDedup: db.prepare<[Uint8Array, Uint8Array]>(
      "DELETE FROM dedup_chunks WHERE chunk_hash = ? AND xorb_hash = ? AND NOT EXISTS (SELECT 1 FROM xorbs WHERE xorbs.hash = dedup_chunks.xorb_hash)",
    ),
    deleteFile: db.prepare<[Uint8Array]>("DELETE FROM files WHERE hash = ?"),
    fileForGc: db.prepare<[Uint8Array], { created_at: number; size: number; sha256: Buffer | null }>(
      "SELECT created_at, size, sha256 FROM files WHERE hash = ?",
    ),
    deleteFileLinks: db.prepare<[Uint8Array]>("DELETE FROM file_repos WHERE file_hash = ?"),
    // By key: the file's repositories and its digest (file_sha256 has no index by file). Runs
    // before its links are deleted.
    deleteFileSha256: db.prepare<{ file: Uint8Array; sha256: Uint8Array }>(
      "DELETE FROM file_sha256 WHERE repo_id IN (SELECT repo_id FROM file_repos WHERE file_hash = @file) AND sha256 = @sha256 AND file_hash = @file",
    ),
    condemned: db.prepare<[number], { kind: CondemnableKind; hash: Buffer }>("SELECT kind, hash FROM gc_leases WHERE deleting = 1 LIMIT ?"),
    release: db.prepare<[number, CondemnableKind, Uint8Array]>("UPDATE gc_leases SET deleting = 0, leased_at = ? WHERE kind = ? AND hash = ? AND deleting = 1"),
    prune: db.prepare<[number]>("DELETE FROM gc_leases WHERE deleting = 0 AND leased_at < ?"),
    repoExists: db.prepare<[number], { ok: number }>("SELECT 1 AS ok FROM repos WHERE id = ?"),
    refs: db.prepare<[number], { name: string; commit_oid: string | null }>("SELECT name, commit_oid FROM revisions WHERE repo_id = ?"),
    deleteCommit: db.prepare<[number, string]>("DELETE FROM commits WHERE repo_id = ? AND oid = ?"),
    deleteTree: db.prepare<[number, string]>("DELETE FROM trees WHERE repo_id = ? AND oid = ?"),
    putRun: db.prepare<[string, number, number, string]>(
      `INSERT INTO maintenance_runs (kind, started_at, finished_at, totals) VALUES (?, ?, ?, ?)
       ON CONFLICT (kind) DO UPDATE SET started_at = excluded.started_at, finished_at = excluded.finished_at, totals = excluded.totals`,
    ),
    runs: db.prepare<[], { kind: MaintenanceRun["kind"]; started_at: number; finished_at: number; totals: string }>(
      "SELECT kind, started_at, finished_at, totals FROM maintenance_runs ORDER BY kind DESC",
    ),
  };
}

export class SqliteGcRecords implements GcRecords {
  private readonly sql: ReturnType<typeof prepareGcStatements>;
  private readonly db: Database.Database;

  constructor(private readonly connection: SqliteConnection) {
    this.db = connection.db;
    this.sql = prepareGcStatements(this.db);
  }

  /** Runs `work` in one IMMEDIATE transaction once no other write of this process is in progress. */
  private transaction<T>(work: () => T): Promise<T> {
    return this.connection.write(() => this.db.transaction(work).immediate());
  }

  async leaseObjects(kind: LeaseKind, hashes: readonly Hash[]): Promise<Map<string, Lease>> {
    return this.transaction(() => {
      const now = Date.now();
      const leases = new Map<string, Lease>();
      for (const hash of hashes) {
        const row = this.sql.lease.get(kind, hash, now);
        if (row !== undefined) leases.set(bytesToPlainHex(hash), { epoch: row.epoch });
      }
      return leases;
    });
  }

  async deleteFiles(hashes: readonly Hash[], cutoff: Date): Promise<DeletedFile[]> {
    const before = cutoff.getTime();
    return this.transaction(() => {
      const deleted: DeletedFile[] = [];
      for (const hash of hashes) {
        if (isLeasedSince(this.sql, "file", hash, before)) continue;
        const row = this.sql.fileForGc.get(hash);
        if (row === undefined || row.created_at >= before) continue;
        // The SHA-256 entries are found through the links, and the foreign key from file_repos
        // forbids deleting the file before its links.
        if (row.sha256 !== null) this.sql.deleteFileSha256.run({ file: hash, sha256: row.sha256 });
        this.sql.deleteFileLinks.run(hash);
        this.sql.deleteFile.run(hash);
        deleted.push({ hash: new Uint8Array(hash), size: row.size });
      }
      return deleted;
    });
  }

  async condemnXorbs(hashes: readonly Hash[], cutoff: Date | null): Promise<CondemnedXorb[]> {
    const before = cutoffTime(cutoff);
    return this.transaction(() => {
      const condemned: CondemnedXorb[] = [];
      for (const hash of hashes) {
        if (isLeasedSince(this.sql, "xorb", hash, before)) continue;
        const record = this.sql.xorbForGc.get(hash);
        if (record !== undefined && record.created_at >= before) continue;
        let chunks = 0;
        if (record !== undefined) {
          chunks = record.chunks.length / PACKED_CHUNK_BYTES;
          for (let at = 0; at < record.chunks.length; at += PACKED_CHUNK_BYTES) {
            this.sql.deleteDedup.run(record.chunks.subarray(at, at + 32), hash);
          }
          this.sql.deleteXorb.run(hash);
        }
        this.sql.condemn.run("xorb", hash);
        condemned.push({ hash: new Uint8Array(hash), serializedLength: record?.serialized_length ?? null, chunks });
      }
      return condemned;
    });
  }

  async condemnInline(hashes: readonly Hash[], cutoff: Date | null): Promise<Hash[]> {
    const before = cutoffTime(cutoff);
    return this.transaction(() => {
      const condemned: Hash[] = [];
      for (const hash of hashes) {
        if (isLeasedSince(this.sql, "inline", hash, before)) continue;
        this.sql.condemn.run("inline", hash);
        condemned.push(new Uint8Array(hash));
      }
      return condemned;
    });
  }

  async deleteDanglingDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    return this.transaction(() => {
      let deleted = 0;
      for (const entry of entries) deleted += this.sql.deleteDanglingDedup.run(entry.chunkHash, entry.xorbHash).changes;
      return deleted;
    });
  }

  async condemned(limit: number): Promise<CondemnedBlob[]> {
    return this.sql.condemned.all(limit).map((row) => ({ kind: row.kind, hash: storedHash(row.hash, "condemned blob hash") }));
  }

  async release(kind: CondemnableKind, hashes: readonly Hash[]): Promise<void> {
    await this.transaction(() => {
      const now = Date.now();
      for (const hash of hashes) this.sql.release.run(now, kind, hash);
    });
  }

  async pruneLeases(cutoff: Date): Promise<number> {
    return this.transaction(() => this.sql.prune.run(cutoff.getTime()).changes);
  }

  async deleteHistory(
    repoId: number,
    refs: readonly SeenRef[],
    commitOids: readonly string[],
    treeOids: readonly string[],
  ): Promise<{ commits: number; trees: number } | null> {
    return this.transaction(() => {
      if (!this.sql.repoExists.get(repoId)) return { commits: 0, trees: 0 };
      if (!sameRefs(this.sql.refs.all(repoId), refs)) return null;
      let commits = 0;
      let trees = 0;
      for (const oid of commitOids) commits += this.sql.deleteCommit.run(repoId, oid).changes;
      for (const oid of treeOids) trees += this.sql.deleteTree.run(repoId, oid).changes;
      return { commits, trees };
    });
  }

  async recordMaintenanceRun(run: MaintenanceRun): Promise<void> {
    await this.connection.write(() => this.sql.putRun.run(run.kind, run.startedAt.getTime(), run.finishedAt.getTime(), JSON.stringify(run.totals)));
  }

  async lastMaintenanceRuns(): Promise<MaintenanceRun[]> {
    return this.sql.runs.all().map((row) => ({
      kind: row.kind,
      startedAt: new Date(row.started_at),
      finishedAt: new Date(row.finished_at),
      totals: decodeTotals(row.totals),
    }));
  }
}
