/**
 * `POST /{prefix}{ns}/{name}.git/info/lfs/objects/batch` (the `.git` optional): the Git LFS batch
 * call `@huggingface/hub` makes before uploading large files. castor answers `transfer: "xet"`
 * with upload actions pointing at the repository's Xet write-token route (logic in
 * ../../hub/lfs-batch.ts), and refuses plain LFS transfers with advice to use Xet.
 */
import { randomUUID } from "node:crypto";
import type { FastifyInstance } from "fastify";
import type { LfsBatchAnswer } from "../../hub/lfs-batch.js";
import type { RepoType } from "../../hub/records.js";
import * as wire from "../../wire/hub.js";
import { parseJsonBodies } from "../raw-body.js";
import { addressOf, PLURAL_BY_REPO_TYPE, FILE_URL_PREFIXES } from "./address.js";
import { callerOfRequest, type HubAccess } from "./caller.js";
import type { HubRouteDeps } from "./repo-routes.js";

const LFS_MEDIA_TYPE = "application/vnd.git-lfs+json";
/** 1,000 objects of ~100 bytes each, with room to spare. */
const BATCH_BODY_LIMIT = 1024 * 1024;

export async function lfsRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  // Git LFS clients send (and accept) their own JSON media type.
  parseJsonBodies(app, LFS_MEDIA_TYPE);

  for (const [prefix, plural] of FILE_URL_PREFIXES) {
    // The URL names the repository `name` or `name.git`.
    const address = (params: Record<string, string>) => addressOf(plural, params.namespace, params.repoGit.replace(/\.git$/, ""));
    const hubAccess: HubAccess = { repo: "write", address };
    app.post<{ Params: wire.LfsBatchParams; Body: wire.LfsBatchBody }>(
      `${prefix}/:namespace/:repoGit/info/lfs/objects/batch`,
      {
        config: { hubAccess },
        bodyLimit: BATCH_BODY_LIMIT,
        schema: { params: wire.LfsBatchParams, body: wire.LfsBatchBody, response: { 200: wire.LfsBatchAnswer } },
      },
      async (request, reply) => {
        const repo = address(request.params);
        const answer = await deps.hub.files.uploadBatch(callerOfRequest(request), repo, request.body);
        reply.header("content-type", LFS_MEDIA_TYPE);
        return batchJson(deps.publicUrl(request), repo.type, repo.name, answer);
      },
    );
  }
}

/**
 * The Git LFS batch answer. Every upload action names the same write-token route; its headers
 * carry a session id that the library forwards to the token route and the CAS, so castor's log
 * ties the upload's requests together.
 */
function batchJson(base: string, type: RepoType, name: string, answer: LfsBatchAnswer): wire.LfsBatchAnswer {
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
