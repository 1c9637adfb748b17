import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { CasTokenIssuer, CasTokenVerifier, type CasTokenRequest } from "../../src/auth/cas-token.js";
import type { RangeUrlSigner } from "../../src/cas/reconstruction-render.js";
import { latin1Bytes, ReconstructionService } from "../../src/cas/reconstruction-service.js";
import type { ByteRange } from "../../src/format/ranges.js";
import { hashFromHex, hashToHex, ZERO_HASH, type Hash } from "../../src/format/hash.js";
import { parseUploadShard } from "../../src/format/shard.js";
import { createHttpApp } from "../../src/http/app.js";
import { casScope } from "../../src/http/cas-scope.js";
import { createLogger } from "../../src/http/logging.js";
import { acceptsGzip, GZIP_MIN_BODY_BYTES, reconstructionRoutes, type ReconstructionRouteDeps } from "../../src/http/reconstruction-routes.js";
import type { FileRecord, XorbRecord } from "../../src/metadata/cas.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { reconstructionVectorCases, xorbRecordOf } from "../helpers/reconstruction-answer.js";
import { fromHex, loadVector, splitmix64Bytes } from "../helpers/vectors.js";

const vector = loadVector("reconstruction.json");
const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const FILE_A: string = vector.file_hashes.A;
const FILE_B: string = vector.file_hashes.B;

const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const issuer = new CasTokenIssuer(privateKey, 600);
const BERT: CasTokenRequest["repo"] = { type: "model", id: "alice/bert" };
const CORPUS: CasTokenRequest["repo"] = { type: "dataset", id: "bob/corpus" };
const GHOST: CasTokenRequest["repo"] = { type: "model", id: "nobody/nothing" };

/** URLs that spell out what they sign: `…?r=start-end,…`. */
const signer: RangeUrlSigner = {
  sign(xorbHash: Hash, ranges: readonly ByteRange[]) {
    return `https://transfer.test/${hashToHex(xorbHash)}?r=${ranges.map((r) => `${r.start}-${r.end}`).join(",")}`;
  },
};

let dir: string;
let metadata: SqliteMetadataStore;
let app: FastifyInstance;
let app501: FastifyInstance;
let bertRead: string;
let bertWrite: string;
let corpusRead: string;
let ghostRead: string;
let corpusId: number;
let bigFileHex: string;
let shardSeed = 1n;

async function register(repoId: number, files: FileRecord[]): Promise<void> {
  await metadata.registerShard({ shardHash: splitmix64Bytes(shardSeed++, 32), repoId, files, dedupEntries: [] });
}

async function appWith(deps: ReconstructionRouteDeps): Promise<FastifyInstance> {
  const instance = createHttpApp({ logger: createLogger("silent") });
  await instance.register(casScope, { verifier: new CasTokenVerifier(publicKey), routes: (cas) => cas.register(reconstructionRoutes, deps) });
  await instance.ready();
  return instance;
}

