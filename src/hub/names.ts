/**
 * Validation of the names the hub accepts from users and clients: repository types,
 * `namespace/name` repository names, `TYPE:NS/NAME` references and git-ref-like revision
 * names (those read, and those a branch or tag may be created with). Each check has a `…Problem` form returning a message (for the token operation, which
 * answers with a denial instead of throwing) and a throwing `require…` form.
 */
import { GIT_OID_RE } from "../format/git.js";
import { REPO_TYPES, type RepoType } from "../metadata/store.js";
import { HubError } from "./errors.js";

const NAME_PART = /^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/;
/** Two parts of at most 96 characters and the slash. */
const MAX_REPO_NAME_LENGTH = 2 * 96 + 1;
export const MAX_REVISION_NAME_LENGTH = 255;
/** Characters git forbids in ref names (besides control characters and space). */
const REVISION_FORBIDDEN = /[\x00-\x20\x7f~^:?*[\\]/;

/** Quotes a user-supplied value for an error message without echoing an unbounded string. */
export function quote(value: string): string {
  return JSON.stringify(value.length > 100 ? `${value.slice(0, 100)}…` : value);
}

export function repoTypeProblem(type: string): string | null {
  return (REPO_TYPES as readonly string[]).includes(type) ? null : `repository type must be one of ${REPO_TYPES.join(", ")}; got ${quote(type)}`;
}

export function repoNameProblem(name: string): string | null {
  const parts = name.length <= MAX_REPO_NAME_LENGTH ? name.split("/") : [];
  const valid = parts.length === 2 && parts.every((part) => NAME_PART.test(part) && !part.includes(".."));
  return valid
    ? null
    : `repository name must be namespace/name, each part 1–96 characters of letters, digits, '.', '_' or '-' starting with a letter or digit, without '..'; got ${quote(name)}`;
}

/** git check-ref-format's rules (the ones that matter for a name in a URL), plus a length cap. */
export function revisionNameProblem(name: string): string | null {
  const reason =
    name.length === 0
      ? "it is empty"
      : name.length > MAX_REVISION_NAME_LENGTH
        ? `it is longer than ${MAX_REVISION_NAME_LENGTH} characters`
        : REVISION_FORBIDDEN.test(name)
          ? "it contains a space, a control character or one of ~ ^ : ? * [ \\"
          : name.startsWith("/") || name.startsWith("-")
            ? "it starts with '/' or '-'"
            : name.endsWith("/") || name.endsWith(".")
              ? "it ends with '/' or '.'"
              : name.includes("..") || name.includes("//") || name.includes("@{") || name === "@"
                ? "it contains '..', '//' or '@{', or is '@'"
                : name.split("/").some((part) => part.startsWith(".") || part.endsWith(".lock"))
                  ? "a '/'-separated part starts with '.' or ends with '.lock'"
                  : null;
  return reason === null ? null : `revision name ${quote(name)} is not valid: ${reason}`;
}

/**
 * The name of a branch or tag to create: a valid revision name that does not stand for something
 * else where revisions are read — `HEAD` (git's name for the current branch, which git refuses as
 * a branch name and castor reads as `main`) or a 40-hex commit id.
 */
export function newRevisionNameProblem(name: string): string | null {
  const problem = revisionNameProblem(name);
  if (problem !== null) return problem;
  if (name === "HEAD") return `revision name "HEAD" is reserved: it names the default branch (main), as in git`;
  if (GIT_OID_RE.test(name)) return `revision name ${quote(name)} is not valid: it looks like a commit id`;
  return null;
}

/** A namespace (the first part of a repository name) or a user name. */
export function requireNamespace(name: string, what = "namespace"): string {
  if (!NAME_PART.test(name) || name.includes("..")) {
    throw new HubError(400, `${what} must be 1–96 characters of letters, digits, '.', '_' or '-' starting with a letter or digit; got ${quote(name)}`);
  }
  return name;
}

export function requireRepoType(type: string): RepoType {
  const problem = repoTypeProblem(type);
  if (problem !== null) throw new HubError(400, problem);
  return type as RepoType;
}

export function requireRepoName(name: string): string {
  const problem = repoNameProblem(name);
  if (problem !== null) throw new HubError(400, problem);
  return name;
}

export function requireRevisionName(name: string): string {
  const problem = revisionNameProblem(name);
  if (problem !== null) throw new HubError(400, problem);
  return name;
}

export function requireNewRevisionName(name: string): string {
  const problem = newRevisionNameProblem(name);
  if (problem !== null) throw new HubError(400, problem);
  return name;
}

/** `"model:alice/bert"` → `{ type: "model", name: "alice/bert" }`; HubError 400 otherwise. */
export function parseRepoRef(ref: string): { type: RepoType; name: string } {
  const colon = ref.indexOf(":");
  if (colon < 0) {
    throw new HubError(400, `repository reference must be TYPE:NAMESPACE/NAME (e.g. model:alice/bert); got ${quote(ref)}`);
  }
  return { type: requireRepoType(ref.slice(0, colon)), name: requireRepoName(ref.slice(colon + 1)) };
}

/** The inverse of parseRepoRef: `model:alice/bert`. */
export function formatRepoRef(repo: { type: RepoType; name: string }): string {
  return `${repo.type}:${repo.name}`;
}
