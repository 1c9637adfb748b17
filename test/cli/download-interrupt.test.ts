/**
 * `castor download` interrupted and run again, against a real `castor serve`: SIGINT and
 * SIGTERM remove the partial file; a SIGKILL leaves it, and so does a server lost mid-download,
 * and the next run resumes from its whole chunks, byte-exact; a damaged partial file fails the file-hash check and is removed.
 * Also the small behaviours around the output: an existing OUT needs --force, a range past
 * the end says what was clamped.
 */
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { runCastor, type CliResult } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";

const REPO = "model:alice/big";
const MiB = 1024 * 1024;
const TIMEOUT_MS = 60_000;

let server: ServerProcess;
let work: string;
let token = "";
let fileHash = "";
const data = randomBytes(96 * MiB);

before(async () => {
  server = await startCastorServer();
  work = await mkdtemp(join(tmpdir(), "castor-download-interrupt-"));
  const admin = (...args: string[]) => runCastor(args, { env: server.settings, timeoutMs: TIMEOUT_MS });
  assert.equal((await admin("repo", "create", "model", "alice/big")).code, 0);
  token = (await admin("token", "create", "--repo", REPO, "--access", "write")).stdout.trim();
  await writeFile(join(work, "big.bin"), data);
  const uploaded = await new CastorClient({ endpoint: server.url, hubToken: token, repo: REPO }).uploadToRepo([join(work, "big.bin")]);
  fileHash = uploaded.files[0].fileHash;
});