function buildApp(v2Reconstruction: "on" | "501"): Promise<FastifyInstance> {
  return appWith({ reconstructions: new ReconstructionService({ store: metadata, signer, transferUrlTtlSeconds: 600 }), v2Reconstruction });
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "castor-reconstruction-routes-"));
  metadata = await SqliteMetadataStore.open(dir);
  const bertId = (await metadata.createRepo("model", "alice/bert")).id;
  corpusId = (await metadata.createRepo("dataset", "bob/corpus")).id;

  await metadata.putXorb(xorbRecordOf(fromHex(xorbVector.body_hex)));
  const shard = parseUploadShard(fromHex(shardVector.xet_core_style_hex));
  await register(
    bertId,
    shard.files.map((f) => ({
      hash: f.fileHash,
      size: f.terms.reduce((sum, t) => sum + t.unpackedBytes, 0),
      terms: f.terms.map((t) => ({ xorbHash: t.xorbHash, chunkStart: t.chunkStart, chunkEnd: t.chunkEnd, unpackedLength: t.unpackedBytes })),
      sha256: null,
    })),
  );
  // The empty file (its hash is all zeros) and a file of 60 terms, for gzip.
  const big: XorbRecord = {
    hash: splitmix64Bytes(900n, 32),
    serializedLength: 64 * 1000,
    uncompressedLength: 64 * 2000,
    chunks: Array.from({ length: 64 }, (_, i) => ({ hash: splitmix64Bytes(1000n + BigInt(i), 32), uncompressedLength: 2000, serializedEnd: (i + 1) * 1000 })),
  };
  await metadata.putXorb(big);
  const bigFile: FileRecord = {
    hash: splitmix64Bytes(901n, 32),
    size: 60 * 2000,
    terms: Array.from({ length: 60 }, (_, i) => ({ xorbHash: big.hash, chunkStart: i, chunkEnd: i + 1, unpackedLength: 2000 })),
    sha256: null,
  };
  bigFileHex = hashToHex(bigFile.hash);
  await register(bertId, [{ hash: ZERO_HASH, size: 0, terms: [], sha256: null }, bigFile]);

  bertRead = (await issuer.issue({ repo: BERT, rev: "main", scope: "read" })).token;
  bertWrite = (await issuer.issue({ repo: BERT, rev: "main", scope: "write" })).token;
  corpusRead = (await issuer.issue({ repo: CORPUS, rev: "main", scope: "read" })).token;
  ghostRead = (await issuer.issue({ repo: GHOST, rev: "main", scope: "read" })).token;
  app = await buildApp("on");
  app501 = await buildApp("501");
});

after(async () => {
  await app?.close();
  await app501?.close();
  await metadata?.close();
  await rm(dir, { recursive: true, force: true });
});

function get(path: string, options: { token?: string | null; range?: string; acceptEncoding?: string; on?: FastifyInstance } = {}) {
  const headers: Record<string, string> = {};
  const token = options.token === undefined ? bertRead : options.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (options.range !== undefined) headers.range = options.range;
  if (options.acceptEncoding !== undefined) headers["accept-encoding"] = options.acceptEncoding;
  return (options.on ?? app).inject({ method: "GET", url: path, headers });
}

type Answer = Awaited<ReturnType<typeof get>>;

function assertError(response: Answer, status: number, pattern: RegExp): string {
  assert.equal(response.statusCode, status, response.body);
  assert.match(String(response.headers["content-type"]), /^application\/json/);
  const body = response.json();
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.match(body.error, pattern);
  return body.error;
}

/** The body with every URL checked against its ranges and replaced by the vector's placeholder. */
function withPlaceholderUrls(body: Record<string, unknown>): Record<string, unknown> {
  const rangesOf = (url: string) =>
    new URL(url).searchParams
      .get("r")!
      .split(",")
      .map((pair) => {
        const [start, end] = pair.split("-").map(Number);
        return { start, end };
      });
  if ("xorbs" in body) {
    for (const entries of Object.values(body.xorbs as Record<string, { url: string; ranges: { bytes: ByteRange }[] }[]>)) {
      for (const entry of entries) {
        assert.deepEqual(
          rangesOf(entry.url),
          entry.ranges.map((r) => r.bytes),
        );
        entry.url = "<signed url covering all ranges below>";
      }
    }
  } else {
    for (const entries of Object.values(body.fetch_info as Record<string, { url: string; url_range: ByteRange }[]>)) {
      for (const entry of entries) {
        assert.deepEqual(rangesOf(entry.url), [entry.url_range]);
        entry.url = "<url>";
      }
    }
  }
  return body;
}

describe("GET /v2, /v1 and /reconstructions/{file_id}: reconstruction.json over HTTP", () => {
  for (const vectorCase of reconstructionVectorCases()) {
    it(vectorCase.title, async () => {
      for (const [path, expected] of vectorCase.requests) {
        const response = await get(path, { range: vectorCase.range });
        if (vectorCase.status === 416) {
          assertError(response, 416, /at or past the end of the file \(3565 bytes\)/);
          assert.equal(response.headers["content-range"], "bytes */3565");
          continue;
        }
        assert.equal(response.statusCode, 200, response.body);
        assert.equal(response.headers["content-type"], "application/json; charset=utf-8");
        assert.equal(response.headers.vary, "Accept-Encoding");
        assert.equal(response.headers["cache-control"], "no-store");
        assert.equal(response.headers["content-encoding"], undefined);
        assert.deepEqual(withPlaceholderUrls(response.json()), expected, path);
      }
    });
  }
});

