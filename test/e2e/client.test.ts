/**
 * castor's client against a real `castor serve` process: uploads and byte-exact downloads of
 * edge sizes, range downloads, deduplication inside a session, across sessions (the global
 * dedup query) and against stored xorbs, token refresh (an injected clock; expiry on both
 * sides is test/client/token-expiry.test.ts, in-process on a clock the test turns), V1
 * fallback, and the `castor upload` / `castor download` commands as a user runs them.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { createServer, type AddressInfo } from "node:net";
import { mkdtemp, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient, CastorClientError, upload, type UploadResult } from "../../src/client/index.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";

const MiB = 1024 * 1024;
const REPO = "model:alice/bert";

let server: ServerProcess;
let hubToken: string;
let work: string;
/** name → { path, data } of the files the suite uploads first. */
const files = new Map<string, { path: string; data: Buffer }>();
let firstUpload: UploadResult;

async function cli(target: ServerProcess, ...args: string[]): Promise<string> {
  const result = await runCastor(args, { env: { CASTOR_DATA_DIR: target.dataDir } });
  assert.equal(result.code, 0, result.stderr);
  return result.stdout.trim();
}

/** Creates the repository and a write hub token on `target`. */
async function prepare(target: ServerProcess): Promise<string> {
  await cli(target, "repo", "create", "model", "alice/bert");
  return cli(target, "token", "create", "--repo", REPO, "--access", "write");
}

function client(target: ServerProcess = server, extra: Partial<ConstructorParameters<typeof CastorClient>[0]> = {}): CastorClient {
  return new CastorClient({ endpoint: target.url, hubToken, repo: REPO, ...extra });
}

/** Number and total size of the stored xorb objects. */
async function xorbStorage(target: ServerProcess): Promise<{ count: number; bytes: number }> {
  const root = join(target.dataDir, "blobs", "xorbs");
  let count = 0;
  let bytes = 0;
  for (const name of await readdir(root, { recursive: true })) {
    const info = await stat(join(root, name));
    if (!info.isFile()) continue;
    count++;
    bytes += info.size;
  }
  return { count, bytes };
}

/** A port nothing listens on: bound by the OS, then released. */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** `castor upload|download ARGS` in a child process. */
function runClientCli(command: "upload" | "download", args: string[], env: Record<string, string> = {}) {
  return runCastor([command, ...args], { env, timeoutMs: 30_000 });
}

before(async () => {
  server = await startCastorServer({ env: { CASTOR_TOKEN_TTL: "40" } });
  hubToken = await prepare(server);
  work = await mkdtemp(join(tmpdir(), "castor-client-e2e-"));
  const block = randomBytes(MiB);
  const contents: [string, Buffer][] = [
    ["empty", Buffer.alloc(0)],
    ["one", randomBytes(1)],
    ["8191", randomBytes(8191)],
    ["8192", randomBytes(8192)],
    ["1mib", randomBytes(MiB)],
    ["10mib", randomBytes(10 * MiB)],
    ["repeated", Buffer.concat(Array.from({ length: 12 }, () => block))],
  ];
  for (const [name, data] of contents) {
    const path = join(work, name);
    await writeFile(path, data);
    files.set(name, { path, data });
  }
  firstUpload = await client().upload([...files.values()].map((f) => f.path));
});

