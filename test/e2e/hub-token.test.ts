/**
 * End to end against a real `castor serve` process: the hub token operation, the tokens it
 * issues, start-up failures, token expiry, graceful shutdown and what reaches the log.
 * Repositories and hub tokens are created through the real CLI and through the hub service
 * on the same data dir, as an operator would next to a running server.
 */
import assert from "node:assert/strict";
import { createPublicKey, type KeyObject } from "node:crypto";
import { createServer } from "node:net";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CasTokenVerifier, type CasTokenClaims } from "../../src/auth/cas-token.js";
import { keysDir, SIGNING_KEY_FILE_NAME } from "../../src/auth/keys.js";
import { loadConfig } from "../../src/config.js";
import { createHttpApp } from "../../src/http/app.js";
import { casAccessOf, registerCasAuth } from "../../src/http/cas-auth.js";
import { createLogger } from "../../src/http/logging.js";
import { OperatorHub } from "../helpers/operator.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import { runCastor } from "../helpers/cli.js";
import { openSocket, readUntilClosed, unreadByServer } from "../helpers/raw-socket.js";
import { serveExpectingFailure, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { until } from "../helpers/wait.js";

interface TokenAnswer {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

async function requestToken(server: ServerProcess, path: string, hubToken?: string): Promise<TokenAnswer> {
  const response = await fetch(`${server.url}${path}`, { headers: hubToken === undefined ? {} : { authorization: `Bearer ${hubToken}` } });
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  assert.ok(response.headers.get("x-request-id"), "every answer carries X-Request-Id");
  return { status: response.status, headers: response.headers, body: (await response.json()) as Record<string, unknown> };
}

/** The public half of the signing key in the data dir: all another node needs to verify. */
async function publicKeyOf(dataDir: string): Promise<KeyObject> {
  return createPublicKey(await readFile(join(keysDir(dataDir), SIGNING_KEY_FILE_NAME), "utf8"));
}

async function createToken(dataDir: string, repo: string, access: "read" | "write"): Promise<string> {
  const result = await runCastor(["token", "create", "--repo", repo, "--access", access], { env: { CASTOR_DATA_DIR: dataDir } });
  assert.equal(result.code, 0, result.stderr);
  const lastLine = result.stdout.trimEnd().split("\n").at(-1) ?? "";
  assert.match(lastLine, /^hf_[A-Za-z0-9_-]+$/);
  return lastLine;
}

async function runOk(dataDir: string, args: string[]): Promise<void> {
  const result = await runCastor(args, { env: { CASTOR_DATA_DIR: dataDir } });
  assert.equal(result.code, 0, result.stderr);
}

describe("castor serve: hub token operation", () => {
  let dataDir: string;
  let server: ServerProcess;
  let verifier: CasTokenVerifier;
  const hubTokens = { write: "", read: "", all: "" };
  /** Every secret that went over the wire, to look for in the log afterwards. */
  const secretsSeen = new Set<string>();

  before(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "castor-e2e-hub-"));
    await runOk(dataDir, ["repo", "create", "model", "alice/bert"]);
    hubTokens.write = await createToken(dataDir, "model:alice/bert", "write");

    const store = await openMetadataStore(loadConfig({ CASTOR_DATA_DIR: dataDir }));
    try {
      const hub = new OperatorHub(store);
      await hub.createRepo("dataset", "alice/corpus");
      await hub.createRepo("space", "alice/demo");
      await hub.createRevision("model:alice/bert", "feature/x", "branch");
      hubTokens.read = (
        await hub.createToken({ repos: ["model:alice/bert", "dataset:alice/corpus", "space:alice/demo"], access: "read", expiresAt: null })
      ).secret;
      hubTokens.all = (await hub.createToken({ repos: "all", access: "write", expiresAt: null })).secret;
    } finally {
      await store.close();
    }
    Object.values(hubTokens).forEach((secret) => {
      secretsSeen.add(secret);
    });

    server = await startCastorServer({ dataDir });
    verifier = new CasTokenVerifier(await publicKeyOf(dataDir));
  });

  after(async () => {
    await server?.stop();
    await rm(dataDir, { recursive: true, force: true });
  });

  async function grant(path: string, hubToken: string, expected: Pick<CasTokenClaims, "rev" | "scope"> & { type: string; id: string }) {
    const answer = await requestToken(server, path, hubToken);
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    const { accessToken, exp, casUrl } = answer.body as { accessToken: string; exp: number; casUrl: string };
    secretsSeen.add(accessToken);
    assert.deepEqual(Object.keys(answer.body).sort(), ["accessToken", "casUrl", "exp"]);
    assert.equal(casUrl, server.publicUrl);
    assert.equal(answer.headers.get("x-xet-access-token"), accessToken);
    assert.equal(answer.headers.get("x-xet-token-expiration"), String(exp));
    assert.equal(answer.headers.get("x-xet-cas-url"), casUrl);

    const claims = await verifier.verify(accessToken);
    assert.deepEqual(claims.repo, { type: expected.type, id: expected.id });
    assert.equal(claims.rev, expected.rev);
    assert.equal(claims.scope, expected.scope);
    assert.equal(claims.exp, exp);
    assert.equal(claims.exp - claims.iat, 3600, "the default CASTOR_TOKEN_TTL");
    assert.ok(Math.abs(claims.iat - Date.now() / 1000) < 60);
    return { accessToken, exp };
  }

  it("listens on the port the OS picked and hands that URL out as casUrl", async () => {
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.notEqual(server.url, "http://127.0.0.1:0");
    assert.equal(server.publicUrl, server.url);
    for (const probe of ["/healthz", "/readyz"]) {
      const response = await fetch(`${server.url}${probe}`);
      assert.equal(response.status, 200);
      assert.deepEqual(await response.json(), { status: "ok" });
    }
  });

  for (const [segment, type, id] of [
    ["models", "model", "alice/bert"],
    ["datasets", "dataset", "alice/corpus"],
    ["spaces", "space", "alice/demo"],
  ] as const) {
    it(`issues read and write tokens for a ${type}, at both spellings`, async () => {
      await grant(`/api/${segment}/${id}/cas-read-token/main`, hubTokens.read, { type, id, rev: "main", scope: "read" });
      await grant(`/api/${segment}/${id}/xet-read-token/main`, hubTokens.read, { type, id, rev: "main", scope: "read" });
      await grant(`/api/${segment}/${id}/cas-write-token/main`, hubTokens.all, { type, id, rev: "main", scope: "write" });
      await grant(`/api/${segment}/${id}/xet-write-token/main?create_pr=1`, hubTokens.all, { type, id, rev: "main", scope: "write" });
    });
  }

  it("takes a revision containing '/', URL-encoded or raw", async () => {
    const expected = { type: "model", id: "alice/bert", rev: "feature/x", scope: "write" } as const;
    await grant("/api/models/alice/bert/xet-write-token/feature%2Fx", hubTokens.write, expected);
    await grant("/api/models/alice/bert/cas-write-token/feature/x", hubTokens.write, expected);
  });

  it("refreshes: calling again gives a new token expiring no earlier", async () => {
    const first = await grant("/api/models/alice/bert/xet-read-token/main", hubTokens.write, { type: "model", id: "alice/bert", rev: "main", scope: "read" });
    const second = await grant("/api/models/alice/bert/xet-read-token/main", hubTokens.write, { type: "model", id: "alice/bert", rev: "main", scope: "read" });
    assert.notEqual(second.accessToken, first.accessToken);
    assert.ok(second.exp >= first.exp);
  });

  it("sees repositories and tokens created by the CLI while it runs", async () => {
    await runOk(dataDir, ["repo", "create", "model", "carol/fresh"]);
    const fresh = await createToken(dataDir, "model:carol/fresh", "read");
    secretsSeen.add(fresh);
    await grant("/api/models/carol/fresh/xet-read-token/main", fresh, { type: "model", id: "carol/fresh", rev: "main", scope: "read" });
  });

  it("answers every error status with a JSON error sentence", async () => {
    const cases: [path: string, hubToken: string | undefined, status: number, pattern: RegExp][] = [
      ["/api/models/alice/bert/xet-read-token/main", undefined, 401, /hub token is required/],
      ["/api/models/alice/bert/xet-read-token/main", `hf_${"x".repeat(43)}`, 401, /invalid or expired/],
      ["/api/models/alice/bert/xet-write-token/main", hubTokens.read, 403, /read-only/],
      ["/api/models/alice/missing/xet-read-token/main", hubTokens.all, 404, /not found/],
      ["/api/datasets/alice/corpus/xet-read-token/main", hubTokens.write, 404, /not found \(or this hub token does not cover it\)/],
      ["/api/models/alice/bert/xet-read-token/no-such-branch", hubTokens.read, 404, /revision "no-such-branch" not found/],
      ["/api/buckets/alice/bert/xet-read-token/main", hubTokens.read, 400, /Unknown repository type segment "buckets"/],
      ["/api/models/alice/bert/xet-read-token", hubTokens.read, 400, /names no revision/],
      ["/api/models/alice/bad..name/xet-read-token/main", hubTokens.read, 400, /repository name/],
      ["/v1/nothing/here?sig=abc", undefined, 404, /^No endpoint answers GET \/v1\/nothing\/here:/],
    ];
    for (const [path, hubToken, status, pattern] of cases) {
      const answer = await requestToken(server, path, hubToken);
      assert.equal(answer.status, status, `${path}: ${JSON.stringify(answer.body)}`);
      assert.deepEqual(Object.keys(answer.body), ["error"]);
      assert.match(answer.body.error as string, pattern, path);
      assert.equal(answer.headers.get("x-xet-access-token"), null);
    }
  });

  it("logs one JSON line per request and never a token or a query string", async () => {
    const requestId = "e2e-log-check-1";
    const response = await fetch(`${server.url}/api/models/alice/bert/xet-read-token/main?create_pr=1&signature=do-not-log-me`, {
      headers: { authorization: `Bearer ${hubTokens.read}`, "x-request-id": requestId },
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("x-request-id"), requestId);
    secretsSeen.add(((await response.json()) as { accessToken: string }).accessToken);
    const line = await server.waitForLog((candidate) => candidate.reqId === requestId);
    assert.equal(server.logLines().filter((candidate) => candidate.reqId === requestId).length, 1, "one line per request");
    assert.equal(line.path, "/api/models/alice/bert/xet-read-token/main");
    assert.equal(line.statusCode, 200);
    assert.equal(line.method, "GET");

    const output = server.output();
    assert.ok(secretsSeen.size >= 10);
    for (const secret of secretsSeen) {
      assert.ok(!output.includes(secret), "a hub token or access token reached the log");
      if (secret.split(".").length === 3) assert.ok(!output.includes(secret.split(".")[2]), "a token signature reached the log");
    }
    assert.ok(!output.includes("do-not-log-me") && !output.includes("create_pr"), "a query string reached the log");
    assert.ok(!/authorization/i.test(output), "a request header reached the log");
  });
});

