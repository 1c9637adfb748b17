/**
 * `git push` to castor with the real git and git-lfs: commits, branches and tags created,
 * moved and deleted, each the commit ids the Hub API then reports; LFS files pushed through the
 * LFS batch API and stored as Xet files; the rules of every hub write (a write token, main
 * only forward and never deleted, no history lost to a racing Hub commit); and pushes refused
 * whole with git's own error output and nothing changed: a corrupt pack, missing objects, an
 * oversized file, an executable file, a read-only token.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { chmod, readFile, writeFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { encodeTreeObject, gitBlobId } from "../../src/format/git.js";
import { packObjectId, PackWriter } from "../../src/format/git-pack.js";
import { FLUSH_PKT, PktLineDecoder, pktLine, pktText } from "../../src/format/pkt-line.js";
import { blobKeyFromHex } from "../../src/storage/blob-store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { startTestApp, type TestApp } from "../helpers/app.js";
import { git, gitUrl, runGit } from "../helpers/git.js";
import { makeTempDir, removeTempDir } from "../helpers/temp-dir.js";

const INLINE_MAX = 256 * 1024;

let castor: TestApp;
let work: string;
const tokens = { alice: "", aliceRead: "" };

async function api(method: string, path: string, body?: string, type = "application/json"): Promise<any> {
  const response = await fetch(`${castor.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${tokens.alice}`, ...(body === undefined ? {} : { "content-type": type }) },
    body,
  });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${text}`);
  return text === "" ? null : JSON.parse(text);
}

async function hubCommit(repo: string, summary: string, path: string, content: string): Promise<string> {
  const lines = [
    { key: "header", value: { summary, description: "" } },
    { key: "file", value: { path, encoding: "base64", content: Buffer.from(content).toString("base64") } },
  ];
  return (await api("POST", `/api/models/${repo}/commit/main`, `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`, "application/x-ndjson")).commitOid;
}

async function refs(repo: string): Promise<Record<string, string>> {
  const listing = await api("GET", `/api/models/${repo}/refs`);
  return Object.fromEntries([...listing.branches, ...listing.tags].map((ref: { ref: string; targetCommit: string }) => [ref.ref, ref.targetCommit]));
}

async function createRepo(name: string): Promise<void> {
  await api("POST", "/api/repos/create", JSON.stringify({ name, organization: "alice", type: "model" }));
}

const at = (cwd: string) => ({ cwd, home: work });

/** A clone of alice/NAME with the write token, ready to commit. */
async function cloneOf(name: string, dir: string, token = tokens.alice): Promise<string> {
  const path = join(work, dir);
  await git(["clone", "-q", gitUrl(castor.url, `alice/${name}`, token), path], at(work));
  return path;
}

async function commitFile(dir: string, path: string, content: string | Buffer, message: string): Promise<string> {
  await mkdir(join(dir, path, ".."), { recursive: true });
  await writeFile(join(dir, path), content);
  await git(["add", "--", path], at(dir));
  await git(["commit", "-q", "-m", message], at(dir));
  return (await git(["rev-parse", "HEAD"], at(dir))).trim();
}

before(async () => {
  castor = await startTestApp({ name: "git-push", inlineMaxBytes: INLINE_MAX });
  work = await makeTempDir("castor-git-push-");
  const token = async (access: "read" | "write") =>
    (await castor.hub.createToken({ repos: [], namespaces: ["alice"], owner: "alice", access, expiresAt: null })).secret;
  tokens.alice = await token("write");
  tokens.aliceRead = await token("read");
  await git(["lfs", "install", "--skip-repo"], at(work));
});

after(async () => {
  await castor?.close();
  if (work) await removeTempDir(work);
});

