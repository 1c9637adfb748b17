/**
 * Garbage-collection records in the scale-out store (../gc.ts): leases, and the deletions of a
 * collection, which may run on any node while every node serves uploads.
 *
 * Row locks on `gc_leases` are what order a lease against the collector, since PostgreSQL's
 * READ COMMITTED lets a statement miss a row another transaction has not committed yet: the
 * collector *upserts* the lease row of everything it is about to delete (which locks it, or
 * waits for the transaction leasing it), and a lease is an upsert of the same row. Whichever
 * commits first wins: a lease taken first is seen by the collector's `WHERE leased_at < cutoff`
 * (an upsert re-checks its condition on the newest row version), and a lease that waited on
 * the collector finds the mark and is refused. Rows are always locked in ascending hash order,
 * as registrations lock them, so the two never deadlock.
 */
import type { PoolClient } from "pg";
import { bytesToPlainHex, HASH_BYTES, type Hash } from "../../format/hash.js";
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
import { hashAt, packDistinct, packedIndexes } from "./packed.js";
import type { NamedStatements, PostgresConnection } from "./connection.js";

/** A fresh epoch: 48 random bits, exact in a JavaScript number. */
const NEW_EPOCH = "floor(random() * 281474976710656)::bigint";
/** The lease time of a row the collector created: older than any cutoff. */
const NEVER = "to_timestamp(0)";

/** $1 kind, $2 packed distinct hashes; locks the rows in ascending hash order. */
const upsertLeaseRows = (values: string, onConflict: string, returning: string, where = "true"): string => `
  INSERT INTO gc_leases (kind, hash, leased_at, deleting, epoch)
  SELECT $1, h.hash, ${values} FROM (SELECT ${hashAt("$2", "i")} AS hash FROM ${packedIndexes("$2")} AS i) AS h
  WHERE ${where}
  ORDER BY 2
  ON CONFLICT (kind, hash) DO UPDATE SET ${onConflict}
  RETURNING ${returning}`;

const LEASE_VALUES = `$3::timestamptz, false, ${NEW_EPOCH}`;
const LEASE_UPDATE = "leased_at = GREATEST(gc_leases.leased_at, excluded.leased_at) WHERE NOT gc_leases.deleting";

export const LEASE_SQL = {
  // $3 now. Refused (no row returned) while the collector has the object condemned.
  lease: upsertLeaseRows(LEASE_VALUES, LEASE_UPDATE, "hash, epoch"),
  // A registration leases only the xorbs that are recorded ($1 is 'xorb').
  leaseRecorded: upsertLeaseRows(LEASE_VALUES, LEASE_UPDATE, "hash, epoch", "EXISTS (SELECT 1 FROM xorbs WHERE xorbs.hash = h.hash)"),
  leaseForPut: `SELECT epoch, deleting FROM gc_leases WHERE kind = 'xorb' AND hash = $1 FOR SHARE`,
  // $1 packed hashes.
  xorbsWithLeases: `SELECT hash FROM gc_leases WHERE kind = 'xorb' AND hash IN (SELECT ${hashAt("$1", "i")} FROM ${packedIndexes("$1")} AS i)`,
} as const;

/** Deletes the dedup entries ($1 packed chunk hashes, $2 packed xorb hashes of the same entries) that meet `condition`. */
const deleteDedupEntries = (condition = ""): string => `
  DELETE FROM dedup_chunks d
  USING (SELECT ${hashAt("$1", "i")} AS chunk_hash, ${hashAt("$2", "i")} AS xorb_hash FROM ${packedIndexes("$1")} AS i) AS gone
  WHERE d.chunk_hash = gone.chunk_hash AND d.xorb_hash = gone.xorb_hash ${condition}`;

/** A cutoff as a parameter: null (condemn whatever the leases and age) is after every time. */
const cutoffParam = (cutoff: Date | null): Date | string => cutoff ?? "infinity";

