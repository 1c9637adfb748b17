/**
 * Paths of files inside a repository, and what a commit holds at a path.
 *
 * Two rules. Any path castor looks up, lists or deletes follows format/repo.ts's (`requirePath`):
 * `/`-separated, bounded, no empty, `.`, `..` or `.git` segment, no NUL. A path a commit adds a
 * file at (`requireNewPath`, for every transport that writes files) must also be safe to write
 * on the disks of the clients that download it — `hf download`, `snapshot_download` and git
 * write these names on Windows, macOS and Linux — so it may not hold:
 *
 * - a backslash: Windows reads it as a folder separator (`..\x` climbs out of the download folder);
 * - a segment starting with a drive letter and `:` (`C:x`): Windows reads it as another drive;
 * - control characters (U+0000–U+001F, U+007F–U+009F): a newline splits listings and scripts;
 * - characters that reorder or hide text: the bidirectional controls U+061C, U+200E, U+200F,
 *   U+202A–U+202E and U+2066–U+2069, and the invisible U+200B, U+2060–U+2064 and U+FEFF
 *   (`evil\u202Etxt.exe` shows as `evilexe.txt`); the joiners U+200C and U+200D are allowed,
 *   Persian and Indic words and emoji need them;
 * - a lone UTF-16 surrogate (not Unicode text at all);
 * - a segment that starts or ends with white space, or ends with `.`: Windows drops trailing
 *   dots and spaces (`a.` and `a` are one file there), and a name of spaces shows as nothing;
 * - a percent-encoded `.`, `/`, `\` or `%` (`%2e%2e/x`): a client or proxy that decodes the
 *   name once more reads a different path;
 * - a segment git refuses to check out on NTFS or HFS+ (core.protectNTFS, core.protectHFS):
 *   `.git` in any case, `git~1` (its short name on NTFS), or `.git` with characters HFS+ ignores.
 *
 * And within a folder, no two names may differ only in letter case or Unicode normalization
 * (`café` composed, NFC, and decomposed, NFD): macOS and Windows disks hold one file for both,
 * so a download would silently keep one of them (`nameCollisionKey`, checked where commits are
 * applied, history.ts).
 */
import type { MetadataStore, TreeEntry, TreeFileEntry, TreeRecord } from "../metadata/store.js";
import { repoPathProblem } from "../format/repo.js";
import { HubError } from "./errors.js";

/** The path's segments; HubError 400 for an invalid path. */
export function requirePath(path: string): string[] {
  const problem = repoPathProblem(path);
  if (problem !== null) throw new HubError(400, `invalid path ${quotePath(path)}: ${problem}`);
  return path.split("/");
}

/** The segments of a path a commit adds a file at; HubError 400 naming the rule it breaks. */
export function requireNewPath(path: string): string[] {
  const problem = repoPathProblem(path) ?? newPathProblem(path);
  if (problem !== null) throw new HubError(400, `invalid path ${quotePath(path)}: ${problem}`);
  return path.split("/");
}

/** Why a file may not be added at `path` though it is a valid path (see the file comment), or null. */
export function newPathProblem(path: string): string | null {
  if (LONE_SURROGATE.test(path)) return "it is not valid Unicode (a lone UTF-16 surrogate)";
  if (path.includes("\\")) return "it contains a backslash, which Windows reads as a folder separator";
  const control = CONTROL.exec(path);
  if (control !== null) return `it contains the control character ${codePoint(control[0])}, which breaks listings and scripts on clients`;
  const hidden = HIDDEN.exec(path);
  if (hidden !== null) return `it contains ${codePoint(hidden[0])}, an invisible character that reorders or hides what a name shows`;
  if (ENCODED_SEPARATOR.test(path)) {
    return "it contains a percent-encoded '.', '/', '\\' or '%', which a client or proxy that decodes it again reads as a different path";
  }
  for (const segment of path.split("/")) {
    if (/^\s|\s$/u.test(segment)) return `the part ${quotePath(segment)} starts or ends with white space, which disks and listings drop or hide`;
    if (segment.endsWith(".")) return `the part ${quotePath(segment)} ends with '.', which Windows drops (it would be the same file as without it)`;
    if (DRIVE.test(segment)) return `the part ${quotePath(segment)} starts with a drive letter and ':', which Windows reads as another drive`;
    const bare = segment.replace(HFS_IGNORED, "").toLowerCase();
    if (bare === ".git" || bare === "git~1") return `the part ${quotePath(segment)} names git's own folder on Windows or macOS disks`;
  }
  return null;
}

