/**
 * The mirror's records in the scale-out store (../mirror.ts; tables in schema.ts). A fill claim
 * is one conditional upsert, so of several nodes claiming one file at once exactly one wins.
 */
import type { Hash } from "../../format/hash.js";
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
import { isViolation, PG_FOREIGN_KEY_VIOLATION, PG_UNIQUE_VIOLATION, type NamedStatements, type PostgresConnection } from "./connection.js";
import { encodeHistory, type PostgresHistoryRecords } from "./history.js";
import { REPO_COLUMNS, toRepo, type RepoRow } from "./repos.js";

const FILE_COLUMNS = "kind, hash, git_oid, size, fetched_bytes, fetched_at, last_used_at";

const MIRROR_SQL = {
  mirrorCreateRepo: `INSERT INTO repos (type, name, created_at, private, mirror_used_at) VALUES ($1, $2, $3, $4, $3) RETURNING ${REPO_COLUMNS}`,
  mirrorTouchRepo: `UPDATE repos SET mirror_used_at = $2 WHERE id = $1 AND mirror_used_at IS NOT NULL`,
  mirrorRepoUses: `SELECT id, mirror_used_at FROM repos WHERE mirror_used_at IS NOT NULL ORDER BY id`,
  mirrorLockRepo: `SELECT 1 FROM repos WHERE id = $1 FOR KEY SHARE`,
  mirrorGetRef: `SELECT name, kind, commit_oid, checked_at FROM mirror_refs WHERE repo_id = $1 AND name = $2`,
  mirrorPutRef: `
    INSERT INTO mirror_refs (repo_id, name, kind, commit_oid, checked_at) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (repo_id, name) DO UPDATE SET kind = excluded.kind, commit_oid = excluded.commit_oid, checked_at = excluded.checked_at`,
  mirrorListRefs: `SELECT name, kind, commit_oid, checked_at FROM mirror_refs WHERE repo_id = $1 ORDER BY name`,
  mirrorFindRuns: `
    SELECT upstream_xorb, upstream_start, upstream_end, upstream_offset, xorb, start FROM mirror_chunk_runs
    WHERE upstream_xorb = ANY ($1::bytea[]) ORDER BY upstream_xorb, upstream_start, xorb`,
  mirrorForgetRuns: `DELETE FROM mirror_chunk_runs WHERE xorb = ANY ($1::bytea[])`,
  mirrorPutRuns: `
    INSERT INTO mirror_chunk_runs (upstream_xorb, upstream_start, upstream_end, upstream_offset, xorb, start)
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bytea[], $6::bigint[])
    ORDER BY 1, 2, 5
    ON CONFLICT DO NOTHING`,
  mirrorPutFile: `
    INSERT INTO mirror_files (${FILE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (kind, hash) DO UPDATE
    SET last_used_at = greatest(mirror_files.last_used_at, excluded.last_used_at), git_oid = coalesce(mirror_files.git_oid, excluded.git_oid)`,
  mirrorGetFile: `SELECT ${FILE_COLUMNS} FROM mirror_files WHERE kind = $1 AND hash = $2`,
  mirrorFindInline: `SELECT ${FILE_COLUMNS} FROM mirror_files WHERE git_oid = $1 AND kind = 'inline' LIMIT 1`,
  mirrorTouchFile: `UPDATE mirror_files SET last_used_at = greatest(last_used_at, $3) WHERE kind = $1 AND hash = $2`,
  mirrorFirstFiles: `SELECT ${FILE_COLUMNS} FROM mirror_files ORDER BY last_used_at, kind, hash LIMIT $1`,
  mirrorFilesAfter: `
    SELECT ${FILE_COLUMNS} FROM mirror_files WHERE (last_used_at, kind, hash) > ($1, $2, $3)
    ORDER BY last_used_at, kind, hash LIMIT $4`,
  mirrorDeleteFiles: `DELETE FROM mirror_files WHERE (kind, hash) IN (SELECT * FROM unnest($1::text[], $2::bytea[]))`,
  mirrorTotals: `SELECT count(*) AS files, coalesce(sum(size), 0)::bigint AS bytes, coalesce(sum(fetched_bytes), 0)::bigint AS fetched FROM mirror_files`,
  mirrorClaimFill: `
    INSERT INTO mirror_fills (key, owner, heartbeat_at) VALUES ($1, $2, $3)
    ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, heartbeat_at = excluded.heartbeat_at
    WHERE mirror_fills.owner = excluded.owner OR mirror_fills.heartbeat_at < $4`,
  mirrorRenewFill: `UPDATE mirror_fills SET heartbeat_at = $3 WHERE key = $1 AND owner = $2`,
  mirrorReleaseFill: `DELETE FROM mirror_fills WHERE key = $1 AND owner = $2`,
  mirrorActiveFills: `SELECT count(*) AS count FROM mirror_fills WHERE heartbeat_at >= $1`,
} as const;

