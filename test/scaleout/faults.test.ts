/**
 * Fault drills on the scale-out backends (issue 14): a real `castor serve` on PostgreSQL and
 * Ceph RGW keeps serving while one of them is restarted under load. Several clients (castor's
 * own, with a retry budget like hf_xet's) upload files — xorbs, global dedup queries, shard
 * registrations, hub commits — and download them again, and one more downloads a large file
 * over and over, while `scripts/services.sh restart` takes PostgreSQL, then radosgw, down for a
 * few seconds and back.
 *
 * During the outage castor must answer what a client can retry — 503 with Retry-After and a
 * sentence naming the store that is down — never a 500 (castor's "bug" answer) and never crash;
 * the probes sent while the port is known to refuse connections check exactly that. A transfer
 * under way when radosgw stops is resumed from the store once it is back, or ends short — never
 * with wrong bytes. Afterwards every upload
 * got through (the clients' own retries; a commit, which castor's client does not resend on a
 * 5xx since it may have been applied, is resent by the drill once it saw that it was not, as a
 * user would), every file downloads byte-exact, the same requests that got 503 answer again
 * from the same process (its PostgreSQL pool and S3 client recovered on their own), every 5xx
 * the server logged was such a 503, nothing was logged as a bug, and `castor fsck` finds no
 * damage (no xorb recorded without its blob, no file without its xorbs).
 *
 * Needs the services, and root to restart them: `eval "$(scripts/services.sh start)"`, then
 * `npm test -- test/scaleout`. Its outages would fail the requests of any other test using the
 * services meanwhile, so scripts/run-tests.mjs runs this file alone, after the others.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { CastorClient, commitOperationsFor, HttpStatusError, isClientError } from "../../src/client/index.js";
import { hashToHex } from "../../src/format/hash.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb } from "../../src/format/xorb.js";
import { assertSameBytes, concatBytes, pseudoRandomBytes, readBytes, writeTemp, type CastorFixture } from "../interop/harness.js";
import { runCastor } from "../helpers/cli.js";
import { fileOfChunks, type Answer } from "../helpers/reconstruction-answer.js";
import { hubFixture, scaleOutUnavailable, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { until } from "../helpers/wait.js";

// Fails the whole file, with the way to start the services, when they are not configured.
const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the fault drills need PostgreSQL and S3: ${unavailable}`);

const run = promisify(execFile);
const SERVICES_SCRIPT = fileURLToPath(new URL("../../scripts/services.sh", import.meta.url));
const REPO_TYPE = "model";
const REPO_NAME = "drills/faults";
const REPO = `${REPO_TYPE}:${REPO_NAME}`;
const KIB = 1024;

/** Clients uploading and downloading at once. */
const WORKERS = 4;
/** Files each client uploads at the least; it goes on until the restart is over. */
const MIN_FILES_PER_WORKER = 3;
/** A bound on a client's files, in case a restart never ends. */
const MAX_FILES_PER_WORKER = 200;
/** How long the service stays down: long enough for the probes to see the outage for sure. */
const DOWN_SECONDS = 3;
/**
 * Like hf_xet, which retries 5xx answers and connection failures with exponential backoff, the
 * clients keep at it for up to half a minute; castor's default (5 attempts) gives up sooner.
 */
const CLIENT_RETRY = { maxAttempts: 12, baseDelayMs: 200, maxDelayMs: 4000 };
const DRILL_TIMEOUT_MS = 120_000;
/** The file one client downloads over and over during a drill: large enough that a download is likely under way when a store stops. */
const BIG_FILE = { path: "big.bin", bytes: pseudoRandomBytes("faults-big", 24 * 1024 * KIB) };

type Service = "postgres" | "ceph-rgw";

let server: ServerProcess;
let castor: CastorFixture;
let work: string;

before(async () => {
  server = await startCastorServer({ scaleOut: true });
  castor = await hubFixture(server, { repoType: REPO_TYPE, repoName: REPO_NAME });
  work = await mkdtemp(join(tmpdir(), "castor-faults-"));
  await client("write").uploadToRepo([await writeTemp(work, "big.bin", BIG_FILE.bytes)], { pathInRepo: BIG_FILE.path });
});

