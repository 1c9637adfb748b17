import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ChunkIndex, FileBuilder, XorbBuilder, XorbHandle, planShards, shardFileBytes, shardXorbBytes, toShardFile } from "../../src/client/packing.js";
import {
  CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE,
  CompressionScheme,
  compressChunkBest,
  ZERO_HASH,
  chunkHash,
  fileHash,
  hashFromHex,
  hashToHex,
  isGlobalDedupEligible,
  parseFullShard,
  parseUploadShard,
  serializeFullShard,
  serializeUploadShard,
  validateXorb,
  verificationHash,
  type Hash,
  type ShardContent,
  type ShardFile,
  type ShardXorb,
} from "../../src/format/index.js";
import { fromHex, loadVector, makeData, splitmix64Bytes } from "../helpers/vectors.js";

const xorbVector = loadVector("xorb-small.json");
const dedupVector = loadVector("shard-dedup-response-small.json");
const VECTOR_CHUNKS: Uint8Array[] = xorbVector.chunk_data_hex.map((hex: string) => fromHex(hex));

function distinctChunks(count: number, size: number, seed = 1n): Uint8Array[] {
  return Array.from({ length: count }, (_, i) => splitmix64Bytes(seed * 1000n + BigInt(i), size));
}

function sessionXorb(chunks: Uint8Array[]): XorbHandle {
  return new XorbHandle("session", null, chunks.map(chunkHash), null);
}

