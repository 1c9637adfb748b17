import { describe, it, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HubError, type TokenDenial, type TokenGrant, type TokenRequest } from "../../src/hub/index.js";
import { OperatorHub } from "../helpers/operator.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";

const START = new Date("2030-01-01T00:00:00.000Z");

/** A hub on a real SQLite store in a temp folder, with a clock the test moves. */
let root: string;
let store: SqliteMetadataStore;
let clock: Date;
let hub: OperatorHub;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "castor-hub-"));
  store = await SqliteMetadataStore.open(root);
  clock = START;
  hub = new OperatorHub(store, () => clock);
});
afterEach(async () => {
  await store.close();
  await rm(root, { recursive: true, force: true });
});

async function rejectsWith(promise: Promise<unknown>, status: number, message: RegExp): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof HubError, `expected a HubError, got ${String(err)}`);
    assert.equal(err.status, status);
    assert.match(err.message, message);
    return true;
  });
}

const request = (hubToken: string | undefined, fields: Partial<TokenRequest> = {}): TokenRequest => ({
  hubToken,
  repoType: "model",
  repoName: "alice/bert",
  revision: "main",
  access: "read",
  ...fields,
});

function assertDenied(result: TokenGrant | TokenDenial, status: TokenDenial["status"], message?: RegExp): TokenDenial {
  assert.equal(result.ok, false, `expected a ${status} denial, got a grant`);
  const denial = result as TokenDenial;
  assert.equal(denial.status, status, `expected ${status}, got ${denial.status}: ${denial.message}`);
  if (message) assert.match(denial.message, message);
  return denial;
}

function assertGranted(result: TokenGrant | TokenDenial): TokenGrant {
  assert.ok(result.ok, `expected a grant, got ${JSON.stringify(result)}`);
  return result;
}

describe("OperatorHub repositories and revisions", () => {
  it("creates a repository with its main branch and lists it", async () => {
    const repo = await hub.createRepo("model", "alice/bert");
    assert.deepEqual({ type: repo.type, name: repo.name }, { type: "model", name: "alice/bert" });
    assert.equal((await store.getRevision(repo.id, "main"))?.kind, "branch");
    const dataset = await hub.createRepo("dataset", "alice/bert");
    assert.deepEqual(await hub.listRepos(), [repo, dataset]);
  });

  it("answers 400 for a bad type or name and 409 for a duplicate", async () => {
    await rejectsWith(hub.createRepo("models", "alice/bert"), 400, /type must be one of model, dataset, space; got "models"/);
    await rejectsWith(hub.createRepo("Model", "alice/bert"), 400, /type/);
    await rejectsWith(hub.createRepo("model", "bert"), 400, /namespace\/name/);
    await rejectsWith(hub.createRepo("model", "alice/../bert"), 400, /namespace\/name/);
    await hub.createRepo("space", "alice/demo");
    await rejectsWith(hub.createRepo("space", "alice/demo"), 409, /space:alice\/demo already exists/);
    assert.equal((await hub.listRepos()).length, 1);
  });

  it("creates branches (with slashes) and tags; 400, 404 and 409 otherwise", async () => {
    const repo = await hub.createRepo("model", "alice/bert");
    const branch = await hub.createRevision("model:alice/bert", "feature/x", "branch");
    const tag = await hub.createRevision("model:alice/bert", "v1.0.0", "tag");
    assert.deepEqual([branch.repoId, branch.name, branch.kind], [repo.id, "feature/x", "branch"]);
    assert.deepEqual([tag.name, tag.kind], ["v1.0.0", "tag"]);

    await rejectsWith(hub.createRevision("model/alice/bert", "dev", "branch"), 400, /TYPE:NAMESPACE\/NAME/);
    await rejectsWith(hub.createRevision("model:alice/bert", "bad..name", "branch"), 400, /revision name "bad\.\.name"/);
    await rejectsWith(hub.createRevision("model:alice/bert", "HEAD", "branch"), 400, /revision name "HEAD" is reserved/);
    await rejectsWith(hub.createRevision("model:alice/bert", "HEAD", "tag"), 400, /revision name "HEAD" is reserved/);
    await rejectsWith(hub.createRevision("model:alice/bert", "c0ffee".padEnd(40, "0"), "branch"), 400, /looks like a commit id/);
    await rejectsWith(hub.createRevision("model:alice/bert", "dev", "note" as never), 400, /branch or tag/);
    await rejectsWith(hub.createRevision("dataset:alice/bert", "dev", "branch"), 404, /dataset:alice\/bert does not exist/);
    await rejectsWith(hub.createRevision("model:alice/bert", "feature/x", "tag"), 409, /"feature\/x" already exists in model:alice\/bert/);
  });
});

