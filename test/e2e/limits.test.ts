/**
 * The node-wide caps end to end, on a real `castor serve` with small settings: concurrent
 * uploads (CASTOR_MAX_CONCURRENT_UPLOADS: 503 with Retry-After before the body is read, on every
 * xorb and shard route) and open connections (CASTOR_MAX_CONNECTIONS: one more is closed on
 * arrival, and accepted again once another closed), each refusal counted in
 * castor_refusals_total. Raw sockets hold uploads and connections open at will.
 */
import assert from "node:assert/strict";
import type { Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { CompressionScheme } from "../../src/format/compression.js";
import { hashToHex } from "../../src/format/hash.js";
import { serializeXorb } from "../../src/format/xorb.js";
import { refusals } from "../helpers/metrics.js";
import { openSocket, readUntilClosed, unreadByServer } from "../helpers/raw-socket.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { splitmix64Bytes } from "../helpers/vectors.js";
import { until, within } from "../helpers/wait.js";

const MAX_UPLOADS = 2;
const MAX_CONNECTIONS = 6;
const xorb = serializeXorb(Array.from({ length: 4 }, (_, i) => ({ data: splitmix64Bytes(BigInt(700 + i), 64 * 1024), scheme: CompressionScheme.None })));
const xorbPath = `/v1/xorbs/default/${hashToHex(xorb.info.hash)}`;

let server: ServerProcess;
let token: string;
const sockets = new Set<Socket>();

const port = () => Number(new URL(server.url).port);

async function socket(): Promise<Socket> {
  const opened = await openSocket(port());
  opened.on("error", () => undefined);
  sockets.add(opened);
  return opened;
}

/** Closes every socket a test opened. */
async function closeSockets(): Promise<void> {
  for (const open of sockets) open.destroy();
  sockets.clear();
}

/** An upload's request head: the body follows separately, as slowly as the test likes. */
function uploadHead(path: string, contentLength: number): string {
  return `POST ${path} HTTP/1.1\r\nHost: castor\r\nAuthorization: Bearer ${token}\r\nContent-Length: ${contentLength}\r\n\r\n`;
}

/** What the server sends on `open` until it matches `complete` (the answer, on a kept-alive connection); null if it closes first. */
function answerOn(open: Socket, complete: RegExp): Promise<string | null> {
  return new Promise((resolve) => {
    let text = "";
    const onData = (chunk: Buffer) => {
      text += chunk.toString("latin1");
      if (complete.test(text)) finish(text);
    };
    const finish = (result: string | null) => {
      open.off("data", onData);
      resolve(result);
    };
    open.on("data", onData);
    open.once("close", () => finish(null));
  });
}

/** A tiny upload to `path`: 400 (not a valid xorb or shard) while there is room, 503 when there is none. */
async function probe(path = xorbPath): Promise<Response> {
  const response = await fetch(`${server.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: Buffer.alloc(16) });
  await response.arrayBuffer();
  return response;
}

before(async () => {
  server = await startCastorServer({
    env: { CASTOR_MAX_CONCURRENT_UPLOADS: String(MAX_UPLOADS), CASTOR_LINGER_TIMEOUT: "0.5" },
  });
  token = (await (await hubFixture(server, { repoType: "model", repoName: "alice/limits" })).casToken("write")).accessToken;
});

after(async () => {
  await closeSockets();
  await server?.stop();
});

describe("concurrent uploads", () => {
  after(closeSockets);

  it("answers 503 with Retry-After to uploads beyond the cap, before their body, and takes them again once one ends", async () => {
    // Two uploads in progress, their bodies half sent.
    const held: Socket[] = [];
    for (let i = 0; i < MAX_UPLOADS; i++) {
      const upload = await socket();
      upload.write(uploadHead(xorbPath, xorb.bytes.length));
      upload.write(xorb.bytes.subarray(0, 1000));
      held.push(upload);
      // Read by the server, so its upload holds a slot before any probe could take one first.
      await until(async () => (await unreadByServer(port(), upload.localPort)) === 0, "the server read the held upload's head");
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    const refusedBefore = await refusals(server.url, "upload_concurrency");
    assert.equal((await probe()).status, 503, "the held uploads fill the node");

    const refused = await probe();
    assert.equal(refused.headers.get("retry-after"), "5");
    for (const path of ["/v1/shards", "/shards", "/v2/shards", `/xorbs/default/${"ab".repeat(32)}`]) {
      const answer = await fetch(`${server.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: Buffer.alloc(64) });
      assert.equal(answer.status, 503, path);
      assert.match(((await answer.json()) as { error: string }).error, /maximum of 2 uploads at once: retry in 5 s/);
    }
    // Reads and queries are not uploads.
    const head = await fetch(`${server.url}${xorbPath}`, { method: "HEAD", headers: { authorization: `Bearer ${token}` } });
    assert.equal(head.status, 404);
    // A large upload refused at once: the answer arrives whole although most of the body was never sent.
    const big = await socket();
    big.write(uploadHead(xorbPath, 50 * 1024 * 1024));
    big.write(Buffer.alloc(64 * 1024));
    const answer = await within(readUntilClosed(big), "the refused upload's connection closed", 5000);
    assert.match(answer, /^HTTP\/1\.1 503 /);
    assert.match(answer, /\r\nretry-after: 5\r\n/i);
    assert.match(answer, /\r\nconnection: close\r\n/i);
    assert.match(answer, /\{"error":"This castor node is receiving its maximum of 2 uploads at once/);
    assert.equal((await refusals(server.url, "upload_concurrency")) - refusedBefore, 7, "castor_refusals_total counts each 503");

    // One held upload gone: there is room again; the other one still completes.
    held[0].destroy();
    await until(async () => (await probe()).status === 400, "the slot of the abandoned upload was freed");
    // Not end(): a half-closed request is abandoned by Node's HTTP server.
    const completed = answerOn(held[1], /"was_inserted":true/);
    held[1].write(xorb.bytes.subarray(1000));
    assert.match((await within(completed, "the held upload's answer", 5000)) ?? "closed", /^HTTP\/1\.1 200 /);
  });
});

