/**
 * The CAS records in the scale-out store: xorbs, files, their repository links and SHA-256
 * index, shards and the global-dedup index.
 *
 * A shard registration is one transaction of a few batched statements whose row sets are
 * passed as packed binary parameters and inserted in key order. Inserting in key order makes
 * two registrations that share files or dedup entries lock those rows in the same order, so
 * they wait for each other instead of deadlocking. Every "did I insert it?" answer comes from
 * the row count of one `INSERT … ON CONFLICT DO NOTHING`, which PostgreSQL makes exact across
 * connections.
 */
import type { RepoType } from "../../format/repo.js";
import { bytesToPlainHex, hashToHex, HASH_BYTES, type Hash } from "../../format/hash.js";
import {
  packFileRecord,
  packShardRegistration,
  packedDedupChunk,
  packedDedupXorb,
  packedFileHash,
  packedFileRecord,
  packedFileSha256,
  replacesBrokenRecord,
  termXorbs,
  packXorbRecord,
  storedChunkTable,
  storedHash,
  PACKED_DEDUP_ENTRY_BYTES,
  type FileRecord,
  type PackedShardRegistration,
  type ShardRegistration,
  type XorbRecord,
  fileRecordOf,
  xorbRecordOf,
  type FileRow,
  type XorbRow,
} from "../cas.js";
import type { DedupEntry } from "../migration.js";
import { NotFoundError } from "../errors.js";
import { collectedXorb, overtakenLease, registrationXorbs, type Lease } from "../gc.js";
import { LEASE_SQL, takeLeases } from "./gc.js";
import { hashAt, packDistinct, packedIndexes } from "./packed.js";
import type { PoolClient } from "pg";
import type { PostgresConnection, NamedStatements } from "./connection.js";

