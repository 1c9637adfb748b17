/**
 * A test upstream for the mirror: a real `castor serve` (its own data dir, users, tokens, public
 * and private repositories) behind a small proxy that answers the way huggingface.co does where
 * castor differs (HUB-API §10), and that a test can steer and watch.
 *
 * Two listeners, like the Hub's two kinds of hosts:
 * - the hub (`hubUrl`, what `CASTOR_UPSTREAM_URL` names): the Hub API, forwarded to castor;
 * - the CDN and CAS host (`casUrl`, the upstream castor's `CASTOR_PUBLIC_URL`, so its `casUrl`
 *   and transfer URLs point here): the Xet CAS and the targets of resolve redirects.
 *
 * Where the proxy answers differently from castor:
 * - `HEAD`/`GET …/resolve/…` of a Xet file: a 302 to the CDN host carrying the metadata headers
 *   (`X-Repo-Commit`, `X-Linked-Etag`, `X-Linked-Size`, `X-Xet-Hash`, `Link … rel="xet-auth"`),
 *   as the Hub answers; a GET of that target streams the bytes (castor's resolve behind it);
 * - `Link` headers castor builds from its public URL (the CDN host) point back at the hub;
 * - gated repositories (`gate`): resolve and the read-token route answer 401 (no token) or 403
 *   (a token not approved) with `X-Error-Code: GatedRepo`; repository info says `gated`;
 * - `rateLimit(n, seconds)`: the next n hub requests answer 429 with `Retry-After`;
 * - `corrupt(true)`: one byte of every body from the CDN/CAS host (xorb ranges, redirected
 *   files) is changed on its way, and so is every inline file's body from resolve;
 * - `slow(ms)` delays every CAS/CDN answer; `holdTransfers()` keeps xorb ranges back until released;
 * - `stopUpstream()` makes every request fail as a stopped hub does (connection refused), while
 *   `startUpstream()` brings it back.
 *
 * Watching: every request (host, method, path without query, status, body bytes sent).
 */
import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CastorClient } from "../../src/client/index.js";
import { runCastor } from "./cli.js";
import { startCastorServer, type ScaleOutBackend, type ServerProcess } from "./server.js";

export interface UpstreamRequest {
  host: "hub" | "cas";
  method: string;
  /** Path without the query. */
  path: string;
  status: number;
  /** Response body bytes sent to the client. */
  bytes: number;
  /** Whether the request carried a hub token (`Authorization: Bearer hf_…`; CAS requests carry CAS tokens instead). */
  hubToken: boolean;
}

export interface UpstreamFile {
  path: string;
  bytes: Uint8Array;
  /** `inline`: carried in the commit (git file); default `xet` (uploaded through Xet). */
  storage?: "xet" | "inline";
}

export interface TestUpstream {
  readonly castor: ServerProcess;
  /** What `CASTOR_UPSTREAM_URL` names. */
  readonly hubUrl: string;
  /** The CAS and CDN host. */
  readonly casUrl: string;
  /** A write token for every repository of the upstream (castor's identity there, when it may see everything). */
  readonly adminToken: string;
  /** Creates a repository (`model:ns/name`); public unless `private`. */
  createRepo(repo: string, options?: { private?: boolean }): Promise<void>;
  /** One commit of `files` to `branch` (default main); the commit id. */
  commit(repo: string, files: UpstreamFile[], options?: { branch?: string; message?: string }): Promise<string>;
  /** Creates a branch or tag at `from` (a revision). */
  createRevision(repo: string, name: string, from: string, kind?: "branch" | "tag"): Promise<void>;
  /** A hub token of the upstream: read access to `namespace` (or `--all-repos` with `all`). */
  token(scope: { namespace: string } | "all", access?: "read" | "write"): Promise<string>;
  /** Makes `repo` gated: only requests carrying one of `approved` tokens may download its files. */
  gate(repo: string, approved: readonly string[]): void;
  rateLimit(count: number, retryAfterSeconds: number): void;
  corrupt(on: boolean): void;
  /** Holds every answer of the CAS/CDN host this long before sending it (a slow upstream). */
  slow(ms: number): void;
  /** Holds the CAS host's xorb range answers (not its reconstructions) until the function returned is called. */
  holdTransfers(): () => void;
  stopUpstream(): void;
  startUpstream(): void;
  requests(from?: number): UpstreamRequest[];
  /** File content the CAS/CDN host sent (xorb ranges and redirected files, not reconstruction answers) from request index `from`. */
  casBytes(from?: number): number;
  stop(): Promise<void>;
}

