/**
 * Git object ids, as `git hash-object` and `git commit` compute them, for the hub's repository
 * histories. A repository's files, trees and commits carry the ids a git client would give
 * them, so that clients caching by commit id (and, later, a git endpoint) see real git objects.
 *
 * An object's id is SHA-1 over `<type> <byte length>\0<body>`:
 * - blob: the file's bytes — or, for a file stored through Xet, the bytes of its Git LFS
 *   pointer file (as on the Hugging Face Hub);
 * - tree: for each entry, in git's order, `<mode> <name>\0<20-byte id>`;
 * - commit: `tree <id>\n`, `parent <id>\n` per parent, `author …\n`, `committer …\n`, a blank
 *   line, the message.
 *
 * Pure: no I/O. Hashing uses node's native SHA-1.
 */
import { createHash } from "node:crypto";

export type GitObjectType = "blob" | "tree" | "commit";

/** 40 lowercase hex digits. */
export const GIT_OID_RE = /^[0-9a-f]{40}$/;

export function isGitOid(text: string): boolean {
  return GIT_OID_RE.test(text);
}

/** git's id of an object of `type` whose body is `body`. */
export function gitObjectId(type: GitObjectType, body: Uint8Array | string): string {
  const bytes = typeof body === "string" ? Buffer.from(body, "utf8") : body;
  return createHash("sha1").update(`${type} ${bytes.length}\0`).update(bytes).digest("hex");
}

/** `git hash-object` of a file's bytes. */
export function gitBlobId(content: Uint8Array | string): string {
  return gitObjectId("blob", content);
}

/**
 * The Git LFS pointer file of content with this SHA-256 and size: what the git history holds
 * in place of a file stored through Xet.
 */
export function lfsPointer(sha256: string, size: number): string {
  return `version https://git-lfs.github.com/spec/v1\noid sha256:${sha256}\nsize ${size}\n`;
}

/** Bytes of `lfsPointer(sha256, size)` (the `pointerSize` tree listings report). */
export function lfsPointerSize(sha256: string, size: number): number {
  return Buffer.byteLength(lfsPointer(sha256, size));
}

export interface GitTreeItem {
  type: "file" | "directory";
  /** One path segment: non-empty, no `/`, no NUL. */
  name: string;
  oid: string;
}

const FILE_MODE = "100644";
const DIRECTORY_MODE = "40000";

/**
 * Git's entry order: byte-wise by name, a directory's name compared as if it ended in `/`
 * (so `a.txt` < `a/` < `a0`). Names are compared as UTF-8 bytes, like git does.
 */
export function compareTreeItems(a: GitTreeItem, b: GitTreeItem): number {
  const left = Buffer.from(a.type === "directory" ? `${a.name}/` : a.name, "utf8");
  const right = Buffer.from(b.type === "directory" ? `${b.name}/` : b.name, "utf8");
  return Buffer.compare(left, right);
}

/** The body of the tree object listing `items` (which must already be in git's order). */
export function gitTreeBody(items: readonly GitTreeItem[]): Buffer {
  const parts: Buffer[] = [];
  for (const item of items) {
    parts.push(Buffer.from(`${item.type === "directory" ? DIRECTORY_MODE : FILE_MODE} ${item.name}\0`, "utf8"));
    parts.push(Buffer.from(item.oid, "hex"));
  }
  return Buffer.concat(parts);
}

/** git's id of the tree listing `items` (in git's order). The empty tree is 4b825dc6…. */
export function gitTreeId(items: readonly GitTreeItem[]): string {
  return gitObjectId("tree", gitTreeBody(items));
}

export interface GitSignature {
  name: string;
  email: string;
  /** Whole seconds since the epoch (UTC). */
  seconds: number;
}

export interface GitCommitFields {
  tree: string;
  parents: readonly string[];
  author: GitSignature;
  committer: GitSignature;
  /** The whole message; git's convention is to end it with a newline. */
  message: string;
}

/** The text of a commit object (its body, without the `commit <length>\0` header). */
export function gitCommitBody(fields: GitCommitFields): string {
  const signature = (s: GitSignature) => `${s.name} <${s.email}> ${s.seconds} +0000`;
  return (
    `tree ${fields.tree}\n` +
    fields.parents.map((parent) => `parent ${parent}\n`).join("") +
    `author ${signature(fields.author)}\n` +
    `committer ${signature(fields.committer)}\n` +
    `\n${fields.message}`
  );
}

/**
 * A commit message from the Hub's `summary` and `description`: the summary line, then the
 * description after a blank line; newline-terminated like `git commit` writes it.
 */
export function commitMessage(summary: string, description: string): string {
  const body = description.trim();
  return `${summary.trim()}\n${body === "" ? "" : `\n${body}\n`}`;
}

/** The git identity castor records for a hub user (git requires a name and an email). */
export function userSignature(user: string, seconds: number): GitSignature {
  return { name: user, email: `${user}@users.castor.invalid`, seconds };
}
