/**
 * A representative end-to-end run in scale-out mode: a real `castor serve` on PostgreSQL and
 * Ceph RGW (a fresh database and key prefix of its own, keys supplied by configuration), driven
 * by the real clients and by raw protocol requests. The embedded suite (test/e2e, test/interop)
 * covers every case in depth; this file checks that each feature holds on the scale-out
 * backends: uploads by castor's client and hf_xet, deduplication (within a session, across
 * sessions through the global dedup query, against stored xorbs), V2/V1 reconstruction with
 * byte ranges (the reconstruction.json vector cases), transfers (single ranges and
 * multipart/byteranges streamed from S3, refusals), shard registration over /v2/shards, and
 * token expiry.
 *
 * Needs the services: `eval "$(scripts/services.sh start)"`, then `npm test -- test/scaleout`.
 */
import assert from "node:assert/strict";
import { createPrivateKey } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient, upload, type UploadResult } from "../../src/client/index.js";
import { hashToHex } from "../../src/format/hash.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb } from "../../src/format/xorb.js";
import {
  assertSameBytes,
  HfXetClient,
  hfJsDownload,
  MIB,
  pseudoRandomBytes,
  readBytes,
  repeated,
  REPO,
  REPO_NAME,
  REPO_TYPE,
  sha256Hex,
  writeTemp,
  type CastorFixture,
} from "../interop/harness.js";
import { hubFixture, listScaleOutXorbs, scaleOutUnavailable, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { downloadAnswer, fileOfChunks, vectorFileContents, withPlaceholderUrls, type Answer } from "../helpers/reconstruction-answer.js";
import { fromHex, loadVector } from "../helpers/vectors.js";
import { casTokenSignedWith } from "../helpers/fixtures.js";

// Fails the whole file, with the way to start the services, when they are not configured.
const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the scale-out end-to-end tests need PostgreSQL and S3: ${unavailable}`);

const reconstructionVector = loadVector("reconstruction.json");
const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const VECTOR_CONTENT = vectorFileContents();

let server: ServerProcess;
let castor: CastorFixture;
let work: string;
let readToken: string;
let writeToken: string;

before(async () => {
  server = await startCastorServer({ scaleOut: true });
  castor = await hubFixture(server, { repoType: REPO_TYPE, repoName: REPO_NAME });
  work = await mkdtemp(join(tmpdir(), "castor-scaleout-e2e-"));
  readToken = (await castor.casToken("read")).accessToken;
  writeToken = (await castor.casToken("write")).accessToken;
});

after(async () => {
  // Stops the process, then drops its database and deletes its key prefix.
  await server?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

function client(): CastorClient {
  return new CastorClient({ endpoint: server.url, hubToken: castor.hubTokens.write, repo: REPO });
}

function post(path: string, body: Uint8Array, token = writeToken): Promise<Response> {
  return fetch(`${server.url}${path}`, { method: "POST", body, headers: { authorization: `Bearer ${token}` } });
}

function reconstruct(path: string, range?: string, token = readToken): Promise<Response> {
  return fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${token}`, ...(range === undefined ? {} : { range }) } });
}

/** Total size of the xorb objects in the server's key prefix (read from the bucket). */
async function storedXorbBytes(): Promise<number> {
  return (await listScaleOutXorbs(server.scaleOut!)).reduce((sum, entry) => sum + entry.size, 0);
}

