/**
 * git's smart HTTP protocol (gitprotocol-http) at a repository's URL, `/{prefix}{ns}/{name}`
 * with or without `.git` (prefix: none for models, `datasets/`, `spaces/`):
 *
 * - `GET …/info/refs?service=git-upload-pack` (and `git-receive-pack`): the advertisement;
 * - `POST …/git-upload-pack`: a fetch request (src/git/upload-pack.ts);
 * - `POST …/git-receive-pack`: a push (src/git/receive-pack.ts).
 *
 * Parse, call, render: the engines speak the protocol, the hub decides access. Credentials are
 * a hub token as the password of basic auth, or a bearer token; a request that needs one and
 * has none is answered 401 with a `WWW-Authenticate: Basic` challenge, which makes git ask its
 * credential helper (or the user). HTTP errors carry their message as `text/plain`, which git
 * prints as `remote: …`; refusals inside the protocol are `ERR` packets ("remote error: …").
 */
import { gunzipSync } from "node:zlib";
import { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { FLUSH_PKT, pktLine } from "../format/pkt-line.js";
import { errorPacket, GitProtocolError } from "../git/upload-pack.js";
import * as uploadPack from "../git/upload-pack.js";
import { advertiseReceivePack, MAX_PUSH_COMMANDS, serveReceivePack } from "../git/receive-pack.js";
import type { GitObjectSource, GitPushTarget } from "../git/source.js";
import type { GitLimits } from "../config.js";
import type { Caller } from "../hub/access.js";
import { HubError } from "../hub/errors.js";
import type { RepoAddress } from "../hub/repositories.js";
import { hubTokenOf } from "./cas-auth.js";
import { HttpError } from "./errors.js";
import { hubTokenAccepted } from "./hub-limits.js";
import { addressOf, FILE_URL_PREFIXES } from "./hub/address.js";
import { acceptRawBodies, bodyPieces, settleUnreadBody } from "./raw-body.js";
import { limitConcurrentUploads, type UploadSlots } from "./upload-limit.js";

export interface GitRouteDeps {
  /** The caller a hub token's secret names (the hub's `tokens.authenticate`: 401 for an unusable one). */
  authenticate: (secret: string | undefined) => Promise<Caller>;
  /** The repository as git objects, for a caller who may read it (HubError otherwise). */
  readable: (caller: Caller, address: RepoAddress) => Promise<GitObjectSource>;
  /** The repository to push to, for a caller who may write it (HubError otherwise). */
  writable: (caller: Caller, address: RepoAddress) => Promise<GitPushTarget>;
  /** The agent capability. */
  agent: string;
  limits: GitLimits;
  /** Largest object a push may bring (`config.hubInlineMaxBytes`: larger files go through Git LFS). */
  maxObjectBytes: number;
  /** Where a push's objects wait while they are checked. */
  spoolDir: string;
  /** The node's uploads in progress (CASTOR_MAX_CONCURRENT_UPLOADS): a push takes one. */
  uploadSlots: UploadSlots;
}

interface RepoParams {
  namespace: string;
  repoGit: string;
}

/** A fetch request is want/have lines: a few MiB holds tens of thousands of them. */
const MAX_UPLOAD_PACK_REQUEST_BYTES = 8 * 1024 * 1024;

const NO_CACHE = { "cache-control": "no-cache, max-age=0, must-revalidate", pragma: "no-cache" };

export async function gitRoutes(app: FastifyInstance, deps: GitRouteDeps): Promise<void> {
  acceptRawBodies(app);
  limitConcurrentUploads(app, deps.uploadSlots);
  // git prints a text/plain error body line by line as "remote: …"; a JSON body it would not show.
  app.setErrorHandler(async (error, _request, reply) => {
    if (error instanceof HubError) {
      if (error.status === 401) reply.header("www-authenticate", 'Basic realm="castor"');
      return reply.code(error.status).type("text/plain; charset=utf-8").send(`${error.message}\n`);
    }
    if (error instanceof HttpError && error.statusCode < 500) {
      return reply.code(error.statusCode).headers(error.headers).type("text/plain; charset=utf-8").send(`${error.message}\n`);
    }
    throw error;
  });

  for (const [prefix, plural] of FILE_URL_PREFIXES) {
    const base = `${prefix}/:namespace/:repoGit`;
    const addressOfRequest = (request: FastifyRequest<{ Params: RepoParams }>) =>
      addressOf(plural, request.params.namespace, request.params.repoGit.replace(/\.git$/, ""));

    app.get<{ Params: RepoParams; Querystring: { service?: string } }>(`${base}/info/refs`, async (request, reply) => {
      const service = request.query.service;
      if (service !== "git-upload-pack" && service !== "git-receive-pack") {
        throw new HttpError(403, "castor serves git's smart HTTP protocol only: use git 1.6.6 or newer (info/refs?service=git-upload-pack)");
      }
      const caller = await callerOf(deps, request);
      const address = addressOfRequest(request);
      const header = Buffer.concat([pktLine(`# service=${service}\n`), FLUSH_PKT]);
      if (service === "git-receive-pack") {
        const target = await deps.writable(caller, address);
        reply.headers(NO_CACHE).type(`application/x-${service}-advertisement`);
        return Buffer.concat([header, await advertiseReceivePack(target, deps)]);
      }
      const source = await deps.readable(caller, address);
      reply.headers(NO_CACHE).type(`application/x-${service}-advertisement`);
      if (wantsProtocolV2(request)) return uploadPack.advertiseV2(deps);
      return Buffer.concat([header, await uploadPack.advertiseV0(source, deps)]);
    });

    app.post<{ Params: RepoParams }>(`${base}/git-upload-pack`, { bodyLimit: MAX_UPLOAD_PACK_REQUEST_BYTES }, async (request, reply) => {
      let source: GitObjectSource;
      try {
        source = await deps.readable(await callerOf(deps, request), addressOfRequest(request));
      } catch (error) {
        throw settleUnreadBody(request, error);
      }
      const body = await requestBody(request);
      reply.headers(NO_CACHE).type("application/x-git-upload-pack-result");
      const options = { agent: deps.agent, maxObjects: deps.limits.maxObjects };
      let answer: uploadPack.GitAnswer;
      try {
        answer = wantsProtocolV2(request) ? await uploadPack.serveV2(source, body, options) : await uploadPack.serveV0(source, body, options);
      } catch (error) {
        if (error instanceof GitProtocolError) return errorPacket(error.message);
        throw error;
      }
      return reply.send(Readable.from(answer, { objectMode: false }));
    });

    // A push: checked for write access before a byte of its pack is read.
    const pushLimit = deps.limits.maxPackBytes + MAX_PUSH_COMMANDS * PKT_COMMAND_BYTES;
    app.post<{ Params: RepoParams }>(`${base}/git-receive-pack`, { bodyLimit: pushLimit, config: { upload: true } }, async (request, reply) => {
      let target: GitPushTarget;
      try {
        target = await deps.writable(await callerOf(deps, request), addressOfRequest(request));
      } catch (error) {
        throw settleUnreadBody(request, error);
      }
      const encoding = request.headers["content-encoding"];
      if (encoding !== undefined && encoding !== "identity")
        throw settleUnreadBody(request, new HttpError(415, "send the push uncompressed (no Content-Encoding)"));
      reply.headers(NO_CACHE).type("application/x-git-receive-pack-result");
      const limits = {
        maxPackBytes: deps.limits.maxPackBytes,
        maxObjects: deps.limits.maxObjects,
        maxDeltaDepth: deps.limits.maxDeltaDepth,
        maxObjectBytes: deps.maxObjectBytes,
      };
      try {
        const answer = await serveReceivePack(target, bodyPieces(request), { agent: deps.agent, limits, spoolDir: deps.spoolDir });
        return Buffer.concat([...answer]);
      } catch (error) {
        if (error instanceof GitProtocolError) return errorPacket(error.message);
        throw error;
      } finally {
        // A refused pack is not read to its end; the rest is read and dropped while the answer goes out.
        settleUnreadBody(request, null);
      }
    });
  }
}

/** The longest command line of a push: two ids, a ref name, the capabilities. */
const PKT_COMMAND_BYTES = 1024;

/** The hub caller of the request's credentials; a valid token is remembered by the auth-failure limit. */
async function callerOf(deps: GitRouteDeps, request: FastifyRequest): Promise<Caller> {
  const token = hubTokenOf(request.headers.authorization);
  if (token === null) throw new HubError(401, "malformed Authorization header: give a hub token as the password (any user name), or as a bearer token");
  const caller = await deps.authenticate(token);
  if (caller.kind === "token") hubTokenAccepted(request);
  return caller;
}

/** `Git-Protocol: version=2` (colon-separated parameters, gitprotocol-http). */
function wantsProtocolV2(request: FastifyRequest): boolean {
  const header = request.headers["git-protocol"];
  return typeof header === "string" && header.split(":").includes("version=2");
}

/** The whole request body (bounded by the route), gunzipped when git compressed it. */
async function requestBody(request: FastifyRequest): Promise<Buffer> {
  const pieces: Buffer[] = [];
  for await (const piece of bodyPieces(request)) pieces.push(piece);
  const body = Buffer.concat(pieces);
  const encoding = request.headers["content-encoding"];
  if (encoding === undefined || encoding === "identity") return body;
  if (encoding !== "gzip" && encoding !== "x-gzip")
    throw new HttpError(415, `unsupported Content-Encoding ${JSON.stringify(encoding.slice(0, 40))}: send gzip or none`);
  try {
    return gunzipSync(body, { maxOutputLength: MAX_UPLOAD_PACK_REQUEST_BYTES });
  } catch {
    throw new HttpError(400, `the request body is not valid gzip, or inflates beyond ${MAX_UPLOAD_PACK_REQUEST_BYTES} bytes`);
  }
}