describe("concurrent connections", () => {
  // A server of its own: nothing else (fetch's pooled connections) holds connections to it.
  let uploadServer: ServerProcess;
  before(async () => {
    await closeSockets();
    uploadServer = server;
    server = await startCastorServer({ env: { CASTOR_MAX_CONNECTIONS: String(MAX_CONNECTIONS) } });
  });
  after(async () => {
    await closeSockets();
    await server.stop();
    server = uploadServer;
  });

  /** One request on `open`, answered on the same (kept-alive) connection; null when the server closed it instead. */
  async function health(open: Socket): Promise<string | null> {
    const answer = answerOn(open, /"status"/);
    open.write("GET /healthz HTTP/1.1\r\nHost: castor\r\n\r\n");
    return answer;
  }

  it("closes a connection beyond the cap at once, and accepts one again once another closed", async () => {
    const open: Socket[] = [];
    for (let i = 0; i < MAX_CONNECTIONS; i++) {
      const connection = await socket();
      assert.match((await health(connection)) ?? "closed", /^HTTP\/1\.1 200 /, `connection ${i + 1} is served`);
      open.push(connection);
    }
    const oneTooMany = await socket();
    const closed = new Promise((resolve) => oneTooMany.once("close", resolve));
    oneTooMany.write("GET /healthz HTTP/1.1\r\nHost: castor\r\n\r\n");
    await within(closed, "the connection beyond the cap was closed", 2000);
    for (const connection of open) assert.equal(connection.destroyed, false, "the connections within the cap stay open");

    open[0].destroy();
    let answered: string | null = null;
    await until(async () => (answered = await health(await socket())) !== null, "a connection is accepted again", 5000, 50);
    assert.match(answered ?? "", /^HTTP\/1\.1 200 /);
    await server.waitForLog((line) => typeof line.msg === "string" && line.msg.startsWith("connections refused"), 2000);
    // Scraped on a connection already open: the node is at its cap, so a new one would be refused.
    const counted = /\ncastor_refusals_total\{reason="connection_limit"\} (\d+)\n/;
    const scraped = answerOn(open[1], counted);
    open[1].write("GET /metrics HTTP/1.1\r\nHost: castor\r\n\r\n");
    const refused = Number(counted.exec((await within(scraped, "the metrics over a kept-alive connection", 5000)) ?? "")?.[1]);
    assert.ok(refused >= 1, `castor_refusals_total{reason="connection_limit"} is ${refused}`);
  });
});
