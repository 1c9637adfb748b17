import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { beforeEach, describe, it } from "node:test";
import { ShardAdmissionError } from "../../src/cas/shard-admission.js";
import { ShardRegistrationService, ShardRejectedError, type ShardProgress, type ShardRejectionCode } from "../../src/cas/shard-registration.js";
import type { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { ZERO_HASH, chunkHash, fileHash, hashFromHex, hashToHex, isGlobalDedupEligible, verificationHash, type Hash } from "../../src/format/hash.js";
import { CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE, shardSha256FromDigest, type ShardFile, type ShardXorb } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import type { CasMetadataStore } from "../../src/metadata/cas.js";
import type { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { blobKey } from "../../src/storage/blob-store.js";
import type { FsBlobStore } from "../../src/storage/fs.js";
import { ingestWhole, sqliteRowCounts, useFreshCasServices } from "../helpers/stores.js";
import { fromHex, loadVector, makeData, toHex } from "../helpers/vectors.js";
import { until } from "../helpers/wait.js";

const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const VECTOR_XORB = hashFromHex(xorbVector.expected.xorb_hash);
const VECTOR_CHUNKS: Hash[] = xorbVector.expected.chunks.map((c: { chunk_hash: string }) => hashFromHex(c.chunk_hash));
const VECTOR_FILES: {
  file_hash: string;
  sha256_standard_hex: string;
  file_size: number;
  terms: { chunk_index_start: number; chunk_index_end: number; unpacked_segment_bytes: number }[];
}[] = shardVector.expected.file_info_section.files;
const FILE_A = hashFromHex(VECTOR_FILES[0].file_hash);
const FILE_B = hashFromHex(VECTOR_FILES[1].file_hash);

/** A fresh copy per call: the service takes the body over and canonicalizes it in place. */
const xetCoreVariant = () => fromHex(shardVector.xet_core_style_hex);
const hfJsVariant = () => fromHex(shardVector.huggingface_js_style_hex);

const cas = useFreshCasServices("shard-registration");
let blobs: FsBlobStore;
let metadata: SqliteMetadataStore;
let ingest: XorbIngestService;
let service: ShardRegistrationService;
let alice: number;
let bob: number;

beforeEach(async () => {
  ({ blobs, metadata, ingest, registration: service } = cas());
  alice = (await metadata.createRepo("model", "alice/bert")).id;
  bob = (await metadata.createRepo("dataset", "bob/corpus")).id;
  await upload(xorbVector.body_hex);
});

async function upload(xorb: SerializedXorb | string): Promise<void> {
  const bytes = typeof xorb === "string" ? fromHex(xorb) : xorb.bytes;
  const hash = typeof xorb === "string" ? VECTOR_XORB : xorb.info.hash;
  await ingestWhole(ingest, hash, bytes);
}

/** Row counts of every table a registration writes, read straight from the SQLite file. */
function tableCounts(): Record<string, number> {
  return sqliteRowCounts(metadata.path, ["shards", "files", "file_repos", "file_sha256", "dedup_chunks"]);
}

async function storedShardKeys(): Promise<string[]> {
  const keys: string[] = [];
  for await (const key of blobs.list("shards/")) keys.push(key);
  return keys;
}

async function assertNoTrace(fileHashes: readonly Hash[] = [FILE_A, FILE_B]): Promise<void> {
  assert.deepEqual(tableCounts(), { shards: 0, files: 0, file_repos: 0, file_sha256: 0, dedup_chunks: 0 });
  assert.deepEqual(await storedShardKeys(), [], "no shard blob");
  for (const hash of fileHashes) {
    assert.equal(await metadata.getFile(hash), null);
    assert.equal(await metadata.isFileInRepo(hash, alice), false);
  }
  for (const chunk of VECTOR_CHUNKS) assert.deepEqual(await metadata.findDedupXorbs(chunk, 10), []);
}

async function assertRejected(body: Uint8Array, code: ShardRejectionCode, message: RegExp): Promise<void> {
  await assert.rejects(service.register(body, { repoId: alice }), (error: unknown) => {
    assert.ok(error instanceof ShardRejectedError, `expected a ShardRejectedError, got ${String(error)}`);
    assert.equal(error.code, code);
    assert.match(error.message, message);
    return true;
  });
}

interface TermSpec {
  xorb: SerializedXorb["info"];
  start: number;
  end: number;
}

/** A correct file block for the given terms: hash, byte counts and range hashes computed. */
function fileOf(terms: readonly TermSpec[], sha256: Hash | null = null): ShardFile {
  const chunks = terms.flatMap(({ xorb, start, end }) => xorb.chunks.slice(start, end).map((c) => ({ hash: c.hash, size: c.uncompressedLength })));
  return {
    fileHash: fileHash(chunks),
    terms: terms.map(({ xorb, start, end }) => ({
      xorbHash: xorb.hash,
      chunkStart: start,
      chunkEnd: end,
      unpackedBytes: xorb.chunks.slice(start, end).reduce((sum, c) => sum + c.uncompressedLength, 0),
    })),
    verificationHashes: terms.map(({ xorb, start, end }) => verificationHash(xorb.chunks.slice(start, end).map((c) => c.hash))),
    sha256,
  };
}

/** The xorb block a client writes for a xorb it uploaded. */
function xorbBlockOf(xorb: SerializedXorb["info"], flagsOf: (index: number) => number = () => 0): ShardXorb {
  let offset = 0;
  return {
    xorbHash: xorb.hash,
    flags: 0,
    numBytesInXorb: xorb.uncompressedLength,
    numBytesOnDisk: 0,
    chunks: xorb.chunks.map((c, i) => {
      const entry = { hash: c.hash, byteRangeStart: offset, unpackedBytes: c.uncompressedLength, flags: flagsOf(i) };
      offset += c.uncompressedLength;
      return entry;
    }),
  };
}

function shardOf(files: readonly ShardFile[], xorbs: readonly ShardXorb[] = []): Uint8Array {
  return serializeUploadShard({ files, xorbs }, { kind: "xet-core" });
}

/** A small xorb of chunks distinct from the vector's; `seed` varies the data. */
/** Chunks of `baseBytes` + 7·i bytes; real clients cut chunks of at least 8,128 bytes but a file's last. */
function makeXorb(seed: number, chunkCount = 3, baseBytes = 300): SerializedXorb {
  return serializeXorb(Array.from({ length: chunkCount }, (_, i) => ({ data: makeData(baseBytes + i * 7, seed * 31 + i + 1, seed) })));
}

/** The vector xorb's info, as the ingest service recorded it. */
function vectorXorbInfo(): SerializedXorb["info"] {
  return serializeXorb(xorbVector.chunk_data_hex.map((hex: string, i: number) => ({ data: fromHex(hex), scheme: xorbVector.chunk_inputs[i].scheme }))).info;
}

describe("shard registration: the vector shards", () => {
  it("registers the xet-core variant (result 1), then knows it (0), and knows the hf.js variant of the same content (0)", async () => {
    const first = await service.register(xetCoreVariant(), { repoId: alice });
    assert.equal(first.inserted, true);
    assert.equal(first.files, 2);

    for (const [i, expected] of VECTOR_FILES.entries()) {
      const file = await metadata.getFile(hashFromHex(expected.file_hash));
      assert.ok(file, `file ${i} is registered`);
      assert.equal(file.size, expected.file_size);
      assert.equal(toHex(file.sha256!), expected.sha256_standard_hex, "SHA-256 stored as the standard digest");
      assert.deepEqual(
        file.terms.map((t) => [hashToHex(t.xorbHash), t.chunkStart, t.chunkEnd, t.unpackedLength]),
        expected.terms.map((t) => [xorbVector.expected.xorb_hash, t.chunk_index_start, t.chunk_index_end, t.unpacked_segment_bytes]),
      );
      assert.equal(await metadata.isFileInRepo(file.hash, alice), true);
      assert.equal(await metadata.isFileInRepo(file.hash, bob), false);
      assert.deepEqual(await metadata.findFileBySha256(alice, fromHex(expected.sha256_standard_hex)), file.hash);
    }

    // File A starts with chunk 0, file B with chunk 2; chunk 1 starts no file and is not hash-eligible.
    assert.equal(isGlobalDedupEligible(VECTOR_CHUNKS[1]), false);
    assert.deepEqual(await metadata.findDedupXorbs(VECTOR_CHUNKS[0], 10), [VECTOR_XORB]);
    assert.deepEqual(await metadata.findDedupXorbs(VECTOR_CHUNKS[2], 10), [VECTOR_XORB]);
    assert.deepEqual(await metadata.findDedupXorbs(VECTOR_CHUNKS[1], 10), []);
    assert.equal(first.dedupEntries, 2);

    const again = await service.register(xetCoreVariant(), { repoId: alice });
    assert.equal(again.inserted, false);
    const otherVariant = await service.register(hfJsVariant(), { repoId: alice });
    assert.equal(otherVariant.inserted, false, "the hf.js wire form of the same content is the same shard");
    assert.deepEqual(otherVariant.shardHash, first.shardHash);
    assert.equal(tableCounts().shards, 1);
  });

  it("registers the hf.js variant first (1) and then knows the xet-core variant (0)", async () => {
    assert.equal((await service.register(hfJsVariant(), { repoId: alice })).inserted, true);
    assert.equal((await service.register(hfJsVariant(), { repoId: alice })).inserted, false);
    assert.equal((await service.register(xetCoreVariant(), { repoId: alice })).inserted, false);
    assert.equal((await metadata.getFile(FILE_B))?.size, 3565);
  });

  it("stores the shard once, in its canonical xet-core form, under its content hash", async () => {
    const { shardHash } = await service.register(hfJsVariant(), { repoId: alice });
    assert.deepEqual(await storedShardKeys(), [blobKey("shards", shardHash)]);
    const parts: Buffer[] = [];
    for await (const part of await blobs.read(blobKey("shards", shardHash))) parts.push(part as Buffer);
    assert.equal(Buffer.concat(parts).toString("hex"), shardVector.xet_core_style_hex, "footer dropped, footer_size and num_bytes_on_disk zeroed");
  });

  it("links the files of a known shard to a second repository that uploads it", async () => {
    assert.equal((await service.register(xetCoreVariant(), { repoId: alice })).inserted, true);
    assert.equal(await metadata.isFileInRepo(FILE_A, bob), false);
    assert.equal((await service.register(hfJsVariant(), { repoId: bob })).inserted, false);
    assert.equal(await metadata.isFileInRepo(FILE_A, bob), true);
    assert.equal(await metadata.isFileInRepo(FILE_B, bob), true);
    assert.equal(await metadata.isFileInRepo(FILE_A, alice), true);
  });
});

describe("shard registration: rejections leave no trace", () => {
  it("refuses a body over the cap before parsing it", async () => {
    const small = new ShardRegistrationService({ metadata, blobs, maxShardBytes: 500 });
    await assert.rejects(small.register(xetCoreVariant(), { repoId: alice }), (error: unknown) => {
      assert.ok(error instanceof ShardRejectedError);
      assert.equal(error.code, "shard_too_large");
      assert.match(error.message, /the shard has 816 bytes, more than this server's limit of 500: split/);
      return true;
    });
    await assertNoTrace();
  });

  it("refuses bytes that are not a shard, or a truncated one, with the format layer's reason", async () => {
    const notShard = xetCoreVariant();
    notShard[0] ^= 0xff;
    await assertRejected(notShard, "invalid_shard", /^invalid shard: not a shard: it must start with the 32-byte shard tag/);
    await assertRejected(xetCoreVariant().subarray(0, 700), "invalid_shard", /^invalid shard: xorb block 0 \(at byte 576\) declares 3 chunks/);
    await assertRejected(new Uint8Array(0), "invalid_shard", /^invalid shard: /);
    await assertNoTrace();
  });

  it("requires verification entries on every file with terms", async () => {
    const info = vectorXorbInfo();
    const file = { ...fileOf([{ xorb: info, start: 0, end: 3 }]), verificationHashes: null };
    await assertRejected(
      shardOf([file]),
      "missing_verification",
      new RegExp(`^file ${hashToHex(file.fileHash)} \\(file block 0\\) has 1 terms but no verification entries`),
    );
    await assertNoTrace([file.fileHash]);
  });

  it("refuses a term naming a xorb the server does not have, even after valid files", async () => {
    const info = vectorXorbInfo();
    const absent = makeXorb(7).info;
    const good = fileOf([{ xorb: info, start: 0, end: 3 }]);
    const bad = fileOf([
      { xorb: info, start: 0, end: 1 },
      { xorb: absent, start: 0, end: 2 },
    ]);
    await assertRejected(
      shardOf([good, bad]),
      "missing_xorb",
      new RegExp(
        `^term 1 of file ${hashToHex(bad.fileHash)} \\(file block 1\\) references xorb ${hashToHex(absent.hash)}, which this server does not have: upload every xorb with POST /v1/xorbs/default/`,
      ),
    );
    await assertNoTrace([good.fileHash, bad.fileHash]);
  });

  it("refuses a xorb block naming a xorb never uploaded: the block does not create it", async () => {
    const absent = makeXorb(8).info;
    await assertRejected(
      shardOf([], [xorbBlockOf(absent)]),
      "missing_xorb",
      new RegExp(`^xorb block 0 references xorb ${hashToHex(absent.hash)}, which this server does not have.*a shard's xorb list does not create xorbs`),
    );
    await assertNoTrace();
  });

  it("refuses a term whose chunk range runs past the xorb", async () => {
    const info = vectorXorbInfo();
    const file = fileOf([{ xorb: info, start: 0, end: 3 }]);
    file.terms[0] = { ...file.terms[0], chunkStart: 1, chunkEnd: 4 };
    await assertRejected(
      shardOf([file]),
      "term_out_of_range",
      new RegExp(
        `^term 0 of file ${hashToHex(file.fileHash)} \\(file block 0\\) references chunks \\[1, 4\\) but xorb ${hashToHex(VECTOR_XORB)} has 3 chunks$`,
      ),
    );
    await assertNoTrace([file.fileHash]);
  });

  it("refuses a term whose unpacked length is not the stored chunks' total", async () => {
    const info = vectorXorbInfo();
    const file = fileOf([{ xorb: info, start: 1, end: 3 }]);
    file.terms[0] = { ...file.terms[0], unpackedBytes: 2566 };
    await assertRejected(
      shardOf([file]),
      "term_length_mismatch",
      /^term 0 of file [0-9a-f]{64} \(file block 0\) says chunks \[1, 3\) of xorb [0-9a-f]{64} unpack to 2566 bytes, but they hold 2565$/,
    );
    await assertNoTrace([file.fileHash]);
  });

  it("refuses a wrong verification entry", async () => {
    const info = vectorXorbInfo();
    const file = fileOf([
      { xorb: info, start: 0, end: 1 },
      { xorb: info, start: 1, end: 3 },
    ]);
    // The range hash of another range: a client that does not have these chunk hashes cannot do better.
    file.verificationHashes![1] = verificationHash([VECTOR_CHUNKS[1]]);
    await assertRejected(
      shardOf([file]),
      "verification_mismatch",
      new RegExp(
        `^verification entry 1 of file ${hashToHex(file.fileHash)} \\(file block 0\\) does not match chunks \\[1, 3\\) of xorb ${hashToHex(VECTOR_XORB)}`,
      ),
    );
    await assertNoTrace([file.fileHash]);
  });

  it("refuses a file hash that the terms' chunks do not produce", async () => {
    const info = vectorXorbInfo();
    const file = fileOf([{ xorb: info, start: 0, end: 3 }]);
    const right = file.fileHash;
    // File B's hash on file A's reconstruction.
    file.fileHash = FILE_B;
    await assertRejected(
      shardOf([file]),
      "file_hash_mismatch",
      new RegExp(
        `^file ${hashToHex(FILE_B)} \\(file block 0\\): the file's chunks \\(3 chunks, 3565 bytes\\) hash to ${hashToHex(right)}, not to the file hash the shard gives$`,
      ),
    );
    await assertNoTrace([FILE_B, right]);
  });

  it("refuses an empty file whose hash is not the zero hash", async () => {
    const empty: ShardFile = { fileHash: FILE_A, terms: [], verificationHashes: [], sha256: null };
    await assertRejected(shardOf([empty]), "file_hash_mismatch", /\(0 chunks, 0 bytes\) hash to 0{64}/);
    await assertNoTrace();
  });

  it("refuses xorb blocks whose chunk hashes, lengths or count differ from the stored xorb", async () => {
    const info = vectorXorbInfo();
    const wrongHash = xorbBlockOf(info);
    wrongHash.chunks[2] = { ...wrongHash.chunks[2], hash: VECTOR_CHUNKS[0] };
    await assertRejected(
      shardOf([], [wrongHash]),
      "xorb_block_mismatch",
      new RegExp(
        `^xorb block 0 \\(xorb ${hashToHex(VECTOR_XORB)}\\) lists chunk 2 with hash ${hashToHex(VECTOR_CHUNKS[0])}, but chunk 2 of the stored xorb is ${hashToHex(VECTOR_CHUNKS[2])}$`,
      ),
    );

    const wrongLength = xorbBlockOf(info);
    wrongLength.chunks[1] = { ...wrongLength.chunks[1], unpackedBytes: 518 };
    await assertRejected(shardOf([], [wrongLength]), "xorb_block_mismatch", /lists chunk 1 with 518 bytes, but chunk 1 of the stored xorb has 517$/);

    const tooFew = xorbBlockOf(info);
    tooFew.chunks.pop();
    await assertRejected(shardOf([], [tooFew]), "xorb_block_mismatch", /lists 2 chunks, but the stored xorb has 3$/);
    await assertNoTrace();
  });

  it("refuses a file whose terms name more chunks than its size allows, before loading any xorb", async () => {
    // The amplification shape: a xorb of tiny chunks, and a file whose terms name all of them
    // over and over (here 64 terms × 128 one-byte chunks for 8,192 bytes; the bound is 66).
    const tiny = serializeXorb(Array.from({ length: 128 }, (_, i) => ({ data: Uint8Array.of(i) })));
    await upload(tiny);
    const terms = Array.from({ length: 64 }, () => ({ xorb: tiny.info, start: 0, end: 128 }));
    const amplified = { ...fileOf(terms), fileHash: hashFromHex("ab".repeat(32)) };
    let lookups = 0;
    const counting: typeof metadata = Object.create(metadata);
    counting.getChunkTables = async (hashes) => {
      lookups++;
      return metadata.getChunkTables(hashes);
    };
    const guarded = new ShardRegistrationService({ metadata: counting, blobs, maxShardBytes: 1024 * 1024 });
    await assert.rejects(guarded.register(shardOf([amplified]), { repoId: alice }), (error: unknown) => {
      assert.ok(error instanceof ShardRejectedError);
      assert.equal(error.code, "chunk_references_exceed_file_size");
      assert.match(error.message, /\(file block 0\) references 8192 chunks for 8192 bytes, more than the 66 a file of that size can have/);
      return true;
    });
    assert.equal(lookups, 0, "refused from the shard alone");
    await assertNoTrace([amplified.fileHash]);

    // The same xorb named once per chunk, as a client writes a file of tiny chunks, is fine.
    await service.register(shardOf([fileOf([{ xorb: tiny.info, start: 0, end: 60 }])]), { repoId: alice });
  });

  it("refuses a shard whose files name more chunks in all than CASTOR_MAX_SHARD_CHUNK_REFS", async () => {
    const xorb = makeXorb(21, 40, 8200);
    await upload(xorb);
    const files = Array.from({ length: 10 }, (_, i) => fileOf([{ xorb: xorb.info, start: i, end: 40 }]));
    // 40 + 39 + … + 31 = 355 references.
    const capped = new ShardRegistrationService({ metadata, blobs, maxShardBytes: 1024 * 1024, maxChunkReferences: 354 });
    await assert.rejects(capped.register(shardOf(files), { repoId: alice }), (error: unknown) => {
      assert.ok(error instanceof ShardRejectedError);
      assert.equal(error.code, "too_many_chunk_references");
      assert.match(
        error.message,
        /reference more than 354 chunks in all \(this server's CASTOR_MAX_SHARD_CHUNK_REFS\), reached at file block 9: upload the files in several smaller shards/,
      );
      return true;
    });
    await assertNoTrace(files.map((f) => f.fileHash));
    const roomy = new ShardRegistrationService({ metadata, blobs, maxShardBytes: 1024 * 1024, maxChunkReferences: 355 });
    assert.equal((await roomy.register(shardOf(files), { repoId: alice })).files, 10);
  });

  it("verifies a repeated file block once, but still checks a block of the same file hash with other terms", async () => {
    const xorb = makeXorb(22, 50, 8200);
    await upload(xorb);
    const file = fileOf([{ xorb: xorb.info, start: 0, end: 50 }]);
    const outcome = await service.register(shardOf(Array.from({ length: 1000 }, () => file)), { repoId: alice });
    assert.deepEqual([outcome.files, outcome.inserted], [1, true]);

    // Same file hash, different terms with a wrong verification entry: refused, not skipped.
    const other = fileOf([
      { xorb: xorb.info, start: 0, end: 25 },
      { xorb: xorb.info, start: 25, end: 50 },
    ]);
    const forged = { ...other, verificationHashes: [other.verificationHashes![0], ZERO_HASH] };
    await assertRejected(shardOf([file, forged]), "verification_mismatch", /^verification entry 1 of file .* \(file block 1\)/);
  });

  it("does not register anything when the upload is abandoned", async () => {
    const controller = new AbortController();
    controller.abort(new Error("client gone"));
    await assert.rejects(service.register(xetCoreVariant(), { repoId: alice, signal: controller.signal }), /client gone/);
    await assertNoTrace();
  });
});

describe("shard registration: contents", () => {
  it("ignores what xorb blocks claim besides chunk hashes and lengths", async () => {
    const info = vectorXorbInfo();
    const block = xorbBlockOf(info);
    block.numBytesOnDisk = 123_456;
    block.flags = 7;
    block.chunks[1] = { ...block.chunks[1], byteRangeStart: 99 };
    const outcome = await service.register(shardOf([fileOf([{ xorb: info, start: 0, end: 3 }])], [block]), { repoId: alice });
    assert.equal(outcome.inserted, true);
  });

  it("keeps the first of duplicate file hashes and registers the empty file", async () => {
    const info = vectorXorbInfo();
    const whole = fileOf([{ xorb: info, start: 0, end: 3 }]);
    // The same file hash again, cut into different (equally valid) terms.
    const cut = fileOf([
      { xorb: info, start: 0, end: 2 },
      { xorb: info, start: 2, end: 3 },
    ]);
    assert.deepEqual(cut.fileHash, whole.fileHash);
    const emptySha = shardSha256FromDigest(createHash("sha256").digest());
    const empty: ShardFile = { fileHash: ZERO_HASH, terms: [], verificationHashes: [], sha256: emptySha };

    const outcome = await service.register(shardOf([whole, cut, empty]), { repoId: alice });
    assert.equal(outcome.files, 2);
    assert.deepEqual(
      (await metadata.getFile(whole.fileHash))?.terms.map((t) => [t.chunkStart, t.chunkEnd]),
      [[0, 3]],
    );
    const stored = await metadata.getFile(ZERO_HASH);
    assert.deepEqual(stored && { size: stored.size, terms: stored.terms, sha256: toHex(stored.sha256!) }, {
      size: 0,
      terms: [],
      sha256: createHash("sha256").digest("hex"),
    });
    assert.equal(await metadata.isFileInRepo(ZERO_HASH, alice), true);
    assert.equal(outcome.dedupEntries, 1, "only the non-empty file has a first chunk");
  });

  it("indexes flagged chunks and chunks meeting the 1-in-1024 rule of the shard's xorb blocks, and no others", async () => {
    // Search for a small chunk whose hash is eligible (≈ 1 in 1024 candidates).
    let eligibleData: Uint8Array | null = null;
    for (let seed = 0; eligibleData === null; seed++) {
      const data = new TextEncoder().encode(`eligible candidate ${seed}`);
      if (isGlobalDedupEligible(chunkHash(data))) eligibleData = data;
    }
    const xorb = serializeXorb([{ data: makeData(400, 3, 1) }, { data: eligibleData }, { data: makeData(500, 5, 2) }, { data: makeData(600, 7, 3) }]);
    await upload(xorb);
    const [first, eligible, flagged, plain] = xorb.info.chunks.map((c) => c.hash);

    const outcome = await service.register(shardOf([], [xorbBlockOf(xorb.info, (i) => (i === 2 ? CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE : 0))]), { repoId: alice });
    assert.equal(outcome.dedupEntries, 2);
    assert.deepEqual(await metadata.findDedupXorbs(eligible, 5), [xorb.info.hash]);
    assert.deepEqual(await metadata.findDedupXorbs(flagged, 5), [xorb.info.hash]);
    assert.deepEqual(await metadata.findDedupXorbs(first, 5), [], "a xorb block's first chunk is not a file's first chunk");
    assert.deepEqual(await metadata.findDedupXorbs(plain, 5), []);
  });

  it("validates files spread over many xorbs with a tiny loading budget, reloading evicted xorbs", async () => {
    const xorbs = Array.from({ length: 40 }, (_, i) => makeXorb(100 + i, 2));
    for (const xorb of xorbs) await upload(xorb);
    // Every file references a xorb far from its neighbours', then the first xorb again.
    const files = xorbs.map((xorb, i) =>
      fileOf([
        { xorb: xorb.info, start: 0, end: 2 },
        { xorb: xorbs[(i * 17) % xorbs.length].info, start: 1, end: 2 },
        { xorb: xorbs[0].info, start: 0, end: 1 },
      ]),
    );
    let queries = 0;
    let loaded = 0;
    const counting: Pick<CasMetadataStore, "getChunkTables" | "registerShard"> = {
      getChunkTables: (hashes) => {
        queries++;
        loaded += hashes.length;
        assert.ok(hashes.length <= 16, "xorbs are loaded in batches");
        return metadata.getChunkTables(hashes);
      },
      registerShard: (registration) => metadata.registerShard(registration),
    };
    // Room for about two of these two-chunk xorbs.
    const tight = new ShardRegistrationService({ metadata: counting, blobs, maxShardBytes: 1024 * 1024, loadedBytesBudget: 1000 });
    const outcome = await tight.register(
      shardOf(
        files,
        xorbs.map((x) => xorbBlockOf(x.info)),
      ),
      { repoId: alice },
    );
    assert.equal(outcome.files, 40);
    assert.ok(loaded > xorbs.length, `evicted xorbs are loaded again (${loaded} loads of ${xorbs.length} xorbs)`);
    for (const file of files) assert.equal(await metadata.isFileInRepo(file.fileHash, alice), true);

    queries = 0;
    loaded = 0;
    const roomy = new ShardRegistrationService({ metadata: counting, blobs, maxShardBytes: 1024 * 1024 });
    assert.equal((await roomy.register(shardOf(files), { repoId: bob })).inserted, true);
    assert.deepEqual([queries, loaded], [3, 40], "40 distinct xorbs take three batched queries when nothing is evicted");
  });

  it("reports progress and lets the event loop run during a long validation", async () => {
    const xorb = makeXorb(9, 300, 8200);
    await upload(xorb);
    // 300 distinct files of 301 chunks each.
    const files = Array.from({ length: 300 }, (_, i) =>
      fileOf([
        { xorb: xorb.info, start: i, end: 300 },
        { xorb: xorb.info, start: 0, end: 1 + i },
      ]),
    );
    const progress: ShardProgress[] = [];
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 0);
    let ticksAtFirstProgress = -1;
    try {
      await service.register(shardOf(files), {
        repoId: alice,
        onProgress: (p) => {
          if (progress.length === 0) ticksAtFirstProgress = ticks;
          progress.push(p);
        },
      });
    } finally {
      clearInterval(ticker);
    }
    assert.deepEqual(progress[0], { verified: 0, total: 300 });
    assert.ok(progress.length >= 3, `progress after slices of work (${progress.length} reports)`);
    assert.deepEqual(progress.at(-1), { verified: 300, total: 300 });
    for (let i = 1; i < progress.length; i++) {
      assert.equal(progress[i].total, 300);
      assert.ok(progress[i].verified > progress[i - 1].verified && progress[i].verified <= 300);
    }
    assert.ok(ticks > ticksAtFirstProgress, "timers ran while the shard was being validated");
  });
});

describe("shard registration: the budget of the process", () => {
  /** A service with a budget of `memoryBytes` whose chunk-table loads wait until `open()`. */
  function gatedService(memoryBytes: number, admissionWaitMs: number) {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    const gated: Pick<CasMetadataStore, "getChunkTables" | "registerShard"> = {
      getChunkTables: async (hashes) => {
        await opened;
        return metadata.getChunkTables(hashes);
      },
      registerShard: (registration) => metadata.registerShard(registration),
    };
    const budgeted = new ShardRegistrationService({ metadata: gated, blobs, maxShardBytes: 1 << 20, budget: { memoryBytes }, admissionWaitMs });
    return { budgeted, open };
  }

  it("charges a registration before its work, refuses one more that finds no room in time, and gives every charge back", async () => {
    // A budget of one byte: every registration is larger than it, so each runs alone.
    const { budgeted, open } = gatedService(1, 0);
    const body = xetCoreVariant();
    const first = budgeted.register(body, { repoId: alice });
    await until(() => budgeted.admission.usage.chunkReferences > 0, "the first registration to hold its charge");
    const charge = budgeted.memoryCharge(body.length);
    assert.deepEqual(budgeted.admission.usage, { memoryBytes: charge, chunkReferences: 6, waiting: 0 });
    await assert.rejects(budgeted.register(xetCoreVariant(), { repoId: bob }), (error: unknown) => {
      assert.ok(error instanceof ShardAdmissionError, `expected a ShardAdmissionError, got ${String(error)}`);
      assert.match(error.message, /did not get its turn in time/);
      return true;
    });
    open();
    assert.equal((await first).inserted, true);
    assert.deepEqual(budgeted.admission.usage, { memoryBytes: 0, chunkReferences: 0, waiting: 0 });
    assert.equal(await metadata.isFileInRepo(FILE_A, bob), false, "the refused upload registered nothing");
  });

  it("lets a registration wait its turn within the bound, then runs it", async () => {
    const { budgeted, open } = gatedService(1, 60_000);
    const first = budgeted.register(xetCoreVariant(), { repoId: alice });
    const second = budgeted.register(hfJsVariant(), { repoId: bob });
    await until(() => budgeted.admission.usage.waiting === 1, "the second registration to wait");
    open();
    assert.deepEqual([(await first).inserted, (await second).inserted], [true, false]);
    assert.equal(await metadata.isFileInRepo(FILE_A, bob), true);
    assert.deepEqual(budgeted.admission.usage, { memoryBytes: 0, chunkReferences: 0, waiting: 0 });
  });

  it("gives the charge back when the shard is refused or the client goes away while it waits", async () => {
    const { budgeted, open } = gatedService(1, 60_000);
    open();
    await assert.rejects(budgeted.register(Buffer.from("not a shard"), { repoId: alice }), ShardRejectedError);
    const xorb = makeXorb(3);
    await upload(xorb);
    const file = fileOf([{ xorb: xorb.info, start: 0, end: 3 }]);
    await assert.rejects(budgeted.register(shardOf([{ ...file, fileHash: ZERO_HASH.map(() => 7) }]), { repoId: alice }), ShardRejectedError);
    assert.deepEqual(budgeted.admission.usage, { memoryBytes: 0, chunkReferences: 0, waiting: 0 });

    const held = await budgeted.admission.admitMemory(1, budgeted.admission.deadline());
    const controller = new AbortController();
    const waiting = budgeted.register(xetCoreVariant(), { repoId: alice, signal: controller.signal });
    await until(() => budgeted.admission.usage.waiting === 1, "the registration to wait");
    controller.abort(new Error("client gone"));
    await assert.rejects(waiting, /client gone/);
    held();
    assert.deepEqual(budgeted.admission.usage, { memoryBytes: 0, chunkReferences: 0, waiting: 0 });
    await assertNoTrace();
  });
});
