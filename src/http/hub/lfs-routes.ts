/**
 * Git LFS at `/{prefix}{ns}/{name}.git/info/lfs/…` (the `.git` optional):
 *
 * - `POST …/objects/batch`: the batch call (logic in ../../hub/lfs-batch.ts). Uploads offering
 *   `xet` (`@huggingface/hub`) are sent to the repository's Xet write-token route; git-lfs
 *   gets `basic` actions pointing at the routes below. An upload needs write access, a
 *   download read access.
 * - `GET …/objects/{oid}`: an object's bytes, rebuilt from Xet by the server, with Range.
 * - `PUT …/objects/{oid}`: an object's bytes, chunked into the CAS by the server.
 *
 * The basic actions are URLs signed for their one operation on one object
 * (auth/lfs-object-url.ts), so they work for clients that send no credentials to an action;
 * with the request's own credentials the object routes work too. Errors are JSON with `error`
 * (what `@huggingface/hub` reads) and `message` (what git-lfs prints); a 401 carries
 * `LFS-Authenticate: Basic`, which makes git-lfs ask git's credential helper.
 */
import { randomUUID } from "node:crypto";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { LfsObjectUrls, LfsOperation } from "../../auth/lfs-object-url.js";
import { halfOpenByteRange } from "../../format/ranges.js";
import { HubError } from "../../hub/errors.js";
import type { LfsBatchAnswer } from "../../hub/lfs-batch.js";
import type { RepoType } from "../../hub/records.js";
import * as wire from "../../wire/hub.js";
import { asciiHeaderText, domainErrorAnswer } from "../errors.js";
import { sendHijacked } from "../hijacked-body.js";
import { bodyPieces, declaredLengthOf, parseJsonBodies, settleUnreadBody } from "../raw-body.js";
import { limitConcurrentUploads, type UploadSlots } from "../upload-limit.js";
import { addressOf, PLURAL_BY_REPO_TYPE, FILE_URL_PREFIXES, urlPrefixOf } from "./address.js";
import { callerOfRequest, repoOfRequest, type HubAccess } from "./caller.js";
import type { HubRouteDeps } from "./repo-routes.js";
import { requestedRange } from "./resolve-routes.js";

export interface HubLfsRouteDeps extends HubRouteDeps {
  /** Signs and verifies the basic actions' URLs (auth/lfs-object-url.ts). */
  lfsUrls: LfsObjectUrls;
  /** The node's uploads in progress: a basic upload takes one. */
  uploadSlots: UploadSlots;
}

interface ObjectRequest {
  Params: wire.LfsObjectParams;
  Querystring: wire.LfsObjectQuery;
}

const LFS_MEDIA_TYPE = "application/vnd.git-lfs+json";
/** 1,000 objects of ~100 bytes each, with room to spare. */
const BATCH_BODY_LIMIT = 1024 * 1024;
/** Largest object a basic upload may send: Xet files have no size limit, this is the body cap's. */
const MAX_LFS_OBJECT_BYTES = 2 ** 50;

