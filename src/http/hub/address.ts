/**
 * Reading hub URLs. Repository types appear plural in API paths (`/api/models/…`) and as a
 * prefix of file URLs (none for models, `datasets/`, `spaces/`). A revision is one path segment
 * that clients percent-encode (`refs%2Fpr%2F1`), followed by a file path whose `/` are real; so
 * both are cut from the raw URL before decoding, which a router wildcard (decoded first) cannot.
 */
import type { FastifyRequest } from "fastify";
import { HubError } from "../../hub/errors.js";
import type { RepoAddress } from "../../hub/repositories.js";
import type { RepoType } from "../../metadata/store.js";

export const REPO_TYPE_BY_PLURAL: Readonly<Record<string, RepoType>> = { models: "model", datasets: "dataset", spaces: "space" };
export const PLURAL_BY_REPO_TYPE: Readonly<Record<RepoType, string>> = { model: "models", dataset: "datasets", space: "spaces" };

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

/**
 * The revision and path that follow `marker` (e.g. `"tree"`, `"resolve"`) in the request's raw
 * path: `…/{marker}/{rev}[/{path…}]`. The path is "" when absent.
 */
export function revisionAndPath(request: FastifyRequest, marker: string): { revision: string; path: string } {
  const raw = request.raw.url ?? "";
  const q = raw.indexOf("?");
  const segments = (q === -1 ? raw : raw.slice(0, q)).split("/");
  const at = segments.indexOf(marker, 2);
  if (at === -1 || at + 1 >= segments.length || segments[at + 1] === "") {
    throw new HubError(400, `the URL names no revision after /${marker}/: add one, e.g. /${marker}/main`);
  }
  return {
    revision: decodeSegment(segments[at + 1]),
    path: segments
      .slice(at + 2)
      .map(decodeSegment)
      .join("/")
      .replace(/\/+$/, ""),
  };
}