const GC_SQL = {
  ...LEASE_SQL,
  // $3 cutoff: marks (and locks) what no lease from the cutoff on protects; a condemned
  // object stays condemned (a run that stopped is finished by the next).
  condemn: upsertLeaseRows(
    `${NEVER}, true, ${NEW_EPOCH}`,
    "deleting = true, epoch = excluded.epoch WHERE gc_leases.deleting OR gc_leases.leased_at < $3::timestamptz",
    "hash",
  ),
  unmark: `UPDATE gc_leases SET deleting = false WHERE kind = $1 AND hash = ANY ($2::bytea[])`,
  dropLeases: `DELETE FROM gc_leases WHERE kind = $1 AND hash = ANY ($2::bytea[])`,
  youngXorbs: `SELECT hash FROM xorbs WHERE hash = ANY ($1::bytea[]) AND created_at >= $2`,
  deleteXorbs: `DELETE FROM xorbs WHERE hash = ANY ($1::bytea[]) RETURNING hash, serialized_length, chunks`,
  // $1 packed chunk hashes, $2 packed xorb hashes of the same entries.
  deleteDedup: deleteDedupEntries(),
  deleteDanglingDedup: deleteDedupEntries("AND NOT EXISTS (SELECT 1 FROM xorbs WHERE xorbs.hash = d.xorb_hash)"),
  oldFiles: `SELECT hash FROM files WHERE hash = ANY ($1::bytea[]) AND created_at < $2 ORDER BY hash FOR UPDATE`,
  deleteFileLinks: `DELETE FROM file_repos WHERE file_hash = ANY ($1::bytea[])`,
  // By key: the files' repositories and digests (file_sha256 has no index by file). Runs before
  // their links are deleted.
  deleteFileSha256: `
    DELETE FROM file_sha256 s USING files f, file_repos r
    WHERE f.hash = ANY ($1::bytea[]) AND r.file_hash = f.hash AND s.repo_id = r.repo_id AND s.sha256 = f.sha256 AND s.file_hash = f.hash`,
  deleteFiles: `DELETE FROM files WHERE hash = ANY ($1::bytea[]) RETURNING hash, size`,
  condemned: `SELECT kind, hash FROM gc_leases WHERE deleting LIMIT $1`,
  release: `UPDATE gc_leases SET deleting = false, leased_at = now() WHERE kind = $1 AND hash = ANY ($2::bytea[]) AND deleting`,
  prune: `DELETE FROM gc_leases WHERE NOT deleting AND leased_at < $1`,
  // FOR UPDATE conflicts with the key-share lock every insert of a commit, tree or revision of
  // the repository takes (their foreign key), so no ref moves while the history is deleted.
  lockRepo: `SELECT 1 FROM repos WHERE id = $1 FOR UPDATE`,
  refs: `SELECT name, commit_oid FROM revisions WHERE repo_id = $1`,
  deleteCommits: `DELETE FROM commits WHERE repo_id = $1 AND oid = ANY ($2::text[])`,
  deleteTrees: `DELETE FROM trees WHERE repo_id = $1 AND oid = ANY ($2::text[])`,
  putRun: `
    INSERT INTO maintenance_runs (kind, started_at, finished_at, totals) VALUES ($1, $2, $3, $4)
    ON CONFLICT (kind) DO UPDATE SET started_at = excluded.started_at, finished_at = excluded.finished_at, totals = excluded.totals`,
  runs: `SELECT kind, started_at, finished_at, totals FROM maintenance_runs ORDER BY kind DESC`,
} as const;

/** Takes leases on `client` (a registration's transaction) or on the pool. */
export async function takeLeases(
  sql: NamedStatements<typeof LEASE_SQL>,
  client: PoolClient | null,
  kind: LeaseKind,
  hashes: readonly Hash[],
  statement: "lease" | "leaseRecorded" = "lease",
): Promise<Map<string, Lease>> {
  const leases = new Map<string, Lease>();
  if (hashes.length === 0) return leases;
  const values = [kind, packDistinct(hashes), new Date()];
  const { rows } = client === null ? await sql.run<LeaseRow>(statement, values) : await sql.runOn<LeaseRow>(client, statement, values);
  for (const row of rows) leases.set(bytesToPlainHex(row.hash), { epoch: row.epoch });
  return leases;
}