const CAS_SQL = {
  ...LEASE_SQL,
  insertXorb: `
    INSERT INTO xorbs (hash, serialized_length, uncompressed_length, created_at, chunks)
    VALUES ($1, $2, $3, $4, $5) ON CONFLICT (hash) DO NOTHING`,
  getXorbs: `SELECT hash, serialized_length, uncompressed_length, chunks FROM xorbs WHERE hash = ANY ($1::bytea[])`,
  getChunkTables: `SELECT hash, chunks FROM xorbs WHERE hash = ANY ($1::bytea[])`,
  xorbSize: `SELECT serialized_length FROM xorbs WHERE hash = $1`,
  lockRepo: `SELECT 1 FROM repos WHERE id = $1 FOR KEY SHARE`,
  insertShard: `INSERT INTO shards (hash, created_at) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`,
  // Inserts the files of a registration from packed binary parameters (file i, from 1):
  // $1 hashes (32 bytes each), $2 sizes (8 bytes each, big-endian), $3 one byte each, 1 when
  // the file has a SHA-256, $4 the SHA-256 digests (32 bytes each), $5 where each file's terms
  // start and the last one's end (4 bytes each, big-endian, in terms), $6 the terms in their
  // stored layout (44 bytes each), $7 the time. Answers the hashes of the files that were
  // recorded already (usually none): a shard of 340,000 files costs no row per file, and no
  // array of 340,000 elements, which pg serialises as text on the event loop.
  insertFiles: `
    WITH batch AS MATERIALIZED (
      SELECT ${hashAt("$1", "i")} AS hash,
        ('x' || encode(substring($2::bytea FROM i * 8 - 7 FOR 8), 'hex'))::bit(64)::bigint AS size,
        CASE WHEN get_byte($3::bytea, i - 1) = 1 THEN substring($4::bytea FROM i * 32 - 31 FOR 32) END AS sha256,
        ('x' || encode(substring($5::bytea FROM i * 4 - 3 FOR 4), 'hex'))::bit(32)::integer AS term_start,
        ('x' || encode(substring($5::bytea FROM i * 4 + 1 FOR 4), 'hex'))::bit(32)::integer AS term_end
      FROM ${packedIndexes("$1")} AS i
    ),
    inserted AS (
      INSERT INTO files (hash, size, sha256, created_at, terms)
      SELECT hash, size, sha256, $7::timestamptz, substring($6::bytea FROM term_start * 44 + 1 FOR (term_end - term_start) * 44)
      FROM batch
      ORDER BY 1
      ON CONFLICT (hash) DO NOTHING
      RETURNING hash
    )
    SELECT b.hash FROM batch b LEFT JOIN inserted USING (hash) WHERE inserted.hash IS NULL`,
  linkFiles: `
    INSERT INTO file_repos (file_hash, repo_id)
    SELECT ${hashAt("$1", "i")}, $2::bigint FROM ${packedIndexes("$1")} AS i
    ORDER BY 1
    ON CONFLICT DO NOTHING`,
  // $2 packed digests, $3 packed file hashes; digests are distinct (ON CONFLICT DO UPDATE may
  // not touch one row twice in a statement).
  putSha256: `
    INSERT INTO file_sha256 (repo_id, sha256, file_hash)
    SELECT $1::bigint, ${hashAt("$2", "i")}, ${hashAt("$3", "i")} FROM ${packedIndexes("$2")} AS i
    ORDER BY 2
    ON CONFLICT (repo_id, sha256) DO UPDATE SET file_hash = excluded.file_hash`,
  // Sorting by (chunk, xorb, position) makes the first of repeated entries the one inserted.
  insertDedup: `
    WITH registration AS MATERIALIZED (SELECT nextval('dedup_registration_seq') AS seq)
    INSERT INTO dedup_chunks (chunk_hash, xorb_hash, registration_seq, position)
    SELECT ${hashAt("$1", "i")}, ${hashAt("$2", "i")}, registration.seq, i
    FROM registration, ${packedIndexes("$1")} AS i
    ORDER BY 1, 2, 4
    ON CONFLICT DO NOTHING`,
  getFile: `SELECT size, sha256, terms FROM files WHERE hash = $1`,
  filesByHash: `SELECT hash, size, sha256, terms FROM files WHERE hash = ANY ($1::bytea[])`,
  recordedXorbs: `SELECT hash FROM xorbs WHERE hash IN (SELECT ${hashAt("$1", "i")} FROM ${packedIndexes("$1")} AS i)`,
  replaceFiles: `
    UPDATE files f SET size = r.size, sha256 = r.sha256, terms = r.terms
    FROM unnest($1::bytea[], $2::bigint[], $3::bytea[], $4::bytea[]) AS r (hash, size, sha256, terms)
    WHERE f.hash = r.hash`,
  fileInRepo: `SELECT 1 FROM file_repos WHERE file_hash = $1 AND repo_id = $2`,
  fileInNamedRepo: `SELECT 1 FROM repos r JOIN file_repos l ON l.repo_id = r.id WHERE r.type = $1 AND r.name = $2 AND l.file_hash = $3`,
  // Only a file the repository still holds (schema.ts: the migration dropping file_sha256_by_file).
  fileBySha256: `
    SELECT s.file_hash FROM file_sha256 s
    WHERE s.repo_id = $1 AND s.sha256 = $2 AND EXISTS (SELECT 1 FROM file_repos r WHERE r.file_hash = s.file_hash AND r.repo_id = s.repo_id)`,
  dedupXorbs: `SELECT xorb_hash FROM dedup_chunks WHERE chunk_hash = $1 ORDER BY registration_seq, position LIMIT $2`,
} as const;

export class PostgresCasRecords {
  private readonly sql: NamedStatements<typeof CAS_SQL>;

  constructor(private readonly connection: PostgresConnection) {
    this.sql = connection.statements(CAS_SQL);
  }

  async putXorb(xorb: XorbRecord, lease?: Lease): Promise<boolean> {
    const chunks = packXorbRecord(xorb);
    const values = [xorb.hash, xorb.serializedLength, xorb.uncompressedLength, new Date(), chunks];
    if (lease === undefined) return (await this.sql.run("insertXorb", values)).rowCount === 1;
    // The share lock on the lease row waits for a collector condemning the xorb right now.
    return this.connection.inTransaction(async (client) => {
      const row = (await this.sql.runOn<{ epoch: number; deleting: boolean }>(client, "leaseForPut", [xorb.hash])).rows[0];
      if (row === undefined || row.deleting || row.epoch !== lease.epoch) throw overtakenLease(xorb.hash);
      return (await this.sql.runOn(client, "insertXorb", values)).rowCount === 1;
    });
  }