describe("castor serve: token expiry and graceful shutdown", () => {
  let dataDir: string;
  let server: ServerProcess;
  let hubToken: string;

  before(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "castor-e2e-ttl-"));
    await runOk(dataDir, ["repo", "create", "model", "alice/bert"]);
    hubToken = await createToken(dataDir, "model:alice/bert", "write");
    server = await startCastorServer({ dataDir, env: { CASTOR_TOKEN_TTL: "2" } });
  });

  after(async () => {
    await server?.stop("SIGKILL");
    await rm(dataDir, { recursive: true, force: true });
  });

  it("issues tokens that the CAS auth hook of any node refuses from exp on", async () => {
    // Another node: it shares only the public key with the server.
    // Its clock is the test's, so expiry is checked at exp without waiting for it.
    let now: Date | null = null;
    const hook = createHttpApp({ logger: createLogger("silent") });
    registerCasAuth(hook, new CasTokenVerifier(await publicKeyOf(dataDir), () => now ?? new Date()));
    hook.get("/probe", { config: { casScope: "write" } }, async (request) => casAccessOf(request));
    try {
      const answer = await requestToken(server, "/api/models/alice/bert/xet-write-token/main", hubToken);
      assert.equal(answer.status, 200);
      const { accessToken, exp } = answer.body as { accessToken: string; exp: number };
      assert.ok(exp - Date.now() / 1000 <= 2, "CASTOR_TOKEN_TTL=2 gives at most two seconds");

      const probe = () => hook.inject({ method: "GET", url: "/probe", headers: { authorization: `Bearer ${accessToken}` } });
      const fresh = await probe();
      assert.equal(fresh.statusCode, 200, fresh.body);
      assert.deepEqual(fresh.json().repo, { type: "model", id: "alice/bert" });

      now = new Date(exp * 1000 - 1);
      assert.equal((await probe()).statusCode, 200, "valid to the last millisecond before exp");
      now = new Date(exp * 1000);
      const expired = await probe();
      assert.equal(expired.statusCode, 401);
      assert.match(expired.json().error, /^The access token has expired/);
    } finally {
      await hook.close();
    }
  });

  it("on SIGTERM stops accepting, finishes the request in progress, and exits 0", async () => {
    const port = Number(new URL(server.url).port);
    const socket = await openSocket(port);
    const answer = readUntilClosed(socket);
    // The request has begun arriving when the signal comes; its end arrives during shutdown.
    await new Promise<void>((resolve, reject) =>
      socket.write(`GET /api/models/alice/bert/xet-read-token/main HTTP/1.1\r\nHost: castor\r\nAuthorization: Bearer ${hubToken}\r\n`, (error) =>
        error ? reject(error) : resolve(),
      ),
    );
    // The server process has read it: the request is in progress, not an idle connection.
    await until(async () => (await unreadByServer(port, socket.localPort)) === 0, "the server to read the beginning of the request");

    server.child.kill("SIGTERM");
    await server.waitForLog((line) => line.msg === "castor shutting down: finishing requests in progress");
    await eventuallyRefused(port);
    assert.equal(server.child.exitCode, null, "still running while a request is in progress");

    socket.write("\r\n");
    const response = parseHttpResponse(await answer);
    assert.equal(response.status, 200, response.body);
    assert.equal(response.headers.get("connection"), "close");
    const { accessToken } = JSON.parse(response.body) as { accessToken: string };
    assert.equal((await new CasTokenVerifier(await publicKeyOf(dataDir)).verify(accessToken)).scope, "read");

    assert.deepEqual(await server.exited, { code: 0, signal: null });
    const messages = server.logLines().map((line) => line.msg);
    assert.ok(messages.indexOf("castor stopped") > messages.lastIndexOf("request"), "the request finished before the server stopped");
    assert.ok(!server.output().includes(accessToken) && !server.output().includes(hubToken));
  });
});

