/**
 * Keeping `.gitattributes` covering the files stored through Xet, as the Hugging Face Hub
 * does. In git, a Xet-stored file is its Git LFS pointer; git and git-lfs turn a pointer back
 * into the file (on checkout, and in `git lfs pull`) only where `.gitattributes` gives the path
 * `filter=lfs`. Without it a clone keeps the pointer text (recent git-lfs versions do not even
 * download it), or shows the downloaded file as modified. So when a commit writes a Xet file
 * whose path the root `.gitattributes` does not cover, the hub appends a line for it to that
 * file in the same commit, as the Hub does for API uploads of large files. Commits already made
 * are never rewritten, and pushed commits are kept as pushed (their ids are the pusher's).
 *
 * Patterns follow gitattributes(5): a pattern without `/` matches a file name at any depth,
 * one with `/` the path from the root; `*`, `?`, `[...]` (with POSIX classes) and `**`; the last
 * matching line that sets or unsets `filter` decides. Only the root file is read: a nested
 * `.gitattributes` that already covers a path just makes the appended line redundant.
 */
import picomatch from "picomatch";

/** The attributes `git lfs track` writes, and the Hub's `.gitattributes` lines carry. */
export const LFS_ATTRIBUTES = "filter=lfs diff=lfs merge=lfs -text";

export const GITATTRIBUTES_PATH = ".gitattributes";

interface FilterRule {
  matches: (path: string) => boolean;
  /** Whether the line leaves `filter` set to `lfs` (false: set to another filter, or unset). */
  lfs: boolean;
}

/** The pattern of a line, unquoted when git's C-style quotes were used; null for none. */
function patternOf(line: string): { pattern: string; rest: string } | null {
  if (line.startsWith('"')) {
    const end = line.indexOf('"', 1);
    if (end < 0) return null;
    return { pattern: line.slice(1, end).replace(/\\(.)/g, "$1"), rest: line.slice(end + 1) };
  }
  const space = line.search(/\s/);
  return space < 0 ? { pattern: line, rest: "" } : { pattern: line.slice(0, space), rest: line.slice(space) };
}

/** The lines of `text` that set or unset `filter`, in order. */
function filterRules(text: string): FilterRule[] {
  const rules: FilterRule[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const parsed = patternOf(line);
    // Negative patterns are forbidden in attributes files, and a pattern ending in `/` matches no file.
    if (parsed === null || parsed.pattern.startsWith("!") || parsed.pattern.endsWith("/")) continue;
    let lfs: boolean | null = null;
    for (const attribute of parsed.rest.split(/\s+/)) {
      if (attribute.startsWith("filter=")) lfs = attribute === "filter=lfs";
      else if (attribute === "-filter" || attribute === "!filter" || attribute === "filter") lfs = false;
    }
    if (lfs === null) continue;
    const anchored = parsed.pattern.includes("/");
    const pattern = parsed.pattern.startsWith("/") ? parsed.pattern.slice(1) : parsed.pattern;
    const match = picomatch(pattern, { dot: true, posix: true, noextglob: true, nobrace: true });
    rules.push({ lfs, matches: anchored ? match : (path) => match(path.slice(path.lastIndexOf("/") + 1)) });
  }
  return rules;
}

/** Whether `.gitattributes` text gives `path` (from the repository root) `filter=lfs`. */
export function coversWithLfs(text: string, path: string): boolean {
  let lfs = false;
  for (const rule of filterRules(text)) if (rule.matches(path)) lfs = rule.lfs;
  return lfs;
}

/**
 * The pattern `git lfs track` (and the Hub) writes for `path`: the path itself, glob characters
 * behind a backslash, white space as `[[:space:]]` so that the line's first field is the whole
 * path. Like theirs, a root file's pattern has no `/` and so also matches that name in folders.
 */
export function literalPattern(path: string): string {
  const escaped = path.replace(/[\\*?[\]]/g, "\\$&").replace(/\s/g, "[[:space:]]");
  // A leading `#` would make a comment, a leading `!` a negation.
  return /^[#!]/.test(escaped) ? `\\${escaped}` : escaped;
}

/**
 * `.gitattributes` text (`null`: no such file yet) with a line appended for each of `paths`
 * it does not already give `filter=lfs`; null when it covers all of them already.
 */
export function coverWithLfs(text: string | null, paths: readonly string[]): string | null {
  const current = text ?? "";
  const rules = filterRules(current);
  const covered = (path: string) => {
    let lfs = false;
    for (const rule of rules) if (rule.matches(path)) lfs = rule.lfs;
    return lfs;
  };
  const missing = [...new Set(paths)].filter((path) => !covered(path));
  if (missing.length === 0) return null;
  const lines = missing.map((path) => `${literalPattern(path)} ${LFS_ATTRIBUTES}\n`).join("");
  return current === "" || current.endsWith("\n") ? `${current}${lines}` : `${current}\n${lines}`;
}
