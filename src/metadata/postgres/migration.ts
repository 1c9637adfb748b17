/**
 * Scans (../scan.ts) of and imports (../migration.ts) into the scale-out store: every record
 * family read in primary-key order, keyset-paged, and imported as whole batches with
 * `ON CONFLICT DO NOTHING`, so a repeated or resumed migration adds nothing twice.
 */
import type pg from "pg";
import { hashToHex } from "../../format/hash.js";
import { checkHash, packFileRecord, packXorbRecord, storedHash, fileRecordOf, xorbRecordOf, type FileRow, type XorbRow } from "../cas.js";
import { checkCommit, encodeTreeEntries, normalizeNamespaces } from "../history.js";
import type { DatedFile, DatedXorb, DedupEntry, FileRepoLink, RepoCommit, RepoTree, ScanPage, Sha256IndexEntry, ShardRow } from "../records.js";
import { SCAN_KEYS, scanDedupPage, scanHeldSha256Page, fileRepoLinkOf, pagedScan } from "../scan.js";
import { AlreadyExistsError, NotFoundError } from "../errors.js";
import type { HubToken, Repo, Revision } from "../store.js";
import type { PostgresCasRecords } from "./cas.js";
import { isViolation, PG_FOREIGN_KEY_VIOLATION, PG_UNIQUE_VIOLATION, type PostgresConnection, type NamedStatements } from "./connection.js";
import { COMMIT_COLUMNS, toCommit, toTree, type CommitRow, type TreeRow } from "./history.js";
import { REPO_COLUMNS, toRepo, type RepoRow } from "./repos.js";

interface DatedXorbRow extends XorbRow {
  created_at: Date;
}
interface DatedFileRow extends FileRow {
  hash: Buffer;
  created_at: Date;
}
interface DedupRow {
  chunk_hash: Buffer;
  xorb_hash: Buffer;
}

