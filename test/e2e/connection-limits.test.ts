/**
 * Connection limits end to end (src/http/connection-limits.ts): real `castor serve` processes
 * with small CASTOR_* timeouts, raw sockets that behave like the clients the limits exist for
 * (headers or bodies dribbled, answers never read, uploads stalled), and the server's own
 * resources read from /proc: descriptors, resident memory, staged files; and each cut counted
 * in castor_refusals_total.
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import type { Socket } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { HmacTransferUrls } from "../../src/auth/transfer-url.js";
import { KEYS_DIR_NAME, URL_KEY_FILE_NAME } from "../../src/auth/keys.js";
import { CompressionScheme } from "../../src/format/compression.js";
import { byteRange } from "../../src/format/ranges.js";
import { hashToHex } from "../../src/format/hash.js";
import { serializeXorb } from "../../src/format/xorb.js";
import { SPOOL_DIR_NAME } from "../../src/http/app.js";
import { refusals } from "../helpers/metrics.js";
import { openSocket, unreadByServer } from "../helpers/raw-socket.js";
import { until, within } from "../helpers/wait.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { splitmix64Bytes } from "../helpers/vectors.js";

const MiB = 1024 * 1024;
const SOME_XORB = "ab".repeat(32);
/** A xorb whose first bytes parse, so an upload of it is staged while its body arrives. */
const validXorb = serializeXorb(Array.from({ length: 8 }, (_, i) => ({ data: splitmix64Bytes(BigInt(100 + i), 128 * 1024), scheme: CompressionScheme.None })));

interface Connection {
  socket: Socket;
  /** Everything the server sent so far. */
  received(): string;
  /** Resolves once the server closed (or reset) the connection, with the ms it took from `since`. */
  closed: Promise<number>;
}

/** Every connection a test opened, closed by the suites' `after` even when a test failed midway (else a stalled server never stops). */
const openSockets = new Set<Socket>();
function closeConnections(): void {
  for (const socket of openSockets) socket.destroy();
  openSockets.clear();
}

async function connect(server: ServerProcess, options: { read?: boolean } = {}): Promise<Connection> {
  const socket = await openSocket(Number(new URL(server.url).port));
  openSockets.add(socket);
  const opened = Date.now();
  let text = "";
  // A socket that is not read: the kernel's buffers fill and the server's writes stall.
  if (options.read === false) socket.pause();
  else socket.setEncoding("latin1").on("data", (chunk: string) => (text += chunk));
  const closed = new Promise<number>((resolve) => {
    socket.once("close", () => resolve(Date.now() - opened));
    socket.on("error", () => undefined);
  });
  return { socket, received: () => text, closed };
}

/** Writes `piece` every `everyMs` until the connection closes. */
function dribble(connection: Connection, piece: string, everyMs: number): void {
  const timer = setInterval(() => {
    if (!connection.socket.destroyed) connection.socket.write(piece);
  }, everyMs);
  void connection.closed.then(() => clearInterval(timer));
}

