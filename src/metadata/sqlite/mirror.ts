/**
 * The mirror's records in the embedded store (../mirror.ts; tables in schema.ts). Every write is
 * one statement or one IMMEDIATE transaction through the connection's `write`.
 */
import type Database from "better-sqlite3";
import { bytesToPlainHex, type Hash } from "../../format/hash.js";
import type { RepoType } from "../../format/repo.js";
import { storedHash } from "../cas.js";
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import {
  chunkRunOfRow,
  type ChunkRun,
  type ChunkRunRow,
  type MirroredFile,
  type MirroredFileCursor,
  type MirroredKind,
  type MirroredTotals,
  type MirrorRecords,
  type MirrorRef,
} from "../mirror.js";
import type { CommitRecord, Repo, TreeRecord } from "../records.js";
import type { SqliteConnection } from "./connection.js";
import { encodeHistory, type SqliteHistoryRecords } from "./history.js";
import { REPO_ID_AFTER_DELETIONS, toRepo, type RepoRow } from "./repos.js";
import { isConstraint } from "./schema.js";

interface RefRow {
  name: string;
  kind: "branch" | "tag" | null;
  commit_oid: string | null;
  checked_at: number;
}

interface FileRow {
  kind: MirroredKind;
  hash: Buffer;
  git_oid: string | null;
  size: number;
  fetched_bytes: number;
  fetched_at: number;
  last_used_at: number;
}

function prepare(db: Database.Database) {
  return {
    createRepo: db.prepare<[string, string, number, number, number], RepoRow>(
      `INSERT INTO repos (id, type, name, created_at, private, mirror_used_at) VALUES (${REPO_ID_AFTER_DELETIONS}, ?, ?, ?, ?, ?) RETURNING *`,
    ),
    touchRepo: db.prepare<[number, number]>("UPDATE repos SET mirror_used_at = ? WHERE id = ? AND mirror_used_at IS NOT NULL"),
    repoUses: db.prepare<[], { id: number; mirror_used_at: number }>("SELECT id, mirror_used_at FROM repos WHERE mirror_used_at IS NOT NULL ORDER BY id"),
    repoExists: db.prepare<[number], { one: number }>("SELECT 1 AS one FROM repos WHERE id = ?"),
    getRef: db.prepare<[number, string], RefRow>("SELECT name, kind, commit_oid, checked_at FROM mirror_refs WHERE repo_id = ? AND name = ?"),
    putRef: db.prepare<[number, string, string | null, string | null, number]>(
      `INSERT INTO mirror_refs (repo_id, name, kind, commit_oid, checked_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (repo_id, name) DO UPDATE SET kind = excluded.kind, commit_oid = excluded.commit_oid, checked_at = excluded.checked_at`,
    ),
    listRefs: db.prepare<[number], RefRow>("SELECT name, kind, commit_oid, checked_at FROM mirror_refs WHERE repo_id = ? ORDER BY name"),
    runsOf: db.prepare<[Uint8Array], ChunkRunRow>("SELECT * FROM mirror_chunk_runs WHERE upstream_xorb = ? ORDER BY upstream_start, xorb"),
    forgetRuns: db.prepare<[Uint8Array]>("DELETE FROM mirror_chunk_runs WHERE xorb = ?"),
    putRun: db.prepare<[Uint8Array, number, number, number, Uint8Array, number]>(
      "INSERT INTO mirror_chunk_runs (upstream_xorb, upstream_start, upstream_end, upstream_offset, xorb, start) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
    ),
    activeFills: db.prepare<[number], { count: number }>("SELECT count(*) AS count FROM mirror_fills WHERE heartbeat_at >= ?"),
    putFile: db.prepare<[string, Uint8Array, string | null, number, number, number, number]>(
      `INSERT INTO mirror_files (kind, hash, git_oid, size, fetched_bytes, fetched_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (kind, hash) DO UPDATE SET last_used_at = max(last_used_at, excluded.last_used_at), git_oid = coalesce(git_oid, excluded.git_oid)`,
    ),
    getFile: db.prepare<[string, Uint8Array], FileRow>("SELECT * FROM mirror_files WHERE kind = ? AND hash = ?"),
    findInline: db.prepare<[string], FileRow>("SELECT * FROM mirror_files WHERE git_oid = ? AND kind = 'inline' LIMIT 1"),
    touchFile: db.prepare<[number, string, Uint8Array]>("UPDATE mirror_files SET last_used_at = max(last_used_at, ?) WHERE kind = ? AND hash = ?"),
    firstFiles: db.prepare<[number], FileRow>("SELECT * FROM mirror_files ORDER BY last_used_at, kind, hash LIMIT ?"),
    filesAfter: db.prepare<[number, number, string, string, Uint8Array, number], FileRow>(
      `SELECT * FROM mirror_files
       WHERE last_used_at > ? OR (last_used_at = ? AND (kind > ? OR (kind = ? AND hash > ?)))
       ORDER BY last_used_at, kind, hash LIMIT ?`,
    ),
    deleteFile: db.prepare<[string, Uint8Array]>("DELETE FROM mirror_files WHERE kind = ? AND hash = ?"),
    totals: db.prepare<[], { files: number; bytes: number | null; fetched: number | null }>(
      "SELECT count(*) AS files, sum(size) AS bytes, sum(fetched_bytes) AS fetched FROM mirror_files",
    ),
    claimFill: db.prepare<[string, string, number, number]>(
      `INSERT INTO mirror_fills (key, owner, heartbeat_at) VALUES (?, ?, ?)
       ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, heartbeat_at = excluded.heartbeat_at
       WHERE mirror_fills.owner = excluded.owner OR mirror_fills.heartbeat_at < ?`,
    ),
    renewFill: db.prepare<[number, string, string]>("UPDATE mirror_fills SET heartbeat_at = ? WHERE key = ? AND owner = ?"),
    releaseFill: db.prepare<[string, string]>("DELETE FROM mirror_fills WHERE key = ? AND owner = ?"),
  };
}

