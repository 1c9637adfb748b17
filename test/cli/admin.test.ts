import { describe, it, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { OperatorHub } from "../helpers/operator.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { runCastor, type CliResult } from "../helpers/cli.js";

let root: string;
let dataDir: string;
/** Runs castor with CASTOR_DATA_DIR pointing at this test's folder. */
const castor = (...args: string[]): Promise<CliResult> => runCastor(args, { env: { CASTOR_DATA_DIR: dataDir } });

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "castor-cli-"));
  dataDir = join(root, "data");
});
afterEach(() => rm(root, { recursive: true, force: true }));

function assertOk(result: CliResult): CliResult {
  assert.equal(result.code, 0, `exit ${result.code}; stderr: ${result.stderr}`);
  return result;
}

/** Exit code 2 or 1 with a one-line `castor …:` message and no stack trace. */
function assertFails(result: CliResult, code: 1 | 2, message: RegExp): void {
  assert.equal(result.code, code, `expected exit ${code}, got ${result.code}; stderr: ${result.stderr}`);
  assert.match(result.stderr, /^castor [a-z ]+: /);
  assert.match(result.stderr, message);
  assert.doesNotMatch(result.stderr, /\n\s+at /, "no stack trace");
  if (code === 2) assert.match(result.stderr, /--help' for usage/);
}

/** Checks the token-create contract and returns the token. */
function tokenFrom(result: CliResult): string {
  assertOk(result);
  const lines = result.stdout.split("\n");
  assert.equal(lines.pop(), "", "stdout ends with a newline");
  assert.equal(lines.length, 1, `only the token on stdout, got ${JSON.stringify(result.stdout)}`);
  const token = lines[0];
  assert.match(token, /^hf_[A-Za-z0-9_-]+$/);
  assert.match(result.stderr, /^Created token tok_[0-9a-f]{12} \(.*\)\. Store it now: it is not shown again\.\n$/);
  assert.ok(!result.stderr.includes(token), "the token is not repeated on stderr");
  return token;
}

/** Asks the hub (in this process, on the same data folder) what the token may do. */
async function authorize(token: string, repoName: string, access: "read" | "write", repoType = "model", revision = "main") {
  const store = await SqliteMetadataStore.open(dataDir);
  try {
    return await new OperatorHub(store).authorizeTokenRequest({ hubToken: token, repoType, repoName, revision, access });
  } finally {
    await store.close();
  }
}

describe("castor repo / revision / token (child processes)", () => {
  it("creates a repository in one process that the next process lists", async () => {
    const created = assertOk(await castor("repo", "create", "model", "alice/bert"));
    assert.equal(created.stdout, "Created private repository model:alice/bert with branch main.\n");
    assert.ok(existsSync(join(dataDir, "metadata.sqlite")));
    assertOk(await castor("repo", "create", "dataset", "alice/bert"));

    const listed = assertOk(await castor("repo", "list"));
    const lines = listed.stdout.trimEnd().split("\n");
    const rows = lines.map((line) => line.split(/\s{2,}/));
    assert.deepEqual(
      rows.map((row) => row.slice(0, 3)),
      [
        ["TYPE", "NAME", "VISIBILITY"],
        ["model", "alice/bert", "private"],
        ["dataset", "alice/bert", "private"],
      ],
    );
    assert.equal(rows[0][3], "CREATED");
    assert.match(rows[1][3], /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(new Set(lines.map((line, i) => line.indexOf(rows[i][3]))).size, 1, "columns are aligned");

    assertFails(await castor("repo", "create", "model", "alice/bert"), 1, /repository model:alice\/bert already exists/);
  });

  it("prints a hub token alone on stdout that the hub then honours", async () => {
    await Promise.all([castor("repo", "create", "model", "alice/bert"), castor("repo", "create", "model", "alice/other")]).then((results) =>
      results.forEach(assertOk),
    );
    const [write, read, admin, unknownRepo] = await Promise.all([
      castor("token", "create", "--repo", "model:alice/bert", "--access", "write", "--expires", "30d"),
      castor("token", "create", "--access", "read", "--repo=model:alice/bert,model:alice/other"),
      castor("token", "create", "--all-repos", "--access", "write"),
      castor("token", "create", "--repo", "model:alice/none", "--access", "read"),
    ]);
    const writeToken = tokenFrom(write);
    assert.match(write.stderr, /\(write, model:alice\/bert, expires \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)/);
    const readToken = tokenFrom(read);
    assert.match(read.stderr, /\(read, model:alice\/bert, model:alice\/other, never expires\)/);
    const adminToken = tokenFrom(admin);
    assert.match(admin.stderr, /\(write, all repositories, never expires\)/);
    assertFails(unknownRepo, 1, /model:alice\/none does not exist/);

    assert.equal((await authorize(writeToken, "alice/bert", "write")).ok, true);
    assert.equal(await authorize(writeToken, "alice/other", "read").then((r) => r.ok || r.status), 404);
    assert.equal((await authorize(readToken, "alice/other", "read")).ok, true);
    assert.equal(await authorize(readToken, "alice/bert", "write").then((r) => r.ok || r.status), 403);
    assert.equal((await authorize(adminToken, "alice/other", "write")).ok, true);
  });

  it("lists tokens without secrets and revokes them", async () => {
    assertOk(await castor("repo", "create", "space", "alice/demo"));
    const created = await castor("token", "create", "--repo", "space:alice/demo", "--access", "read", "--expires", "2099-01-01");
    const token = tokenFrom(created);
    const id = /Created token (tok_[0-9a-f]{12})/.exec(created.stderr)![1];

    const listed = assertOk(await castor("token", "list"));
    assert.ok(!listed.stdout.includes(token.slice(3, 20)), "no secret in the list");
    const [header, row] = listed.stdout
      .trimEnd()
      .split("\n")
      .map((line) => line.split(/\s{2,}/));
    assert.deepEqual(header, ["ID", "USER", "ACCESS", "REPOS", "STATUS", "EXPIRES", "CREATED"]);
    assert.deepEqual(row.slice(0, 6), [id, "-", "read", "space:alice/demo", "active", "2099-01-01T00:00:00Z"]);

    const [revoked, unknown] = await Promise.all([castor("token", "revoke", id), castor("token", "revoke", "tok_000000000000")]);
    assert.equal(assertOk(revoked).stdout, `Revoked token ${id}.\n`);
    assertFails(unknown, 1, /no hub token has the id "tok_000000000000"/);
    assert.equal(await authorize(token, "alice/demo", "read", "space").then((r) => r.ok || r.status), 401);
    assert.match(assertOk(await castor("token", "list")).stdout, new RegExp(`${id}\\s+-\\s+read\\s+space:alice/demo\\s+revoked`));
  });

  it("makes tokens for a user and whole namespaces", async () => {
    const created = await castor("token", "create", "--user", "alice", "--namespace", "alice,acme", "--access", "write");
    tokenFrom(created);
    assert.match(created.stderr, /Created token tok_[0-9a-f]{12} \(user alice, write, alice\/\*, acme\/\*, never expires\)/);
    assert.match(assertOk(await castor("token", "list")).stdout, /tok_[0-9a-f]{12}\s+alice\s+write\s+acme\/\*,alice\/\*\s+active/);
    assertFails(await castor("token", "create", "--user", "bad name", "--namespace", "x", "--access", "read"), 2, /user name must be/);
  });

  it("creates branches and tags", async () => {
    assertOk(await castor("repo", "create", "model", "alice/bert"));
    const [branch, tag] = await Promise.all([
      castor("revision", "create", "model:alice/bert", "feature/x"),
      castor("revision", "create", "model:alice/bert", "v1.0", "--tag"),
    ]);
    assert.equal(assertOk(branch).stdout, "Created branch feature/x in model:alice/bert.\n");
    assert.equal(assertOk(tag).stdout, "Created tag v1.0 in model:alice/bert.\n");
    const store = await SqliteMetadataStore.open(dataDir);
    try {
      const repo = (await store.getRepo("model", "alice/bert"))!;
      assert.deepEqual((await store.listRevisions(repo.id)).map((r) => [r.name, r.kind]).sort(), [
        ["feature/x", "branch"],
        ["main", "branch"],
        ["v1.0", "tag"],
      ]);
    } finally {
      await store.close();
    }

    const [duplicate, noRepo, badName, headBranch, headTag] = await Promise.all([
      castor("revision", "create", "model:alice/bert", "v1.0"),
      castor("revision", "create", "model:alice/none", "dev"),
      castor("revision", "create", "model:alice/bert", "a..b"),
      castor("revision", "create", "model:alice/bert", "HEAD"),
      castor("revision", "create", "model:alice/bert", "HEAD", "--tag"),
    ]);
    assertFails(duplicate, 1, /"v1.0" already exists in model:alice\/bert/);
    assertFails(noRepo, 1, /model:alice\/none does not exist/);
    assertFails(badName, 2, /revision name "a\.\.b" is not valid/);
    assertFails(headBranch, 2, /revision name "HEAD" is reserved: it names the default branch \(main\)/);
    assertFails(headTag, 2, /revision name "HEAD" is reserved/);
  });

  it("refuses a branch or tag named like a commit id, as the HTTP routes do (test/http/hub-rules.test.ts)", async () => {
    assertOk(await castor("repo", "create", "model", "alice/bert"));
    const commitLike = "0123456789abcdef0123456789abcdef01234567";
    const [branch, tag] = await Promise.all([
      castor("revision", "create", "model:alice/bert", commitLike),
      castor("revision", "create", "model:alice/bert", commitLike, "--tag"),
    ]);
    // The words of the HTTP routes' refusal: one rule (names.ts requireNewRevisionName) for both.
    assertFails(branch, 2, /revision name "0123456789abcdef0123456789abcdef01234567" is not valid: it looks like a commit id/);
    assertFails(tag, 2, /revision name "0123456789abcdef0123456789abcdef01234567" is not valid: it looks like a commit id/);
    const store = await SqliteMetadataStore.open(dataDir);
    try {
      const repo = (await store.getRepo("model", "alice/bert"))!;
      assert.deepEqual(
        (await store.listRevisions(repo.id)).map((r) => r.name),
        ["main"],
      );
    } finally {
      await store.close();
    }
  });

  it("lets several processes open a fresh data folder at once", async () => {
    const names = ["a/one", "b/two", "c/three"];
    const results = await Promise.all(names.map((name) => castor("repo", "create", "dataset", name)));
    results.forEach(assertOk);
    const listed = assertOk(await castor("repo", "list")).stdout;
    for (const name of names) assert.match(listed, new RegExp(`dataset\\s+${name}\\s`));
  });

  it("prints empty lists as nothing on stdout and a hint on stderr", async () => {
    const [repos, tokens] = await Promise.all([castor("repo", "list"), castor("token", "list")]);
    assert.equal(assertOk(repos).stdout, "");
    assert.match(repos.stderr, /No repositories yet/);
    assert.equal(assertOk(tokens).stdout, "");
    assert.match(tokens.stderr, /No hub tokens yet/);
  });

  it("takes configuration from flags over the environment, defaulting to an existing ./castor-data", async () => {
    const flagDir = join(root, "from-flag");
    assertOk(await castor("repo", "create", "model", "alice/bert", "--data-dir", flagDir));
    assert.ok(existsSync(join(flagDir, "metadata.sqlite")));
    assert.ok(!existsSync(dataDir), "the flag wins over CASTOR_DATA_DIR");

    // Made by a server (here: a named data dir at the default place), ./castor-data is used without being named.
    assertOk(await runCastor(["repo", "create", "model", "alice/bert", "--data-dir", "castor-data"], { cwd: root }));
    const listed = assertOk(await runCastor(["repo", "list"], { cwd: root }));
    assert.match(listed.stdout, /alice\/bert/);
  });

  it("refuses to create ./castor-data implicitly, naming the folder it looked for and how to point at the server's", async () => {
    const elsewhere = join(root, "elsewhere");
    await mkdir(elsewhere);
    for (const args of [
      ["token", "create", "--user", "alice", "--namespace", "alice", "--access", "write"],
      ["token", "list"],
      ["repo", "create", "model", "alice/bert"],
      ["repo", "list"],
      ["gc", "--dry-run"],
      ["fsck"],
      ["stats"],
    ]) {
      const result = await runCastor(args, { cwd: elsewhere });
      assertFails(
        result,
        2,
        new RegExp(`no castor data dir at ${elsewhere.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}/castor-data .*--data-dir DIR or CASTOR_DATA_DIR=DIR`),
      );
    }
    assert.deepEqual(await readdir(elsewhere), [], "nothing was created");
  });

  it("shows help for each command on stdout", async () => {
    const cases: [string[], RegExp][] = [
      [["repo", "create", "--help"], /^Usage: castor repo create TYPE NAMESPACE\/NAME/],
      [["revision", "create", "--help"], /^Usage: castor revision create TYPE:NAMESPACE\/NAME NAME \[--tag\]/],
      [["token", "create", "--help"], /^Usage: castor token create \[--user NAME\] \(--repo TYPE:NS\/NAME\[,…\] \| --namespace NS\[,…\] \| --all-repos\)/],
      [["token", "-h"], /^Usage: castor token <create\|list\|revoke>/],
    ];
    const results = await Promise.all(cases.map(([args]) => castor(...args)));
    results.forEach((result, i) => {
      assert.match(assertOk(result).stdout, cases[i][1], cases[i][0].join(" "));
      assert.equal(result.stderr, "");
    });
    assert.ok(!existsSync(dataDir), "help opens no database");
  });

  it("exits 2 on usage errors with a message and no stack trace", async () => {
    const cases: [string[], RegExp][] = [
      [["repo"], /castor repo: a subcommand is required \(one of create, list, ls, files\)/],
      [["repo", "create", "model"], /missing NAMESPACE\/NAME/],
      [["repo", "create", "models", "a/b"], /type must be one of model, dataset, space; got "models"/],
      [["repo", "list", "--verbose"], /Unknown option '--verbose'/],
      [["token", "create", "--access", "read"], /give --repo TYPE:NS\/NAME\[,…\] and\/or --namespace NS\[,…\], or --all-repos/],
      [["token", "create", "--all-repos", "--access", "admin"], /--access must be read or write, got "admin"/],
      [["token", "create", "--all-repos", "--access", "read", "--expires", "soon"], /expiry must be a duration/],
      [["token", "list", "--token-ttl", "zero"], /CASTOR_TOKEN_TTL must be a whole number/],
    ];
    const results = await Promise.all(cases.map(([args]) => castor(...args)));
    results.forEach((result, i) => {
      assertFails(result, 2, cases[i][1]);
      assert.equal(result.stdout, "", `${cases[i][0].join(" ")}: nothing on stdout`);
    });
    assert.ok(!existsSync(dataDir), "a usage error opens no database");
  });
});
