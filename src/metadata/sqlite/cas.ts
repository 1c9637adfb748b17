/**
 * The CAS records in the embedded store: xorbs with their chunk tables, files with their
 * terms, the repository links and SHA-256 index of files, shards, and the global-dedup index.
 */
import type { RepoType } from "../../format/repo.js";
import type Database from "better-sqlite3";
import { hashToHex, type Hash } from "../../format/hash.js";
import {
  packShardRegistration,
  packXorbRecord,
  storedChunkTable,
  storedHash,
  type FileRecord,
  type PackedShardRegistration,
  type ShardRegistration,
  type XorbRecord,
  fileRecordOf,
  xorbRecordOf,
  type FileRow,
  type XorbRow,
} from "../cas.js";
import { overtakenLease, type Lease } from "../gc.js";
import type { SqliteConnection } from "./connection.js";
import { HashBatchQuery } from "./hash-batches.js";
import { runToEnd } from "../../format/steps.js";
import { BulkShardWriter, fitsOneStep, prepareShardStatements, registrationSteps, type ShardStatements } from "./shard-registration.js";

export interface CasStatements extends ShardStatements {
  insertXorb: Database.Statement<[Uint8Array, number, number, number, Uint8Array]>;
  xorbSize: Database.Statement<[Uint8Array], { serialized_length: number }>;
  getFile: Database.Statement<[Uint8Array], FileRow>;
  fileInRepo: Database.Statement<[Uint8Array, number], { ok: number }>;
  fileInNamedRepo: Database.Statement<[string, string, Uint8Array], { ok: number }>;
  fileBySha256: Database.Statement<[number, Uint8Array], { file_hash: Buffer }>;
  dedupXorbs: Database.Statement<[Uint8Array, number], { xorb_hash: Buffer }>;
}

function prepareCasStatements(db: Database.Database): CasStatements {
  return {
    // The statements of a shard registration (shard-registration.ts), which imports reuse.
    ...prepareShardStatements(db),
    insertXorb: db.prepare<[Uint8Array, number, number, number, Uint8Array]>(
      `INSERT INTO xorbs (hash, serialized_length, uncompressed_length, created_at, chunks)
       VALUES (?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING`,
    ),
    xorbSize: db.prepare<[Uint8Array], { serialized_length: number }>("SELECT serialized_length FROM xorbs WHERE hash = ?"),
    getFile: db.prepare<[Uint8Array], FileRow>("SELECT size, sha256, terms FROM files WHERE hash = ?"),
    fileInRepo: db.prepare<[Uint8Array, number], { ok: number }>("SELECT 1 AS ok FROM file_repos WHERE file_hash = ? AND repo_id = ?"),
    fileInNamedRepo: db.prepare<[string, string, Uint8Array], { ok: number }>(
      "SELECT 1 AS ok FROM repos r JOIN file_repos l ON l.repo_id = r.id WHERE r.type = ? AND r.name = ? AND l.file_hash = ?",
    ),
    fileBySha256: db.prepare<[number, Uint8Array], { file_hash: Buffer }>(
      // Only a file the repository still holds (schema.ts: the migration dropping file_sha256_by_file).
      `SELECT s.file_hash FROM file_sha256 s
       WHERE s.repo_id = ? AND s.sha256 = ? AND EXISTS (SELECT 1 FROM file_repos r WHERE r.file_hash = s.file_hash AND r.repo_id = s.repo_id)`,
    ),
    dedupXorbs: db.prepare<[Uint8Array, number], { xorb_hash: Buffer }>("SELECT xorb_hash FROM dedup_chunks WHERE chunk_hash = ? ORDER BY seq LIMIT ?"),
  };
}

export class SqliteCasRecords {
  readonly sql: CasStatements;
  private readonly db: Database.Database;
  /** Writes large shard registrations on a connection of their own, in steps. */
  private readonly bulkShards: BulkShardWriter;
  private readonly xorbBatches: HashBatchQuery<XorbRow>;
  private readonly chunkTableBatches: HashBatchQuery<Pick<XorbRow, "hash" | "chunks">>;