describe("reconstruction errors", () => {
  it("refuses a malformed file id with 400", async () => {
    for (const id of [FILE_A.toUpperCase(), FILE_A.slice(1), `${FILE_A}0`, "x".repeat(64)]) {
      for (const version of ["v1", "v2"]) {
        assertError(await get(`/${version}/reconstructions/${id}`), 400, /^Malformed file id ".*": it must be exactly 64 lowercase hexadecimal characters/);
      }
    }
  });

  it("refuses a malformed Range with 400 and a reversed one with 416", async () => {
    assertError(await get(`/v2/reconstructions/${FILE_A}`, { range: "items=0-1" }), 400, /^Malformed Range header "items=0-1"/);
    assertError(await get(`/v1/reconstructions/${FILE_A}`, { range: "bytes=0-1,4-5" }), 400, /several ranges/);
    assertError(await get(`/v2/reconstructions/${FILE_A}`, { range: "bytes=10-9" }), 416, /start is after its end/);
  });

  it("answers 404 alike for a file of another repository and for one that does not exist", async () => {
    const elsewhere = assertError(
      await get(`/v2/reconstructions/${FILE_A}`, { token: corpusRead }),
      404,
      /^No file [0-9a-f]{64} in the repository dataset:bob\/corpus this token is for/,
    );
    const nowhere = assertError(await get(`/v2/reconstructions/${"ab".repeat(32)}`, { token: corpusRead }), 404, /^No file/);
    assert.equal(elsewhere.replace(FILE_A, "<id>"), nowhere.replace("ab".repeat(32), "<id>"));
    assertError(await get(`/v1/reconstructions/${FILE_A}`, { token: corpusRead }), 404, /^No file/);
    assertError(await get(`/v2/reconstructions/${FILE_A}`, { token: ghostRead }), 404, /^No file/);
    // 404 comes before any range check: a 416 would reveal the file's size.
    assertError(await get(`/v2/reconstructions/${FILE_A}`, { token: corpusRead, range: "bytes=999999-" }), 404, /^No file/);
  });

  it("checks the repository on every request: a file becomes visible once linked", async () => {
    assertError(await get(`/v2/reconstructions/${FILE_B}`, { token: corpusRead }), 404, /^No file/);
    const file = (await metadata.getFile(hashFromHex(FILE_B)))!;
    await register(corpusId, [file]);
    const response = await get(`/v2/reconstructions/${FILE_B}`, { token: corpusRead });
    assert.equal(response.statusCode, 200, response.body);
    assert.deepEqual(
      withPlaceholderUrls(response.json()),
      vector.cases.find((c: { file: string; range_header: string | null }) => c.file === "B" && c.range_header === null).v2,
    );
  });

  it("needs a token (401) and accepts a write token", async () => {
    assertError(await get(`/v2/reconstructions/${FILE_A}`, { token: null }), 401, /Missing access token/);
    assert.equal((await get(`/v2/reconstructions/${FILE_A}`, { token: bertWrite })).statusCode, 200);
  });
});

