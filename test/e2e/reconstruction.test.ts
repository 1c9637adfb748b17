/**
 * Reconstruction end to end: a real `castor serve` process, repositories and tokens made with the
 * CLI and the hub token operation, xorbs uploaded through POST /v1/xorbs/default/{hash} and files
 * registered through POST /v1/shards. Then the reconstruction API is used the way a client uses
 * it: ask for the terms (V2, V1, legacy path), fetch every listed byte range from its transfer
 * URL without Authorization (one GET per range, xet-core's default), unpack the chunks, and put
 * the file (or the requested byte range of it) back together.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { hashToHex } from "../../src/format/hash.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";
import {
  downloadAnswer,
  fileOfChunks,
  reconstructionVectorCases,
  vectorFileContents,
  withPlaceholderUrls,
  type Answer,
} from "../helpers/reconstruction-answer.js";
import { fromHex, loadVector, makeData } from "../helpers/vectors.js";

const vector = loadVector("reconstruction.json");
const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const CONTENT = vectorFileContents();

let server: ServerProcess;
let server501: ServerProcess;
let bertRead: string;
let bertWrite: string;
let otherRead: string;
let token501: string;
/** 48 chunks; the "sparse" file takes every other one, so its ranges in the xorb have gaps. */
let bigXorb: SerializedXorb;
let sparseFileHex: string;
let sparseContent: Buffer;

async function cli(target: ServerProcess, ...args: string[]): Promise<string> {
  const result = await runCastor(args, { env: { CASTOR_DATA_DIR: target.dataDir } });
  assert.equal(result.code, 0, result.stderr);
  return result.stdout.trim();
}

async function casToken(target: ServerProcess, repo: string, hubToken: string, access: "read" | "write"): Promise<string> {
  const response = await fetch(`${target.url}/api/models/${repo}/cas-${access}-token/main`, { headers: { authorization: `Bearer ${hubToken}` } });
  assert.equal(response.status, 200, await response.clone().text());
  return ((await response.json()) as { accessToken: string }).accessToken;
}

async function post(target: ServerProcess, path: string, body: Uint8Array, token: string): Promise<void> {
  const response = await fetch(`${target.url}${path}`, { method: "POST", body, headers: { authorization: `Bearer ${token}` } });
  assert.equal(response.status, 200, `${path}: ${await response.text()}`);
}

async function setUp(target: ServerProcess): Promise<{ read: string; write: string }> {
  await cli(target, "repo", "create", "model", "alice/bert");
  const hubWrite = await cli(target, "token", "create", "--repo", "model:alice/bert", "--access", "write");
  const hubRead = await cli(target, "token", "create", "--repo", "model:alice/bert", "--access", "read");
  const write = await casToken(target, "alice/bert", hubWrite, "write");
  const read = await casToken(target, "alice/bert", hubRead, "read");
  await post(target, `/v1/xorbs/default/${xorbVector.expected.xorb_hash}`, fromHex(xorbVector.body_hex), write);
  await post(target, "/v1/shards", fromHex(shardVector.xet_core_style_hex), write);
  return { read, write };
}

before(async () => {
  [server, server501] = await Promise.all([startCastorServer(), startCastorServer({ env: { CASTOR_V2_RECONSTRUCTION: "501" } })]);
  ({ read: bertRead, write: bertWrite } = await setUp(server));
  ({ read: token501 } = await setUp(server501));

  await cli(server, "repo", "create", "model", "carol/other");
  otherRead = await casToken(server, "carol/other", await cli(server, "token", "create", "--repo", "model:carol/other", "--access", "read"), "read");

  bigXorb = serializeXorb(Array.from({ length: 48 }, (_, i) => ({ data: makeData(700 + 13 * i, 3 + i, i) })));
  await post(server, `/v1/xorbs/default/${hashToHex(bigXorb.info.hash)}`, bigXorb.bytes, bertWrite);
  const evens = Array.from({ length: 24 }, (_, i) => 2 * i);
  const sparse = fileOfChunks(bigXorb.info, evens);
  await post(server, "/v1/shards", serializeUploadShard({ files: [sparse], xorbs: [] }, { kind: "xet-core" }), bertWrite);
  sparseFileHex = hashToHex(sparse.fileHash);
  sparseContent = Buffer.concat(evens.map((i) => makeData(700 + 13 * i, 3 + i, i)));
});

after(async () => {
  await Promise.all([server?.stop(), server501?.stop()]);
});