describe("git push", () => {
  it("pushes commits of files in folders, as the Hub API then reports them", async () => {
    await createRepo("pushed");
    const dir = await cloneOf("pushed", "pushed");
    await commitFile(dir, "README.md", "# pushed\n", "readme");
    const head = await commitFile(dir, "src/deep/code.py", "print('hi')\n", "code\n\nwith a body\n");
    const pushed = await runGit(["push", "-q", "origin", "main"], at(dir));
    assert.equal(pushed.status, 0, pushed.stderr);
    assert.equal((await refs("alice/pushed"))["refs/heads/main"], head);
    const commits = await api("GET", "/api/models/alice/pushed/commits/main");
    assert.deepEqual(
      commits.slice(0, 2).map((c: { id: string; title: string }) => [c.id, c.title]),
      [
        [head, "code"],
        [(await git(["rev-parse", "HEAD~1"], at(dir))).trim(), "readme"],
      ],
    );
    const tree = await api("GET", "/api/models/alice/pushed/tree/main?recursive=true");
    const listed = Object.fromEntries(tree.map((entry: { path: string; oid: string }) => [entry.path, entry.oid]));
    const local = (await git(["ls-tree", "-r", "-t", "HEAD"], at(dir))).trim().split("\n");
    for (const line of local) assert.equal(listed[line.slice(line.indexOf("\t") + 1)], line.split(" ")[2].slice(0, 40), line);
    const raw = await fetch(`${castor.url}/alice/pushed/resolve/main/src/deep/code.py`, { headers: { authorization: `Bearer ${tokens.alice}` } });
    assert.equal(await raw.text(), "print('hi')\n");
  });

  it("creates, moves and deletes branches and tags; main moves only forward and stays", async () => {
    await createRepo("refs");
    const dir = await cloneOf("refs", "refs");
    const first = await commitFile(dir, "a.txt", "a\n", "a");
    await git(["push", "-q", "origin", "main", "main:refs/heads/feature", "main:refs/tags/v1"], at(dir));
    assert.deepEqual(await refs("alice/refs"), { "refs/heads/main": first, "refs/heads/feature": first, "refs/tags/v1": first });

    // feature may be rewritten (forced); main may not.
    await git(["commit", "-q", "--amend", "-m", "a, amended"], at(dir));
    const amended = (await git(["rev-parse", "HEAD"], at(dir))).trim();
    await git(["push", "-q", "--force", "origin", "HEAD:feature"], at(dir));
    const forced = await runGit(["push", "--force", "origin", "HEAD:main"], at(dir));
    assert.notEqual(forced.status, 0);
    assert.match(forced.stderr, /! \[remote rejected\] HEAD -> main \(main moves only forward: this push rewrites its history/);
    const deleteMain = await runGit(["push", "origin", ":main"], at(dir));
    assert.match(deleteMain.stderr, /\[remote rejected\] main \(the main branch cannot be deleted\)/);

    await git(["push", "-q", "origin", ":feature", ":refs/tags/v1"], at(dir));
    assert.deepEqual(await refs("alice/refs"), { "refs/heads/main": first });
    const other = await runGit(["push", "origin", "HEAD:refs/notes/x"], at(dir));
    assert.match(other.stderr, /castor keeps branches \(refs\/heads\/…\) and tags \(refs\/tags\/…\) only/);
    assert.notEqual(amended, first);
  });

  it("refuses a stale push after a Hub commit, then takes it once merged", async () => {
    await createRepo("stale");
    const dir = await cloneOf("stale", "stale");
    const hub = await hubCommit("alice/stale", "from the Hub", "hub.txt", "hub\n");
    await commitFile(dir, "git.txt", "git\n", "from git");
    const stale = await runGit(["push", "origin", "main"], at(dir));
    assert.notEqual(stale.status, 0);
    assert.match(stale.stderr, /\[rejected\] +main -> main \(fetch first\)/);
    assert.equal((await refs("alice/stale"))["refs/heads/main"], hub, "the Hub commit stays");
    await git(["pull", "-q", "--no-rebase", "--no-edit"], at(dir));
    await git(["push", "-q", "origin", "main"], at(dir));
    const merged = (await git(["rev-parse", "HEAD"], at(dir))).trim();
    assert.equal((await refs("alice/stale"))["refs/heads/main"], merged);
    const fresh = await cloneOf("stale", "stale-again");
    assert.equal((await runGit(["merge-base", "--is-ancestor", hub, "HEAD"], at(fresh))).status, 0, "the Hub commit is in main's history");
  });

  it("never loses a push or a Hub commit racing it", async () => {
    await createRepo("race");
    const dir = await cloneOf("race", "race");
    for (let round = 0; round < 4; round++) {
      await git(["pull", "-q", "--rebase"], at(dir));
      const pushedCommit = await commitFile(dir, `git-${round}.txt`, `${round}\n`, `git ${round}`);
      const [push, hub] = await Promise.all([
        runGit(["push", "origin", "main"], at(dir)),
        hubCommit("alice/race", `hub ${round}`, `hub-${round}.txt`, `${round}\n`),
      ]);
      const history = (await api("GET", "/api/models/alice/race/commits/main?limit=1000")).map((c: { id: string }) => c.id);
      assert.ok(history.includes(hub), `round ${round}: the Hub commit is kept`);
      if (push.status === 0) assert.ok(history.includes(pushedCommit), `round ${round}: the accepted push is kept`);
      else assert.match(push.stderr, /fetch first|moved while the push was applied/, `round ${round}: ${push.stderr}`);
    }
  });

  it("pushes LFS files through the batch API into Xet, which the Hub API and Xet downloads then serve", async () => {
    await createRepo("lfs");
    const dir = await cloneOf("lfs", "lfs");
    await git(["lfs", "track", "*.bin"], at(dir));
    const weights = randomBytes(700_000);
    await writeFile(join(dir, "weights.bin"), weights);
    await git(["add", ".gitattributes", "weights.bin"], at(dir));
    await git(["commit", "-q", "-m", "weights"], at(dir));
    const pushed = await runGit(["push", "origin", "main"], at(dir));
    assert.equal(pushed.status, 0, pushed.stderr);
    const sha256 = createHash("sha256").update(weights).digest("hex");
    const tree = await api("GET", "/api/models/alice/lfs/tree/main");
    const entry = tree.find((e: { path: string }) => e.path === "weights.bin");
    assert.equal(entry.lfs.oid, sha256);
    assert.equal(entry.size, weights.length);
    assert.match(entry.xetHash, /^[0-9a-f]{64}$/, "stored as a Xet file");
    // Downloaded through Xet (reconstruction, chunks verified) by castor's own client.
    const out = join(work, "weights.out");
    await new CastorClient({ endpoint: castor.url, hubToken: tokens.aliceRead, repo: "model:alice/lfs" }).downloadFile({ path: "weights.bin", output: out });
    assert.ok((await readFile(out)).equals(weights));
    // And cloned back: smudged by git-lfs, byte-exact, clean.
    const clone = await cloneOf("lfs", "lfs-clone", tokens.aliceRead);
    assert.ok((await readFile(join(clone, "weights.bin"))).equals(weights));
    assert.equal((await git(["status", "--porcelain"], at(clone))).trim(), "");

    // The same bytes pushed to another repository are deduplicated: no new xorb is stored.
    await createRepo("lfs-copy");
    const copy = await cloneOf("lfs-copy", "lfs-copy");
    await git(["lfs", "track", "*.bin"], at(copy));
    await writeFile(join(copy, "same.bin"), weights);
    await git(["add", ".gitattributes", "same.bin"], at(copy));
    await git(["commit", "-q", "-m", "same weights"], at(copy));
    const xorbs = (await castor.store.xorbTotals()).xorbs;
    await git(["push", "-q", "origin", "main"], at(copy));
    assert.equal((await castor.store.xorbTotals()).xorbs, xorbs);
    const copied = (await api("GET", "/api/models/alice/lfs-copy/tree/main")).find((e: { path: string }) => e.path === "same.bin");
    assert.equal(copied.xetHash, entry.xetHash, "the same Xet file");
  });

  it("refuses a pointer to an LFS object that was never uploaded, storing none of the push's files", async () => {
    await createRepo("lfs-missing");
    const dir = await cloneOf("lfs-missing", "lfs-missing");
    const note = `a note no other test writes, ${randomBytes(8).toString("hex")}\n`;
    await commitFile(dir, "note.txt", note, "note");
    const sha = "ab".repeat(32);
    await commitFile(dir, "ghost.bin", `version https://git-lfs.github.com/spec/v1\noid sha256:${sha}\nsize 12345\n`, "ghost");
    const push = await runGit(["push", "origin", "main"], at(dir));
    assert.match(push.stderr, /the Git LFS object of "ghost\.bin" \(sha256 abab.*\) is not on castor: push it first \(git lfs push --all origin\)/);
    const blobs = await FsBlobStore.open(join(castor.dataDir, "blobs"));
    const noteKey = blobKeyFromHex("inline", createHash("sha256").update(note).digest("hex"));
    assert.equal(await blobs.exists(noteKey), false, "the refused update's inline file was never stored");
  });

  it("refuses files too large for git, executable files and read-only tokens, changing nothing", async () => {
    await createRepo("refused");
    const dir = await cloneOf("refused", "refused");
    const before = await refs("alice/refused");
    await commitFile(dir, "big.dat", randomBytes(INLINE_MAX + 1), "too big");
    const big = await runGit(["push", "origin", "main"], at(dir));
    assert.match(big.stderr, /error: remote unpack failed: .*above the limit of 262144: files of 262144 bytes or more go through Git LFS/);
    await git(["reset", "-q", "--hard", "HEAD~1"], at(dir));

    await writeFile(join(dir, "run.sh"), "#!/bin/sh\necho hi\n");
    await chmod(join(dir, "run.sh"), 0o755);
    await git(["add", "run.sh"], at(dir));
    await git(["commit", "-q", "-m", "script"], at(dir));
    const executable = await runGit(["push", "origin", "main"], at(dir));
    assert.match(executable.stderr, /"run.sh" is executable \(mode 100755\), which castor does not keep: run git update-index --chmod=-x/);

    const readOnly = await runGit(["push", gitUrl(castor.url, "alice/refused", tokens.aliceRead), "main"], at(dir));
    assert.match(readOnly.stderr, /remote: this hub token is read-only/);
    const anonymous = await runGit(["push", gitUrl(castor.url, "alice/refused"), "main"], at(dir));
    assert.match(anonymous.stderr, /could not read Username/);
    assert.deepEqual(await refs("alice/refused"), before);
  });
});

describe("receive-pack over raw HTTP", () => {
  const basic = () => `Basic ${Buffer.from(`git:${tokens.alice}`).toString("base64")}`;

  /** A pack of a commit adding one file on top of `parent`, and that commit's id. */
  function packOf(parent: string, options: { withoutTree?: boolean } = {}): { pack: Buffer; commit: string } {
    const blob = Buffer.from("raw push\n");
    const tree = encodeTreeObject([{ mode: "100644", name: "raw.txt", oid: gitBlobId(blob) }]);
    const commit = Buffer.from(
      `tree ${packObjectId("tree", tree)}\nparent ${parent}\nauthor r <r@x> 1700000000 +0000\ncommitter r <r@x> 1700000000 +0000\n\nraw\n`,
    );
    const objects: [string, Buffer][] = [["commit", commit], ...(options.withoutTree ? [] : ([["tree", tree]] as [string, Buffer][])), ["blob", blob]];
    const writer = new PackWriter();
    const pack = Buffer.concat([writer.header(objects.length), ...objects.map(([type, body]) => writer.object(type as "blob", body)), writer.trailer()]);
    return { pack, commit: packObjectId("commit", commit) };
  }

  async function receivePack(oldOid: string, newOid: string, pack: Buffer): Promise<string[]> {
    const command = pktLine(`${oldOid} ${newOid} refs/heads/main\0report-status\n`);
    const response = await fetch(`${castor.url}/alice/raw/git-receive-pack`, {
      method: "POST",
      headers: { authorization: basic(), "content-type": "application/x-git-receive-pack-request" },
      body: Buffer.concat([command, FLUSH_PKT, pack]),
    });
    assert.equal(response.status, 200);
    const decoder = new PktLineDecoder();
    decoder.push(Buffer.from(await response.arrayBuffer()));
    const lines: string[] = [];
    for (let line = decoder.read(); line !== null; line = decoder.read()) if (line.kind === "data") lines.push(pktText(line)!);
    return lines;
  }

  it("refuses a corrupt pack and one missing objects with git's report, changing nothing", async () => {
    await createRepo("raw");
    const main = (await refs("alice/raw"))["refs/heads/main"];
    const { pack, commit } = packOf(main);
    const corrupt = Buffer.from(pack);
    corrupt[corrupt.length - 30] ^= 0xff;
    const refused = await receivePack(main, commit, corrupt);
    assert.match(refused[0], /^unpack .+/);
    assert.notEqual(refused[0], "unpack ok");
    assert.equal(refused[1], "ng refs/heads/main unpacker error");

    const missing = packOf(main, { withoutTree: true });
    const incomplete = await receivePack(main, missing.commit, missing.pack);
    assert.deepEqual(incomplete[0], "unpack ok");
    assert.match(incomplete[1], /^ng refs\/heads\/main missing object: tree [0-9a-f]{40} \(the root folder\) is neither in the pack nor in the repository$/);
    assert.equal((await refs("alice/raw"))["refs/heads/main"], main, "main did not move");

    assert.deepEqual(await receivePack(main, commit, pack), ["unpack ok", "ok refs/heads/main"]);
    assert.equal((await refs("alice/raw"))["refs/heads/main"], commit);
  });
});