describe("XorbBuilder", () => {
  it("seals chunks into a body the server-side validator accepts, with the same xorb hash and chunk table", () => {
    const builder = new XorbBuilder();
    const hashes = VECTOR_CHUNKS.map(chunkHash);
    VECTOR_CHUNKS.forEach((chunk, i) => {
      assert.equal(builder.add(chunk, hashes[i]), i);
    });
    const sealed = builder.seal();

    // The xorb hash depends only on the chunks' content, so it must be the vector's whatever the encoding.
    assert.equal(hashToHex(sealed.info.hash), xorbVector.expected.xorb_hash);
    const validated = validateXorb(sealed.bytes, { expectedHash: sealed.info.hash });
    assert.deepEqual(
      validated.chunks.map((c) => hashToHex(c.hash)),
      xorbVector.expected.chunks.map((c: { chunk_hash: string }) => c.chunk_hash),
    );
    assert.equal(sealed.handle.isSealed, true);
    assert.equal(hashToHex(sealed.handle.hash), xorbVector.expected.xorb_hash);

    assert.equal(hashToHex(sealed.block.xorbHash), xorbVector.expected.xorb_hash);
    assert.equal(
      sealed.block.numBytesInXorb,
      VECTOR_CHUNKS.reduce((sum, c) => sum + c.length, 0),
    );
    assert.equal(sealed.block.numBytesOnDisk, sealed.bytes.length);
    let offset = 0;
    sealed.block.chunks.forEach((chunk, i) => {
      assert.equal(chunk.byteRangeStart, offset);
      assert.equal(chunk.unpackedBytes, VECTOR_CHUNKS[i].length);
      assert.equal(chunk.flags, isGlobalDedupEligible(hashes[i]) ? CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE : 0);
      offset += chunk.unpackedBytes;
    });
  });

  it("compresses each chunk with the best scheme: compressible data shrinks, random data stays raw", () => {
    const builder = new XorbBuilder();
    const text = makeData(65_536, 1, 0); // a repeating 0..255 ramp
    const random = splitmix64Bytes(7n, 65_536);
    builder.add(text, chunkHash(text));
    builder.add(random, chunkHash(random));
    const { info, bytes } = builder.seal();
    assert.notEqual(info.chunks[0].scheme, CompressionScheme.None);
    assert.ok(info.chunks[0].serializedEnd < 8 + 1024, "the ramp compresses to a small payload");
    assert.equal(info.chunks[1].scheme, CompressionScheme.None);
    assert.equal(bytes.length, info.chunks[0].serializedEnd + 8 + 65_536);
  });

  it("copies uncompressed payloads, so the caller's read buffer can be reused or dropped", () => {
    const piece = splitmix64Bytes(9n, 20_000);
    const chunk = piece.subarray(0, 10_000);
    const hash = chunkHash(chunk);
    const builder = new XorbBuilder();
    builder.add(chunk, hash);
    piece.fill(0);
    const { info } = builder.seal();
    assert.equal(hashToHex(info.chunks[0].hash), hashToHex(hash));
  });

  it("reports when the next chunk would pass the chunk or byte limit, and refuses to pass it", () => {
    const byCount = new XorbBuilder({ maxChunks: 2, maxUncompressedBytes: 1 << 20 });
    const chunks = distinctChunks(3, 100);
    byCount.add(chunks[0], chunkHash(chunks[0]));
    byCount.add(chunks[1], chunkHash(chunks[1]));
    assert.equal(byCount.canTake(1), false);
    assert.throws(() => byCount.add(chunks[2], chunkHash(chunks[2])), RangeError);

    const byBytes = new XorbBuilder({ maxChunks: 100, maxUncompressedBytes: 250 });
    byBytes.add(chunks[0], chunkHash(chunks[0]));
    byBytes.add(chunks[1], chunkHash(chunks[1]));
    assert.equal(byBytes.canTake(50), true);
    assert.equal(byBytes.canTake(51), false);
    assert.equal(byBytes.uncompressedBytes, 200);
  });

  it("uses the protocol limits by default: 8,192 chunks and 64 MiB", () => {
    const builder = new XorbBuilder();
    assert.equal(builder.canTake(64 * 1024 * 1024), true);
    assert.equal(builder.canTake(64 * 1024 * 1024 + 1), false);
  });

  it("refuses to seal an empty xorb", () => {
    assert.throws(() => new XorbBuilder().seal(), RangeError);
  });

  it("packs a payload compressed beforehand as given, and refuses one larger than its chunk", () => {
    const text = makeData(65_536, 1, 0);
    const compressed = compressChunkBest(text);
    const builder = new XorbBuilder();
    builder.add(text, chunkHash(text), compressed);
    const { bytes, info } = builder.seal();
    assert.equal(info.chunks[0].scheme, compressed.scheme);
    assert.deepEqual(Buffer.from(bytes.subarray(8)), Buffer.from(compressed.payload));
    assert.equal(hashToHex(validateXorb(bytes, { expectedHash: info.hash }).hash), hashToHex(info.hash));

    const random = splitmix64Bytes(11n, 1000);
    assert.throws(() => new XorbBuilder().add(random, chunkHash(random), { scheme: CompressionScheme.LZ4, payload: new Uint8Array(1001) }), RangeError);
    assert.throws(() => new XorbBuilder().add(random, chunkHash(random), { scheme: CompressionScheme.None, payload: random.subarray(1) }), RangeError);
  });

  it("writes into the body buffer its allocator hands out, sized for the largest xorb its limits allow", () => {
    const asked: number[] = [];
    const given = new Uint8Array(10_000).fill(0xee);
    const builder = new XorbBuilder({ maxChunks: 4, maxUncompressedBytes: 5_000 }, (capacity) => {
      asked.push(capacity);
      return given;
    });
    const chunks = distinctChunks(2, 1_000);
    for (const chunk of chunks) builder.add(chunk, chunkHash(chunk));
    const { bytes, info } = builder.seal();
    assert.deepEqual(asked, [5_000 + 8 * 4]);
    assert.equal(bytes.buffer, given.buffer, "no copy: the body is a view of the given buffer");
    assert.equal(bytes.length, info.serializedLength);
    assert.equal(hashToHex(validateXorb(bytes, { expectedHash: info.hash }).hash), hashToHex(info.hash));
    assert.throws(() => new XorbBuilder(undefined, () => new Uint8Array(10)).add(chunks[0], chunkHash(chunks[0])), RangeError);
  });
});

