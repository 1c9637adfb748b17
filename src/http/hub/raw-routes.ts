/**
 * `HEAD` and `GET /{prefix}{ns}/{name}/raw/{rev}/{path}`: the git blob of a file, as the Hub's
 * `raw` serves it. An inline file's blob is its bytes; a Xet-stored file's is its Git LFS
 * pointer (`version …\noid sha256:…\nsize …\n`), whose id is the file's `oid` in tree
 * listings. `@huggingface/hub`'s `fileExists` asks here (HEAD), and `downloadFile` /
 * `fileDownloadInfo` with `raw: true`. A single `Range` is honoured, as on `resolve`.
 */
import type { Readable } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { lfsPointer } from "../../format/git.js";
import { HubError } from "../../hub/errors.js";
import type { HubRepositories } from "../../hub/repositories.js";
import { blobKeyFromHex, type BlobStore } from "../../storage/blob-store.js";
import { addressOf, revisionAndPath, FILE_URL_PREFIXES } from "./address.js";
import { callerOfRequest, type HubRouteDeps } from "./repo-routes.js";
import { REPOSITORY_CONTENT_HEADERS, requestedRange } from "./resolve-routes.js";

export interface HubRawRouteDeps extends HubRouteDeps {
  repos: HubRepositories;
  blobs: BlobStore;
}

interface RawParams {
  namespace: string;
  name: string;
}

/** The blob a raw URL names: its id, size and a reader of a byte range of it. */
interface RawBlob {
  commitOid: string;
  oid: string;
  size: number;
  read(offset: number, length: number): Promise<Buffer | Readable>;
}

export async function rawRoutes(app: FastifyInstance, deps: HubRawRouteDeps): Promise<void> {
  const find = async (request: FastifyRequest<{ Params: RawParams }>, plural: string): Promise<RawBlob> => {
    const caller = await callerOfRequest(deps, request);
    const repo = await deps.repos.readable(caller, addressOf(plural, request.params.namespace, request.params.name));
    const { revision, path } = revisionAndPath(request, plural === "models" ? 4 : 5);
    const { commit } = await deps.repos.resolve(repo, revision);
    if (path === "") throw new HubError(400, "the URL names no file after the revision");
    const file = await deps.repos.fileAt(repo, commit, path);
    if (file.xetHash !== null) {
      const pointer = Buffer.from(lfsPointer(file.sha256, file.size));
      return { commitOid: commit.oid, oid: file.oid, size: pointer.length, read: async (offset, length) => pointer.subarray(offset, offset + length) };
    }
    return {
      commitOid: commit.oid,
      oid: file.oid,
      size: file.size,
      read: (offset, length) => deps.blobs.read(blobKeyFromHex("inline", file.sha256), { offset, length }),
    };
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
    app.head<{ Params: RawParams }>(url, handler);
    app.get<{ Params: RawParams }>(url, { exposeHeadRoute: false }, handler);
  }
}