describe("HEAD /v1/files/{file_id}", () => {
  const head = (path: string, token: string | null = bertRead) =>
    app.inject({ method: "HEAD", url: path, headers: token === null ? {} : { authorization: `Bearer ${token}` } });

  it("answers 200 with the file size, without a body, to read and write tokens of the file's repository", async () => {
    for (const token of [bertRead, bertWrite]) {
      const response = await head(`/v1/files/${bigFileHex}`, token);
      assert.equal(response.statusCode, 200);
      assert.equal(response.headers["content-length"], String(60 * 2000));
      assert.equal(response.body, "");
    }
    const empty = await head(`/v1/files/${"0".repeat(64)}`);
    assert.equal(empty.statusCode, 200);
    assert.equal(empty.headers["content-length"], "0");
  });

  it("answers 404 alike for a file of another repository and one that does not exist; 400 for a malformed id; 401 without a token", async () => {
    assert.equal((await head(`/v1/files/${bigFileHex}`, corpusRead)).statusCode, 404);
    assert.equal((await head(`/v1/files/${bigFileHex}`, ghostRead)).statusCode, 404);
    assert.equal((await head(`/v1/files/${"ab".repeat(32)}`)).statusCode, 404);
    assert.equal((await head("/v1/files/XYZ")).statusCode, 400);
    assert.equal((await head(`/v1/files/${bigFileHex}`, null)).statusCode, 401);
  });
});

describe("the empty file", () => {
  const EMPTY = hashToHex(ZERO_HASH);
  it("answers 200 with no terms and an empty map without a Range or from byte 0, 416 past it", async () => {
    for (const range of [undefined, "bytes=0-0", "bytes=0-18446744073709551615"]) {
      assert.equal((await get(`/v2/reconstructions/${EMPTY}`, { range })).body, '{"offset_into_first_range":0,"terms":[],"xorbs":{}}');
      assert.equal((await get(`/v1/reconstructions/${EMPTY}`, { range })).body, '{"offset_into_first_range":0,"terms":[],"fetch_info":{}}');
    }
    const past = await get(`/v2/reconstructions/${EMPTY}`, { range: "bytes=1-1" });
    assertError(past, 416, /file \(0 bytes\)/);
    assert.equal(past.headers["content-range"], "bytes */0");
  });
});

describe("CASTOR_V2_RECONSTRUCTION=501", () => {
  it("makes V2 answer 501 with a JSON error pointing to V1, which keeps working", async () => {
    assertError(await get(`/v2/reconstructions/${FILE_A}`, { on: app501 }), 501, /use GET \/v1\/reconstructions\/\{file_id\}/);
    const v1 = await get(`/v1/reconstructions/${FILE_A}`, { on: app501 });
    assert.equal(v1.statusCode, 200);
    assert.deepEqual(withPlaceholderUrls(v1.json()), vector.cases[0].v1);
    assertError(await get(`/v2/reconstructions/${FILE_A}`, { on: app501, token: null }), 401, /Missing access token/);
  });
});

describe("reuse of signed URLs and answers", () => {
  it("serves the same answer within the reuse window, checks the repository every time, and renews after it", async () => {
    let now = 1_000_000;
    let signatures = 0;
    const counting: RangeUrlSigner = {
      sign(xorbHash, ranges) {
        signatures++;
        return `${signer.sign(xorbHash, ranges)}&n=${signatures}`;
      },
    };
    // A 60 s URL lifetime: reuse for 3 s.
    const instance = await appWith({
      reconstructions: new ReconstructionService({ store: metadata, signer: counting, transferUrlTtlSeconds: 60, now: () => now }),
      v2Reconstruction: "on",
    });
    try {
      const ask = (token: string, range?: string) => get(`/v2/reconstructions/${bigFileHex}`, { on: instance, token, range });
      const first = await ask(bertRead);
      assert.equal(first.statusCode, 200);
      assert.equal(signatures, 1, "60 terms of one xorb merge into one range, signed once");
      now += 2_999;
      assert.equal((await ask(bertRead)).body, first.body);
      assertError(await ask(corpusRead), 404, /^No file/);
      const gzipped = await get(`/v2/reconstructions/${bigFileHex}`, { on: instance, acceptEncoding: "gzip" });
      assert.equal(gunzipSync(gzipped.rawPayload).toString("utf8"), first.body);
      assert.equal(signatures, 1);
      const other = await ask(bertRead, "bytes=0-9999");
      assert.equal(other.statusCode, 200);
      assert.notEqual(other.body, first.body, "another range is another answer");
      now += 1;
      const renewed = await ask(bertRead);
      assert.notEqual(renewed.body, first.body, "past the window URLs are signed again");
      assert.deepEqual(withPlaceholderUrls(renewed.json()), withPlaceholderUrls(first.json()));
    } finally {
      await instance.close();
    }
  });
});

