/**
 * A `MetadataStore` made of one object per record family — what both backends are: their
 * `repos` (repositories, revisions), `tokens`, `history` (commits, trees, branch heads), `cas`,
 * `gc` (leases and the collector's deletions), `scan` (whole tables in key order), `migration`
 * (imports) and `stats` (storage-statistics samples and reads) records live in files of their
 * own (sqlite/, postgres/), and this class presents them as the one store the rest of castor
 * uses. A backend adds only `ping` and `close`.
 *
 * The store's methods are the families' own, bound once at construction: `FAMILY_METHODS`
 * names each family's methods, and the type check below it fails the build when a method of a
 * family interface is missing from its list (or a list names one the interface does not have),
 * so adding a method to a family is one line here, not a forwarding method.
 */
import type { CasMetadataStore } from "./cas.js";
import type { GcRecords } from "./gc.js";
import type { MetadataMigration } from "./migration.js";
import type { MirrorRecords } from "./mirror.js";
import type { ScanRecords } from "./scan.js";
import type { StatsMetadata } from "./stats.js";
import type { HistoryRecords, MetadataStore, RepoRecords, TokenRecords } from "./store.js";

export type { HistoryRecords, RepoRecords, TokenRecords } from "./store.js";

export interface RecordFamilies {
  repos: RepoRecords;
  tokens: TokenRecords;
  history: HistoryRecords;
  cas: CasMetadataStore;
  gc: GcRecords;
  scan: ScanRecords;
  migration: MetadataMigration;
  stats: StatsMetadata;
}

type FamilyName = keyof RecordFamilies;

/** Each family's methods: what the composed store takes from it. */
const FAMILY_METHODS = {
  repos: [
    "createRepo",
    "getRepo",
    "getRepoById",
    "listRepos",
    "setRepoPrivate",
    "renameRepo",
    "deleteRepo",
    "createRevision",
    "deleteRevision",
    "getRevision",
    "listRevisions",
  ],
  tokens: ["createHubToken", "findHubTokenBySecretHash", "listHubTokens", "revokeHubToken"],
  history: ["getCommit", "commitOidsWithPrefix", "getTree", "advanceBranch", "updateRef"],
  cas: [
    "putXorb",
    "getXorbs",
    "getChunkTables",
    "getXorbSize",
    "registerShard",
    "getFile",
    "isFileInRepo",
    "isFileInNamedRepo",
    "findFileBySha256",
    "findDedupXorbs",
  ],
  gc: [
    "leaseObjects",
    "deleteFiles",
    "condemnXorbs",
    "condemnInline",
    "deleteDanglingDedupEntries",
    "condemned",
    "release",
    "pruneLeases",
    "deleteHistory",
    "recordMaintenanceRun",
    "lastMaintenanceRuns",
  ],
  scan: ["scanCommits", "scanTrees", "scanXorbs", "scanFiles", "scanFileRepoLinks", "scanSha256Index", "scanShards", "scanDedupEntries"],
  migration: [
    "importRepo",
    "importRevisions",
    "importHubTokens",
    "importCommits",
    "importTrees",
    "importXorbs",
    "importFiles",
    "importFileRepoLinks",
    "importSha256Index",
    "importShards",
    "importDedupEntries",
  ],
  stats: ["recordStatsSample", "listStatsSamples", "xorbTotals", "xorbFootprints", "fileXorbs"],
} as const satisfies { [F in FamilyName]: readonly (keyof RecordFamilies[F])[] };

/** The methods of a family interface that its list leaves out: `never` when every one is listed. */
type Unlisted = { [F in FamilyName]: Exclude<keyof RecordFamilies[F], (typeof FAMILY_METHODS)[F][number]> }[FamilyName];
const everyMethodListed: [Unlisted] extends [never] ? true : { unlisted: Unlisted } = true;
void everyMethodListed;

/** The store's methods, every family's together. */
type FamilyMethods = RepoRecords & TokenRecords & HistoryRecords & CasMetadataStore & GcRecords & ScanRecords & MetadataMigration & StatsMetadata;

/** The family methods the constructor binds (FAMILY_METHODS lists them), added to the class's type. */
export interface RecordFamiliesStore extends FamilyMethods {}

// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: the interface above declares the methods the constructor assigns, from the checked lists.
export abstract class RecordFamiliesStore implements MetadataStore {
  /** The mirror's records, a family of their own that callers reach directly (`store.mirror`). */
  abstract readonly mirror: MirrorRecords;

  protected constructor(families: RecordFamilies) {
    const methods = this as unknown as Record<string, unknown>;
    for (const family of Object.keys(FAMILY_METHODS) as FamilyName[]) {
      const records = families[family] as unknown as Record<string, (...args: unknown[]) => unknown>;
      for (const method of FAMILY_METHODS[family]) {
        if (typeof records[method] !== "function") throw new TypeError(`the ${family} records have no method ${method}`);
        methods[method] = records[method].bind(records);
      }
    }
  }

  abstract ping(): Promise<void>;
  abstract close(): Promise<void>;
}
