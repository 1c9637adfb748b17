/**
 * git over the scale-out deployment: two castor nodes on one PostgreSQL database and one S3
 * bucket behind a round-robin proxy. git pushes commits and a Git LFS file (the LFS batch call,
 * the object's upload and the pack land on whichever node), clones them back with git-lfs
 * smudging the file byte-exact from S3, and pushes racing Hub commits through both nodes lose
 * nothing: each ref moves by one compare-and-set in PostgreSQL.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { runCastor } from "../helpers/cli.js";
import { git, gitUrl, runGit } from "../helpers/git.js";
import { startProxy, type TestProxy } from "../helpers/proxy.js";
import { createScaleOutBackend, scaleOutUnavailable, startCastorServer, type ScaleOutBackend, type ServerProcess } from "../helpers/server.js";
import { removeDir, tempDir } from "../interop/hub-clients.js";

const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the scale-out git tests need PostgreSQL and S3: ${unavailable}`);

const REPO = "alice/scaled-git";

let backend: ScaleOutBackend;
let proxy: TestProxy;
const nodes: ServerProcess[] = [];
let token: string;
let work: string;

before(async () => {
  backend = await createScaleOutBackend();
  proxy = await startProxy();
  for (const name of ["a", "b"]) {
    const node = await startCastorServer({ scaleOut: backend, env: { CASTOR_PUBLIC_URL: proxy.url } });
    nodes.push(node);
    proxy.setUpstream(name, node.url);
  }
  const created = await runCastor(["token", "create", "--user", "alice", "--namespace", "alice", "--access", "write"], { env: nodes[0].settings });
  assert.equal(created.code, 0, created.stderr);
  token = created.stdout.trimEnd().split("\n").at(-1)!;
  const repo = await runCastor(["repo", "create", "model", REPO], { env: nodes[0].settings });
  assert.equal(repo.code, 0, repo.stderr);
  work = await tempDir("castor-scaleout-git-");
  await mkdir(join(work, "home"));
  await git(["lfs", "install", "--skip-repo"], at(work));
});

after(async () => {
  await proxy?.close();
  await Promise.all(nodes.map((node) => node.stop()));
  await backend?.cleanup();
  await removeDir(work);
});

function at(cwd: string) {
  return { cwd, home: join(work, "home") };
}

async function hubCommit(summary: string, path: string): Promise<string> {
  const lines = [
    { key: "header", value: { summary, description: "" } },
    { key: "file", value: { path, encoding: "base64", content: Buffer.from(`${summary}\n`).toString("base64") } },
  ];
  const response = await fetch(`${proxy.url}/api/models/${REPO}/commit/main`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/x-ndjson" },
    body: `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`,
  });
  assert.equal(response.status, 200, await response.clone().text());
  return ((await response.json()) as { commitOid: string }).commitOid;
}

describe("git through two nodes on PostgreSQL + S3", () => {
  const weights = randomBytes(3 * 1024 * 1024 + 777);

  it("pushes a commit with a Git LFS file, and clones it back byte-exact", async () => {
    const dir = join(work, "push");
    await git(["clone", "-q", gitUrl(proxy.url, REPO, token), dir], at(work));
    await git(["lfs", "track", "*.bin"], at(dir));
    await writeFile(join(dir, "weights.bin"), weights);
    await writeFile(join(dir, "README.md"), "# pushed through two nodes\n");
    await git(["add", "."], at(dir));
    await git(["commit", "-q", "-m", "weights"], at(dir));
    const pushed = await runGit(["push", "origin", "main"], at(dir));
    assert.equal(pushed.status, 0, pushed.stderr);

    const clone = join(work, "clone");
    await git(["clone", "-q", gitUrl(proxy.url, REPO, token), clone], at(work));
    assert.ok((await readFile(join(clone, "weights.bin"))).equals(weights), "the LFS file, rebuilt from S3");
    assert.equal(await readFile(join(clone, "README.md"), "utf8"), "# pushed through two nodes\n");
    assert.equal((await git(["rev-parse", "HEAD"], at(clone))).trim(), (await git(["rev-parse", "HEAD"], at(dir))).trim());
    const servedBy = new Set(proxy.requests().map((request) => request.nodes.at(-1)));
    assert.ok(servedBy.has("a") && servedBy.has("b"), `git's requests went to both nodes (${[...servedBy].join(", ")})`);
  });

  it("never loses a push or a Hub commit racing it across the nodes", async () => {
    const dir = join(work, "push");
    for (let round = 0; round < 4; round++) {
      await git(["pull", "-q", "--rebase"], at(dir));
      await writeFile(join(dir, `git-${round}.txt`), `${round}\n`);
      await git(["add", "."], at(dir));
      await git(["commit", "-q", "-m", `git ${round}`], at(dir));
      const ours = (await git(["rev-parse", "HEAD"], at(dir))).trim();
      const [push, hub] = await Promise.all([runGit(["push", "origin", "main"], at(dir)), hubCommit(`hub ${round}`, `hub-${round}.txt`)]);
      const check = join(work, `check-${round}`);
      await git(["clone", "-q", "--no-checkout", gitUrl(proxy.url, REPO, token), check], { ...at(work), env: { GIT_LFS_SKIP_SMUDGE: "1" } });
      const contains = async (oid: string) => (await runGit(["merge-base", "--is-ancestor", oid, "HEAD"], at(check))).status === 0;
      assert.ok(await contains(hub), `round ${round}: the Hub commit is in main`);
      if (push.status === 0) assert.ok(await contains(ours), `round ${round}: the accepted push is in main`);
      else assert.match(push.stderr, /fetch first|moved while the push was applied/, push.stderr);
    }
  });
});
