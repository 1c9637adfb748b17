/**
 * The upload path against an in-memory CAS that checks what a real one checks: xorb bodies are
 * validated and hashed, every shard term is checked against the stored chunk hashes (lengths,
 * verification hash, file hash), and dedup answers are keyed shards built with the format
 * layer. This pins the look-ahead window: a global-dedup hit on a later chunk also serves the
 * chunks before it.
 */
import assert from "node:assert/strict";
import { createCipheriv, createHash } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { CastorClientError, type FetchFunction } from "../../src/client/index.js";
import {
  chunkHash,
  fileHash,
  hashEquals,
  hashFromHex,
  hashToHex,
  isGlobalDedupEligible,
  parseUploadShard,
  serializeFullShard,
  splitIntoChunks,
  validateXorb,
  verificationHash,
  type Hash,
  type ShardXorb,
} from "../../src/format/index.js";
import { tempDirForFile } from "../helpers/temp-dir.js";
import { HUB, casTokenAnswer, fakeHubClient, jsonResponse } from "../helpers/fake-hub.js";

const REPO = "dataset:org/data";
const HUB_TOKEN = "hf_x";

const DEDUP_KEY = hashFromHex("5a".repeat(32));

/** Fast deterministic bytes (AES-CTR keystream) — splitmix64's BigInts are too slow for MiBs. */
function pseudoRandom(seed: number, length: number): Buffer {
  const key = createHash("sha256").update(`seed ${seed}`).digest().subarray(0, 16);
  return createCipheriv("aes-128-ctr", key, Buffer.alloc(16)).update(Buffer.alloc(length));
}

interface StoredXorb {
  hashes: Hash[];
  sizes: number[];
}

function memoryCas(options: { rejectXorbs?: string } = {}) {
  const xorbs = new Map<string, StoredXorb>();
  const files = new Map<string, number>();
  /** chunk hash hex → xorb hex, filled like castor: files' first chunks and 1-in-1024 chunks. */
  const dedupIndex = new Map<string, string>();
  const calls: string[] = [];

  function registerShard(bytes: Uint8Array): void {
    const shard = parseUploadShard(bytes);
    for (const file of shard.files) {
      const leaves: { hash: Hash; size: number }[] = [];
      file.terms.forEach((term, t) => {
        const xorb = xorbs.get(hashToHex(term.xorbHash));
        assert.ok(xorb, "every referenced xorb was uploaded before the shard");
        const hashes = xorb.hashes.slice(term.chunkStart, term.chunkEnd);
        const sizes = xorb.sizes.slice(term.chunkStart, term.chunkEnd);
        assert.equal(hashes.length, term.chunkEnd - term.chunkStart, "term inside its xorb");
        assert.equal(
          term.unpackedBytes,
          sizes.reduce((a, b) => a + b, 0),
          "term length",
        );
        assert.ok(hashEquals(verificationHash(hashes), file.verificationHashes![t]), "verification hash");
        hashes.forEach((hash, i) => {
          leaves.push({ hash, size: sizes[i] });
        });
      });
      assert.ok(hashEquals(fileHash(leaves), file.fileHash), "file hash");
      assert.ok(file.sha256 !== null, "metadata extension present");
      files.set(
        hashToHex(file.fileHash),
        leaves.reduce((a, l) => a + l.size, 0),
      );
      if (leaves.length > 0) dedupIndex.set(hashToHex(leaves[0].hash), hashToHex(file.terms[0].xorbHash));
    }
    for (const block of shard.xorbs) {
      const stored = xorbs.get(hashToHex(block.xorbHash));
      assert.ok(stored, "listed xorbs were uploaded");
      block.chunks.forEach((chunk, i) => {
        assert.ok(hashEquals(chunk.hash, stored.hashes[i]));
        if (isGlobalDedupEligible(chunk.hash)) dedupIndex.set(hashToHex(chunk.hash), hashToHex(block.xorbHash));
      });
    }
  }

  const fetch: FetchFunction = async (input, init) => {
    const url = new URL(String(input));
    const method = init?.method ?? "GET";
    calls.push(`${method} ${url.pathname.replace(/[0-9a-f]{64}/, "<hash>")}`);
    if (url.origin === HUB) return casTokenAnswer("t");
    const body = init?.body as Uint8Array | undefined;
    let match: RegExpExecArray | null;
    if ((match = /^\/v1\/xorbs\/default\/([0-9a-f]{64})$/.exec(url.pathname)) && method === "POST") {
      if (options.rejectXorbs) return jsonResponse(400, { error: options.rejectXorbs });
      const info = validateXorb(body!, { expectedHash: hashFromHex(match[1]) });
      const known = xorbs.has(match[1]);
      xorbs.set(match[1], { hashes: info.chunks.map((c) => c.hash), sizes: info.chunks.map((c) => c.uncompressedLength) });
      return jsonResponse(200, { was_inserted: !known });
    }
    if (url.pathname === "/v1/shards" && method === "POST") {
      registerShard(body!);
      return jsonResponse(200, { result: 1 });
    }
    if ((match = /^\/v1\/chunks\/default\/([0-9a-f]{64})$/.exec(url.pathname))) {
      const xorbHex = dedupIndex.get(match[1]);
      if (xorbHex === undefined) return jsonResponse(404, { error: "not tracked" });
      const stored = xorbs.get(xorbHex)!;
      let offset = 0;
      const block: ShardXorb = {
        xorbHash: hashFromHex(xorbHex),
        flags: 0,
        numBytesInXorb: stored.sizes.reduce((a, b) => a + b, 0),
        numBytesOnDisk: 0,
        chunks: stored.hashes.map((hash, i) => {
          const chunk = { hash, byteRangeStart: offset, unpackedBytes: stored.sizes[i], flags: 0 };
          offset += stored.sizes[i];
          return chunk;
        }),
      };
      const now = Math.floor(Date.now() / 1000);
      return new Response(serializeFullShard({ files: [], xorbs: [block] }, { hmacKey: DEDUP_KEY, creationTimestamp: now, keyExpiry: now + 3600 }));
    }
    return jsonResponse(404, { error: `unexpected ${method} ${url.pathname}` });
  };
  return { fetch, xorbs, files, calls };
}