after(async () => {
  await server?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

function hashOf(name: string): string {
  const path = files.get(name)!.path;
  return firstUpload.files.find((f) => f.path === path)!.fileHash;
}

async function downloadBytes(target: CastorClient, fileHash: string, options: Partial<Parameters<CastorClient["download"]>[0]> = {}) {
  const out = join(work, `out-${randomBytes(4).toString("hex")}`);
  const result = await target.download({ fileHash, output: out, ...options });
  const data = await readFile(out);
  await rm(out);
  return { result, data };
}

describe("upload then download", () => {
  it("registers a batch with one shard and reports per-file hashes, SHA-256 and dedup", () => {
    assert.equal(firstUpload.files.length, files.size);
    assert.equal(firstUpload.shards.sent, 1);
    for (const uploaded of firstUpload.files) {
      const { data } = [...files.values()].find((f) => f.path === uploaded.path)!;
      assert.equal(uploaded.size, data.length);
      assert.equal(uploaded.sha256, createHash("sha256").update(data).digest("hex"));
      assert.equal(uploaded.newBytes + uploaded.dedupedBytes, data.length);
    }
    assert.equal(hashOf("empty"), "0".repeat(64));
    // 12 copies of one 1 MiB block: only the first copy (and the chunks around block seams) is new.
    const repeated = firstUpload.files.find((f) => f.path === files.get("repeated")!.path)!;
    assert.ok(repeated.newBytes < 2 * MiB, `newBytes ${repeated.newBytes}`);
    assert.ok(repeated.dedupedBytes > 10 * MiB, `dedupedBytes ${repeated.dedupedBytes}`);
    const random = firstUpload.files.find((f) => f.path === files.get("10mib")!.path)!;
    assert.equal(random.newBytes, 10 * MiB);
  });

  it("downloads every size byte-exact, verified against the file hash", async () => {
    const reader = client();
    for (const [name, { data }] of files) {
      const { result, data: downloaded } = await downloadBytes(reader, hashOf(name));
      assert.equal(downloaded.length, data.length, name);
      assert.ok(downloaded.equals(data), `${name} differs`);
      assert.equal(result.verified, "file-hash", name);
    }
  });

  it("pages through reconstruction windows with a small buffer, still byte-exact and verified", async () => {
    const reader = client();
    for (const name of ["10mib", "repeated"]) {
      const { result, data } = await downloadBytes(reader, hashOf(name), { windowBytes: 3 * MiB + 12345, bufferBytes: MiB, concurrency: 2 });
      assert.ok(data.equals(files.get(name)!.data), name);
      assert.equal(result.verified, "file-hash");
    }
  });

  it("downloads ranges: first byte, last byte, across terms, inside one chunk, and past the end", async () => {
    const reader = client();
    for (const name of ["10mib", "repeated"]) {
      const data = files.get(name)!.data;
      const size = data.length;
      const ranges: [number, number][] = [
        [0, 0],
        [size - 1, size - 1],
        [MiB - 100, 3 * MiB + 100], // the repeated file changes terms at every block seam
        [5000, 5100], // inside the first chunk (chunks are ≥ 8 KiB)
        [4 * MiB + 70_000, 4 * MiB + 70_001],
        [size - 10, size + 1000], // the end is clamped to the file
      ];
      for (const [start, end] of ranges) {
        const { result, data: part } = await downloadBytes(reader, hashOf(name), { range: { start, end } });
        assert.ok(part.equals(data.subarray(start, Math.min(end, size - 1) + 1)), `${name} ${start}-${end}`);
        assert.equal(result.verified, "chunks");
      }
    }
    await assert.rejects(
      reader.download({ fileHash: hashOf("1mib"), output: join(work, "never"), range: { start: MiB, end: MiB + 5 } }),
      (error: unknown) => error instanceof CastorClientError && error.kind === "usage" && /past the end of the file \(1048576 bytes\)/.test(error.message),
    );
    await assert.rejects(stat(join(work, "never")));
  });
});

describe("deduplication", () => {
  it("stores no new xorb when the same 10 MiB is uploaded again from a fresh session", async () => {
    const before = await xorbStorage(server);
    const again = await upload({ endpoint: server.url, hubToken, repo: REPO, files: [files.get("10mib")!.path] });
    const after = await xorbStorage(server);
    assert.equal(again.files[0].fileHash, hashOf("10mib"));
    assert.equal(again.files[0].newBytes, 0);
    assert.equal(again.xorbs.inserted + again.xorbs.alreadyStored, 0, "no xorb was even sent");
    assert.ok(again.globalDedup.hits >= 1, "the first chunk was found through global dedup");
    assert.deepEqual(after, before);
  });

  it("grows storage by far less than the file for a 10 MiB copy with 1 KiB changed in the middle", async () => {
    const edited = Buffer.from(files.get("10mib")!.data);
    randomBytes(1024).copy(edited, 5 * MiB);
    const path = join(work, "edited");
    await writeFile(path, edited);
    const before = await xorbStorage(server);
    const result = await upload({ endpoint: server.url, hubToken, repo: REPO, files: [path] });
    const after = await xorbStorage(server);
    const growth = after.bytes - before.bytes;
    assert.ok(growth > 0 && growth < 512 * 1024, `storage grew by ${growth} bytes`);
    assert.ok(result.files[0].newBytes < 512 * 1024, `newBytes ${result.files[0].newBytes}`);
    assert.ok(result.globalDedup.hits >= 1);
    const { data, result: downloaded } = await downloadBytes(client(), result.files[0].fileHash);
    assert.ok(data.equals(edited));
    assert.equal(downloaded.verified, "file-hash");
  });
});

describe("tokens", () => {
  it("refreshes the write token before it expires (injected clock, 40 s server tokens)", async () => {
    let skew = 0;
    const session = client(server, { now: () => Date.now() + skew });
    const path = join(work, "refresh-a");
    await writeFile(path, randomBytes(300_000));
    await session.upload([path]);
    assert.equal(session.tokenRequests("write"), 1);
    skew = 25_000; // 15 s of the 40 s left: inside the refresh margin
    await writeFile(path, randomBytes(300_000));
    const second = await session.upload([path]);
    assert.equal(session.tokenRequests("write"), 2);
    const { data } = await downloadBytes(session, second.files[0].fileHash);
    assert.ok(data.equals(await readFile(path)));
  });
});

describe("against a server with V2 turned off", () => {
  let v1Only: ServerProcess;
  before(async () => {
    v1Only = await startCastorServer({ env: { CASTOR_V2_RECONSTRUCTION: "501" } });
  });
  after(async () => {
    await v1Only?.stop();
  });

  it("downloads through V1", async () => {
    const token = await prepare(v1Only);
    const session = new CastorClient({ endpoint: v1Only.url, hubToken: token, repo: REPO });
    const path = join(work, "v1-only");
    const data = randomBytes(200_000);
    await writeFile(path, data);
    const uploaded = await session.upload([path]);
    const out = join(work, "v1-only.out");
    const result = await session.download({ fileHash: uploaded.files[0].fileHash, output: out });
    assert.ok((await readFile(out)).equals(data));
    assert.equal(result.reconstructionVersion, 1);
    assert.equal(result.verified, "file-hash");
  });
});

describe("castor upload / castor download commands", () => {
  const env = () => ({ CASTOR_ENDPOINT: server.url, CASTOR_HUB_TOKEN: hubToken });

  it("upload prints one line per file (stdout) and a summary (stderr); download writes the file and ranges", async () => {
    const a = join(work, "cli-a");
    const b = join(work, "cli-b");
    const dataA = randomBytes(150_000);
    await writeFile(a, dataA);
    await writeFile(b, Buffer.concat([dataA, dataA]));
    const up = await runClientCli("upload", ["--repo", REPO, a, b], env());
    assert.equal(up.code, 0, up.stderr);
    const lines = up.stdout.trimEnd().split("\n");
    assert.equal(lines.length, 3, up.stdout);
    const line = /^([0-9a-f]{64}) {2}(.+) {2}\((\S+ \S+), (\S+ \S+) sent \/ (\S+ \S+) deduplicated\)$/;
    const [, hashA, pathA, sizeA, newA] = line.exec(lines[0]) ?? [];
    // Committed at the root under their base names, which the lines show.
    assert.equal(pathA, "cli-a", lines[0]);
    assert.equal(sizeA, "146.5 KiB");
    assert.equal(newA, "146.5 KiB");
    const [, hashB, pathB, sizeB, , dedupB] = line.exec(lines[1]) ?? [];
    assert.equal(pathB, "cli-b", lines[1]);
    assert.match(lines[2], new RegExp(`^commit [0-9a-f]{40}  ${server.publicUrl}/alice/bert/commit/[0-9a-f]{40}$`));
    assert.equal(sizeB, "293.0 KiB");
    assert.notEqual(dedupB, "0 B", "the second file repeats the first");
    assert.match(up.stderr, /^Uploaded 2 files, 439\.5 KiB: .* sent, .* deduplicated \(\d+\.\d% not sent\); 1 xorb \(.*\) sent; 1 shard registered\.$/m);
    assert.match(up.stderr, /^upload reading: /m, "plain progress lines when stderr is not a terminal");

    const out = join(work, "cli-b.out");
    const down = await runClientCli("download", ["--repo", REPO, hashB, "-o", out], env());
    assert.equal(down.code, 0, down.stderr);
    assert.ok((await readFile(out)).equals(await readFile(b)));
    assert.equal(down.stdout, `${hashB}  ${out}  (293.0 KiB, file hash verified)\n`);

    const part = join(work, "cli-a.part");
    const ranged = await runClientCli("download", ["--repo", REPO, hashA, "-o", part, "--range", "1000-1999"], env());
    assert.equal(ranged.code, 0, ranged.stderr);
    assert.ok((await readFile(part)).equals(dataA.subarray(1000, 2000)));
  });

  it("fails with exit code 1 and a clear message for an unreachable server, a bad token, an unknown file, a missing file", async () => {
    const closedPort = await freePort();
    const unknown = "ab".repeat(32);
    const [unreachable, badToken, missing, noFile] = await Promise.all([
      runClientCli("upload", ["--repo", REPO, files.get("one")!.path], { ...env(), CASTOR_ENDPOINT: `http://127.0.0.1:${closedPort}` }),
      runClientCli("upload", ["--repo", REPO, files.get("one")!.path], { ...env(), CASTOR_HUB_TOKEN: "hf_not_a_real_token" }),
      runClientCli("download", ["--repo", REPO, unknown, "-o", join(work, "nothing")], env()),
      runClientCli("upload", ["--repo", REPO, join(work, "does-not-exist")], env()),
    ]);
    assert.equal(unreachable.code, 1);
    assert.match(
      unreachable.stderr,
      new RegExp(`^castor upload: asking the hub .*cannot reach http://127\\.0\\.0\\.1:${closedPort}: ECONNREFUSED .*is castor running there\\?`, "m"),
    );

    assert.equal(badToken.code, 1);
    assert.match(badToken.stderr, /answered 401 Unauthorized: .+ \(check the hub token given with --hub-token or CASTOR_HUB_TOKEN\)/);
    assert.doesNotMatch(badToken.stderr, /hf_not_a_real_token/, "tokens never appear in messages");

    assert.equal(missing.code, 1);
    assert.match(missing.stderr, new RegExp(`answered 404 Not Found: No file ${unknown}`));
    assert.equal(missing.stderr.match(/this token is for|the token is for/g)?.length, 1, `said once: ${missing.stderr}`);
    await assert.rejects(stat(join(work, "nothing")));

    assert.equal(noFile.code, 1);
    assert.match(noFile.stderr, /cannot read .*does-not-exist: no such file/);
  });

  it("fails with exit code 2 for a bad command line", async () => {
    const cases: ["upload" | "download", string[], RegExp][] = [
      ["upload", [files.get("one")!.path], /--repo TYPE:NS\/NAME is required/],
      ["upload", ["--repo", "alice/bert", files.get("one")!.path], /repository must be TYPE:NAMESPACE\/NAME/],
      ["upload", ["--repo", REPO], /give at least one FILE/],
      ["download", ["--repo", REPO, "--hash", "not-a-hash", "-o", join(work, "x")], /a file hash is 64 lowercase hexadecimal characters/],
      ["download", ["--repo", REPO, hashOf("one"), "-o", join(work, "x"), "--range", "9-3"], /--range must be A-B/],
      ["download", ["--repo", REPO, hashOf("one")], /-o OUT is required/],
    ];
    // Independent child processes: run side by side to keep the suite short.
    const results = await Promise.all(cases.map(([command, args]) => runClientCli(command, args, env())));
    results.forEach((result, i) => {
      const [command, args, message] = cases[i];
      assert.equal(result.code, 2, `${command} ${args.join(" ")}: ${result.stderr}`);
      assert.match(result.stderr, message);
      assert.match(result.stderr, new RegExp(`Run 'castor ${command} --help' for usage`));
    });
  });
});