/** A file over single chunks `indices` of `xorb` (one term per chunk). */
describe("castor's client on the scale-out backends", () => {
  let uploaded: UploadResult;
  const contents = new Map<string, Uint8Array>([
    ["empty", new Uint8Array(0)],
    ["one-byte", pseudoRandomBytes("one-byte", 1)],
    ["8191", pseudoRandomBytes("8191", 8191)],
    ["1mib", pseudoRandomBytes("1mib", MIB)],
    ["10mib", pseudoRandomBytes("10mib", 10 * MIB)],
    ["blocks", repeated(pseudoRandomBytes("block", MIB), 12)],
  ]);
  const paths = new Map<string, string>();
  const hashOf = (name: string) => uploaded.files.find((f) => f.path === paths.get(name))!.fileHash;

  before(async () => {
    for (const [name, bytes] of contents) paths.set(name, await writeTemp(work, name, bytes));
    uploaded = await client().upload([...paths.values()]);
  });

  it("uploads a batch in one shard and downloads every file byte-exact, verified", async () => {
    assert.equal(uploaded.shards.sent, 1);
    const blocks = uploaded.files.find((f) => f.path === paths.get("blocks"))!;
    assert.ok(
      blocks.newBytes < 2 * MIB && blocks.dedupedBytes > 10 * MIB,
      `12 copies of one block: ${blocks.newBytes} new, ${blocks.dedupedBytes} deduplicated`,
    );
    const reader = client();
    for (const [name, bytes] of contents) {
      const output = join(work, `${name}.copy`);
      const result = await reader.download({ fileHash: hashOf(name), output });
      assert.equal(result.verified, "file-hash", name);
      assertSameBytes(await readBytes(output), bytes, name);
    }
  });

  it("downloads byte ranges: first and last byte, across terms, past the end", async () => {
    const reader = client();
    for (const name of ["10mib", "blocks"]) {
      const bytes = contents.get(name)!;
      for (const [start, end] of [
        [0, 0],
        [bytes.length - 1, bytes.length - 1],
        [MIB - 100, 3 * MIB + 100],
        [bytes.length - 10, bytes.length + 1000],
      ]) {
        const output = join(work, `${name}-${start}-${end}`);
        await reader.download({ fileHash: hashOf(name), output, range: { start, end } });
        assertSameBytes(await readBytes(output), bytes.subarray(start, Math.min(end, bytes.length - 1) + 1), `${name} ${start}-${end}`);
      }
    }
  });

  it("deduplicates across sessions (global dedup query) and against stored xorbs", async () => {
    const before = await storedXorbBytes();
    const again = await upload({ endpoint: server.url, hubToken: castor.hubTokens.write, repo: REPO, files: [paths.get("10mib")!] });
    assert.equal(again.files[0].fileHash, hashOf("10mib"));
    assert.equal(again.files[0].newBytes, 0);
    assert.equal(again.xorbs.inserted + again.xorbs.alreadyStored, 0, "no xorb was even sent");
    assert.ok(again.globalDedup.hits >= 1);
    assert.equal(await storedXorbBytes(), before);

    const edited = Buffer.from(contents.get("10mib")!);
    pseudoRandomBytes("edit", 1024).forEach((byte, i) => {
      edited[5 * MIB + i] = byte;
    });
    const editedPath = await writeTemp(work, "edited", edited);
    const result = await client().upload([editedPath]);
    const growth = (await storedXorbBytes()) - before;
    assert.ok(growth > 0 && growth < 512 * 1024, `storage grew by ${growth} bytes for a 1 KiB edit`);
    const output = join(work, "edited.copy");
    assert.equal((await client().download({ fileHash: result.files[0].fileHash, output })).verified, "file-hash");
    assertSameBytes(await readBytes(output), edited, "the edited copy");
  });
});

describe("hf_xet on the scale-out backends", () => {
  it("uploads and downloads; castor's client reads hf_xet's file; the shard's SHA-256 is indexed in PostgreSQL", async () => {
    const hfXet = await HfXetClient.create(castor);
    try {
      const content = pseudoRandomBytes("hf-xet-scaleout", 5 * MIB + 321);
      const { files } = await hfXet.upload([await writeTemp(work, "hf-xet.bin", content)]);
      assert.equal(files[0].size, content.length);
      assert.equal(files[0].sha256, sha256Hex(content));

      const output = join(work, "hf-xet.copy");
      await hfXet.download([{ hash: files[0].hash, size: content.length, path: output }], { freshCache: true });
      assertSameBytes(await readBytes(output), content, "hf_xet's download");
      const castorCopy = join(work, "hf-xet.castor-copy");
      assert.equal((await client().download({ fileHash: files[0].hash, output: castorCopy })).verified, "file-hash");
      assertSameBytes(await readBytes(castorCopy), content, "castor's client reading hf_xet's upload");
      assert.deepEqual(await castor.lookupBySha256(files[0].sha256), { hash: files[0].hash, size: content.length });

      // hf_xet uploading the same bytes again sends no xorb.
      const xorbsBefore = await castor.countStoredXorbs();
      await hfXet.upload([await writeTemp(work, "hf-xet-again.bin", content)], { freshCache: true });
      assert.equal(await castor.countStoredXorbs(), xorbsBefore);
    } finally {
      await hfXet.dispose();
    }
  });
});