  async getXorbs(hashes: readonly Hash[]): Promise<Map<string, XorbRecord>> {
    const found = new Map<string, XorbRecord>();
    if (hashes.length === 0) return found;
    const distinct = [...new Map(hashes.map((hash) => [bytesToPlainHex(hash), hash])).values()];
    for (const row of (await this.sql.run<XorbRow>("getXorbs", [distinct])).rows) {
      const record = xorbRecordOf(row);
      found.set(hashToHex(record.hash), record);
    }
    return found;
  }

  async getChunkTables(hashes: readonly Hash[]): Promise<Map<string, Uint8Array>> {
    const found = new Map<string, Uint8Array>();
    if (hashes.length === 0) return found;
    const distinct = [...new Map(hashes.map((hash) => [bytesToPlainHex(hash), hash])).values()];
    for (const row of (await this.sql.run<Pick<XorbRow, "hash" | "chunks">>("getChunkTables", [distinct])).rows) {
      const hex = hashToHex(storedHash(row.hash, "xorb hash"));
      found.set(hex, storedChunkTable(row.chunks, `xorb ${hex}`));
    }
    return found;
  }

  async getXorbSize(hash: Hash): Promise<number | null> {
    const { rows } = await this.sql.run<{ serialized_length: number }>("xorbSize", [hash]);
    return rows.length > 0 ? rows[0].serialized_length : null;
  }

  async registerShard(registration: ShardRegistration | PackedShardRegistration): Promise<boolean> {
    // Everything is checked and packed before the transaction starts, so a bad record costs no
    // round trip and holds no lock.
    const packed = packShardRegistration(registration);
    const { shardHash, repoId } = packed;
    const batch = registrationParameters(packed);

    return this.connection.inTransaction(async (client) => {
      if ((await this.sql.runOn(client, "lockRepo", [repoId])).rowCount === 0) {
        throw new NotFoundError(`no repository with id ${repoId}`);
      }
      await this.leaseXorbsOf(client, packed);
      const now = new Date();
      const isNew = (await this.sql.runOn(client, "insertShard", [shardHash, now])).rowCount === 1;
      if (batch.fileCount > 0) {
        const fileRows = [batch.fileHashes, batch.sizes, batch.shaFlags, batch.sha256s, batch.termStarts, batch.terms, now];
        const knownHashes = (await this.sql.runOn<{ hash: Buffer }>(client, "insertFiles", fileRows)).rows;
        if (knownHashes.length > 0) {
          // Files recorded before get a lease, which waits for a collector deleting them right
          // now; inserting again then restores any it deleted before the lease was taken.
          const knownKeys = new Set(knownHashes.map((row) => row.hash.toString("hex")));
          const known: FileRecord[] = [];
          for (let i = 0; i < packed.files.count; i++) {
            if (knownKeys.has(bytesToPlainHex(packedFileHash(packed.files, i)))) known.push(packedFileRecord(packed.files, i));
          }
          await takeLeases(
            this.sql,
            client,
            "file",
            known.map((file) => file.hash),
          );
          await this.sql.runOn(client, "insertFiles", fileRows);
          await this.replaceBrokenRecords(client, known);
        }
        await this.sql.runOn(client, "linkFiles", [batch.fileHashes, repoId]);
      }
      if (batch.digests.length > 0) {
        await this.sql.runOn(client, "putSha256", [repoId, batch.digests, batch.digestFiles]);
      }
      if (batch.chunkHashes.length > 0) {
        await this.sql.runOn(client, "insertDedup", [batch.chunkHashes, batch.dedupXorbHashes]);
      }
      return isNew;
    });
  }

