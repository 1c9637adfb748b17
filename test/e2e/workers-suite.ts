/**
 * `castor serve --workers N` end to end (embedded: workers.test.ts; PostgreSQL + S3:
 * test/scaleout/workers.test.ts), with two workers on real `castor serve` processes:
 *
 * - connections spread over the workers, every log line names the process that wrote it,
 *   `/metrics` counts every worker's requests whichever worker a scrape reaches, and the work
 *   meant to run once runs once (the staging sweep in the primary, the daily sample in worker 1);
 * - a SIGKILLed worker is replaced under its number: the uploads it held fail, every request
 *   sent after the kill succeeds, the other worker's uploads complete;
 * - writes from both workers at once (xorbs, shard registrations, a large one among them, hub
 *   commits to one branch) are serialised: all succeed, no commit is lost, even while another
 *   process holds the database's write locks for longer than SQLite's busy timeout;
 * - SIGTERM to the primary drains both workers: uploads in progress finish, new connections are
 *   refused, every process exits, the primary with 0;
 * - a worker that cannot start stops castor with its error: at once at the first start (a taken
 *   port, printed once), after a few spaced-out tries for a replacement.
 */
import assert from "node:assert/strict";
import type { IncomingHttpHeaders } from "node:http";
import { request as httpRequest } from "node:http";
import { mkdir, readFile, utimes, writeFile } from "node:fs/promises";
import { createServer, type Socket } from "node:net";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { START_FAILURES_BEFORE_GIVING_UP } from "../../src/cluster/primary.js";
import { fileHash, hashToHex, verificationHash } from "../../src/format/hash.js";
import type { ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { BLOBS_DIR_NAME, S3_STAGING_DIR_NAME } from "../../src/storage/open.js";
import { pseudoRandomBytes } from "../interop/harness.js";
import { openSocket, serverProcessOf } from "../helpers/raw-socket.js";
import { hubFixture, serveExpectingFailure, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { makeTempDir, removeTempDir } from "../helpers/temp-dir.js";
import { until, within } from "../helpers/wait.js";

export interface WorkersBackend {
  /** Run the servers on PostgreSQL + S3 (each server a backend of its own). */
  scaleOut: boolean;
  /**
   * Takes the metadata store's write locks from a connection of the test's own, as another
   * process would (an admin command, a long registration on another node); resolves once they
   * are held, with the function that releases them.
   */
  holdWriteLocks(server: ServerProcess): Promise<() => Promise<void>>;
  /** How long the test holds them. */
  holdMs: number;
  /** Marks the metadata store as written by a newer castor: a process opening it from now on refuses it. */
  markSchemaNewer(server: ServerProcess): Promise<void>;
}

const WORKERS = 2;
const REPO_NAME = "alice/workers";
const READY_TIMEOUT_MS = 60_000;

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/**
 * One request on a connection of its own. The cluster deals connections (not requests) to the
 * workers in turn, so requests sent this way spread over them. Fails after `timeoutMs` without
 * an answer: a connection the primary was handing to a worker the moment it was killed is never
 * answered nor closed (node:cluster keeps its copy until the worker acknowledges it).
 */
function call(
  server: ServerProcess,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: Uint8Array | string; timeoutMs?: number } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const timeoutMs = options.timeoutMs ?? 60_000;
    const timer = setTimeout(() => request.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    const request = httpRequest(`${server.url}${path}`, { method, agent: false, headers: options.headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => {
        clearTimeout(timer);
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks).toString("utf8") });
      });
      response.on("error", reject);
    });
    request.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    request.end(options.body);
  });
}

function assertOk(answer: Answer, what: string): void {
  assert.equal(answer.status, 200, `${what}: ${answer.status} ${answer.body}`);
}

async function startWorkers(backend: WorkersBackend, env: Record<string, string>, dataDir?: string): Promise<ServerProcess> {
  return startCastorServer({ env: { CASTOR_WORKERS: String(WORKERS), ...env }, dataDir, scaleOut: backend.scaleOut, readyTimeoutMs: READY_TIMEOUT_MS });
}