export class SqliteMirrorRecords implements MirrorRecords {
  private readonly sql: ReturnType<typeof prepare>;
  private readonly db: Database.Database;

  constructor(
    private readonly connection: SqliteConnection,
    private readonly history: SqliteHistoryRecords,
  ) {
    this.db = connection.db;
    this.sql = prepare(this.db);
  }

  async createMirroredRepo(type: RepoType, name: string, isPrivate: boolean, now: Date): Promise<Repo> {
    return this.connection.write(() => {
      try {
        return toRepo(this.sql.createRepo.get(type, name, now.getTime(), isPrivate ? 1 : 0, now.getTime())!);
      } catch (err) {
        if (isConstraint(err, "SQLITE_CONSTRAINT_UNIQUE")) throw new AlreadyExistsError(`repository ${type}:${name} already exists`);
        throw err;
      }
    });
  }

  async touchMirroredRepo(repoId: number, now: Date): Promise<void> {
    await this.connection.write(() => this.sql.touchRepo.run(now.getTime(), repoId));
  }

  async mirroredRepoUses(): Promise<Map<number, Date>> {
    return new Map(this.sql.repoUses.all().map((row) => [row.id, new Date(row.mirror_used_at)]));
  }

  async getMirrorRef(repoId: number, name: string): Promise<MirrorRef | null> {
    const row = this.sql.getRef.get(repoId, name);
    return row === undefined ? null : toRef(row);
  }

  async putMirrorRef(repoId: number, ref: MirrorRef): Promise<void> {
    await this.connection.write(() => {
      try {
        this.sql.putRef.run(repoId, ref.name, ref.kind, ref.commitOid, ref.checkedAt.getTime());
      } catch (err) {
        if (isConstraint(err, "SQLITE_CONSTRAINT_FOREIGNKEY")) throw new NotFoundError(`no repository with id ${repoId}`);
        throw err;
      }
    });
  }

  async listMirrorRefs(repoId: number): Promise<MirrorRef[]> {
    return this.sql.listRefs.all(repoId).map(toRef);
  }

  async putMirrorSnapshot(repoId: number, commit: CommitRecord, trees: readonly TreeRecord[]): Promise<void> {
    const encoded = encodeHistory(commit, trees);
    await this.connection.write(() =>
      this.db
        .transaction(() => {
          if (this.sql.repoExists.get(repoId) === undefined) throw new NotFoundError(`no repository with id ${repoId}`);
          this.history.insertHistory(repoId, encoded);
        })
        .immediate(),
    );
  }