describe("OperatorHub hub tokens", () => {
  it("creates a secret of hf_ + 43 base64url characters, stored only as its SHA-256", async () => {
    await hub.createRepo("model", "alice/bert");
    const { secret, token } = await hub.createToken({ repos: ["model:alice/bert"], access: "write", expiresAt: null });
    assert.match(secret, /^hf_[A-Za-z0-9_-]{43}$/);
    assert.match(token.id, /^tok_[0-9a-f]{12}$/);
    assert.equal(token.secretHash, createHash("sha256").update(secret).digest("hex"));
    assert.equal(token.access, "write");
    assert.equal(token.expiresAt, null);
    assert.deepEqual(await hub.listTokens(), [token]);
    assert.ok(!JSON.stringify(await hub.listTokens()).includes(secret.slice(3)), "the secret is not stored");

    const other = await hub.createToken({ repos: ["model:alice/bert"], access: "write", expiresAt: null });
    assert.notEqual(other.secret, secret);
    assert.notEqual(other.token.id, token.id);
  });

  it("resolves repository references and refuses bad options", async () => {
    const a = await hub.createRepo("model", "alice/a");
    const b = await hub.createRepo("dataset", "alice/b");
    const { token } = await hub.createToken({ repos: ["dataset:alice/b", "model:alice/a"], access: "read", expiresAt: null });
    assert.deepEqual(token.repos, [a.id, b.id]);
    const all = await hub.createToken({ repos: "all", access: "read", expiresAt: new Date(START.getTime() + 1000) });
    assert.equal(all.token.repos, "all");

    await rejectsWith(hub.createToken({ repos: [], access: "read", expiresAt: null }), 400, /at least one repository/);
    await rejectsWith(hub.createToken({ repos: ["alice/a"], access: "read", expiresAt: null }), 400, /TYPE:NAMESPACE\/NAME/);
    await rejectsWith(hub.createToken({ repos: ["model:alice/zzz"], access: "read", expiresAt: null }), 404, /model:alice\/zzz does not exist/);
    await rejectsWith(hub.createToken({ repos: "all", access: "admin" as never, expiresAt: null }), 400, /read or write/);
    await rejectsWith(hub.createToken({ repos: "all", access: "read", expiresAt: START }), 400, /not in the future/);
    await rejectsWith(hub.createToken({ repos: "all", access: "read", expiresAt: new Date(NaN) }), 400, /valid date/);
    assert.equal((await hub.listTokens()).length, 2, "refused tokens are not stored");
  });

  it("revokes by id: true for a known token (again too), false otherwise", async () => {
    const { token } = await hub.createToken({ repos: "all", access: "read", expiresAt: null });
    assert.equal(await hub.revokeToken(token.id), true);
    assert.equal(await hub.revokeToken(token.id), true);
    assert.equal(await hub.revokeToken("tok_000000000000"), false);
    assert.notEqual((await hub.listTokens())[0].revokedAt, null);
  });
});