/** Polls `read` until `holds` accepts its value or `ms` pass; returns the last value for the caller's assertion. */
async function eventually<T>(read: () => Promise<T>, holds: (value: T) => boolean, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (holds(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const openDescriptors = async (server: ServerProcess) => (await readdir(`/proc/${server.child.pid}/fd`)).length;
const residentBytes = async (server: ServerProcess) => Number(/VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${server.child.pid}/status`, "utf8"))![1]) * 1024;
const stagedFiles = (server: ServerProcess) => readdir(join(server.dataDir, "blobs", "tmp")).catch(() => [] as string[]);
const spoolFiles = (server: ServerProcess) => readdir(join(server.dataDir, SPOOL_DIR_NAME)).catch(() => [] as string[]);

async function writeToken(server: ServerProcess): Promise<string> {
  const fixture = await hubFixture(server, { repoType: "model", repoName: "alice/limits" });
  return (await fixture.casToken("write")).accessToken;
}

function uploadHead(path: string, contentLength: number, token?: string): string {
  return `POST ${path} HTTP/1.1\r\nHost: castor\r\nContent-Length: ${contentLength}\r\n${token ? `Authorization: Bearer ${token}\r\n` : ""}\r\n`;
}

/** Every hub route that takes a body: method, path, Content-Type. */
const HUB_BODY_ROUTES: [string, string, string][] = [
  ["POST", "/api/models/alice/limits/commit/main", "application/x-ndjson"],
  ["POST", "/api/models/alice/limits/preupload/main", "application/json"],
  ["POST", "/api/models/alice/limits/paths-info/main", "application/x-www-form-urlencoded"],
  ["POST", "/alice/limits.git/info/lfs/objects/batch", "application/vnd.git-lfs+json"],
  ["POST", "/api/repos/create", "application/json"],
  ["POST", "/api/repos/move", "application/json"],
  ["DELETE", "/api/repos/delete", "application/json"],
  ["PUT", "/api/models/alice/limits/settings", "application/json"],
  ["POST", "/api/models/alice/limits/branch/dev", "application/json"],
  ["POST", "/api/models/alice/limits/tag/main", "application/json"],
  ["POST", "/api/models/alice/limits/super-squash/main", "application/json"],
  ["POST", "/api/castor/tokens", "application/json"],
  ["POST", "/api/validate-yaml", "text/plain"],
];

describe("request timeouts", () => {
  let server: ServerProcess;
  let token: string;
  let hubToken: string;
  before(async () => {
    server = await startCastorServer({
      env: { CASTOR_HEADER_TIMEOUT: "0.5", CASTOR_BODY_TIMEOUT: "1", CASTOR_BODY_MIN_RATE: "1024", CASTOR_LINGER_TIMEOUT: "0.5" },
    });
    const fixture = await hubFixture(server, { repoType: "model", repoName: "alice/limits" });
    token = (await fixture.casToken("write")).accessToken;
    hubToken = fixture.hubTokens.write;
  });
  after(async () => {
    closeConnections();
    await server?.stop();
  });

  it("closes a connection whose headers arrive one line at a time, with 408", async () => {
    const refusedBefore = await refusals(server.url, "header_timeout");
    const connection = await connect(server);
    connection.socket.write(`GET /healthz HTTP/1.1\r\n`);
    dribble(connection, "X-Slow: 1\r\n", 100);
    const tookMs = await within(connection.closed, "the header timeout closed the connection", 5000);
    assert.ok(tookMs >= 400, `closed after ${tookMs} ms, before the 0.5 s header timeout`);
    assert.match(connection.received(), /^HTTP\/1\.1 408 /);
    assert.equal((await refusals(server.url, "header_timeout")) - refusedBefore, 1, "castor_refusals_total{reason=header_timeout}");
  });

  it("closes a connection that sends nothing at all", async () => {
    const refusedBefore = await refusals(server.url, "header_timeout");
    const connection = await connect(server);
    await within(connection.closed, "the header timeout closed the silent connection", 5000);
    assert.equal((await refusals(server.url, "header_timeout")) - refusedBefore, 1, "castor_refusals_total{reason=header_timeout}");
  });

  it("cuts a xorb upload whose body dribbles: 408, staged file removed, descriptors released", async () => {
    const refusedBefore = await refusals(server.url, "body_too_slow");
    const descriptorsBefore = await openDescriptors(server);
    const connection = await connect(server);
    connection.socket.write(uploadHead(`/v1/xorbs/default/${hashToHex(validXorb.info.hash)}`, validXorb.bytes.length, token));
    connection.socket.write(validXorb.bytes.subarray(0, 4096));
    // The upload is being staged (the route is reading the body) before the dribble starts.
    const staged = await eventually(
      () => stagedFiles(server),
      (files) => files.length === 1,
    );
    assert.equal(staged.length, 1, "the upload was staged");
    dribble(connection, "x", 200);
    await within(connection.closed, "the body timeouts cut the dribbling upload", 6000);
    assert.match(connection.received(), /^HTTP\/1\.1 408 /);
    assert.match(
      connection.received(),
      /"error":"The request body of POST \/v1\/xorbs\/default\/[0-9a-f]{64} was cut because it arrived at less than 1024 bytes\/s/,
    );
    assert.equal((await refusals(server.url, "body_too_slow")) - refusedBefore, 1, "castor_refusals_total{reason=body_too_slow}");
    assert.deepEqual(
      await eventually(
        () => stagedFiles(server),
        (files) => files.length === 0,
      ),
      [],
      "the staged file is removed",
    );
    assert.ok(
      (await eventually(
        () => openDescriptors(server),
        (n) => n <= descriptorsBefore,
      )) <= descriptorsBefore,
      "descriptors released",
    );
  });

  it("cuts a body that stops altogether after the body timeout", async () => {
    const refusedBefore = await refusals(server.url, "body_timeout");
    const connection = await connect(server);
    connection.socket.write(uploadHead(`/v1/xorbs/default/${hashToHex(validXorb.info.hash)}`, validXorb.bytes.length, token));
    connection.socket.write(validXorb.bytes.subarray(0, 4096));
    const tookMs = await within(connection.closed, "the body timeout cut the stalled upload", 6000);
    assert.ok(tookMs >= 900, `cut after ${tookMs} ms, before the 1 s body timeout`);
    assert.match(connection.received(), /^HTTP\/1\.1 408 [\s\S]*no byte of it arrived for 1 s/);
    assert.equal((await refusals(server.url, "body_timeout")) - refusedBefore, 1, "castor_refusals_total{reason=body_timeout}");
    assert.deepEqual(
      await eventually(
        () => stagedFiles(server),
        (files) => files.length === 0,
      ),
      [],
    );
  });

  it(`cuts a body dribbled to any of the ${HUB_BODY_ROUTES.length} hub routes that take one with 408 and its reason, and closes the connection`, async () => {
    const refusedBefore = await refusals(server.url, "body_too_slow");
    const connections = await Promise.all(HUB_BODY_ROUTES.map(() => connect(server)));
    HUB_BODY_ROUTES.forEach(([method, path, type], i) => {
      connections[i].socket.write(
        `${method} ${path} HTTP/1.1\r\nHost: castor\r\nContent-Type: ${type}\r\nContent-Length: 100000\r\nAuthorization: Bearer ${hubToken}\r\n\r\n{`,
      );
      dribble(connections[i], " ", 200);
    });
    await within(Promise.all(connections.map((connection) => connection.closed)), "the body timeouts cut every dribbled hub request", 8000);
    HUB_BODY_ROUTES.forEach(([method, path], i) => {
      const answer = connections[i].received();
      assert.match(answer, /^HTTP\/1\.1 408 /, `${method} ${path}: ${answer}`);
      assert.match(answer, /\r\nconnection: close\r\n/i);
      assert.ok(
        answer.includes(`"error":"The request body of ${method} ${path} was cut because it arrived at less than 1024 bytes/s`),
        `${method} ${path}: ${answer}`,
      );
    });
    assert.equal((await refusals(server.url, "body_too_slow")) - refusedBefore, HUB_BODY_ROUTES.length, "castor_refusals_total{reason=body_too_slow}");
  });

  it("closes a connection kept after an early 400 once its rest has not ended within the linger time", async () => {
    const connection = await connect(server);
    const malformed = Buffer.alloc(1000);
    malformed[0] = 9; // not a chunk header version: refused at the first bytes
    connection.socket.write(uploadHead(`/v1/xorbs/default/${hashToHex(validXorb.info.hash)}`, 100_000, token));
    connection.socket.write(malformed);
    await until(() => /^HTTP\/1\.1 400 [\s\S]*\r\n\r\n\{"error":.*\}$/.test(connection.received()), "the 400 answer", 3000);
    // The answer kept the connection (the rest is dropped in the background), but not for a client dribbling the rest.
    assert.doesNotMatch(connection.received(), /\r\nconnection: close\r\n/i);
    dribble(connection, "x", 50);
    await within(connection.closed, "the connection closed once the rest had not ended within CASTOR_LINGER_TIMEOUT", 3000);
  });

  it("answers an unauthenticated upload that dribbles with 401 and closes it within the linger bound", async () => {
    const connection = await connect(server);
    connection.socket.write(uploadHead(`/v1/xorbs/default/${SOME_XORB}`, 100 * 1000 * 1000));
    dribble(connection, "x", 100);
    const tookMs = await within(connection.closed, "the refused upload's connection was closed", 3000);
    assert.match(connection.received(), /^HTTP\/1\.1 401 [\s\S]*\r\nconnection: close\r\n/i);
    assert.ok(tookMs < 2000, `closed after ${tookMs} ms`);
  });
});