describe("castor serve: start-up failures", () => {
  it("exits 2 with the setting's name on bad configuration", async () => {
    const { status, output } = await serveExpectingFailure({ env: { CASTOR_TOKEN_TTL: "0" } });
    assert.equal(status.code, 2);
    assert.match(output, /castor serve: CASTOR_TOKEN_TTL must be a whole number ≥ 1, got "0"/);
    assert.doesNotMatch(output, /\n\s+at /, "no stack trace");
  });

  it("exits 2 when the signing key file is not an Ed25519 key", async () => {
    const dir = await mkdtemp(join(tmpdir(), "castor-e2e-key-"));
    try {
      const keyFile = join(dir, "key.pem");
      await writeFile(keyFile, "not a key\n");
      const { status, output } = await serveExpectingFailure({ env: { CASTOR_SIGNING_KEY_FILE: keyFile } });
      assert.equal(status.code, 2);
      assert.match(output, /CASTOR_SIGNING_KEY_FILE .* is not a PEM private key/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("exits 1 with a clear message when the address is taken", async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    const { port } = blocker.address() as { port: number };
    try {
      const { status, output } = await serveExpectingFailure({ env: { CASTOR_LISTEN: `127.0.0.1:${port}` } });
      assert.equal(status.code, 1);
      assert.match(output, new RegExp(`127\\.0\\.0\\.1:${port} is already in use: stop the other server or set CASTOR_LISTEN to a free port`));
    } finally {
      blocker.close();
    }
  });
});

/** The listener closes right after shutdown begins; wait until new connections are refused. */
async function eventuallyRefused(port: number): Promise<void> {
  const deadline = Date.now() + 3000;
  for (;;) {
    try {
      (await openSocket(port)).destroy();
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "ECONNREFUSED") return;
      if (code !== "ECONNRESET") throw error;
    }
    if (Date.now() > deadline) assert.fail("the server still accepts connections after SIGTERM");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function parseHttpResponse(raw: string): { status: number; headers: Headers; body: string } {
  const split = raw.indexOf("\r\n\r\n");
  assert.ok(split > 0, `not an HTTP response: ${JSON.stringify(raw)}`);
  const [statusLine, ...headerLines] = raw.slice(0, split).split("\r\n");
  const headers = new Headers(headerLines.map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 1).trim()] as [string, string]));
  return { status: Number(statusLine.split(" ")[1]), headers, body: raw.slice(split + 4) };
}