describe("FileBuilder (terms and verification)", () => {
  it("joins consecutive chunks of one xorb into one term and starts a new term on any jump", () => {
    const chunksA = distinctChunks(4, 300, 2n);
    const chunksB = distinctChunks(2, 500, 3n);
    const a = sessionXorb(chunksA);
    const b = sessionXorb(chunksB);
    const file = new FileBuilder();
    const sequence: [XorbHandle, number, Uint8Array][] = [
      [a, 0, chunksA[0]],
      [a, 1, chunksA[1]],
      [a, 2, chunksA[2]], // term 0: a[0, 3)
      [b, 0, chunksB[0]],
      [b, 1, chunksB[1]], // term 1: b[0, 2)
      [a, 1, chunksA[1]], // term 2: a[1, 2) — an index jump back
      [a, 3, chunksA[3]], // term 3: a[3, 4) — a jump forward over chunk 2
    ];
    for (const [xorb, index, data] of sequence) file.addChunk({ xorb, index }, chunkHash(data), data.length);
    a.seal(hashFromHex("11".repeat(32)));
    b.seal(hashFromHex("22".repeat(32)));

    const built = file.finish(ZERO_HASH);
    const shardFile = toShardFile(built);
    assert.deepEqual(
      shardFile.terms.map((t) => [hashToHex(t.xorbHash).slice(0, 2), t.chunkStart, t.chunkEnd, t.unpackedBytes]),
      [
        ["11", 0, 3, 900],
        ["22", 0, 2, 1000],
        ["11", 1, 2, 300],
        ["11", 3, 4, 300],
      ],
    );
    // One verification hash per term, over the raw hashes of exactly that term's chunks.
    const raw = (chunks: Uint8Array[]) => chunks.map(chunkHash);
    assert.deepEqual(
      built.verificationHashes.map(hashToHex),
      [raw(chunksA.slice(0, 3)), raw(chunksB), raw([chunksA[1]]), raw([chunksA[3]])].map((hashes) => hashToHex(verificationHash(hashes))),
    );
    const leaves = sequence.map(([, , data]) => ({ hash: chunkHash(data), size: data.length }));
    assert.equal(hashToHex(built.fileHash), hashToHex(fileHash(leaves)));
    assert.equal(built.size, 3 * 300 + 1000 + 300 + 300);
    assert.equal(shardFile.sha256, ZERO_HASH);
  });

  it("gives an empty file the zero hash and no terms", () => {
    const built = new FileBuilder().finish(ZERO_HASH);
    assert.equal(hashToHex(built.fileHash), "0".repeat(64));
    assert.deepEqual(built.terms, []);
    assert.deepEqual(built.verificationHashes, []);
    assert.equal(built.size, 0);
  });

  it("remembers where the last chunk went, for the next lookup to continue from", () => {
    const chunks = distinctChunks(2, 100, 4n);
    const xorb = sessionXorb(chunks);
    const file = new FileBuilder();
    assert.equal(file.lastLocation, null);
    file.addChunk({ xorb, index: 0 }, chunkHash(chunks[0]), 100);
    file.addChunk({ xorb, index: 1 }, chunkHash(chunks[1]), 100);
    assert.deepEqual(file.lastLocation, { xorb, index: 1 });
  });

  it("refuses to write a term whose xorb is still being built", () => {
    const chunks = distinctChunks(1, 100, 5n);
    const file = new FileBuilder();
    file.addChunk({ xorb: sessionXorb(chunks), index: 0 }, chunkHash(chunks[0]), 100);
    assert.throws(() => toShardFile(file.finish(ZERO_HASH)), /no hash yet/);
  });
});

