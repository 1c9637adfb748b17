import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance, LightMyRequestResponse } from "fastify";
import { CasTokenIssuer, CasTokenVerifier } from "../../src/auth/cas-token.js";
import { loadConfig } from "../../src/config.js";
import { buildCastorApp } from "../../src/http/app.js";
import { casDepsForTest } from "../helpers/app.js";
import { createLogger } from "../../src/http/logging.js";
import { OperatorHub } from "../helpers/operator.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import type { MetadataStore } from "../../src/metadata/store.js";

const PUBLIC_URL = "https://cas.example.test/base";
const TTL = 900;
const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const verifier = new CasTokenVerifier(publicKey);

let dataDir: string;
let store: MetadataStore;
let hub: OperatorHub;
let app: FastifyInstance;
const logText: string[] = [];
const secrets = { write: "", read: "", bertOnly: "", revoked: "", expiredSoon: "" };

before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "castor-hub-token-"));
  store = await openMetadataStore(loadConfig({ CASTOR_DATA_DIR: dataDir }));
  hub = new OperatorHub(store);
  await hub.createRepo("model", "alice/bert");
  await hub.createRepo("dataset", "alice/corpus");
  await hub.createRepo("space", "alice/demo");
  await hub.createRepo("model", "bob/secret");
  await hub.createRevision("model:alice/bert", "feature/x", "branch");
  await hub.createRevision("model:alice/bert", "v1.0", "tag");
  secrets.write = (await hub.createToken({ repos: ["model:alice/bert", "dataset:alice/corpus", "space:alice/demo"], access: "write", expiresAt: null })).secret;
  secrets.read = (await hub.createToken({ repos: "all", access: "read", expiresAt: null })).secret;
  secrets.bertOnly = (await hub.createToken({ repos: ["model:alice/bert"], access: "write", expiresAt: null })).secret;
  const revoked = await hub.createToken({ repos: "all", access: "write", expiresAt: null });
  await hub.revokeToken(revoked.token.id);
  secrets.revoked = revoked.secret;

  app = await buildCastorApp({
    logger: createLogger("info", { write: (line: string) => void logText.push(line) }),
    store,
    issuer: new CasTokenIssuer(privateKey, TTL),
    verifier,
    publicUrl: () => PUBLIC_URL,
    ...(await casDepsForTest(store, dataDir, () => PUBLIC_URL)),
  });
  await app.ready();
});

after(async () => {
  await app.close();
  await store.close();
  await rm(dataDir, { recursive: true, force: true });
});

function get(url: string, hubToken?: string): Promise<LightMyRequestResponse> {
  return app.inject({ method: "GET", url, headers: hubToken === undefined ? {} : { authorization: `Bearer ${hubToken}` } });
}

async function assertGrant(response: LightMyRequestResponse, expected: { type: string; id: string; rev: string; scope: string }) {
  assert.equal(response.statusCode, 200, response.body);
  const body = response.json();
  assert.deepEqual(Object.keys(body).sort(), ["accessToken", "casUrl", "exp"]);
  assert.equal(body.casUrl, PUBLIC_URL);
  assert.ok(Number.isInteger(body.exp));
  assert.equal(response.headers["x-xet-access-token"], body.accessToken);
  assert.equal(response.headers["x-xet-token-expiration"], String(body.exp));
  assert.equal(response.headers["x-xet-cas-url"], PUBLIC_URL);
  assert.equal(response.headers["cache-control"], "no-store");
  const claims = await verifier.verify(body.accessToken);
  assert.deepEqual(claims.repo, { type: expected.type, id: expected.id });
  assert.equal(claims.rev, expected.rev);
  assert.equal(claims.scope, expected.scope);
  assert.equal(claims.exp, body.exp, "exp in the answer is the token's own");
  assert.equal(claims.exp - claims.iat, TTL);
  return body;
}

function assertDenied(response: LightMyRequestResponse, status: number, pattern: RegExp): void {
  assert.equal(response.statusCode, status, response.body);
  assert.deepEqual(Object.keys(response.json()), ["error"]);
  assert.match(response.json().error, pattern);
  assert.equal(response.headers["x-xet-access-token"], undefined);
}

