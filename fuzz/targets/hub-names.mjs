// Hub path and revision parsing: repository, namespace and revision names (src/hub/names.ts),
// repository refs, file paths inside a repository (src/hub/paths.ts), and the revision/path
// split of a raw request URL (src/http/hub/address.ts). Expected: HubError only.
import { addressOf, API_REVISION_SEGMENT, revisionAndPath } from "../../dist/http/hub/address.js";
import { HubError } from "../../dist/hub/errors.js";
import { parseRepoRef, requireNamespace, requireRepoName, requireRepoType, requireRevisionName } from "../../dist/hub/names.js";
import { requirePath } from "../../dist/hub/paths.js";
import { expected, text } from "./expect.mjs";

function attempt(fn) {
  try {
    fn();
  } catch (error) {
    expected(error, [HubError]);
  }
}

export function fuzz(data) {
  const input = text(data);
  attempt(() => requireNamespace(input));
  attempt(() => requireRepoName(input));
  attempt(() => requireRepoType(input));
  attempt(() => requireRevisionName(input));
  attempt(() => parseRepoRef(input));
  attempt(() => requirePath(input));
  const parts = input.split("/");
  attempt(() => addressOf(parts[0] ?? "", parts[1] ?? "", parts[2] ?? ""));
  for (const segment of [API_REVISION_SEGMENT, 4, 1]) attempt(() => revisionAndPath({ raw: { url: input } }, segment));
  attempt(() => revisionAndPath({ raw: { url: `/api/models/ns/name/tree/${input}` } }, API_REVISION_SEGMENT));
}