describe("memory of cached answers", () => {
  it("gives each answer a buffer of its own: one cut from Buffer's shared pool would keep its whole slab alive", async () => {
    const service = new ReconstructionService({ store: metadata, signer, transferUrlTtlSeconds: 600 });
    const answer = await service.reconstruct({ repo: BERT, fileHash: hashFromHex(FILE_A), fileHex: FILE_A, range: { kind: "whole" }, version: 2 });
    assert.ok(answer.body.length < Buffer.poolSize / 2, `a short answer, which Buffer.from would take from the pool (${answer.body.length} bytes)`);
    assert.equal(answer.body.byteOffset, 0);
    assert.equal(answer.body.buffer.byteLength, answer.body.length);
    assert.equal((await get(`/v2/reconstructions/${FILE_A}`)).body, answer.body.toString("latin1"), "the same bytes as served");
  });

  it("latin1Bytes writes every character as its byte", () => {
    const text = Array.from({ length: 256 }, (_, i) => String.fromCharCode(i)).join("");
    assert.deepEqual(latin1Bytes(text), Buffer.from(text, "latin1"));
    assert.equal(latin1Bytes("").length, 0);
  });
});

describe("gzip", () => {
  it("compresses a large answer when the client accepts gzip, and says Vary: Accept-Encoding", async () => {
    for (const version of ["v1", "v2"]) {
      const plain = await get(`/${version}/reconstructions/${bigFileHex}`);
      assert.equal(plain.statusCode, 200);
      assert.ok(plain.body.length >= GZIP_MIN_BODY_BYTES);
      const gzipped = await get(`/${version}/reconstructions/${bigFileHex}`, { acceptEncoding: "gzip, deflate, br" });
      assert.equal(gzipped.statusCode, 200);
      assert.equal(gzipped.headers["content-encoding"], "gzip");
      assert.equal(gzipped.headers.vary, "Accept-Encoding");
      assert.equal(gzipped.headers["content-type"], "application/json; charset=utf-8");
      assert.ok(gzipped.rawPayload.length < plain.rawPayload.length / 2, `${gzipped.rawPayload.length} vs ${plain.rawPayload.length} bytes`);
      assert.equal(gunzipSync(gzipped.rawPayload).toString("utf8"), plain.body);
      assert.equal(JSON.parse(plain.body).terms.length, 60);
    }
  });

  it("sends identity when gzip is refused or not offered, and for small answers", async () => {
    for (const acceptEncoding of ["identity", "gzip;q=0", "br", "*;q=0", "gzip;q=0, *"]) {
      const response = await get(`/v2/reconstructions/${bigFileHex}`, { acceptEncoding });
      assert.equal(response.headers["content-encoding"], undefined, acceptEncoding);
      assert.equal(JSON.parse(response.body).terms.length, 60);
    }
    const small = await get(`/v2/reconstructions/${FILE_A}`, { acceptEncoding: "gzip" });
    assert.equal(small.headers["content-encoding"], undefined);
    assert.equal(small.headers.vary, "Accept-Encoding");
  });

  it("reads Accept-Encoding as RFC 9110 says", () => {
    const cases: [string | string[] | undefined, boolean][] = [
      [undefined, false],
      ["", false],
      ["gzip", true],
      ["GZip", true],
      ["x-gzip", true],
      ["deflate, gzip;q=0.5", true],
      ["gzip;q=0", false],
      ["gzip; q=0.000", false],
      ["*", true],
      ["*;q=0", false],
      ["gzip;q=0, *", false],
      ["br, *;q=0.1", true],
      ["identity", false],
      [["br", "gzip"], true],
    ];
    for (const [header, expected] of cases) assert.equal(acceptsGzip(header), expected, JSON.stringify(header));
  });
});