  async findChunkRuns(upstreamXorbs: readonly Hash[]): Promise<ChunkRun[]> {
    const distinct = [...new Map(upstreamXorbs.map((hash) => [bytesToPlainHex(hash), hash])).entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const runs: ChunkRun[] = [];
    for (const [, hash] of distinct) for (const row of this.sql.runsOf.all(hash)) runs.push(chunkRunOfRow(row));
    return runs;
  }

  async forgetChunkRuns(xorbs: readonly Hash[]): Promise<number> {
    if (xorbs.length === 0) return 0;
    return this.connection.write(() =>
      this.db
        .transaction(() => {
          let deleted = 0;
          for (const xorb of xorbs) deleted += this.sql.forgetRuns.run(xorb).changes;
          return deleted;
        })
        .immediate(),
    );
  }

  async putMirroredFile(file: MirroredFile, runs: readonly ChunkRun[]): Promise<void> {
    await this.connection.write(() =>
      this.db
        .transaction(() => {
          for (const run of runs) this.sql.putRun.run(run.upstreamXorb, run.upstreamStart, run.upstreamEnd, run.upstreamOffset, run.xorb, run.start);
          this.sql.putFile.run(file.kind, file.hash, file.gitOid, file.size, file.fetchedBytes, file.fetchedAt.getTime(), file.lastUsedAt.getTime());
        })
        .immediate(),
    );
  }

  async getMirroredFile(kind: MirroredKind, hash: Hash): Promise<MirroredFile | null> {
    const row = this.sql.getFile.get(kind, hash);
    return row === undefined ? null : toFile(row);
  }

  async findMirroredInline(gitOid: string): Promise<MirroredFile | null> {
    const row = this.sql.findInline.get(gitOid);
    return row === undefined ? null : toFile(row);
  }

  async touchMirroredFile(kind: MirroredKind, hash: Hash, now: Date): Promise<void> {
    await this.connection.write(() => this.sql.touchFile.run(now.getTime(), kind, hash));
  }

  async listMirroredFiles(after: MirroredFileCursor | null, limit: number): Promise<MirroredFile[]> {
    const rows =
      after === null
        ? this.sql.firstFiles.all(limit)
        : this.sql.filesAfter.all(after.lastUsedAt.getTime(), after.lastUsedAt.getTime(), after.kind, after.kind, after.hash, limit);
    return rows.map(toFile);
  }

  async deleteMirroredFiles(keys: readonly { kind: MirroredKind; hash: Hash }[]): Promise<number> {
    return this.connection.write(() =>
      this.db
        .transaction(() => {
          let deleted = 0;
          for (const { kind, hash } of keys) deleted += this.sql.deleteFile.run(kind, hash).changes;
          return deleted;
        })
        .immediate(),
    );
  }

  async mirroredTotals(): Promise<MirroredTotals> {
    const row = this.sql.totals.get()!;
    return { files: row.files, bytes: row.bytes ?? 0, fetchedBytes: row.fetched ?? 0 };
  }

  async claimFill(key: string, owner: string, now: Date, staleBefore: Date): Promise<boolean> {
    return this.connection.write(() => this.sql.claimFill.run(key, owner, now.getTime(), staleBefore.getTime()).changes === 1);
  }

  async renewFill(key: string, owner: string, now: Date): Promise<boolean> {
    return this.connection.write(() => this.sql.renewFill.run(now.getTime(), key, owner).changes === 1);
  }

  async activeFills(since: Date): Promise<number> {
    return this.sql.activeFills.get(since.getTime())!.count;
  }

  async releaseFill(key: string, owner: string): Promise<void> {
    await this.connection.write(() => this.sql.releaseFill.run(key, owner));
  }
}

function toRef(row: RefRow): MirrorRef {
  return { name: row.name, kind: row.kind, commitOid: row.commit_oid, checkedAt: new Date(row.checked_at) };
}

function toFile(row: FileRow): MirroredFile {
  return {
    kind: row.kind,
    hash: storedHash(row.hash, "mirrored file hash"),
    gitOid: row.git_oid,
    size: row.size,
    fetchedBytes: row.fetched_bytes,
    fetchedAt: new Date(row.fetched_at),
    lastUsedAt: new Date(row.last_used_at),
  };
}
