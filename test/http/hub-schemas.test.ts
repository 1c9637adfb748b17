/**
 * The hub routes' declared access and schemas (src/http/hub/caller.ts, src/wire/hub.ts,
 * src/http/hub/schema-errors.ts), against a real app on SQLite:
 *
 * - who may call is decided before the request's body is parsed as JSON or anything of it is
 *   validated: an unusable token, an anonymous caller or a token that does not cover a private
 *   repository gets its 401/403/404 whatever it sends;
 * - a value of the wrong type is refused with 400 naming the field, never converted (`"12"` is
 *   not a size, `5` not a tag name);
 * - an answer keeps every field its builder gives (a response schema drops those it does not name);
 * - a hub route that declares no access does not start.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import Fastify from "fastify";
import { storageStatsJson, StorageStatsService } from "../../src/hub/stats.js";
import { hubRoutes } from "../../src/http/hub/index.js";
import { startTestApp, type TestApp } from "../helpers/app.js";

let castor: TestApp;
const tokens = { write: "", read: "", other: "", admin: "" };
const UNKNOWN_TOKEN = `hf_${"x".repeat(43)}`;

before(async () => {
  // The unknown tokens below are failed authentications, which would soon block the address.
  castor = await startTestApp({ name: "hub-schemas", hubLimits: { authFailuresPerMinute: null } });
  await castor.hub.createRepo("model", "alice/secret", { private: true });
  await castor.hub.createRepo("model", "alice/open", { private: false });
  tokens.write = (await castor.hub.createToken({ repos: ["model:alice/secret", "model:alice/open"], access: "write", expiresAt: null })).secret;
  tokens.read = (await castor.hub.createToken({ repos: ["model:alice/secret"], access: "read", expiresAt: null })).secret;
  tokens.other = (await castor.hub.createToken({ repos: [], namespaces: ["bob"], access: "write", expiresAt: null, owner: "bob" })).secret;
  tokens.admin = (await castor.hub.createToken({ repos: "all", access: "write", expiresAt: null })).secret;
});

after(() => castor?.close());

async function call(method: string, path: string, options: { token?: string; body?: string; type?: string } = {}) {
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (options.body !== undefined) headers["content-type"] = options.type ?? "application/json";
  const response = await fetch(`${castor.url}${path}`, { method, headers, body: options.body });
  const text = await response.text();
  return { status: response.status, text, json: (): any => JSON.parse(text) };
}

describe("hub routes decide who calls before they validate what is sent", () => {
  /** Requests whose body, query string or params break the route's schema. */
  const malformed: [method: string, path: string, body?: string][] = [
    ["POST", "/api/models/alice/secret/preupload/main", JSON.stringify({ files: "all of them" })],
    ["POST", "/api/models/alice/secret/paths-info/main", JSON.stringify({ paths: [1, 2] })],
    ["POST", "/api/models/alice/secret/branch/dev", JSON.stringify({ startingPoint: 7 })],
    ["POST", "/api/models/alice/secret/tag/main", JSON.stringify({ tag: ["v1"] })],
    ["POST", "/api/models/alice/secret/super-squash/main", JSON.stringify({ message: false })],
    ["PUT", "/api/models/alice/secret/settings", JSON.stringify({ private: "yes" })],
    ["POST", "/alice/secret.git/info/lfs/objects/batch", JSON.stringify([])],
    ["GET", "/api/models/alice/secret/tree/main?limit=1&limit=2"],
    ["GET", "/api/models/alice/secret/commits/main?p=1&p=2"],
    ["POST", "/api/models/alice/secret/tag/main", '{"tag": "v1"'],
  ];

  it("401 without a token, and for an unknown token, whatever the body", async () => {
    for (const [method, path, body] of malformed) {
      for (const token of [undefined, UNKNOWN_TOKEN]) {
        const answer = await call(method, path, { token, body });
        assert.equal(answer.status, 401, `${method} ${path} ${token ? "with an unknown token" : "anonymously"}: ${answer.text}`);
      }
    }
  });

  it("404 for a token that does not cover the private repository, 403 for a read token on a write route", async () => {
    for (const [method, path, body] of malformed) {
      const answer = await call(method, path, { token: tokens.other, body });
      assert.equal(answer.status, 404, `${method} ${path}: ${answer.text}`);
      assert.match(answer.json().error, /not found \(or this hub token does not cover it\)/);
    }
    const [method, path, body] = malformed[0];
    const readOnly = await call(method, path, { token: tokens.read, body });
    assert.equal(readOnly.status, 403, readOnly.text);
  });

  it("401 or 403 on the routes for tokens and administrators, whatever the body", async () => {
    const notAnObject = JSON.stringify("alice/new");
    assert.equal((await call("POST", "/api/repos/create", { body: notAnObject })).status, 401);
    assert.equal((await call("POST", "/api/repos/move", { body: notAnObject })).status, 401);
    assert.equal((await call("DELETE", "/api/repos/delete", { body: notAnObject })).status, 401);
    assert.equal((await call("POST", "/api/castor/tokens", { token: tokens.write, body: JSON.stringify({ access: "root" }) })).status, 403);
    assert.equal((await call("GET", "/api/castor/sharing?repo=1&repo=2", { token: tokens.read })).status, 403);
    assert.equal((await call("GET", "/api/stats?history=1&history=2", { token: tokens.read })).status, 403);
  });

  it("the same requests from a caller who may make them get the schema's 400, naming the field", async () => {
    const expected = [
      /^Invalid request: body\.files must be array \(the files to upload/,
      /^Invalid request: body\.paths\[0\] must be string$/,
      /^Invalid request: body\.startingPoint must be string or null \(the revision the branch starts at/,
      /^Invalid request: body\.tag must be string \(the new tag's name\)$/,
      /^Invalid request: body\.message must be string or null \(the message of the one commit left\)$/,
      /^Invalid request: body\.private must be boolean or null \(true for private, false for public\)$/,
      /^Invalid request: body must be object \(the LFS batch request: a JSON object with operation, transfers and objects\)$/,
      /^Invalid request: querystring\.limit must be string$/,
      /^Invalid request: querystring\.p must be string$/,
      /^The body is not valid JSON \(/,
    ];
    for (const [index, [method, path, body]] of malformed.entries()) {
      const answer = await call(method, path, { token: tokens.write, body });
      assert.equal(answer.status, 400, `${method} ${path}: ${answer.text}`);
      assert.match(answer.json().error, expected[index], `${method} ${path}`);
    }
  });
});

describe("hub request schemas check types, never convert them", () => {
  it("refuses a size sent as a string and names given as numbers or booleans, which nothing then creates", async () => {
    const preupload = await call("POST", "/api/models/alice/open/preupload/main", {
      token: tokens.write,
      body: JSON.stringify({ files: [{ path: "a.bin", sample: "", size: "12" }] }),
    });
    assert.equal(preupload.status, 400, preupload.text);
    assert.match(preupload.json().error, /body\.files\[0\]\.size must be integer \(its size, a whole number of bytes\)/);

    const tag = await call("POST", "/api/models/alice/open/tag/main", { token: tokens.write, body: JSON.stringify({ tag: 5 }) });
    assert.equal(tag.status, 400, tag.text);
    assert.match(tag.json().error, /body\.tag must be string/);
    const branch = await call("POST", "/api/models/alice/open/branch/dev", { token: tokens.write, body: JSON.stringify({ startingPoint: 1234 }) });
    assert.equal(branch.status, 400, branch.text);
    const refs = (await call("GET", "/api/models/alice/open/refs", { token: tokens.write })).json();
    assert.deepEqual(
      [...refs.branches, ...refs.tags].map((ref: { name: string }) => ref.name),
      ["main"],
    );

    const create = await call("POST", "/api/repos/create", { token: tokens.admin, body: JSON.stringify({ name: 42, organization: "alice" }) });
    assert.equal(create.status, 400, create.text);
    assert.match(create.json().error, /body\.name must be string \(the repository's name, or namespace\/name\)/);
    const settings = await call("PUT", "/api/models/alice/open/settings", { token: tokens.write, body: JSON.stringify({ private: 1 }) });
    assert.equal(settings.status, 400, settings.text);
    assert.equal((await call("GET", "/api/models/alice/open")).status, 200, "still public");

    const token = await call("POST", "/api/castor/tokens", { token: tokens.admin, body: JSON.stringify({ access: "write", repos: "some" }) });
    assert.equal(token.status, 400, token.text);
    assert.match(token.json().error, /body\.repos must be "all" or array \("all", or the repositories as a list of TYPE:NAMESPACE\/NAME\)/);
  });

  it("names a missing field and what it is", async () => {
    const answer = await call("POST", "/api/models/alice/open/tag/main", { token: tokens.write, body: JSON.stringify({}) });
    assert.equal(answer.status, 400, answer.text);
    assert.equal(answer.json().error, `Invalid request: body needs "tag" (the new tag's name)`);
    const sharing = await call("GET", "/api/castor/sharing?repo=model:alice/open", { token: tokens.admin });
    assert.equal(sharing.status, 400, sharing.text);
    assert.match(sharing.json().error, /querystring needs "revision" \(a branch, tag or commit id\)/);
  });
});

describe("hub answers", () => {
  it("GET /api/stats keeps every field of the statistics' JSON", async () => {
    const answer = await call("GET", "/api/stats", { token: tokens.admin });
    assert.equal(answer.status, 200, answer.text);
    const stats = new StorageStatsService(castor.store);
    const expected = storageStatsJson(await stats.measure(), await stats.history());
    const withoutTimes = (json: unknown) => JSON.parse(JSON.stringify(json, (key, value) => (key === "takenAt" ? undefined : value)));
    assert.deepEqual(withoutTimes(answer.json()), withoutTimes(expected));
  });
});

describe("hub routes declare who may call them", () => {
  it("a route without config.hubAccess stops the app from starting", async () => {
    const app = Fastify();
    await assert.rejects(async () => {
      await app.register(async (scope) => {
        await hubRoutes(scope, { hub: {} as never, publicUrl: () => "", downloadLinks: {} as never, lfsUrls: {} as never, uploadSlots: {} as never });
        scope.get("/api/undeclared", async () => ({}));
      });
      await app.ready();
    }, /hub route GET \/api\/undeclared declares no config\.hubAccess/);
    await app.close();
  });

  it("HEAD of a GET route is checked as the GET is", async () => {
    assert.equal((await call("HEAD", "/api/models/alice/secret/tree/main")).status, 401);
    assert.equal((await call("HEAD", "/api/models/alice/secret/tree/main", { token: tokens.read })).status, 200);
  });
});
