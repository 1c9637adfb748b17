/**
 * The import record family (`castor migrate`, src/ops/migrate.ts): what another store's scans
 * (scan.ts) read out page by page in key order, written into this store with the original
 * times.
 *
 * - Scans are positions, not snapshots: rows added behind a cursor meanwhile are missed, which
 *   is why a migration is run (again) once the source server has stopped.
 * - Imports are insert-or-ignore and return how many rows they changed, so a repeated or
 *   interrupted copy completes without duplicates, and a repeat that finds everything in place
 *   reports 0 everywhere. A batch is written in one transaction: all of it or nothing.
 * - Repository ids belong to one store. Rows naming repositories (revisions, token coverage,
 *   commits, trees, file links, the SHA-256 index) are scanned with the source's ids; the
 *   caller maps them to the target's (from `importRepo`) before importing.
 * - Repositories, revisions and tokens are few and have list methods already (`listRepos`,
 *   `listRevisions`, `listHubTokens`); only their imports are here. Histories (commits, trees)
 *   grow with every commit and are scanned like the CAS tables.
 * - Where a record is mutable, the import carries the source's state onto a record already
 *   present, so a migration run again after the source stopped picks up what changed since
 *   the first run: a repository's visibility, a revision's commit (never back to none), a
 *   token's revocation (never undone).
 */
import type { DatedFile, DatedXorb, DedupEntry, FileRepoLink, HubToken, Repo, RepoCommit, RepoTree, Revision, Sha256IndexEntry, ShardRow } from "./records.js";

export type { DatedFile, DatedXorb, DedupEntry, FileRepoLink, RepoCommit, RepoTree, Sha256IndexEntry, ShardRow } from "./records.js";

export interface MetadataMigration {
  /**
   * The repository of that type and name with its original creation time and visibility, or
   * the one already there (then `inserted: false`; its time is kept and its visibility set to
   * the imported one). Unlike `createRepo`, no `main` branch is created: revisions are
   * imported as they are.
   */
  importRepo(repo: Omit<Repo, "id">): Promise<{ repo: Repo; inserted: boolean }>;
  /**
   * Insert by (repository, name), in the given order. A revision already present keeps its
   * kind and time; it takes the imported commit when that is not null and the kinds agree
   * (counted as a change). NotFoundError (nothing stored) for an unknown repository id.
   */
  importRevisions(revisions: readonly Revision[]): Promise<number>;
  /**
   * Insert-or-ignore by id, with the token's repository links, times and revocation. A token
   * already present keeps its record and coverage, except that a revocation the import carries
   * is applied (a revoked token is never made usable again); both count as a change. AlreadyExistsError
   * when another id holds the secret hash; NotFoundError for an unknown repository id; nothing
   * of the batch is stored either way.
   */
  importHubTokens(tokens: readonly HubToken[]): Promise<number>;
  /** Insert-or-ignore by (repository, oid). NotFoundError (nothing stored) for an unknown repository id; InvalidRecordError for an unstorable record. */
  importCommits(commits: readonly RepoCommit[]): Promise<number>;
  /** Insert-or-ignore by (repository, oid). NotFoundError (nothing stored) for an unknown repository id; InvalidRecordError for an unstorable record. */
  importTrees(trees: readonly RepoTree[]): Promise<number>;
  /** Insert-or-ignore by hash (the first record is kept). InvalidRecordError (nothing stored) for an unstorable record. */
  importXorbs(xorbs: readonly DatedXorb[]): Promise<number>;
  /** Insert-or-ignore by hash. InvalidRecordError (nothing stored) for an unstorable record. */
  importFiles(files: readonly DatedFile[]): Promise<number>;
  /** Insert-or-ignore. NotFoundError (nothing stored) when a file or repository is unknown. */
  importFileRepoLinks(links: readonly FileRepoLink[]): Promise<number>;
  /**
   * Sets each (repository, digest) entry to the given file, as the latest registration would;
   * counts only entries that were added or changed. NotFoundError (nothing stored) when a file
   * or repository is unknown.
   */
  importSha256Index(entries: readonly Sha256IndexEntry[]): Promise<number>;
  /** Insert-or-ignore by hash. */
  importShards(shards: readonly ShardRow[]): Promise<number>;
  /**
   * Insert-or-ignore; entries new to the store are ordered after every entry already there,
   * in the order given. So a chunk's entries must come in one call, oldest first (as
   * `scanDedupEntries` (scan.ts) pages them) for the "oldest first" answers to carry over.
   */
  importDedupEntries(entries: readonly DedupEntry[]): Promise<number>;
}
