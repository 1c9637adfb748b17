/**
 * `git clone`, `git fetch` and `git pull` of castor repositories with the real git, over
 * protocol v2 and v0: the clone holds exactly the commits, trees and blobs the Hub API
 * reports (a Xet-stored file as its LFS pointer), a pull after a Hub commit brings the new
 * commit, shallow and blob-less clones work, refs list branches and tags, and access follows
 * the hub's rules (anonymous clones of public repositories, a Basic challenge for private ones).
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { upload } from "../../src/client/index.js";
import { lfsPointer } from "../../src/format/git.js";
import { startTestApp, type TestApp } from "../helpers/app.js";
import { git, gitUrl, runGit } from "../helpers/git.js";
import { makeTempDir, removeTempDir } from "../helpers/temp-dir.js";

let castor: TestApp;
let work: string;
const tokens = { alice: "", aliceRead: "", bob: "" };
const xetContent = randomBytes(200_000);
const xetSha256 = createHash("sha256").update(xetContent).digest("hex");

async function api(method: string, path: string, token: string, body?: string, type = "application/json"): Promise<any> {
  const response = await fetch(`${castor.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": type }) },
    body,
  });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${text}`);
  return text === "" ? null : JSON.parse(text);
}

async function commit(repo: string, summary: string, operations: unknown[]): Promise<string> {
  const lines = [{ key: "header", value: { summary, description: "" } }, ...operations];
  const answer = await api(
    "POST",
    `/api/models/${repo}/commit/main`,
    tokens.alice,
    `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`,
    "application/x-ndjson",
  );
  return answer.commitOid;
}

const inline = (path: string, content: string) => ({ key: "file", value: { path, encoding: "base64", content: Buffer.from(content).toString("base64") } });

const opts = () => ({ cwd: work, home: work });

before(async () => {
  castor = await startTestApp({ name: "git-fetch" });
  work = await makeTempDir("castor-git-fetch-");
  const token = async (owner: string, access: "read" | "write") =>
    (await castor.hub.createToken({ repos: [], namespaces: [owner], owner, access, expiresAt: null })).secret;
  tokens.alice = await token("alice", "write");
  tokens.aliceRead = await token("alice", "read");
  tokens.bob = await token("bob", "write");
  await api("POST", "/api/repos/create", tokens.alice, JSON.stringify({ name: "demo", organization: "alice", type: "model", private: true }));
  const weights = join(work, "weights.bin");
  await writeFile(weights, xetContent);
  await upload({ endpoint: castor.url, hubToken: tokens.alice, repo: "model:alice/demo", files: [weights] });
  await commit("alice/demo", "first files", [
    inline("README.md", "# demo\n"),
    inline("src/a.txt", "aaa\n"),
    inline("src/deep/b.txt", "bbb\n"),
    { key: "lfsFile", value: { path: "weights.bin", algo: "sha256", oid: xetSha256, size: xetContent.length } },
  ]);
  await api("POST", "/api/models/alice/demo/branch/dev", tokens.alice, "{}");
  await api("POST", "/api/models/alice/demo/tag/main", tokens.alice, JSON.stringify({ tag: "v1" }));
  await commit("alice/demo", "second", [inline("src/a.txt", "aaa, changed\n")]);
});

after(async () => {
  await castor?.close();
  if (work) await removeTempDir(work);
});

/** What the Hub API says of a revision: its commit ids (newest first) and every path's id. */
async function apiView(revision: string): Promise<{ commits: string[]; ids: Map<string, string> }> {
  const commits = (await api("GET", `/api/models/alice/demo/commits/${revision}`, tokens.alice)).map((c: { id: string }) => c.id);
  const tree = await api("GET", `/api/models/alice/demo/tree/${revision}?recursive=true`, tokens.alice);
  return { commits, ids: new Map(tree.map((entry: { path: string; oid: string }) => [entry.path, entry.oid])) };
}

/** The same as the clone sees it. */
async function cloneView(dir: string): Promise<{ commits: string[]; ids: Map<string, string> }> {
  const commits = (await git(["log", "--format=%H"], { ...opts(), cwd: dir })).trim().split("\n");
  const listing = (await git(["ls-tree", "-r", "-t", "HEAD"], { ...opts(), cwd: dir })).trim().split("\n");
  return { commits, ids: new Map(listing.map((line) => [line.slice(line.indexOf("\t") + 1), line.split(" ")[2].slice(0, 40)])) };
}

