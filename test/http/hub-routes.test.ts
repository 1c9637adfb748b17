/**
 * The Hugging Face routes of castor's hub (HUB-API R1–R15) against a real app on SQLite and
 * the fs blob store: every route's answers and error cases, that refusals never move a
 * branch, that Xet-stored content is committed only by the repository it was uploaded to, and
 * that the ids are git's (checked by rebuilding the commit with the git binary).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { upload } from "../../src/client/index.js";
import { gitBlobId, lfsPointer } from "../../src/format/git.js";
import type { OperatorHub } from "../helpers/operator.js";
import { startTestApp, type TestApp } from "../helpers/app.js";

const INLINE_MAX = 64 * 1024;

let castor: TestApp;
let dataDir: string;
let hub: OperatorHub;
let base: string;
const logText: string[] = [];
const tokens = { alice: "", aliceRead: "", bob: "", ownerless: "" };

before(async () => {
  castor = await startTestApp({ name: "hub-routes", logLines: (line) => void logText.push(line), inlineMaxBytes: INLINE_MAX });
  ({ dataDir, hub, url: base } = castor);
  const token = async (owner: string | null, namespaces: string[], access: "read" | "write") =>
    (await hub.createToken({ repos: [], namespaces, owner, access, expiresAt: null })).secret;
  tokens.alice = await token("alice", ["alice"], "write");
  tokens.aliceRead = await token("alice", ["alice"], "read");
  tokens.bob = await token("bob", ["bob"], "write");
  tokens.ownerless = (await hub.createToken({ repos: "all", access: "write", expiresAt: null })).secret;
});

after(async () => {
  await castor?.close();
});

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json(): any;
}

async function call(
  method: string,
  path: string,
  options: { token?: string; json?: unknown; body?: string | Buffer; type?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  let body: string | Buffer | undefined = options.body;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    headers["content-type"] = "application/json";
  } else if (options.type !== undefined) {
    headers["content-type"] = options.type;
  }
  const response = await fetch(`${base}${path}`, { method, headers, body });
  const buffer = Buffer.from(await response.arrayBuffer());
  const text = buffer.toString("latin1");
  return { status: response.status, headers: response.headers, text, json: () => JSON.parse(buffer.toString("utf8")) };
}

function assertStatus(answer: Answer, status: number, code?: string): void {
  assert.equal(answer.status, status, answer.text);
  if (status >= 400) {
    assert.ok(answer.headers.get("x-error-message"), "errors carry X-Error-Message");
    assert.match(answer.headers.get("x-error-message")!, /^[\x20-\x7e]+$/, "X-Error-Message is printable ASCII");
  }
  if (code !== undefined) assert.equal(answer.headers.get("x-error-code"), code);
}

const ndjson = (...lines: unknown[]) => `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`;
const header = (summary: string, parentCommit?: string) => ({ key: "header", value: { summary, description: "", ...(parentCommit ? { parentCommit } : {}) } });
const inline = (path: string, content: string | Buffer) => ({
  key: "file",
  value: { path, encoding: "base64", content: Buffer.from(content).toString("base64") },
});

async function commit(repoPath: string, token: string, ...ops: unknown[]): Promise<Answer> {
  return call("POST", `/api/${repoPath}/commit/main`, { token, body: ndjson(header("a commit"), ...ops), type: "application/x-ndjson" });
}

async function head(repoPath: string): Promise<string> {
  const info = await call("GET", `/api/${repoPath}`, { token: tokens.alice });
  assertStatus(info, 200);
  return info.json().sha;
}

async function createRepo(token: string, body: Record<string, unknown>): Promise<Answer> {
  return call("POST", "/api/repos/create", { token, json: body });
}

describe("hub routes", () => {
  before(async () => {
    assertStatus(await createRepo(tokens.alice, { name: "bert", organization: null, type: "model" }), 200);
    assertStatus(await createRepo(tokens.alice, { name: "corpus", organization: "alice", type: "dataset" }), 200);
  });

  describe("identity and repositories", () => {
    it("whoami-v2 answers as the Hub for the token's user; 401 without or with an unknown token", async () => {
      const me = await call("GET", "/api/whoami-v2", { token: tokens.alice });
      assertStatus(me, 200);
      assert.equal(me.json().type, "user");
      assert.equal(me.json().name, "alice");
      assert.equal(me.json().auth.accessToken.role, "write");
      assert.deepEqual(me.json().orgs, []);
      assert.equal((await call("GET", "/api/whoami-v2", { token: tokens.aliceRead })).json().auth.accessToken.role, "read");
      assertStatus(await call("GET", "/api/whoami-v2"), 401);
      assertStatus(await call("GET", "/api/whoami-v2", { token: "hf_unknown" }), 401);
    });

    it("create answers the URL on the public endpoint; 409 carries the URL; others' namespaces 403", async () => {
      const created = await createRepo(tokens.alice, { name: "alice/gpt", type: "model", private: false });
      assertStatus(created, 200);
      assert.deepEqual(created.json(), { url: `${base}/alice/gpt`, name: "alice/gpt", id: "alice/gpt" });
      const again = await createRepo(tokens.alice, { name: "gpt", organization: "alice", type: "model" });
      assertStatus(again, 409);
      assert.equal(again.json().url, `${base}/alice/gpt`);
      assert.ok(again.json().error);
      assert.equal((await createRepo(tokens.alice, { name: "corpus", organization: "alice", type: "dataset" })).json().url, `${base}/datasets/alice/corpus`);
      assertStatus(await createRepo(tokens.bob, { name: "alice/evil", type: "model" }), 403);
      assertStatus(await createRepo(tokens.aliceRead, { name: "alice/readonly", type: "model" }), 403);
      assertStatus(await createRepo(tokens.ownerless, { name: "nameless", organization: null, type: "model" }), 400);
      assertStatus(await createRepo(tokens.alice, { name: "alice/bad name", type: "model" }), 400);
      assertStatus(await createRepo(tokens.alice, { name: "alice/x", type: "weights" }), 400);
      assertStatus(await call("POST", "/api/repos/create", { json: { name: "alice/anon" } }), 401);
    });

    it("info has id, sha, siblings, private and lastModified; another user's private repo is RepoNotFound", async () => {
      const info = await call("GET", "/api/models/alice/bert", { token: tokens.alice });
      assertStatus(info, 200);
      const body = info.json();
      assert.equal(body.id, "alice/bert");
      assert.match(body.sha, /^[0-9a-f]{40}$/);
      assert.equal(body.private, true);
      assert.ok(Array.isArray(body.siblings));
      assert.match(body.lastModified, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assertStatus(await call("GET", "/api/models/alice/bert", { token: tokens.bob }), 404, "RepoNotFound");
      assertStatus(await call("GET", "/api/models/alice/nothing", { token: tokens.alice }), 404, "RepoNotFound");
      assertStatus(await call("GET", "/api/models/alice/bert"), 401, "RepoNotFound");
      assertStatus(await call("GET", "/api/models/alice/bert/revision/nope", { token: tokens.alice }), 404, "RevisionNotFound");
    });

    it("public repositories are readable anonymously, but not writable", async () => {
      assertStatus(await createRepo(tokens.alice, { name: "alice/open", type: "model", private: false }), 200);
      assertStatus(await commit("models/alice/open", tokens.alice, inline("hello.txt", "hello\n")), 200);
      assertStatus(await call("GET", "/api/models/alice/open"), 200);
      assertStatus(await call("GET", "/api/models/alice/open/tree/main"), 200);
      const file = await call("GET", "/alice/open/resolve/main/hello.txt");
      assertStatus(file, 200);
      assert.equal(file.text, "hello\n");
      assertStatus(await call("GET", "/api/models/alice/open/xet-read-token/main"), 200);
      assertStatus(await call("GET", "/api/models/alice/open/xet-write-token/main"), 401);
      assertStatus(await commit("models/alice/open", tokens.bob, inline("x.txt", "x")), 403);
      assertStatus(
        await call("POST", "/api/models/alice/open/commit/main", { body: ndjson(header("anon"), inline("y", "y")), type: "application/x-ndjson" }),
        401,
      );
    });

    it("settings switch visibility; delete removes the repository", async () => {
      assertStatus(await createRepo(tokens.alice, { name: "alice/temp", type: "model" }), 200);
      assertStatus(await call("GET", "/api/models/alice/temp"), 401);
      assertStatus(await call("PUT", "/api/models/alice/temp/settings", { token: tokens.alice, json: { private: false } }), 200);
      assertStatus(await call("GET", "/api/models/alice/temp"), 200);
      assertStatus(await call("PUT", "/api/models/alice/temp/settings", { token: tokens.aliceRead, json: { private: true } }), 403);
      assertStatus(await call("DELETE", "/api/repos/delete", { token: tokens.bob, json: { name: "alice/temp", type: "model" } }), 403);
      assertStatus(await call("DELETE", "/api/repos/delete", { token: tokens.alice, json: { name: "temp", organization: "alice", type: "model" } }), 200);
      assertStatus(await call("GET", "/api/models/alice/temp", { token: tokens.alice }), 404, "RepoNotFound");
    });

    it("lists the repositories a caller can read", async () => {
      const mine = (await call("GET", "/api/models?author=alice", { token: tokens.alice })).json().map((r: { id: string }) => r.id);
      assert.ok(mine.includes("alice/bert") && mine.includes("alice/open"));
      const anonymous = (await call("GET", "/api/models")).json().map((r: { id: string }) => r.id);
      assert.ok(anonymous.includes("alice/open"));
      assert.ok(!anonymous.includes("alice/bert"), "private repositories are not listed to anonymous callers");
      const datasets = (await call("GET", "/api/datasets", { token: tokens.alice })).json().map((r: { id: string }) => r.id);
      assert.deepEqual(datasets, ["alice/corpus"]);
    });

    it("the calls castor answers without work: validate-yaml, agent-harnesses, LFS batch", async () => {
      const yaml = await call("POST", "/api/validate-yaml", { token: tokens.alice, json: { content: "---\nlicense: mit\n---\n", repoType: "model" } });
      assertStatus(yaml, 200);
      assert.deepEqual(yaml.json(), { errors: [], warnings: [] });
      assertStatus(await call("GET", "/api/agent-harnesses"), 200);
      // The LFS batch call without transfers means git-lfs's basic transfer (test/http/hub-lfs-batch.test.ts has the rest).
      const batch = await call("POST", "/alice/bert.git/info/lfs/objects/batch", { token: tokens.alice, json: { operation: "upload", objects: [] } });
      assertStatus(batch, 200);
      assert.deepEqual(batch.json(), { transfer: "basic", hash_algo: "sha256", objects: [] });
      const refused = await call("POST", "/alice/bert.git/info/lfs/objects/batch", {
        token: tokens.alice,
        json: { operation: "upload", transfers: ["ssh"], objects: [] },
      });
      assertStatus(refused, 400);
      assert.match(refused.json().error, /"basic" and \(for uploads\) "xet"/);
    });
  });

  describe("commits, trees and files", () => {
    it("commits inline files; the tree lists them with git blob ids and sizes; resolve serves them", async () => {
      const readme = "---\nlicense: mit\n---\n# bert\n";
      const nested = Buffer.from("nested file ✓\n");
      const done = await commit("models/alice/bert", tokens.alice, inline("README.md", readme), inline("configs/base/config.json", nested));
      assertStatus(done, 200);
      const { commitOid, commitUrl } = done.json();
      assert.match(commitOid, /^[0-9a-f]{40}$/);
      assert.equal(commitUrl, `${base}/alice/bert/commit/${commitOid}`);
      assert.equal(await head("models/alice/bert"), commitOid);

      const tree = (await call("GET", "/api/models/alice/bert/tree/main?recursive=true&expand=false", { token: tokens.alice })).json();
      assert.deepEqual(
        tree.map((e: { type: string; path: string }) => `${e.type}:${e.path}`),
        ["file:README.md", "directory:configs", "directory:configs/base", "file:configs/base/config.json"],
      );
      const readmeEntry = tree.find((e: { path: string }) => e.path === "README.md");
      assert.deepEqual(readmeEntry, { type: "file", path: "README.md", oid: gitBlobId(readme), size: Buffer.byteLength(readme) });
      const top = (await call("GET", "/api/models/alice/bert/tree/main", { token: tokens.alice })).json();
      assert.deepEqual(
        top.map((e: { path: string }) => e.path),
        ["README.md", "configs"],
      );
      const folder = (await call("GET", "/api/models/alice/bert/tree/main/configs%2Fbase", { token: tokens.alice })).json();
      assert.deepEqual(
        folder.map((e: { path: string }) => e.path),
        ["configs/base/config.json"],
      );
      assertStatus(await call("GET", "/api/models/alice/bert/tree/main/missing", { token: tokens.alice }), 404, "EntryNotFound");

      const file = await call("GET", "/alice/bert/resolve/main/configs/base/config.json", { token: tokens.alice });
      assertStatus(file, 200);
      assert.ok(Buffer.from(file.text, "latin1").equals(nested));
      assert.equal(file.headers.get("etag"), `"${gitBlobId(nested)}"`);
      assert.equal(file.headers.get("x-repo-commit"), commitOid);
      const atCommit = await call("HEAD", `/alice/bert/resolve/${commitOid}/README.md`, { token: tokens.alice });
      assertStatus(atCommit, 200);
      assert.equal(atCommit.headers.get("content-length"), String(Buffer.byteLength(readme)));

      const info = (await call("GET", "/api/models/alice/bert?blobs=true", { token: tokens.alice })).json();
      assert.deepEqual(
        info.siblings.map((s: { rfilename: string }) => s.rfilename),
        ["README.md", "configs/base/config.json"],
      );
      assert.equal(info.siblings[0].blobId, gitBlobId(readme));
    });

    it("ranged GET of an inline file: 206 with Content-Range, 416 past the end", async () => {
      const content = randomBytes(5000);
      assertStatus(await commit("models/alice/bert", tokens.alice, inline("data/blob.bin", content)), 200);
      const part = await call("GET", "/alice/bert/resolve/main/data/blob.bin", { token: tokens.alice, headers: { range: "bytes=100-199" } });
      assertStatus(part, 206);
      assert.equal(part.headers.get("content-range"), "bytes 100-199/5000");
      assert.ok(Buffer.from(part.text, "latin1").equals(content.subarray(100, 200)));
      const tail = await call("GET", "/alice/bert/resolve/main/data/blob.bin", { token: tokens.alice, headers: { range: "bytes=-10" } });
      assert.ok(Buffer.from(tail.text, "latin1").equals(content.subarray(4990)));
      const past = await call("GET", "/alice/bert/resolve/main/data/blob.bin", { token: tokens.alice, headers: { range: "bytes=5000-" } });
      assert.equal(past.status, 416);
      assert.equal(past.headers.get("content-range"), "bytes */5000");
    });

    it("missing files, revisions and repositories answer 404 with X-Error-Code, on HEAD too", async () => {
      const sha = await head("models/alice/bert");
      const missing = await call("HEAD", "/alice/bert/resolve/main/nope.txt", { token: tokens.alice });
      assertStatus(missing, 404, "EntryNotFound");
      assert.equal(missing.headers.get("x-repo-commit"), sha);
      assertStatus(await call("HEAD", "/alice/bert/resolve/nobranch/README.md", { token: tokens.alice }), 404, "RevisionNotFound");
      assertStatus(await call("HEAD", "/alice/nothing/resolve/main/README.md", { token: tokens.alice }), 404, "RepoNotFound");
      assertStatus(await call("HEAD", "/datasets/alice/corpus/resolve/main/README.md", { token: tokens.alice }), 404, "EntryNotFound");
    });

    it("preupload decides regular or lfs, with shouldIgnore, and oid only for the identical current file", async () => {
      const readme = (await call("GET", "/alice/bert/resolve/main/README.md", { token: tokens.alice })).text;
      const sample = (bytes: Buffer) => bytes.subarray(0, 512).toString("base64");
      const answer = await call("POST", "/api/models/alice/bert/preupload/main", {
        token: tokens.alice,
        json: {
          files: [
            { path: "README.md", sample: sample(Buffer.from(readme)), size: readme.length },
            { path: "small.txt", sample: sample(Buffer.from("text")), size: 4 },
            { path: "binary.bin", sample: sample(Buffer.from([1, 0, 2])), size: 3 },
            { path: "big.txt", sample: sample(Buffer.from("a")), size: INLINE_MAX },
            { path: "empty.txt", sample: "", size: 0 },
          ],
        },
      });
      assertStatus(answer, 200);
      assert.deepEqual(answer.json().files, [
        { path: "README.md", uploadMode: "regular", oid: gitBlobId(readme), shouldIgnore: false },
        { path: "small.txt", uploadMode: "regular", shouldIgnore: false },
        { path: "binary.bin", uploadMode: "lfs", shouldIgnore: false },
        { path: "big.txt", uploadMode: "lfs", shouldIgnore: false },
        { path: "empty.txt", uploadMode: "regular", shouldIgnore: false },
      ]);
      assertStatus(await call("POST", "/api/models/alice/bert/preupload/main", { token: tokens.aliceRead, json: { files: [] } }), 403);
      assertStatus(await call("POST", "/api/models/alice/bert/preupload/main", { token: tokens.bob, json: { files: [] } }), 404, "RepoNotFound");
      assertStatus(
        await call("POST", "/api/models/alice/bert/preupload/main", { token: tokens.alice, json: { files: [{ path: "../x", sample: "", size: 1 }] } }),
        400,
      );
      assertStatus(await call("POST", "/api/models/alice/bert/preupload/main?create_pr=1", { token: tokens.alice, json: { files: [] } }), 400, "NotSupported");
    });

    it("refused commits answer 4xx and leave the branch where it was", async () => {
      const before = await head("models/alice/bert");
      const refusals: [Answer, number, string?][] = [
        [await commit("models/alice/bert", tokens.alice, { key: "deletedFile", value: { path: "nope.txt" } }), 404, "EntryNotFound"],
        [
          await commit("models/alice/bert", tokens.alice, inline("ok.txt", "fine"), { key: "deletedFolder", value: { path: "nofolder" } }),
          404,
          "EntryNotFound",
        ],
        [
          await call("POST", "/api/models/alice/bert/commit/main", {
            token: tokens.alice,
            body: ndjson(header("stale", "0".repeat(40)), inline("x", "x")),
            type: "application/x-ndjson",
          }),
          412,
        ],
        [await call("POST", "/api/models/alice/bert/commit/main", { token: tokens.alice, body: "{not json\n", type: "application/x-ndjson" }), 400],
        [await call("POST", "/api/models/alice/bert/commit/main", { token: tokens.alice, body: ndjson(inline("x", "x")), type: "application/x-ndjson" }), 400],
        [await commit("models/alice/bert", tokens.alice, { key: "copyFile", value: { path: "x" } }), 400],
        // Found by the commit fuzz target: once a 500.
        [await commit("models/alice/bert", tokens.alice, null), 400],
        [await commit("models/alice/bert", tokens.alice, { key: { toString: 1 }, value: { path: "x" } }), 400],
        [await commit("models/alice/bert", tokens.alice, inline("a/../b", "x")), 400],
        [await commit("models/alice/bert", tokens.alice, inline("README.md/inside", "x")), 400],
        [await commit("models/alice/bert", tokens.alice, inline("configs", "x")), 400],
        [await commit("models/alice/bert", tokens.alice, inline("huge.txt", Buffer.alloc(INLINE_MAX + 10, 97))), 413],
        [await commit("models/alice/bert", tokens.aliceRead, inline("x", "x")), 403],
        [await commit("models/alice/bert", tokens.bob, inline("x", "x")), 404, "RepoNotFound"],
        [await commit("models/alice/bert", "hf_unknown", inline("x", "x")), 401],
        [
          await call("POST", `/api/models/alice/bert/commit/${before}`, {
            token: tokens.alice,
            body: ndjson(header("to a commit"), inline("x", "x")),
            type: "application/x-ndjson",
          }),
          400,
        ],
        [
          await call("POST", "/api/models/alice/bert/commit/main?create_pr=1", {
            token: tokens.alice,
            body: ndjson(header("pr"), inline("x", "x")),
            type: "application/x-ndjson",
          }),
          400,
          "NotSupported",
        ],
        [await commit("models/alice/bert", tokens.alice, { key: "lfsFile", value: { path: "w.bin", algo: "sha256", oid: "ab".repeat(32), size: 10 } }), 400],
      ];
      for (const [answer, status, code] of refusals) assertStatus(answer, status, code);
      assert.equal(await head("models/alice/bert"), before, "no refused commit moved the branch");
    });

    it("refused commits store none of their inline files; an accepted one stores exactly its own", async () => {
      const stored = async () => (await readdir(join(dataDir, "blobs", "inline"), { recursive: true })).filter((name) => /[0-9a-f]{64}$/.test(name)).sort();
      assertStatus(await createRepo(tokens.alice, { name: "alice/blobs", type: "model" }), 200);
      assertStatus(await commit("models/alice/blobs", tokens.alice, inline("base.txt", "base")), 200);
      const before = await stored();
      const fresh = (count: number) => Array.from({ length: count }, (_, i) => inline(`fresh/${i}.txt`, randomBytes(64).toString("hex")));
      const refusals: [Answer, number][] = [
        // A bad line after many good ones, found only once their contents were read.
        [
          await call("POST", "/api/models/alice/blobs/commit/main", {
            token: tokens.alice,
            body: `${ndjson(header("x"), ...fresh(50))}{not json\n`,
            type: "application/x-ndjson",
          }),
          400,
        ],
        [await commit("models/alice/blobs", tokens.alice, ...fresh(20), inline("a/../b", "x")), 400],
        // Refusals decided where the commit is applied, after the whole body was read.
        [await commit("models/alice/blobs", tokens.alice, ...fresh(20), { key: "deletedFile", value: { path: "nope.txt" } }), 404],
        [await commit("models/alice/blobs", tokens.alice, ...fresh(20), inline("base.txt/inside", "x")), 400],
        [
          await call("POST", "/api/models/alice/blobs/commit/main", {
            token: tokens.alice,
            body: ndjson(header("stale", "0".repeat(40)), ...fresh(20)),
            type: "application/x-ndjson",
          }),
          412,
        ],
      ];
      for (const [answer, status] of refusals) assertStatus(answer, status);
      assert.deepEqual(await stored(), before, "no refused commit left an inline blob");
      const accepted = fresh(5);
      assertStatus(await commit("models/alice/blobs", tokens.alice, ...accepted), 200);
      const added = (await stored()).filter((name) => !before.includes(name)).map((name) => name.slice(-64));
      const expected = accepted.map((op) => createHash("sha256").update(Buffer.from(op.value.content, "base64")).digest("hex"));
      assert.deepEqual(added.sort(), expected.sort());
      assert.deepEqual(await readdir(join(dataDir, "spool")).catch(() => []), [], "nothing left in the spool");
    });

    it("refuses paths that are dangerous on clients' disks with a 400 naming the rule, at commit and preupload", async () => {
      const before = await head("models/alice/bert");
      const cases: [string, RegExp][] = [
        ["..\\evil", /backslash/],
        ["a\\..\\..\\b", /backslash/],
        ["line\nbreak.txt", /control character U\+000A/],
        [" ", /starts or ends with white space/],
        ["evil\u202etxt.exe", /U\+202E, an invisible character/],
        ["%2e%2e/x", /percent-encoded/],
        ["C:evil", /drive letter/],
        ["name.", /ends with '\.'/],
        [".GIT/config", /git's own folder/],
      ];
      for (const [path, rule] of cases) {
        const refused = await commit("models/alice/bert", tokens.alice, inline(path, "x"));
        assertStatus(refused, 400);
        assert.match(refused.json().error, rule, JSON.stringify(path));
        assert.match(refused.json().error, /^invalid path /);
        const preupload = await call("POST", "/api/models/alice/bert/preupload/main", {
          token: tokens.alice,
          json: { files: [{ path, sample: "", size: 1 }] },
        });
        assertStatus(preupload, 400);
        assert.match(preupload.json().error, rule);
      }
      const lfs = await commit("models/alice/bert", tokens.alice, {
        key: "lfsFile",
        value: { path: "w\\x.bin", algo: "sha256", oid: "ab".repeat(32), size: 1 },
      });
      assertStatus(lfs, 400);
      assert.match(lfs.json().error, /backslash/);
      assert.equal(await head("models/alice/bert"), before, "no refused commit moved the branch");
    });

    it("refuses a name that differs from another of its folder only in case or Unicode normalization", async () => {
      assertStatus(await createRepo(tokens.alice, { name: "alice/names", type: "model" }), 200);
      const nfc = "caf\u00e9.txt";
      const nfd = "cafe\u0301.txt";
      const both = await commit("models/alice/names", tokens.alice, inline(nfc, "composed"), inline(nfd, "decomposed"));
      assertStatus(both, 400);
      assert.match(
        both.json().error,
        /cannot add "cafe\u0301\.txt" to the repository's root: it holds "caf\u00e9\.txt", a name that differs only in letter case or Unicode normalization/,
      );
      assertStatus(await commit("models/alice/names", tokens.alice, inline(nfc, "composed"), inline("data/train.csv", "a,b\n")), 200);
      const later = await commit("models/alice/names", tokens.alice, inline(nfd, "decomposed"));
      assertStatus(later, 400);
      assert.match(later.json().error, /macOS and Windows disks keep one file for both/);
      const folder = await commit("models/alice/names", tokens.alice, inline("Data/test.csv", "c,d\n"));
      assertStatus(folder, 400);
      assert.match(folder.json().error, /cannot add "Data" to the repository's root: it holds "data"/);
      const inFolder = await commit("models/alice/names", tokens.alice, inline("data/TRAIN.csv", "c,d\n"));
      assertStatus(inFolder, 400);
      assert.match(inFolder.json().error, /cannot add "TRAIN\.csv" to the folder "data": it holds "train\.csv"/);
      // A rename in case replaces the old name in one commit; writing the same name again is an update.
      assertStatus(await commit("models/alice/names", tokens.alice, { key: "deletedFile", value: { path: nfc } }, inline("CAF\u00c9.txt", "renamed")), 200);
      assertStatus(await commit("models/alice/names", tokens.alice, inline("CAF\u00c9.txt", "updated")), 200);
      const tree = (await call("GET", "/api/models/alice/names/tree/main", { token: tokens.alice })).json();
      assert.deepEqual(tree.map((entry: { path: string }) => entry.path).sort(), ["CAF\u00c9.txt", "data"]);
    });

    it("a matching parentCommit is accepted; deletes remove files and emptied folders", async () => {
      const parent = await head("models/alice/bert");
      const answer = await call("POST", "/api/models/alice/bert/commit/main", {
        token: tokens.alice,
        body: ndjson(
          header("remove data", parent),
          { key: "deletedFolder", value: { path: "data/" } },
          { key: "deletedFile", value: { path: "configs/base/config.json" } },
        ),
        type: "application/x-ndjson",
      });
      assertStatus(answer, 200);
      const tree = (await call("GET", "/api/models/alice/bert/tree/main?recursive=true", { token: tokens.alice })).json();
      assert.deepEqual(
        tree.map((e: { path: string }) => e.path),
        ["README.md"],
      );
      // The old commit is still there, unchanged: commit ids are immutable.
      assertStatus(await call("HEAD", `/alice/bert/resolve/${parent}/data/blob.bin`, { token: tokens.alice }), 200);
    });

    it("lfsFile commits content uploaded through Xet to this repository only, with its size", async () => {
      const content = randomBytes(300_000);
      const sha256 = createHash("sha256").update(content).digest("hex");
      const path = join(dataDir, "weights.bin");
      await writeFile(path, content);
      const result = await upload({ endpoint: base, hubToken: tokens.alice, repo: "dataset:alice/corpus", files: [path] });
      const xetHash = result.files[0].fileHash;
      const lfs = (p: string, size?: number) => ({ key: "lfsFile", value: { path: p, algo: "sha256", oid: sha256, ...(size === undefined ? {} : { size }) } });

      // Stored, but for another repository: knowing the SHA-256 is not enough.
      assertStatus(await commit("models/alice/bert", tokens.alice, lfs("weights.bin", content.length)), 400);
      assertStatus(await commit("datasets/alice/corpus", tokens.alice, lfs("weights.bin", content.length + 1)), 400);
      const done = await commit("datasets/alice/corpus", tokens.alice, lfs("weights.bin", content.length), lfs("copy.bin"));
      assertStatus(done, 200);

      const tree = (await call("GET", "/api/datasets/alice/corpus/tree/main", { token: tokens.alice })).json();
      const pointer = lfsPointer(sha256, content.length);
      const entry = tree.find((e: { path: string }) => e.path === "weights.bin");
      assert.deepEqual(entry, {
        type: "file",
        path: "weights.bin",
        oid: gitBlobId(pointer),
        size: content.length,
        lfs: { oid: sha256, size: content.length, pointerSize: Buffer.byteLength(pointer) },
        xetHash,
      });

      const headAnswer = await call("HEAD", "/datasets/alice/corpus/resolve/main/weights.bin", { token: tokens.alice });
      assertStatus(headAnswer, 200);
      const commitOid = done.json().commitOid;
      assert.equal(headAnswer.headers.get("x-repo-commit"), commitOid);
      assert.equal(headAnswer.headers.get("x-xet-hash"), xetHash);
      assert.equal(headAnswer.headers.get("etag"), `"${sha256}"`);
      assert.equal(headAnswer.headers.get("x-linked-etag"), `"${sha256}"`);
      assert.equal(headAnswer.headers.get("x-linked-size"), String(content.length));
      assert.equal(headAnswer.headers.get("content-length"), String(content.length));
      assert.equal(
        headAnswer.headers.get("link"),
        `<${base}/api/datasets/alice/corpus/xet-read-token/${commitOid}>; rel="xet-auth", <${base}/v1/reconstructions/${xetHash}>; rel="xet-reconstruction-info"`,
      );
      const readToken = await call("GET", `/api/datasets/alice/corpus/xet-read-token/${commitOid}`, { token: tokens.aliceRead });
      assertStatus(readToken, 200);
      assert.equal(readToken.headers.get("x-xet-access-token"), readToken.json().accessToken);

      // Plain HTTP download, reconstructed by the server: whole and ranged.
      const whole = await call("GET", "/datasets/alice/corpus/resolve/main/weights.bin", { token: tokens.alice });
      assertStatus(whole, 200);
      assert.ok(Buffer.from(whole.text, "latin1").equals(content));
      const ranged = await call("GET", "/datasets/alice/corpus/resolve/main/copy.bin", { token: tokens.alice, headers: { range: "bytes=123456-234567" } });
      assertStatus(ranged, 206);
      assert.ok(Buffer.from(ranged.text, "latin1").equals(content.subarray(123456, 234568)));

      const paths = await call("POST", "/api/datasets/alice/corpus/paths-info/main", {
        token: tokens.alice,
        body: "paths=weights.bin&paths=missing.bin&expand=false",
        type: "application/x-www-form-urlencoded",
      });
      assertStatus(paths, 200);
      assert.deepEqual(paths.json(), [entry]);
    });

    it("resolve describes a Xet file as JSON to Accept: application/vnd.xet-fileinfo+json (Vary: Accept); other answers keep the bytes", async () => {
      assertStatus(await createRepo(tokens.alice, { name: "alice/fileinfo", type: "model" }), 200);
      const content = randomBytes(150_000);
      const sha256 = createHash("sha256").update(content).digest("hex");
      const path = join(dataDir, "fileinfo.bin");
      await writeFile(path, content);
      const xetHash = (await upload({ endpoint: base, hubToken: tokens.alice, repo: "model:alice/fileinfo", files: [path] })).files[0].fileHash;
      const done = await commit(
        "models/alice/fileinfo",
        tokens.alice,
        { key: "lfsFile", value: { path: "w.bin", algo: "sha256", oid: sha256, size: content.length } },
        inline("notes.txt", "some notes\n"),
      );
      assertStatus(done, 200);
      const commitOid = done.json().commitOid;
      // What @huggingface/hub's fileDownloadInfo sends.
      const asked = { token: tokens.alice, headers: { accept: "application/vnd.xet-fileinfo+json, */*", range: "bytes=0-0" } };

      const info = await call("GET", "/alice/fileinfo/resolve/main/w.bin", asked);
      assertStatus(info, 200);
      assert.match(info.headers.get("content-type") ?? "", /^application\/vnd\.xet-fileinfo\+json/);
      assert.equal(info.headers.get("vary"), "Accept");
      const refreshUrl = `${base}/api/models/alice/fileinfo/xet-read-token/${commitOid}`;
      const reconstructionUrl = `${base}/v1/reconstructions/${xetHash}`;
      assert.deepEqual(info.json(), { hash: xetHash, size: content.length, etag: sha256, refreshUrl, reconstructionUrl });
      assert.equal(info.headers.get("content-length"), String(Buffer.byteLength(info.text)));
      assert.equal(info.headers.get("x-xet-hash"), xetHash);
      assert.equal(info.headers.get("x-linked-size"), String(content.length));
      assert.equal(info.headers.get("x-linked-etag"), `"${sha256}"`);
      assert.equal(info.headers.get("x-repo-commit"), commitOid);
      assert.equal(info.headers.get("link"), `<${refreshUrl}>; rel="xet-auth", <${reconstructionUrl}>; rel="xet-reconstruction-info"`);

      // An inline file has no Xet description: the (ranged) bytes, which tell the size in Content-Range.
      const notes = await call("GET", "/alice/fileinfo/resolve/main/notes.txt", asked);
      assertStatus(notes, 206);
      assert.equal(notes.text, "s");
      assert.equal(notes.headers.get("content-range"), "bytes 0-0/11");
      assert.equal(notes.headers.get("vary"), "Accept");
      // Without the media type: the bytes, and HEAD as before, both saying they vary with Accept.
      const bytes = await call("GET", "/alice/fileinfo/resolve/main/w.bin", { token: tokens.alice, headers: { accept: "*/*" } });
      assertStatus(bytes, 200);
      assert.ok(Buffer.from(bytes.text, "latin1").equals(content));
      assert.equal(bytes.headers.get("vary"), "Accept");
      const headAnswer = await call("HEAD", "/alice/fileinfo/resolve/main/w.bin", asked);
      assertStatus(headAnswer, 200);
      assert.equal(headAnswer.headers.get("content-length"), String(content.length));
      assert.equal(headAnswer.headers.get("vary"), "Accept");
      assertStatus(await call("GET", "/alice/fileinfo/resolve/main/missing.bin", asked), 404, "EntryNotFound");
    });

    it("raw serves git blobs (a Xet file's LFS pointer, an inline file's bytes); the revision HEAD is main", async () => {
      // alice/fileinfo from the test before: w.bin through Xet, notes.txt inline.
      const tree = (await call("GET", "/api/models/alice/fileinfo/tree/main", { token: tokens.alice })).json();
      const w = tree.find((e: { path: string }) => e.path === "w.bin");
      const pointer = lfsPointer(w.lfs.oid, w.size);
      const raw = await call("GET", "/alice/fileinfo/raw/main/w.bin", { token: tokens.alice, headers: { accept: "application/vnd.xet-fileinfo+json, */*" } });
      assertStatus(raw, 200);
      assert.equal(raw.text, pointer);
      assert.equal(raw.headers.get("etag"), `"${w.oid}"`);
      assert.equal(gitBlobId(Buffer.from(pointer)), w.oid);
      const rawHead = await call("HEAD", "/alice/fileinfo/raw/main/w.bin", { token: tokens.alice });
      assertStatus(rawHead, 200);
      assert.equal(rawHead.headers.get("content-length"), String(Buffer.byteLength(pointer)));
      assert.equal(rawHead.headers.get("x-repo-commit"), await head("models/alice/fileinfo"));
      const ranged = await call("GET", "/alice/fileinfo/raw/main/w.bin", { token: tokens.alice, headers: { range: "bytes=0-6" } });
      assertStatus(ranged, 206);
      assert.equal(ranged.text, "version");
      assert.equal(ranged.headers.get("content-range"), `bytes 0-6/${Buffer.byteLength(pointer)}`);
      const notes = await call("GET", "/alice/fileinfo/raw/main/notes.txt", { token: tokens.alice });
      assertStatus(notes, 200);
      assert.equal(notes.text, "some notes\n");
      assertStatus(await call("HEAD", "/alice/fileinfo/raw/main/missing.txt", { token: tokens.alice }), 404, "EntryNotFound");
      assertStatus(await call("HEAD", "/alice/fileinfo/raw/main/notes.txt", { token: tokens.bob }), 404, "RepoNotFound");
      assertStatus(await call("GET", "/datasets/alice/corpus/raw/main/weights.bin", { token: tokens.alice }), 200);

      const info = await call("GET", "/api/models/alice/fileinfo/revision/HEAD", { token: tokens.alice });
      assertStatus(info, 200);
      assert.equal(info.json().sha, await head("models/alice/fileinfo"));
      assertStatus(await call("HEAD", "/alice/fileinfo/resolve/HEAD/notes.txt", { token: tokens.alice }), 200);
    });

    it("serves repository content so that no browser runs it as a page or script of castor's origin", async () => {
      // alice/fileinfo from the tests before: w.bin through Xet, notes.txt inline.
      const answers = [
        await call("GET", "/alice/fileinfo/resolve/main/notes.txt", { token: tokens.alice }),
        await call("HEAD", "/alice/fileinfo/resolve/main/notes.txt", { token: tokens.alice }),
        await call("GET", "/alice/fileinfo/resolve/main/notes.txt", { token: tokens.alice, headers: { range: "bytes=0-3" } }),
        await call("GET", "/alice/fileinfo/resolve/main/w.bin", { token: tokens.alice }),
        await call("GET", "/alice/fileinfo/resolve/main/w.bin", { token: tokens.alice, headers: { accept: "application/vnd.xet-fileinfo+json" } }),
        await call("HEAD", "/alice/fileinfo/resolve/main/w.bin", { token: tokens.alice }),
        await call("GET", "/alice/fileinfo/raw/main/notes.txt", { token: tokens.alice }),
        await call("HEAD", "/alice/fileinfo/raw/main/w.bin", { token: tokens.alice }),
      ];
      for (const answer of answers) {
        assert.ok(answer.status === 200 || answer.status === 206, answer.text);
        assert.equal(answer.headers.get("x-content-type-options"), "nosniff");
        assert.equal(answer.headers.get("content-security-policy"), "default-src 'none'; sandbox");
      }
    });

    it("commit history pages by ?limit= with rel=next links that keep the limit, pinned to the commit", async () => {
      assertStatus(await createRepo(tokens.alice, { name: "alice/history", type: "model" }), 200);
      for (let i = 0; i < 6; i++) assertStatus(await commit("models/alice/history", tokens.alice, inline(`f${i}.txt`, `${i}\n`)), 200);
      const all = await call("GET", "/api/models/alice/history/commits/main", { token: tokens.alice });
      assertStatus(all, 200);
      assert.equal(all.json().length, 7, "six commits and the initial one");
      assert.equal(all.headers.get("link"), null);
      const tip = all.json()[0].id;

      const pages: string[][] = [];
      let next: string | null = `${base}/api/models/alice/history/commits/main?limit=3`;
      while (next !== null) {
        const page = await call("GET", next.slice(base.length), { token: tokens.alice });
        assertStatus(page, 200);
        pages.push(page.json().map((c: { id: string }) => c.id));
        const link = page.headers.get("link");
        next = link === null ? null : /^<([^>]+)>; rel="next"$/.exec(link)![1];
        if (next !== null) assert.match(next, new RegExp(`/commits/${tip}\\?p=${pages.length}&limit=3$`));
      }
      assert.deepEqual(
        pages.map((page) => page.length),
        [3, 3, 1],
      );
      assert.deepEqual(
        pages.flat(),
        all.json().map((c: { id: string }) => c.id),
      );
      // Out-of-range limits are clamped, as the tree's are.
      assert.equal((await call("GET", "/api/models/alice/history/commits/main?limit=0", { token: tokens.alice })).json().length, 7);
      assert.equal((await call("GET", "/api/models/alice/history/commits/main?limit=5000", { token: tokens.alice })).json().length, 7);
      const one = await call("GET", "/api/models/alice/history/commits/main?limit=1&p=6", { token: tokens.alice });
      assert.equal(one.json()[0].title, "initial commit");
      assert.equal(one.headers.get("link"), null);
    });

    it("lists a large tree in pages linked by rel=next, pinned to the commit", async () => {
      assertStatus(await createRepo(tokens.alice, { name: "alice/many", type: "model" }), 200);
      const files = Array.from({ length: 2500 }, (_, i) => inline(`files/f${String(i).padStart(5, "0")}.txt`, `${i}\n`));
      assertStatus(await commit("models/alice/many", tokens.alice, ...files), 200);
      const seen: string[] = [];
      let next: string | null = "/api/models/alice/many/tree/main?recursive=true";
      let pages = 0;
      while (next !== null) {
        const page = await call("GET", next.replace(base, ""), { token: tokens.alice });
        assertStatus(page, 200);
        pages++;
        seen.push(...page.json().map((e: { path: string }) => e.path));
        const link = page.headers.get("link");
        next = link === null ? null : /<([^>]+)>; rel="next"/.exec(link)![1];
        if (next !== null) assert.match(next, /\/tree\/[0-9a-f]{40}\?/);
      }
      assert.equal(pages, 3);
      assert.equal(seen.length, 2501);
      assert.equal(new Set(seen).size, 2501);
    });
  });

  describe("revisions", () => {
    it("branches, tags, refs and commit history; token routes at branch names and commit ids", async () => {
      const main = await head("models/alice/bert");
      assertStatus(await call("POST", "/api/models/alice/bert/branch/dev", { token: tokens.alice, json: {} }), 200);
      assertStatus(await call("POST", "/api/models/alice/bert/branch/dev", { token: tokens.alice, json: {} }), 409);
      assertStatus(await call("POST", `/api/models/alice/bert/tag/${main}`, { token: tokens.alice, json: { tag: "v1" } }), 200);
      const devCommit = await call("POST", "/api/models/alice/bert/commit/dev", {
        token: tokens.alice,
        body: ndjson(header("on dev"), inline("dev.txt", "dev")),
        type: "application/x-ndjson",
      });
      assertStatus(devCommit, 200);
      assert.equal(await head("models/alice/bert"), main, "a commit to dev leaves main alone");
      const refs = (await call("GET", "/api/models/alice/bert/refs", { token: tokens.alice })).json();
      assert.deepEqual(
        refs.branches.map((b: { name: string; targetCommit: string }) => [b.name, b.targetCommit]),
        [
          ["main", main],
          ["dev", devCommit.json().commitOid],
        ],
      );
      assert.deepEqual(refs.tags, [{ name: "v1", ref: "refs/tags/v1", targetCommit: main }]);
      assertStatus(await call("HEAD", "/alice/bert/resolve/v1/README.md", { token: tokens.alice }), 200);
      assertStatus(await call("HEAD", "/alice/bert/resolve/dev/dev.txt", { token: tokens.alice }), 200);

      const history = (await call("GET", "/api/models/alice/bert/commits/dev", { token: tokens.alice })).json();
      assert.equal(history[0].id, devCommit.json().commitOid);
      assert.equal(history[0].title, "on dev");
      assert.equal(history[1].id, main);
      assert.equal(history.at(-1).title, "initial commit");

      for (const rev of ["main", "dev", "v1", main]) {
        assertStatus(await call("GET", `/api/models/alice/bert/xet-read-token/${rev}`, { token: tokens.aliceRead }), 200);
      }
      assertStatus(await call("GET", `/api/models/alice/bert/xet-read-token/${"f".repeat(40)}`, { token: tokens.aliceRead }), 404);
      assertStatus(await call("GET", "/api/models/alice/bert/xet-write-token/main", { token: tokens.aliceRead }), 403);
      assertStatus(await call("DELETE", "/api/models/alice/bert/branch/dev", { token: tokens.alice }), 200);
      assertStatus(await call("HEAD", "/alice/bert/resolve/dev/dev.txt", { token: tokens.alice }), 404, "RevisionNotFound");
      assertStatus(await call("DELETE", "/api/models/alice/bert/tag/v1", { token: tokens.alice }), 200);
    });

    it("commit, tree and blob ids are git's: the git binary rebuilds the whole history", async () => {
      const git = mkdtempSyncBare();
      try {
        const history = (await call("GET", "/api/datasets/alice/corpus/commits/main", { token: tokens.alice })).json().reverse();
        let parent: string | null = null;
        for (const commit of history) {
          // The commit's files as git stores them: inline content, or the LFS pointer of Xet-stored files.
          const tree = (await call("GET", `/api/datasets/alice/corpus/tree/${commit.id}?recursive=true`, { token: tokens.alice })).json();
          const lines = [];
          for (const entry of tree) {
            const body = entry.lfs
              ? lfsPointer(entry.lfs.oid, entry.lfs.size)
              : Buffer.from((await call("GET", `/datasets/alice/corpus/resolve/${commit.id}/${entry.path}`, { token: tokens.alice })).text, "latin1");
            const oid = gitIn(git, ["hash-object", "-w", "--stdin"], body);
            assert.equal(oid, entry.oid, `blob id of ${entry.path}`);
            lines.push(`100644 blob ${oid}\t${entry.path}\n`);
          }
          const treeOid = gitIn(git, ["mktree"], lines.join(""));
          const seconds = Math.floor(Date.parse(commit.date) / 1000);
          const user = commit.authors[0].user;
          const env = {
            GIT_AUTHOR_NAME: user,
            GIT_AUTHOR_EMAIL: `${user}@users.castor.invalid`,
            GIT_AUTHOR_DATE: `${seconds} +0000`,
            GIT_COMMITTER_NAME: user,
            GIT_COMMITTER_EMAIL: `${user}@users.castor.invalid`,
            GIT_COMMITTER_DATE: `${seconds} +0000`,
          };
          const message = commit.message === "" ? `${commit.title}\n` : `${commit.title}\n\n${commit.message}\n`;
          const rebuilt = gitIn(git, ["commit-tree", treeOid, ...(parent === null ? [] : ["-p", parent]), "-F", "-"], message, env);
          assert.equal(rebuilt, commit.id, `commit "${commit.title}"`);
          parent = rebuilt;
        }
        assert.equal(parent, (await call("GET", "/api/datasets/alice/corpus", { token: tokens.alice })).json().sha);
        assert.ok(history.length >= 2);
      } finally {
        execFileSync("rm", ["-rf", git]);
      }
    });
  });

  it("no request logged a hub token", () => {
    const all = logText.join("");
    for (const secret of Object.values(tokens)) assert.ok(!all.includes(secret));
  });
});

function mkdtempSyncBare(): string {
  const dir = execFileSync("mktemp", ["-d"]).toString().trim();
  execFileSync("git", ["init", "-q", "--bare", dir]);
  return dir;
}

function gitIn(dir: string, args: string[], input: string | Buffer, env: Record<string, string> = {}): string {
  return execFileSync("git", ["--git-dir", dir, ...args], { input, env: { ...process.env, ...env, HOME: dir } })
    .toString()
    .trim();
}
