/**
 * The hub's application layer, one service per aggregate, built once by the composition root
 * (src/server.ts) and called by every transport: the Hugging Face routes and castor's own JSON
 * routes (src/http/hub), the token operation (src/http/hub-token.ts), the admin commands
 * (src/cli, as the operator) — and a mirror's upstream source or a git transport the same way.
 *
 * - `repos`: repositories and refs — who may see or change which repository, what a revision
 *   names (repositories.ts);
 * - `history`: commits and trees by id, tree listings, paths, last commits (histories.ts);
 * - `files`: preupload, the LFS batch and Git LFS objects, commits (payloads whose inline
 *   contents are stored under GC leases once the commit applies), squashes, a file's bytes
 *   inline or Xet, its git blob (files.ts);
 * - `pushes`: git pushes, each ref update one compare-and-set with a Hub commit's rules (git-push.ts);
 * - `tokens`: who a bearer is, hub tokens, the token operation's checks (token-service.ts);
 * - `admin`: storage statistics, sharing, maintenance runs, what the mirror holds (admin.ts).
 *
 * With `mirror`, the upstream hub castor mirrors is a second source of repositories behind these
 * same services (mirrored.ts): found by `repos.find`, its revisions by `repos.resolve`.
 */
import type { FileReader } from "../cas/file-reader.js";
import type { MetadataStore } from "../metadata/store.js";
import type { BlobStore } from "../storage/blob-store.js";
import { AdminService } from "./admin.js";
import { DEFAULT_GIT_LIMITS } from "../config.js";
import { FileService } from "./files.js";
import { HubPushes } from "./git-push.js";
import { InlineBlobs } from "./inline-blobs.js";
import type { FileIngester } from "./lfs-batch.js";
import { HistoryService } from "./histories.js";
import type { MirroredRepositories } from "./mirrored.js";
import { RepositoryService } from "./repositories.js";
import type { StorageStatsService } from "./stats.js";
import { TokenService } from "./token-service.js";

export interface Hub {
  repos: RepositoryService;
  history: HistoryService;
  files: FileService;
  pushes: HubPushes;
  tokens: TokenService;
  admin: AdminService;
}

export interface HubDeps {
  store: MetadataStore;
  blobs: BlobStore;
  /** Xet-stored files, rebuilt from their xorbs for clients that download over plain HTTP. */
  xetFiles: Pick<FileReader, "open">;
  /** Storage statistics and their daily samples (one instance per process: it shares a walk between callers). */
  stats: StorageStatsService;
  /** `config.hubInlineMaxBytes`. */
  inlineMaxBytes: number;
  /** Where commits' inline contents wait on disk until the commit has validated (the data dir's spool). */
  spoolDir: string;
  /** Takes Git LFS basic uploads into the CAS (cas/file-ingest.ts); without it they are refused. */
  lfsFiles?: FileIngester;
  /** Most commits, trees and files one ref update of a push may bring or walk (`config.gitLimits.maxObjects`). */
  pushMaxObjects?: number;
  now?: () => Date;
  /** The upstream hub castor mirrors (`CASTOR_UPSTREAM_URL`): a second source of repositories behind the same services. */
  mirror?: MirroredRepositories;
}

export function createHub(deps: HubDeps): Hub {
  const { store, now, mirror } = deps;
  const repos = new RepositoryService(store, now, mirror);
  const history = new HistoryService(store, mirror);
  return {
    repos,
    history,
    files: new FileService({
      store,
      blobs: deps.blobs,
      xetFiles: deps.xetFiles,
      repos,
      inlineMaxBytes: deps.inlineMaxBytes,
      spoolDir: deps.spoolDir,
      lfsFiles: deps.lfsFiles,
      now,
      mirror,
    }),
    pushes: new HubPushes(repos, store, new InlineBlobs(deps.blobs, store), deps.pushMaxObjects ?? DEFAULT_GIT_LIMITS.maxObjects),
    tokens: new TokenService(store, repos, now),
    admin: new AdminService({ store, repos, history, stats: deps.stats, mirror }),
  };
}

/** What the admin commands use: repositories and tokens, over the metadata store alone. */
export type AdminHub = Pick<Hub, "repos" | "tokens">;

export function createAdminHub(store: MetadataStore, now?: () => Date): AdminHub {
  const repos = new RepositoryService(store, now);
  return { repos, tokens: new TokenService(store, repos, now) };
}

export type { Caller } from "./access.js";
export { ANONYMOUS, OPERATOR } from "./access.js";
export { HubError } from "./errors.js";
export { parseRepoRef, formatRepoRef, repoNameProblem, repoTypeProblem, revisionNameProblem, MAX_REVISION_NAME_LENGTH } from "./names.js";
export { parseExpires, MAX_TOKEN_LIFETIME_MS } from "./expires.js";
export { HUB_TOKEN_PREFIX, generateHubTokenSecret, generateHubTokenId, hashHubTokenSecret, hubTokenState, type HubTokenState } from "./tokens.js";
export { MAX_REPOS_PER_TOKEN, type CreateTokenOptions, type TokenDenial, type TokenGrant, type TokenRequest } from "./token-service.js";