/** The process of each worker number, as its latest "worker N listening" line says. */
function workerPids(server: ServerProcess): Map<number, number> {
  const pids = new Map<number, number>();
  for (const line of server.logLines()) {
    if (typeof line.msg === "string" && /^worker \d+ listening/.test(line.msg)) pids.set(Number(line.worker), Number(line.pid));
  }
  return pids;
}

/** The request lines logged from index `from` on, with the worker and process that answered. */
function answeredBy(server: ServerProcess, from = 0): { method: string; path: string; statusCode: number; worker: number; pid: number }[] {
  return server
    .logLines()
    .slice(from)
    .filter((line) => line.msg === "request")
    .map((line) => ({
      method: String(line.method),
      path: String(line.path),
      statusCode: Number(line.statusCode),
      worker: Number(line.worker),
      pid: Number(line.pid),
    }));
}

interface Fixture {
  hubToken: string;
  casToken: string;
}

async function repoFixture(server: ServerProcess): Promise<Fixture> {
  const castor = await hubFixture(server, { repoType: "model", repoName: REPO_NAME });
  return { hubToken: castor.hubTokens.write, casToken: (await castor.casToken("write")).accessToken };
}

/** A xorb of `chunks` chunks of fresh data. */
function freshXorb(label: string, chunks = 8): SerializedXorb {
  return serializeXorb(Array.from({ length: chunks }, (_, i) => ({ data: pseudoRandomBytes(`${label}-${i}`, 4096 + 61 * i) })));
}

/** The file made of chunks [start, end) of `xorb`, as a shard lists it. */
function fileOver(xorb: SerializedXorb, start: number, end: number): ShardFile {
  const chunks = xorb.info.chunks.slice(start, end);
  return {
    fileHash: fileHash(chunks.map((chunk) => ({ hash: chunk.hash, size: chunk.uncompressedLength }))),
    terms: [{ xorbHash: xorb.info.hash, chunkStart: start, chunkEnd: end, unpackedBytes: chunks.reduce((sum, chunk) => sum + chunk.uncompressedLength, 0) }],
    verificationHashes: [verificationHash(chunks.map((chunk) => chunk.hash))],
    sha256: null,
  };
}

