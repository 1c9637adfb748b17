/**
 * Hub features castor does not have, answered clearly: 400 `{"error": "… not supported by
 * castor …"}` with `X-Error-Code: NotSupported`, whatever the repository (no lookup: the answer
 * says nothing about which repositories exist). Without these routes the clients would get the
 * generic 404, which `huggingface_hub` reports as a missing repository.
 *
 * Pull requests are refused where they would be made too: `create_pr=1` on preupload and commit
 * (file-routes.ts). The Xet write-token route still issues tokens with it, since xet-core adds
 * it to uploads without a revision (../hub-token.ts). Gated settings are refused by
 * `PUT …/settings` (repo-routes.ts). Inference Endpoints live on another host
 * (api.endpoints.huggingface.cloud), which castor is not.
 */
import type { FastifyInstance, HTTPMethods } from "fastify";
import { notSupported } from "../../hub/errors.js";
import * as wire from "../../wire/hub.js";

/** Answered the same to everyone: no token is looked up. */
const PUBLIC = { hubAccess: "public" } as const;

const ANY_METHOD: HTTPMethods[] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/** Paths below `/api/{type}s/{namespace}/{name}/`, each with the feature the answer names. */
const REPO_FEATURES: readonly (readonly [paths: string[], feature: string, hint: string])[] = [
  [["discussions", "discussions/*"], "discussions and pull requests", "commit to a branch instead (create_branch, then upload with revision=BRANCH)"],
  [["user-access-request/*"], "gated repositories (access requests)", "make the repository private and give users hub tokens instead"],
  [
    ["runtime", "hardware", "sleeptime", "pause", "restart", "secrets", "secrets/*", "variables", "variables/*", "dev-mode", "logs/*", "volumes", "volumes/*"],
    "Spaces runtime features (hardware, secrets, variables, restarts, logs)",
    "castor stores a Space's files only; it runs nothing",
  ],
  [["duplicate"], "duplicating repositories", "download the files and upload them to a new repository"],
  [
    ["lfs-files/duplicate"],
    "copies between repositories",
    "copy within one repository (CommitOperationCopy without src_repo_id), or upload the file to the other repository (Xet deduplicates its bytes)",
  ],
  [["lfs-files", "lfs-files/batch"], "listing and deleting stored LFS files", "the files of a revision are in GET .../tree/{revision}"],
];

export async function unsupportedRoutes(app: FastifyInstance): Promise<void> {
  for (const [paths, feature, hint] of REPO_FEATURES) {
    for (const path of paths) {
      app.route({
        method: ANY_METHOD,
        url: `/api/:types/:namespace/:name/${path}`,
        config: PUBLIC,
        schema: { params: wire.RepoParams },
        handler: async () => {
          throw notSupported(feature, hint);
        },
      });
    }
  }
  app.route({
    method: ANY_METHOD,
    url: "/api/spaces/hardware",
    config: PUBLIC,
    handler: async () => {
      throw notSupported("Spaces runtime features (hardware, secrets, variables, restarts, logs)", "castor stores a Space's files only; it runs nothing");
    },
  });
  // The hf-inference provider of InferenceClient asks the Hub for its task list.
  app.get("/api/tasks", { config: PUBLIC }, async () => {
    throw notSupported("inference", "castor stores models; serve them with an inference server of your own");
  });
}