describe("ChunkIndex (deduplication matching)", () => {
  it("finds chunks packed earlier in the session", () => {
    const index = new ChunkIndex();
    const chunks = distinctChunks(3, 100, 6n);
    const xorb = sessionXorb(chunks);
    chunks.forEach((chunk, i) => {
      index.addSessionChunk(chunkHash(chunk), { xorb, index: i });
    });
    assert.deepEqual(index.lookup(chunkHash(chunks[2]), null), { xorb, index: 2 });
    assert.equal(index.lookup(chunkHash(distinctChunks(1, 100, 99n)[0]), null), null);
    assert.equal(index.has(chunkHash(chunks[0])), true);
  });

  it("prefers the chunk right after the previous match, so repeated content keeps one long term", () => {
    // The xorb holds X Y X Y: a lookup of X after Y@1 must give X@2, not the first X@0.
    const [x, y] = distinctChunks(2, 100, 7n);
    const xorb = sessionXorb([x, y, x, y]);
    const index = new ChunkIndex();
    [x, y, x, y].forEach((chunk, i) => {
      index.addSessionChunk(chunkHash(chunk), { xorb, index: i });
    });
    assert.deepEqual(index.lookup(chunkHash(x), null), { xorb, index: 0 });
    assert.deepEqual(index.lookup(chunkHash(x), { xorb, index: 1 }), { xorb, index: 2 });
    assert.deepEqual(index.lookup(chunkHash(y), { xorb, index: 2 }), { xorb, index: 3 });
    // At the xorb's end the continuation falls back to the map.
    assert.deepEqual(index.lookup(chunkHash(x), { xorb, index: 3 }), { xorb, index: 0 });
  });

  it("matches raw chunk hashes against the keyed hashes of a real-shaped dedup answer", () => {
    const index = new ChunkIndex();
    const shard = parseFullShard(fromHex(dedupVector.response_hex));
    assert.equal(index.importDedupShard(shard), 1);
    const rawHashes = xorbVector.expected.chunks.map((c: { chunk_hash: string }) => hashFromHex(c.chunk_hash)) as Hash[];
    rawHashes.forEach((hash, i) => {
      const found = index.lookup(hash, null);
      assert.ok(found, `chunk ${i} is found through the keyed hash`);
      assert.equal(found.index, i);
      assert.equal(found.xorb.origin, "server");
      assert.equal(hashToHex(found.xorb.hash), xorbVector.expected.xorb_hash);
    });
    // Continuation works on keyed hashes too.
    const first = index.lookup(rawHashes[0], null)!;
    assert.deepEqual(index.lookup(rawHashes[1], first), { xorb: first.xorb, index: 1 });
    // The same answer again adds nothing.
    assert.equal(index.importDedupShard(parseFullShard(fromHex(dedupVector.response_hex))), 0);
  });

  it("treats a zero footer key as raw chunk hashes, and ignores keyed hashes under another key", () => {
    const chunks = distinctChunks(2, 200, 8n);
    const xorbHash = hashFromHex("33".repeat(32));
    const block: ShardXorb = {
      xorbHash,
      flags: 0,
      numBytesInXorb: 400,
      numBytesOnDisk: 0,
      chunks: chunks.map((chunk, i) => ({ hash: chunkHash(chunk), byteRangeStart: 200 * i, unpackedBytes: 200, flags: 0 })),
    };
    const raw = new ChunkIndex();
    raw.importDedupShard(parseFullShard(serializeFullShard({ files: [], xorbs: [block] }, { creationTimestamp: 1, keyExpiry: 2 })));
    assert.equal(raw.lookup(chunkHash(chunks[1]), null)?.index, 1);

    const keyed = new ChunkIndex();
    const key = hashFromHex("44".repeat(32));
    keyed.importDedupShard(parseFullShard(serializeFullShard({ files: [], xorbs: [block] }, { hmacKey: key, creationTimestamp: 1, keyExpiry: 2 })));
    assert.equal(keyed.lookup(chunkHash(chunks[0]), null)?.index, 0);
    assert.equal(keyed.lookup(chunkHash(distinctChunks(1, 200, 77n)[0]), null), null);
  });
});