const MIGRATION_SQL = {
  // Migration (see migration.ts): exports in primary-key order, keyset-paged; imports of whole
  // batches as arrays. Arrays of bytea travel as hex text — slower than the packed form of
  // registrations, and fine for a one-off copy.
  importRepo: `
    INSERT INTO repos (type, name, created_at, private, mirror_used_at) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (type, name) DO NOTHING RETURNING ${REPO_COLUMNS}`,
  carryVisibility: `UPDATE repos SET private = $3 WHERE type = $1 AND name = $2 RETURNING ${REPO_COLUMNS}`,
  // A revision present takes the imported commit, unless that is none or the kinds differ.
  importRevisions: `
    INSERT INTO revisions (repo_id, name, kind, created_at, commit_oid)
    SELECT r.repo_id, r.name, r.kind, r.created_at, r.commit_oid
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[], $5::text[]) WITH ORDINALITY AS r (repo_id, name, kind, created_at, commit_oid, i)
    ORDER BY r.i
    ON CONFLICT (repo_id, name) DO UPDATE SET commit_oid = excluded.commit_oid
    WHERE excluded.commit_oid IS NOT NULL AND revisions.kind = excluded.kind AND revisions.commit_oid IS DISTINCT FROM excluded.commit_oid`,
  importToken: `
    INSERT INTO hub_tokens (id, secret_hash, access, all_repos, created_at, expires_at, revoked_at, owner, namespaces)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text[]) ON CONFLICT (id) DO NOTHING`,
  carryRevocation: `UPDATE hub_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`,
  importTokenRepos: `INSERT INTO hub_token_repos (token_id, repo_id) SELECT $1, unnest($2::bigint[]) ON CONFLICT DO NOTHING`,
  scanCommits: `
    SELECT ${COMMIT_COLUMNS} FROM commits WHERE (repo_id, oid) > ($1::bigint, $2::text COLLATE "C")
    ORDER BY repo_id, oid LIMIT $3`,
  // Parent lists travel as JSON texts: unnest cannot take an array of arrays of different lengths.
  importCommits: `
    INSERT INTO commits (${COMMIT_COLUMNS})
    SELECT c.repo_id, c.oid, c.tree_oid,
      ARRAY(SELECT p.oid FROM json_array_elements_text(c.parents::json) WITH ORDINALITY AS p (oid, i) ORDER BY p.i),
      c.title, c.message, c.author, c.created_at, c.object
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[])
      AS c (repo_id, oid, tree_oid, parents, title, message, author, created_at, object)
    ON CONFLICT DO NOTHING`,
  scanTrees: `
    SELECT repo_id, oid, entries FROM trees WHERE (repo_id, oid) > ($1::bigint, $2::text COLLATE "C")
    ORDER BY repo_id, oid LIMIT $3`,
  importTrees: `
    INSERT INTO trees (repo_id, oid, entries)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[])
    ON CONFLICT DO NOTHING`,
  scanXorbs: `SELECT hash, serialized_length, uncompressed_length, created_at, chunks FROM xorbs WHERE hash > $1 ORDER BY hash LIMIT $2`,
  importXorbs: `
    INSERT INTO xorbs (hash, serialized_length, uncompressed_length, created_at, chunks)
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::timestamptz[], $5::bytea[])
    ON CONFLICT (hash) DO NOTHING`,
  scanFiles: `SELECT hash, size, sha256, created_at, terms FROM files WHERE hash > $1 ORDER BY hash LIMIT $2`,
  importFiles: `
    INSERT INTO files (hash, size, sha256, created_at, terms)
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bytea[], $4::timestamptz[], $5::bytea[])
    ON CONFLICT (hash) DO NOTHING`,
  exportFileRepos: `
    SELECT file_hash, repo_id FROM file_repos WHERE (file_hash, repo_id) > ($1::bytea, $2::bigint)
    ORDER BY file_hash, repo_id LIMIT $3`,
  importFileRepos: `INSERT INTO file_repos (file_hash, repo_id) SELECT * FROM unnest($1::bytea[], $2::bigint[]) ON CONFLICT DO NOTHING`,
  exportSha256: `
    SELECT repo_id, sha256, file_hash, EXISTS (SELECT 1 FROM file_repos r WHERE r.file_hash = file_sha256.file_hash AND r.repo_id = file_sha256.repo_id) AS held
    FROM file_sha256 WHERE (repo_id, sha256) > ($1::bigint, $2::bytea)
    ORDER BY repo_id, sha256 LIMIT $3`,
  // No foreign key says it any more (schema.ts): an entry must name a recorded file.
  missingSha256Files: `SELECT e.file_hash FROM unnest($1::bytea[]) AS e (file_hash) WHERE NOT EXISTS (SELECT 1 FROM files f WHERE f.hash = e.file_hash) LIMIT 1`,
  importSha256: `
    INSERT INTO file_sha256 (repo_id, sha256, file_hash)
    SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[])
    ON CONFLICT (repo_id, sha256) DO UPDATE SET file_hash = excluded.file_hash
    WHERE file_sha256.file_hash <> excluded.file_hash`,
  scanShards: `SELECT hash, created_at FROM shards WHERE hash > $1 ORDER BY hash LIMIT $2`,
  importShards: `INSERT INTO shards (hash, created_at) SELECT * FROM unnest($1::bytea[], $2::timestamptz[]) ON CONFLICT (hash) DO NOTHING`,
  exportDedup: `
    SELECT chunk_hash, xorb_hash FROM dedup_chunks WHERE chunk_hash > $1
    ORDER BY chunk_hash, registration_seq, position LIMIT $2`,
  exportDedupChunk: `SELECT chunk_hash, xorb_hash FROM dedup_chunks WHERE chunk_hash = $1 ORDER BY registration_seq, position`,
} as const;

export class PostgresMigrationRecords {
  private readonly sql: NamedStatements<typeof MIGRATION_SQL>;

  constructor(
    private readonly connection: PostgresConnection,
    /** Dedup entries are imported as a registration writes them. */
    private readonly cas: PostgresCasRecords,
  ) {
    this.sql = connection.statements(MIGRATION_SQL);
  }

  async importRepo(repo: Omit<Repo, "id">): Promise<{ repo: Repo; inserted: boolean }> {
    // A mirrored repository stays one (its last use starts over at its creation time).
    const { rows } = await this.sql.run<RepoRow>("importRepo", [repo.type, repo.name, repo.createdAt, repo.private, repo.mirror ? repo.createdAt : null]);
    if (rows.length > 0) return { repo: toRepo(rows[0]), inserted: true };
    const existing = await this.sql.run<RepoRow>("carryVisibility", [repo.type, repo.name, repo.private]);
    if (existing.rows.length === 0) throw new Error(`repository ${repo.type}:${repo.name} neither inserted nor found (deleted meanwhile?)`);
    return { repo: toRepo(existing.rows[0]), inserted: false };
  }

  async importRevisions(revisions: readonly Revision[]): Promise<number> {
    // ON CONFLICT DO UPDATE may not touch a row twice in one statement: the last revision of a name wins.
    const distinct = [...new Map(revisions.map((r) => [`${r.repoId}:${r.name}`, r])).values()];
    if (distinct.length === 0) return 0;
    return importing(async () => {
      const result = await this.sql.run("importRevisions", [
        distinct.map((r) => r.repoId),
        distinct.map((r) => r.name),
        distinct.map((r) => r.kind),
        distinct.map((r) => r.createdAt),
        distinct.map((r) => r.commitOid),
      ]);
      return result.rowCount ?? 0;
    });
  }