export async function lfsRoutes(app: FastifyInstance, deps: HubLfsRouteDeps): Promise<void> {
  limitConcurrentUploads(app, deps.uploadSlots);
  // Git LFS clients send (and accept) their own JSON media type.
  parseJsonBodies(app, LFS_MEDIA_TYPE);
  // An object's bytes are streamed into the CAS, never buffered (bodyPieces), whatever their
  // Content-Type (git-lfs sends application/octet-stream, @huggingface/hub none at all).
  app.addContentTypeParser("*", (_request, payload, done) => done(null, payload));
  app.setErrorHandler(async (error, _request, reply) => {
    const answer = domainErrorAnswer(error);
    if (answer === null || answer.statusCode >= 500) throw error;
    if (answer.headers) reply.headers(answer.headers);
    if (answer.statusCode === 401) reply.headers({ "www-authenticate": 'Basic realm="castor"', "lfs-authenticate": 'Basic realm="castor"' });
    return reply
      .code(answer.statusCode)
      .header("x-error-message", asciiHeaderText(answer.message))
      .type("application/json; charset=utf-8")
      .send({ error: answer.message, message: answer.message });
  });

  for (const [prefix, plural] of FILE_URL_PREFIXES) {
    const base = `${prefix}/:namespace/:repoGit/info/lfs/objects`;
    // The URL names the repository `name` or `name.git`.
    const address = (params: Record<string, string>) => addressOf(plural, params.namespace, params.repoGit.replace(/\.git$/, ""));

    // An upload changes the repository, a download reads it: the body says which.
    const batchAccess: HubAccess = { repo: (request) => (operationOf(request.body) === "upload" ? "write" : "read"), address };
    app.post<{ Params: wire.LfsBatchParams; Body: wire.LfsBatchBody }>(
      `${base}/batch`,
      {
        config: { hubAccess: batchAccess },
        bodyLimit: BATCH_BODY_LIMIT,
        schema: { params: wire.LfsBatchParams, body: wire.LfsBatchBody, response: { 200: wire.LfsBatchAnswer } },
      },
      async (request, reply) => {
        const repo = address(request.params);
        const answer = await deps.hub.files.lfsBatch(callerOfRequest(request), repo, request.body);
        reply.header("content-type", LFS_MEDIA_TYPE);
        return batchJson(deps, deps.publicUrl(request), repo.type, repo.name, answer);
      },
    );

    /** Whether the request's URL is a signed action URL for `operation` (403 for a bad or expired signature). */
    const signedFor =
      (operation: LfsOperation) =>
      (request: FastifyRequest): boolean => {
        const { params, query } = request as FastifyRequest<ObjectRequest>;
        if (query.s === undefined) return false;
        const { type, name } = address(params);
        if (!deps.lfsUrls.verify({ operation, repoType: type, repoName: name, oid: params.oid }, query.x, query.s)) {
          throw new HubError(403, "this LFS action URL is expired or not valid: ask the LFS batch API again (git lfs does so on its own)");
        }
        return true;
      };
    const objectSchema = { params: wire.LfsObjectParams, querystring: wire.LfsObjectQuery };

    app.get<ObjectRequest>(
      `${base}/:oid`,
      { config: { hubAccess: { repo: "read", address, signed: signedFor("download") } }, schema: objectSchema },
      async (request, reply) => {
        const object = await deps.hub.files.lfsObject(repoOfRequest(request), request.params.oid);
        reply.headers({ "content-type": "application/octet-stream", "accept-ranges": "bytes", "cache-control": "private, max-age=0, must-revalidate" });
        const range = requestedRange(request.headers.range, object.size);
        if (range === "unsatisfiable") return reply.code(416).header("content-range", `bytes */${object.size}`).header("content-length", "0").send();
        const span = range ?? halfOpenByteRange(0, object.size);
        if (range !== null) reply.code(206).header("content-range", `bytes ${span.start}-${span.end - 1}/${object.size}`);
        reply.header("content-length", String(span.end - span.start));
        if (span.end === span.start) return reply.send();
        const body = await object.open(span);
        return sendHijacked(app, request, reply, {
          write: (out) => body.writeTo(out),
          close: () => body.close(),
          failure: "LFS download aborted: the Xet file could not be reconstructed",
        });
      },
    );

    app.put<ObjectRequest>(
      `${base}/:oid`,
      {
        config: { hubAccess: { repo: "write", address, signed: signedFor("upload") }, upload: true },
        bodyLimit: MAX_LFS_OBJECT_BYTES,
        schema: objectSchema,
      },
      async (request) => {
        const size = declaredLengthOf(request);
        try {
          if (size === undefined) throw new HubError(411, "send the LFS object with its Content-Length");
          await deps.hub.files.lfsUpload(repoOfRequest(request), request.params.oid, size, bodyPieces(request, size));
        } catch (error) {
          throw settleUnreadBody(request, error);
        }
        return {};
      },
    );
  }
}

/** The batch request's `operation`, when its body is an object that names one. */
function operationOf(body: unknown): unknown {
  return typeof body === "object" && body !== null ? (body as { operation?: unknown }).operation : undefined;
}

/**
 * The Git LFS batch answer. Xet upload actions all name the write-token route, with a session
 * id that the library forwards to the token route and the CAS, so castor's log ties the
 * upload's requests together; basic actions name the object routes by signed URLs, which need
 * no credentials (not every client sends any to an action).
 */
function batchJson(deps: HubLfsRouteDeps, base: string, type: RepoType, name: string, answer: LfsBatchAnswer): wire.LfsBatchAnswer {
  const tokenRoute = `${base}/api/${PLURAL_BY_REPO_TYPE[type]}/${name}/xet-write-token/${encodeURIComponent(answer.branch)}`;
  const session = { "X-Xet-Session-Id": randomUUID() };
  const basic = (oid: string) => ({
    href: `${base}/${urlPrefixOf(type)}${name}.git/info/lfs/objects/${oid}?${deps.lfsUrls.signQuery({ operation: answer.operation, repoType: type, repoName: name, oid })}`,
    expires_in: deps.lfsUrls.ttlSeconds,
  });
  return {
    transfer: answer.transfer,
    hash_algo: "sha256",
    objects: answer.objects.map((object) => {
      if ("error" in object) return { oid: object.oid, size: object.size, error: object.error };
      if (!object.action) return { oid: object.oid, size: object.size, authenticated: true };
      const action = answer.transfer === "xet" ? { href: tokenRoute, header: session } : basic(object.oid);
      return { oid: object.oid, size: object.size, authenticated: true, actions: { [answer.operation]: action } };
    }),
  };
}