after(async () => {
  await server?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

function client(access: "read" | "write"): CastorClient {
  return new CastorClient({ endpoint: server.url, hubToken: castor.hubTokens[access], repo: REPO, retry: CLIENT_RETRY });
}

/** Where the service listens, from the settings `scripts/services.sh start` printed. */
function serviceAddress(service: Service): { host: string; port: number } {
  const url = new URL(service === "postgres" ? process.env.CASTOR_TEST_DATABASE_URL! : process.env.CASTOR_TEST_S3_ENDPOINT!);
  return { host: url.hostname, port: Number(url.port || (service === "postgres" ? 5432 : 80)) };
}

/** Whether a TCP connection to the service is refused, i.e. its daemon is down. */
function refusesConnections(service: Service): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(serviceAddress(service));
    socket.once("connect", () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code === "ECONNREFUSED"));
  });
}

/** Restarts the daemon, down for DOWN_SECONDS; resolves once it answers again. */
async function restart(service: Service): Promise<void> {
  await run("bash", [SERVICES_SCRIPT, "restart", service, "--down", String(DOWN_SECONDS)], { timeout: 90_000 });
}

/** A file of the drill: a part every file shares (so uploads query and hit the global dedup index) and a part of its own. */
function contentOf(label: string, worker: number, index: number): Uint8Array {
  return concatBytes(
    pseudoRandomBytes(`faults-shared-${label}`, 192 * KIB),
    pseudoRandomBytes(`faults-${label}-${worker}-${index}`, 384 * KIB + 977 * index + worker),
  );
}

interface RepoFile {
  path: string;
  bytes: Uint8Array;
}

/** Downloads `file` by its path in the repository and checks it byte for byte and against its file hash. */
async function downloadAndCheck(reader: CastorClient, file: RepoFile, name: string): Promise<void> {
  const output = join(work, name);
  const result = await reader.downloadFile({ path: file.path, output });
  assert.equal(result.verified, "file-hash", file.path);
  assertSameBytes(await readBytes(output), file.bytes, file.path);
  await rm(output, { force: true });
}

/**
 * Uploads `bytes` through Xet (the client retries every request itself) and commits it as
 * `path`. A commit that failed with a retryable status is sent again once `path` is seen not
 * to be on the branch yet — castor's client leaves that to its caller, since a commit whose
 * answer was lost may have been applied.
 */
async function uploadAndCommit(writer: CastorClient, path: string, bytes: Uint8Array, drill: DrillRecord): Promise<void> {
  const local = await writeTemp(work, path.replaceAll("/", "-"), bytes);
  const { files } = await writer.upload([local]);
  await rm(local, { force: true });
  const operations = commitOperationsFor([{ ...files[0], pathInRepo: path }]);
  for (let attempt = 1; ; attempt++) {
    try {
      await writer.commit({ summary: `add ${path}`, operations });
      return;
    } catch (error) {
      const retryable = (error instanceof HttpStatusError && error.status === 503) || isClientError(error, "network");
      if (!retryable || attempt >= CLIENT_RETRY.maxAttempts) throw error;
      drill.commitsResent++;
      if (await isCommitted(writer, path, files[0].sha256)) return;
      await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
    }
  }
}

async function isCommitted(reader: CastorClient, path: string, sha256: string): Promise<boolean> {
  try {
    return (await reader.fileInfo(path)).etag === sha256;
  } catch (error) {
    if (error instanceof HttpStatusError && error.status === 404) return false;
    throw error;
  }
}

interface DrillRecord {
  committed: RepoFile[];
  /** Commits sent again by the drill after a 503 or a broken connection. */
  commitsResent: number;
  /** Downloads of BIG_FILE that completed. */
  bigDownloads: number;
}

/**
 * WORKERS clients, each uploading and committing its files one after another and downloading
 * the one it just committed, until it has MIN_FILES_PER_WORKER and `restartOver()` holds; and
 * one client downloading BIG_FILE until then.
 */
async function runWorkload(label: string, drill: DrillRecord, restartOver: () => boolean): Promise<void> {
  const bigReader = async () => {
    const reader = client("read");
    do {
      await downloadAndCheck(reader, BIG_FILE, `${label}-big.copy`);
      drill.bigDownloads++;
    } while (!restartOver());
  };
  await Promise.all([
    bigReader(),
    ...Array.from({ length: WORKERS }, async (_, worker) => {
      const writer = client("write");
      const reader = client("read");
      for (let index = 0; index < MIN_FILES_PER_WORKER || !restartOver(); index++) {
        if (index >= MAX_FILES_PER_WORKER) throw new Error(`${label}: the restart did not end while worker ${worker} uploaded ${index} files`);
        const file = { path: `${label}/w${worker}/f${index}.bin`, bytes: contentOf(label, worker, index) };
        await uploadAndCommit(writer, file.path, file.bytes, drill);
        drill.committed.push(file);
        await downloadAndCheck(reader, file, `${label}-w${worker}.copy`);
      }
    }),
  ]);
}

