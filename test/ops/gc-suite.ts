/**
 * `castor gc` against a real `castor serve` (embedded: gc.test.ts; PostgreSQL + S3:
 * test/scaleout/gc.test.ts): files uploaded through Xet
 * with castor's own client, inline files committed over HTTP, then released the ways users
 * release them — a deleted file once its branch is squashed (`super-squash`), a deleted
 * repository — and collected. What no ref reaches goes (file records, xorbs, blobs, commits),
 * what a live file shares stays, young garbage waits for its grace window, an upload landing
 * between mark and sweep loses nothing, and a collector killed mid-sweep is finished by the next
 * run. `castor fsck` is clean after every step, and `castor fsck --repair` recovers from a lost
 * xorb blob once the file is uploaded again.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { blobKey } from "../../src/storage/blob-store.js";
import { collectGarbage, type GcReport } from "../../src/ops/gc.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import type { MetadataStore } from "../../src/metadata/store.js";
import type { BlobStore } from "../../src/storage/blob-store.js";
import { openBlobStore } from "../../src/storage/open.js";
import { loadConfig } from "../../src/config.js";
import { CASTOR_COMMAND, runCastor, type CliResult } from "../helpers/cli.js";
import { countBlobs, storeGarbageXorbs } from "../helpers/stores.js";
import { startCastorServer, type ServerProcess, type StartServerOptions } from "../helpers/server.js";

const MiB = 1024 * 1024;
const TIMEOUT_MS = 90_000;

let server: ServerProcess;
let work: string;
let token = "";
const data = { unique: randomBytes(3 * MiB), shared: randomBytes(2 * MiB), young: randomBytes(MiB), raced: randomBytes(MiB), damaged: randomBytes(MiB) };
const INLINE_TEXT = "an inline file\n";

function assertOk(result: CliResult): CliResult {
  assert.equal(result.code, 0, `exit ${result.code}; stderr: ${result.stderr}`);
  return result;
}

async function admin(...args: string[]): Promise<string> {
  return assertOk(await runCastor(args, { env: server.settings, timeoutMs: TIMEOUT_MS })).stdout;
}

/** `castor gc --json` on the server's stores while it runs. */
async function gc(...args: string[]): Promise<GcReport> {
  return JSON.parse(await admin("gc", "--json", ...args)) as GcReport;
}

async function fsckIsClean(): Promise<void> {
  const result = await runCastor(["fsck"], { env: server.settings, timeoutMs: TIMEOUT_MS });
  assert.equal(result.code, 0, `fsck: ${result.stdout}${result.stderr}`);
}

/** Uploads `bytes` as `path` of `repo` with castor's own client (Xet + one commit). */
async function upload(repo: string, path: string, bytes: Buffer): Promise<void> {
  const local = join(work, "in", path);
  await writeFile(local, bytes);
  assertOk(
    await runCastor(["upload", "--repo", `model:alice/${repo}`, local, "-m", `add ${path}`], {
      env: { CASTOR_ENDPOINT: server.url, CASTOR_HUB_TOKEN: token },
      timeoutMs: TIMEOUT_MS,
    }),
  );
}

async function hub(method: string, path: string, body?: string, contentType = "application/json"): Promise<Response> {
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": contentType }) },
    body,
  });
  return response;
}

async function hubOk(method: string, path: string, body?: string, contentType?: string): Promise<unknown> {
  const response = await hub(method, path, body, contentType);
  assert.equal(response.status, 200, `${method} ${path}: ${response.status} ${await response.clone().text()}`);
  return response.json();
}

/** One NDJSON commit to main of alice/`repo`. */
function commit(repo: string, summary: string, ...operations: object[]): Promise<unknown> {
  const lines = [{ key: "header", value: { summary } }, ...operations].map((line) => JSON.stringify(line)).join("\n");
  return hubOk("POST", `/api/models/alice/${repo}/commit/main`, `${lines}\n`, "application/x-ndjson");
}

function squash(repo: string): Promise<unknown> {
  return hubOk("POST", `/api/models/alice/${repo}/super-squash/main`, JSON.stringify({ message: "squash" }));
}

async function download(repo: string, path: string): Promise<Buffer> {
  const response = await hub("GET", `/alice/${repo}/resolve/main/${path}`);
  assert.equal(response.status, 200, `download ${repo}/${path}: ${response.status}`);
  return Buffer.from(await response.arrayBuffer());
}

/** The server's stores, opened in this process beside it (as `castor gc` opens them). */
async function withStores<T>(work: (store: MetadataStore, blobs: BlobStore) => Promise<T>): Promise<T> {
  const config = loadConfig(server.settings);
  const store = await openMetadataStore(config);
  const blobs: BlobStore = await openBlobStore(config);
  try {
    return await work(store, blobs);
  } finally {
    blobs.close?.();
    await store.close();
  }
}

const xorbBlobs = () => withStores((_store, blobs) => countBlobs(blobs, "xorbs/"));
const inlineBlobs = () => withStores((_store, blobs) => countBlobs(blobs, "inline/"));