const dir = tempDirForFile("castor-client-upload-");

describe("upload against an in-memory CAS", () => {
  it("sends xorbs, then one shard whose every term, verification hash and file hash checks out", async () => {
    const cas = memoryCas();
    const a = join(dir.path, "a");
    const b = join(dir.path, "b");
    const empty = join(dir.path, "empty");
    const dataA = pseudoRandom(1, 3 * 1024 * 1024 + 17);
    const dataB = Buffer.concat([dataA.subarray(0, 1024 * 1024), pseudoRandom(2, 500_000)]);
    await writeFile(a, dataA);
    await writeFile(b, dataB);
    await writeFile(empty, "");
    const result = await fakeHubClient(cas.fetch, REPO, HUB_TOKEN).upload([a, b, empty]);

    assert.deepEqual(
      result.files.map((f) => [f.path, f.size, f.sha256]),
      [a, b, empty].map((path, i) => [
        path,
        [dataA, dataB, Buffer.alloc(0)][i].length,
        createHash("sha256")
          .update([dataA, dataB, Buffer.alloc(0)][i])
          .digest("hex"),
      ]),
    );
    // The file hash is the one of the CDC chunks of the content.
    const leavesOf = (data: Buffer) => splitIntoChunks(data).map((c) => ({ hash: chunkHash(c), size: c.length }));
    assert.equal(result.files[0].fileHash, hashToHex(fileHash(leavesOf(dataA))));
    assert.equal(result.files[2].fileHash, "0".repeat(64));
    // b's first MiB repeats a: deduplicated within the session (its first chunk is a's first chunk).
    assert.ok(result.files[1].dedupedBytes >= 900_000, `b deduplicated ${result.files[1].dedupedBytes}`);
    assert.equal(result.files[0].newBytes, dataA.length);
    assert.deepEqual(
      cas.calls.filter((c) => c.startsWith("POST")),
      ["POST /v1/xorbs/default/<hash>", "POST /v1/shards"],
    );
    assert.equal(result.xorbs.inserted, 1);
    assert.equal(cas.files.size, 3);
  });

  it("lets a global-dedup hit on a later chunk serve the chunks before it in the look-ahead window", async () => {
    // Content whose chunk 0 can be changed alone and which has a 1-in-1024 chunk after it.
    let data: Buffer | null = null;
    let eligibleAt = -1;
    for (let seed = 0; eligibleAt < 0; seed++) {
      const candidate = pseudoRandom(100 + seed, 4 * 1024 * 1024);
      eligibleAt = splitIntoChunks(candidate).findIndex((chunk, i) => i > 1 && isGlobalDedupEligible(chunkHash(chunk)));
      if (eligibleAt > 1) data = candidate;
    }
    const chunks = splitIntoChunks(data!);
    const cas = memoryCas();
    const original = join(dir.path, "original");
    await writeFile(original, data!);
    await fakeHubClient(cas.fetch, REPO, HUB_TOKEN).upload([original]);

    const edited = Buffer.from(data!);
    edited[0] ^= 0xff; // only chunk 0 changes: boundaries depend on the last 64 bytes before a cut
    const copy = join(dir.path, "edited");
    await writeFile(copy, edited);
    const result = await fakeHubClient(cas.fetch, REPO, HUB_TOKEN).upload([copy]);
    // The first-chunk query misses; each eligible chunk's query hits, and the first hit covers
    // chunks 1.. too — also those before it, which were read before its answer came.
    const eligible = chunks.slice(1).filter((chunk) => isGlobalDedupEligible(chunkHash(chunk))).length;
    assert.ok(eligible >= 1);
    assert.equal(result.globalDedup.queries, 1 + eligible);
    assert.equal(result.globalDedup.hits, eligible);
    assert.equal(result.files[0].newBytes, chunks[0].length);
    assert.equal(result.files[0].dedupedBytes, data!.length - chunks[0].length);
    assert.equal(cas.files.size, 2);
  });

  it("fails with the server's message when a xorb is refused, and registers nothing", async () => {
    const cas = memoryCas({ rejectXorbs: "Xorb hash mismatch: the body hashes to something else" });
    const path = join(dir.path, "refused");
    await writeFile(path, pseudoRandom(7, 100_000));
    await assert.rejects(
      fakeHubClient(cas.fetch, REPO, HUB_TOKEN).upload([path]),
      (error: unknown) => error instanceof CastorClientError && error.kind === "http" && /answered 400 Bad Request: Xorb hash mismatch/.test(error.message),
    );
    assert.equal(cas.calls.filter((c) => c === "POST /v1/shards").length, 0);
  });

  it("compresses text on the thread pool into chunks the server validates, sending far fewer bytes", async () => {
    const cas = memoryCas();
    const text = Buffer.from(
      Array.from({ length: 80_000 }, (_, i) => `2025-06-${10 + (i % 20)} level=info id=${(i * 7919) % 100_003} ok\n`).join(""),
      "latin1",
    );
    const path = join(dir.path, "log.txt");
    await writeFile(path, text);
    const result = await fakeHubClient(cas.fetch, REPO, HUB_TOKEN).upload([path]);
    assert.equal(result.files[0].size, text.length);
    assert.ok(result.xorbs.bytesSent < text.length / 2, `sent ${result.xorbs.bytesSent} of ${text.length}`);
    assert.equal(result.files[0].fileHash, hashToHex(fileHash(splitIntoChunks(text).map((c) => ({ hash: chunkHash(c), size: c.length })))));
  });

  it("makes the xorbs smaller toward the end, so the server's last one is quick", async () => {
    const cas = memoryCas();
    const size = 40 * 1024 * 1024;
    const path = join(dir.path, "forty");
    await writeFile(path, pseudoRandom(9, size));
    const result = await fakeHubClient(cas.fetch, REPO, HUB_TOKEN).upload([path]);
    const sizes = [...cas.xorbs.values()].map((x) => x.sizes.reduce((a, b) => a + b, 0));
    assert.equal(result.xorbs.inserted, sizes.length);
    assert.equal(
      sizes.reduce((a, b) => a + b, 0),
      size,
    );
    assert.ok(sizes.length >= 3, `xorbs of ${sizes.join(", ")} bytes`);
    // Half of what is left, never above 64 MiB: the first takes at most 20 MiB of the 40.
    assert.ok(sizes[0] <= size / 2, `first xorb ${sizes[0]}`);
    assert.ok(sizes.at(-1)! < sizes[0], `last xorb ${sizes.at(-1)} is smaller than the first ${sizes[0]}`);
    assert.ok(sizes.at(-1)! <= 8 * 1024 * 1024 + 131_072, `last xorb ${sizes.at(-1)}`);
  });

  it("refuses missing files and directories before asking for a token", async () => {
    const cas = memoryCas();
    for (const path of [join(dir.path, "missing"), dir.path]) {
      await assert.rejects(
        fakeHubClient(cas.fetch, REPO, HUB_TOKEN).upload([path]),
        (error: unknown) => error instanceof CastorClientError && error.kind === "io",
      );
    }
    await assert.rejects(
      fakeHubClient(cas.fetch, REPO, HUB_TOKEN).upload([]),
      (error: unknown) => error instanceof CastorClientError && error.kind === "usage",
    );
    assert.deepEqual(cas.calls, []);
  });
});
