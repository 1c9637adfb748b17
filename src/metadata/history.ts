/**
 * The codecs of the hub's history records (store.ts: commits, trees, token namespaces), shared
 * by both backends so SQLite and PostgreSQL store the same text.
 *
 * A tree's entries are one JSON text of compact arrays, in the tree's order:
 *
 *   ["d", name, oid]                          a directory (a git tree)
 *   ["f", name, oid, size, sha256, xetHash]   a file; xetHash null for inline content
 *
 * Arrays instead of objects keep the text about a quarter smaller and its parse faster: a
 * 10,000-entry tree is ~1.8 MB and parses in about 2 ms. The text is pure ASCII (other
 * characters are written as JSON \u escapes), so a backend that reads it as bytes can turn
 * them into a string without UTF-8 decoding, which costs more than the parse (~7 ms for
 * 1.8 MB in Node 20): SQLite keeps it as a BLOB (`treeEntriesFromBytes`).
 *
 * Writes check only what keeps a record decodable (field types, sizes that are integers) and
 * throw InvalidRecordError otherwise, storing nothing; whether oids are true is the hub's job.
 * A stored text that no longer decodes makes reads throw CorruptRecordError.
 */
import { isAscii } from "node:buffer";
import { CorruptRecordError, InvalidRecordError } from "./errors.js";
import type { CommitRecord, TreeEntry, TreeRecord } from "./records.js";

type StoredEntry = ["d", string, string] | ["f", string, string, number, string, string | null];

/** The (ASCII) JSON text a tree's entries are stored as. InvalidRecordError for an entry that is not one. */
export function encodeTreeEntries(tree: TreeRecord): string {
  if (typeof tree.oid !== "string") throw new InvalidRecordError(`a tree's oid must be a string, got ${typeof tree.oid}`);
  if (!Array.isArray(tree.entries)) throw new InvalidRecordError(`the entries of tree ${tree.oid} must be an array`);
  const stored = tree.entries.map((entry, i): StoredEntry => {
    const bad = (why: string) => new InvalidRecordError(`entry ${i} of tree ${tree.oid} ${why}`);
    if (typeof entry?.name !== "string" || typeof entry.oid !== "string") throw bad("needs a string name and oid");
    if (entry.type === "directory") return ["d", entry.name, entry.oid];
    if (entry.type !== "file") throw bad(`has type ${JSON.stringify(String((entry as { type: unknown }).type))}, not "directory" or "file"`);
    if (!Number.isSafeInteger(entry.size) || entry.size < 0) throw bad(`has size ${String(entry.size)}, not a non-negative integer`);
    if (typeof entry.sha256 !== "string") throw bad("needs a string sha256");
    if (entry.xetHash !== null && typeof entry.xetHash !== "string") throw bad("needs a string or null xetHash");
    return ["f", entry.name, entry.oid, entry.size, entry.sha256, entry.xetHash];
  });
  return JSON.stringify(stored).replace(NON_ASCII, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** Every UTF-16 code unit beyond ASCII (a pair's halves one at a time; JSON.parse joins them again). */
const NON_ASCII = /[\u0080-\uffff]/g;

/** The stored bytes of `encodeTreeEntries`'s text. */
export function treeEntriesToBytes(text: string): Buffer {
  return Buffer.from(text, "latin1");
}

/** The text of stored bytes: ASCII only, so read as Latin-1 without UTF-8 decoding; CorruptRecordError otherwise. */
export function treeEntriesFromBytes(bytes: Uint8Array, repoId: number, oid: string): string {
  if (!isAscii(bytes)) throw corruptTree(repoId, oid);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("latin1");
}

function corruptTree(repoId: number, oid: string): CorruptRecordError {
  return new CorruptRecordError(
    `the stored entries of tree ${oid} in repository #${repoId} do not decode: the metadata database is damaged (restore it from a backup)`,
  );
}

/** The entries of a stored tree; CorruptRecordError when `text` is not what `encodeTreeEntries` writes. */
export function decodeTreeEntries(text: string, repoId: number, oid: string): TreeEntry[] {
  const corrupt = () => corruptTree(repoId, oid);
  let stored: unknown;
  try {
    stored = JSON.parse(text);
  } catch {
    throw corrupt();
  }
  if (!Array.isArray(stored)) throw corrupt();
  const entries = new Array<TreeEntry>(stored.length);
  for (let i = 0; i < stored.length; i++) {
    const e: unknown = stored[i];
    if (!Array.isArray(e) || typeof e[1] !== "string" || typeof e[2] !== "string") throw corrupt();
    if (e[0] === "d" && e.length === 3) {
      entries[i] = { type: "directory", name: e[1], oid: e[2] };
    } else if (e[0] === "f" && e.length === 6 && Number.isSafeInteger(e[3]) && typeof e[4] === "string" && (e[5] === null || typeof e[5] === "string")) {
      entries[i] = { type: "file", name: e[1], oid: e[2], size: e[3] as number, sha256: e[4], xetHash: e[5] as string | null };
    } else {
      throw corrupt();
    }
  }
  return entries;
}

/** InvalidRecordError unless every field of `commit` has its type (and the date is a date). */
export function checkCommit(commit: CommitRecord): void {
  const bad = (why: string) => new InvalidRecordError(`commit ${String(commit?.oid)} ${why}`);
  for (const field of ["oid", "treeOid", "title", "message", "author", "object"] as const) {
    if (typeof commit?.[field] !== "string") throw bad(`needs a string ${field}`);
  }
  if (!Array.isArray(commit.parentOids) || !commit.parentOids.every((oid) => typeof oid === "string")) throw bad("needs parentOids as an array of strings");
  if (!(commit.createdAt instanceof Date) || Number.isNaN(commit.createdAt.getTime())) throw bad("needs a valid createdAt date");
}

/** The trees of one write, each oid once (the first record of an oid is kept, as the store keeps the first). */
export function distinctTrees(trees: readonly TreeRecord[]): TreeRecord[] {
  const byOid = new Map<string, TreeRecord>();
  for (const tree of trees) if (!byOid.has(tree.oid)) byOid.set(tree.oid, tree);
  return [...byOid.values()];
}

/** A list of strings stored as JSON text (SQLite keeps parent oids and token namespaces so). */
export function decodeStringList(text: string, what: string): string[] {
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch {
    list = null;
  }
  if (!Array.isArray(list) || !list.every((item) => typeof item === "string")) {
    throw new CorruptRecordError(`the stored ${what} do not decode: the metadata database is damaged (restore it from a backup)`);
  }
  return list;
}

/** A token's namespaces as stored and returned: ascending (UTF-16 code unit order), no duplicates. */
export function normalizeNamespaces(namespaces: readonly string[] | undefined): string[] {
  if (namespaces === undefined) return [];
  if (!Array.isArray(namespaces) || !namespaces.every((ns) => typeof ns === "string")) {
    throw new InvalidRecordError("a token's namespaces must be an array of strings");
  }
  return [...new Set(namespaces)].sort();
}
