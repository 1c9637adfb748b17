/**
 * Reading hub URLs. Repository types appear plural in API paths (`/api/models/…`) and as a
 * prefix of file URLs (none for models, `datasets/`, `spaces/`). A revision is one path segment
 * that clients percent-encode (`refs%2Fpr%2F1`), followed by a file path whose `/` are real; so
 * both are cut from the raw URL before decoding, which a router wildcard (decoded first) cannot.
 */
import type { FastifyRequest } from "fastify";
import { trimSlashes } from "../../format/repo.js";
import { HubError } from "../../hub/errors.js";
import type { RepoAddress } from "../../hub/repositories.js";
import type { RepoType } from "../../hub/records.js";

export const REPO_TYPE_BY_PLURAL: Readonly<Record<string, RepoType>> = { models: "model", datasets: "dataset", spaces: "space" };
export const PLURAL_BY_REPO_TYPE: Readonly<Record<RepoType, string>> = { model: "models", dataset: "datasets", space: "spaces" };

/**
 * Git-style URLs (`resolve`, `raw`, LFS batch) put the repository type before the namespace,
 * except for models: each URL prefix with the type's plural, as the API routes spell it.
 */
export const FILE_URL_PREFIXES = [
  ["", "models"],
  ["/datasets", "datasets"],
  ["/spaces", "spaces"],
] as const;

/** The prefix of a repository's file URLs (`/{prefix}{ns}/{name}/resolve/…`). */
export function urlPrefixOf(type: RepoType): string {
  return type === "model" ? "" : `${PLURAL_BY_REPO_TYPE[type]}/`;
}

export function repoTypeOfPlural(plural: string): RepoType {
  const type = Object.hasOwn(REPO_TYPE_BY_PLURAL, plural) ? REPO_TYPE_BY_PLURAL[plural] : undefined;
  if (type === undefined) throw new HubError(400, `unknown repository type ${JSON.stringify(plural.slice(0, 40))} in the path: use models, datasets or spaces`);
  return type;
}

export function addressOf(plural: string, namespace: string, name: string): RepoAddress {
  return { type: repoTypeOfPlural(plural), name: `${namespace}/${name}` };
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new HubError(400, "the URL path is not validly percent-encoded");
  }
}

/** Where the revision sits in API paths: `/api/{types}/{ns}/{name}/{operation}/{rev}`. */
export const API_REVISION_SEGMENT = 6;

/**
 * The revision and path of the request's raw path: the revision is segment `revisionSegment`
 * (counting the empty one before the leading `/` as 0), the path is everything after it ("" when
 * absent). Positions, not a search for the operation's name, since a repository may be called
 * `tree` or `resolve`.
 */
export function revisionAndPath(request: FastifyRequest, revisionSegment: number): { revision: string; path: string } {
  const raw = request.raw.url ?? "";
  const q = raw.indexOf("?");
  const segments = (q === -1 ? raw : raw.slice(0, q)).split("/");
  if (segments.length <= revisionSegment || segments[revisionSegment] === "") {
    throw new HubError(400, `the URL names no revision after /${segments[revisionSegment - 1] ?? ""}/: add one, e.g. main`);
  }
  return {
    revision: decodeSegment(segments[revisionSegment]),
    path: trimSlashes(
      segments
        .slice(revisionSegment + 1)
        .map(decodeSegment)
        .join("/"),
    ),
  };
}
