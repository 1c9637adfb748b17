/**
 * `POST /{prefix}{ns}/{name}.git/info/lfs/objects/batch` (the `.git` optional): the Git LFS batch
 * call `@huggingface/hub` makes before uploading large files. castor answers `transfer: "xet"`
 * with upload actions pointing at the repository's Xet write-token route (logic in
 * ../../hub/lfs-batch.ts), and refuses plain LFS transfers with advice to use Xet.
 */
import { randomUUID } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { HubError } from "../../hub/errors.js";
import { LfsBatch, type LfsBatchAnswer, type StoredFileLookup } from "../../hub/lfs-batch.js";
import type { HubRepositories } from "../../hub/repositories.js";
import type { RepoType } from "../../metadata/store.js";
import { parseTextBodies } from "../raw-body.js";
import { addressOf, PLURAL_BY_REPO_TYPE, FILE_URL_PREFIXES } from "./address.js";
import { callerOfRequest, type HubRouteDeps } from "./repo-routes.js";

export interface HubLfsRouteDeps extends HubRouteDeps {
  repos: HubRepositories;
  store: StoredFileLookup;
}

interface BatchParams {
  namespace: string;
  repoGit: string;
}

const LFS_MEDIA_TYPE = "application/vnd.git-lfs+json";
/** 1,000 objects of ~100 bytes each, with room to spare. */
const BATCH_BODY_LIMIT = 1024 * 1024;

export async function lfsRoutes(app: FastifyInstance, deps: HubLfsRouteDeps): Promise<void> {
  const batch = new LfsBatch(deps.repos, deps.store);
  // Git LFS clients send (and accept) their own JSON media type.
  parseTextBodies(app, LFS_MEDIA_TYPE, (text) => text);

  for (const [prefix, plural] of FILE_URL_PREFIXES) {
    app.post<{ Params: BatchParams }>(`${prefix}/:namespace/:repoGit/info/lfs/objects/batch`, { bodyLimit: BATCH_BODY_LIMIT }, async (request, reply) => {
      const caller = await callerOfRequest(deps, request);
      const address = addressOf(plural, request.params.namespace, request.params.repoGit.replace(/\.git$/, ""));
      const answer = await batch.upload(caller, address, jsonOf(request.body));
      reply.header("content-type", LFS_MEDIA_TYPE);
      return batchJson(deps.publicUrl(request), address.type, address.name, answer);
    });
  }
}

/** The body as JSON: `application/json` arrives parsed, the LFS media type as text. */
function jsonOf(body: unknown): unknown {
  if (typeof body !== "string") return body;
  try {
    return JSON.parse(body);
  } catch {
    throw new HubError(400, "the LFS batch request body is not valid JSON");
  }
}

/**
 * The Git LFS batch answer. Every upload action names the same write-token route; its headers
 * carry a session id that the library forwards to the token route and the CAS, so castor's log
 * ties the upload's requests together.
 */
function batchJson(base: string, type: RepoType, name: string, answer: LfsBatchAnswer): Record<string, unknown> {
  const href = `${base}/api/${PLURAL_BY_REPO_TYPE[type]}/${name}/xet-write-token/${encodeURIComponent(answer.branch)}`;
  const header = { "X-Xet-Session-Id": randomUUID() };
  return {
    transfer: "xet",
    hash_algo: "sha256",
    objects: answer.objects.map((object) => {
      if ("error" in object) return { oid: object.oid, size: object.size, error: object.error };
      if (!object.upload) return { oid: object.oid, size: object.size, authenticated: true };
      return { oid: object.oid, size: object.size, authenticated: true, actions: { upload: { href, header } } };
    }),
  };
}
