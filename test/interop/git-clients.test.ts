/**
 * git and git-lfs beside the Hugging Face tools, against a real `castor serve`: a repository
 * made with `hf upload` (a text file inline, a 12 MiB file through Xet) clones with the Xet
 * file checked out by git-lfs byte-exact, and clones as pointers that `git lfs pull` fills;
 * `git log` shows the commit ids the Hub API reports; a pull brings a later `hf upload`; and
 * files pushed with git (a text file, an LFS file) download byte-exact with `hf download` and
 * with hf_xet, which castor serves the pushed LFS file to through Xet.
 */
import assert from "node:assert/strict";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { git, gitUrl, runGit } from "../helpers/git.js";
import { MIB, pseudoRandomBytes } from "./harness.js";
import { clientEnv, describeRequests, PYTHON_VENVS, pythonVenv, removeDir, runOk, startHub, tempDir, USER, venvScript, type HubServer } from "./hub-clients.js";

const REQUIREMENTS = PYTHON_VENVS["hub-cli"];

describe("git and git-lfs with the hf CLI against castor", () => {
  let hub: HubServer;
  let hf: string;
  let work: string;
  const repo = `${USER}/git-interop`;
  const big = pseudoRandomBytes("git interop: 12 MiB through Xet", 12 * MIB);
  const small = Buffer.from("a small text file, inline\n");
  const url = () => gitUrl(hub.endpoint, repo, hub.token);
  const at = (cwd: string) => ({ cwd, home: join(work, "git-home") });
  const machine = (name: string) => clientEnv(hub, join(work, "machines", name));

  before(async () => {
    let python: string;
    [python, hub, work] = await Promise.all([pythonVenv("hub-cli", REQUIREMENTS), startHub(), tempDir("castor-git-interop-")]);
    hf = venvScript(python, "hf");
    await mkdir(join(work, "git-home"), { recursive: true });
    await git(["lfs", "install", "--skip-repo"], at(work));
    await mkdir(join(work, "upload"), { recursive: true });
    await writeFile(join(work, "upload", "big.bin"), big);
    await writeFile(join(work, "upload", "small.txt"), small);
    await runOk(hub, "hf repos create", hf, ["repos", "create", repo, "--private"], { env: machine("uploader") });
    await runOk(hub, "hf upload", hf, ["upload", repo, join(work, "upload"), ".", "--commit-message", "upload with hf"], { env: machine("uploader") });
  });

  after(async () => {
    await hub?.stop();
    await removeDir(work);
  });

  it("clones a repository made with hf upload: the Xet file checked out by git-lfs, byte-exact, the tree clean", async () => {
    const dir = join(work, "clone");
    await git(["clone", "-q", url(), dir], at(work));
    assert.ok((await readFile(join(dir, "big.bin"))).equals(big), "big.bin is the uploaded bytes");
    assert.ok((await readFile(join(dir, "small.txt"))).equals(small));
    assert.equal((await git(["status", "--porcelain"], at(dir))).trim(), "", "nothing shows as modified");
    assert.match(await git(["lfs", "ls-files"], at(dir)), /big\.bin/);
    // git log shows the commit ids the Hub API reports.
    const response = await fetch(`${hub.endpoint}/api/models/${repo}/commits/main`, { headers: { authorization: `Bearer ${hub.token}` } });
    const apiIds = ((await response.json()) as { id: string }[]).map((commit) => commit.id);
    assert.deepEqual((await git(["log", "--format=%H"], at(dir))).trim().split("\n"), apiIds);
  });

  it("clones pointers without smudging, then git lfs pull downloads the file byte-exact", async () => {
    const dir = join(work, "pointers");
    await git(["clone", "-q", url(), dir], { ...at(work), env: { GIT_LFS_SKIP_SMUDGE: "1" } });
    assert.match(await readFile(join(dir, "big.bin"), "utf8"), /^version https:\/\/git-lfs\.github\.com\/spec\/v1\noid sha256:[0-9a-f]{64}\nsize 12582912\n$/);
    const from = hub.server.logLines().length;
    await git(["lfs", "pull"], at(dir));
    assert.ok((await readFile(join(dir, "big.bin"))).equals(big), "git lfs pull wrote the uploaded bytes");
    const requests = hub.server.requestLog(from);
    assert.ok(
      requests.some((line) => line.method === "GET" && line.path.endsWith(`/info/lfs/objects/${line.path.split("/").at(-1)}`) && line.statusCode === 200),
      `git-lfs downloaded through the basic transfer:\n${describeRequests(requests)}`,
    );
    assert.equal((await git(["status", "--porcelain"], at(dir))).trim(), "");
  });

  it("pulls a later hf upload", async () => {
    const dir = join(work, "clone");
    await writeFile(join(work, "later.txt"), "uploaded later\n");
    await runOk(hub, "hf upload later.txt", hf, ["upload", repo, join(work, "later.txt"), "later.txt"], { env: machine("uploader") });
    await git(["pull", "-q", "--ff-only"], at(dir));
    assert.equal(await readFile(join(dir, "later.txt"), "utf8"), "uploaded later\n");
  });

  it("pushes a text file and an LFS file that hf download then fetches byte-exact, the LFS file through Xet", async () => {
    const dir = join(work, "clone");
    const weights = pseudoRandomBytes("git interop: pushed LFS file", 3 * MIB + 12345);
    await git(["lfs", "track", "*.safetensors"], at(dir));
    await writeFile(join(dir, "model.safetensors"), weights);
    await writeFile(join(dir, "config.json"), '{"pushed": "with git"}\n');
    await git(["add", ".gitattributes", "model.safetensors", "config.json"], at(dir));
    await git(["commit", "-q", "-m", "push with git"], { ...at(dir), env: { GIT_AUTHOR_NAME: "Git Pusher" } });
    const pushed = await runGit(["push", "origin", "main"], at(dir));
    assert.equal(pushed.status, 0, pushed.stderr);

    const from = hub.server.logLines().length;
    const out = join(work, "downloaded");
    await runOk(hub, "hf download", hf, ["download", repo, "model.safetensors", "config.json", "--local-dir", out], { env: machine("downloader") });
    assert.ok((await readFile(join(out, "model.safetensors"))).equals(weights), "hf download of the pushed LFS file is byte-exact");
    assert.equal(await readFile(join(out, "config.json"), "utf8"), '{"pushed": "with git"}\n');
    const requests = hub.server.requestLog(from);
    assert.ok(
      requests.some((line) => /^\/v[12]\/reconstructions\/[0-9a-f]{64}$/.test(line.path) && line.statusCode === 200),
      `hf_xet downloaded the pushed file through Xet (a reconstruction):\n${describeRequests(requests)}`,
    );
    // The Hub API shows the pushed commit, with git's author, as main's head.
    const response = await fetch(`${hub.endpoint}/api/models/${repo}/commits/main`, { headers: { authorization: `Bearer ${hub.token}` } });
    const [head] = (await response.json()) as { id: string; authors: { user: string }[] }[];
    assert.equal(head.id, (await git(["rev-parse", "HEAD"], at(dir))).trim());
  });
});
