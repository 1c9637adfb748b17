/**
 * Crash during a large shard registration: a real `castor serve` is SIGKILLed while it
 * validates a /v2/shards upload of 10,000 files (as soon as the first progress frame arrives),
 * restarted on the same data dir, and must show nothing of that shard — no file, link, dedup
 * entry or shard row — until the retried upload registers all of it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileHash, hashToHex, verificationHash } from "../../src/format/hash.js";
import type { ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { METADATA_FILE_NAME } from "../../src/metadata/sqlite.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";
import { sqliteRowCounts } from "../helpers/stores.js";
import { tempDirForFile } from "../helpers/temp-dir.js";
import { makeData } from "../helpers/vectors.js";

const FILE_COUNT = 10_000;
const XORB_COUNT = 16;
const CHUNKS_PER_XORB = 64;

let server: ServerProcess | undefined;
// Registered before the data dir's removal, so the server is dead before its folder goes.
after(() => server?.stop("SIGKILL"));
const dataDir = tempDirForFile("castor-crash-shard-");

async function cli(...args: string[]): Promise<string> {
  const result = await runCastor(args, { env: { CASTOR_DATA_DIR: dataDir.path } });
  assert.equal(result.code, 0, result.stderr);
  return result.stdout.trim();
}

async function writeToken(hubToken: string): Promise<string> {
  const response = await fetch(`${server!.url}/api/models/alice/bert/cas-write-token/main`, { headers: { authorization: `Bearer ${hubToken}` } });
  assert.equal(response.status, 200);
  return ((await response.json()) as { accessToken: string }).accessToken;
}

/** Small chunks, so the 16 xorbs serialize fast; every chunk differs from every other. */
function buildXorbs(): SerializedXorb[] {
  return Array.from({ length: XORB_COUNT }, (_, x) =>
    serializeXorb(Array.from({ length: CHUNKS_PER_XORB }, (_, c) => ({ data: makeData(64 + ((x * 7 + c) % 50), 2 * c + 1, x) }))),
  );
}

function term(xorb: SerializedXorb["info"], start: number, end: number) {
  return { xorb, start, end };
}

/**
 * 10,000 distinct files of two terms each (~12 chunks per file, ~120,000 chunks to check in
 * all, about a second of validation): enough work that the kill lands in the middle of it.
 */
function buildFiles(xorbs: SerializedXorb[]): ShardFile[] {
  const ranges: [number, number][] = [];
  for (let length = 6; ranges.length < FILE_COUNT / XORB_COUNT; length++) {
    for (let start = 0; start + length <= CHUNKS_PER_XORB; start++) ranges.push([start, start + length]);
  }
  return Array.from({ length: FILE_COUNT }, (_, k) => {
    const [start, end] = ranges[Math.floor(k / XORB_COUNT)];
    const second = (k * 3) % (CHUNKS_PER_XORB - 4);
    const terms = [term(xorbs[k % XORB_COUNT].info, start, end), term(xorbs[(k + 5) % XORB_COUNT].info, second, second + 4)];
    const chunks = terms.flatMap((t) => t.xorb.chunks.slice(t.start, t.end));
    return {
      fileHash: fileHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
      terms: terms.map((t) => ({
        xorbHash: t.xorb.hash,
        chunkStart: t.start,
        chunkEnd: t.end,
        unpackedBytes: t.xorb.chunks.slice(t.start, t.end).reduce((sum, c) => sum + c.uncompressedLength, 0),
      })),
      verificationHashes: terms.map((t) => verificationHash(t.xorb.chunks.slice(t.start, t.end).map((c) => c.hash))),
      sha256: null,
    };
  });
}

function rowCounts(): Record<string, number> {
  return sqliteRowCounts(join(dataDir.path, METADATA_FILE_NAME), ["xorbs", "shards", "files", "file_repos", "dedup_chunks"]);
}

async function postShard(token: string, body: Uint8Array): Promise<Response> {
  return fetch(`${server!.url}/v2/shards`, { method: "POST", body, headers: { authorization: `Bearer ${token}` } });
}

describe("SIGKILL during a /v2/shards registration", () => {
  it("leaves nothing of the shard behind, and the retried upload registers it whole", async () => {
    server = await startCastorServer({ dataDir: dataDir.path });
    await cli("repo", "create", "model", "alice/bert");
    const hubToken = await cli("token", "create", "--repo", "model:alice/bert", "--access", "write");
    let token = await writeToken(hubToken);

    const xorbs = buildXorbs();
    for (const xorb of xorbs) {
      const response = await fetch(`${server.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, {
        method: "POST",
        body: xorb.bytes,
        headers: { authorization: `Bearer ${token}` },
      });
      assert.equal(response.status, 200, await response.text());
    }
    const files = buildFiles(xorbs);
    const shard = serializeUploadShard({ files, xorbs: [] }, { kind: "xet-core" });
    // File 0 starts with chunk 0 of xorb 0; every accepted file's first chunk goes into the dedup index.
    const firstChunk = hashToHex(xorbs[0].info.chunks[files[0].terms[0].chunkStart].hash);

    // Upload, and kill the server once the first progress frame shows validation has begun.
    const response = await postShard(token, shard);
    assert.equal(response.status, 200);
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let received = "";
    while (!received.includes("\n")) {
      const { value, done } = await reader.read();
      assert.equal(done, false, "the stream ended before its first frame");
      received += decoder.decode(value, { stream: true });
    }
    server.child.kill("SIGKILL");
    assert.equal((await server.exited).signal, "SIGKILL");
    assert.deepEqual(JSON.parse(received.slice(0, received.indexOf("\n"))), { type: "validating", verified: 0, total: FILE_COUNT });
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        received += decoder.decode(value, { stream: true });
      }
    } catch {
      // The connection broke: that is what a crash looks like to the client.
    }
    assert.doesNotMatch(received, /"type":"result"/, "the server died before it could answer");

    server = await startCastorServer({ dataDir: dataDir.path });
    assert.deepEqual(rowCounts(), { xorbs: XORB_COUNT, shards: 0, files: 0, file_repos: 0, dedup_chunks: 0 }, "nothing partial survives");
    token = await writeToken(hubToken);
    const miss = await fetch(`${server.url}/v1/chunks/default/${firstChunk}`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(miss.status, 404, "the dedup index knows nothing of the shard");

    const retried = await (await postShard(token, shard)).text();
    assert.deepEqual(JSON.parse(retried.trimEnd().split("\n").at(-1)!), { type: "result", result: 1 });
    const counts = rowCounts();
    assert.equal(counts.shards, 1);
    assert.equal(counts.files, FILE_COUNT);
    assert.equal(counts.file_repos, FILE_COUNT);
    const hit = await fetch(`${server.url}/v1/chunks/default/${firstChunk}`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(hit.status, 200);
  });
});
