/**
 * `POST /api/repos/move` (`move_repo`, `hf repos move`): renames a repository, within its
 * namespace or into another one the token may create repositories in. The body is the Hub's
 * `{fromRepo, toRepo, type}`. The repository keeps its id, history and token links; its old
 * name answers 404 `RepoNotFound` afterwards (castor keeps no redirects).
 */
import type { FastifyInstance } from "fastify";
import { HubError } from "../../hub/errors.js";
import { requireRepoType } from "../../hub/names.js";
import { answerNamingRepo, callerOfRequest, jsonBody, stringField, type HubRouteDeps } from "./repo-routes.js";

export async function moveRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  app.post("/api/repos/move", async (request, reply) => {
    const caller = await callerOfRequest(deps, request);
    const body = jsonBody(request);
    const from = stringField(body, "fromRepo", true)!;
    const to = stringField(body, "toRepo", true)!;
    const type = requireRepoType(stringField(body, "type", false) ?? "model");
    if (!from.includes("/")) throw new HubError(400, `"fromRepo" must be namespace/name; got ${JSON.stringify(from.slice(0, 100))}`);
    return answerNamingRepo(deps, request, reply, () => deps.repos.moveRepo(caller, { type, name: from }, to));
  });
}