describe("OperatorHub.authorizeTokenRequest", () => {
  let repoId: number;
  let readSecret: string;
  let writeSecret: string;

  beforeEach(async () => {
    repoId = (await hub.createRepo("model", "alice/bert")).id;
    await hub.createRepo("model", "alice/private");
    await hub.createRevision("model:alice/bert", "feature/x", "branch");
    await hub.createRevision("model:alice/bert", "v1", "tag");
    readSecret = (await hub.createToken({ repos: ["model:alice/bert"], access: "read", expiresAt: null })).secret;
    writeSecret = (await hub.createToken({ repos: ["model:alice/bert"], access: "write", expiresAt: null })).secret;
  });

  it("grants read to a read token, and read and write to a write token, on branches and tags", async () => {
    const grant = assertGranted(await hub.authorizeTokenRequest(request(readSecret)));
    assert.equal(grant.repo.id, repoId);
    assert.equal(grant.revision, "main");
    const readTokenId = (await hub.listTokens())[0].id;
    assert.equal(grant.hubTokenId, readTokenId);

    for (const access of ["read", "write"] as const) {
      const slashed = assertGranted(await hub.authorizeTokenRequest(request(writeSecret, { access, revision: "feature/x" })));
      assert.equal(slashed.revision, "feature/x");
      const tagged = assertGranted(await hub.authorizeTokenRequest(request(writeSecret, { access, revision: "v1" })));
      assert.equal(tagged.revision, "v1");
    }
  });

  it("401 for a missing, malformed, unknown, revoked or expired hub token, saying revoked and expired to their holders", async () => {
    assertDenied(await hub.authorizeTokenRequest(request(undefined)), 401, /hub token is required/);
    assertDenied(await hub.authorizeTokenRequest(request("")), 401, /hub token is required/);

    const unknown = `hf_${"A".repeat(43)}`;
    const messages = new Set<string>();
    for (const secret of [unknown, `Bearer ${readSecret}`, readSecret.slice(0, -1), `hf_${"x".repeat(5000)}`, "not a token"]) {
      messages.add(assertDenied(await hub.authorizeTokenRequest(request(secret)), 401, /invalid or expired/).message);
    }

    const { secret: revoked, token } = await hub.createToken({ repos: "all", access: "write", expiresAt: null });
    assertGranted(await hub.authorizeTokenRequest(request(revoked)));
    await hub.revokeToken(token.id);
    // Only the holder of the secret can see this: a guesser only ever meets "unknown".
    assertDenied(await hub.authorizeTokenRequest(request(revoked)), 401, /hub token was revoked/);

    const expiresAt = new Date(START.getTime() + 60_000);
    const { secret: expiring } = await hub.createToken({ repos: "all", access: "read", expiresAt });
    clock = new Date(expiresAt.getTime() - 1);
    assertGranted(await hub.authorizeTokenRequest(request(expiring)));
    clock = expiresAt;
    assertDenied(await hub.authorizeTokenRequest(request(expiring)), 401, /hub token has expired/);
    assert.equal(messages.size, 1, "malformed and unknown tokens get the same message");
  });

  it("checks the hub token before the names: 401 before 400", async () => {
    assertDenied(await hub.authorizeTokenRequest(request(`hf_${"B".repeat(43)}`, { repoType: "models", repoName: "x" })), 401);
  });

  it("400 for a malformed repository type, name or revision", async () => {
    for (const repoType of ["models", "bucket", "Model", ""]) {
      assertDenied(await hub.authorizeTokenRequest(request(readSecret, { repoType })), 400, /repository type/);
    }
    for (const repoName of ["alice", "alice/bert/x", "/bert", "alice/", "-alice/bert", "alice/be..rt", "alice/b rt", `${"a".repeat(97)}/b`]) {
      assertDenied(await hub.authorizeTokenRequest(request(readSecret, { repoName })), 400, /repository name/);
    }
    for (const revision of ["", "..", "a..b", "-x", "/x", "x/", "a b", "a~1", "x".repeat(256), "a:b", "x.lock"]) {
      assertDenied(await hub.authorizeTokenRequest(request(readSecret, { revision })), 400, /revision name/);
    }
    assertDenied(await hub.authorizeTokenRequest(request(readSecret, { access: "admin" as never })), 400, /read or write/);
  });

  it("checks the names before looking anything up: 400 before 404", async () => {
    assertDenied(await hub.authorizeTokenRequest(request(readSecret, { repoName: "nobody/none", revision: "a..b" })), 400);
  });

  it("404 for an unknown repository or revision", async () => {
    assertDenied(await hub.authorizeTokenRequest(request(readSecret, { repoName: "alice/none" })), 404, /model:alice\/none not found/);
    assertDenied(await hub.authorizeTokenRequest(request(readSecret, { repoType: "dataset" })), 404, /dataset:alice\/bert not found/);
    assertDenied(await hub.authorizeTokenRequest(request(readSecret, { revision: "nope" })), 404, /revision "nope" not found in model:alice\/bert/);
  });

  it("404, worded like a missing one, for a repository the token does not cover", async () => {
    const uncovered = assertDenied(await hub.authorizeTokenRequest(request(readSecret, { repoName: "alice/private" })), 404);
    const missing = assertDenied(await hub.authorizeTokenRequest(request(readSecret, { repoName: "alice/missing" })), 404);
    assert.equal(uncovered.message.replace("alice/private", "NAME"), missing.message.replace("alice/missing", "NAME"));
    // Nor does an unknown revision in an uncovered repository give its existence away.
    const uncoveredRev = assertDenied(await hub.authorizeTokenRequest(request(readSecret, { repoName: "alice/private", revision: "nope" })), 404);
    assert.equal(uncoveredRev.message, uncovered.message);
  });

  it("404 before 403: a read-only token asking to write where it cannot look gets 404", async () => {
    for (const fields of [{ repoName: "alice/none" }, { repoName: "alice/private" }, { revision: "nope" }]) {
      assertDenied(await hub.authorizeTokenRequest(request(readSecret, { access: "write", ...fields })), 404);
    }
  });

  it("403 when a read-only hub token asks for a write token", async () => {
    assertDenied(await hub.authorizeTokenRequest(request(readSecret, { access: "write" })), 403, /read-only/);
  });

  it("an all-repos token covers every repository, including ones created after it", async () => {
    const { secret } = await hub.createToken({ repos: "all", access: "read", expiresAt: null });
    assertGranted(await hub.authorizeTokenRequest(request(secret, { repoName: "alice/private" })));
    await hub.createRepo("space", "carol/later");
    const grant = assertGranted(await hub.authorizeTokenRequest(request(secret, { repoType: "space", repoName: "carol/later" })));
    assert.equal(grant.repo.type, "space");
    assertDenied(await hub.authorizeTokenRequest(request(secret, { repoType: "space", repoName: "carol/later", access: "write" })), 403);
  });

  it("sees a revocation made through another store instance at once", async () => {
    assertGranted(await hub.authorizeTokenRequest(request(writeSecret)));
    const admin = await SqliteMetadataStore.open(root);
    try {
      const writeToken = (await admin.listHubTokens()).find((t) => t.access === "write")!;
      assert.equal(await admin.revokeHubToken(writeToken.id), true);
    } finally {
      await admin.close();
    }
    assertDenied(await hub.authorizeTokenRequest(request(writeSecret)), 401);
  });
});
