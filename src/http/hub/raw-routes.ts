/**
 * `HEAD` and `GET /{prefix}{ns}/{name}/raw/{rev}/{path}`: the git blob of a file, as the Hub's
 * `raw` serves it. An inline file's blob is its bytes; a Xet-stored file's is its Git LFS
 * pointer (`version …\noid sha256:…\nsize …\n`), whose id is the file's `oid` in tree
 * listings. `@huggingface/hub`'s `fileExists` asks here (HEAD), and `downloadFile` /
 * `fileDownloadInfo` with `raw: true`. A single `Range` is honoured, as on `resolve`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { HubError } from "../../hub/errors.js";
import type { GitBlob } from "../../hub/files.js";
import * as wire from "../../wire/hub.js";
import { addressOf, revisionAndPath, FILE_URL_PREFIXES } from "./address.js";
import { repoOfRequest, type HubAccess } from "./caller.js";
import type { HubRouteDeps } from "./repo-routes.js";
import { REPOSITORY_CONTENT_HEADERS, requestedRange } from "./resolve-routes.js";

type RawParams = wire.FileUrlParams;

/** The blob a raw URL names, and the commit it was found at. */
type RawBlob = GitBlob & { commitOid: string };

export async function rawRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  const find = async (request: FastifyRequest<{ Params: RawParams }>, plural: string): Promise<RawBlob> => {
    const repo = repoOfRequest(request);
    const { revision, path } = revisionAndPath(request, plural === "models" ? 4 : 5);
    const { commit } = await deps.hub.repos.resolve(repo, revision);
    if (path === "") throw new HubError(400, "the URL names no file after the revision");
    const file = await deps.hub.history.fileAt(repo, commit, path);
    return { ...deps.hub.files.gitBlob(file, { repo, commit, path }), commitOid: commit.oid };
  };

  for (const [prefix, plural] of FILE_URL_PREFIXES) {
    const url = `${prefix}/:namespace/:name/raw/*`;
    const handler = async (request: FastifyRequest<{ Params: RawParams }>, reply: FastifyReply) => {
      const blob = await find(request, plural);
      reply.headers(REPOSITORY_CONTENT_HEADERS);
      reply.headers({
        "x-repo-commit": blob.commitOid,
        etag: `"${blob.oid}"`,
        "accept-ranges": "bytes",
        "content-type": "application/octet-stream",
        "cache-control": "private, max-age=0, must-revalidate",
      });
      const range = requestedRange(request.headers.range, blob.size);
      if (range === "unsatisfiable") {
        return reply.code(416).header("content-range", `bytes */${blob.size}`).header("content-length", "0").send();
      }
      const span = range ?? { start: 0, end: blob.size };
      if (range !== null) reply.code(206).header("content-range", `bytes ${span.start}-${span.end - 1}/${blob.size}`);
      reply.header("content-length", String(span.end - span.start));
      if (request.method === "HEAD" || span.end === span.start) return reply.send();
      return reply.send(await blob.read(span.start, span.end - span.start));
    };
    const hubAccess: HubAccess = { repo: "read", address: (params) => addressOf(plural, params.namespace, params.name) };
    const options = { config: { hubAccess }, schema: { params: wire.FileUrlParams } };
    app.head<{ Params: RawParams }>(url, options, handler);
    app.get<{ Params: RawParams }>(url, { ...options, exposeHeadRoute: false }, handler);
  }
}
