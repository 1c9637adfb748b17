/**
 * Shard upload and the dedup query end to end: a real `castor serve` process, real tokens from
 * the hub operation, xorbs uploaded through POST /v1/xorbs first, then the shard routes
 * (/v1/shards, /shards, /v2/shards NDJSON) and GET /v1/chunks. The last suite runs the routes
 * in-process to watch the NDJSON heartbeat with a short interval.
 */
import assert from "node:assert/strict";
import { generateKeyPairSync, createPrivateKey } from "node:crypto";
import { readFile } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CasTokenVerifier } from "../../src/auth/cas-token.js";
import { ShardRegistrationService } from "../../src/cas/shard-registration.js";
import { fileHash, hashFromHex, hashToHex, keyedChunkHash, verificationHash, type Hash } from "../../src/format/hash.js";
import { parseFullShard, type ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { createHttpApp } from "../../src/http/app.js";
import { casScope } from "../../src/http/cas-scope.js";
import { createLogger } from "../../src/http/logging.js";
import { shardRoutes } from "../../src/http/shard-routes.js";
import { packChunkTable } from "../../src/metadata/cas.js";
import type { MetadataStore, Repo } from "../../src/metadata/store.js";
import { casTokenSignedWith } from "../helpers/fixtures.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { fromHex, loadVector, makeData } from "../helpers/vectors.js";
import { within } from "../helpers/wait.js";

const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const VECTOR_XORB_HEX: string = xorbVector.expected.xorb_hash;
const VECTOR_CHUNKS: Hash[] = xorbVector.expected.chunks.map((c: { chunk_hash: string }) => hashFromHex(c.chunk_hash));
const MAX_SHARD_BYTES = 256 * 1024;

let server: ServerProcess;
let writeToken: string;
let readToken: string;

before(async () => {
  server = await startCastorServer({ env: { CASTOR_MAX_SHARD_BYTES: String(MAX_SHARD_BYTES) } });
  const fixture = await hubFixture(server, { repoType: "model", repoName: "alice/bert" });
  writeToken = (await fixture.casToken("write")).accessToken;
  readToken = (await fixture.casToken("read")).accessToken;
  await uploadXorb(fromHex(xorbVector.body_hex), VECTOR_XORB_HEX);
});

after(async () => {
  await server?.stop();
});

function post(path: string, body: Uint8Array, token = writeToken, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${server.url}${path}`, { method: "POST", body, headers: { authorization: `Bearer ${token}`, ...headers } });
}

function get(path: string, token: string | null = readToken): Promise<Response> {
  return fetch(`${server.url}${path}`, { headers: token === null ? {} : { authorization: `Bearer ${token}` } });
}

async function uploadXorb(bytes: Uint8Array, hex: string): Promise<void> {
  const response = await post(`/v1/xorbs/default/${hex}`, bytes);
  assert.equal(response.status, 200, await response.text());
}

async function expectError(response: Response, status: number, message: RegExp): Promise<void> {
  const text = await response.text();
  assert.equal(response.status, status, text);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  const body = JSON.parse(text) as { error: string };
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.match(body.error, message);
}

/** The `\n`-terminated JSON frames of an NDJSON answer. */
async function framesOf(response: Response): Promise<Record<string, unknown>[]> {
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "application/x-ndjson");
  assert.equal(response.headers.get("cache-control"), "no-cache");
  assert.equal(response.headers.get("content-encoding"), null, "never compressed");
  const text = await response.text();
  assert.ok(text.endsWith("\n"), "every frame ends with a newline");
  return text
    .slice(0, -1)
    .split("\n")
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** A correct single-term file over chunks [start, end) of `xorb`. */
function fileOver(xorb: SerializedXorb["info"], start: number, end: number): ShardFile {
  const chunks = xorb.chunks.slice(start, end);
  return {
    fileHash: fileHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
    terms: [{ xorbHash: xorb.hash, chunkStart: start, chunkEnd: end, unpackedBytes: chunks.reduce((sum, c) => sum + c.uncompressedLength, 0) }],
    verificationHashes: [verificationHash(chunks.map((c) => c.hash))],
    sha256: null,
  };
}

const shardOf = (files: ShardFile[]) => serializeUploadShard({ files, xorbs: [] }, { kind: "xet-core" });

const vectorInfo = serializeXorb(
  xorbVector.chunk_data_hex.map((hex: string, i: number) => ({ data: fromHex(hex), scheme: xorbVector.chunk_inputs[i].scheme })),
).info;

describe("POST /v1/shards and /shards", () => {
  it('answers exactly {"result":1} for a new shard and {"result":0} for a known one, whatever its wire variant', async () => {
    const first = await post("/v1/shards", fromHex(shardVector.xet_core_style_hex));
    assert.equal(first.status, 200);
    assert.match(first.headers.get("content-type") ?? "", /^application\/json/);
    assert.equal(await first.text(), '{"result":1}');

    const again = await post("/v1/shards", fromHex(shardVector.xet_core_style_hex));
    assert.equal(await again.text(), '{"result":0}');
    // hf.js sends application/octet-stream; the legacy path is the same operation.
    const legacy = await post("/shards", fromHex(shardVector.huggingface_js_style_hex), writeToken, { "content-type": "application/octet-stream" });
    assert.equal(await legacy.text(), '{"result":0}');
  });

  it("refuses a shard naming a xorb that was never uploaded", async () => {
    const absent = serializeXorb([{ data: makeData(900, 11, 3) }]).info;
    await expectError(
      await post("/v1/shards", shardOf([fileOver(absent, 0, 1)])),
      400,
      new RegExp(`^Shard rejected: term 0 of file [0-9a-f]{64} \\(file block 0\\) references xorb ${hashToHex(absent.hash)}, which this server does not have`),
    );
  });

  it("refuses a wrong file hash", async () => {
    const file = fileOver(vectorInfo, 0, 2);
    file.fileHash = fileOver(vectorInfo, 0, 3).fileHash;
    await expectError(
      await post("/v1/shards", shardOf([file])),
      400,
      /^Shard rejected: file [0-9a-f]{64} \(file block 0\): the file's chunks \(2 chunks, 1517 bytes\) hash to/,
    );
  });

  it("refuses a wrong verification entry", async () => {
    const file = fileOver(vectorInfo, 1, 3);
    file.verificationHashes = [verificationHash([VECTOR_CHUNKS[2], VECTOR_CHUNKS[1]])];
    await expectError(
      await post("/v1/shards", shardOf([file])),
      400,
      /^Shard rejected: verification entry 0 of file [0-9a-f]{64} \(file block 0\) does not match chunks \[1, 3\)/,
    );
  });

  it("refuses a malformed body with 400 and an oversized one with 413", async () => {
    await expectError(await post("/v1/shards", new TextEncoder().encode("not a shard")), 400, /^Shard rejected: invalid shard: not a shard/);
    await expectError(await post("/v1/shards", new Uint8Array(MAX_SHARD_BYTES + 1)), 413, /exceeds the 262144-byte limit of POST \/v1\/shards/);
  });

  it("needs a write token: read → 403, expired → 401, none → 401", async () => {
    const body = fromHex(shardVector.xet_core_style_hex);
    await expectError(await post("/v1/shards", body, readToken), 403, /needs a write token/);
    const signingKey = createPrivateKey(await readFile(join(server.dataDir, "keys", "jwt-signing-key.pem"), "utf8"));
    const anHourAgo = () => new Date(Date.now() - 3600_000);
    const expired = await casTokenSignedWith(signingKey, "write", { ttlSeconds: 60, now: anHourAgo });
    await expectError(await post("/v1/shards", body, expired), 401, /expired/);
    await expectError(await fetch(`${server.url}/v1/shards`, { method: "POST", body }), 401, /Missing access token/);
    await expectError(await post("/v2/shards", body, readToken), 403, /needs a write token/);
  });
});

describe("POST /v2/shards (NDJSON)", () => {
  const xorb = serializeXorb(Array.from({ length: 6 }, (_, i) => ({ data: makeData(2000 + i * 100, 7 + i, i) })));
  const shard = () => shardOf([fileOver(xorb.info, 0, 6), fileOver(xorb.info, 2, 5)]);

  before(async () => {
    await uploadXorb(xorb.bytes, hashToHex(xorb.info.hash));
  });

  it("streams progress frames, then a result frame: 1 for a new shard, 0 for a known one", async () => {
    const frames = await framesOf(await post("/v2/shards", shard()));
    assert.deepEqual(frames[0], { type: "validating", verified: 0, total: 2 });
    assert.deepEqual(frames.at(-1), { type: "result", result: 1 });
    for (const frame of frames.slice(1, -1)) assert.ok(["validating", "committing"].includes(frame.type as string), JSON.stringify(frame));

    const again = await framesOf(await post("/v2/shards", shard()));
    assert.deepEqual(again.at(-1), { type: "result", result: 0 });
  });

  it("reports a refused shard in a terminal error frame that is not retryable", async () => {
    const file = fileOver(xorb.info, 0, 3);
    file.terms[0] = { ...file.terms[0], unpackedBytes: file.terms[0].unpackedBytes + 1 };
    const frames = await framesOf(await post("/v2/shards", shardOf([file])));
    const last = frames.at(-1)!;
    assert.deepEqual(Object.keys(last).sort(), ["message", "retryable", "type"]);
    assert.equal(last.type, "error");
    assert.equal(last.retryable, false);
    assert.match(
      last.message as string,
      /^Shard rejected: term 0 of file [0-9a-f]{64} \(file block 0\) says chunks \[0, 3\) of xorb [0-9a-f]{64} unpack to \d+ bytes, but they hold \d+$/,
    );

    const malformed = await framesOf(await post("/v2/shards", new TextEncoder().encode("garbage")));
    assert.equal(malformed.length, 1);
    assert.equal(malformed[0].type, "error");
    assert.match(malformed[0].message as string, /^Shard rejected: invalid shard: /);
  });

  it("sends the end of the answer with its terminal frame, so a client that stops reading there leaves a finished answer", async () => {
    // xet-core stops at the terminal frame. Were the chunked body's end marker written
    // separately, the client would hang up on an answer still open (losing the keep-alive
    // connection; a proxy logs an abort). Read raw: the piece holding the frame holds the end too.
    const body = shard();
    const url = new URL(server.url);
    const socket = connect(Number(url.port), url.hostname);
    const head = [
      "POST /v2/shards HTTP/1.1",
      `host: ${url.host}`,
      `authorization: Bearer ${writeToken}`,
      "content-type: application/octet-stream",
      `content-length: ${body.length}`,
      "",
      "",
    ].join("\r\n");
    socket.write(head);
    socket.write(body);
    const pieceWithResult = await new Promise<string>((resolve, reject) => {
      socket.on("data", (piece: Buffer) => {
        const text = piece.toString("latin1");
        if (text.includes('"type":"result"')) resolve(text);
      });
      socket.on("error", reject);
      socket.on("close", () => reject(new Error("connection closed before the terminal frame")));
    });
    socket.destroy();
    assert.match(pieceWithResult, /\{"type":"result","result":0\}\n\r\n0\r\n\r\n$/);
  });

  it("answers errors found before streaming with their status codes", async () => {
    await expectError(await post("/v2/shards", new Uint8Array(MAX_SHARD_BYTES + 1)), 413, /limit of POST \/v2\/shards/);
    await expectError(await fetch(`${server.url}/v2/shards`, { method: "POST", body: shard() }), 401, /Missing access token/);
  });
});

describe("GET /v1/chunks/{prefix}/{hash}", () => {
  before(async () => {
    // Idempotent: the first suite may or may not have registered it already.
    assert.equal((await post("/v1/shards", fromHex(shardVector.xet_core_style_hex))).status, 200);
  });

  it("answers an indexed chunk with a complete keyed shard a client can match against", async () => {
    for (const path of [
      `/v1/chunks/default/${hashToHex(VECTOR_CHUNKS[0])}`,
      `/v1/chunks/default-merkledb/${hashToHex(VECTOR_CHUNKS[0])}`,
      `/chunks/default/${hashToHex(VECTOR_CHUNKS[0])}`,
    ]) {
      const response = await get(path);
      assert.equal(response.status, 200, path);
      assert.equal(response.headers.get("content-type"), "application/octet-stream");
      assert.equal(response.headers.get("content-encoding"), null);
      const answer = parseFullShard(new Uint8Array(await response.arrayBuffer()));
      assert.equal(answer.files.length, 0);
      assert.deepEqual(
        answer.xorbs.map((x) => hashToHex(x.xorbHash)),
        [VECTOR_XORB_HEX],
      );
      const keyed = keyedChunkHash(answer.footer.hmacKey, VECTOR_CHUNKS[0]);
      assert.deepEqual(answer.xorbs[0].chunks[0].hash, keyed, "the client finds its chunk under the footer key");
      assert.equal(answer.footer.keyExpiry - answer.footer.creationTimestamp, 604_800n);
      assert.ok(Math.abs(Number(answer.footer.creationTimestamp) - Date.now() / 1000) < 60);
    }
  });

  it("answers 404 for a chunk not tracked, 400 for a bad prefix or hash, 401 without a token", async () => {
    await expectError(await get(`/v1/chunks/default/${hashToHex(VECTOR_CHUNKS[1])}`), 404, /is not tracked by global deduplication/);
    await expectError(await get(`/v1/chunks/xorbs/${hashToHex(VECTOR_CHUNKS[0])}`), 400, /^Unknown chunk prefix "xorbs"/);
    await expectError(await get(`/v1/chunks/default/${hashToHex(VECTOR_CHUNKS[0]).toUpperCase()}`), 400, /^Malformed chunk hash/);
    await expectError(await get(`/v1/chunks/default/abc`), 400, /^Malformed chunk hash "abc"/);
    await expectError(await get(`/v1/chunks/default/${hashToHex(VECTOR_CHUNKS[0])}`, null), 401, /Missing access token/);
  });
});

describe("/v2/shards heartbeat (in-process, short interval)", () => {
  it("re-sends the last progress frame while validation waits, then ends with the result", async () => {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const repo: Repo = { id: 7, type: "model", name: "alice/bert", createdAt: new Date(), private: true };
    const registered: unknown[] = [];
    // The validation's metadata read waits until the client has received the progress frame
    // four times; only heartbeats can send it again meanwhile.
    const WAITING = '{"type":"validating","verified":0,"total":3}';
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const slowStore = {
      getChunkTables: async () => {
        await released;
        return new Map([[VECTOR_XORB_HEX, packChunkTable(vectorInfo.chunks, "the vector xorb")]]);
      },
      registerShard: async (registration: unknown) => {
        registered.push(registration);
        return true;
      },
    };
    const app = createHttpApp({ logger: createLogger("silent") });
    await app.register(casScope, {
      verifier: new CasTokenVerifier(publicKey),
      routes: (cas) =>
        cas.register(shardRoutes, {
          shards: new ShardRegistrationService({ metadata: slowStore, blobs: { putIfAbsent: async () => ({ inserted: true }) }, maxShardBytes: 1 << 20 }),
          repos: { getRepo: async (type, name) => (type === repo.type && name === repo.name ? repo : null) } satisfies Pick<MetadataStore, "getRepo">,
          heartbeatIntervalMs: 50,
        }),
    });
    await app.listen({ host: "127.0.0.1", port: 0 });
    try {
      const token = await casTokenSignedWith(privateKey, "write");
      const address = app.server.address() as { port: number };
      const response = await fetch(`http://127.0.0.1:${address.port}/v2/shards`, {
        method: "POST",
        body: fromHex(shardVector.xet_core_style_hex),
        headers: { authorization: `Bearer ${token}` },
      });
      const [watched, kept] = response.body!.tee();
      void (async () => {
        let text = "";
        const decoder = new TextDecoder();
        for await (const piece of watched) {
          text += decoder.decode(piece, { stream: true });
          if (text.split("\n").filter((line) => line === WAITING).length >= 4) release();
        }
      })();
      const frames = await within(framesOf(new Response(kept, response)), "the progress frame four times, then the result", 10_000);
      const waiting = frames.filter((f) => JSON.stringify(f) === WAITING);
      assert.ok(waiting.length >= 4, `the progress frame is repeated while waiting (${JSON.stringify(frames)})`);
      assert.deepEqual(frames.at(-1), { type: "result", result: 1 });
      assert.equal(registered.length, 1);
    } finally {
      release();
      await app.close();
    }
  });
});
