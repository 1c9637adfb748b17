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

// --- git objects as bytes (the git transport reads and writes them) -----------------------------

/** A tree entry as git writes it: its mode in git's octal spelling (`100644`, `40000`, …), name, id. */
export interface GitTreeObjectEntry {
  mode: string;
  name: string;
  oid: string;
}

/** The body of a tree object listing `entries` (in git's order) with their own modes. */
export function encodeTreeObject(entries: readonly GitTreeObjectEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const entry of entries) {
    parts.push(Buffer.from(`${entry.mode} ${entry.name}\0`, "utf8"), Buffer.from(entry.oid, "hex"));
  }
  return Buffer.concat(parts);
}

/** A git object that cannot be read as its type says: `what` names it for the message. */
export class GitObjectError extends Error {
  override readonly name = "GitObjectError";
}

/**
 * The entries of a tree object's body, as written (order and modes are not judged here).
 * GitObjectError for bytes that are not a sequence of `<octal mode> <name>\0<20-byte id>`
 * with a non-empty, valid UTF-8 name.
 */
export function parseTreeObject(body: Uint8Array): GitTreeObjectEntry[] {
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const entries: GitTreeObjectEntry[] = [];
  let pos = 0;
  while (pos < bytes.length) {
    const space = bytes.indexOf(0x20, pos);
    if (space < 0 || space === pos || space - pos > 6) throw new GitObjectError("a tree entry has no mode");
    const mode = bytes.toString("latin1", pos, space);
    if (!/^[0-7]+$/.test(mode)) throw new GitObjectError(`a tree entry has the mode ${JSON.stringify(mode)}`);
    const nul = bytes.indexOf(0, space + 1);
    if (nul < 0 || nul === space + 1) throw new GitObjectError("a tree entry has no name");
    const nameBytes = bytes.subarray(space + 1, nul);
    const name = nameBytes.toString("utf8");
    if (!Buffer.from(name, "utf8").equals(nameBytes)) throw new GitObjectError("a tree entry's name is not valid UTF-8");
    if (nul + 21 > bytes.length) throw new GitObjectError(`the tree entry ${JSON.stringify(name)} is cut short`);
    entries.push({ mode, name, oid: bytes.toString("hex", nul + 1, nul + 21) });
    pos = nul + 21;
  }
  return entries;
}

export interface GitIdentity {
  name: string;
  email: string;
  seconds: number;
  /** `+0000`, `-0700`, … as written. */
  timezone: string;
}

export interface ParsedCommit {
  tree: string;
  parents: string[];
  author: GitIdentity;
  committer: GitIdentity;
  /** Everything after the headers' blank line. */
  message: string;
  /** The `encoding` header when present (a message in another encoding than UTF-8). */
  encoding: string | null;
}

const IDENTITY = /^(.*) <([^<>]*)> (\d{1,15}) ([+-]\d{4})$/;

function identityOf(value: string, header: string): GitIdentity {
  const match = IDENTITY.exec(value);
  if (match === null) throw new GitObjectError(`the commit's ${header} line is not "name <email> seconds timezone"`);
  return { name: match[1], email: match[2], seconds: Number(match[3]), timezone: match[4] };
}

/**
 * The fields of a commit object's text. GitObjectError unless it starts with `tree`, then
 * `parent` lines, `author`, `committer` (other headers, such as `gpgsig` with its continuation
 * lines, may follow), a blank line and the message.
 */
export function parseCommitObject(text: string): ParsedCommit {
  const end = text.indexOf("\n\n");
  const head = end < 0 ? text : text.slice(0, end);
  const lines = head.split("\n");
  let at = 0;
  const header = (name: string): string | null => {
    const line = lines[at];
    if (line === undefined || !line.startsWith(`${name} `)) return null;
    at++;
    return line.slice(name.length + 1);
  };
  const tree = header("tree");
  if (tree === null || !GIT_OID_RE.test(tree)) throw new GitObjectError("the commit does not start with a tree line");
  const parents: string[] = [];
  for (let parent = header("parent"); parent !== null; parent = header("parent")) {
    if (!GIT_OID_RE.test(parent)) throw new GitObjectError(`the commit names the parent ${JSON.stringify(parent.slice(0, 50))}`);
    parents.push(parent);
  }
  const author = header("author");
  if (author === null) throw new GitObjectError("the commit has no author line after its tree and parents");
  const committer = header("committer");
  if (committer === null) throw new GitObjectError("the commit has no committer line after its author");
  let encoding: string | null = null;
  for (; at < lines.length; at++) if (lines[at].startsWith("encoding ")) encoding = lines[at].slice("encoding ".length);
  return {
    tree,
    parents,
    author: identityOf(author, "author"),
    committer: identityOf(committer, "committer"),
    message: end < 0 ? "" : text.slice(end + 2),
    encoding,
  };
}

/** A ref update of a push (`old` null: create; `new` null: delete). */
export interface PushCommand {
  ref: string;
  old: string | null;
  new: string | null;
}

/** An object of a push's pack. */
export interface PushedObject {
  type: "commit" | "tree" | "blob" | "tag";
  data: Buffer;
}

/** The objects a push's pack brought, by id (already checked to hash to their ids). */
export interface PushObjects {
  get(oid: string): Promise<PushedObject | null>;
}
