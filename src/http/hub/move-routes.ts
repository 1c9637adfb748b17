/**
 * `POST /api/repos/move` (`move_repo`, `hf repos move`): renames a repository, within its
 * namespace or into another one the token may create repositories in. The body is the Hub's
 * `{fromRepo, toRepo, type}`. The repository keeps its id, history and token links; its old
 * name answers 404 `RepoNotFound` afterwards (castor keeps no redirects).
 */
import type { FastifyInstance } from "fastify";
import { HubError } from "../../hub/errors.js";
import { requireRepoType } from "../../hub/names.js";
import * as wire from "../../wire/hub.js";
import { callerOfRequest } from "./caller.js";
import { answerNamingRepo, type HubRouteDeps } from "./repo-routes.js";

export async function moveRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  app.post<{ Body: wire.MoveRepoBody }>(
    "/api/repos/move",
    {
      config: { hubAccess: { token: "moving a repository" } },
      schema: { body: wire.MoveRepoBody, response: { 200: wire.RepoUrl, 409: wire.RepoConflict } },
    },
    async (request, reply) => {
      const { fromRepo, toRepo } = request.body;
      const type = requireRepoType(request.body.type ?? "model");
      if (!fromRepo.includes("/")) throw new HubError(400, `"fromRepo" must be namespace/name; got ${JSON.stringify(fromRepo.slice(0, 100))}`);
      return answerNamingRepo(deps, request, reply, () => deps.hub.repos.move(callerOfRequest(request), { type, name: fromRepo }, toRepo));
    },
  );
}