export function runGcSuite(name: string, serverOptions: StartServerOptions): void {
  before(async () => {
    server = await startCastorServer(serverOptions);
    work = await mkdtemp(join(tmpdir(), "castor-gc-test-"));
    await mkdir(join(work, "in"));
    token = (await admin("token", "create", "--user", "alice", "--namespace", "alice", "--access", "write")).trim();
    await hubOk("POST", "/api/repos/create", JSON.stringify({ name: "alice/a", type: "model" }));
    await hubOk("POST", "/api/repos/create", JSON.stringify({ name: "alice/b", type: "model" }));
    await upload("a", "unique.bin", data.unique);
    await upload("a", "shared.bin", data.shared);
    await upload("b", "shared.bin", data.shared);
    await commit("a", "add an inline file", {
      key: "file",
      value: { path: "inline.txt", content: Buffer.from(INLINE_TEXT).toString("base64"), encoding: "base64" },
    });
  });

  after(async () => {
    await server?.stop();
    if (work !== undefined) await rm(work, { recursive: true, force: true });
  });

  describe(`castor gc (${name})`, { timeout: 10 * 60_000 }, () => {
    it("removes nothing while every file is reachable", async () => {
      const before = await xorbBlobs();
      const report = await gc("--grace", "0");
      assert.equal(report.removed.files.objects, 0);
      assert.equal(report.removed.xorbs.objects, 0);
      assert.equal(report.removed.inlineBlobs.objects, 0);
      assert.equal(report.removed.commits, 0);
      assert.equal(report.reachable.repositories, 2);
      assert.equal(await xorbBlobs(), before);
      await fsckIsClean();
    });

    it("keeps a deleted file its history still reaches, and removes it once the branch is squashed", async () => {
      await commit("a", "remove unique.bin", { key: "deletedFile", value: { path: "unique.bin" } });
      assert.equal((await gc("--grace", "0")).removed.xorbs.objects, 0, "the older commits still reach unique.bin");

      const oldHead = ((await hubOk("GET", "/api/models/alice/a/revision/main")) as { sha: string }).sha;
      await squash("a");
      const xorbsBefore = await xorbBlobs();
      const dry = await gc("--grace", "0", "--dry-run");
      assert.equal(await xorbBlobs(), xorbsBefore, "a dry run removes nothing");
      const report = await gc("--grace", "0");
      assert.equal(report.removed.files.objects, 1, JSON.stringify(report.removed));
      assert.equal(report.removed.files.bytes, data.unique.length);
      assert.ok(report.removed.xorbs.objects >= 1);
      assert.ok(report.removed.xorbs.bytes >= data.unique.length, `${report.removed.xorbs.bytes} bytes of random data removed`);
      assert.ok(report.removed.commits >= 4, `the old history: ${report.removed.commits} commits`);
      assert.deepEqual(dry.removed, report.removed, "the dry run predicted exactly what the run removed");
      const { phasesMs } = report;
      assert.deepEqual(Object.keys(phasesMs).sort(), ["blobDeletes", "files", "finish", "history", "inline", "leases", "mark", "orphans", "xorbs"]);
      assert.ok(
        Object.values(phasesMs).every((ms) => ms >= 0),
        JSON.stringify(phasesMs),
      );
      assert.ok(phasesMs.blobDeletes > 0 && phasesMs.blobDeletes <= phasesMs.xorbs + phasesMs.orphans + phasesMs.inline, JSON.stringify(phasesMs));
      assert.equal(await xorbBlobs(), xorbsBefore - report.removed.xorbs.objects);

      assert.deepEqual(await download("a", "shared.bin"), data.shared, "a file sharing nothing with the removed one stays whole");
      assert.deepEqual(await download("b", "shared.bin"), data.shared);
      assert.equal((await download("a", "inline.txt")).toString(), INLINE_TEXT);
      assert.equal((await hub("GET", `/api/models/alice/a/revision/${oldHead}`)).status, 404, "the squashed commits are gone");
      await fsckIsClean();
    });

    it("keeps garbage younger than the grace window", async () => {
      await upload("a", "young.bin", data.young);
      await commit("a", "remove young.bin", { key: "deletedFile", value: { path: "young.bin" } });
      await squash("a");
      const kept = await gc("--grace", "1h");
      assert.equal(kept.removed.files.objects, 0);
      assert.equal(kept.removed.xorbs.objects, 0);
      const removed = await gc("--grace", "0");
      assert.equal(removed.removed.files.objects, 1);
      assert.ok(removed.removed.xorbs.objects >= 1);
      await fsckIsClean();
    });

    it("loses nothing of an upload that lands between the mark and the sweep", async () => {
      await upload("a", "raced.bin", data.raced);
      await commit("a", "remove raced.bin", { key: "deletedFile", value: { path: "raced.bin" } });
      await squash("a");
      // In this process, beside the server: the mark sees raced.bin unreachable; then a client
      // uploads the same bytes again (its xorbs and its file record are the old ones) and commits.
      const report = await withStores((store, blobs) =>
        collectGarbage(store, blobs, { graceMs: 0, afterMark: () => upload("a", "raced-again.bin", data.raced) }),
      );
      assert.equal(report.removed.files.objects, 0, "the file record was leased by the registration");
      assert.equal(report.removed.xorbs.objects, 0, "its xorbs were leased by the upload");
      assert.deepEqual(await download("a", "raced-again.bin"), data.raced);
      await fsckIsClean();
    });

    it("releases everything of deleted repositories, and what a live repository shares only once it goes too", async () => {
      await hubOk("DELETE", "/api/repos/delete", JSON.stringify({ name: "alice/b", type: "model" }));
      const first = await gc("--grace", "0");
      assert.equal(first.removed.xorbs.objects, 0, "alice/a still has shared.bin");
      assert.deepEqual(await download("a", "shared.bin"), data.shared);

      // Left now: the inline file and the versions of alice/a's .gitattributes (one per upload of a Xet file).
      const inlineLeft = await inlineBlobs();
      assert.ok(inlineLeft >= 2, `the inline file and .gitattributes are stored (${inlineLeft} inline blobs)`);
      await hubOk("DELETE", "/api/repos/delete", JSON.stringify({ name: "alice/a", type: "model" }));
      const last = await gc("--grace", "0");
      assert.ok(last.removed.xorbs.objects >= 1);
      assert.ok(last.removed.files.objects >= 2);
      assert.equal(last.removed.inlineBlobs.objects, inlineLeft, "every inline blob of alice/a goes");
      assert.ok(last.removed.inlineBlobs.bytes > INLINE_TEXT.length);
      assert.equal(await xorbBlobs(), 0, "no xorb blob is left");
      assert.equal(await inlineBlobs(), 0, "no inline blob is left");
      await fsckIsClean();
    });

    it("finishes the work of a collector killed in the middle of its sweep", async () => {
      // Garbage made fast: 200 recorded xorbs no file uses, each with a blob.
      await withStores((store, blobs) => storeGarbageXorbs(store, blobs, 200, `garbage ${Date.now()}`));
      assert.equal(await xorbBlobs(), 200);

      const killed = await runUntilKilled(["gc", "--grace", "0", "--batch", "1"], /xorbs: 3 removed so far/);
      assert.equal(killed.signal, "SIGKILL", `the collector was killed mid-sweep; it wrote:\n${killed.stderr}`);
      const left = await xorbBlobs();
      assert.ok(left > 0 && left < 200, `${left} blobs left after the kill`);

      const report = await gc("--grace", "0");
      // A mark whose blob was deleted before the kill is finished too, so the two may exceed `left`.
      assert.ok(report.removed.xorbs.objects + report.finishedFromEarlierRun >= left, JSON.stringify(report));
      assert.equal(await xorbBlobs(), 0);
      await fsckIsClean();
    });

    it("castor fsck --repair removes a xorb whose blob is lost and keeps the file a ref names, which an upload makes whole", async () => {
      await hubOk("POST", "/api/repos/create", JSON.stringify({ name: "alice/c", type: "model" }));
      await upload("c", "damaged.bin", data.damaged);
      // Every xorb blob left is the file's (the collections above removed the rest); they vanish.
      const lost = await withStores(async (store, blobs) => {
        const { rows } = await store.scanXorbs(null, 100);
        for (const xorb of rows) await blobs.delete(blobKey("xorbs", xorb.hash));
        return rows.length;
      });
      assert.ok(lost >= 1);

      const fsck = (...args: string[]) => runCastor(["fsck", ...args], { env: server.settings, timeoutMs: TIMEOUT_MS });
      const found = await fsck();
      assert.equal(found.code, 1, found.stdout + found.stderr);
      assert.match(found.stdout, /^xorb_missing /m);
      const repaired = await fsck("--repair");
      assert.equal(repaired.code, 1, "the file a ref names is kept, still damaged");
      assert.match(repaired.stdout, /^ {2}file [0-9a-f]{64} \(1048576 bytes\): damaged\.bin in model:alice\/c$/m);
      assert.match(repaired.stdout, new RegExp(`^Repaired ${lost} of ${lost + 1} problems; 1 left\\.$`, "m"));
      assert.equal(await xorbBlobs(), 0);

      // The same content uploaded again stores its xorbs anew: the kept record is whole again.
      await upload("c", "again.bin", data.damaged);
      assert.deepEqual(await download("c", "damaged.bin"), data.damaged);
      await fsckIsClean();
    });
  });
}

/** Runs `castor ARGS` and SIGKILLs it as soon as its stderr matches `when`. */
function runUntilKilled(args: string[], when: RegExp): Promise<{ signal: NodeJS.Signals | null; stderr: string }> {
  const child = spawn(CASTOR_COMMAND, args, {
    env: { ...Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("CASTOR_"))), ...server.settings },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString("utf8");
    if (when.test(stderr)) child.kill("SIGKILL");
  });
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (_code, signal) => resolve({ signal, stderr }));
  });
}