describe("reconstruction and transfers served from S3", () => {
  /** 48 chunks; the sparse file takes every other one, so its ranges in the xorb have gaps. */
  const bigXorb = serializeXorb(Array.from({ length: 48 }, (_, i) => ({ data: pseudoRandomBytes(`sparse-${i}`, 700 + 13 * i) })));
  const evens = Array.from({ length: 24 }, (_, i) => 2 * i);
  const sparse = fileOfChunks(bigXorb.info, evens);
  const sparseContent = Buffer.concat(evens.map((i) => pseudoRandomBytes(`sparse-${i}`, 700 + 13 * i)));

  before(async () => {
    for (const [path, body] of [
      [`/v1/xorbs/default/${xorbVector.expected.xorb_hash}`, fromHex(xorbVector.body_hex)],
      ["/v1/shards", fromHex(shardVector.xet_core_style_hex)],
      [`/v1/xorbs/default/${hashToHex(bigXorb.info.hash)}`, bigXorb.bytes],
      ["/v1/shards", serializeUploadShard({ files: [sparse], xorbs: [] }, { kind: "xet-core" })],
    ] as const) {
      const response = await post(path, body);
      assert.equal(response.status, 200, `${path}: ${await response.text()}`);
    }
  });

  for (const vectorCase of reconstructionVector.cases) {
    const range: string | undefined = vectorCase.range_header ?? undefined;
    const downloaded = vectorCase.status === 200 ? ", downloaded" : "";
    it(`reconstruction.json: file ${vectorCase.file}, Range ${range ?? "(none)"} → ${vectorCase.status}, V2 and V1${downloaded}`, async () => {
      const file: string = reconstructionVector.file_hashes[vectorCase.file];
      for (const [path, expected] of [
        [`/v2/reconstructions/${file}`, vectorCase.v2],
        [`/v1/reconstructions/${file}`, vectorCase.v1],
      ] as const) {
        const response = await reconstruct(path, range);
        const text = await response.text();
        assert.equal(response.status, vectorCase.status, text);
        if (vectorCase.status !== 200) continue;
        const body = JSON.parse(text) as Answer;
        assert.deepEqual(withPlaceholderUrls(body), expected, path);
        const content = VECTOR_CONTENT[vectorCase.file];
        const [first, last] = range === undefined ? [0, content.length - 1] : range.slice("bytes=".length).split("-").map(Number);
        const wanted = content.subarray(first, Math.min(last, content.length - 1) + 1);
        assert.deepEqual(await downloadAnswer(body, wanted.length), wanted, `${path}: downloaded bytes`);
      }
    });
  }

  it("serves any byte range of a file scattered over a xorb, V1 and V2", async () => {
    for (const [first, last] of [
      [0, 0],
      [sparseContent.length - 1, sparseContent.length - 1],
      [1000, 9000],
      [5000, 99_999_999_999],
    ]) {
      const wanted = sparseContent.subarray(first, Math.min(last, sparseContent.length - 1) + 1);
      for (const version of ["v1", "v2"]) {
        const response = await reconstruct(`/${version}/reconstructions/${hashToHex(sparse.fileHash)}`, `bytes=${first}-${last}`);
        assert.equal(response.status, 200);
        assert.deepEqual(await downloadAnswer((await response.json()) as Answer, wanted.length), wanted, `${version} bytes=${first}-${last}`);
      }
    }
  });

  it("answers hf.js's multi-range GET with multipart/byteranges streamed from S3, whole file and a slice", async () => {
    const file = { hash: hashToHex(sparse.fileHash), size: sparseContent.length };
    const whole = await hfJsDownload(castor, file);
    assertSameBytes(whole.bytes, sparseContent, "hf.js XetBlob, whole file");
    assert.ok(
      whole.requests.some((request) => request.status === 206 && /^multipart\/byteranges; boundary=/.test(request.contentType ?? "")),
      `no multipart answer among ${JSON.stringify(whole.requests)}`,
    );
    const sliced = await hfJsDownload(castor, file, { slice: [1234, 15_001] });
    assertSameBytes(sliced.bytes, sparseContent.subarray(1234, 15_001), "hf.js XetBlob.slice");
  });

  it("refuses a tampered URL, a Range that was not signed and a missing Range with 403", async () => {
    const body = (await (await reconstruct(`/v1/reconstructions/${hashToHex(sparse.fileHash)}`)).json()) as Answer;
    const [entry] = Object.values(body.fetch_info!)[0];
    const range = `bytes=${entry.url_range.start}-${entry.url_range.end}`;
    assert.equal((await fetch(entry.url, { headers: { range } })).status, 206);
    const url = new URL(entry.url);
    const signature = url.searchParams.get("s")!;
    url.searchParams.set("s", (signature[0] === "A" ? "B" : "A") + signature.slice(1));
    assert.equal((await fetch(url, { headers: { range } })).status, 403);
    assert.equal((await fetch(entry.url, { headers: { range: `bytes=${entry.url_range.start}-${entry.url_range.end + 1}` } })).status, 403);
    assert.equal((await fetch(entry.url)).status, 403);
  });
});