interface LeaseRow {
  hash: Buffer;
  epoch: number;
}

export class PostgresGcRecords implements GcRecords {
  private readonly sql: NamedStatements<typeof GC_SQL>;

  constructor(private readonly connection: PostgresConnection) {
    this.sql = connection.statements(GC_SQL);
  }

  leaseObjects(kind: LeaseKind, hashes: readonly Hash[]): Promise<Map<string, Lease>> {
    return takeLeases(this.sql, null, kind, hashes);
  }

  /** Marks (and locks) the lease rows of what no lease from `cutoff` on protects; returns their hashes. */
  private async condemnOn(client: PoolClient, kind: LeaseKind, hashes: readonly Hash[], cutoff: Date | null): Promise<Buffer[]> {
    if (hashes.length === 0) return [];
    const { rows } = await this.sql.runOn<{ hash: Buffer }>(client, "condemn", [kind, packDistinct(hashes), cutoffParam(cutoff)]);
    return rows.map((row) => row.hash);
  }

  async deleteFiles(hashes: readonly Hash[], cutoff: Date): Promise<DeletedFile[]> {
    return this.connection.inTransaction(async (client) => {
      const marked = await this.condemnOn(client, "file", hashes, cutoff);
      if (marked.length === 0) return [];
      const old = (await this.sql.runOn<{ hash: Buffer }>(client, "oldFiles", [marked, cutoff])).rows.map((row) => row.hash);
      let deleted: DeletedFile[] = [];
      if (old.length > 0) {
        // The SHA-256 entries are found through the links, and the foreign key from file_repos
        // forbids deleting the files before their links.
        await this.sql.runOn(client, "deleteFileSha256", [old]);
        await this.sql.runOn(client, "deleteFileLinks", [old]);
        const { rows } = await this.sql.runOn<{ hash: Buffer; size: number }>(client, "deleteFiles", [old]);
        deleted = rows.map((row) => ({ hash: storedHash(row.hash, "deleted file hash"), size: row.size }));
      }
      // Files have no blob to wait for: their marks go with the transaction that deleted them.
      await this.sql.runOn(client, "dropLeases", ["file", marked]);
      return deleted;
    });
  }

  async condemnXorbs(hashes: readonly Hash[], cutoff: Date | null): Promise<CondemnedXorb[]> {
    return this.connection.inTransaction(async (client) => {
      let marked = await this.condemnOn(client, "xorb", hashes, cutoff);
      if (marked.length === 0) return [];
      const young = (await this.sql.runOn<{ hash: Buffer }>(client, "youngXorbs", [marked, cutoffParam(cutoff)])).rows.map((row) => row.hash);
      if (young.length > 0) {
        await this.sql.runOn(client, "unmark", ["xorb", young]);
        const keep = new Set(young.map((hash) => hash.toString("hex")));
        marked = marked.filter((hash) => !keep.has(hash.toString("hex")));
      }
      const { rows } = await this.sql.runOn<{ hash: Buffer; serialized_length: number; chunks: Buffer }>(client, "deleteXorbs", [marked]);
      const records = new Map(rows.map((row) => [row.hash.toString("hex"), row]));
      const chunkCount = rows.reduce((sum, row) => sum + row.chunks.length / PACKED_CHUNK_BYTES, 0);
      if (chunkCount > 0) {
        const chunkHashes = Buffer.allocUnsafe(chunkCount * HASH_BYTES);
        const xorbHashes = Buffer.allocUnsafe(chunkCount * HASH_BYTES);
        let at = 0;
        for (const row of rows) {
          for (let offset = 0; offset < row.chunks.length; offset += PACKED_CHUNK_BYTES, at += HASH_BYTES) {
            chunkHashes.set(row.chunks.subarray(offset, offset + HASH_BYTES), at);
            xorbHashes.set(row.hash, at);
          }
        }
        await this.sql.runOn(client, "deleteDedup", [chunkHashes, xorbHashes]);
      }
      return marked.map((hash): CondemnedXorb => {
        const record = records.get(hash.toString("hex"));
        return {
          hash: storedHash(hash, "condemned xorb hash"),
          serializedLength: record?.serialized_length ?? null,
          chunks: record === undefined ? 0 : record.chunks.length / PACKED_CHUNK_BYTES,
        };
      });
    });
  }