describe("git clone", () => {
  for (const version of ["2", "0"]) {
    it(`clones over protocol v${version} with the commit, tree and blob ids of the Hub API`, async () => {
      const dir = join(work, `clone-v${version}`);
      await git(["-c", `protocol.version=${version}`, "clone", "-q", gitUrl(castor.url, "alice/demo", tokens.alice), dir], opts());
      assert.deepEqual(await cloneView(dir), await apiView("main"));
      await git(["fsck", "--full", "--strict"], { ...opts(), cwd: dir });
      assert.equal(await readFile(join(dir, "src/a.txt"), "utf8"), "aaa, changed\n");
      // A Xet-stored file is its Git LFS pointer in git (git-lfs is not configured in this HOME).
      assert.equal(await readFile(join(dir, "weights.bin"), "utf8"), lfsPointer(xetSha256, xetContent.length));
    });
  }

  it("lists branches and tags with HEAD on main", async () => {
    const listed = await git(["ls-remote", "--symref", gitUrl(castor.url, "alice/demo", tokens.alice)], opts());
    const dev = (await apiView("dev")).commits[0];
    const main = (await apiView("main")).commits[0];
    assert.match(listed, /^ref: refs\/heads\/main\tHEAD$/m);
    assert.match(listed, new RegExp(`^${main}\\tHEAD$`, "m"));
    assert.match(listed, new RegExp(`^${main}\\trefs/heads/main$`, "m"));
    assert.match(listed, new RegExp(`^${dev}\\trefs/heads/dev$`, "m"));
    assert.match(listed, new RegExp(`^${dev}\\trefs/tags/v1$`, "m"));
    assert.notEqual(dev, main);
  });

  it("clones a branch, and the repository under its .git URL", async () => {
    const dir = join(work, "clone-dev");
    await git(["clone", "-q", "--branch", "dev", gitUrl(castor.url, "alice/demo.git", tokens.alice), dir], opts());
    assert.deepEqual(await cloneView(dir), await apiView("dev"));
  });

  for (const version of ["2", "0"]) {
    it(`pulls a Hub commit made after the clone (protocol v${version})`, async () => {
      const dir = join(work, `pull-v${version}`);
      await git(["clone", "-q", gitUrl(castor.url, "alice/demo", tokens.alice), dir], opts());
      const before = (await git(["count-objects", "-v"], { ...opts(), cwd: dir })).match(/in-pack: (\d+)/)![1];
      await commit("alice/demo", `pulled over v${version}`, [inline(`pulled-v${version}.txt`, `v${version}\n`)]);
      await git(["-c", `protocol.version=${version}`, "pull", "-q", "--ff-only"], { ...opts(), cwd: dir });
      assert.deepEqual(await cloneView(dir), await apiView("main"));
      assert.equal(await readFile(join(dir, `pulled-v${version}.txt`), "utf8"), `v${version}\n`);
      // The fetch sent the new commit, its root tree and the new blob: nothing the clone had.
      await git(["repack", "-a", "-d", "-q"], { ...opts(), cwd: dir });
      const afterCount = (await git(["count-objects", "-v"], { ...opts(), cwd: dir })).match(/in-pack: (\d+)/)![1];
      assert.equal(Number(afterCount) - Number(before), 3);
    });
  }

  for (const version of ["2", "0"]) {
    it(`makes shallow clones and deepens them (protocol v${version})`, async () => {
      const dir = join(work, `shallow-v${version}`);
      const config = ["-c", `protocol.version=${version}`];
      await git([...config, "clone", "-q", "--depth", "1", gitUrl(castor.url, "alice/demo", tokens.alice), dir], opts());
      const { commits } = await apiView("main");
      assert.equal((await git(["log", "--format=%H"], { ...opts(), cwd: dir })).trim(), commits[0]);
      assert.equal((await readFile(join(dir, ".git/shallow"), "utf8")).trim(), commits[0]);
      await git([...config, "fetch", "-q", "--depth", "2"], { ...opts(), cwd: dir });
      assert.deepEqual((await git(["log", "--format=%H"], { ...opts(), cwd: dir })).trim().split("\n"), commits.slice(0, 2));
      await git([...config, "fetch", "-q", "--unshallow"], { ...opts(), cwd: dir });
      assert.deepEqual(await cloneView(dir), await apiView("main"));
      await git(["fsck", "--full"], { ...opts(), cwd: dir });
    });
  }

  for (const version of ["2", "0"]) {
    it(`makes blob-less clones that fetch blobs when checked out (protocol v${version})`, async () => {
      const dir = join(work, `blobless-v${version}`);
      const config = ["-c", `protocol.version=${version}`];
      await git([...config, "clone", "-q", "--no-checkout", "--filter=blob:none", gitUrl(castor.url, "alice/demo", tokens.alice), dir], opts());
      const missing = await git(["rev-list", "--objects", "--all", "--missing=print"], { ...opts(), cwd: dir });
      assert.ok((missing.match(/^\?/gm) ?? []).length >= 4, `blobs are left out of the clone:\n${missing}`);
      await git([...config, "checkout", "-q", "main"], { ...opts(), cwd: dir });
      assert.equal(await readFile(join(dir, "src/deep/b.txt"), "utf8"), "bbb\n");
      assert.deepEqual(await cloneView(dir), await apiView("main"));
    });
  }

  it("refuses filters it does not apply, with git's remote error", async () => {
    const run = await runGit(["clone", "-q", "--filter=tree:0", gitUrl(castor.url, "alice/demo", tokens.alice), join(work, "tree0")], opts());
    assert.notEqual(run.status, 0);
    assert.match(run.stderr, /remote error: the filter "tree:0" is not supported by castor: use --filter=blob:none/);
  });
});

