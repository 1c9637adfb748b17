/**
 * Several stateless castor nodes, as deployed when scaled out: two `castor serve` processes on
 * their own ports sharing one PostgreSQL database, one S3 bucket + prefix (Ceph RGW) and the
 * keys supplied by configuration (CASTOR_SIGNING_KEY_FILE, CASTOR_URL_KEY, CASTOR_DEDUP_KEY_SEED),
 * behind one public URL — a reverse proxy (test/helpers/proxy.ts) that is every node's
 * CASTOR_PUBLIC_URL. Shown with real clients and raw requests:
 *
 * - hub tokens and CAS tokens issued by node A are accepted by node B (and a token signed
 *   with any other key is not); a transfer URL signed by A is served by B;
 * - castor's client and hf_xet upload through A, and download through B byte-exact;
 * - node A SIGKILLed in the middle of a 200 MiB upload: the client's retry reaches B through
 *   the proxy, the upload succeeds, the file downloads byte-exact, and every object in the
 *   bucket is a complete, valid xorb — a half-received xorb is never visible;
 * - a replacement node started on the same configuration serves at once (nothing to copy).
 *
 * Needs the services: `eval "$(scripts/services.sh start)"`, then `npm test -- test/scaleout`.
 */
import assert from "node:assert/strict";
import { createHash, generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { GetObjectCommand, ListMultipartUploadsCommand } from "@aws-sdk/client-s3";
import { CastorClient, type UploadResult } from "../../src/client/index.js";
import { fileHash, hashFromHex, hashToHex, verificationHash } from "../../src/format/hash.js";
import type { ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, XorbValidator, type SerializedXorb } from "../../src/format/xorb.js";
import {
  assertSameBytes,
  HfXetClient,
  MIB,
  pseudoRandomBytes,
  readBytes,
  repeated,
  REPO,
  REPO_NAME,
  REPO_TYPE,
  writeTemp,
  type CastorFixture,
} from "../interop/harness.js";
import { ROUTE_HEADER, SERVED_BY_HEADER, startProxy, type ProxiedRequest, type TestProxy } from "../helpers/proxy.js";
import { s3TestClient } from "../helpers/scaleout-s3.js";
import { until } from "../helpers/wait.js";
import { casTokenSignedWith } from "../helpers/fixtures.js";
import {
  createScaleOutBackend,
  hubFixture,
  listScaleOutXorbs,
  scaleOutUnavailable,
  startCastorServer,
  type ScaleOutBackend,
  type LoggedRequest,
  type ServerProcess,
} from "../helpers/server.js";

// Fails the whole file, with the way to start the services, when they are not configured.
const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the multi-node tests need PostgreSQL and S3: ${unavailable}`);

type NodeName = "a" | "b";

let backend: ScaleOutBackend;
let proxy: TestProxy;
const nodes = {} as Record<NodeName, ServerProcess>;
/** Every node started, stopped at the end (killed ones included: stop() is then a no-op). */
const started: ServerProcess[] = [];
/** The repository and hub tokens, reached through the proxy's public URL. */
let castor: CastorFixture;
let work: string;

/** Starts a node on the shared backend with the proxy's URL as its public URL, and names it in the proxy. */
async function startNode(name: NodeName): Promise<ServerProcess> {
  const node = await startCastorServer({ scaleOut: backend, env: { CASTOR_PUBLIC_URL: proxy.url } });
  started.push(node);
  nodes[name] = node;
  proxy.setUpstream(name, node.url);
  return node;
}

before(async () => {
  backend = await createScaleOutBackend();
  proxy = await startProxy();
  await Promise.all([startNode("a"), startNode("b")]);
  // Repository and tokens made by the admin CLI against the shared database: no node owns them.
  castor = await hubFixture(nodes.a, { repoType: REPO_TYPE, repoName: REPO_NAME, baseUrl: proxy.url });
  work = await mkdtemp(join(tmpdir(), "castor-multi-node-"));
});

after(async () => {
  await proxy?.close();
  await Promise.all(started.map((node) => node.stop()));
  await backend?.cleanup();
  if (work) await rm(work, { recursive: true, force: true });
});

function client(): CastorClient {
  return new CastorClient({ endpoint: proxy.url, hubToken: castor.hubTokens.write, repo: REPO });
}

/** A CAS token from one node's token operation, asked of that node directly. */
async function casTokenFrom(node: ServerProcess, access: "read" | "write"): Promise<string> {
  const response = await fetch(`${node.url}/api/${REPO_TYPE}s/${REPO_NAME}/xet-${access}-token/main`, {
    headers: { authorization: `Bearer ${castor.hubTokens[access]}` },
  });
  assert.equal(response.status, 200, await response.clone().text());
  const body = (await response.json()) as { accessToken: string; casUrl: string };
  assert.equal(body.casUrl, proxy.url, "every node hands out the one public URL");
  return body.accessToken;
}

async function post(url: string, body: Uint8Array, token: string): Promise<Response> {
  return fetch(url, { method: "POST", body, headers: { authorization: `Bearer ${token}` } });
}

/** A registered file over all chunks of a fresh xorb, uploaded and registered through `node`. */
async function uploadSmallFile(node: ServerProcess, label: string): Promise<{ xorb: SerializedXorb; file: ShardFile; content: Buffer }> {
  const pieces = Array.from({ length: 24 }, (_, i) => Buffer.from(pseudoRandomBytes(`${label}-${i}`, 3000 + 97 * i)));
  const xorb = serializeXorb(pieces.map((data) => ({ data })));
  const chunks = xorb.info.chunks;
  const file: ShardFile = {
    fileHash: fileHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
    terms: [{ xorbHash: xorb.info.hash, chunkStart: 0, chunkEnd: chunks.length, unpackedBytes: xorb.info.uncompressedLength }],
    verificationHashes: [verificationHash(chunks.map((c) => c.hash))],
    sha256: null,
  };
  const token = await casTokenFrom(node, "write");
  const stored = await post(`${node.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, xorb.bytes, token);
  assert.equal(stored.status, 200, await stored.clone().text());
  const registered = await post(`${node.url}/v1/shards`, serializeUploadShard({ files: [file], xorbs: [] }, { kind: "xet-core" }), token);
  assert.equal(registered.status, 200, await registered.clone().text());
  return { xorb, file, content: Buffer.concat(pieces) };
}

