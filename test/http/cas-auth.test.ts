import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { after, before, beforeEach, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { CasTokenIssuer, CasTokenVerifier, type CasTokenRequest } from "../../src/auth/cas-token.js";
import { createHttpApp } from "../../src/http/app.js";
import { bearerToken, casAccessOf, hubTokenOf, registerCasAuth } from "../../src/http/cas-auth.js";
import { HttpError } from "../../src/http/errors.js";
import { createLogger } from "../../src/http/logging.js";

const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const T0_MS = Date.parse("2030-06-01T12:00:00Z");
const TTL = 30;

let nowMs = T0_MS;
const clock = () => new Date(nowMs);
const issuer = new CasTokenIssuer(privateKey, TTL, clock);

const BERT: CasTokenRequest["repo"] = { type: "model", id: "alice/bert" };
const OTHER: CasTokenRequest["repo"] = { type: "dataset", id: "bob/corpus" };

/** What the test repository route serves, per repository. */
const FILES = new Map<string, Map<string, string>>([
  ["model:alice/bert", new Map([["weights", "bert weights"]])],
  ["dataset:bob/corpus", new Map([["corpus", "bob's corpus"]])],
]);

let app: FastifyInstance;
let uploadBodiesParsed = 0;

before(async () => {
  app = createHttpApp({ logger: createLogger("silent") });
  registerCasAuth(app, new CasTokenVerifier(publicKey, clock));

  await app.register(async (routes) => {
    routes.addContentTypeParser("application/octet-stream", { parseAs: "buffer" }, (_request, body, done) => {
      uploadBodiesParsed++;
      done(null, body);
    });
    routes.get("/test/read", { config: { casScope: "read" } }, async (request) => casAccessOf(request));
    routes.post("/test/upload", { config: { casScope: "write" } }, async (request) => ({
      bytes: (request.body as Buffer).length,
      repo: casAccessOf(request).repo,
    }));
    routes.get("/test/public", async (request) => ({ casAccess: request.casAccess }));
    // The pattern CAS routes follow: look the resource up within the token's repository only.
    routes.get<{ Params: { name: string } }>("/test/files/:name", { config: { casScope: "read" } }, async (request) => {
      const { repo } = casAccessOf(request);
      const content = FILES.get(`${repo.type}:${repo.id}`)?.get(request.params.name);
      if (content === undefined) throw new HttpError(404, `file ${request.params.name} not found in this repository`);
      return { content };
    });
    routes.get("/test/unguarded-claims", async (request) => casAccessOf(request));
  });
  await app.ready();
});

after(async () => {
  await app.close();
});

beforeEach(() => {
  nowMs = T0_MS;
});

async function tokenFor(scope: "read" | "write", repo = BERT, rev = "main"): Promise<string> {
  return (await issuer.issue({ repo, rev, scope })).token;
}

function get(url: string, authorization?: string) {
  return app.inject({ method: "GET", url, headers: authorization === undefined ? {} : { authorization } });
}

function assertError(response: Awaited<ReturnType<typeof get>>, status: number, pattern: RegExp): void {
  assert.equal(response.statusCode, status, response.body);
  assert.match(response.headers["content-type"] as string, /^application\/json/);
  const body = response.json();
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.match(body.error, pattern);
  assert.ok(response.headers["x-request-id"], "every answer carries a request id");
}

describe("CAS auth hook", () => {
  it("admits a valid token and exposes its verified claims", async () => {
    const response = await get("/test/read", `Bearer ${await tokenFor("read", BERT, "feature/x")}`);
    assert.equal(response.statusCode, 200, response.body);
    const claims = response.json();
    assert.deepEqual(claims.repo, BERT);
    assert.equal(claims.rev, "feature/x");
    assert.equal(claims.scope, "read");
    assert.equal(claims.exp, Math.floor(T0_MS / 1000) + TTL);
  });

  it("accepts the bearer scheme in any case", async () => {
    const token = await tokenFor("read");
    assert.equal((await get("/test/read", `bearer ${token}`)).statusCode, 200);
    assert.equal((await get("/test/read", `BEARER ${token}`)).statusCode, 200);
  });

  it("401s a missing token with a challenge", async () => {
    const response = await get("/test/read");
    assertError(response, 401, /^Missing access token/);
    assert.equal(response.headers["www-authenticate"], 'Bearer realm="castor"');
  });

  it("401s a malformed Authorization header", async () => {
    const token = await tokenFor("read");
    for (const header of [`Basic ${token}`, "Bearer", "Bearer ", `Token ${token}`, `Bearer ${token} extra`]) {
      assertError(await get("/test/read", header), 401, /Authorization header|Missing access token/);
    }
    assertError(await get("/test/read", "Bearer not-a-jwt"), 401, /^The access token was refused \(the access token is not a JWT\)/);
  });

  it("401s forged tokens: another key, a tampered payload, alg none", async () => {
    const foreign = await new CasTokenIssuer(generateKeyPairSync("ed25519").privateKey, TTL, clock).issue({ repo: BERT, rev: "main", scope: "write" });
    const response = await get("/test/read", `Bearer ${foreign.token}`);
    assertError(response, 401, /signature does not verify/);
    assert.match(response.headers["www-authenticate"] as string, /error="invalid_token"/);

    const [header, payload, signature] = (await tokenFor("read")).split(".");
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString());
    const escalated = Buffer.from(JSON.stringify({ ...claims, scope: "write" })).toString("base64url");
    assertError(await get("/test/read", `Bearer ${header}.${escalated}.${signature}`), 401, /signature does not verify/);

    const none = Buffer.from(JSON.stringify({ alg: "none" })).toString("base64url");
    assertError(await get("/test/read", `Bearer ${none}.${payload}.`), 401, /not signed with EdDSA/);
  });

  it("401s an expired token, exactly at exp", async () => {
    const token = await tokenFor("read");
    const expMs = (Math.floor(T0_MS / 1000) + TTL) * 1000;
    nowMs = expMs - 1;
    assert.equal((await get("/test/read", `Bearer ${token}`)).statusCode, 200);
    nowMs = expMs;
    const response = await get("/test/read", `Bearer ${token}`);
    assertError(response, 401, /^The access token has expired: get a new one/);
    assert.match(response.headers["www-authenticate"] as string, /error="invalid_token"/);
  });

  it("403s a read token on a write route; write includes read", async () => {
    const response = await app.inject({
      method: "POST",
      url: "/test/upload",
      headers: { authorization: `Bearer ${await tokenFor("read")}`, "content-type": "application/octet-stream" },
      payload: Buffer.alloc(64),
    });
    assertError(response, 403, /needs a write token but the access token has read scope: .*cas-write-token/);

    assert.equal((await get("/test/read", `Bearer ${await tokenFor("write")}`)).statusCode, 200);
    const upload = await app.inject({
      method: "POST",
      url: "/test/upload",
      headers: { authorization: `Bearer ${await tokenFor("write")}`, "content-type": "application/octet-stream" },
      payload: Buffer.alloc(64),
    });
    assert.equal(upload.statusCode, 200, upload.body);
    assert.deepEqual(upload.json(), { bytes: 64, repo: BERT });
  });

  it("refuses before reading any body byte, and closes the connection of a refused upload", async () => {
    const parsedBefore = uploadBodiesParsed;
    for (const authorization of [undefined, "Bearer junk", `Bearer ${await tokenFor("read")}`]) {
      const response = await app.inject({
        method: "POST",
        url: "/test/upload",
        headers: { ...(authorization ? { authorization } : {}), "content-type": "application/octet-stream" },
        payload: Buffer.alloc(1024),
      });
      assert.ok(response.statusCode === 401 || response.statusCode === 403, response.body);
      assert.equal(response.headers.connection, "close");
    }
    assert.equal(uploadBodiesParsed, parsedBefore, "no refused upload's body reached the parser");
  });

  it("keeps a token to its repository: another repository's data is 404, as if absent", async () => {
    const bertToken = await tokenFor("read", BERT);
    const otherToken = await tokenFor("write", OTHER);
    assert.deepEqual((await get("/test/files/weights", `Bearer ${bertToken}`)).json(), { content: "bert weights" });
    assertError(await get("/test/files/corpus", `Bearer ${bertToken}`), 404, /not found in this repository/);
    assertError(await get("/test/files/weights", `Bearer ${otherToken}`), 404, /not found in this repository/);
    assertError(await get("/test/files/nothing", `Bearer ${bertToken}`), 404, /not found in this repository/);
    assert.deepEqual((await get("/test/files/corpus", `Bearer ${otherToken}`)).json(), { content: "bob's corpus" });
  });

  it("leaves routes without casScope alone", async () => {
    const response = await get("/test/public");
    assert.equal(response.statusCode, 200);
    assert.deepEqual(response.json(), { casAccess: null });
    const withToken = await get("/test/public", `Bearer ${await tokenFor("write")}`);
    assert.deepEqual(withToken.json(), { casAccess: null });
  });

  it("fails closed (500, no details) when a route reads claims without declaring a scope", async () => {
    const response = await get("/test/unguarded-claims", `Bearer ${await tokenFor("write")}`);
    assertError(response, 500, /^Internal server error \(request id [^)]+\): this is a bug in castor/);
    assert.doesNotMatch(response.body, /casScope|at |\.ts/);
  });
});