describe("planShards", () => {
  function fileWith(terms: number): ShardFile {
    return {
      fileHash: hashFromHex(`${terms.toString(16).padStart(2, "0")}`.repeat(32)),
      terms: Array.from({ length: terms }, (_, i) => ({ xorbHash: hashFromHex("55".repeat(32)), unpackedBytes: 10, chunkStart: i, chunkEnd: i + 1 })),
      verificationHashes: Array.from({ length: terms }, () => hashFromHex("66".repeat(32))),
      sha256: hashFromHex("77".repeat(32)),
    };
  }
  function xorbWith(chunks: number, tag: string): ShardXorb {
    return {
      xorbHash: hashFromHex(tag.repeat(32)),
      flags: 0,
      numBytesInXorb: chunks * 10,
      numBytesOnDisk: 0,
      chunks: Array.from({ length: chunks }, (_, i) => ({ hash: hashFromHex("88".repeat(32)), byteRangeStart: 10 * i, unpackedBytes: 10, flags: 0 })),
    };
  }

  it("puts a normal batch into one shard whose size the estimate predicts exactly", () => {
    const content: ShardContent = { files: [fileWith(3), fileWith(1)], xorbs: [xorbWith(5, "aa"), xorbWith(2, "bb")] };
    const shards = planShards(content);
    assert.equal(shards.length, 1);
    const bytes = serializeUploadShard(shards[0], { kind: "xet-core" });
    const estimate = 48 + 2 * 48 + content.files.reduce((s, f) => s + shardFileBytes(f), 0) + content.xorbs.reduce((s, x) => s + shardXorbBytes(x), 0);
    assert.equal(bytes.length, estimate);
    const parsed = parseUploadShard(bytes);
    assert.equal(parsed.files.length, 2);
    assert.equal(parsed.xorbs.length, 2);
  });

  it("splits a batch that passes the size limit, keeping order and losing nothing", () => {
    const content: ShardContent = {
      files: [fileWith(4), fileWith(4), fileWith(4)],
      xorbs: [xorbWith(6, "aa"), xorbWith(6, "bb")],
    };
    const limit = 48 * 3 + 48 * 7 + 48 * 10; // fixed part + one xorb block + one file block, roughly
    const shards = planShards(content, limit);
    assert.ok(shards.length > 1);
    for (const shard of shards) assert.ok(serializeUploadShard(shard, { kind: "xet-core" }).length <= limit);
    assert.deepEqual(
      shards.flatMap((s) => s.xorbs),
      content.xorbs,
    );
    assert.deepEqual(
      shards.flatMap((s) => s.files),
      content.files,
    );
  });

  it("sends one (empty) shard for a batch of nothing but empty files, and refuses a block larger than a shard", () => {
    const empty: ShardFile = { fileHash: ZERO_HASH, terms: [], verificationHashes: [], sha256: ZERO_HASH };
    assert.deepEqual(planShards({ files: [empty], xorbs: [] }), [{ files: [empty], xorbs: [] }]);
    assert.throws(() => planShards({ files: [fileWith(10)], xorbs: [] }, 48 * 10), RangeError);
  });

  it("by default fills a shard up to the protocol's 64 MiB and not one record past it", () => {
    const protocolLimit = 64 * 1024 * 1024;
    const fixedBytes = 48 + 2 * 48; // header and the two section bookends
    // A xorb block of `records` 48-byte records (its own and one per chunk); a sparse chunk
    // list, because only its length counts here.
    const blockOf = (records: number): ShardXorb => ({ ...xorbWith(0, "cc"), chunks: new Array(records - 1) });
    const mostRecords = Math.floor((protocolLimit - fixedBytes) / 48);
    assert.equal(planShards({ files: [], xorbs: [blockOf(mostRecords)] }).length, 1, "a block that fills 64 MiB fits one shard");
    assert.throws(() => planShards({ files: [], xorbs: [blockOf(mostRecords + 1)] }), RangeError, "one record more needs a larger shard");
  });
});
