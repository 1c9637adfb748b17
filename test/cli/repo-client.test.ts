/**
 * castor's own client commands speak repositories, against a real `castor serve`: a repository
 * and users' tokens made with the admin commands, `castor upload --repo … --path dir` (Xet
 * upload plus one NDJSON commit), `castor repo files`, `castor download --repo … PATH`
 * byte-exact for a Xet-stored and an inline file, downloads by hash as before, and the
 * failures a user meets: a missing path, an unknown repository, a read-only token.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { runCastor, type CliResult } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";

const REPO = "model:alice/bert";
const MiB = 1024 * 1024;
const TIMEOUT_MS = 60_000;

let server: ServerProcess;
let work: string;
const tokens = { write: "", read: "" };
const data = { a: randomBytes(3 * MiB), b: Buffer.from("a small text file\nwith two lines\n"), empty: Buffer.alloc(0) };
let firstCommit = "";

/** An admin command on the server's stores. */
async function admin(...args: string[]): Promise<string> {
  const result = await runCastor(args, { env: server.settings, timeoutMs: TIMEOUT_MS });
  assert.equal(result.code, 0, `castor ${args.join(" ")}: ${result.stderr}`);
  return result.stdout;
}

/** A client command through the server, with the write token unless another is given. */
function client(args: string[], options: { token?: string; cwd?: string } = {}): Promise<CliResult> {
  return runCastor(args, {
    env: { CASTOR_ENDPOINT: server.url, CASTOR_HUB_TOKEN: options.token ?? tokens.write },
    cwd: options.cwd ?? work,
    timeoutMs: TIMEOUT_MS,
  });
}

function assertOk(result: CliResult): CliResult {
  assert.equal(result.code, 0, `exit ${result.code}; stderr: ${result.stderr}`);
  return result;
}

function assertFails(result: CliResult, code: 1 | 2, message: RegExp): void {
  assert.equal(result.code, code, `expected exit ${code}, got ${result.code}; stderr: ${result.stderr}`);
  assert.match(result.stderr, message);
  assert.doesNotMatch(result.stderr, /\n\s+at /, "no stack trace");
}

/** The rows of `castor repo files`, header first. */
function rowsOf(result: CliResult): string[][] {
  return assertOk(result)
    .stdout.trimEnd()
    .split("\n")
    .map((line) => line.split(/\s{2,}/));
}

async function headOfMain(): Promise<string> {
  return new CastorClient({ endpoint: server.url, hubToken: tokens.read, repo: REPO }).hub.resolveRevision("main");
}

/** The commit titles of main, newest first. */
async function commitTitles(): Promise<string[]> {
  const response = await fetch(`${server.url}/api/models/alice/bert/commits/main`, { headers: { authorization: `Bearer ${tokens.read}` } });
  assert.equal(response.status, 200);
  return ((await response.json()) as { title: string }[]).map((commit) => commit.title);
}

before(async () => {
  server = await startCastorServer();
  work = await mkdtemp(join(tmpdir(), "castor-repo-client-"));
  await admin("repo", "create", "model", "alice/bert");
  const token = async (access: string) =>
    (await admin("token", "create", "--user", "alice", "--namespace", "alice", "--access", access)).trimEnd().split("\n").at(-1)!;
  tokens.write = await token("write");
  tokens.read = await token("read");
  await mkdir(join(work, "in"));
  await Promise.all([
    writeFile(join(work, "in", "a.bin"), data.a),
    writeFile(join(work, "in", "b.txt"), data.b),
    writeFile(join(work, "in", "empty"), data.empty),
  ]);
});