describe("stalled shard uploads", () => {
  const UPLOADS = 40;
  // Most of what a client could send before stalling: without the spool, 40 × 8 MiB = 320 MiB
  // would sit in memory until the body timeout.
  const SENT_BYTES = 8 * MiB;
  let server: ServerProcess;
  let token: string;
  before(async () => {
    server = await startCastorServer({ env: { CASTOR_BODY_TIMEOUT: "4", CASTOR_BODY_MIN_RATE: "1024" } });
    token = await writeToken(server);
  });
  after(async () => {
    closeConnections();
    await server?.stop();
  });

  it(`hold memory by bytes received, not bytes announced, and are cut by the body timeout (${UPLOADS} × 65 MiB announced)`, async (t) => {
    const rssBefore = await residentBytes(server);
    const connections = await Promise.all(Array.from({ length: UPLOADS }, () => connect(server)));
    const head = uploadHead("/v1/shards", 65 * MiB, token);
    // Written in the same tick as the headers: the route reads it as it arrives.
    const request = Buffer.concat([Buffer.from(head), splitmix64Bytes(7n, SENT_BYTES)]);
    for (const { socket } of connections) socket.write(request);
    // Every upload got past the memory part of the spool into its file, and nothing waits unread.
    const spooled = await eventually(
      () => spoolFiles(server),
      (names) => names.length === UPLOADS,
    );
    assert.equal(spooled.length, UPLOADS, "each stalled upload waits in a spool file");
    const port = Number(new URL(server.url).port);
    assert.equal(
      await eventually(
        () => unreadByServer(port),
        (n) => n === 0,
      ),
      0,
      "the server read everything sent",
    );
    const grownBytes = (await residentBytes(server)) - rssBefore;
    // 40 × 65 MiB announced would be 2.6 GB, the 40 × 8 MiB sent 320 MiB; what is held is at
    // most 2 MiB per upload in memory (DEFAULT_SPOOL_MEMORY_BYTES), the rest on disk. Resident
    // memory also counts the socket reads the spool already wrote out and the collector has not
    // reclaimed yet (measured: 100–140 MiB in all), so the bound sits between that and 320 MiB.
    assert.ok(grownBytes < 200 * MiB, `resident memory grew by ${Math.round(grownBytes / MiB)} MiB`);
    t.diagnostic(`resident memory grew by ${Math.round(grownBytes / MiB)} MiB for ${UPLOADS} stalled uploads of ${SENT_BYTES / MiB} MiB each`);

    const closedWithin = await within(
      Promise.all(connections.map((connection) => connection.closed)),
      "the body timeout cut every stalled shard upload",
      15_000,
    );
    assert.equal(closedWithin.length, UPLOADS);
    for (const connection of connections) assert.match(connection.received(), /^HTTP\/1\.1 408 /);
    assert.deepEqual(
      await eventually(
        () => spoolFiles(server),
        (names) => names.length === 0,
      ),
      [],
      "the spool files are removed",
    );
  });
});