describe("shard registration over /v2/shards (NDJSON)", () => {
  it("streams progress then result 1 for a new shard and 0 for a known one; the file is then served", async () => {
    const xorb = serializeXorb(Array.from({ length: 6 }, (_, i) => ({ data: pseudoRandomBytes(`v2-shard-${i}`, 2000 + 100 * i) })));
    assert.equal((await post(`/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, xorb.bytes)).status, 200);
    const file = fileOfChunks(xorb.info, [0, 1, 2, 3, 4, 5]);
    const shard = serializeUploadShard({ files: [file], xorbs: [] }, { kind: "xet-core" });
    const first = await framesOf(await post("/v2/shards", shard));
    assert.deepEqual(first.at(-1), { type: "result", result: 1 });
    for (const frame of first.slice(0, -1)) assert.ok(["validating", "committing"].includes(frame.type as string), JSON.stringify(frame));
    const again = await framesOf(await post("/v2/shards", shard));
    assert.deepEqual(again.at(-1), { type: "result", result: 0 });

    const content = Buffer.concat(Array.from({ length: 6 }, (_, i) => pseudoRandomBytes(`v2-shard-${i}`, 2000 + 100 * i)));
    const response = await reconstruct(`/v2/reconstructions/${hashToHex(file.fileHash)}`);
    assert.equal(response.status, 200);
    assert.deepEqual(await downloadAnswer((await response.json()) as Answer, content.length), content);
  });
});

describe("tokens on the scale-out backends", () => {
  it("a CAS token expires on time, a read token cannot write, a missing one is refused", async () => {
    // Tokens signed with the deployment's key, as any node signs them, on clocks the test
    // picks: one whose exp is the current second (expired: valid only before exp), one with
    // time left. The node checks both on its own clock.
    const signingKey = createPrivateKey(await readFile(server.scaleOut!.signingKeyFile));
    const repo = { type: REPO_TYPE, id: REPO_NAME } as const;
    const expiring = await casTokenSignedWith(signingKey, "read", { repo, ttlSeconds: 1, now: () => new Date(Date.now() - 1000) });
    const live = await casTokenSignedWith(signingKey, "read", { repo, ttlSeconds: 60 });
    const file = reconstructionVector.file_hashes.A as string;
    assert.equal((await reconstruct(`/v2/reconstructions/${file}`, undefined, live)).status, 200);
    const expired = await reconstruct(`/v2/reconstructions/${file}`, undefined, expiring);
    assert.equal(expired.status, 401);
    assert.match(((await expired.json()) as { error: string }).error, /expired/i);
    const xorb = serializeXorb([{ data: pseudoRandomBytes("read-cannot-write", 5000) }]);
    assert.equal((await post(`/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, xorb.bytes, readToken)).status, 403);
    assert.equal((await fetch(`${server.url}/v2/reconstructions/${reconstructionVector.file_hashes.A}`)).status, 401);
  });
});

/** The `\n`-terminated JSON frames of an NDJSON answer. */
async function framesOf(response: Response): Promise<Record<string, unknown>[]> {
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "application/x-ndjson");
  const text = await response.text();
  assert.ok(text.endsWith("\n"));
  return text
    .slice(0, -1)
    .split("\n")
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}