  /**
   * Leases every xorb the registration relies on, in its transaction, and checks each is still
   * recorded: a xorb a collector condemned (or deleted) meanwhile fails the registration.
   */
  private async leaseXorbsOf(client: PoolClient, registration: PackedShardRegistration): Promise<void> {
    const xorbs = registrationXorbs(registration);
    if (xorbs.length === 0) return;
    const packed = packDistinct(xorbs);
    const leased = await takeLeases(this.sql, client, "xorb", xorbs, "leaseRecorded");
    if (leased.size === xorbs.length) return;
    // Not leased: not recorded, or condemned. Judged only if the xorb ever had a lease.
    const hadLease = new Set((await this.sql.runOn<{ hash: Buffer }>(client, "xorbsWithLeases", [packed])).rows.map((row) => row.hash.toString("hex")));
    const gone = xorbs.find((xorb) => !leased.has(bytesToPlainHex(xorb)) && hadLease.has(bytesToPlainHex(xorb)));
    if (gone !== undefined) throw collectedXorb(gone);
  }

  /** Replaces the records of `files` that `replacesBrokenRecord` says the registration repairs. */
  private async replaceBrokenRecords(client: PoolClient, files: readonly FileRecord[]): Promise<void> {
    const stored = (await this.sql.runOn<FileRow & { hash: Buffer }>(client, "filesByHash", [files.map((file) => Buffer.from(file.hash))])).rows;
    const storedByKey = new Map(stored.map((row) => [row.hash.toString("hex"), fileRecordOf(new Uint8Array(row.hash), row)]));
    const xorbs = files.flatMap((file) => [...termXorbs(file.terms), ...termXorbs(storedByKey.get(bytesToPlainHex(file.hash))?.terms ?? [])]);
    if (xorbs.length === 0) return;
    const recorded = new Set(
      (await this.sql.runOn<{ hash: Buffer }>(client, "recordedXorbs", [packDistinct(xorbs)])).rows.map((row) => row.hash.toString("hex")),
    );
    const isRecorded = (xorb: Hash) => recorded.has(bytesToPlainHex(xorb));
    const broken = files.filter((file) => {
      const old = storedByKey.get(bytesToPlainHex(file.hash));
      return old !== undefined && replacesBrokenRecord(old.terms, file.terms, isRecorded);
    });
    if (broken.length === 0) return;
    await this.sql.runOn(client, "replaceFiles", [
      broken.map((file) => Buffer.from(file.hash)),
      broken.map((file) => file.size),
      broken.map((file) => file.sha256),
      broken.map((file) => packFileRecord(file)),
    ]);
  }

  /** Inserts dedup entries as one registration does: one sequence value, positions in the given order. */
  async insertDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    if (entries.length === 0) return 0;
    const { chunkHashes, dedupXorbHashes } = dedupParameters(
      packShardRegistration({ shardHash: new Uint8Array(HASH_BYTES), repoId: 0, files: [], dedupEntries: [...entries] }).dedupEntries,
    );
    const result = await this.sql.run("insertDedup", [chunkHashes, dedupXorbHashes]);
    return result.rowCount ?? 0;
  }

  async getFile(hash: Hash): Promise<FileRecord | null> {
    const { rows } = await this.sql.run<FileRow>("getFile", [hash]);
    if (rows.length === 0) return null;
    const row = rows[0];
    return fileRecordOf(new Uint8Array(hash), row);
  }

  async isFileInRepo(fileHash: Hash, repoId: number): Promise<boolean> {
    return ((await this.sql.run("fileInRepo", [fileHash, repoId])).rowCount ?? 0) > 0;
  }

  async isFileInNamedRepo(fileHash: Hash, type: RepoType, name: string): Promise<boolean> {
    return ((await this.sql.run("fileInNamedRepo", [type, name, fileHash])).rowCount ?? 0) > 0;
  }

  async findFileBySha256(repoId: number, sha256: Uint8Array): Promise<Hash | null> {
    const { rows } = await this.sql.run<{ file_hash: Buffer }>("fileBySha256", [repoId, sha256]);
    return rows.length > 0 ? storedHash(rows[0].file_hash, "file hash in the SHA-256 index") : null;
  }

  async findDedupXorbs(chunkHash: Hash, limit: number): Promise<Hash[]> {
    if (!Number.isSafeInteger(limit) || limit < 0) {
      throw new RangeError(`the dedup lookup limit must be a non-negative integer, got ${limit}`);
    }
    if (limit === 0) return [];
    const { rows } = await this.sql.run<{ xorb_hash: Buffer }>("dedupXorbs", [chunkHash, limit]);
    return rows.map((row) => storedHash(row.xorb_hash, "xorb hash in the dedup index"));
  }
}