describe("bearerToken", () => {
  it("tells absent, malformed and present apart", () => {
    assert.equal(bearerToken(undefined), undefined);
    assert.equal(bearerToken(""), undefined);
    assert.equal(bearerToken("Basic abc"), null);
    assert.equal(bearerToken("Bearer"), null);
    assert.equal(bearerToken("Bearer a b"), null);
    assert.equal(bearerToken("Bearer abc"), "abc");
    assert.equal(bearerToken("bearer   abc "), "abc");
  });
});

describe("hubTokenOf", () => {
  const basic = (credentials: string) => `Basic ${Buffer.from(credentials).toString("base64")}`;

  it("takes a bearer token, or basic auth's password whatever the user name, as git sends it", () => {
    assert.equal(hubTokenOf(undefined), undefined);
    assert.equal(hubTokenOf("Bearer hf_abc"), "hf_abc");
    assert.equal(hubTokenOf(basic("git:hf_abc")), "hf_abc");
    assert.equal(hubTokenOf(basic("anything at all:hf_a:b")), "hf_a:b");
    // A token typed as the user name, with an empty password.
    assert.equal(hubTokenOf(basic("hf_abc:")), "hf_abc");
  });

  it("is null for other schemes and for basic auth without a token", () => {
    assert.equal(hubTokenOf("Digest abc"), null);
    assert.equal(hubTokenOf(basic("nocolon")), null);
    assert.equal(hubTokenOf(basic(":")), null);
    assert.equal(hubTokenOf("Basic !!!"), null);
  });
});