describe("git access", () => {
  it("asks for credentials for a private repository (401 with a Basic challenge), and refuses a wrong token", async () => {
    const anonymous = await runGit(["clone", "-q", gitUrl(castor.url, "alice/demo"), join(work, "anon")], opts());
    assert.notEqual(anonymous.status, 0);
    assert.match(anonymous.stderr, /could not read Username/);
    const wrong = await runGit(["clone", "-q", gitUrl(castor.url, "alice/demo", "hf_notatoken"), join(work, "wrong")], opts());
    assert.match(wrong.stderr, /remote: the hub token is invalid or expired/);
    assert.match(wrong.stderr, /Authentication failed/);
    const other = await runGit(["clone", "-q", gitUrl(castor.url, "alice/demo", tokens.bob), join(work, "other")], opts());
    assert.match(other.stderr, /remote: repository model:alice\/demo not found/);
    const challenge = await fetch(`${castor.url}/alice/demo/info/refs?service=git-upload-pack`);
    assert.equal(challenge.status, 401);
    assert.equal(challenge.headers.get("www-authenticate"), 'Basic realm="castor"');
  });

  it("clones with a read token, and with the token as a bearer", async () => {
    await git(["clone", "-q", gitUrl(castor.url, "alice/demo", tokens.aliceRead), join(work, "read")], opts());
    const dir = join(work, "bearer");
    await git(["-c", `http.extraHeader=Authorization: Bearer ${tokens.alice}`, "clone", "-q", gitUrl(castor.url, "alice/demo"), dir], opts());
    assert.deepEqual(await cloneView(dir), await apiView("main"));
  });

  it("clones a public repository without credentials", async () => {
    await api("POST", "/api/repos/create", tokens.alice, JSON.stringify({ name: "open", organization: "alice", type: "dataset", private: false }));
    await api(
      "POST",
      "/api/datasets/alice/open/commit/main",
      tokens.alice,
      `${JSON.stringify({ key: "header", value: { summary: "data", description: "" } })}\n${JSON.stringify(inline("data.csv", "a,b\n1,2\n"))}\n`,
      "application/x-ndjson",
    );
    const dir = join(work, "public");
    await git(["clone", "-q", gitUrl(castor.url, "datasets/alice/open"), dir], opts());
    assert.equal(await readFile(join(dir, "data.csv"), "utf8"), "a,b\n1,2\n");
  });
});