/** The answer a client gets while a store is down: 503, Retry-After, and a sentence naming the store. */
async function assertUnavailable(response: Response, what: string, store: RegExp): Promise<void> {
  const text = await response.text();
  assert.equal(response.status, 503, `${what}: ${text}`);
  assert.match(response.headers.get("retry-after") ?? "", /^[1-9]\d*$/, `${what}: Retry-After`);
  assert.match((JSON.parse(text) as { error: string }).error, store, what);
}

/**
 * What the server logged from line `from`: its request lines' statuses, the lines that call a
 * failure a bug (the "internal error" of an unmapped 500, errors.ts) at error level or above,
 * and how often each warning or error message came.
 */
function serverRecord(from: number) {
  const requests = server.requestLog(from);
  const statuses: Record<number, number> = {};
  for (const { statusCode } of requests) statuses[statusCode] = (statuses[statusCode] ?? 0) + 1;
  const lines = server.logLines().slice(from);
  const bugs = lines.filter((line) => Number(line.level) >= 50 && /internal error|bug/i.test(String(line.msg)));
  const warnings: Record<string, number> = {};
  for (const line of lines.filter((line) => Number(line.level) >= 40)) warnings[String(line.msg)] = (warnings[String(line.msg)] ?? 0) + 1;
  return { statuses, serverErrors: requests.filter((request) => request.statusCode >= 500), bugs, warnings };
}

/** Every committed file on the branch and byte-exact, the process the same, `castor fsck` clean. */
async function assertNothingLost(t: TestContext, drill: DrillRecord, label: string): Promise<void> {
  const reader = client("read");
  const listed = new Set((await reader.listFiles({ path: label })).map((entry) => entry.path));
  assert.deepEqual([...listed].sort(), drill.committed.map((file) => file.path).sort(), "every committed file is on the branch, and nothing else");
  for (const file of drill.committed) await downloadAndCheck(reader, file, `${label}-check.copy`);

  const fsck = await runCastor(["fsck"], { env: server.settings, timeoutMs: 60_000 });
  assert.equal(fsck.code, 0, `fsck: ${fsck.stdout}${fsck.stderr}`);
  assert.match(fsck.stdout, /^No damage found\.$/m, fsck.stdout);
  t.diagnostic(`fsck: ${fsck.stdout.trim().replaceAll("\n", " ")}`);
  assert.equal(server.child.exitCode, null, "castor serve never exited");
}

/** A small xorb no client uploads, for probing the upload route. */
function probeXorb(label: string) {
  return serializeXorb([{ data: pseudoRandomBytes(`faults-probe-${label}`, 20 * KIB) }]);
}

/** Sends every probe request at once (the outage lasts only seconds), then checks each answer. */
async function probeAll(phase: Phase, requests: readonly [string, () => Promise<Response>][], check: (response: Response, what: string) => Promise<void>) {
  const responses = await Promise.all(requests.map(([, send]) => send()));
  for (const [i, [what]] of requests.entries()) await check(responses[i], `${what} (${phase} the restart)`);
}

/** When a drill probes the server: before the restart, while the service refuses connections, after. */
type Phase = "before" | "down" | "after";

/**
 * Runs the drill: the workload; once every client has committed a file, `probe`, the restart,
 * `probe` while the service refuses connections and again once it is back; then the checks
 * every drill shares.
 */
