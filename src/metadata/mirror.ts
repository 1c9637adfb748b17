/**
 * The mirror's records (docs/design.md §4c): what castor remembers of the upstream hub it
 * mirrors, besides the repositories themselves (a mirrored repository is a `repos` row with
 * `mirror: true`, whose commits and trees are stored like any other's under the upstream's
 * ids) and the content (Xet files in `files`, other files as inline blobs):
 *
 * - refs: what the upstream said a branch, tag or other revision name points at, and when —
 *   or that it names nothing (`commitOid` null), a "not found" trusted as long as an answer;
 * - mirrored files: the content castor fetched, verified and holds for the mirror, with what it
 *   cost upstream and when it was last used (gc evicts the least recently used; a file a local
 *   tree names is never evicted, being local content as well);
 * - chunk runs: which chunks of which upstream xorbs castor holds, and where in its own xorbs
 *   (a run maps chunks [upstreamStart, upstreamEnd) of an upstream xorb to the same number of
 *   chunks of a castor xorb from `start`), so that a file sharing chunks with one fetched before
 *   fetches only the rest;
 * - fill claims: which node is fetching a file right now, so that nodes sharing a database
 *   fetch and store it once.
 */
import type { Hash } from "../format/hash.js";
import type { RepoType } from "../format/repo.js";
import { storedHash } from "./cas.js";
import type { CommitRecord, Repo, TreeRecord } from "./records.js";

export interface MirrorRef {
  /** The revision as asked: a branch, a tag, or another name the upstream resolves (`HEAD`, a short id). */
  name: string;
  /** `branch` or `tag` as the upstream's refs list it; null for other names, and for names it said it does not know. */
  kind: "branch" | "tag" | null;
  /** The commit it named; null: the upstream said it names nothing. */
  commitOid: string | null;
  checkedAt: Date;
}

export interface ChunkRun {
  upstreamXorb: Hash;
  upstreamStart: number;
  /** Exclusive. */
  upstreamEnd: number;
  /** Where chunk `upstreamStart` starts in the upstream xorb's serialized bytes (the chunks are byte for byte the same in castor's). */
  upstreamOffset: number;
  /** castor's xorb holding the chunks, from chunk `start` on. */
  xorb: Hash;
  start: number;
}

/** A `mirror_chunk_runs` row as both stores read it (the same columns and types on SQLite and PostgreSQL). */
export interface ChunkRunRow {
  upstream_xorb: Buffer;
  upstream_start: number;
  upstream_end: number;
  upstream_offset: number;
  xorb: Buffer;
  start: number;
}

export function chunkRunOfRow(row: ChunkRunRow): ChunkRun {
  return {
    upstreamXorb: storedHash(row.upstream_xorb, "upstream xorb hash"),
    upstreamStart: row.upstream_start,
    upstreamEnd: row.upstream_end,
    upstreamOffset: row.upstream_offset,
    xorb: storedHash(row.xorb, "xorb hash of a chunk run"),
    start: row.start,
  };
}

/** `xet`: a Xet file registered in `files` (hash = Xet file hash); `inline`: an inline blob (hash = SHA-256). */
export type MirroredKind = "xet" | "inline";

export interface MirroredFile {
  kind: MirroredKind;
  hash: Hash;
  /** The git blob id an inline file was verified against (null for Xet files). */
  gitOid: string | null;
  size: number;
  /** Bytes fetched from the upstream to get it (less than `size` when chunks were held already). */
  fetchedBytes: number;
  fetchedAt: Date;
  lastUsedAt: Date;
}

export interface MirroredTotals {
  files: number;
  bytes: number;
  fetchedBytes: number;
}

/** Where a page of `listMirroredFiles` continues: after this file in (last use, kind, hash) order. */
export interface MirroredFileCursor {
  lastUsedAt: Date;
  kind: MirroredKind;
  hash: Hash;
}

export interface MirrorRecords {
  /**
   * A repository row for an upstream repository: `mirror: true`, no revision (refs are
   * `MirrorRef`s). AlreadyExistsError when a repository of that type and name exists.
   */
  createMirroredRepo(type: RepoType, name: string, isPrivate: boolean, now: Date): Promise<Repo>;
  /** Stamps the repository's last use (listed by `castor mirror list`). */
  touchMirroredRepo(repoId: number, now: Date): Promise<void>;
  /** When each mirrored repository was last used, by id. */
  mirroredRepoUses(): Promise<Map<number, Date>>;

  getMirrorRef(repoId: number, name: string): Promise<MirrorRef | null>;
  /** Insert or replace by (repository, name). NotFoundError for an unknown repository. */
  putMirrorRef(repoId: number, ref: MirrorRef): Promise<void>;
  /** The repository's refs, by name. */
  listMirrorRefs(repoId: number): Promise<MirrorRef[]>;

  /**
   * Stores an upstream commit and its trees under the repository (each kept when present, as
   * commits are immutable). InvalidRecordError (nothing stored) for an unstorable record.
   */
  putMirrorSnapshot(repoId: number, commit: CommitRecord, trees: readonly TreeRecord[]): Promise<void>;

  /** The runs recorded for any of `upstreamXorbs` (duplicates fine), in key order. */
  findChunkRuns(upstreamXorbs: readonly Hash[]): Promise<ChunkRun[]>;
  /** Forgets the runs into castor's xorbs `xorbs` (gc removed them); how many went. */
  forgetChunkRuns(xorbs: readonly Hash[]): Promise<number>;
  /** How many fills some node claims and renewed since `since` (a file being fetched somewhere). */
  activeFills(since: Date): Promise<number>;
  /**
   * Records a fetched and verified file with the chunk runs it proved, in one transaction. A
   * file already recorded keeps its `fetchedAt` and `fetchedBytes` and gets the new last use.
   */
  putMirroredFile(file: MirroredFile, runs: readonly ChunkRun[]): Promise<void>;
  getMirroredFile(kind: MirroredKind, hash: Hash): Promise<MirroredFile | null>;
  /** The inline file verified against git blob id `gitOid`, if castor holds one. */
  findMirroredInline(gitOid: string): Promise<MirroredFile | null>;
  touchMirroredFile(kind: MirroredKind, hash: Hash, now: Date): Promise<void>;
  /** Mirrored files least recently used first, after `after`, at most `limit`. */
  listMirroredFiles(after: MirroredFileCursor | null, limit: number): Promise<MirroredFile[]>;
  /** Forgets mirrored files (their content is then gc's to collect); how many rows went. */
  deleteMirroredFiles(keys: readonly { kind: MirroredKind; hash: Hash }[]): Promise<number>;
  mirroredTotals(): Promise<MirroredTotals>;

  /**
   * Claims the fill of `key` for `owner`: true when nobody holds it or the holder's heartbeat is
   * before `staleBefore` (a node that died); false while another owner holds it.
   */
  claimFill(key: string, owner: string, now: Date, staleBefore: Date): Promise<boolean>;
  /** Renews `owner`'s claim; false when it no longer holds it. */
  renewFill(key: string, owner: string, now: Date): Promise<boolean>;
  releaseFill(key: string, owner: string): Promise<void>;
}