  constructor(private readonly connection: SqliteConnection) {
    this.db = connection.db;
    this.sql = prepareCasStatements(this.db);
    this.bulkShards = new BulkShardWriter(connection.path, connection.backgroundCheckpoints);
    this.xorbBatches = new HashBatchQuery(
      this.db,
      (placeholders) => `SELECT hash, serialized_length, uncompressed_length, chunks FROM xorbs WHERE hash IN (${placeholders})`,
    );
    this.chunkTableBatches = new HashBatchQuery(this.db, (placeholders) => `SELECT hash, chunks FROM xorbs WHERE hash IN (${placeholders})`);
  }

  async putXorb(xorb: XorbRecord, lease?: Lease): Promise<boolean> {
    const chunks = packXorbRecord(xorb);
    return this.connection.write(() => {
      if (lease !== undefined) {
        const row = this.sql.leaseOf.get("xorb", xorb.hash);
        if (row === undefined || row.deleting === 1 || row.epoch !== lease.epoch) throw overtakenLease(xorb.hash);
      }
      return this.sql.insertXorb.run(xorb.hash, xorb.serializedLength, xorb.uncompressedLength, Date.now(), chunks).changes > 0;
    });
  }

  async getXorbs(hashes: readonly Hash[]): Promise<Map<string, XorbRecord>> {
    const found = new Map<string, XorbRecord>();
    for (const row of this.xorbBatches.all(hashes)) {
      const record = xorbRecordOf(row);
      found.set(hashToHex(record.hash), record);
    }
    return found;
  }

  async getChunkTables(hashes: readonly Hash[]): Promise<Map<string, Uint8Array>> {
    const found = new Map<string, Uint8Array>();
    for (const row of this.chunkTableBatches.all(hashes)) {
      const hex = hashToHex(storedHash(row.hash, "xorb hash"));
      found.set(hex, storedChunkTable(row.chunks, `xorb ${hex}`));
    }
    return found;
  }

  async getXorbSize(hash: Hash): Promise<number | null> {
    return this.sql.xorbSize.get(hash)?.serialized_length ?? null;
  }

  async registerShard(registration: ShardRegistration | PackedShardRegistration): Promise<boolean> {
    const packed = packShardRegistration(registration);
    if (fitsOneStep(packed)) {
      return this.connection.write(() => this.db.transaction(() => runToEnd(registrationSteps(this.sql, packed))).immediate());
    }
    return this.connection.writeExclusively(() => this.bulkShards.register(packed));
  }

  async getFile(hash: Hash): Promise<FileRecord | null> {
    const row = this.sql.getFile.get(hash);
    if (!row) return null;
    return fileRecordOf(new Uint8Array(hash), row);
  }

  async isFileInRepo(fileHash: Hash, repoId: number): Promise<boolean> {
    return this.sql.fileInRepo.get(fileHash, repoId) !== undefined;
  }

  async isFileInNamedRepo(fileHash: Hash, type: RepoType, name: string): Promise<boolean> {
    return this.sql.fileInNamedRepo.get(type, name, fileHash) !== undefined;
  }

  async findFileBySha256(repoId: number, sha256: Uint8Array): Promise<Hash | null> {
    const row = this.sql.fileBySha256.get(repoId, sha256);
    return row ? storedHash(row.file_hash, "file hash in the SHA-256 index") : null;
  }

  async findDedupXorbs(chunkHash: Hash, limit: number): Promise<Hash[]> {
    if (!Number.isSafeInteger(limit) || limit < 0) {
      throw new RangeError(`the dedup lookup limit must be a non-negative integer, got ${limit}`);
    }
    if (limit === 0) return [];
    return this.sql.dedupXorbs.all(chunkHash, limit).map((row) => storedHash(row.xorb_hash, "xorb hash in the dedup index"));
  }

  close(): void {
    this.bulkShards.close();
  }
}