async function drill(t: TestContext, service: Service, label: string, probe: (phase: Phase) => Promise<void>): Promise<void> {
  const logFrom = server.logLines().length;
  const record: DrillRecord = { committed: [], commitsResent: 0, bigDownloads: 0 };
  let restartOver = false;
  let restarted: Promise<void> | undefined;
  const workload = runWorkload(label, record, () => restartOver);
  // Failing fast: a worker that gives up must not leave the waits below to time out.
  let workloadFailed: unknown = null;
  workload.catch((error: unknown) => {
    workloadFailed = error;
  });
  const started = Date.now();
  try {
    await until(() => workloadFailed !== null || record.committed.length >= WORKERS, "every client to commit a file", 60_000, 20);
    if (workloadFailed !== null) throw workloadFailed;

    await probe("before");
    restarted = restart(service).finally(() => {
      restartOver = true;
    });
    await until(() => refusesConnections(service), `${service} to go down`, 30_000, 20);
    t.diagnostic(`${service} down after ${Date.now() - started} ms, ${record.committed.length} files committed`);
    await probe("down");
    await restarted;
    t.diagnostic(`${service} back after ${Date.now() - started} ms`);
    await probe("after");
    await workload;
  } catch (error) {
    // The next drill and the cleanup need the service up again.
    await restarted?.catch(() => undefined);
    restartOver = true;
    const complaints = server
      .logLines()
      .slice(logFrom)
      .filter((line) => Number(line.level) >= 40);
    for (const { level, msg, err } of complaints.slice(-20))
      t.diagnostic(`logged ${level}: ${msg}: ${(err as { message?: string } | undefined)?.message ?? ""}`);
    throw explainedByExit(error);
  }
  t.diagnostic(
    `workload done after ${Date.now() - started} ms: ${record.committed.length} files, ${record.bigDownloads} downloads of ${BIG_FILE.path}, ${record.commitsResent} commits resent by the drill`,
  );

  const { statuses, serverErrors, bugs, warnings } = serverRecord(logFrom);
  t.diagnostic(`statuses answered: ${JSON.stringify(statuses)}; warnings and errors logged: ${JSON.stringify(warnings)}`);
  assert.deepEqual(
    serverErrors.filter((request) => request.statusCode !== 503),
    [],
    "every 5xx was a 503, which the clients retried (every upload got through)",
  );
  assert.ok((statuses[503] ?? 0) > 0, "the outage was answered 503");
  assert.deepEqual(bugs, [], "no failure was logged as a bug");
  await assertNothingLost(t, record, label);
}

/** `error`, or, when castor serve has exited, why every request after that failed: its exit and last output. */
function explainedByExit(error: unknown): unknown {
  const { exitCode, signalCode } = server.child;
  if (exitCode === null && signalCode === null) return error;
  const tail = server.output().split("\n").slice(-40).join("\n");
  return new Error(`castor serve exited during the drill (code ${exitCode}, signal ${signalCode}); its last output:\n${tail}`, { cause: error });
}

