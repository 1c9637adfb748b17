/**
 * The work a shard may cause, bounded before it is done, against a real `castor serve`:
 * the amplification probe (one xorb of 8,192 tiny chunks, one file of thousands of terms that
 * each name all of them, correct range hashes, a wrong file hash) is refused from the shard
 * alone while the server keeps answering, and CASTOR_MAX_SHARD_CHUNK_REFS caps valid shards
 * on both shard routes.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { fileHash, hashToHex, verificationHash, type Hash } from "../../src/format/hash.js";
import type { ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../helpers/server.js";

const MAX_CHUNK_REFS = 5000;

let server: ServerProcess;
let token: string;

before(async () => {
  server = await startCastorServer({ env: { CASTOR_MAX_SHARD_CHUNK_REFS: String(MAX_CHUNK_REFS) } });
  const fixture = await hubFixture(server, { repoType: "model", repoName: "alice/limits" });
  token = (await fixture.casToken("write")).accessToken;
});

after(async () => {
  await server?.stop();
});

function post(path: string, body: Uint8Array): Promise<Response> {
  return fetch(`${server.url}${path}`, { method: "POST", body, headers: { authorization: `Bearer ${token}` } });
}

async function uploadXorb(xorb: SerializedXorb): Promise<void> {
  const response = await post(`/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, xorb.bytes);
  assert.equal(response.status, 200, await response.text());
}

type XorbInfo = SerializedXorb["info"];

/** One file of `terms` terms, each naming every chunk of `xorb`, with correct range hashes and a wrong file hash. */
function amplifiedShard(xorb: XorbInfo, terms: number): Uint8Array {
  const rangeHash = verificationHash(xorb.chunks.map((c) => c.hash));
  const file: ShardFile = {
    fileHash: new Uint8Array(32).fill(0xab),
    terms: Array.from({ length: terms }, () => ({ xorbHash: xorb.hash, chunkStart: 0, chunkEnd: xorb.chunks.length, unpackedBytes: xorb.uncompressedLength })),
    verificationHashes: Array.from({ length: terms }, () => rangeHash),
    sha256: null,
  };
  return serializeUploadShard({ files: [file], xorbs: [] }, { kind: "xet-core" });
}

/** A correct file over chunks [start, end) of `xorb`. */
function fileOver(xorb: XorbInfo, start: number, end: number): ShardFile {
  const chunks = xorb.chunks.slice(start, end);
  return {
    fileHash: fileHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
    terms: [{ xorbHash: xorb.hash, chunkStart: start, chunkEnd: end, unpackedBytes: chunks.reduce((sum, c) => sum + c.uncompressedLength, 0) }],
    verificationHashes: [verificationHash(chunks.map((c): Hash => c.hash))],
    sha256: null,
  };
}

describe("shard work bounds (real server)", () => {
  it("refuses the amplification probe from the shard alone, and keeps answering /healthz meanwhile", async () => {
    const tiny = serializeXorb(Array.from({ length: 8192 }, (_, i) => ({ data: Uint8Array.of(i >> 8, i & 0xff) })));
    await uploadXorb(tiny);
    // 2,000 terms (a 192 KB shard) and 20,000 (1.9 MB): before the bound, the first took 50 s
    // and 3.2 GB, the second killed the process.
    for (const terms of [2_000, 20_000]) {
      const [answer, health] = await Promise.all([post("/v1/shards", amplifiedShard(tiny.info, terms)), fetch(`${server.url}/healthz`)]);
      const text = await answer.text();
      assert.equal(answer.status, 400, text);
      const references = terms * 8192;
      const allowed = Math.floor((references * 2) / 8128) + 1 + 64;
      assert.match(
        JSON.parse(text).error,
        new RegExp(
          `^Shard rejected: file ${"ab".repeat(32)} \\(file block 0\\) references ${references} chunks for ${references * 2} bytes, more than the ${allowed} a file of that size can have`,
        ),
      );
      assert.equal(health.status, 200);
    }
    const health = await fetch(`${server.url}/healthz`);
    assert.equal(health.status, 200, "the server is still up");
  });

  it("refuses with 413 (v1) or a terminal error frame (v2) a valid shard naming more chunks than CASTOR_MAX_SHARD_CHUNK_REFS", async () => {
    const xorb = serializeXorb(Array.from({ length: 100 }, () => ({ data: randomBytes(8200) })));
    await uploadXorb(xorb);
    // 100 + 99 + … + 1 = 5,050 references; the running total passes 5,000 at block 90 (5,005).
    const files = Array.from({ length: 100 }, (_, i) => fileOver(xorb.info, i, 100));
    const shard = serializeUploadShard({ files, xorbs: [] }, { kind: "xet-core" });
    const expected = new RegExp(
      `reference more than ${MAX_CHUNK_REFS} chunks in all \\(this server's CASTOR_MAX_SHARD_CHUNK_REFS\\), reached at file block 90: upload the files in several smaller shards`,
    );

    const v1 = await post("/v1/shards", shard.slice());
    const v1Text = await v1.text();
    assert.equal(v1.status, 413, v1Text);
    assert.match(JSON.parse(v1Text).error, expected);

    const v2 = await post("/v2/shards", shard.slice());
    assert.equal(v2.status, 200);
    const frames = (await v2.text())
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { type: string; message?: string; retryable?: boolean });
    const last = frames.at(-1)!;
    assert.equal(last.type, "error");
    assert.equal(last.retryable, false);
    assert.match(last.message!, expected);

    // A shard larger than the spool's memory part (2 MiB) is received through a spool file and registers.
    // Its bulk is xorb blocks (48 bytes per chunk, checked against the stored xorb, no file references).
    let offset = 0;
    const block = {
      xorbHash: xorb.info.hash,
      flags: 0,
      numBytesInXorb: xorb.info.uncompressedLength,
      numBytesOnDisk: 0,
      chunks: xorb.info.chunks.map((c) => {
        const entry = { hash: c.hash, byteRangeStart: offset, unpackedBytes: c.uncompressedLength, flags: 0 };
        offset += c.uncompressedLength;
        return entry;
      }),
    };
    const repeated = serializeUploadShard({ files: [files[99]], xorbs: Array.from({ length: 500 }, () => block) }, { kind: "xet-core" });
    assert.ok(repeated.length > 2 * 1024 * 1024);
    const spooled = await post("/v1/shards", repeated);
    assert.equal(spooled.status, 200, await spooled.text());

    // Within the limit, the same files register.
    const fewer = serializeUploadShard({ files: files.slice(1), xorbs: [] }, { kind: "xet-core" });
    const accepted = await post("/v1/shards", fewer);
    assert.equal(accepted.status, 200, await accepted.text());
  });
});
