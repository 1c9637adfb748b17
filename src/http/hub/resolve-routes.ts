/**
 * `HEAD` and `GET /{prefix}{ns}/{name}/resolve/{rev}/{path}`: a file of a revision.
 *
 * HEAD tells Hugging Face clients what the file is: the commit (`X-Repo-Commit`), its ETag
 * (git blob id of inline files, SHA-256 of Xet-stored ones, as on the Hub), its size, and for
 * Xet-stored files the Xet hash and the read-token route through which `hf_xet` downloads it
 * itself. GET sends the bytes — inline files from the blob store, Xet-stored ones
 * reconstructed by the server from their xorbs — so curl, browsers and clients without Xet
 * work too; a single `Range` is honoured (206, or 416 with the size). A GET of a Xet-stored file
 * that accepts `application/vnd.xet-fileinfo+json` gets the file's Xet description as JSON
 * instead of its bytes (what `@huggingface/hub` asks for); answers vary with `Accept`.
 *
 * A Xet-stored file's bytes are written straight to the socket (`FileBody.writeTo`), not piped
 * as a stream through `reply.send`: that lets its span buffers go back to their pool once
 * written instead of every uncompressed chunk being copied, and sends ~1 MiB per system call
 * instead of one per chunk. Its first chunk is verified before the reply is taken over, so a
 * file already damaged there still gets an error answer; later damage cuts the response short.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { halfOpenByteRange, type HalfOpenByteRange } from "../../format/ranges.js";
import { HubError } from "../../hub/errors.js";
import type { CommitRecord, Repo, TreeFileEntry } from "../../hub/records.js";
import { parseRangeHeader, ReconstructionError, resolveFileRange } from "../../cas/reconstruction.js";
import { sendHijacked } from "../hijacked-body.js";
import * as wire from "../../wire/hub.js";
import { addressOf, PLURAL_BY_REPO_TYPE, revisionAndPath, FILE_URL_PREFIXES } from "./address.js";
import { repoOfRequest, type HubAccess } from "./caller.js";
import type { HubRouteDeps } from "./repo-routes.js";

type ResolveParams = wire.FileUrlParams;

interface Resolved {
  repo: Repo;
  commit: CommitRecord;
  path: string;
  file: TreeFileEntry;
}

export async function resolveRoutes(app: FastifyInstance, deps: HubRouteDeps): Promise<void> {
  const find = async (request: FastifyRequest<{ Params: ResolveParams }>, plural: string, reply: FastifyReply): Promise<Resolved> => {
    // `/{ns}/{name}/resolve/{rev}` for models, one segment more for `/datasets/…` and `/spaces/…`.
    const revisionSegment = plural === "models" ? 4 : 5;
    const repo = repoOfRequest(request);
    const { revision, path } = revisionAndPath(request, revisionSegment);
    const { commit } = await deps.hub.repos.resolve(repo, revision);
    if (path === "") throw new HubError(400, "the URL names no file after the revision");
    const file = await deps.hub.history.fileAt(repo, commit, path);
    describe(reply, deps.publicUrl(request), repo, commit, file);
    return { repo, commit, path, file };
  };

  for (const [prefix, plural] of FILE_URL_PREFIXES) {
    const url = `${prefix}/:namespace/:name/resolve/*`;
    // The web interface's signed download links are accepted here instead of a token.
    const hubAccess: HubAccess = { repo: "read", address: (params) => addressOf(plural, params.namespace, params.name), downloadLinks: true };
    const options = { config: { hubAccess }, schema: { params: wire.FileUrlParams } };
    app.head<{ Params: ResolveParams }>(url, options, async (request, reply) => {
      await find(request, plural, reply);
      return reply.send();
    });
    app.get<{ Params: ResolveParams }>(url, { ...options, exposeHeadRoute: false }, async (request, reply) => {
      const { repo, commit, path, file } = await find(request, plural, reply);
      if (file.xetHash !== null && acceptsXetFileInfo(request.headers.accept))
        return sendXetFileInfo(reply, deps.publicUrl(request), repo, commit, file, file.xetHash);
      const range = requestedRange(request.headers.range, file.size);
      if (range === "unsatisfiable") {
        return reply.code(416).header("content-range", `bytes */${file.size}`).header("content-length", "0").send();
      }
      const whole = range === null;
      const span = range ?? halfOpenByteRange(0, file.size);
      if (!whole) reply.code(206).header("content-range", `bytes ${span.start}-${span.end - 1}/${file.size}`);
      reply.header("content-length", String(span.end - span.start));
      if (span.end === span.start) return reply.send();
      // A mirrored repository's file castor does not hold yet: streamed while it is fetched (cut short, never completed, if that fails).
      const mirrored = await deps.hub.files.mirrored(repo, commit, path, file, span);
      if (mirrored !== null) return reply.send(mirrored);
      if (file.xetHash === null) {
        return reply.send(await deps.hub.files.readInline(file, span.start, span.end - span.start));
      }
      const body = await deps.hub.files.openXet(file, span);
      return sendHijacked(app, request, reply, {
        write: (out) => body.writeTo(out),
        close: () => body.close(),
        failure: "resolve aborted: the Xet file could not be reconstructed",
      });
    });
  }
}

/**
 * Headers of every answer carrying a repository's content (`resolve`, `raw`). Users' files are
 * served from the origin of the web interface, which keeps its hub token in sessionStorage:
 * none may act as a page or a script of that origin. `nosniff` keeps a browser to the
 * `application/octet-stream` the routes declare (no file runs as a script or renders as HTML by
 * its looks), and the sandbox makes a file a browser renders anyway an opaque origin without
 * scripts, forms or plugins. Download clients read neither.
 */
export const REPOSITORY_CONTENT_HEADERS: Readonly<Record<string, string>> = {
  "x-content-type-options": "nosniff",
  "content-security-policy": "default-src 'none'; sandbox",
};

/** The headers HEAD and GET share. */
function describe(reply: FastifyReply, base: string, repo: Repo, commit: CommitRecord, file: TreeFileEntry): void {
  reply.headers(REPOSITORY_CONTENT_HEADERS);
  reply.headers({
    "x-repo-commit": commit.oid,
    "accept-ranges": "bytes",
    "content-type": "application/octet-stream",
    "content-length": String(file.size),
    // Stable per content; revalidation costs a HEAD, which is all clients do.
    "cache-control": "private, max-age=0, must-revalidate",
    "x-download-counter": "0",
    // Xet files answer `Accept: application/vnd.xet-fileinfo+json` with JSON instead of their bytes.
    vary: "Accept",
  });
  if (file.xetHash === null) {
    reply.header("etag", `"${file.oid}"`);
    return;
  }
  const { refreshUrl, reconstructionUrl } = xetUrls(base, repo, commit, file.xetHash);
  reply.headers({
    etag: `"${file.sha256}"`,
    "x-linked-etag": `"${file.sha256}"`,
    "x-linked-size": String(file.size),
    "x-xet-hash": file.xetHash,
    link: `<${refreshUrl}>; rel="xet-auth", <${reconstructionUrl}>; rel="xet-reconstruction-info"`,
  });
}

/** Where a Xet file's read token (at the commit) and its reconstruction are asked for. */
function xetUrls(base: string, repo: Repo, commit: CommitRecord, xetHash: string): { refreshUrl: string; reconstructionUrl: string } {
  return {
    refreshUrl: `${base}/api/${PLURAL_BY_REPO_TYPE[repo.type]}/${repo.name}/xet-read-token/${commit.oid}`,
    reconstructionUrl: `${base}/v1/reconstructions/${xetHash}`,
  };
}

const XET_FILE_INFO_TYPE = "application/vnd.xet-fileinfo+json";

function acceptsXetFileInfo(accept: string | undefined): boolean {
  return accept?.toLowerCase().includes(XET_FILE_INFO_TYPE) === true;
}

/**
 * A Xet file described instead of sent, for clients that download through Xet themselves
 * (`@huggingface/hub`'s fileDownloadInfo / downloadFile ask this way, with `Range: bytes=0-0`,
 * which is ignored here): 200 with the HEAD's headers and the same facts as JSON.
 */
function sendXetFileInfo(reply: FastifyReply, base: string, repo: Repo, commit: CommitRecord, file: TreeFileEntry, xetHash: string) {
  const { refreshUrl, reconstructionUrl } = xetUrls(base, repo, commit, xetHash);
  reply.removeHeader("content-length");
  reply.removeHeader("accept-ranges");
  const info: wire.XetFileInfo = { hash: xetHash, size: file.size, etag: file.sha256, refreshUrl, reconstructionUrl };
  return reply.header("content-type", XET_FILE_INFO_TYPE).send(JSON.stringify(info));
}

/**
 * The range a `Range` header asks for: null for the whole file (no header, or one this route
 * does not serve partially — several ranges, another unit — which HTTP lets it ignore).
 */
export function requestedRange(header: string | undefined, size: number): HalfOpenByteRange | null | "unsatisfiable" {
  if (header === undefined) return null;
  try {
    return resolveFileRange(parseRangeHeader(header), size);
  } catch (err) {
    if (err instanceof ReconstructionError && err.code === "unsatisfiable_range") return "unsatisfiable";
    if (err instanceof ReconstructionError && err.code === "malformed_range") return null;
    throw err;
  }
}
