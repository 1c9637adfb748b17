/**
 * The one encapsulated scope of the CAS routes (xorbs, shards, global dedup, reconstructions).
 * It owns what they share, so their modules declare routes only:
 *
 * - the CAS auth hook (cas-auth.ts): a route declares `config: { casScope }` and gets a verified
 *   token on `request.casAccess`, or a 401/403 before a single body byte is read;
 * - raw bodies (raw-body.ts): whatever the Content-Type (or none), a body is left unread for the
 *   route to stream with `bodyPieces`, capped by the route's `bodyLimit`;
 * - the concurrent-upload cap (upload-limit.ts): a route declaring `config: { upload: true }`
 *   is refused with 503 while the node receives its maximum of uploads. The CAS routes get no
 *   per-request rate limit: they are the hot path, and their tokens come from the hub's token
 *   operation, which is rate-limited (hub-limits.ts).
 *
 * Routes outside the scope (health probes, the hub token operation, transfer URLs) keep
 * fastify's body parsers and never see the hook.
 *
 *     await app.register(casScope, {
 *       verifier,
 *       routes: async (cas) => {
 *         await cas.register(xorbRoutes, { xorbs });
 *         await cas.register(reconstructionRoutes, { reconstructions, v2Reconstruction });
 *       },
 *     });
 */
import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import type { CasTokenVerifier } from "../auth/cas-token.js";
import type { OnRefusal } from "../metrics.js";
import { registerCasAuth } from "./cas-auth.js";
import { acceptRawBodies } from "./raw-body.js";
import { DEFAULT_MAX_CONCURRENT_UPLOADS } from "../config.js";
import { limitConcurrentUploads, UploadSlots } from "./upload-limit.js";

export interface CasScopeOptions {
  /** Verifies the CAS access tokens of the scope's requests. */
  verifier: CasTokenVerifier;
  /** Registers the CAS route plugins inside the scope. */
  routes: (scope: FastifyInstance) => PromiseLike<unknown>;
  /** Most uploads received at once (CASTOR_MAX_CONCURRENT_UPLOADS); the default when absent. */
  maxConcurrentUploads?: number;
  /** Told of each upload refused by the cap (the refusal metric). */
  onRefusal?: OnRefusal;
  /** The node's upload count when other scopes share it (git pushes, Git LFS uploads); else one of the scope's own. */
  uploadSlots?: UploadSlots;
}

export const casScope: FastifyPluginAsync<CasScopeOptions> = async (scope, { verifier, routes, maxConcurrentUploads, onRefusal, uploadSlots }) => {
  registerCasAuth(scope, verifier);
  // After the auth hook: an unauthenticated upload gets its 401 and never holds a slot.
  limitConcurrentUploads(scope, uploadSlots ?? new UploadSlots(maxConcurrentUploads ?? DEFAULT_MAX_CONCURRENT_UPLOADS, onRefusal));
  acceptRawBodies(scope);
  await routes(scope);
};