interface RefRow {
  name: string;
  kind: "branch" | "tag" | null;
  commit_oid: string | null;
  checked_at: Date;
}

interface FileRow {
  kind: MirroredKind;
  hash: Buffer;
  git_oid: string | null;
  size: number;
  fetched_bytes: number;
  fetched_at: Date;
  last_used_at: Date;
}

export class PostgresMirrorRecords implements MirrorRecords {
  private readonly sql: NamedStatements<typeof MIRROR_SQL>;

  constructor(
    private readonly connection: PostgresConnection,
    private readonly history: PostgresHistoryRecords,
  ) {
    this.sql = connection.statements(MIRROR_SQL);
  }

  async createMirroredRepo(type: RepoType, name: string, isPrivate: boolean, now: Date): Promise<Repo> {
    try {
      return toRepo((await this.sql.run<RepoRow>("mirrorCreateRepo", [type, name, now, isPrivate])).rows[0]);
    } catch (err) {
      if (isViolation(err, PG_UNIQUE_VIOLATION)) throw new AlreadyExistsError(`repository ${type}:${name} already exists`);
      throw err;
    }
  }

  async touchMirroredRepo(repoId: number, now: Date): Promise<void> {
    await this.sql.run("mirrorTouchRepo", [repoId, now]);
  }

  async mirroredRepoUses(): Promise<Map<number, Date>> {
    const { rows } = await this.sql.run<{ id: number; mirror_used_at: Date }>("mirrorRepoUses", []);
    return new Map(rows.map((row) => [row.id, row.mirror_used_at]));
  }

  async getMirrorRef(repoId: number, name: string): Promise<MirrorRef | null> {
    const { rows } = await this.sql.run<RefRow>("mirrorGetRef", [repoId, name]);
    return rows.length === 0 ? null : toRef(rows[0]);
  }

  async putMirrorRef(repoId: number, ref: MirrorRef): Promise<void> {
    try {
      await this.sql.run("mirrorPutRef", [repoId, ref.name, ref.kind, ref.commitOid, ref.checkedAt]);
    } catch (err) {
      if (isViolation(err, PG_FOREIGN_KEY_VIOLATION)) throw new NotFoundError(`no repository with id ${repoId}`);
      throw err;
    }
  }

  async listMirrorRefs(repoId: number): Promise<MirrorRef[]> {
    return (await this.sql.run<RefRow>("mirrorListRefs", [repoId])).rows.map(toRef);
  }

  async putMirrorSnapshot(repoId: number, commit: CommitRecord, trees: readonly TreeRecord[]): Promise<void> {
    const encoded = encodeHistory(commit, trees);
    await this.connection.inTransaction(async (client) => {
      if ((await this.sql.runOn(client, "mirrorLockRepo", [repoId])).rowCount !== 1) throw new NotFoundError(`no repository with id ${repoId}`);
      await this.history.insertHistory(client, repoId, encoded);
    });
  }

  async findChunkRuns(upstreamXorbs: readonly Hash[]): Promise<ChunkRun[]> {
    if (upstreamXorbs.length === 0) return [];
    return (await this.sql.run<ChunkRunRow>("mirrorFindRuns", [upstreamXorbs.map((hash) => Buffer.from(hash))])).rows.map(chunkRunOfRow);
  }