/** A registration's row sets as binary statement parameters (see `insertFiles`, `putSha256`, `insertDedup`). */
interface RegistrationParameters {
  fileCount: number;
  /** The files' hashes, in shard order (distinct). */
  fileHashes: Buffer;
  sizes: Buffer;
  shaFlags: Buffer;
  sha256s: Buffer;
  termStarts: Buffer;
  terms: Buffer;
  /** Distinct digests of the files; the last file with a digest wins, as in shard order. */
  digests: Buffer;
  digestFiles: Buffer;
  chunkHashes: Buffer;
  dedupXorbHashes: Buffer;
}

/**
 * Lays a checked registration out as parameters. Everything travels as binary bytea — `pg`
 * would send arrays as text, built on the event loop — which measured about 1.7× faster for
 * 100,000 dedup entries.
 */
function registrationParameters({ files, dedupEntries }: PackedShardRegistration): RegistrationParameters {
  const count = files.count;
  const sizes = Buffer.alloc(count * 8);
  const termStarts = Buffer.alloc((count + 1) * 4);
  const fileByDigest = new Map<string, { digest: Uint8Array; file: Hash }>();
  for (let i = 0; i < count; i++) {
    sizes.writeBigUInt64BE(BigInt(files.sizes[i]), i * 8);
    termStarts.writeUInt32BE(files.termStarts[i], i * 4);
    const sha256 = packedFileSha256(files, i);
    if (sha256 !== null) fileByDigest.set(bytesToPlainHex(sha256), { digest: sha256, file: packedFileHash(files, i) });
  }
  termStarts.writeUInt32BE(files.termStarts[count], count * 4);
  const digests = Buffer.allocUnsafe(fileByDigest.size * HASH_BYTES);
  const digestFiles = Buffer.allocUnsafe(fileByDigest.size * HASH_BYTES);
  let at = 0;
  for (const { digest, file } of fileByDigest.values()) {
    digests.set(digest, at);
    digestFiles.set(file, at);
    at += HASH_BYTES;
  }
  return {
    fileCount: count,
    fileHashes: bufferOf(files.hashes),
    sizes,
    shaFlags: files.hasSha256 === null ? Buffer.alloc(count) : bufferOf(files.hasSha256.subarray(0, count)),
    sha256s: files.sha256s === null ? Buffer.alloc(0) : bufferOf(files.sha256s),
    termStarts,
    terms: bufferOf(files.terms),
    digests,
    digestFiles,
    ...dedupParameters(dedupEntries),
  };
}

/** Packed dedup entries as two parameters: their chunk hashes and their xorb hashes. */
function dedupParameters(entries: Uint8Array): { chunkHashes: Buffer; dedupXorbHashes: Buffer } {
  const count = entries.length / PACKED_DEDUP_ENTRY_BYTES;
  const chunkHashes = Buffer.allocUnsafe(count * HASH_BYTES);
  const dedupXorbHashes = Buffer.allocUnsafe(count * HASH_BYTES);
  for (let i = 0; i < count; i++) {
    chunkHashes.set(packedDedupChunk(entries, i), i * HASH_BYTES);
    dedupXorbHashes.set(packedDedupXorb(entries, i), i * HASH_BYTES);
  }
  return { chunkHashes, dedupXorbHashes };
}

/** A Buffer over the same memory (`pg` sends Buffers as bytea). */
function bufferOf(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