/**
 * What two names of one folder share when a case-insensitive, normalization-insensitive disk
 * (macOS, Windows) would store them as one file: the name in NFC, lower-cased.
 */
export function nameCollisionKey(name: string): string {
  return name.normalize("NFC").toLowerCase().normalize("NFC");
}

/** The refusal of a commit adding `name` to `folder` (a path, "" for the root) next to `existing`, which differs only in case or normalization. */
export function nameCollision(folder: string, name: string, existing: string): HubError {
  const where = folder === "" ? "the repository's root" : `the folder ${quotePath(folder)}`;
  return new HubError(
    400,
    `cannot add ${quotePath(name)} to ${where}: it holds ${quotePath(existing)}, a name that differs only in letter case or Unicode normalization, and macOS and Windows disks keep one file for both`,
  );
}

/** Quotes a path for a message, bounded, with invisible and control characters shown as code points. */
export function quotePath(path: string): string {
  const shown = path.length > 100 ? `${path.slice(0, 100)}…` : path;
  return JSON.stringify(shown).replace(/[\p{Cc}\p{Cf}]/gu, (c) => `\\u{${c.codePointAt(0)!.toString(16).toUpperCase()}}`);
}

/** Without the `u` flag, so the pattern sees UTF-16 code units. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/u;
const HIDDEN = /[\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/u;
/** What HFS+ ignores when it compares names (git's is_hfs_dotgit list), so `.g\u200cit` is `.git` there. */
const HFS_IGNORED = /[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]/gu;
const ENCODED_SEPARATOR = /%(2e|2f|5c|25)/i;
const DRIVE = /^[a-z]:/i;

function codePoint(character: string): string {
  return `U+${character.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
}

/** Loads a repository's trees, each once per instance (one request's worth of lookups). */
export class TreeReader {
  private readonly loaded = new Map<string, Promise<TreeRecord>>();

  constructor(
    private readonly store: Pick<MetadataStore, "getTree">,
    private readonly repoId: number,
  ) {}

  tree(oid: string): Promise<TreeRecord> {
    let tree = this.loaded.get(oid);
    if (tree === undefined) {
      tree = this.store.getTree(this.repoId, oid).then((found) => {
        // Trees are written with the commit that names them, in one transaction: a missing one is damage.
        if (found === null) throw new Error(`tree ${oid} of repository #${this.repoId} is missing from the metadata store`);
        return found;
      });
      this.loaded.set(oid, tree);
    }
    return tree;
  }

  /**
   * The entry at `path` below the root tree `rootOid`, or null when nothing is there. The
   * empty path is the root directory itself.
   */
  async entryAt(rootOid: string, path: string): Promise<TreeEntry | { type: "directory"; name: ""; oid: string } | null> {
    if (path === "") return { type: "directory", name: "", oid: rootOid };
    let tree = await this.tree(rootOid);
    const segments = path.split("/");
    for (let i = 0; i < segments.length; i++) {
      const entry = tree.entries.find((e) => e.name === segments[i]);
      if (entry === undefined) return null;
      if (i === segments.length - 1) return entry;
      if (entry.type !== "directory") return null;
      tree = await this.tree(entry.oid);
    }
    return null;
  }

  /** The file at `path`, or null when there is none (or a directory is there). */
  async fileAt(rootOid: string, path: string): Promise<TreeFileEntry | null> {
    const entry = await this.entryAt(rootOid, path);
    return entry !== null && entry.type === "file" ? entry : null;
  }

  /**
   * Every entry below the tree `oid`, depth first in git's order, a directory before its
   * contents; paths are prefixed with `prefix` (the tree's own path, or "").
   */
  async *walk(oid: string, prefix: string, recursive: boolean): AsyncGenerator<{ path: string; entry: TreeEntry }> {
    const tree = await this.tree(oid);
    for (const entry of tree.entries) {
      const path = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
      yield { path, entry };
      if (recursive && entry.type === "directory") yield* this.walk(entry.oid, path, true);
    }
  }
}