  async forgetChunkRuns(xorbs: readonly Hash[]): Promise<number> {
    if (xorbs.length === 0) return 0;
    return (await this.sql.run("mirrorForgetRuns", [xorbs.map((hash) => Buffer.from(hash))])).rowCount ?? 0;
  }

  async putMirroredFile(file: MirroredFile, runs: readonly ChunkRun[]): Promise<void> {
    await this.connection.inTransaction(async (client) => {
      if (runs.length > 0) {
        await this.sql.runOn(client, "mirrorPutRuns", [
          runs.map((run) => Buffer.from(run.upstreamXorb)),
          runs.map((run) => run.upstreamStart),
          runs.map((run) => run.upstreamEnd),
          runs.map((run) => run.upstreamOffset),
          runs.map((run) => Buffer.from(run.xorb)),
          runs.map((run) => run.start),
        ]);
      }
      await this.sql.runOn(client, "mirrorPutFile", [
        file.kind,
        Buffer.from(file.hash),
        file.gitOid,
        file.size,
        file.fetchedBytes,
        file.fetchedAt,
        file.lastUsedAt,
      ]);
    });
  }

  async getMirroredFile(kind: MirroredKind, hash: Hash): Promise<MirroredFile | null> {
    const { rows } = await this.sql.run<FileRow>("mirrorGetFile", [kind, Buffer.from(hash)]);
    return rows.length === 0 ? null : toFile(rows[0]);
  }

  async findMirroredInline(gitOid: string): Promise<MirroredFile | null> {
    const { rows } = await this.sql.run<FileRow>("mirrorFindInline", [gitOid]);
    return rows.length === 0 ? null : toFile(rows[0]);
  }

  async touchMirroredFile(kind: MirroredKind, hash: Hash, now: Date): Promise<void> {
    await this.sql.run("mirrorTouchFile", [kind, Buffer.from(hash), now]);
  }

  async listMirroredFiles(after: MirroredFileCursor | null, limit: number): Promise<MirroredFile[]> {
    const { rows } =
      after === null
        ? await this.sql.run<FileRow>("mirrorFirstFiles", [limit])
        : await this.sql.run<FileRow>("mirrorFilesAfter", [after.lastUsedAt, after.kind, Buffer.from(after.hash), limit]);
    return rows.map(toFile);
  }

  async deleteMirroredFiles(keys: readonly { kind: MirroredKind; hash: Hash }[]): Promise<number> {
    if (keys.length === 0) return 0;
    const result = await this.sql.run("mirrorDeleteFiles", [keys.map((key) => key.kind), keys.map((key) => Buffer.from(key.hash))]);
    return result.rowCount ?? 0;
  }

  async mirroredTotals(): Promise<MirroredTotals> {
    const { rows } = await this.sql.run<{ files: number; bytes: number; fetched: number }>("mirrorTotals", []);
    return { files: rows[0].files, bytes: rows[0].bytes, fetchedBytes: rows[0].fetched };
  }

  async claimFill(key: string, owner: string, now: Date, staleBefore: Date): Promise<boolean> {
    return (await this.sql.run("mirrorClaimFill", [key, owner, now, staleBefore])).rowCount === 1;
  }

  async renewFill(key: string, owner: string, now: Date): Promise<boolean> {
    return (await this.sql.run("mirrorRenewFill", [key, owner, now])).rowCount === 1;
  }

  async activeFills(since: Date): Promise<number> {
    return (await this.sql.run<{ count: number }>("mirrorActiveFills", [since])).rows[0].count;
  }

  async releaseFill(key: string, owner: string): Promise<void> {
    await this.sql.run("mirrorReleaseFill", [key, owner]);
  }
}

function toRef(row: RefRow): MirrorRef {
  return { name: row.name, kind: row.kind, commitOid: row.commit_oid, checkedAt: row.checked_at };
}

function toFile(row: FileRow): MirroredFile {
  return {
    kind: row.kind,
    hash: storedHash(row.hash, "mirrored file hash"),
    gitOid: row.git_oid,
    size: row.size,
    fetchedBytes: row.fetched_bytes,
    fetchedAt: row.fetched_at,
    lastUsedAt: row.last_used_at,
  };
}