describe("answers the client does not read", () => {
  const DOWNLOADS = 100;
  let server: ServerProcess;
  let url: string;
  let xorbBytes: number;
  before(async () => {
    server = await startCastorServer({ env: { CASTOR_SEND_TIMEOUT: "1" } });
    const token = await writeToken(server);
    // 24 MiB of incompressible chunks: more than loopback's socket buffers take in, so a
    // response that is not read stays in progress.
    const xorb = serializeXorb(Array.from({ length: 192 }, (_, i) => ({ data: splitmix64Bytes(BigInt(i + 1), 128 * 1024), scheme: CompressionScheme.None })));
    const upload = await fetch(`${server.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, {
      method: "POST",
      body: xorb.bytes,
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(upload.status, 200, await upload.text());
    const key = Buffer.from((await readFile(join(server.dataDir, KEYS_DIR_NAME, URL_KEY_FILE_NAME), "utf8")).trim(), "utf8");
    const urls = new HmacTransferUrls({ key, publicUrl: server.publicUrl, ttlSeconds: 600 });
    xorbBytes = xorb.bytes.length;
    url = urls.sign(xorb.info.hash, [byteRange(0, xorb.bytes.length - 1)]);
  });
  after(async () => {
    closeConnections();
    await server?.stop();
  });

  it(`are cut by the send timeout and release their descriptors (${DOWNLOADS} downloads never read)`, async (t) => {
    const refusedBefore = await refusals(server.url, "send_timeout");
    const descriptorsBefore = await openDescriptors(server);
    const { pathname, search } = new URL(url);
    const connections = await Promise.all(Array.from({ length: DOWNLOADS }, () => connect(server, { read: false })));
    for (const { socket } of connections) socket.write(`GET ${pathname}${search} HTTP/1.1\r\nHost: castor\r\nRange: bytes=0-${xorbBytes - 1}\r\n\r\n`);
    // Each download in progress holds its socket and the open xorb.
    const during = await eventually(
      () => openDescriptors(server),
      (n) => n >= descriptorsBefore + 2 * DOWNLOADS,
    );
    assert.ok(during >= descriptorsBefore + 2 * DOWNLOADS, `${during} descriptors open during the downloads, ${descriptorsBefore} before`);
    const afterwards = await eventually(
      () => openDescriptors(server),
      (n) => n <= descriptorsBefore,
    );
    assert.ok(afterwards <= descriptorsBefore, `${afterwards} descriptors open after the send timeout, ${descriptorsBefore} before`);
    t.diagnostic(`descriptors: ${descriptorsBefore} before, ${during} during ${DOWNLOADS} unread downloads, ${afterwards} after the send timeout`);
    assert.equal((await refusals(server.url, "send_timeout")) - refusedBefore, DOWNLOADS, "castor_refusals_total{reason=send_timeout}");
    // A client that does not read does not see the close either, until it reads again: then it
    // reads what the kernel holds for each of the 100 sockets first (the bound leaves time for
    // that on a busy machine).
    for (const { socket } of connections) socket.resume();
    await within(Promise.all(connections.map((connection) => connection.closed)), "every unread download was closed by the server", 30_000);
  });
});

describe("shutdown with a stalled client", () => {
  it("exits within CASTOR_SHUTDOWN_GRACE, removing the stalled upload's staged file", async () => {
    const server = await startCastorServer({ env: { CASTOR_SHUTDOWN_GRACE: "1", CASTOR_BODY_TIMEOUT: "600" } });
    try {
      const token = await writeToken(server);
      const connection = await connect(server);
      connection.socket.write(uploadHead(`/v1/xorbs/default/${hashToHex(validXorb.info.hash)}`, validXorb.bytes.length, token));
      connection.socket.write(validXorb.bytes.subarray(0, 4096));
      await eventually(
        () => stagedFiles(server),
        (files) => files.length === 1,
      );
      const signalledAt = Date.now();
      server.child.kill("SIGTERM");
      const status = await within(server.exited, "castor serve exited after SIGTERM", 6000);
      const tookMs = Date.now() - signalledAt;
      assert.deepEqual(status, { code: 0, signal: null });
      assert.ok(tookMs >= 900, `exited after ${tookMs} ms, before the 1 s grace`);
      await within(connection.closed, "the stalled connection was closed", 1000);
      await server.waitForLog((line) => line.msg === "requests still in progress after the shutdown grace: closing their connections");
      assert.deepEqual(await stagedFiles(server), [], "the stalled upload's staged file was removed");
    } finally {
      closeConnections();
      await server.stop("SIGKILL");
    }
  });
});