after(async () => {
  await server?.stop();
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

describe("castor upload / repo files / download with repositories", () => {
  it("uploads three files into a folder with one commit and prints the commit", async () => {
    const up = assertOk(await client(["upload", "--repo", REPO, "in/a.bin", "in/b.txt", "in/empty", "--path", "dir"]));
    const lines = up.stdout.trimEnd().split("\n");
    assert.equal(lines.length, 4, up.stdout);
    const line = /^([0-9a-f]{64}) {2}(\S+) {2}\((.+)\)$/;
    assert.deepEqual(
      lines.slice(0, 3).map((text) => line.exec(text)?.[2]),
      ["dir/a.bin", "dir/b.txt", "dir/empty"],
    );
    assert.equal(line.exec(lines[2])?.[1], "0".repeat(64), "the empty file's hash");
    const commit = /^commit ([0-9a-f]{40}) {2}(\S+)$/.exec(lines[3]);
    assert.ok(commit, lines[3]);
    firstCommit = commit[1];
    assert.equal(commit[2], `${server.publicUrl}/alice/bert/commit/${firstCommit}`);
    assert.match(up.stderr, /^Committed 3 files to branch main of model:alice\/bert\.$/m);
    assert.equal(await headOfMain(), firstCommit);
    assert.equal((await commitTitles())[0], "Upload 3 files with castor");
  });

  it("lists the files with their sizes and storage, at a branch and at a commit id", async () => {
    const inDir = [
      ["dir/a.bin", String(3 * MiB), "xet"],
      ["dir/b.txt", String(data.b.length), "xet"],
      ["dir/empty", "0", "inline"],
    ];
    // The hub added the Xet-stored files to .gitattributes in the same commit, as the Hub does.
    const attributes = "dir/a.bin filter=lfs diff=lfs merge=lfs -text\ndir/b.txt filter=lfs diff=lfs merge=lfs -text\n";
    const expected = [["PATH", "SIZE", "STORAGE"], [".gitattributes", String(attributes.length), "inline"], ...inDir];
    const [atMain, atCommit, below, gitattributes] = await Promise.all([
      client(["repo", "files", REPO], { token: tokens.read }),
      client(["repo", "files", REPO, "--revision", firstCommit], { token: tokens.read }),
      client(["repo", "files", REPO, "--path", "dir"], { token: tokens.read }),
      client(["download", "--repo", REPO, ".gitattributes", "-o", "-"], { token: tokens.read }),
    ]);
    assert.deepEqual(rowsOf(atMain), expected);
    assert.match(atMain.stderr, /^4 files, \d+ bytes, in model:alice\/bert at main\.$/m);
    assert.deepEqual(rowsOf(atCommit), expected);
    assert.deepEqual(rowsOf(below), [["PATH", "SIZE", "STORAGE"], ...inDir]);
    assert.equal(assertOk(gitattributes).stdout, attributes);
  });

  it("downloads by path byte-exact: a Xet-stored file, a small one, the inline empty file", async () => {
    const out = join(work, "out");
    await mkdir(out);
    const [a, b, empty] = await Promise.all([
      client(["download", "--repo", REPO, "dir/a.bin", "-o", join(out, "a.bin")], { token: tokens.read }),
      client(["download", "--repo", REPO, "dir/b.txt", "--revision", firstCommit], { token: tokens.read, cwd: out }),
      client(["download", "--repo", REPO, "dir/empty", "-o", join(out, "empty")], { token: tokens.read }),
    ]);
    assert.equal(assertOk(a).stdout, `dir/a.bin  ${join(out, "a.bin")}  (3.0 MiB, xet, file hash verified, commit ${firstCommit})\n`);
    assert.ok((await readFile(join(out, "a.bin"))).equals(data.a));
    assert.equal(assertOk(b).stdout, `dir/b.txt  b.txt  (${data.b.length} B, xet, file hash verified, commit ${firstCommit})\n`);
    assert.ok((await readFile(join(out, "b.txt"))).equals(data.b), "default output: the base name in the current folder");
    assert.equal(assertOk(empty).stdout, `dir/empty  ${join(out, "empty")}  (0 B, inline, git blob id verified, commit ${firstCommit})\n`);
    assert.equal((await readFile(join(out, "empty"))).length, 0);

    const [part, inlinePart] = await Promise.all([
      client(["download", "--repo", REPO, "dir/a.bin", "-o", join(out, "a.part"), "--range", "1000-1999"], { token: tokens.read }),
      client(["download", "--repo", REPO, "dir/b.txt", "-o", "-", "--range", "2-6"], { token: tokens.read }),
    ]);
    assert.match(assertOk(part).stdout, /\(1000 B, xet, chunks verified, commit /);
    assert.ok((await readFile(join(out, "a.part"))).equals(data.a.subarray(1000, 2000)));
    assert.equal(assertOk(inlinePart).stdout, data.b.subarray(2, 7).toString());
  });

  it("still downloads by file hash, positional or --hash", async () => {
    const up = assertOk(await client(["upload", "--repo", REPO, "--no-commit", "in/a.bin"]));
    const [hash, localPath] = up.stdout.trimEnd().split(/\s{2}/);
    assert.equal(localPath, "in/a.bin", "--no-commit names the local file");
    assert.equal(up.stdout.split("\n").length, 2, "no commit line");
    assert.equal(await headOfMain(), firstCommit, "--no-commit makes no commit");
    const [positional, flagged] = await Promise.all([
      client(["download", "--repo", REPO, hash, "-o", "by-hash.bin"], { token: tokens.read }),
      client(["download", "--repo", REPO, "--hash", hash, "-o", "by-hash-flag.bin"], { token: tokens.read }),
    ]);
    assert.equal(assertOk(positional).stdout, `${hash}  by-hash.bin  (3.0 MiB, file hash verified)\n`);
    assertOk(flagged);
    assert.ok((await readFile(join(work, "by-hash.bin"))).equals(data.a));
    assert.ok((await readFile(join(work, "by-hash-flag.bin"))).equals(data.a));
  });

  it("downloads by file hash at revision HEAD, whose read token is asked at HEAD as tree/HEAD and resolve/HEAD are (test/http/hub-rules.test.ts)", async () => {
    const up = assertOk(await client(["upload", "--repo", REPO, "--no-commit", "in/a.bin"]));
    const [hash] = up.stdout.trimEnd().split(/\s{2}/);
    const head = await client(["download", "--repo", REPO, "--revision", "HEAD", "--hash", hash, "-o", "at-head.bin"], { token: tokens.read });
    assert.equal(assertOk(head).stdout, `${hash}  at-head.bin  (3.0 MiB, file hash verified)\n`);
    assert.ok((await readFile(join(work, "at-head.bin"))).equals(data.a));
  });

  it("commits a single file at --path with -m, deduplicated against the first upload", async () => {
    const up = assertOk(await client(["upload", "--repo", REPO, "in/a.bin", "--path", "weights/model.bin", "-m", "Add weights\n\nSame bytes, new place."]));
    // The repository has the file whole: asked with HEAD /v1/files/…, nothing is sent or registered.
    assert.match(up.stdout, /^[0-9a-f]{64} {2}weights\/model\.bin {2}\(3\.0 MiB, already stored, nothing sent\)\n/);
    assert.match(
      up.stderr,
      /: 0 B sent, 3\.0 MiB deduplicated \(100\.0% not sent\); 0 xorbs \(0 B\) sent; 0 shards registered; 1 file already in the repository\./,
    );
    assert.deepEqual((await commitTitles()).slice(0, 2), ["Add weights", "Upload 3 files with castor"]);
    const rows = rowsOf(await client(["repo", "files", REPO], { token: tokens.read }));
    assert.deepEqual(
      rows.map((row) => row[0]),
      ["PATH", ".gitattributes", "dir/a.bin", "dir/b.txt", "dir/empty", "weights/model.bin"],
    );
    firstCommit = await headOfMain();
  });

  it("makes no commit when the branch holds every file as uploaded already, and says so; a changed file commits", async () => {
    const titles = await commitTitles();
    const again = assertOk(await client(["upload", "--repo", REPO, "in/a.bin", "in/b.txt", "in/empty", "--path", "dir", "-m", "Nothing new"]));
    const lines = again.stdout.trimEnd().split("\n");
    assert.equal(lines.length, 4, again.stdout);
    assert.equal(lines[3], `unchanged ${firstCommit}  ${server.publicUrl}/alice/bert/commit/${firstCommit}`, "the head that holds the files");
    assert.match(
      again.stderr,
      new RegExp(
        `^No files have changed: branch main of model:alice/bert holds them as uploaded already \\(commit ${firstCommit}\\); nothing committed\\.$`,
        "m",
      ),
    );
    assert.equal(await headOfMain(), firstCommit, "main did not move");
    assert.deepEqual(await commitTitles(), titles, "no commit was added");

    // The library does the same, and tells it apart.
    const library = new CastorClient({ endpoint: server.url, hubToken: tokens.write, repo: REPO });
    const same = await library.uploadToRepo([join(work, "in", "b.txt")], { pathInRepo: "dir/b.txt" });
    assert.equal(same.committed, false);
    assert.deepEqual(same.commit, { commitOid: firstCommit, commitUrl: `${server.publicUrl}/alice/bert/commit/${firstCommit}` });

    // One file of several changed: a commit, as before.
    await writeFile(join(work, "b-changed.txt"), "a small text file, changed\n");
    const changed = await library.uploadToRepo([join(work, "in", "a.bin"), join(work, "b-changed.txt")], { pathInRepo: "dir/", message: "Change b" });
    assert.equal(changed.committed, true);
    assert.notEqual(changed.commit.commitOid, firstCommit);
    assert.equal(await headOfMain(), changed.commit.commitOid);
    assert.equal((await commitTitles())[0], "Change b");

    // The same bytes stored another way (inline, by a hub commit) are a change of the tree: committed.
    const inline = await library.commit({ summary: "Inline copy", operations: [{ kind: "file", path: "dir/inline.txt", content: data.b }] });
    await writeFile(join(work, "inline.txt"), data.b);
    const asXet = assertOk(await client(["upload", "--repo", REPO, "inline.txt", "--path", "dir/inline.txt"]));
    assert.match(asXet.stdout, /^commit [0-9a-f]{40} /m);
    assert.notEqual(await headOfMain(), inline.commitOid);
    firstCommit = await headOfMain();
  });

  it("reports a missing path, an unknown repository or revision with the server's message (exit 1), writing nothing", async () => {
    const [missing, unknownRepo, unknownRevision, unknownRepoFiles] = await Promise.all([
      client(["download", "--repo", REPO, "dir/missing.bin", "-o", "missing.bin"], { token: tokens.read }),
      client(["download", "--repo", "model:alice/nope", "dir/a.bin", "-o", "nope.bin"], { token: tokens.read }),
      client(["download", "--repo", REPO, "dir/a.bin", "--revision", "no-such-branch", "-o", "nope.bin"], { token: tokens.read }),
      client(["repo", "files", "model:alice/nope"], { token: tokens.read }),
    ]);
    assertFails(
      missing,
      1,
      new RegExp(`^castor download: .*404 Not Found \\(EntryNotFound\\): "dir/missing\\.bin" does not exist at commit ${firstCommit}`, "m"),
    );
    assertFails(unknownRepo, 1, /404 Not Found \(RepoNotFound\): .*alice\/nope/);
    assertFails(unknownRevision, 1, /404 Not Found \(RevisionNotFound\): revision "no-such-branch" not found/);
    assertFails(unknownRepoFiles, 1, /^castor repo files: .*404 Not Found \(RepoNotFound\)/m);
    const left = await readdir(work);
    assert.ok(!left.some((name) => name.startsWith("missing.bin") || name.startsWith("nope.bin")), `no output: ${left.join(", ")}`);
  });

  it("refuses an upload with a read-only token before storing or committing anything", async () => {
    const result = await client(["upload", "--repo", REPO, "in/b.txt", "--path", "readonly.txt"], { token: tokens.read });
    assertFails(result, 1, /^castor upload: .*403 Forbidden.*does not grant write access to model:alice\/bert/m);
    assert.equal(result.stdout, "");
    assert.equal(await headOfMain(), firstCommit, "main did not move");
  });

  it("refuses bad command lines with exit 2", async () => {
    const cases: [string[], RegExp][] = [
      [["upload", "--repo", REPO, "in/a.bin", "in/../in/a.bin"], /would both be "a\.bin" in the repository/],
      [["upload", "--repo", REPO, "in/a.bin", "--path", "x/../y"], /cannot be a path in a repository/],
      [["upload", "--repo", REPO, "--no-commit", "-m", "msg", "in/a.bin"], /drop them with --no-commit/],
      [["download", "--repo", REPO, "dir/a.bin", "--hash", "ab".repeat(32)], /either PATH or --hash HASH, not both/],
      [["download", "--repo", REPO, "--hash", "ab".repeat(32)], /-o OUT is required/],
      [["repo", "files"], /missing TYPE:NAMESPACE\/NAME/],
      [["repo", "files", "alice/bert"], /repository must be TYPE:NAMESPACE\/NAME/],
    ];
    const results = await Promise.all(cases.map(([args]) => client(args)));
    results.forEach((result, i) => {
      assertFails(result, 2, cases[i][1]);
      assert.match(result.stderr, /--help' for usage/);
    });
    assert.equal(await headOfMain(), firstCommit);
  });

  it("uploads directories recursively, keeping their in-repo paths, next to plain files", async () => {
    await mkdir(join(work, "tree", "sub"), { recursive: true });
    await writeFile(join(work, "tree", "x.bin"), randomBytes(40_000));
    await writeFile(join(work, "tree", "sub", "y.txt"), "why\n");
    const up = assertOk(await client(["upload", "--repo", REPO, "tree", "in/b.txt", "--path", "up", "-m", "A folder"]));
    const lines = up.stdout.trimEnd().split("\n");
    assert.deepEqual(
      lines.slice(0, 3).map((line) => line.split(/\s{2}/)[1]),
      ["up/tree/sub/y.txt", "up/tree/x.bin", "up/b.txt"],
    );
    const rows = rowsOf(await client(["repo", "files", REPO, "--path", "up"], { token: tokens.read }));
    assert.deepEqual(
      rows.slice(1).map((row) => row[0]),
      ["up/b.txt", "up/tree/sub/y.txt", "up/tree/x.bin"],
    );
    assertOk(await client(["download", "--repo", REPO, "up/tree/sub/y.txt", "-o", "y-copy.txt"], { token: tokens.read }));
    assert.equal(await readFile(join(work, "y-copy.txt"), "utf8"), "why\n");
  });

  it("shows the new commands in the help texts", async () => {
    const [top, repo, files, upload, download] = await Promise.all([
      runCastor(["--help"]),
      runCastor(["repo", "--help"]),
      runCastor(["repo", "files", "--help"]),
      runCastor(["upload", "--help"]),
      runCastor(["download", "--help"]),
    ]);
    assert.match(assertOk(top).stdout, /repo files TYPE:NS\/NAME/);
    assert.match(top.stdout, /upload --repo TYPE:NS\/NAME \[--path IN_REPO\]/);
    assert.match(assertOk(repo).stdout, /castor repo <create\|list\|ls\|files>/);
    assert.match(assertOk(files).stdout, /^Usage: castor repo files TYPE:NAMESPACE\/NAME/);
    assert.match(assertOk(upload).stdout, /--path IN_REPO/);
    assert.match(assertOk(download).stdout, /--hash HASH/);
  });
});
