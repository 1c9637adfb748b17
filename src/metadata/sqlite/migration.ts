/**
 * Scans (../scan.ts) of and imports (../migration.ts) into the embedded store: every record
 * family read in primary-key order, keyset-paged, and imported insert-or-ignore, so a repeated or resumed
 * migration adds nothing twice.
 */
import type Database from "better-sqlite3";
import { hashToHex, type Hash } from "../../format/hash.js";
import { checkHash, packFileRecord, packXorbRecord, storedHash, fileRecordOf, xorbRecordOf, type FileRow, type XorbRow } from "../cas.js";
import { checkCommit, encodeTreeEntries, normalizeNamespaces, treeEntriesToBytes } from "../history.js";
import type { DatedFile, DatedXorb, DedupEntry, FileRepoLink, RepoCommit, RepoTree, ScanPage, Sha256IndexEntry, ShardRow } from "../records.js";
import { SCAN_KEYS, scanDedupPage, scanHeldSha256Page, fileRepoLinkOf, pagedScan } from "../scan.js";
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import type { HubToken, Repo, Revision } from "../store.js";
import type { CasStatements } from "./cas.js";
import type { SqliteConnection } from "./connection.js";
import { toCommit, toTree, type CommitRow, type HistoryStatements, type TreeRow } from "./history.js";
import { REPO_ID_AFTER_DELETIONS, toRepo, type RepoRow } from "./repos.js";
import { isConstraint } from "./schema.js";
import type { TokenStatements } from "./tokens.js";

interface DatedXorbRow extends XorbRow {
  created_at: number;
}
interface DatedFileRow extends FileRow {
  hash: Buffer;
  created_at: number;
}

