/**
 * The hub's view of a second source of repositories: the upstream hub castor mirrors (the
 * implementation is src/mirror/source.ts, built by the composition root when
 * `CASTOR_UPSTREAM_URL` is set). The services ask it only about mirrored repositories — `repos`
 * rows flagged `mirror` — and about names castor does not hold itself: a local repository always
 * wins.
 *
 * Reading a mirrored repository's trees needs nothing from here: its snapshots are stored as
 * commits and trees like any repository's. What differs is where a repository and a revision
 * come from, who may read it, its refs and history, and its files' bytes.
 *
 * The CAS's transfer route asks the same source for ranges of upstream xorbs castor does not
 * store under their hash (`UpstreamXorbRange`, declared here where both the route and the
 * mirror may import it).
 */
import type { Readable } from "node:stream";
import type { RepoType } from "../format/repo.js";
import type { CommitRecord, Repo, TreeFileEntry } from "../metadata/records.js";
import type { MirrorStatus } from "../wire/hub.js";
import type { Caller } from "./access.js";
import type { HubError } from "./errors.js";

/**
 * A range of an upstream xorb as castor holds it (a stream of its bytes); `stored`: castor holds
 * the upstream xorb itself now (the ordinary path serves it); `pending`: a fill still runs but has
 * not brought it within the wait; `failed`: the fill meant to bring it failed, for this reason.
 */
export type UpstreamXorbRange = "stored" | "pending" | { body: Readable; length: number } | { failed: string };

export interface MirroredRepositories {
  /** The upstream hub's origin, for messages. */
  readonly origin: string;
  /** The mirrored repository for a name castor does not hold, looked up upstream; null when none. */
  lookup(caller: Caller, type: RepoType, name: string): Promise<Repo | null>;
  /** Whether the caller may read the mirrored repository. */
  canRead(caller: Caller, repo: Repo): boolean;
  /** The refusal of a write to a mirrored repository (403, naming the upstream). */
  readOnly(repo: Repo): HubError;
  /** The commit a revision names. */
  resolve(repo: Repo, revision: string): Promise<CommitRecord>;
  refs(repo: Repo): Promise<{ branches: { name: string; commit: CommitRecord }[]; tags: { name: string; commit: CommitRecord }[] }>;
  /** What `main` pointed at when the upstream was last asked (listings never ask it); null when never. */
  listedHead(repo: Repo): Promise<CommitRecord | null>;
  commitsFrom(repo: Repo, commit: CommitRecord, skip: number, limit: number): Promise<{ commits: CommitRecord[]; more: boolean }>;
  lastCommits(repo: Repo, commit: CommitRecord, paths: string[]): Promise<Map<string, CommitRecord>>;
  /**
   * Bytes `start..end` (inclusive) of a file, held or streamed while it is fetched; `held` (the
   * use counted) for a Xet file castor holds, which reads as any file castor holds.
   */
  read(repo: Repo, commit: CommitRecord, path: string, file: TreeFileEntry, start: number, end: number): Promise<Readable | "held">;
  /** What the mirror holds and saved, for administrators (`GET /api/castor/mirror`). */
  status(): Promise<MirrorStatus>;
}
