/**
 * Repository types, as hub paths (`/api/{type}s/…`), CAS tokens and repository references
 * (`TYPE:NAMESPACE/NAME`) name them, and the paths of files inside a repository. Here so that
 * the server and the client share one definition (the client may import only the format layer).
 */
export const REPO_TYPES = ["model", "dataset", "space"] as const;
export type RepoType = (typeof REPO_TYPES)[number];

/** Longest path of a file in a repository, and longest segment of it, in UTF-8 bytes. */
export const MAX_REPO_PATH_BYTES = 4096;
export const MAX_REPO_PATH_SEGMENT_BYTES = 255;

/**
 * Why `path` cannot name a file in a repository, or null when it can: `/`-separated segments,
 * each non-empty, not `.` or `..` and without NUL; `.git` is refused as a segment (git itself
 * would not check such a tree out). Bounded, so a request cannot make the hub walk or store
 * unbounded names.
 */
export function repoPathProblem(path: string): string | null {
  if (path === "") return "the path is empty";
  if (Buffer.byteLength(path) > MAX_REPO_PATH_BYTES) return `the path is longer than ${MAX_REPO_PATH_BYTES} bytes`;
  if (path.startsWith("/") || path.endsWith("/")) return "the path starts or ends with '/'";
  for (const segment of path.split("/")) {
    if (segment === "") return "the path contains '//'";
    if (segment === "." || segment === "..") return "the path contains a '.' or '..' segment";
    if (segment === ".git") return "the path contains a '.git' segment";
    if (segment.includes("\0")) return "the path contains a NUL character";
    if (Buffer.byteLength(segment) > MAX_REPO_PATH_SEGMENT_BYTES) return `a path segment is longer than ${MAX_REPO_PATH_SEGMENT_BYTES} bytes`;
  }
  return null;
}

/**
 * `path` without the `/` at its end (and, with `leading`, at its start). A loop, not
 * `replace(/\/+$/, "")`: that regular expression retries from every `/` of a run that does not
 * reach the end, so a path of n slashes followed by one other character costs n² steps
 * (100,000 slashes took 20 s), and these paths come from request URLs and bodies.
 */
export function trimSlashes(path: string, { leading = false } = {}): string {
  let end = path.length;
  while (end > 0 && path.charCodeAt(end - 1) === SLASH) end--;
  let start = 0;
  if (leading) while (start < end && path.charCodeAt(start) === SLASH) start++;
  return path.slice(start, end);
}

const SLASH = 0x2f;