function prepareMigrationStatements(db: Database.Database) {
  return {
    importRepo: db.prepare<[string, string, number, number, number | null], RepoRow>(
      `INSERT INTO repos (id, type, name, created_at, private, mirror_used_at) VALUES (${REPO_ID_AFTER_DELETIONS}, ?, ?, ?, ?, ?)
       ON CONFLICT (type, name) DO NOTHING RETURNING *`,
    ),
    carryVisibility: db.prepare<[number, string, string], RepoRow>("UPDATE repos SET private = ? WHERE type = ? AND name = ? RETURNING *"),
    // A revision present takes the imported commit, unless that is none or the kinds differ.
    importRevision: db.prepare<[number, string, string, number, string | null]>(
      `INSERT INTO revisions (repo_id, name, kind, created_at, commit_oid) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (repo_id, name) DO UPDATE SET commit_oid = excluded.commit_oid
       WHERE excluded.commit_oid IS NOT NULL AND revisions.kind = excluded.kind AND revisions.commit_oid IS NOT excluded.commit_oid`,
    ),
    importToken: db.prepare<[string, string, string, number, number, number | null, number | null, string | null, string]>(
      `INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at, expires_at, revoked_at, owner, namespaces)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
    ),
    scanCommits: db.prepare<[number, string, number], CommitRow>("SELECT * FROM commits WHERE (repo_id, oid) > (?, ?) ORDER BY repo_id, oid LIMIT ?"),
    scanTrees: db.prepare<[number, string, number], TreeRow>("SELECT * FROM trees WHERE (repo_id, oid) > (?, ?) ORDER BY repo_id, oid LIMIT ?"),
    carryRevocation: db.prepare<[number, string]>("UPDATE hub_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"),
    scanXorbs: db.prepare<[Uint8Array, number], DatedXorbRow>(
      "SELECT hash, serialized_length, uncompressed_length, created_at, chunks FROM xorbs WHERE hash > ? ORDER BY hash LIMIT ?",
    ),
    scanFiles: db.prepare<[Uint8Array, number], DatedFileRow>("SELECT hash, size, sha256, created_at, terms FROM files WHERE hash > ? ORDER BY hash LIMIT ?"),
    exportFileRepos: db.prepare<[Uint8Array, number, number], { file_hash: Buffer; repo_id: number }>(
      "SELECT file_hash, repo_id FROM file_repos WHERE (file_hash, repo_id) > (?, ?) ORDER BY file_hash, repo_id LIMIT ?",
    ),
    fileExists: db.prepare<[Uint8Array], { ok: number }>("SELECT 1 AS ok FROM files WHERE hash = ?"),
    exportSha256: db.prepare<[number, Uint8Array, number], { repo_id: number; sha256: Buffer; file_hash: Buffer; held: number }>(
      `SELECT repo_id, sha256, file_hash, EXISTS (SELECT 1 FROM file_repos r WHERE r.file_hash = file_sha256.file_hash AND r.repo_id = file_sha256.repo_id) AS held
       FROM file_sha256 WHERE (repo_id, sha256) > (?, ?) ORDER BY repo_id, sha256 LIMIT ?`,
    ),
    importSha256: db.prepare<[number, Uint8Array, Uint8Array]>(
      `INSERT INTO file_sha256 (repo_id, sha256, file_hash) VALUES (?, ?, ?)
       ON CONFLICT (repo_id, sha256) DO UPDATE SET file_hash = excluded.file_hash
       WHERE file_sha256.file_hash <> excluded.file_hash`,
    ),
    scanShards: db.prepare<[Uint8Array, number], { hash: Buffer; created_at: number }>(
      "SELECT hash, created_at FROM shards WHERE hash > ? ORDER BY hash LIMIT ?",
    ),
    // Within a chunk, the primary key sorts by xorb hash; the few entries of one chunk are sorted by seq on top.
    exportDedup: db.prepare<[Uint8Array, number], { chunk_hash: Buffer; xorb_hash: Buffer }>(
      "SELECT chunk_hash, xorb_hash FROM dedup_chunks WHERE chunk_hash > ? ORDER BY chunk_hash, seq LIMIT ?",
    ),
    exportDedupChunk: db.prepare<[Uint8Array], { chunk_hash: Buffer; xorb_hash: Buffer }>(
      "SELECT chunk_hash, xorb_hash FROM dedup_chunks WHERE chunk_hash = ? ORDER BY seq",
    ),
  };
}

export class SqliteMigrationRecords {
  private readonly sql: ReturnType<typeof prepareMigrationStatements>;
  private readonly db: Database.Database;

  constructor(
    private readonly connection: SqliteConnection,
    /** The other families' statements that imports reuse. */
    private readonly tokens: TokenStatements,
    private readonly history: HistoryStatements,
    private readonly cas: CasStatements,
  ) {
    this.db = connection.db;
    this.sql = prepareMigrationStatements(this.db);
  }

  // -------------------------------------------------------------------------------------------
  async importRepo(repo: Omit<Repo, "id">): Promise<{ repo: Repo; inserted: boolean }> {
    return this.connection.write(() => {
      const isPrivate = repo.private ? 1 : 0;
      // A mirrored repository stays one (its last use starts over at its creation time).
      const row = this.sql.importRepo.get(repo.type, repo.name, repo.createdAt.getTime(), isPrivate, repo.mirror ? repo.createdAt.getTime() : null);
      if (row !== undefined) return { repo: toRepo(row), inserted: true };
      return { repo: toRepo(this.sql.carryVisibility.get(isPrivate, repo.type, repo.name)!), inserted: false };
    });
  }

  async importRevisions(revisions: readonly Revision[]): Promise<number> {
    return this.connection.write(() => {
      return this.importAll(() => {
        let changed = 0;
        for (const revision of revisions) {
          if (!this.cas.repoExists.get(revision.repoId)) throw new NotFoundError(`no repository with id ${revision.repoId}`);
          changed += this.sql.importRevision.run(revision.repoId, revision.name, revision.kind, revision.createdAt.getTime(), revision.commitOid).changes;
        }
        return changed;
      });
    });
  }

  async importHubTokens(tokens: readonly HubToken[]): Promise<number> {
    const namespaces = tokens.map((token) => JSON.stringify(normalizeNamespaces(token.namespaces)));
    return this.connection.write(() => {
      try {
        return this.importAll(() => {
          let changed = 0;
          for (const [i, token] of tokens.entries()) {
            const revokedAt = token.revokedAt === null ? null : token.revokedAt.getTime();
            const inserted = this.sql.importToken.run(
              token.id,
              token.secretHash,
              token.access,
              token.repos === "all" ? 1 : 0,
              token.createdAt.getTime(),
              token.expiresAt === null ? null : token.expiresAt.getTime(),
              revokedAt,
              token.owner,
              namespaces[i],
            ).changes;
            if (inserted === 0) {
              // Present already: its record (and coverage) stays; only a revocation carries over.
              if (revokedAt !== null) changed += this.sql.carryRevocation.run(revokedAt, token.id).changes;
              continue;
            }
            changed++;
            if (token.repos === "all") continue;
            for (const repoId of token.repos) {
              if (!this.cas.repoExists.get(repoId)) throw new NotFoundError(`hub token ${token.id} lists repository id ${repoId}, which does not exist`);
              this.tokens.insertTokenRepo.run(token.id, repoId);
            }
          }
          return changed;
        });
      } catch (err) {
        if (isConstraint(err, "SQLITE_CONSTRAINT_UNIQUE")) throw new AlreadyExistsError("another hub token has the secret hash of an imported one");
        throw err;
      }
    });
  }

  async scanCommits(after: string | null, limit: number): Promise<ScanPage<RepoCommit>> {
    return pagedScan(SCAN_KEYS.commits, after, limit, (key) =>
      this.sql.scanCommits.all(...key, limit).map((row): RepoCommit => ({ repoId: row.repo_id, ...toCommit(row) })),
    );
  }

  async importCommits(commits: readonly RepoCommit[]): Promise<number> {
    commits.forEach(checkCommit);
    return this.connection.write(() => {
      return this.importAll(() => {
        let changed = 0;
        for (const c of commits) {
          if (!this.cas.repoExists.get(c.repoId)) throw new NotFoundError(`no repository with id ${c.repoId}`);
          const parents = JSON.stringify(c.parentOids);
          changed += this.history.insertCommit.run(c.repoId, c.oid, c.treeOid, parents, c.title, c.message, c.author, c.createdAt.getTime(), c.object).changes;
        }
        return changed;
      });
    });
  }

  async scanTrees(after: string | null, limit: number): Promise<ScanPage<RepoTree>> {
    return pagedScan(SCAN_KEYS.trees, after, limit, (key) =>
      this.sql.scanTrees.all(...key, limit).map((row): RepoTree => ({ repoId: row.repo_id, ...toTree(row) })),
    );
  }

  async importTrees(trees: readonly RepoTree[]): Promise<number> {
    const entries = trees.map((tree) => treeEntriesToBytes(encodeTreeEntries(tree)));
    return this.connection.write(() => {
      return this.importAll(() => {
        let changed = 0;
        trees.forEach((tree, i) => {
          if (!this.cas.repoExists.get(tree.repoId)) throw new NotFoundError(`no repository with id ${tree.repoId}`);
          changed += this.history.insertTree.run(tree.repoId, tree.oid, entries[i]).changes;
        });
        return changed;
      });
    });
  }

  async scanXorbs(after: string | null, limit: number): Promise<ScanPage<DatedXorb>> {
    return pagedScan(SCAN_KEYS.xorbs, after, limit, (key) =>
      this.sql.scanXorbs.all(...key, limit).map((row): DatedXorb => ({ ...xorbRecordOf(row), createdAt: new Date(row.created_at) })),
    );
  }

  async importXorbs(xorbs: readonly DatedXorb[]): Promise<number> {
    return this.connection.write(() => {
      // Packed (and so checked) before the transaction: a bad record stores nothing.
      const packed = xorbs.map((xorb) => packXorbRecord(xorb));
      return this.importAll(() => {
        let changed = 0;
        xorbs.forEach((xorb, i) => {
          changed += this.cas.insertXorb.run(xorb.hash, xorb.serializedLength, xorb.uncompressedLength, xorb.createdAt.getTime(), packed[i]).changes;
        });
        return changed;
      });
    });
  }

  async scanFiles(after: string | null, limit: number): Promise<ScanPage<DatedFile>> {
    return pagedScan(SCAN_KEYS.files, after, limit, (key) =>
      this.sql.scanFiles
        .all(...key, limit)
        .map((row): DatedFile => ({ ...fileRecordOf(storedHash(row.hash, "file hash"), row), createdAt: new Date(row.created_at) })),
    );
  }

  async importFiles(files: readonly DatedFile[]): Promise<number> {
    return this.connection.write(() => {
      const packed = files.map((file) => packFileRecord(file));
      return this.importAll(() => {
        let changed = 0;
        files.forEach((file, i) => {
          changed += this.cas.insertFile.run(file.hash, file.size, file.sha256, file.createdAt.getTime(), packed[i]).changes;
        });
        return changed;
      });
    });
  }

  async scanFileRepoLinks(after: string | null, limit: number): Promise<ScanPage<FileRepoLink>> {
    return pagedScan(SCAN_KEYS.fileRepoLinks, after, limit, (key) => this.sql.exportFileRepos.all(...key, limit).map(fileRepoLinkOf));
  }

  async importFileRepoLinks(links: readonly FileRepoLink[]): Promise<number> {
    return this.connection.write(() => {
      return this.importAll(() => {
        let changed = 0;
        for (const link of links) {
          checkHash(link.fileHash, "file hash of a link");
          this.requireFileAndRepo(link.fileHash, link.repoId);
          changed += this.cas.linkFile.run(link.fileHash, link.repoId).changes;
        }
        return changed;
      });
    });
  }

  async scanSha256Index(after: string | null, limit: number): Promise<ScanPage<Sha256IndexEntry>> {
    return scanHeldSha256Page(after, limit, (key) => this.sql.exportSha256.all(...key, limit));
  }

  async importSha256Index(entries: readonly Sha256IndexEntry[]): Promise<number> {
    return this.connection.write(() => {
      return this.importAll(() => {
        let changed = 0;
        for (const entry of entries) {
          checkHash(entry.sha256, "SHA-256 digest");
          checkHash(entry.fileHash, "file hash in the SHA-256 index");
          this.requireFileAndRepo(entry.fileHash, entry.repoId);
          changed += this.sql.importSha256.run(entry.repoId, entry.sha256, entry.fileHash).changes;
        }
        return changed;
      });
    });
  }

  async scanShards(after: string | null, limit: number): Promise<ScanPage<ShardRow>> {
    return pagedScan(SCAN_KEYS.shards, after, limit, (key) =>
      this.sql.scanShards.all(...key, limit).map((row): ShardRow => ({ hash: storedHash(row.hash, "shard hash"), createdAt: new Date(row.created_at) })),
    );
  }

  async importShards(shards: readonly ShardRow[]): Promise<number> {
    return this.connection.write(() => {
      for (const shard of shards) checkHash(shard.hash, "shard hash");
      return this.importAll(() => {
        let changed = 0;
        for (const shard of shards) changed += this.cas.insertShard.run(shard.hash, shard.createdAt.getTime()).changes;
        return changed;
      });
    });
  }

  async scanDedupEntries(after: string | null, limit: number): Promise<ScanPage<DedupEntry>> {
    return scanDedupPage(
      after,
      limit,
      (afterChunk) => this.sql.exportDedup.all(afterChunk, limit),
      (chunkHash) => this.sql.exportDedupChunk.all(chunkHash),
    );
  }

  async importDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    return this.connection.write(() => {
      entries.forEach((entry, i) => {
        checkHash(entry.chunkHash, `chunk hash of dedup entry ${i}`);
        checkHash(entry.xorbHash, `xorb hash of dedup entry ${i}`);
      });
      if (entries.length === 0) return 0;
      return this.importAll(() => {
        // One block of sequence numbers after everything stored, in the given order.
        const firstSeq = this.cas.advanceDedupSeq.get(entries.length)!.next - entries.length;
        let changed = 0;
        entries.forEach((entry, i) => {
          changed += this.cas.insertDedup.run(entry.chunkHash, entry.xorbHash, firstSeq + i).changes;
        });
        return changed;
      });
    });
  }

  /** Runs a batch of import statements in one write transaction. */
  private importAll(write: () => number): number {
    return this.db.transaction(write).immediate();
  }

  private requireFileAndRepo(fileHash: Hash, repoId: number): void {
    if (!this.sql.fileExists.get(fileHash)) throw new NotFoundError(`no file ${hashToHex(fileHash)}: import files before what refers to them`);
    if (!this.cas.repoExists.get(repoId)) throw new NotFoundError(`no repository with id ${repoId}`);
  }
}
