import assert from "node:assert/strict";
import { beforeEach, describe, it } from "node:test";
import { DEDUP_KEY_LIFETIME_SECONDS, DedupKeyRing, DedupService, deriveDedupKey, utcDay } from "../../src/cas/dedup.js";
import type { ShardRegistrationService } from "../../src/cas/shard-registration.js";
import type { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { fileHash, hashFromHex, hashToHex, isZeroHash, keyedChunkHash, verificationHash, type Hash } from "../../src/format/hash.js";
import { parseFullShard, type ParsedFullShard, type ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import type { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { ingestWhole, useFreshCasServices } from "../helpers/stores.js";
import { fromHex, loadVector, makeData } from "../helpers/vectors.js";

const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const dedupVector = loadVector("shard-dedup-response-small.json");
const VECTOR_XORB = hashFromHex(xorbVector.expected.xorb_hash);
const VECTOR_CHUNKS: Hash[] = xorbVector.expected.chunks.map((c: { chunk_hash: string }) => hashFromHex(c.chunk_hash));

const SEED = new TextEncoder().encode("a dedup key seed of at least thirty-two characters");
const NOON = new Date("2031-03-14T12:00:00Z");

describe("dedup key derivation", () => {
  it("is stable within a UTC day and differs between days and seeds", () => {
    const ring = new DedupKeyRing(SEED);
    const morning = ring.keyFor(new Date("2031-03-14T00:00:00Z"));
    const night = ring.keyFor(new Date("2031-03-14T23:59:59.999Z"));
    const nextDay = ring.keyFor(new Date("2031-03-15T00:00:00Z"));
    assert.deepEqual(morning, night);
    assert.deepEqual(new DedupKeyRing(SEED).keyFor(NOON), morning, "another node with the same seed derives the same key");
    assert.deepEqual(deriveDedupKey(SEED, "2031-03-14"), morning);
    assert.notDeepEqual(nextDay, morning);
    assert.notDeepEqual(deriveDedupKey(new TextEncoder().encode("another seed, also long enough to be a seed"), "2031-03-14"), morning);
    for (const key of [morning, nextDay]) {
      assert.equal(key.length, 32);
      assert.equal(isZeroHash(key), false);
    }
  });

  it("names days in UTC and refuses bad input", () => {
    assert.equal(utcDay(new Date("2031-03-14T23:30:00-05:00")), "2031-03-15");
    assert.throws(() => utcDay(new Date("not a date")), RangeError);
    assert.throws(() => deriveDedupKey(SEED, "14/03/2031"), /a day is written YYYY-MM-DD/);
    assert.throws(() => deriveDedupKey(new Uint8Array(0), "2031-03-14"), /seed is empty/);
  });
});

const cas = useFreshCasServices("dedup");
let metadata: SqliteMetadataStore;
let ingest: XorbIngestService;
let registration: ShardRegistrationService;
let repoId: number;
let now: Date;

beforeEach(async () => {
  ({ metadata, ingest, registration } = cas());
  repoId = (await metadata.createRepo("model", "alice/bert")).id;
  now = NOON;
  await upload(fromHex(xorbVector.body_hex), VECTOR_XORB);
});

function service(options: { maxXorbs?: number; maxResponseBytes?: number } = {}): DedupService {
  return new DedupService({ metadata, dedupKeySeed: SEED, now: () => now, ...options });
}

async function upload(bytes: Uint8Array, hash: Hash): Promise<void> {
  await ingestWhole(ingest, hash, bytes);
}

/** A file over all chunks of `xorb`, registered in a shard of its own. */
async function registerWholeXorbFile(xorb: SerializedXorb["info"]): Promise<void> {
  const file: ShardFile = {
    fileHash: fileHash(xorb.chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
    terms: [{ xorbHash: xorb.hash, chunkStart: 0, chunkEnd: xorb.chunks.length, unpackedBytes: xorb.uncompressedLength }],
    verificationHashes: [verificationHash(xorb.chunks.map((c) => c.hash))],
    sha256: null,
  };
  await registration.register(serializeUploadShard({ files: [file], xorbs: [] }, { kind: "xet-core" }), { repoId });
}

/** What a client does with an answer: key its own chunk hash with the footer key and look for it. */
function clientFinds(answer: ParsedFullShard, chunk: Hash): string[] {
  const keyed = keyedChunkHash(answer.footer.hmacKey, chunk);
  return answer.xorbs.filter((xorb) => xorb.chunks.some((c) => Buffer.compare(c.hash, keyed) === 0)).map((xorb) => hashToHex(xorb.xorbHash));
}

describe("dedup query", () => {
  it("answers a chunk the vector shard indexed with a production-shaped, keyed shard", async () => {
    await registration.register(fromHex(shardVector.xet_core_style_hex), { repoId });
    const bytes = await service().query(VECTOR_CHUNKS[0]);
    assert.ok(bytes);
    const answer = parseFullShard(bytes);
    const expected = parseFullShard(fromHex(dedupVector.response_hex));

    assert.equal(bytes.length, dedupVector.expected.length);
    assert.equal(answer.files.length, 0);
    assert.deepEqual(
      answer.xorbs.map((x) => ({ ...x, xorbHash: hashToHex(x.xorbHash), chunks: x.chunks.map((c) => ({ ...c, hash: undefined })) })),
      expected.xorbs.map((x) => ({ ...x, xorbHash: hashToHex(x.xorbHash), chunks: x.chunks.map((c) => ({ ...c, hash: undefined })) })),
      "same blocks as the reference answer, apart from the key-dependent hashes",
    );
    const { hmacKey, creationTimestamp, keyExpiry, ...layout } = answer.footer;
    const { hmacKey: _k, creationTimestamp: _c, keyExpiry: _e, ...expectedLayout } = expected.footer;
    assert.deepEqual(layout, expectedLayout, "same footer offsets and totals");

    assert.deepEqual(hmacKey, deriveDedupKey(SEED, "2031-03-14"));
    assert.equal(creationTimestamp, BigInt(NOON.getTime() / 1000));
    assert.equal(keyExpiry, creationTimestamp + BigInt(DEDUP_KEY_LIFETIME_SECONDS));
    answer.xorbs[0].chunks.forEach((chunk, i) => {
      assert.deepEqual(chunk.hash, keyedChunkHash(hmacKey, VECTOR_CHUNKS[i]), `chunk ${i} is keyed`);
    });
    for (const chunk of VECTOR_CHUNKS) assert.deepEqual(clientFinds(answer, chunk), [xorbVector.expected.xorb_hash]);
    for (const chunk of VECTOR_CHUNKS) assert.equal(Buffer.from(bytes).includes(Buffer.from(chunk)), false, "raw chunk hashes are never disclosed");
  });

  it("answers null for chunks that are not indexed", async () => {
    assert.equal(await service().query(VECTOR_CHUNKS[0]), null, "nothing registered yet");
    await registration.register(fromHex(shardVector.xet_core_style_hex), { repoId });
    assert.equal(await service().query(VECTOR_CHUNKS[1]), null, "chunk 1 starts no file and is not eligible");
    assert.notEqual(await service().query(VECTOR_CHUNKS[2]), null, "chunk 2 starts file B");
  });

  it("rotates the key daily; each answer matches with its own footer key", async () => {
    await registration.register(fromHex(shardVector.xet_core_style_hex), { repoId });
    const today = parseFullShard((await service().query(VECTOR_CHUNKS[0]))!);
    now = new Date("2031-03-15T08:00:00Z");
    const tomorrow = parseFullShard((await service().query(VECTOR_CHUNKS[0]))!);
    assert.notDeepEqual(tomorrow.footer.hmacKey, today.footer.hmacKey);
    assert.notDeepEqual(tomorrow.xorbs[0].chunks[0].hash, today.xorbs[0].chunks[0].hash);
    assert.deepEqual(clientFinds(today, VECTOR_CHUNKS[0]), [xorbVector.expected.xorb_hash]);
    assert.deepEqual(clientFinds(tomorrow, VECTOR_CHUNKS[0]), [xorbVector.expected.xorb_hash]);
  });

  describe("with a chunk held by several xorbs", () => {
    const shared = makeData(5000, 13, 1);
    const xorbs = [1, 2, 3].map((n) => serializeXorb([{ data: shared }, ...Array.from({ length: n }, (_, i) => ({ data: makeData(1000 + i, n + 2, i) }))]));
    const sharedChunk = xorbs[0].info.chunks[0].hash;

    beforeEach(async () => {
      for (const xorb of xorbs) {
        await upload(xorb.bytes, xorb.info.hash);
        await registerWholeXorbFile(xorb.info);
      }
    });

    it("lists every xorb holding it, oldest registration first, with all of their chunks", async () => {
      const answer = parseFullShard((await service().query(sharedChunk))!);
      assert.deepEqual(
        answer.xorbs.map((x) => hashToHex(x.xorbHash)),
        xorbs.map((x) => hashToHex(x.info.hash)),
      );
      answer.xorbs.forEach((block, b) => {
        const stored = xorbs[b].info;
        assert.equal(block.numBytesInXorb, stored.uncompressedLength);
        assert.deepEqual(
          block.chunks.map((c) => c.unpackedBytes),
          stored.chunks.map((c) => c.uncompressedLength),
        );
        assert.deepEqual(
          block.chunks.map((c) => c.byteRangeStart),
          stored.chunks.map((c) => c.uncompressedEnd - c.uncompressedLength),
        );
      });
      assert.equal(answer.footer.storedBytes, BigInt(xorbs.reduce((sum, x) => sum + x.info.uncompressedLength, 0)));
      assert.deepEqual(clientFinds(answer, sharedChunk).length, 3);
    });

    it("caps the number of xorbs and the size of the answer, keeping the oldest", async () => {
      assert.deepEqual(
        parseFullShard((await service({ maxXorbs: 2 }).query(sharedChunk))!).xorbs.map((x) => hashToHex(x.xorbHash)),
        xorbs.slice(0, 2).map((x) => hashToHex(x.info.hash)),
      );
      // Room for the first block only; the first is always sent.
      const tight = parseFullShard((await service({ maxResponseBytes: 600 }).query(sharedChunk))!);
      assert.deepEqual(
        tight.xorbs.map((x) => hashToHex(x.xorbHash)),
        [hashToHex(xorbs[0].info.hash)],
      );
    });
  });
});