describe("fault drills on the scale-out backends", { timeout: 2 * DRILL_TIMEOUT_MS }, () => {
  it("PostgreSQL restarted during uploads, shard registrations, commits and reads: 503s that retries cure, nothing lost", {
    timeout: DRILL_TIMEOUT_MS,
  }, async (t) => {
    const hub = { authorization: `Bearer ${castor.hubTokens.read}` };
    const { accessToken } = await castor.casToken("write");
    const cas = { authorization: `Bearer ${accessToken}` };
    const metadataDown = /metadata database/i;
    let known: string | null = null;

    await drill(t, "postgres", "pg", async (phase) => {
      // Looked up while the database is up, for the reconstruction probed while it is down.
      known ??= (await client("read").listFiles({ path: "pg" }))[0].xetHash;
      const xorb = probeXorb(`pg-${phase}`);
      const requests: [string, () => Promise<Response>][] = [
        ["the revision lookup", () => fetch(`${server.url}/api/${REPO_TYPE}s/${REPO_NAME}/revision/main`, { headers: hub })],
        ["the token operation", () => fetch(castor.tokenUrl("read"), { headers: hub })],
        ["a reconstruction", () => fetch(`${server.url}/v1/reconstructions/${known}`, { headers: cas })],
        ["a xorb upload", () => fetch(`${server.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { method: "POST", body: xorb.bytes, headers: cas })],
      ];
      await probeAll(phase, requests, async (response, what) => {
        if (phase === "down") await assertUnavailable(response, what, metadataDown);
        else assert.equal(response.status, 200, `${what}: ${await response.text()}`);
      });
      assert.equal((await fetch(`${server.url}/healthz`)).status, 200, "the process itself stays healthy");
      assert.equal((await fetch(`${server.url}/readyz`)).status, phase === "down" ? 503 : 200, "/readyz follows the database");
    });
  });

  it("Ceph RGW restarted during xorb uploads and downloads: 503s that retries cure, nothing partial", { timeout: DRILL_TIMEOUT_MS }, async (t) => {
    const hub = { authorization: `Bearer ${castor.hubTokens.read}` };
    const { accessToken } = await castor.casToken("write");
    const cas = { authorization: `Bearer ${accessToken}` };
    const objectStoreDown = /object store/i;

    // A transfer under way when radosgw stops, read no further until it is back: castor either
    // resumes reading it from the store (objects are immutable) or cuts it short, but whatever it
    // sends is the stored bytes.
    const largeFile = await storeLargeXorbFile(cas);
    let held: { response: Response; url: string; range: string } | undefined;

    await drill(t, "ceph-rgw", "rgw", async (phase) => {
      // A xorb of its own per phase: one already recorded is answered without a store write.
      const xorb = probeXorb(`rgw-${phase}`);
      const [file] = await client("read").listFiles({ path: "rgw" });
      // Reconstruction needs only the metadata: it answers while the object store is down.
      const entry = await firstFetchEntry(file.xetHash!, cas);
      const range = { range: `bytes=${entry.url_range.start}-${entry.url_range.end}` };
      if (phase === "before") {
        const big = await firstFetchEntry(largeFile, cas);
        const bigRange = `bytes=${big.url_range.start}-${big.url_range.end}`;
        held = { response: await fetch(big.url, { headers: { range: bigRange } }), url: big.url, range: bigRange };
        assert.equal(held.response.status, 206);
      }
      await probeAll(
        phase,
        [
          ["a transfer", () => fetch(entry.url, { headers: range })],
          ["a file's content through the hub", () => fetch(`${server.url}/${REPO_NAME}/resolve/main/${file.path}`, { headers: hub })],
          ["a xorb upload", () => fetch(`${server.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { method: "POST", body: xorb.bytes, headers: cas })],
        ],
        async (response, what) => {
          if (phase === "down") await assertUnavailable(response, what, objectStoreDown);
          else assert.ok(response.status === 200 || response.status === 206, `${what}: ${response.status} ${await response.text()}`);
        },
      );
      if (phase === "after" && held !== undefined) {
        const { received, failure } = await readToEnd(held.response);
        const again = await fetch(held.url, { headers: { range: held.range } });
        assert.equal(again.status, 206, "the same transfer once radosgw is back");
        const stored = new Uint8Array(await again.arrayBuffer());
        const outcome = failure === null ? "complete (castor resumed reading it from the store)" : `cut short: ${String(failure)}`;
        t.diagnostic(`the transfer under way when radosgw stopped: ${received.length} of ${stored.length} bytes, ${outcome}`);
        if (failure === null) assertSameBytes(received, stored, "a transfer castor finished once radosgw was back");
        else assertSameBytes(received, stored.subarray(0, received.length), "what castor sent of a transfer it had to cut short");
      }
    });
  });
});

/**
 * A file over one xorb of close to the largest size (castor's client makes smaller ones for a
 * file this large), stored with raw requests: its transfer is longer than the socket buffers
 * between radosgw, castor and the test hold, so radosgw is still sending it when it stops.
 * Returns the file hash.
 */
async function storeLargeXorbFile(headers: Record<string, string>): Promise<string> {
  const chunks = Array.from({ length: 900 }, (_, i) => ({ data: pseudoRandomBytes(`faults-large-${i}`, 64 * KIB) }));
  const xorb = serializeXorb(chunks);
  const stored = await fetch(`${server.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { method: "POST", body: xorb.bytes, headers });
  assert.equal(stored.status, 200, await stored.text());
  const file = fileOfChunks(
    xorb.info,
    chunks.map((_, i) => i),
  );
  const registered = await fetch(`${server.url}/v1/shards`, {
    method: "POST",
    body: serializeUploadShard({ files: [file], xorbs: [] }, { kind: "xet-core" }),
    headers,
  });
  assert.equal(registered.status, 200, await registered.text());
  return hashToHex(file.fileHash);
}

/** The body read to its end, or up to the failure that ended it. */
async function readToEnd(response: Response): Promise<{ received: Uint8Array; failure: unknown }> {
  const parts: Uint8Array[] = [];
  const reader = response.body!.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { received: concatBytes(...parts), failure: null };
      parts.push(value);
    }
  } catch (failure) {
    return { received: concatBytes(...parts), failure };
  }
}

/** The first fetch entry of a V1 reconstruction of the whole file. */
async function firstFetchEntry(fileHash: string, headers: Record<string, string>) {
  const response = await fetch(`${server.url}/v1/reconstructions/${fileHash}`, { headers });
  assert.equal(response.status, 200, `a reconstruction: ${await response.clone().text()}`);
  return Object.values(((await response.json()) as Answer).fetch_info!)[0][0];
}