function reconstruct(
  path: string,
  options: { token?: string; range?: string; headers?: Record<string, string>; target?: ServerProcess } = {},
): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${options.token ?? bertRead}`, ...options.headers };
  if (options.range !== undefined) headers.range = options.range;
  return fetch(`${(options.target ?? server).url}${path}`, { headers });
}

describe("reconstruction.json against a real server, with downloads", () => {
  for (const vectorCase of reconstructionVectorCases()) {
    it(vectorCase.title, async () => {
      for (const [path, expected] of vectorCase.requests) {
        const response = await reconstruct(path, { range: vectorCase.range });
        const text = await response.text();
        assert.equal(response.status, vectorCase.status, text);
        if (vectorCase.status !== 200) {
          assert.deepEqual(Object.keys(JSON.parse(text)), ["error"]);
          continue;
        }
        assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
        const body = JSON.parse(text);
        assert.deepEqual(withPlaceholderUrls(body), expected, path);

        const content = CONTENT[vectorCase.file];
        const [first, last] = vectorCase.range === undefined ? [0, content.length - 1] : vectorCase.range.slice("bytes=".length).split("-").map(Number);
        const wanted = content.subarray(first, Math.min(last, content.length - 1) + 1);
        assert.deepEqual(await downloadAnswer(body, wanted.length), wanted, `${path}: downloaded bytes`);
      }
    });
  }
});

describe("a file whose chunks are scattered in a shared xorb", () => {
  it("lists one V2 entry of disjoint ranges (never merged across a gap) and downloads correctly", async () => {
    const body = (await (await reconstruct(`/v2/reconstructions/${sparseFileHex}`)).json()) as Answer;
    const entries = body.xorbs![hashToHex(bigXorb.info.hash)];
    assert.equal(entries.length, 1);
    assert.deepEqual(
      entries[0].ranges.map((r) => [r.chunks.start, r.chunks.end]),
      Array.from({ length: 24 }, (_, i) => [2 * i, 2 * i + 1]),
    );
    assert.deepEqual(await downloadAnswer(body, sparseContent.length), sparseContent);
  });

  it("serves any byte range of it, V1 and V2", async () => {
    for (const [first, last] of [
      [0, 0],
      [sparseContent.length - 1, sparseContent.length - 1],
      [1000, 9000],
      [777, 778],
      [5000, 99_999_999_999],
    ]) {
      const wanted = sparseContent.subarray(first, Math.min(last, sparseContent.length - 1) + 1);
      for (const version of ["v1", "v2"]) {
        const response = await reconstruct(`/${version}/reconstructions/${sparseFileHex}`, { range: `bytes=${first}-${last}` });
        assert.equal(response.status, 200);
        assert.deepEqual(await downloadAnswer((await response.json()) as Answer, wanted.length), wanted, `${version} bytes=${first}-${last}`);
      }
    }
    const suffix = await reconstruct(`/v2/reconstructions/${sparseFileHex}`, { range: "bytes=-100" });
    assert.deepEqual(await downloadAnswer((await suffix.json()) as Answer, 100), sparseContent.subarray(sparseContent.length - 100));
  });

  it("gzips the answer for a client that accepts it", async () => {
    const plain = await reconstruct(`/v2/reconstructions/${sparseFileHex}`, { headers: { "accept-encoding": "identity" } });
    const plainText = await plain.text();
    assert.equal(plain.headers.get("content-encoding"), null);
    const gzipped = await reconstruct(`/v2/reconstructions/${sparseFileHex}`, { headers: { "accept-encoding": "gzip" } });
    assert.equal(gzipped.headers.get("content-encoding"), "gzip");
    assert.equal(gzipped.headers.get("vary"), "Accept-Encoding");
    // fetch decodes gzip itself: the JSON must be the same (URLs are reused for a while).
    assert.deepEqual(await gzipped.json(), JSON.parse(plainText));
  });
});

describe("errors over HTTP", () => {
  it("416 past the end, 400 for a malformed id or Range, 404 for another repository's token", async () => {
    const file = vector.file_hashes.A;
    const past = await reconstruct(`/v2/reconstructions/${file}`, { range: "bytes=3565-" });
    assert.equal(past.status, 416);
    assert.equal(past.headers.get("content-range"), "bytes */3565");
    assert.equal((await reconstruct(`/v2/reconstructions/${file.toUpperCase()}`)).status, 400);
    assert.equal((await reconstruct(`/v2/reconstructions/${file}`, { range: "bytes=1-2,5-6" })).status, 400);
    const other = await reconstruct(`/v2/reconstructions/${file}`, { token: otherRead });
    assert.equal(other.status, 404);
    assert.match(((await other.json()) as { error: string }).error, /^No file [0-9a-f]{64} in the repository model:carol\/other/);
    assert.equal((await reconstruct(`/v1/reconstructions/${file}`, { token: otherRead })).status, 404);
    assert.equal((await fetch(`${server.url}/v2/reconstructions/${file}`)).status, 401);
  });

  it("with CASTOR_V2_RECONSTRUCTION=501, V2 answers 501 and V1 still serves the file", async () => {
    const file = vector.file_hashes.B;
    const v2 = await reconstruct(`/v2/reconstructions/${file}`, { token: token501, target: server501 });
    assert.equal(v2.status, 501);
    assert.match(((await v2.json()) as { error: string }).error, /GET \/v1\/reconstructions/);
    const v1 = await reconstruct(`/v1/reconstructions/${file}`, { token: token501, target: server501 });
    assert.equal(v1.status, 200);
    assert.deepEqual(await downloadAnswer((await v1.json()) as Answer, CONTENT.B.length), CONTENT.B);
  });
});
