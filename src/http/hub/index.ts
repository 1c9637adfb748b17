/**
 * The repository hub's HTTP surface: the routes Hugging Face clients (`hf`, `huggingface_hub`,
 * `@huggingface/hub`) call through `HF_ENDPOINT`, and castor's own JSON routes for the web
 * interface. Each module is a fastify plugin registered here, so what one declares (content-type
 * parsers, hooks) stays with its routes. Every route parses the request, calls the hub's services
 * (src/hub) and renders their answer; the token operation (`…/xet-read-token/…`) lives in
 * ../hub-token.ts next to the CAS it hands out access to.
 */
import type { FastifyInstance } from "fastify";
import { parseJsonBodies, parseTextBodies, refuseUnparsedBody } from "../raw-body.js";
import { installHubAccess } from "./caller.js";
import { castorRoutes } from "./castor-routes.js";
import { fileRoutes } from "./file-routes.js";
import { lfsRoutes, type HubLfsRouteDeps } from "./lfs-routes.js";
import { moveRoutes } from "./move-routes.js";
import { rawRoutes } from "./raw-routes.js";
import { repoRoutes } from "./repo-routes.js";
import { resolveRoutes } from "./resolve-routes.js";
import { statsRoutes } from "./stats-routes.js";
import { unsupportedRoutes } from "./unsupported-routes.js";
import { installHubValidation } from "./validation.js";

export type { HubRouteDeps } from "./repo-routes.js";

/** The hub routes' dependencies: those of every route, and the Git LFS routes' own. */
export type HubHttpDeps = HubLfsRouteDeps;

/**
 * The hub's routes, in one plugin whose hooks every route shares, in the order fastify runs them
 * once a body arrived within its limits: who may call (caller.ts), then a JSON body that did not
 * parse (raw-body.ts `UnparsedBody`), an absent body read as `{}`, then the route's schemas
 * (src/wire/hub.ts, checked by validation.ts).
 */
export async function hubRoutes(app: FastifyInstance, deps: HubHttpDeps): Promise<void> {
  installHubAccess(app, deps);
  app.addHook("preValidation", refuseUnparsedBody);
  installHubValidation(app);
  // Clients send some calls without a body (create_branch, a settings change with nothing to
  // change): a body schema then reads it as the empty JSON object, as the routes always have.
  app.addHook("preValidation", async (request) => {
    if (request.body === undefined && request.routeOptions.schema?.body !== undefined) request.body = {};
  });
  await app.register(repoRoutes, deps);
  await app.register(fileRoutes, deps);
  await app.register(resolveRoutes, deps);
  await app.register(lfsRoutes, deps);
  await app.register(rawRoutes, deps);
  await app.register(moveRoutes, deps);
  await app.register(statsRoutes, deps);
  await app.register(castorRoutes, deps);
  await app.register(unsupportedRoutes);
}

/**
 * JSON and text bodies of every hub route in `scope` (the hub's, the token operation's and the
 * admin routes' scope) read by castor rather than by fastify, so the body timeouts answer 408 on
 * them as on uploads (see `parseTextBodies`); JSON is still parsed by fastify's parser (which
 * refuses `__proto__` and `constructor` keys). Call before the routes are registered.
 */
export function acceptHubBodies(scope: FastifyInstance): void {
  scope.removeContentTypeParser(["application/json", "text/plain"]);
  parseJsonBodies(scope, "application/json");
  parseTextBodies(scope, "text/plain", (text) => text);
}