  async importHubTokens(tokens: readonly HubToken[]): Promise<number> {
    if (tokens.length === 0) return 0;
    return importing(() =>
      this.connection.inTransaction(async (client) => {
        let changed = 0;
        for (const token of tokens) {
          const inserted = await this.sql.runOn(client, "importToken", [
            token.id,
            token.secretHash,
            token.access,
            token.repos === "all",
            token.createdAt,
            token.expiresAt,
            token.revokedAt,
            token.owner,
            normalizeNamespaces(token.namespaces),
          ]);
          if (inserted.rowCount === 0) {
            // Present already: its record (and coverage) stays; only a revocation carries over.
            if (token.revokedAt !== null) changed += (await this.sql.runOn(client, "carryRevocation", [token.revokedAt, token.id])).rowCount ?? 0;
            continue;
          }
          changed++;
          if (token.repos !== "all" && token.repos.length > 0) await this.sql.runOn(client, "importTokenRepos", [token.id, token.repos]);
        }
        return changed;
      }),
    );
  }

  async scanCommits(after: string | null, limit: number): Promise<ScanPage<RepoCommit>> {
    return pagedScan(SCAN_KEYS.commits, after, limit, async (key) => {
      const { rows } = await this.sql.run<CommitRow>("scanCommits", [...key, limit]);
      return rows.map((row): RepoCommit => ({ repoId: row.repo_id, ...toCommit(row) }));
    });
  }

  async importCommits(commits: readonly RepoCommit[]): Promise<number> {
    commits.forEach(checkCommit);
    if (commits.length === 0) return 0;
    return importing(async () => {
      const result = await this.sql.run("importCommits", [
        commits.map((c) => c.repoId),
        commits.map((c) => c.oid),
        commits.map((c) => c.treeOid),
        commits.map((c) => JSON.stringify(c.parentOids)),
        commits.map((c) => c.title),
        commits.map((c) => c.message),
        commits.map((c) => c.author),
        commits.map((c) => c.createdAt),
        commits.map((c) => c.object),
      ]);
      return result.rowCount ?? 0;
    });
  }

  async scanTrees(after: string | null, limit: number): Promise<ScanPage<RepoTree>> {
    return pagedScan(SCAN_KEYS.trees, after, limit, async (key) => {
      const { rows } = await this.sql.run<TreeRow>("scanTrees", [...key, limit]);
      return rows.map((row): RepoTree => ({ repoId: row.repo_id, ...toTree(row) }));
    });
  }

  async importTrees(trees: readonly RepoTree[]): Promise<number> {
    const entries = trees.map(encodeTreeEntries);
    if (trees.length === 0) return 0;
    return importing(async () => {
      const result = await this.sql.run("importTrees", [trees.map((t) => t.repoId), trees.map((t) => t.oid), entries]);
      return result.rowCount ?? 0;
    });
  }

  async scanXorbs(after: string | null, limit: number): Promise<ScanPage<DatedXorb>> {
    return pagedScan(SCAN_KEYS.xorbs, after, limit, async (key) => {
      const { rows } = await this.sql.run<DatedXorbRow>("scanXorbs", [...key, limit]);
      return rows.map((row): DatedXorb => ({ ...xorbRecordOf(row), createdAt: row.created_at }));
    });
  }

  async importXorbs(xorbs: readonly DatedXorb[]): Promise<number> {
    const packed = xorbs.map((xorb) => packXorbRecord(xorb));
    if (xorbs.length === 0) return 0;
    const result = await this.sql.run("importXorbs", [
      xorbs.map((x) => x.hash),
      xorbs.map((x) => x.serializedLength),
      xorbs.map((x) => x.uncompressedLength),
      xorbs.map((x) => x.createdAt),
      packed,
    ]);
    return result.rowCount ?? 0;
  }

  async scanFiles(after: string | null, limit: number): Promise<ScanPage<DatedFile>> {
    return pagedScan(SCAN_KEYS.files, after, limit, async (key) => {
      const { rows } = await this.sql.run<DatedFileRow>("scanFiles", [...key, limit]);
      return rows.map((row): DatedFile => ({ ...fileRecordOf(storedHash(row.hash, "file hash"), row), createdAt: row.created_at }));
    });
  }

  async importFiles(files: readonly DatedFile[]): Promise<number> {
    const packed = files.map((file) => packFileRecord(file));
    if (files.length === 0) return 0;
    const result = await this.sql.run("importFiles", [
      files.map((f) => f.hash),
      files.map((f) => f.size),
      files.map((f) => f.sha256),
      files.map((f) => f.createdAt),
      packed,
    ]);
    return result.rowCount ?? 0;
  }