  async condemnInline(hashes: readonly Hash[], cutoff: Date | null): Promise<Hash[]> {
    const marked = await this.connection.inTransaction((client) => this.condemnOn(client, "inline", hashes, cutoff));
    return marked.map((hash) => storedHash(hash, "condemned inline blob hash"));
  }

  async deleteDanglingDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    if (entries.length === 0) return 0;
    const chunkHashes = Buffer.allocUnsafe(entries.length * HASH_BYTES);
    const xorbHashes = Buffer.allocUnsafe(entries.length * HASH_BYTES);
    for (const [i, entry] of entries.entries()) {
      chunkHashes.set(entry.chunkHash, i * HASH_BYTES);
      xorbHashes.set(entry.xorbHash, i * HASH_BYTES);
    }
    return (await this.sql.run("deleteDanglingDedup", [chunkHashes, xorbHashes])).rowCount ?? 0;
  }

  async condemned(limit: number): Promise<CondemnedBlob[]> {
    const { rows } = await this.sql.run<{ kind: CondemnableKind; hash: Buffer }>("condemned", [limit]);
    return rows.map((row) => ({ kind: row.kind, hash: storedHash(row.hash, "condemned blob hash") }));
  }

  async release(kind: CondemnableKind, hashes: readonly Hash[]): Promise<void> {
    if (hashes.length === 0) return;
    await this.sql.run("release", [kind, hashes.map((hash) => Buffer.from(hash))]);
  }

  async pruneLeases(cutoff: Date): Promise<number> {
    return (await this.sql.run("prune", [cutoff])).rowCount ?? 0;
  }

  async deleteHistory(
    repoId: number,
    refs: readonly SeenRef[],
    commitOids: readonly string[],
    treeOids: readonly string[],
  ): Promise<{ commits: number; trees: number } | null> {
    return this.connection.inTransaction(async (client) => {
      if ((await this.sql.runOn(client, "lockRepo", [repoId])).rowCount === 0) return { commits: 0, trees: 0 };
      const stored = (await this.sql.runOn<{ name: string; commit_oid: string | null }>(client, "refs", [repoId])).rows;
      if (!sameRefs(stored, refs)) return null;
      const commits = commitOids.length === 0 ? 0 : ((await this.sql.runOn(client, "deleteCommits", [repoId, commitOids])).rowCount ?? 0);
      const trees = treeOids.length === 0 ? 0 : ((await this.sql.runOn(client, "deleteTrees", [repoId, treeOids])).rowCount ?? 0);
      return { commits, trees };
    });
  }

  async recordMaintenanceRun(run: MaintenanceRun): Promise<void> {
    await this.sql.run("putRun", [run.kind, run.startedAt, run.finishedAt, JSON.stringify(run.totals)]);
  }

  async lastMaintenanceRuns(): Promise<MaintenanceRun[]> {
    const { rows } = await this.sql.run<{ kind: MaintenanceRun["kind"]; started_at: Date; finished_at: Date; totals: string }>("runs", []);
    return rows.map((row) => ({ kind: row.kind, startedAt: row.started_at, finishedAt: row.finished_at, totals: decodeTotals(row.totals) }));
  }
}