describe("hub token operation", () => {
  for (const [segment, type, name] of [
    ["models", "model", "alice/bert"],
    ["datasets", "dataset", "alice/corpus"],
    ["spaces", "space", "alice/demo"],
  ] as const) {
    for (const spelling of ["cas", "xet"]) {
      for (const scope of ["read", "write"]) {
        it(`issues a ${scope} token for a ${type} at ${spelling}-${scope}-token`, async () => {
          await assertGrant(await get(`/api/${segment}/${name}/${spelling}-${scope}-token/main`, secrets.write), { type, id: name, rev: "main", scope });
        });
      }
    }
  }

  it("takes a revision with '/' encoded or raw, and tags", async () => {
    const expected = { type: "model", id: "alice/bert", rev: "feature/x", scope: "write" };
    await assertGrant(await get("/api/models/alice/bert/xet-write-token/feature%2Fx", secrets.write), expected);
    await assertGrant(await get("/api/models/alice/bert/xet-write-token/feature%2fx", secrets.write), expected);
    await assertGrant(await get("/api/models/alice/bert/cas-write-token/feature/x", secrets.write), expected);
    await assertGrant(await get("/api/models/alice/bert/cas-read-token/v1.0", secrets.read), { ...expected, rev: "v1.0", scope: "read" });
  });

  it("ignores other query parameters and unknown headers", async () => {
    const response = await app.inject({
      method: "GET",
      url: "/api/models/alice/bert/xet-write-token/main?create_pr=0&foo=bar",
      headers: { authorization: `Bearer ${secrets.write}`, "x-xet-session-id": "0190-abc", "user-agent": "huggingface_hub/1.0" },
    });
    await assertGrant(response, { type: "model", id: "alice/bert", rev: "main", scope: "write" });
  });

  it("issues write tokens with create_pr=1, which xet-core appends to uploads without a revision: the pull request is refused at commit", async () => {
    for (const flag of ["1", "true"]) {
      await assertGrant(await get(`/api/models/alice/bert/xet-write-token/main?create_pr=${flag}`, secrets.write), {
        type: "model",
        id: "alice/bert",
        rev: "main",
        scope: "write",
      });
    }
  });

  it("issues a fresh token on every call", async () => {
    const first = (await get("/api/models/alice/bert/xet-read-token/main", secrets.read)).json();
    const second = (await get("/api/models/alice/bert/xet-read-token/main", secrets.read)).json();
    assert.notEqual(first.accessToken, second.accessToken);
    assert.ok(second.exp >= first.exp);
  });

  it("401s a missing, unknown or revoked hub token, with a challenge", async () => {
    const missing = await get("/api/models/alice/bert/xet-read-token/main");
    assertDenied(missing, 401, /hub token is required/);
    assert.equal(missing.headers["www-authenticate"], 'Bearer realm="castor"');
    assertDenied(await get("/api/models/alice/bert/xet-read-token/main", `hf_${"A".repeat(43)}`), 401, /invalid or expired/);
    assertDenied(await get("/api/models/alice/bert/xet-read-token/main", secrets.revoked), 401, /hub token was revoked/);
    const basic = await app.inject({ method: "GET", url: "/api/models/alice/bert/xet-read-token/main", headers: { authorization: `Basic ${secrets.read}` } });
    assertDenied(basic, 401, /hub token is required/);
  });

  it("404s an unknown repository or revision, and a repository the hub token does not cover", async () => {
    assertDenied(await get("/api/models/alice/nothing/xet-read-token/main", secrets.read), 404, /not found/);
    assertDenied(await get("/api/datasets/alice/bert/xet-read-token/main", secrets.read), 404, /not found/);
    assertDenied(await get("/api/models/alice/bert/xet-read-token/no-such-branch", secrets.read), 404, /revision "no-such-branch" not found/);
    const uncovered = await get("/api/models/bob/secret/xet-read-token/main", secrets.bertOnly);
    const absent = await get("/api/models/bob/absent/xet-read-token/main", secrets.bertOnly);
    assertDenied(uncovered, 404, /not found \(or this hub token does not cover it\)/);
    assert.equal(uncovered.json().error.replace("secret", "absent"), absent.json().error, "a covered-or-not answer reveals nothing");
  });

  it("403s a write token asked with a read-only hub token", async () => {
    assertDenied(await get("/api/models/alice/bert/xet-write-token/main", secrets.read), 403, /read-only/);
    assertDenied(await get("/api/models/alice/bert/cas-write-token/main", secrets.read), 403, /read-only/);
  });

  it("checks the hub token before anything else about the repository", async () => {
    assertDenied(await get("/api/models/alice/nothing/xet-write-token/main"), 401, /hub token is required/);
    assertDenied(await get("/api/models/alice/a..b/xet-write-token/main"), 401, /hub token is required/);
  });

  it("400s a malformed path", async () => {
    assertDenied(
      await get("/api/foos/alice/bert/xet-read-token/main", secrets.read),
      400,
      /^Unknown repository type segment "foos".*models, datasets or spaces/,
    );
    assertDenied(await get("/api/model/alice/bert/xet-read-token/main", secrets.read), 400, /Unknown repository type segment "model"/);
    assertDenied(await get("/api/models/alice/bert/xet-read-token", secrets.read), 400, /names no revision: append one, e.g. .*\/cas-read-token\/main/);
    assertDenied(await get("/api/models/alice/bert/xet-read-token/", secrets.read), 400, /names no revision/);
    assertDenied(await get("/api/models/alice/a..b/xet-read-token/main", secrets.read), 400, /repository name must be namespace\/name/);
    assertDenied(await get("/api/models/alice/bert/xet-read-token/bad%20name", secrets.read), 400, /revision name "bad name" is not valid/);
    assertDenied(await get("/api/models/alice/bert/xet-read-token/..%2Fescape", secrets.read), 400, /revision name/);
  });

  it("404s other token-like paths as unknown routes", async () => {
    assertDenied(await get("/api/models/alice/bert/xet-admin-token/main", secrets.read), 404, /^No endpoint answers/);
    assertDenied(await get("/api/models/alice/xet-read-token/main", secrets.read), 404, /^No endpoint answers/);
  });

  it("never logs a hub token or an access token, and logs one line per request", async () => {
    logText.length = 0;
    const issued = (await get("/api/models/alice/bert/xet-write-token/main?create_pr=0", secrets.write)).json();
    await get("/api/models/alice/bert/xet-write-token/main", secrets.read);
    const all = logText.join("");
    assert.equal(logText.length, 2);
    for (const secret of [secrets.write, secrets.read, issued.accessToken, issued.accessToken.split(".")[2]]) {
      assert.ok(!all.includes(secret), "a secret reached the log");
    }
    assert.ok(!all.includes("create_pr"), "query strings stay out of the log");
    const line = JSON.parse(logText[0]);
    assert.equal(line.path, "/api/models/alice/bert/xet-write-token/main");
    assert.equal(line.statusCode, 200);
    assert.equal(typeof line.reqId, "string");
  });
});

describe("health probes", () => {
  it("answers /healthz and /readyz while the store answers", async () => {
    for (const url of ["/healthz", "/readyz"]) {
      const response = await get(url);
      assert.equal(response.statusCode, 200);
      assert.deepEqual(response.json(), { status: "ok" });
    }
  });

  it("503s /readyz when the metadata store is unreachable, while /healthz stays 200", async () => {
    const closedStore = await openMetadataStore(loadConfig({ CASTOR_DATA_DIR: dataDir }));
    await closedStore.close();
    const probeApp = await buildCastorApp({
      logger: createLogger("silent"),
      store: closedStore,
      issuer: new CasTokenIssuer(privateKey, TTL),
      verifier,
      publicUrl: () => PUBLIC_URL,
      ...(await casDepsForTest(closedStore, dataDir, () => PUBLIC_URL)),
    });
    try {
      const ready = await probeApp.inject({ method: "GET", url: "/readyz" });
      assert.equal(ready.statusCode, 503, ready.body);
      assert.match(ready.json().error, /^The metadata store does not answer/);
      assert.equal((await probeApp.inject({ method: "GET", url: "/healthz" })).statusCode, 200);
    } finally {
      await probeApp.close();
    }
  });
});