after(async () => {
  await server?.stop();
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

function download(args: string[], onStderr?: (text: string, child: ChildProcess) => void): Promise<CliResult> {
  return runCastor(["download", "--repo", REPO, ...args], {
    env: { CASTOR_ENDPOINT: server.url, CASTOR_HUB_TOKEN: token },
    cwd: work,
    timeoutMs: TIMEOUT_MS,
    onStderr,
  });
}

async function partials(): Promise<string[]> {
  return (await readdir(work)).filter((name) => name.includes(".castor-partial-"));
}

/** Runs a download of big.bin into `out` and sends `signal` once its partial file holds at least `bytes`. */
async function interruptedDownload(out: string, signal: NodeJS.Signals, bytes: number): Promise<CliResult> {
  let child: ChildProcess | null = null;
  let sent = false;
  const partial = join(work, `${out}.castor-partial-${fileHash.slice(0, 16)}`);
  const watcher = setInterval(async () => {
    if (sent || child === null) return;
    const size = (await stat(partial).catch(() => null))?.size ?? 0;
    if (size >= bytes && !sent) {
      sent = true;
      child.kill(signal);
    }
  }, 2);
  try {
    // The child is known from its first stderr line (progress starts at once).
    const result = await download(["big.bin", "-o", out], (_text, running) => {
      child = running;
    });
    assert.ok(sent, `the download ended before it could be interrupted: ${result.stderr}`);
    return result;
  } finally {
    clearInterval(watcher);
  }
}

describe("castor download, interrupted", () => {
  for (const [signal, code] of [
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const) {
    it(`removes its partial file on ${signal} and leaves no OUT`, async () => {
      const result = await interruptedDownload(`${signal}.bin`, signal, 1);
      assert.equal(result.code, code, result.stderr);
      assert.match(result.stderr, new RegExp(`interrupted \\(${signal}\\); nothing written`));
      assert.deepEqual(await partials(), []);
      await assert.rejects(stat(join(work, `${signal}.bin`)));
    });
  }

  it("resumes after a SIGKILL from the partial file's whole chunks, byte-exact", async () => {
    const killed = await interruptedDownload("resumed.bin", "SIGKILL", 16 * MiB);
    assert.equal(killed.signal, "SIGKILL");
    const [left] = await partials();
    assert.ok(left !== undefined, "SIGKILL leaves the partial file");
    const kept = (await stat(join(work, left))).size;
    assert.ok(kept < data.length, "killed before the end");

    const again = await download(["big.bin", "-o", "resumed.bin"]);
    assert.equal(again.code, 0, again.stderr);
    const resumed = /Resumed from the partial file an interrupted run left: kept (\d+\.\d) MiB/.exec(again.stderr);
    assert.ok(resumed, again.stderr);
    assert.ok(Number(resumed[1]) * MiB > kept - 256 * 1024, `kept ${resumed[1]} MiB of ${kept} bytes`);
    assert.ok((await readFile(join(work, "resumed.bin"))).equals(data));
    // The total is known from the start (the hub's HEAD), so progress shows it with a percentage.
    assert.match(again.stderr, /^download downloading: [\d.]+ MiB \/ 96\.0 MiB \(\d+%\), [\d.]+ [KMG]?i?B\/s$/m);
    assert.deepEqual(await partials(), []);
  });

  it("fails the file-hash check on a damaged partial file, removes it, and the next run starts afresh", async () => {
    const damaged = Buffer.from(data.subarray(0, 20 * MiB));
    damaged[5 * MiB] ^= 0xff;
    await writeFile(join(work, `damaged.bin.castor-partial-${fileHash.slice(0, 16)}`), damaged);
    const failed = await download(["big.bin", "-o", "damaged.bin"]);
    assert.equal(failed.code, 1);
    assert.match(failed.stderr, /does not hash to .*nor the partial file it resumed/);
    assert.deepEqual(await partials(), []);
    await assert.rejects(stat(join(work, "damaged.bin")));
    const again = await download(["big.bin", "-o", "damaged.bin"]);
    assert.equal(again.code, 0, again.stderr);
    assert.doesNotMatch(again.stderr, /Resumed/);
    assert.ok((await readFile(join(work, "damaged.bin"))).equals(data));
  });
});

describe("castor download, the server lost mid-download", () => {
  it("keeps the partial file when the server goes away, and the next run, against the server back, resumes it", async () => {
    // A server of its own on a data dir that outlives it: this one is killed, then started again.
    const dataDir = await mkdtemp(join(tmpdir(), "castor-download-lost-"));
    let lost: ServerProcess | null = await startCastorServer({ dataDir });
    try {
      const admin = (...args: string[]) => runCastor(args, { env: lost!.settings, timeoutMs: TIMEOUT_MS });
      assert.equal((await admin("repo", "create", "model", "alice/big")).code, 0);
      const lostToken = (await admin("token", "create", "--repo", REPO, "--access", "write")).stdout.trim();
      await new CastorClient({ endpoint: lost.url, hubToken: lostToken, repo: REPO }).uploadToRepo([join(work, "big.bin")]);
      const run = (endpoint: string) =>
        runCastor(["download", "--repo", REPO, "big.bin", "-o", "lost.bin"], {
          env: { CASTOR_ENDPOINT: endpoint, CASTOR_HUB_TOKEN: lostToken },
          cwd: work,
          timeoutMs: TIMEOUT_MS,
        });
      const partial = join(work, `lost.bin.castor-partial-${fileHash.slice(0, 16)}`);
      const watcher = setInterval(async () => {
        const size = (await stat(partial).catch(() => null))?.size ?? 0;
        // Checked after the await: an earlier tick may have killed it meanwhile.
        if (size >= 16 * MiB && lost !== null) {
          const dying = lost;
          lost = null;
          await dying.stop("SIGKILL");
        }
      }, 2);
      let failed: CliResult;
      try {
        failed = await run(lost.url);
      } finally {
        clearInterval(watcher);
      }
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr, /bytes received so far are kept in .*lost\.bin\.castor-partial-[0-9a-f]{16}: run the same download again to resume/);
      const kept = (await stat(partial)).size;
      assert.ok(kept >= 16 * MiB && kept < data.length, `${kept} bytes kept`);

      lost = await startCastorServer({ dataDir });
      const again = await run(lost.url);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stderr, /Resumed from the partial file an interrupted run left/);
      assert.ok((await readFile(join(work, "lost.bin"))).equals(data));
      assert.deepEqual(await partials(), []);
    } finally {
      await lost?.stop();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe("castor download, output and ranges", () => {
  it("refuses an existing OUT unless --force", async () => {
    await writeFile(join(work, "existing.bin"), "keep me");
    const refused = await download(["big.bin", "-o", "existing.bin", "--range", "0-9"]);
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /existing\.bin exists: pass --force to overwrite it/);
    assert.equal(await readFile(join(work, "existing.bin"), "utf8"), "keep me");
    const forced = await download(["big.bin", "-o", "existing.bin", "--range", "0-9", "--force"]);
    assert.equal(forced.code, 0, forced.stderr);
    assert.ok((await readFile(join(work, "existing.bin"))).equals(data.subarray(0, 10)));
  });

  it("says what was clamped when --range ends past the end of the file", async () => {
    const start = data.length - 100;
    const result = await download(["big.bin", "-o", "tail.bin", "--range", `${start}-${data.length + 999}`]);
    assert.equal(result.code, 0, result.stderr);
    assert.ok((await readFile(join(work, "tail.bin"))).equals(data.subarray(start)));
    assert.match(result.stderr, new RegExp(`The file has ${data.length} bytes: wrote bytes ${start}-${data.length - 1}, not ${start}-${data.length + 999}`));
  });
});
