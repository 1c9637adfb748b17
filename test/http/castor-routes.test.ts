/**
 * castor's own JSON routes for the web interface (src/http/hub/castor-routes.ts) and the
 * serving of the interface itself (src/http/web-ui.ts), against a real app on SQLite and the fs
 * blob store: who may call each route, and that the numbers agree with `GET /api/stats` and
 * with how the content was uploaded.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { DOWNLOAD_LINK_TTL_SECONDS, DownloadLinks } from "../../src/auth/download-link.js";
import { startTestApp, type TestApp } from "../helpers/app.js";
import { until } from "../helpers/wait.js";

const SHARED = randomBytes(400_000);
/** SHARED with more after it: content-defined chunking finds most of SHARED's chunks in it. */
const SHARED_PLUS = Buffer.concat([SHARED, randomBytes(300_000)]);
const NOTES = Buffer.from("# Notes\n\nan inline file\n");

let castor: TestApp;
let work: string;
const tokens = { admin: "", reader: "", stranger: "" };
/** Every line the app logged. */
const logLines: string[] = [];

async function call(method: string, path: string, options: { token?: string; json?: unknown; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (options.json !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${castor.url}${path}`, {
    method,
    headers,
    body: options.json === undefined ? undefined : JSON.stringify(options.json),
    redirect: "manual",
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, json: (): any => JSON.parse(text) };
}

before(async () => {
  work = await mkdtemp(join(tmpdir(), "castor-castor-routes-"));
  const buildDir = join(work, "web");
  await mkdir(join(buildDir, "assets"), { recursive: true });
  await writeFile(join(buildDir, "index.html"), '<!doctype html><title>castor</title><script type="module" src="/-/ui/assets/app-abc.js"></script>');
  await writeFile(join(buildDir, "assets", "app-abc.js"), "console.log('castor')");
  await writeFile(join(buildDir, "assets", "app-abc.css"), "body{}");
  castor = await startTestApp({ name: "castor-routes", inlineMaxBytes: 64 * 1024, webUi: { dir: buildDir }, logLines: (line) => logLines.push(line) });
  tokens.admin = (await castor.hub.createToken({ repos: "all", access: "write", expiresAt: null, owner: "root" })).secret;
  tokens.reader = (await castor.hub.createToken({ repos: [], namespaces: ["alice"], access: "read", expiresAt: null })).secret;
  tokens.stranger = (await castor.hub.createToken({ repos: [], namespaces: ["bob"], access: "read", expiresAt: null })).secret;
  await castor.hub.createRepo("model", "alice/public", { private: false });
  await castor.hub.createRepo("model", "alice/private", { private: true });
  const client = (repo: string) => new CastorClient({ endpoint: castor.url, hubToken: tokens.admin, repo });
  const file = async (name: string, data: Buffer) => {
    const path = join(work, name);
    await writeFile(path, data);
    return path;
  };
  await client("model:alice/public").uploadToRepo([await file("shared.bin", SHARED)], { message: "Add shared.bin" });
  await client("model:alice/public").commit({ summary: "Add notes", operations: [{ kind: "file", path: "NOTES.md", content: NOTES }] });
  await client("model:alice/private").uploadToRepo([await file("copy.bin", SHARED), await file("bigger.bin", SHARED_PLUS)], { message: "Add copies" });
});

after(async () => {
  await castor?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("GET /api/castor/me", () => {
  it("tells anonymous callers, tokens and admin tokens apart", async () => {
    assert.deepEqual((await call("GET", "/api/castor/me")).json(), { anonymous: true, admin: false });
    const reader = (await call("GET", "/api/castor/me", { token: tokens.reader })).json();
    assert.equal(reader.admin, false);
    assert.equal(reader.access, "read");
    const admin = (await call("GET", "/api/castor/me", { token: tokens.admin })).json();
    assert.deepEqual([admin.admin, admin.user, admin.access], [true, "root", "write"]);
    assert.equal((await call("GET", "/api/castor/me", { token: "hf_not_a_token" })).status, 401);
  });
});

describe("GET /api/castor/repos/{type}s/{ns}/{name}/storage", () => {
  it("gives readers the logical size, admins the stored bytes too, matching GET /api/stats", async () => {
    const anonymous = await call("GET", "/api/castor/repos/models/alice/public/storage");
    assert.equal(anonymous.status, 200, anonymous.text);
    // Each repository also holds the .gitattributes the hub wrote for its Xet-stored files.
    const attributes = (...paths: string[]) => paths.map((path) => `${path} filter=lfs diff=lfs merge=lfs -text\n`).join("").length;
    assert.deepEqual(anonymous.json(), { files: 3, logicalBytes: SHARED.length + NOTES.length + attributes("shared.bin") });
    assert.equal((await call("GET", "/api/castor/repos/models/alice/private/storage")).status, 401);
    assert.deepEqual((await call("GET", "/api/castor/repos/models/alice/private/storage", { token: tokens.reader })).json(), {
      files: 3,
      logicalBytes: SHARED.length + SHARED_PLUS.length + attributes("copy.bin", "bigger.bin"),
    });
    const stats = (await call("GET", "/api/stats", { token: tokens.admin })).json();
    for (const name of ["alice/public", "alice/private"]) {
      const admin = (await call("GET", `/api/castor/repos/models/${name}/storage`, { token: tokens.admin })).json();
      const { type: _type, name: _name, ...expected } = stats.repositories.find((repo: any) => repo.name === name);
      assert.deepEqual(admin, expected);
    }
  });
});

describe("GET /api/castor/sharing", () => {
  const sharing = (repo: string, path: string, token = tokens.admin) =>
    call("GET", `/api/castor/sharing?${new URLSearchParams({ repo, revision: "main", path })}`, { token });

  it("is for admin tokens only", async () => {
    assert.equal((await call("GET", "/api/castor/sharing?repo=model:alice/public&revision=main&path=shared.bin")).status, 401);
    assert.equal((await sharing("model:alice/public", "shared.bin", tokens.reader)).status, 403);
  });

  it("counts every chunk of a file copied elsewhere as shared", async () => {
    const answer = await sharing("model:alice/public", "shared.bin");
    assert.equal(answer.status, 200, answer.text);
    const body = answer.json();
    assert.equal(body.xet, true);
    assert.equal(body.size, SHARED.length);
    assert.equal(body.bytes, SHARED.length);
    assert.ok(body.chunks > 1);
    assert.equal(body.sharedChunks, body.chunks);
    assert.equal(body.sharedBytes, SHARED.length);
    // copy.bin (the same file) and bigger.bin (most of its chunks).
    assert.equal(body.otherFiles, 2);
    assert.deepEqual(body.repositories, ["model:alice/private"]);
  });

  it("counts the chunks a longer file has in common", async () => {
    const body = (await sharing("model:alice/private", "bigger.bin")).json();
    assert.equal(body.bytes, SHARED_PLUS.length);
    assert.ok(body.sharedChunks > 0 && body.sharedChunks < body.chunks, JSON.stringify(body));
    assert.ok(body.sharedBytes > SHARED.length / 2 && body.sharedBytes <= SHARED.length, JSON.stringify(body));
    assert.deepEqual(body.repositories, ["model:alice/private", "model:alice/public"]);
  });

  it("answers an inline file with no chunks, a missing one with 404, a bad query with 400", async () => {
    const inline = (await sharing("model:alice/public", "NOTES.md")).json();
    assert.deepEqual([inline.xet, inline.chunks, inline.otherFiles], [false, 0, 0]);
    assert.equal((await sharing("model:alice/public", "nothing.bin")).status, 404);
    assert.equal((await call("GET", "/api/castor/sharing?repo=model:alice/public", { token: tokens.admin })).status, 400);
  });
});

describe("POST /api/castor/download-links", () => {
  const link = (token: string | undefined, json: unknown) => call("POST", "/api/castor/download-links", { token, json });
  /** GET of a link or other path, without any Authorization header. */
  const follow = async (path: string, method = "GET") => {
    const response = await fetch(`${castor.url}${path}`, { method });
    return { status: response.status, bytes: Buffer.from(await response.arrayBuffer()), headers: response.headers };
  };

  it("gives a reader of a private file a short-lived link at the commit, which serves it without a token", async () => {
    const answer = await link(tokens.reader, { repo: "model:alice/private", revision: "main", path: "bigger.bin" });
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.headers.get("cache-control"), "no-store");
    const { url, expiresAt } = answer.json();
    const head = (await call("GET", "/api/models/alice/private/revision/main", { token: tokens.reader })).json().sha;
    assert.match(url, new RegExp(`^/alice/private/resolve/${head}/bigger\\.bin\\?expires=\\d+&signature=[A-Za-z0-9_-]{43}$`));
    const lifetime = Date.parse(expiresAt) - Date.now();
    assert.ok(lifetime > 60_000 && lifetime <= 300_000, `the link lives a few minutes: ${lifetime} ms`);
    assert.equal((await follow("/alice/private/resolve/main/bigger.bin")).status, 401, "without the link, the file needs a token");
    const got = await follow(url);
    assert.equal(got.status, 200);
    assert.ok(got.bytes.equals(SHARED_PLUS), "the file, byte-exact");
    assert.equal((await follow(url, "HEAD")).status, 200);
  });

  it("keeps serving the file of its commit after the branch moved", async () => {
    const { url } = (await link(tokens.admin, { repo: "model:alice/public", revision: "main", path: "NOTES.md" })).json();
    const client = new CastorClient({ endpoint: castor.url, hubToken: tokens.admin, repo: "model:alice/public" });
    await client.commit({ summary: "Rewrite the notes", operations: [{ kind: "file", path: "NOTES.md", content: Buffer.from("other notes\n") }] });
    assert.ok((await follow(url)).bytes.equals(NOTES));
    await client.commit({ summary: "Restore the notes", operations: [{ kind: "file", path: "NOTES.md", content: NOTES }] });
  });

  it("refuses a caller who may not read the file, a missing file, a bad body", async () => {
    assert.equal((await link(undefined, { repo: "model:alice/private", path: "bigger.bin" })).status, 401);
    assert.equal((await link(tokens.stranger, { repo: "model:alice/private", path: "bigger.bin" })).status, 404);
    assert.equal((await link(tokens.reader, { repo: "model:alice/private", path: "nothing.bin" })).status, 404);
    assert.equal((await link(tokens.reader, { repo: "model:alice/private", revision: "no-such-branch", path: "bigger.bin" })).status, 404);
    assert.equal((await link(tokens.reader, { path: "bigger.bin" })).status, 400);
    assert.equal((await link(tokens.reader, { repo: "alice/private", path: "bigger.bin" })).status, 400);
  });

  it("refuses an altered link, a link moved to another file, an expired link (403, saying what to do)", async () => {
    const { url } = (await link(tokens.reader, { repo: "model:alice/private", path: "bigger.bin" })).json();
    const [path, query] = url.split("?");
    const signature = query.slice(query.indexOf("signature=") + "signature=".length);
    const flipped = `${signature.slice(0, -1)}${signature.endsWith("A") ? "B" : "A"}`;
    const expired = new DownloadLinks({ urlKey: Buffer.alloc(32, 9), now: () => Date.now() - DOWNLOAD_LINK_TTL_SECONDS * 1000 - 1 }).sign(path).url;
    const otherKey = new DownloadLinks({ urlKey: Buffer.alloc(32, 8) }).sign(path).url;
    for (const [what, target, message] of [
      ["another signature", `${path}?${query.replace(signature, flipped)}`, /not valid/],
      ["another file", `${path.replace("bigger.bin", "copy.bin")}?${query}`, /not valid/],
      ["a later expiry", `${path}?${query.replace(/expires=\d+/, `expires=${Date.now() + 86_400_000}`)}`, /not valid/],
      ["another server's key", otherKey, /not valid/],
      ["an expired link", expired, /expired/],
    ] as const) {
      const refused = await call("GET", target);
      assert.equal(refused.status, 403, `${what}: ${refused.text}`);
      assert.match(refused.json().error, message, what);
      assert.match(refused.json().error, /download the file again from the web interface/i, what);
    }
  });

  it("never writes a link's signature into the log", async () => {
    const { url } = (await link(tokens.reader, { repo: "model:alice/private", path: "copy.bin" })).json();
    assert.equal((await follow(url)).status, 200);
    const signature = url.slice(url.indexOf("signature=") + "signature=".length);
    await until(() => logLines.some((line) => line.includes("/alice/private/resolve/")), "the request's log line");
    for (const line of logLines) assert.ok(!line.includes(signature) && !line.includes("expires="), line);
  });
});

describe("/api/castor/tokens", () => {
  it("creates a token shown once, lists it without a secret, revokes it", async () => {
    assert.equal((await call("GET", "/api/castor/tokens", { token: tokens.reader })).status, 403);
    assert.equal((await call("POST", "/api/castor/tokens", { json: { access: "read", repos: "all" } })).status, 401);
    const created = await call("POST", "/api/castor/tokens", {
      token: tokens.admin,
      json: { access: "read", repos: ["model:alice/private"], owner: "carol", expires: "30d" },
    });
    assert.equal(created.status, 200, created.text);
    assert.equal(created.headers.get("cache-control"), "no-store");
    const { secret, token } = created.json();
    assert.match(secret, /^hf_/);
    assert.deepEqual([token.access, token.repos, token.owner, token.state], ["read", ["model:alice/private"], "carol", "active"]);
    assert.equal((await call("GET", "/api/castor/repos/models/alice/private/storage", { token: secret })).status, 200);

    const listed = await call("GET", "/api/castor/tokens", { token: tokens.admin });
    assert.ok(!listed.text.includes(secret), "the list never holds a secret");
    assert.equal(listed.json().find((t: any) => t.id === token.id).state, "active");

    assert.equal((await call("DELETE", `/api/castor/tokens/${token.id}`, { token: tokens.admin })).status, 200);
    assert.equal((await call("GET", "/api/castor/me", { token: secret })).status, 401);
    assert.equal((await call("GET", "/api/castor/tokens", { token: tokens.admin })).json().find((t: any) => t.id === token.id).state, "revoked");
    assert.equal((await call("DELETE", "/api/castor/tokens/tok_000000000000", { token: tokens.admin })).status, 404);
  });

  it("refuses bad options with 400", async () => {
    for (const json of [
      { access: "admin", repos: "all" },
      { access: "read", repos: [] },
      { access: "read", repos: "all", expires: "yesterday" },
      { access: "read", repos: [1] },
    ]) {
      assert.equal((await call("POST", "/api/castor/tokens", { token: tokens.admin, json })).status, 400, JSON.stringify(json));
    }
    assert.equal((await call("POST", "/api/castor/tokens", { token: tokens.admin, json: { access: "read", repos: ["model:nobody/x"] } })).status, 404);
  });
});

describe("GET /api/castor/maintenance", () => {
  it("lists the last gc and fsck runs, for admin tokens", async () => {
    assert.equal((await call("GET", "/api/castor/maintenance", { token: tokens.reader })).status, 403);
    assert.deepEqual((await call("GET", "/api/castor/maintenance", { token: tokens.admin })).json(), []);
    const startedAt = new Date("2030-01-01T00:00:00Z");
    await castor.store.recordMaintenanceRun({ kind: "fsck", startedAt, finishedAt: new Date(startedAt.getTime() + 1000), totals: { problems: 0 } });
    assert.deepEqual((await call("GET", "/api/castor/maintenance", { token: tokens.admin })).json(), [
      { kind: "fsck", startedAt: "2030-01-01T00:00:00.000Z", finishedAt: "2030-01-01T00:00:01.000Z", totals: { problems: 0 } },
    ]);
  });
});

describe("the web interface's pages", () => {
  const html = { accept: "text/html,application/xhtml+xml" };

  it("sends browsers from / and from a repository's Hub address to the interface", async () => {
    assert.deepEqual(
      [(await call("GET", "/", { headers: html })).status, (await call("GET", "/", { headers: html })).headers.get("location")],
      [302, "/-/ui/"],
    );
    const model = await call("GET", "/alice/public", { headers: html });
    assert.equal(model.headers.get("location"), "/-/ui/models/alice/public");
    assert.equal((await call("GET", "/datasets/alice/x", { headers: html })).headers.get("location"), "/-/ui/datasets/alice/x");
    assert.equal((await call("GET", "/-/ui")).headers.get("location"), "/-/ui/");
  });

  it("leaves clients' requests to the same paths as they were", async () => {
    for (const path of ["/", "/alice/public", "/spaces/alice/x"]) {
      const answer = await call("GET", path, { headers: { accept: "application/json" } });
      assert.equal(answer.status, 404, path);
      assert.match(answer.json().error, /^No endpoint answers GET/);
    }
    // A file URL of the repository still resolves (the interface takes no path of the Hub's).
    const file = await call("GET", "/alice/public/resolve/main/NOTES.md", { headers: html });
    assert.deepEqual([file.status, file.text], [200, NOTES.toString()]);
  });

  it("answers the page with a strict Content-Security-Policy at every path below /-/ui/", async () => {
    for (const path of ["/-/ui/", "/-/ui/models/alice/public", "/-/ui/storage"]) {
      const page = await call("GET", path);
      assert.equal(page.status, 200);
      assert.match(page.headers.get("content-type")!, /^text\/html/);
      const csp = page.headers.get("content-security-policy")!;
      assert.match(csp, /default-src 'none'/);
      assert.match(csp, /script-src 'self'(;|$)/);
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
      assert.match(page.text, /app-abc\.js/);
    }
  });

  it("serves the built assets with their types, immutable; 404 for others", async () => {
    const script = await call("GET", "/-/ui/assets/app-abc.js");
    assert.deepEqual([script.status, script.headers.get("content-type"), script.text], [200, "text/javascript; charset=utf-8", "console.log('castor')"]);
    assert.match(script.headers.get("cache-control")!, /immutable/);
    assert.equal((await call("GET", "/-/ui/assets/app-abc.css")).headers.get("content-type"), "text/css; charset=utf-8");
    assert.equal((await call("GET", "/-/ui/assets/missing.js")).status, 404);
    assert.equal((await call("GET", "/-/ui/assets/..%2Findex.html")).status, 404);
  });

  it("says how to build the interface when it is not built", async () => {
    const bare = await startTestApp({ name: "castor-routes-bare", webUi: { dir: join(work, "no-build") } });
    try {
      const page = await fetch(`${bare.url}/-/ui/`);
      assert.equal(page.status, 503);
      assert.match(await page.text(), /npm run build/);
    } finally {
      await bare.close();
    }
  });
});