export interface StartUpstreamOptions {
  scaleOut?: boolean | ScaleOutBackend;
  env?: Record<string, string>;
  /** Run the compiled castor (benchmarks). */
  compiled?: boolean;
}

interface Redirect {
  path: string;
  authorization: string | undefined;
}

export async function startTestUpstream(options: StartUpstreamOptions = {}): Promise<TestUpstream> {
  const log: UpstreamRequest[] = [];
  const gated = new Map<string, Set<string>>();
  const redirects = new Map<string, Redirect>();
  let rateLimited = { count: 0, retryAfter: 0 };
  let corrupting = false;
  let casDelayMs = 0;
  let transfersHeld: Promise<void> | null = null;
  let stopped = false;
  let castor: ServerProcess | null = null;

  const hub = http.createServer((request, response) => handleHub(request, response));
  const cas = http.createServer((request, response) => handleCas(request, response));
  await Promise.all([listen(hub), listen(cas)]);
  const hubUrl = `http://127.0.0.1:${(hub.address() as AddressInfo).port}`;
  const casUrl = `http://127.0.0.1:${(cas.address() as AddressInfo).port}`;

  castor = await startCastorServer({
    scaleOut: options.scaleOut,
    compiled: options.compiled,
    discardOutputOnceReady: options.compiled,
    env: { CASTOR_PUBLIC_URL: casUrl, CASTOR_HUB_RATE_LIMIT: "off", ...options.env },
  });
  const work = await mkdtemp(join(tmpdir(), "castor-upstream-"));
  const admin = async (args: string[]): Promise<string> => {
    const result = await runCastor(args, { env: castor!.settings, timeoutMs: 60_000 });
    if (result.code !== 0) throw new Error(`upstream castor ${args.join(" ")}: ${result.stderr}`);
    return result.stdout;
  };
  const newToken = async (args: string[]): Promise<string> => (await admin(["token", "create", ...args])).trimEnd().split("\n").at(-1)!;
  const adminToken = await newToken(["--user", "upstream-admin", "--all-repos", "--access", "write"]);

  function record(request: IncomingMessage, entry: Omit<UpstreamRequest, "hubToken">): void {
    log.push({ ...entry, hubToken: /^Bearer hf_/.test(request.headers.authorization ?? "") });
  }

  /** Forwards a request to the upstream castor; the response with its status and headers, body unread. */
  function forward(request: IncomingMessage, path: string, headers: http.OutgoingHttpHeaders = {}): Promise<IncomingMessage> {
    const target = new URL(castor!.url);
    return new Promise((resolve, reject) => {
      const outgoing = http.request(
        { host: target.hostname, port: target.port, method: request.method, path, headers: { ...request.headers, host: target.host, ...headers } },
        resolve,
      );
      outgoing.once("error", reject);
      request.pipe(outgoing);
    });
  }

  function refuse(
    response: ServerResponse,
    host: "hub" | "cas",
    request: IncomingMessage,
    status: number,
    headers: Record<string, string>,
    error: string,
  ): void {
    const body = JSON.stringify({ error });
    response.writeHead(status, { "content-type": "application/json", "x-error-message": error, "content-length": Buffer.byteLength(body), ...headers });
    response.end(request.method === "HEAD" ? undefined : body);
    record(request, { host, method: request.method!, path: pathOf(request.url!), status, bytes: request.method === "HEAD" ? 0 : Buffer.byteLength(body) });
  }

  /** Sends an upstream answer on, optionally rewriting headers and corrupting the body. */
  function relay(host: "hub" | "cas", request: IncomingMessage, upstream: IncomingMessage, response: ServerResponse, corrupt: boolean): void {
    const headers = { ...upstream.headers };
    if (typeof headers.link === "string") headers.link = headers.link.replaceAll(casUrl, hubUrl);
    response.writeHead(upstream.statusCode!, headers);
    let bytes = 0;
    let changed = false;
    upstream.on("data", (piece: Buffer) => {
      let out = piece;
      // Byte 100 of the body: past a chunk's 8-byte header, inside its data.
      if (corrupt && !changed && bytes + piece.length > 100) {
        out = Buffer.from(piece);
        out[100 - bytes] ^= 0xff;
        changed = true;
      }
      bytes += out.length;
      response.write(out);
    });
    upstream.once("end", () => {
      response.end();
      record(request, { host, method: request.method!, path: pathOf(request.url!), status: upstream.statusCode!, bytes });
    });
    upstream.once("error", () => response.destroy());
  }

  async function handleHub(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (stopped) return void request.socket.destroy();
    try {
      const path = pathOf(request.url!);
      if (rateLimited.count > 0) {
        rateLimited.count--;
        return refuse(response, "hub", request, 429, { "retry-after": String(rateLimited.retryAfter) }, "Too many requests: slow down");
      }
      const repo = repoOfPath(path);
      const approved = repo === null ? undefined : gated.get(repo);
      if (approved !== undefined && (/\/resolve\//.test(path) || /\/xet-read-token\//.test(path))) {
        const token = bearer(request);
        if (token === null || !approved.has(token)) {
          const message = `Access to ${repo} is restricted. You must have access to it and be authenticated to access it. Please log in.`;
          return refuse(response, "hub", request, token === null ? 401 : 403, { "x-error-code": "GatedRepo" }, message);
        }
      }
      const upstream = await forward(request, request.url!, { "accept-encoding": "identity" });
      const isResolve = /\/resolve\//.test(path);
      if (isResolve && (upstream.statusCode === 200 || upstream.statusCode === 206) && typeof upstream.headers["x-xet-hash"] === "string") {
        // The Hub's way: a redirect to another host, the metadata on the redirect itself.
        upstream.resume();
        const id = createHash("sha256").update(`${path} ${Math.random()}`).digest("hex").slice(0, 24);
        redirects.set(id, { path: request.url!, authorization: request.headers.authorization });
        const pick = (name: string) => (typeof upstream.headers[name] === "string" ? { [name]: upstream.headers[name] as string } : {});
        response.writeHead(302, {
          location: `${casUrl}/cdn/${id}`,
          ...pick("x-repo-commit"),
          ...pick("x-linked-etag"),
          ...pick("x-linked-size"),
          ...pick("x-xet-hash"),
          ...pick("etag"),
          link: String(upstream.headers.link ?? "").replaceAll(casUrl, hubUrl),
          "content-length": "0",
        });
        response.end();
        record(request, { host: "hub", method: request.method!, path, status: 302, bytes: 0 });
        return;
      }
      if (
        repo !== null &&
        approved !== undefined &&
        request.method === "GET" &&
        /^\/api\/(models|datasets|spaces)\/[^/]+\/[^/]+(\/revision\/[^/]+)?$/.test(path) &&
        upstream.statusCode === 200
      ) {
        // Repository info of a gated repository says so.
        const chunks: Buffer[] = [];
        for await (const piece of upstream) chunks.push(piece as Buffer);
        const body = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.concat(chunks).toString()), gated: "manual" }));
        response.writeHead(200, { "content-type": "application/json", "content-length": body.length });
        response.end(body);
        record(request, { host: "hub", method: "GET", path, status: 200, bytes: body.length });
        return;
      }
      relay("hub", request, upstream, response, corrupting && isResolve && request.method === "GET");
    } catch {
      if (!response.headersSent) refuse(response, "hub", request, 502, {}, "the upstream castor did not answer");
      else response.destroy();
    }
  }

  async function handleCas(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (stopped) return void request.socket.destroy();
    if (casDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, casDelayMs));
    try {
      const path = pathOf(request.url!);
      const cdn = /^\/cdn\/([0-9a-f]+)$/.exec(path);
      if (cdn !== null) {
        const redirect = redirects.get(cdn[1]);
        if (redirect === undefined) return refuse(response, "cas", request, 404, {}, "no such redirect");
        const headers: http.OutgoingHttpHeaders = { "accept-encoding": "identity" };
        if (redirect.authorization !== undefined) headers.authorization = redirect.authorization;
        const upstream = await forward(request, redirect.path, headers);
        return relay("cas", request, upstream, response, corrupting && request.method === "GET");
      }
      if (path.startsWith("/v1/transfer/") && transfersHeld !== null) await transfersHeld;
      const upstream = await forward(request, request.url!);
      relay("cas", request, upstream, response, corrupting && request.method === "GET" && path.startsWith("/v1/transfer/"));
    } catch {
      if (!response.headersSent) refuse(response, "cas", request, 502, {}, "the upstream castor did not answer");
      else response.destroy();
    }
  }

  return {
    castor,
    hubUrl,
    casUrl,
    adminToken,
    async createRepo(repo, createOptions = {}) {
      const [type, name] = repo.split(":");
      await admin(["repo", "create", type, name, ...(createOptions.private === false || createOptions.private === undefined ? ["--public"] : [])]);
    },
    async commit(repo, files, commitOptions = {}) {
      const client = new CastorClient({ endpoint: castor!.url, hubToken: adminToken, repo, revision: commitOptions.branch ?? "main" });
      const xet = files.filter((file) => (file.storage ?? "xet") === "xet");
      const dir = await mkdtemp(join(work, "files-"));
      const paths = await Promise.all(
        xet.map(async (file, i) => {
          const local = join(dir, String(i));
          await writeFile(local, file.bytes);
          return local;
        }),
      );
      // With a shard cache, as users' clients upload: a file sharing chunks with an earlier
      // upload names that upload's xorbs for them.
      const uploaded = xet.length === 0 ? [] : (await client.upload(paths, { cacheDir: join(work, "shard-cache") })).files;
      const operations = [
        ...uploaded.map((file, i) => ({ kind: "lfsFile" as const, path: xet[i].path, sha256: file.sha256, size: file.size })),
        ...files.filter((file) => file.storage === "inline").map((file) => ({ kind: "file" as const, path: file.path, content: file.bytes })),
      ];
      const result = await client.commit({ summary: commitOptions.message ?? `Add ${files.length} file(s)`, operations });
      await rm(dir, { recursive: true, force: true });
      return result.commitOid;
    },
    async createRevision(repo, name, from, kind = "branch") {
      const [type, repoName] = repo.split(":");
      const route = kind === "branch" ? `branch/${encodeURIComponent(name)}` : `tag/${encodeURIComponent(from)}`;
      const response = await fetch(`${castor!.url}/api/${type}s/${repoName}/${route}`, {
        method: "POST",
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify(kind === "branch" ? { startingPoint: from } : { tag: name }),
      });
      if (response.status !== 200) throw new Error(`creating ${kind} ${name}: ${response.status} ${await response.text()}`);
    },
    async token(scope, access = "read") {
      if (scope === "all") return newToken(["--user", "upstream-reader", "--all-repos", "--access", access]);
      return newToken(["--user", scope.namespace, "--namespace", scope.namespace, "--access", access]);
    },
    gate(repo, approved) {
      gated.set(repo, new Set(approved));
    },
    rateLimit(count, retryAfterSeconds) {
      rateLimited = { count, retryAfter: retryAfterSeconds };
    },
    corrupt(on) {
      corrupting = on;
    },
    slow(ms) {
      casDelayMs = ms;
    },
    holdTransfers() {
      let release = () => {};
      transfersHeld = new Promise((resolve) => {
        release = () => {
          transfersHeld = null;
          resolve();
        };
      });
      return release;
    },
    stopUpstream() {
      stopped = true;
      hub.closeAllConnections();
      cas.closeAllConnections();
    },
    startUpstream() {
      stopped = false;
    },
    requests(from = 0) {
      return log.slice(from);
    },
    casBytes(from = 0) {
      const isContent = (entry: UpstreamRequest) => entry.host === "cas" && entry.method === "GET" && /^\/(v1\/transfer|cdn)\//.test(entry.path);
      return log.slice(from).reduce((sum, entry) => sum + (isContent(entry) ? entry.bytes : 0), 0);
    },
    async stop() {
      hub.closeAllConnections();
      cas.closeAllConnections();
      await Promise.all([new Promise((resolve) => hub.close(resolve)), new Promise((resolve) => cas.close(resolve))]);
      await castor?.stop();
      await rm(work, { recursive: true, force: true });
    },
  };
}

function listen(server: http.Server): Promise<void> {
  return new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
}

function pathOf(url: string): string {
  const q = url.indexOf("?");
  return q === -1 ? url : url.slice(0, q);
}

function bearer(request: IncomingMessage): string | null {
  const match = /^Bearer (.+)$/.exec(request.headers.authorization ?? "");
  return match === null ? null : match[1];
}

/** `type:ns/name` of a hub path (API or resolve), or null. */
function repoOfPath(path: string): string | null {
  const api = /^\/api\/(models|datasets|spaces)\/([^/]+)\/([^/]+)/.exec(path);
  if (api !== null) return `${api[1].slice(0, -1)}:${decodeURIComponent(api[2])}/${decodeURIComponent(api[3])}`;
  const file = /^\/(?:(datasets|spaces)\/)?([^/]+)\/([^/]+)\/resolve\//.exec(path);
  if (file !== null) return `${file[1] === undefined ? "model" : file[1].slice(0, -1)}:${decodeURIComponent(file[2])}/${decodeURIComponent(file[3])}`;
  return null;
}