const isXorbPost = (request: ProxiedRequest) => request.method === "POST" && /^\/(v1\/)?xorbs\/default\/[0-9a-f]{64}$/.test(request.path);
const isShardPost = (request: ProxiedRequest) => request.method === "POST" && /^\/(v1|v2)?\/?shards$/.test(request.path);
const isDownloadRequest = (request: ProxiedRequest) => /^\/(v1|v2)\/reconstructions\/|^\/v1\/transfer\//.test(request.path);

/** Asserts that the proxied requests `matching` exist and were all answered by `node`. */
function assertServedBy(requests: ProxiedRequest[], matching: (request: ProxiedRequest) => boolean, node: NodeName, what: string): void {
  const selected = requests.filter(matching);
  assert.ok(selected.length > 0, `no ${what} went through the proxy`);
  for (const request of selected) {
    assert.deepEqual(request.nodes, [node], `${what}: ${request.method} ${request.path} went to ${request.nodes.join(" → ")}`);
    assert.equal(request.outcome, "ok", `${what}: ${request.method} ${request.path} ended ${request.outcome}`);
  }
}

async function sha256OfFile(path: string): Promise<string> {
  return createHash("sha256")
    .update(await readFile(path))
    .digest("hex");
}

describe("one deployment, two nodes", () => {
  it("both nodes are ready and hand out the proxy's URL; hub tokens from the shared database work on both", async () => {
    for (const node of [nodes.a, nodes.b]) {
      assert.equal((await fetch(`${node.url}/readyz`)).status, 200);
      assert.equal(node.publicUrl, proxy.url);
      await casTokenFrom(node, "read");
      await casTokenFrom(node, "write");
    }
  });

  it("a CAS token issued by A is accepted by B, and the other way round; one signed with another key is refused", async () => {
    const fromA = await casTokenFrom(nodes.a, "write");
    const fromB = await casTokenFrom(nodes.b, "read");
    const absentChunk = hashToHex(randomBytes(32));
    // A dedup miss is 404: the token was accepted (a refused one is 401).
    const dedup = await fetch(`${nodes.b.url}/v1/chunks/default/${absentChunk}`, { headers: { authorization: `Bearer ${fromA}` } });
    assert.equal(dedup.status, 404, await dedup.text());

    const xorb = serializeXorb([{ data: pseudoRandomBytes("token-check", 20_000) }]);
    const xorbHex = hashToHex(xorb.info.hash);
    const stored = await post(`${nodes.b.url}/v1/xorbs/default/${xorbHex}`, xorb.bytes, fromA);
    assert.equal(stored.status, 200, await stored.clone().text());
    assert.deepEqual(await stored.json(), { was_inserted: true });
    // B stored it in the shared bucket and database; A sees it with B's token.
    const head = await fetch(`${nodes.a.url}/v1/xorbs/default/${xorbHex}`, { method: "HEAD", headers: { authorization: `Bearer ${fromB}` } });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get("content-length"), String(xorb.bytes.length));

    const strangerKey = generateKeyPairSync("ed25519").privateKey;
    const forged = await casTokenSignedWith(strangerKey, "write", { repo: { type: REPO_TYPE, id: REPO_NAME } });
    for (const node of [nodes.a, nodes.b]) {
      const refused = await fetch(`${node.url}/v1/chunks/default/${absentChunk}`, { headers: { authorization: `Bearer ${forged}` } });
      assert.equal(refused.status, 401, "a token signed with a key the deployment does not hold");
    }
  });

  it("a transfer URL signed by A is served by B, byte-exact; a tampered one is refused", async () => {
    const { xorb, file } = await uploadSmallFile(nodes.a, "transfer-check");
    const fileHex = hashToHex(file.fileHash);
    const answer = await fetch(`${nodes.a.url}/v2/reconstructions/${fileHex}`, { headers: { authorization: `Bearer ${await casTokenFrom(nodes.a, "read")}` } });
    assert.equal(answer.status, 200);
    const body = (await answer.json()) as { xorbs: Record<string, { url: string; ranges: { bytes: { start: number; end: number } }[] }[]> };
    const [entry] = body.xorbs[hashToHex(xorb.info.hash)];
    const signed = new URL(entry.url);
    assert.equal(signed.origin, proxy.url, "A signs URLs for the public URL");
    const { start, end } = entry.ranges[0].bytes;
    const expected = xorb.bytes.subarray(start, end + 1);

    const bLogStart = nodes.b.logLines().length;
    const aLogStart = nodes.a.logLines().length;
    const onB = await fetch(`${nodes.b.url}${signed.pathname}${signed.search}`, { headers: { range: `bytes=${start}-${end}` } });
    assert.equal(onB.status, 206, await onB.clone().text());
    assertSameBytes(new Uint8Array(await onB.arrayBuffer()), expected, "B serving A's transfer URL");
    // And through the public URL, routed to B.
    const viaProxy = await fetch(entry.url, { headers: { range: `bytes=${start}-${end}`, [ROUTE_HEADER]: "b" } });
    assert.equal(viaProxy.status, 206);
    assert.equal(viaProxy.headers.get(SERVED_BY_HEADER), "b");
    assertSameBytes(new Uint8Array(await viaProxy.arrayBuffer()), expected, "A's transfer URL through the proxy to B");
    const transfers = (requests: LoggedRequest[]) => requests.filter((line) => line.path.startsWith("/v1/transfer/"));
    const servedByB = transfers(await nodes.b.waitForRequests(bLogStart, (logged) => transfers(logged).length >= 2));
    assert.deepEqual(
      servedByB.map((line) => line.statusCode),
      [206, 206],
    );
    assert.equal(transfers(nodes.a.requestLog(aLogStart)).length, 0);

    const signature = signed.searchParams.get("s")!;
    signed.searchParams.set("s", (signature[0] === "A" ? "B" : "A") + signature.slice(1));
    const tampered = await fetch(`${nodes.b.url}${signed.pathname}${signed.search}`, { headers: { range: `bytes=${start}-${end}` } });
    assert.equal(tampered.status, 403);
  });

  it("castor's client uploads through A and downloads through B byte-exact; B deduplicates against A's upload", async () => {
    const random = pseudoRandomBytes("client-a-random", 10 * MIB);
    const blocks = repeated(pseudoRandomBytes("client-a-block", MIB), 12);
    const paths = [await writeTemp(work, "random.bin", random), await writeTemp(work, "blocks.bin", blocks)];

    proxy.setRoute({ mode: "pin", node: "a" });
    let mark = proxy.requests().length;
    const uploaded = await client().upload(paths);
    let requests = proxy.requests(mark);
    assertServedBy(requests, isXorbPost, "a", "xorb uploads");
    assertServedBy(requests, isShardPost, "a", "shard registrations");

    proxy.setRoute({ mode: "pin", node: "b" });
    mark = proxy.requests().length;
    const reader = client();
    for (const [i, content] of [random, blocks].entries()) {
      const output = join(work, `client-copy-${i}.bin`);
      const result = await reader.download({ fileHash: uploaded.files[i].fileHash, output });
      assert.equal(result.verified, "file-hash");
      assertSameBytes(await readBytes(output), content, `file ${i} downloaded through B`);
    }
    const part = join(work, "client-part.bin");
    await reader.download({ fileHash: uploaded.files[1].fileHash, output: part, range: { start: 3 * MIB - 17, end: 7 * MIB + 5 } });
    assertSameBytes(await readBytes(part), blocks.subarray(3 * MIB - 17, 7 * MIB + 6), "a range downloaded through B");
    requests = proxy.requests(mark);
    assertServedBy(requests, isDownloadRequest, "b", "reconstructions and transfers");

    // A fresh session through B: every chunk is known from A's upload (global dedup on the shared stores).
    const xorbsBefore = await castor.countStoredXorbs();
    const again = await client().upload([paths[0]]);
    assert.equal(again.files[0].fileHash, uploaded.files[0].fileHash);
    assert.equal(again.files[0].newBytes, 0);
    assert.equal(again.xorbs.inserted + again.xorbs.alreadyStored, 0, "no xorb was even sent");
    assert.ok(again.globalDedup.hits >= 1);
    assert.equal(await castor.countStoredXorbs(), xorbsBefore);
  });

  it("hf_xet uploads through A and downloads through B; castor's client reads hf_xet's file through B", async () => {
    const hfXet = await HfXetClient.create(castor);
    try {
      const content = pseudoRandomBytes("hf-xet-through-a", 6 * MIB + 12_345);
      const source = await writeTemp(work, "hf-xet-source.bin", content);

      proxy.setRoute({ mode: "pin", node: "a" });
      let mark = proxy.requests().length;
      const { files } = await hfXet.upload([source]);
      assert.equal(files[0].size, content.length);
      let requests = proxy.requests(mark);
      assertServedBy(requests, isXorbPost, "a", "hf_xet's xorb uploads");
      assertServedBy(requests, isShardPost, "a", "hf_xet's shard registration");

      proxy.setRoute({ mode: "pin", node: "b" });
      mark = proxy.requests().length;
      const output = join(work, "hf-xet-copy.bin");
      await hfXet.download([{ hash: files[0].hash, size: content.length, path: output }], { freshCache: true });
      assertSameBytes(await readBytes(output), content, "hf_xet download through B");
      const castorCopy = join(work, "hf-xet-castor-copy.bin");
      const result = await client().download({ fileHash: files[0].hash, output: castorCopy });
      assert.equal(result.verified, "file-hash");
      assertSameBytes(await readBytes(castorCopy), content, "castor's client download of hf_xet's file through B");
      requests = proxy.requests(mark);
      assertServedBy(requests, isDownloadRequest, "b", "hf_xet's and castor's downloads");
    } finally {
      await hfXet.dispose();
    }
  });
});