  async scanFileRepoLinks(after: string | null, limit: number): Promise<ScanPage<FileRepoLink>> {
    return pagedScan(SCAN_KEYS.fileRepoLinks, after, limit, async (key) => {
      const { rows } = await this.sql.run<{ file_hash: Buffer; repo_id: number }>("exportFileRepos", [...key, limit]);
      return rows.map(fileRepoLinkOf);
    });
  }

  async importFileRepoLinks(links: readonly FileRepoLink[]): Promise<number> {
    links.forEach((link) => {
      checkHash(link.fileHash, "file hash of a link");
    });
    if (links.length === 0) return 0;
    return importing(async () => {
      const result = await this.sql.run("importFileRepos", [links.map((l) => l.fileHash), links.map((l) => l.repoId)]);
      return result.rowCount ?? 0;
    });
  }

  async scanSha256Index(after: string | null, limit: number): Promise<ScanPage<Sha256IndexEntry>> {
    return scanHeldSha256Page(after, limit, async (key) => {
      return (await this.sql.run<{ repo_id: number; sha256: Buffer; file_hash: Buffer; held: boolean }>("exportSha256", [...key, limit])).rows;
    });
  }

  async importSha256Index(entries: readonly Sha256IndexEntry[]): Promise<number> {
    // ON CONFLICT DO UPDATE may not touch a row twice in one statement: the last entry of a key wins.
    const byKey = new Map<string, Sha256IndexEntry>();
    for (const entry of entries) {
      checkHash(entry.sha256, "SHA-256 digest");
      checkHash(entry.fileHash, "file hash in the SHA-256 index");
      byKey.set(`${entry.repoId}:${hashToHex(entry.sha256)}`, entry);
    }
    if (byKey.size === 0) return 0;
    const distinct = [...byKey.values()];
    const missing = (await this.sql.run<{ file_hash: Buffer }>("missingSha256Files", [distinct.map((e) => e.fileHash)])).rows[0];
    if (missing !== undefined) {
      throw new NotFoundError(
        `an imported SHA-256 entry names the file ${hashToHex(new Uint8Array(missing.file_hash))}, which the store lacks: import files before what refers to them`,
      );
    }
    return importing(async () => {
      const result = await this.sql.run("importSha256", [distinct.map((e) => e.repoId), distinct.map((e) => e.sha256), distinct.map((e) => e.fileHash)]);
      return result.rowCount ?? 0;
    });
  }

  async scanShards(after: string | null, limit: number): Promise<ScanPage<ShardRow>> {
    return pagedScan(SCAN_KEYS.shards, after, limit, async (key) => {
      const { rows } = await this.sql.run<{ hash: Buffer; created_at: Date }>("scanShards", [...key, limit]);
      return rows.map((row): ShardRow => ({ hash: storedHash(row.hash, "shard hash"), createdAt: row.created_at }));
    });
  }

  async importShards(shards: readonly ShardRow[]): Promise<number> {
    shards.forEach((shard) => {
      checkHash(shard.hash, "shard hash");
    });
    if (shards.length === 0) return 0;
    const result = await this.sql.run("importShards", [shards.map((s) => s.hash), shards.map((s) => s.createdAt)]);
    return result.rowCount ?? 0;
  }

  async scanDedupEntries(after: string | null, limit: number): Promise<ScanPage<DedupEntry>> {
    return scanDedupPage(
      after,
      limit,
      async (afterChunk) => (await this.sql.run<DedupRow>("exportDedup", [afterChunk, limit])).rows,
      async (chunkHash) => (await this.sql.run<DedupRow>("exportDedupChunk", [chunkHash])).rows,
    );
  }

  async importDedupEntries(entries: readonly DedupEntry[]): Promise<number> {
    return this.cas.insertDedupEntries(entries);
  }
}

/**
 * Runs an import, turning a foreign-key violation (a row naming a file or repository the store
 * lacks) into NotFoundError and a taken secret hash into AlreadyExistsError.
 */
async function importing<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (err) {
    if (isViolation(err, PG_FOREIGN_KEY_VIOLATION)) {
      throw new NotFoundError(
        `an imported row refers to something the store lacks (${(err as pg.DatabaseError).detail ?? (err as Error).message}): import repositories and files before what refers to them`,
      );
    }
    if (isViolation(err, PG_UNIQUE_VIOLATION)) throw new AlreadyExistsError("another hub token has the secret hash of an imported one");
    throw err;
  }
}