function uploadXorb(server: ServerProcess, fixture: Fixture, xorb: SerializedXorb): Promise<Answer> {
  return call(server, "POST", `/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { headers: { authorization: `Bearer ${fixture.casToken}` }, body: xorb.bytes });
}

function registerShard(server: ServerProcess, fixture: Fixture, files: ShardFile[]): Promise<Answer> {
  return call(server, "POST", "/v1/shards", {
    headers: { authorization: `Bearer ${fixture.casToken}` },
    body: serializeUploadShard({ files, xorbs: [] }, { kind: "xet-core" }),
  });
}

/** A xorb uploaded, then a shard registering one file over all of it. */
async function uploadFile(server: ServerProcess, fixture: Fixture, label: string): Promise<void> {
  const xorb = freshXorb(label);
  assertOk(await uploadXorb(server, fixture, xorb), `xorb ${label}`);
  assertOk(await registerShard(server, fixture, [fileOver(xorb, 0, xorb.info.chunks.length)]), `shard ${label}`);
}

/** A commit of one inline file to main (no parent given: the hub retries when the branch moved meanwhile). */
function commitFile(server: ServerProcess, fixture: Fixture, path: string): Promise<Answer> {
  const lines = [
    { key: "header", value: { summary: `add ${path}`, description: "" } },
    { key: "file", value: { path, encoding: "base64", content: Buffer.from(`${path}\n`).toString("base64") } },
  ];
  return call(server, "POST", `/api/models/${REPO_NAME}/commit/main`, {
    headers: { authorization: `Bearer ${fixture.hubToken}`, "content-type": "application/x-ndjson" },
    body: `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`,
  });
}

async function filesOnMain(server: ServerProcess, fixture: Fixture): Promise<string[]> {
  const answer = await call(server, "GET", `/api/models/${REPO_NAME}/tree/main`, { headers: { authorization: `Bearer ${fixture.hubToken}` } });
  assertOk(answer, "tree of main");
  return (JSON.parse(answer.body) as { path: string }[]).map((entry) => entry.path).sort();
}

interface HeldUpload {
  socket: Socket;
  /** The worker process serving it. */
  pid: number;
  /** The answer once the body is complete; null when the connection closed without one. */
  answer: Promise<string | null>;
  /** Sends the rest of the body. */
  finish(): void;
}

/** A xorb upload whose head and first bytes are sent, the rest held back; resolved once a worker has the connection. */
async function holdUpload(server: ServerProcess, fixture: Fixture, label: string, pids: readonly number[]): Promise<HeldUpload> {
  const xorb = freshXorb(label);
  const port = Number(new URL(server.url).port);
  const socket = await openSocket(port);
  socket.on("error", () => undefined);
  let text = "";
  const answer = new Promise<string | null>((resolve) => {
    socket.on("data", (chunk: Buffer) => {
      text += chunk.toString("latin1");
      if (/\r\n\r\n[\s\S]*\}/.test(text)) resolve(text);
    });
    socket.once("close", () => resolve(text === "" ? null : text));
  });
  socket.write(
    `POST /v1/xorbs/default/${hashToHex(xorb.info.hash)} HTTP/1.1\r\nHost: castor\r\nAuthorization: Bearer ${fixture.casToken}\r\nContent-Length: ${xorb.bytes.length}\r\n\r\n`,
  );
  socket.write(xorb.bytes.subarray(0, 1000));
  let pid: number | undefined;
  await until(async () => (pid = await serverProcessOf(port, socket.localPort!, pids)) !== undefined, `a worker took the upload ${label}`);
  return { socket, pid: pid!, answer, finish: () => socket.write(xorb.bytes.subarray(1000)) };
}

/** Whether process `pid` exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function runWorkersSuite(backend: WorkersBackend): void {
  const started: ServerProcess[] = [];
  const start = async (env: Record<string, string> = {}, dataDir?: string) => {
    const server = await startWorkers(backend, env, dataDir);
    started.push(server);
    return server;
  };
  after(async () => {
    await Promise.all(started.map((server) => server.stop("SIGKILL")));
  });

  describe(`castor serve --workers ${WORKERS}`, { timeout: 180_000 }, () => {
    it("spreads connections over the workers, names the worker on every log line, counts every worker's requests in /metrics, and does the one-time work once", async (t) => {
      // A staging file an interrupted upload left: swept once, by the primary, before the workers start.
      const dataDir = await makeTempDir("castor-workers-");
      t.after(() => removeTempDir(dataDir));
      const staging = backend.scaleOut ? join(dataDir, S3_STAGING_DIR_NAME) : join(dataDir, BLOBS_DIR_NAME, "tmp");
      await mkdir(staging, { recursive: true });
      // `.part`: the S3 store sweeps only names it makes itself.
      await writeFile(join(staging, "leftover.part"), "half an upload");
      // Old enough for any sweep (with S3 only abandoned files are removed: other nodes may be uploading).
      const longAgo = new Date(Date.now() - 2 * 60 * 60 * 1000);
      await utimes(join(staging, "leftover.part"), longAgo, longAgo);
      const server = await start({}, dataDir);
      const sweeps = server.logLines().filter((line) => typeof line.msg === "string" && line.msg.includes("staging leftover"));
      assert.deepEqual(
        sweeps.map((line) => [line.worker, line.swept]),
        [[0, 1]],
      );
      const from = server.logLines().length;
      const requests = 20;
      for (let i = 0; i < requests; i++) assertOk(await call(server, "GET", "/healthz"), "health check");
      await until(() => answeredBy(server, from).length === requests, "the request lines");
      const perWorker = new Map<number, number>();
      for (const request of answeredBy(server, from)) perWorker.set(request.worker, (perWorker.get(request.worker) ?? 0) + 1);
      assert.deepEqual([...perWorker.keys()].sort(), [1, 2], `requests answered by: ${JSON.stringify([...perWorker])}`);
      for (const [worker, count] of perWorker) assert.ok(count >= requests / 4, `worker ${worker} answered only ${count} of ${requests}`);

      for (const line of server.logLines()) {
        assert.ok([0, 1, 2].includes(line.worker as number), `a log line without its worker: ${JSON.stringify(line)}`);
      }
      const listening = server.logLines().filter((line) => typeof line.listenUrl === "string" && typeof line.publicUrl === "string");
      assert.equal(listening.length, 1, "one 'castor listening' line, the primary's");
      assert.equal(listening[0].worker, 0);
      assert.equal(listening[0].workers, WORKERS);

      // Whichever worker the scrape reaches, it counts the requests both answered.
      for (let scrape = 0; scrape < 2; scrape++) {
        const metrics = await call(server, "GET", "/metrics");
        assertOk(metrics, "metrics");
        const healthz = /^castor_http_requests_total\{method="GET",route="\/healthz",status="200"\} (\d+)$/m.exec(metrics.body);
        assert.equal(Number(healthz?.[1]), requests, "the health checks of both workers, summed");
        assert.match(metrics.body, /^castor_workers 2$/m);
        assert.match(metrics.body, /^castor_worker_restarts_total 0$/m);
      }
      // The daily storage sample: taken by worker 1 alone.
      await server.waitForLog((line) => line.msg === "storage statistics sample");
      const samplers = new Set(
        server
          .logLines()
          .filter((line) => line.msg === "storage statistics sample")
          .map((line) => line.worker),
      );
      assert.deepEqual([...samplers], [1]);
      await server.stop();
    });

    it("replaces a SIGKILLed worker under its number: only what it held fails, every request sent once the primary knows succeeds", async () => {
      const server = await start();
      const fixture = await repoFixture(server);
      const pids = workerPids(server);
      assert.equal(pids.size, WORKERS);
      const uploads: HeldUpload[] = [];
      for (let i = 0; i < 4; i++) uploads.push(await holdUpload(server, fixture, `held ${i}`, [...pids.values()]));
      const victimPid = uploads[0].pid;
      const victim = [...pids].find(([, pid]) => pid === victimPid)![0];
      assert.ok(
        uploads.some((upload) => upload.pid !== victimPid),
        "the cluster dealt the uploads to both workers",
      );

      // Two clients keep sending requests, each on a new connection, across the kill and the replacement.
      let loading = true;
      const sent: { at: number; error: string | null }[] = [];
      const load = async () => {
        while (loading) {
          const at = Date.now();
          const outcome = await call(server, "GET", "/readyz", { timeoutMs: 5000 }).then(
            (answer) => (answer.status === 200 ? null : `status ${answer.status}`),
            (error: Error) => error.message,
          );
          sent.push({ at, error: outcome });
        }
      };
      const clients = [load(), load()];
      await until(() => sent.length >= 20, "requests before the kill");
      const from = server.logLines().length;
      const killedAt = Date.now();
      process.kill(victimPid, "SIGKILL");
      // The primary's line, written once the worker is out of the rotation.
      const died = await server.waitForLog((line) => line.diedWorker === victim, 10_000);
      const noticedAt = Number(died.time);
      assert.equal(died.signal, "SIGKILL");
      const replaced = await server.waitForLog((line) => line.msg === `worker ${victim} replaced and serving (pid ${line.workerPid})`, 30_000);
      const replacementPid = Number(replaced.workerPid);
      assert.notEqual(replacementPid, victimPid);
      // The replacement answers requests too.
      await until(() => answeredBy(server, from).some((request) => request.pid === replacementPid), "a request answered by the replacement", 10_000);
      loading = false;
      await Promise.all(clients);

      const afterwards = sent.filter((request) => request.at > noticedAt);
      assert.ok(afterwards.length >= 10, `only ${afterwards.length} requests were sent after the primary noticed the death`);
      assert.deepEqual(
        afterwards.filter((request) => request.error !== null).map((request) => request.error),
        [],
        "every request sent after the primary noticed the death succeeded",
      );
      // Requests in flight to the killed worker may fail: at most one per client, each sent
      // before the primary knew of the death (those it was handing over then included).
      const failed = sent.filter((request) => request.error !== null);
      assert.ok(
        failed.length <= clients.length,
        `${failed.length} requests failed (the primary noticed the death ${noticedAt - killedAt} ms after the kill): ${JSON.stringify(failed.map((request) => ({ ...request, afterKillMs: request.at - killedAt })))}`,
      );

      for (const upload of uploads) upload.finish();
      for (const upload of uploads) {
        const answer = await within(upload.answer, "a held upload's end", 10_000);
        if (upload.pid === victimPid) assert.equal(answer, null, "an upload the killed worker held fails (its connection closed)");
        else assert.match(answer ?? "closed", /^HTTP\/1\.1 200 /, "an upload the other worker held completes");
      }
      const metrics = await call(server, "GET", "/metrics");
      assert.match(metrics.body, /^castor_worker_restarts_total 1$/m);
      await server.stop();
    });

    it("serialises writes from both workers at once: no SQLITE_BUSY or other failure reaches a client, no commit is lost", async () => {
      const server = await start();
      const fixture = await repoFixture(server);
      const from = server.logLines().length;

      // 1. Another process holds the write locks (longer than SQLite's busy timeout when embedded):
      // writes sent meanwhile through both workers wait for them, then all succeed.
      const release = await backend.holdWriteLocks(server);
      let released = false;
      const writes = [
        ...Array.from({ length: 4 }, (_, i) => uploadFile(server, fixture, `while locked ${i}`)),
        ...Array.from({ length: 4 }, (_, i) =>
          commitFile(server, fixture, `locked-${i}.txt`).then((answer) => {
            assertOk(answer, `commit ${i}`);
            assert.ok(released, "the commit waited for the lock");
          }),
        ),
      ];
      await new Promise((resolve) => setTimeout(resolve, backend.holdMs));
      released = true;
      await release();
      await Promise.all(writes);

      // 2. A burst: a large registration (more rows than one synchronous step writes), small
      // ones and commits, all at once.
      const big = freshXorb("big", 64);
      assertOk(await uploadXorb(server, fixture, big), "the big registration's xorb");
      const bigFiles: ShardFile[] = [];
      for (let start = 0; start < 64; start++) for (let end = start + 1; end <= 64; end++) bigFiles.push(fileOver(big, start, end));
      await Promise.all([
        registerShard(server, fixture, bigFiles).then((answer) => assertOk(answer, "the big registration")),
        ...Array.from({ length: 8 }, (_, i) => uploadFile(server, fixture, `burst ${i}`)),
        ...Array.from({ length: 4 }, (_, i) => commitFile(server, fixture, `burst-${i}.txt`).then((answer) => assertOk(answer, `burst commit ${i}`))),
      ]);

      assert.deepEqual(
        await filesOnMain(server, fixture),
        [...Array.from({ length: 4 }, (_, i) => `burst-${i}.txt`), ...Array.from({ length: 4 }, (_, i) => `locked-${i}.txt`)].sort(),
      );
      const writers = new Set(
        answeredBy(server, from)
          .filter((request) => request.method === "POST")
          .map((request) => request.worker),
      );
      assert.deepEqual([...writers].sort(), [1, 2], "both workers wrote");
      assert.ok(!/SQLITE_BUSY|database is locked/i.test(server.output()), "no SQLITE_BUSY anywhere in the log");
      assert.deepEqual(
        answeredBy(server, from).filter((request) => request.statusCode >= 500),
        [],
      );
      await server.stop();
    });

    it("drains every worker on SIGTERM: uploads in progress finish, new connections are refused, every process exits, the primary with 0", async () => {
      const server = await start();
      const fixture = await repoFixture(server);
      const pids = [...workerPids(server).values()];
      const uploads: HeldUpload[] = [];
      for (let i = 0; i < 4; i++) uploads.push(await holdUpload(server, fixture, `draining ${i}`, pids));
      assert.equal(new Set(uploads.map((upload) => upload.pid)).size, WORKERS, "both workers hold uploads");

      server.child.kill("SIGTERM");
      const port = Number(new URL(server.url).port);
      await until(
        () =>
          openSocket(port).then(
            (socket) => {
              socket.destroy();
              return false;
            },
            () => true,
          ),
        "new connections refused",
        10_000,
        20,
      );
      for (const upload of uploads) upload.finish();
      for (const upload of uploads) {
        const answer = await within(upload.answer, "a draining upload's answer", 10_000);
        assert.match(answer ?? "closed", /^HTTP\/1\.1 200 /);
        assert.match(answer ?? "", /\r\nconnection: close\r\n/i);
      }
      const status = await within(server.exited, "the primary's exit", 20_000);
      assert.deepEqual(status, { code: 0, signal: null });
      for (const pid of pids) assert.equal(alive(pid), false, `worker process ${pid} is gone`);
      const stopped = server.logLines().filter((line) => line.msg === "castor stopped");
      assert.deepEqual(stopped.map((line) => line.worker).sort(), [1, 2]);
      assert.ok(server.logLines().some((line) => line.worker === 0 && line.msg === "castor stopped: every worker has stopped"));
      await server.stop();
    });

    it("with --workers 1 runs one process, as castor always did: no primary, no worker field", async () => {
      const server = await startCastorServer({ args: ["--workers", "1"], scaleOut: backend.scaleOut });
      started.push(server);
      assertOk(await call(server, "GET", "/healthz"), "health check");
      await until(() => answeredBy(server).length === 1, "the request line");
      const children = await readFile(`/proc/${server.child.pid}/task/${server.child.pid}/children`, "utf8");
      assert.equal(children.trim(), "", "no worker processes");
      for (const line of server.logLines()) assert.equal(line.worker, undefined, JSON.stringify(line));
      assert.equal(answeredBy(server)[0].pid, server.child.pid);
      await server.stop();
    });

    it("stops with the error when the workers cannot start: at once at the first start, printed once", async () => {
      const taken = createServer();
      await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
      const port = (taken.address() as { port: number }).port;
      try {
        const { status, output } = await serveExpectingFailure({
          env: { CASTOR_WORKERS: String(WORKERS), CASTOR_LISTEN: `127.0.0.1:${port}` },
          scaleOut: backend.scaleOut,
          readyTimeoutMs: READY_TIMEOUT_MS,
        });
        assert.equal(status.code, 1, output);
        assert.equal(output.match(/^castor serve: .*is already in use/gm)?.length, 1, `the error printed once:\n${output}`);
        assert.match(output, /castor serve: 127\.0\.0\.1:\d+ is already in use: stop the other server or set CASTOR_LISTEN/);
      } finally {
        taken.close();
      }
    });

    it("replaces a dead worker with pauses that double while replacements cannot start, then stops with their error", async () => {
      const server = await start();
      const pids = workerPids(server);
      await backend.markSchemaNewer(server);
      process.kill(pids.get(2)!, "SIGKILL");
      const status = await within(server.exited, "the primary giving up", 60_000);
      assert.deepEqual(status, { code: 1, signal: null });
      const attempts = server.logLines().filter((line) => line.diedWorker === 2);
      assert.equal(attempts.length, START_FAILURES_BEFORE_GIVING_UP, JSON.stringify(attempts));
      const pauses = attempts.map((line) => Number(line.restartInMs));
      for (let i = 1; i < pauses.length; i++) assert.equal(pauses[i], pauses[i - 1] * 2, `pauses double: ${pauses}`);
      assert.match(
        server.output(),
        new RegExp(`castor serve: worker 2 could not start ${START_FAILURES_BEFORE_GIVING_UP} times in a row, the last time: .*schema version`),
      );
      // Worker 1 went on serving until then, and was drained.
      assert.ok(server.logLines().some((line) => line.worker === 1 && line.msg === "castor stopped"));
      assert.equal(alive(pids.get(1)!), false);
      await server.stop();
    });
  });
}