describe("a node dies", () => {
  it("SIGKILL of A in the middle of a 200 MiB upload: the client's retry lands on B, nothing is lost, no partial object is visible", async () => {
    const content = pseudoRandomBytes("killed-mid-upload", 200 * MIB);
    const source = await writeTemp(work, "big.bin", content);
    const expectedSha256 = createHash("sha256").update(content).digest("hex");
    proxy.setRoute({ mode: "pin", node: "a" });
    const mark = proxy.requests().length;
    const nodeA = nodes.a;

    // Kill A once it has stored at least one xorb and is 4 MiB into receiving another: the
    // upload then has work done by A that must survive and work cut off that must be redone.
    let inFlightAtKill: ProxiedRequest[] = [];
    let storedByA: string[] = [];
    const killed = new Promise<void>((resolve) => {
      const stopWatching = proxy.onRequestBody((request, node) => {
        if (node !== "a" || !isXorbPost(request) || request.requestBytes < 4 * MIB) return;
        const sinceMark = proxy.requests(mark);
        const completed = sinceMark.filter((r) => isXorbPost(r) && r.nodes.at(-1) === "a" && r.outcome === "ok" && r.status === 200);
        if (completed.length === 0) return;
        nodeA.child.kill("SIGKILL");
        stopWatching();
        storedByA = completed.map((r) => r.path.split("/").at(-1)!);
        // The request whose body is passing by right now is cut for sure. Other requests still
        // pending may have had their whole body and their answer on the way: those can end well.
        inFlightAtKill = sinceMark.filter((r) => r.id === request.id);
        resolve();
      });
    });

    const upload = client().upload([source]);
    const first = await Promise.race([killed.then(() => "killed" as const), upload.then(() => "finished" as const)]);
    assert.equal(first, "killed", `the upload finished before A could be killed mid-xorb; proxy log: ${JSON.stringify(proxy.requests(mark))}`);
    const result: UploadResult = await upload;
    assert.equal((await nodeA.exited).signal, "SIGKILL");

    // Nothing lost: every byte was new and reached the store, and the file is registered.
    assert.equal(result.files[0].size, content.length);
    assert.equal(result.files[0].newBytes, content.length);
    assert.equal(result.files[0].sha256, expectedSha256);

    // The proxy saw A fail and the client's retries go to B.
    const requests = proxy.requests(mark);
    assert.ok(inFlightAtKill.length >= 1);
    for (const cut of inFlightAtKill) {
      const attempts = requests.filter((r) => r.path === cut.path && r.method === "POST");
      const failed = attempts.find((r) => r.id === cut.id)!;
      assert.notEqual(failed.outcome, "ok", `the xorb A was receiving (${cut.path}) did not fail`);
      const retried = attempts.filter((r) => r.id > cut.id && r.outcome === "ok" && r.status === 200);
      assert.ok(retried.length >= 1, `no successful retry of ${cut.path}: ${JSON.stringify(attempts)}`);
      assert.equal(retried.at(-1)!.nodes.at(-1), "b", "the retry reached B");
    }
    const shardPosts = requests.filter((r) => isShardPost(r) && r.status === 200);
    assert.deepEqual(
      shardPosts.map((r) => r.nodes.at(-1)),
      ["b"],
      "the shard was registered by B",
    );

    // The download through B is byte-exact (and the client verified it against the file hash).
    proxy.setRoute({ mode: "pin", node: "b" });
    const output = join(work, "big-copy.bin");
    const downloaded = await client().download({ fileHash: result.files[0].fileHash, output });
    assert.equal(downloaded.verified, "file-hash");
    assert.equal((await stat(output)).size, content.length);
    assert.equal(await sha256OfFile(output), expectedSha256);
    await rm(output);

    // No partial object: every xorb in the bucket validates in full against its own name —
    // those A stored before dying and the one it was receiving (absent, or complete if re-sent).
    const stored = await listScaleOutXorbs(backend);
    const storedHexes = new Set(stored.map((entry) => entry.hex));
    for (const hex of storedByA) assert.ok(storedHexes.has(hex), `xorb ${hex}, stored by A before it died, is gone`);
    for (const cut of inFlightAtKill) assert.ok(storedHexes.has(cut.path.split("/").at(-1)!), "the cut-off xorb was completed through B");
    const s3 = s3TestClient();
    try {
      for (const { hex, size } of stored) {
        const object = await s3.send(new GetObjectCommand({ Bucket: backend.env.CASTOR_S3_BUCKET, Key: `${backend.s3Prefix}xorbs/${hex}` }));
        const validator = new XorbValidator({ expectedHash: hashFromHex(hex) });
        for await (const piece of object.Body as Readable) validator.push(piece as Uint8Array);
        const info = validator.finish();
        assert.equal(info.serializedLength, size, `xorb ${hex}: the object is exactly the chunk stream`);
      }
      const uploads = await s3.send(new ListMultipartUploadsCommand({ Bucket: backend.env.CASTOR_S3_BUCKET, Prefix: backend.s3Prefix }));
      assert.deepEqual(uploads.Uploads ?? [], [], "no unfinished multipart upload is left in the prefix");
    } finally {
      s3.destroy();
    }
  });

  it("a replacement for A started on the same configuration serves at once, next to B", async () => {
    const replacement = await startNode("a");
    assert.equal((await fetch(`${replacement.url}/readyz`)).status, 200);
    const { file, content } = await uploadSmallFile(nodes.b, "after-replacement");
    proxy.setRoute({ mode: "round-robin" });
    const mark = proxy.requests().length;
    const reader = client();
    for (let i = 0; i < 4; i++) {
      const output = join(work, `round-robin-${i}.bin`);
      await reader.download({ fileHash: hashToHex(file.fileHash), output });
      assertSameBytes(await readBytes(output), content, `download ${i} through both nodes`);
    }
    const served = new Set(
      proxy
        .requests(mark)
        .filter(isDownloadRequest)
        .map((r) => r.nodes.at(-1)),
    );
    assert.deepEqual([...served].sort(), ["a", "b"], "round-robin spread the downloads over both nodes");
  });

  it("a xorb cut off halfway by its node's death leaves nothing in the bucket or the database; another node then stores it whole", async () => {
    const doomed = await startCastorServer({ scaleOut: backend, env: { CASTOR_PUBLIC_URL: proxy.url } });
    started.push(doomed);
    const xorb = serializeXorb(Array.from({ length: 128 }, (_, i) => ({ data: pseudoRandomBytes(`doomed-${i}`, 64 * 1024) })));
    const xorbHex = hashToHex(xorb.info.hash);
    const token = await casTokenFrom(nodes.b, "write");

    // Send half the body, wait until the node is staging it, then kill the node.
    const target = new URL(`${doomed.url}/v1/xorbs/default/${xorbHex}`);
    const request = http.request({
      hostname: target.hostname,
      port: target.port,
      path: target.pathname,
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-length": String(xorb.bytes.length) },
    });
    const requestFailed = new Promise<string>((resolve) => {
      request.on("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
      request.on("response", (response) => resolve(`answered ${response.statusCode}`));
    });
    request.write(xorb.bytes.subarray(0, xorb.bytes.length >> 1));
    const stagingDir = join(doomed.dataDir, "s3-staging");
    await until(
      async () => {
        for (const name of await readdir(stagingDir).catch(() => [] as string[])) {
          if (name.endsWith(".part") && (await stat(join(stagingDir, name))).size > 0) return true;
        }
        return false;
      },
      "the node to stage the half-sent xorb",
      10_000,
      20,
    );
    doomed.child.kill("SIGKILL");
    assert.equal((await doomed.exited).signal, "SIGKILL");
    assert.match(await requestFailed, /^E[A-Z]+$/, "the upload failed with a network error, never an answer");

    const readToken = await casTokenFrom(nodes.b, "read");
    const head = await fetch(`${nodes.b.url}/v1/xorbs/default/${xorbHex}`, { method: "HEAD", headers: { authorization: `Bearer ${readToken}` } });
    assert.equal(head.status, 404, "the half-received xorb is not recorded");
    assert.ok(!(await listScaleOutXorbs(backend)).some((entry) => entry.hex === xorbHex), "the half-received xorb is not in the bucket");

    const whole = await post(`${nodes.b.url}/v1/xorbs/default/${xorbHex}`, xorb.bytes, token);
    assert.equal(whole.status, 200, await whole.clone().text());
    assert.deepEqual(await whole.json(), { was_inserted: true });
    const stored = (await listScaleOutXorbs(backend)).find((entry) => entry.hex === xorbHex);
    assert.equal(stored?.size, xorb.bytes.length);
  });
});
