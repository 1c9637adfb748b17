/**
 * What git's protocol engines (upload-pack.ts, receive-pack.ts) need of a repository, in git's
 * own terms: refs, commits, trees and blobs by object id, and applying a push's ref updates.
 * The engines know nothing of the hub; one adapter (hub-source.ts) implements this over it,
 * and tests implement it in memory.
 */

/** A ref as git names it: `refs/heads/main`, `refs/tags/v1`. */
export interface GitRef {
  name: string;
  oid: string;
}

export interface GitCommit {
  oid: string;
  tree: string;
  parents: readonly string[];
  /** Committer time, seconds since the epoch: the walk takes newer commits first. */
  time: number;
  /** The commit object's bytes (what its id hashes, without the `commit <size>\0` header). */
  body: Buffer;
}

/** git's tree entry modes that castor's histories hold. */
export type GitTreeMode = "100644" | "100755" | "120000" | "40000" | "160000";

export interface GitTreeEntry {
  mode: GitTreeMode;
  name: string;
  oid: string;
  /** A blob's size in bytes, when the source knows it without reading the blob (for `blob:limit` filters). */
  size?: number;
}

export interface GitTree {
  oid: string;
  entries: readonly GitTreeEntry[];
}

/** The objects a fetch reads. */
export interface GitObjectSource {
  /** The ref HEAD points at (`refs/heads/main`). */
  readonly head: string;
  /** Every branch and tag, in a stable order; each points at a commit. */
  refs(): Promise<GitRef[]>;
  commit(oid: string): Promise<GitCommit | null>;
  tree(oid: string): Promise<GitTree | null>;
  /** A blob's bytes; null when no tree this source returned names it. */
  blob(oid: string): Promise<Buffer | null>;
}

// A push's ref updates and objects, as the hub applies them (src/hub/git-push.ts) too.
export type { PushCommand, PushedObject, PushObjects } from "../format/git.js";
import type { PushCommand, PushObjects } from "../format/git.js";

/** What a push writes to. */
export interface GitPushTarget {
  /** Every branch and tag, as `GitObjectSource.refs`. */
  refs(): Promise<GitRef[]>;
  /**
   * Applies each command on its own (one compare-and-set each) with the objects the push
   * brought; returns, per command, null when it was applied or the reason it was refused.
   */
  push(commands: readonly PushCommand[], objects: PushObjects): Promise<(string | null)[]>;
}
