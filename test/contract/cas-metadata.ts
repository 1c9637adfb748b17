/**
 * The CAS half of the MetadataStore contract (xorbs, shard registrations, files, dedup index).
 * `runMetadataStoreContract` calls it inside its own describe block with its `withStore`
 * wrapper, so every backend runs these cases unchanged.
 */
import { describe, it, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { hashToHex, HASH_BYTES, ZERO_HASH, type Hash } from "../../src/format/hash.js";
import { MAX_XORB_CHUNKS } from "../../src/format/xorb.js";
import {
  InvalidRecordError,
  NotFoundError,
  type FileRecord,
  type FileTerm,
  type MetadataStore,
  type ShardRegistration,
  type StoredChunk,
  type XorbRecord,
} from "../../src/metadata/store.js";
import { packChunkTable, packShardRegistration } from "../../src/metadata/cas.js";
import { hashOf, xorbRecord } from "../helpers/fixtures.js";

export type StoreBody = (store: MetadataStore, reopen: () => Promise<MetadataStore>, t: TestContext) => Promise<void>;
export type WithStore = (body: StoreBody) => (t: TestContext) => Promise<void>;

const U32_MAX = 0xffff_ffff;

/** A hash whose first byte is `first`: for checking that an order is not byte order. */
function hashStartingWith(first: number, label: string): Hash {
  const hash = hashOf(label);
  hash[0] = first;
  return hash;
}

/** A xorb of `count` chunks with varied lengths (1 to 131,072 bytes), each serialized to 8 + 60 %. */
function makeXorb(label: string, count: number): XorbRecord {
  return xorbRecord(label, count, {
    chunkBytes: (i) => 1 + ((i * 7919 + label.length * 131) % 131_072),
    serializedBytes: (length) => 8 + Math.ceil(length * 0.6),
  });
}

/** A file of terms over `xorbs` (each term one or two chunks of one xorb), size = Σ lengths. */
function makeFile(label: string, xorbs: readonly XorbRecord[], termCount: number, sha256: Uint8Array | null): FileRecord {
  const terms: FileTerm[] = [];
  for (let k = 0; k < termCount; k++) {
    const xorb = xorbs[k % xorbs.length];
    const chunkStart = (k * 3) % xorb.chunks.length;
    const chunkEnd = Math.min(chunkStart + 1 + (k % 2), xorb.chunks.length);
    let unpackedLength = 0;
    for (let c = chunkStart; c < chunkEnd; c++) unpackedLength += xorb.chunks[c].uncompressedLength;
    terms.push({ xorbHash: xorb.hash, chunkStart, chunkEnd, unpackedLength });
  }
  return { hash: hashOf(`file ${label}`), size: terms.reduce((sum, term) => sum + term.unpackedLength, 0), terms, sha256 };
}

const EMPTY_FILE: FileRecord = {
  hash: ZERO_HASH,
  size: 0,
  terms: [],
  sha256: new Uint8Array(createHash("sha256").update("").digest()),
};

function registration(label: string, repoId: number, files: FileRecord[], dedupEntries: ShardRegistration["dedupEntries"] = []): ShardRegistration {
  return { shardHash: hashOf(`shard ${label}`), repoId, files, dedupEntries };
}

/** Asserts that nothing of `reg` is visible; `repoId` is a repository the files could be linked to. */
async function assertNothingStored(store: MetadataStore, reg: ShardRegistration, repoId: number): Promise<void> {
  for (const file of reg.files) {
    assert.equal(await store.getFile(file.hash), null, `file ${hashToHex(file.hash)} must not be stored`);
    assert.equal(await store.isFileInRepo(file.hash, repoId), false, "no file may be linked");
    if (file.sha256) assert.equal(await store.findFileBySha256(repoId, file.sha256), null, "no SHA-256 may be indexed");
  }
  for (const entry of reg.dedupEntries) {
    if (entry.chunkHash.length === HASH_BYTES) {
      assert.deepEqual(await store.findDedupXorbs(entry.chunkHash, 10), [], "no dedup entry may be stored");
    }
  }
}

export function runCasMetadataContract(withStore: WithStore): void {
  describe("CAS: xorbs", () => {
    it(
      "records xorbs and reads back their exact chunk tables, 8,192 chunks included",
      withStore(async (store) => {
        const small: XorbRecord = {
          hash: hashOf("xorb extremes"),
          serializedLength: U32_MAX,
          uncompressedLength: U32_MAX + 1,
          chunks: [
            { hash: hashOf("first"), uncompressedLength: 0, serializedEnd: 8 },
            { hash: hashOf("second"), uncompressedLength: 1, serializedEnd: 0x8000_0000 },
            { hash: hashOf("third"), uncompressedLength: U32_MAX, serializedEnd: U32_MAX },
          ],
        };
        const full = makeXorb("full", MAX_XORB_CHUNKS);
        assert.equal(await store.putXorb(small), true);
        assert.equal(await store.putXorb(full), true);

        const found = await store.getXorbs([full.hash, small.hash]);
        assert.deepEqual([...found.keys()].sort(), [hashToHex(full.hash), hashToHex(small.hash)].sort());
        assert.deepEqual(found.get(hashToHex(small.hash)), small);
        assert.deepEqual(found.get(hashToHex(full.hash)), full);
        assert.equal(await store.getXorbSize(small.hash), U32_MAX);
        assert.equal(await store.getXorbSize(full.hash), full.serializedLength);
        assert.equal(await store.getXorbSize(hashOf("absent")), null);
      }),
    );

    it(
      "reads chunk tables packed, as stored, for the recorded xorbs among the hashes asked",
      withStore(async (store) => {
        const xorbs = [makeXorb("packed a", 3), makeXorb("packed b", MAX_XORB_CHUNKS)];
        for (const xorb of xorbs) await store.putXorb(xorb);
        const tables = await store.getChunkTables([xorbs[1].hash, hashOf("absent"), xorbs[0].hash, xorbs[1].hash]);
        assert.deepEqual([...tables.keys()].sort(), xorbs.map((x) => hashToHex(x.hash)).sort());
        for (const xorb of xorbs) {
          assert.deepEqual(new Uint8Array(tables.get(hashToHex(xorb.hash))!), packChunkTable(xorb.chunks, "expected"));
        }
        assert.equal((await store.getChunkTables([])).size, 0);
      }),
    );

    it(
      "keeps the first record: a repeated put returns false and changes nothing",
      withStore(async (store) => {
        const original = makeXorb("idempotent", 4);
        assert.equal(await store.putXorb(original), true);
        const altered = { ...makeXorb("other", 2), hash: original.hash };
        assert.equal(await store.putXorb(altered), false);
        assert.equal(await store.putXorb(original), false);
        assert.deepEqual((await store.getXorbs([original.hash])).get(hashToHex(original.hash)), original);
        assert.equal(await store.getXorbSize(original.hash), original.serializedLength);
      }),
    );

    it(
      "stores copies: later changes to the caller's or a reader's arrays do not reach the store",
      withStore(async (store) => {
        const xorb = makeXorb("copies", 3);
        const expected = structuredClone(xorb);
        await store.putXorb(xorb);
        xorb.chunks[0].hash.fill(0);
        xorb.hash.fill(0);
        const read = (await store.getXorbs([expected.hash])).get(hashToHex(expected.hash));
        assert.deepEqual(read, expected);
        read!.chunks[1].hash.fill(7);
        assert.deepEqual((await store.getXorbs([expected.hash])).get(hashToHex(expected.hash)), expected);
      }),
    );

    it(
      "lets exactly one of many concurrent puts of a hash insert, across store instances too",
      withStore(async (store, reopen) => {
        const second = await reopen();
        const xorb = makeXorb("raced", 16);
        const results = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? store : second).putXorb(xorb)));
        assert.equal(results.filter((inserted) => inserted).length, 1, `one true among ${JSON.stringify(results)}`);

        const distinct = Array.from({ length: 10 }, (_, i) => makeXorb(`distinct ${i}`, 2));
        const distinctResults = await Promise.all(distinct.map((x, i) => (i % 2 === 0 ? second : store).putXorb(x)));
        assert.deepEqual(
          distinctResults,
          distinct.map(() => true),
          "different hashes all insert",
        );
        assert.equal((await store.getXorbs(distinct.map((x) => x.hash))).size, distinct.length);
      }),
    );

    it(
      "getXorbs answers a large mixed request: present, absent and repeated hashes",
      withStore(async (store) => {
        assert.equal((await store.getXorbs([])).size, 0);
        const present = Array.from({ length: 600 }, (_, i) => makeXorb(`present ${i}`, 1 + (i % 3)));
        for (const xorb of present) await store.putXorb(xorb);
        const absent = Array.from({ length: 400 }, (_, i) => hashOf(`absent ${i}`));
        const asked = [...absent, ...present.map((x) => x.hash), present[0].hash, present[599].hash];
        const found = await store.getXorbs(asked);
        assert.equal(found.size, present.length);
        for (const xorb of present) assert.deepEqual(found.get(hashToHex(xorb.hash)), xorb);
        for (const hash of absent) assert.equal(found.has(hashToHex(hash)), false);

        const one = await store.getXorbs([absent[0], present[7].hash, absent[1]]);
        assert.deepEqual([...one.values()], [present[7]]);
      }),
    );

    it(
      "refuses unstorable xorb records with InvalidRecordError and stores nothing",
      withStore(async (store) => {
        const good = makeXorb("good", 2);
        const badChunk = (chunk: Partial<StoredChunk>): XorbRecord => ({ ...good, chunks: [good.chunks[0], { ...good.chunks[1], ...chunk }] });
        const cases: [string, XorbRecord][] = [
          ["a 31-byte xorb hash", { ...good, hash: good.hash.subarray(1) }],
          ["no chunks", { ...good, chunks: [] }],
          ["8,193 chunks", { ...good, chunks: makeXorb("too many", MAX_XORB_CHUNKS + 1).chunks }],
          ["a 33-byte chunk hash", badChunk({ hash: new Uint8Array(33) })],
          ["a negative chunk length", badChunk({ uncompressedLength: -1 })],
          ["a serialized end past u32", badChunk({ serializedEnd: U32_MAX + 1 })],
          ["a fractional serialized end", badChunk({ serializedEnd: 1.5 })],
          ["a NaN serialized length", { ...good, serializedLength: Number.NaN }],
          ["a negative uncompressed length", { ...good, uncompressedLength: -5 }],
        ];
        for (const [what, record] of cases) {
          await assert.rejects(store.putXorb(record), InvalidRecordError, `${what} must be refused`);
        }
        assert.equal(await store.getXorbSize(good.hash), null, "nothing was stored");
        assert.equal(await store.putXorb(good), true, "the valid record is still new");
      }),
    );
  });

  describe("CAS: shard registration and files", () => {
    it(
      "registers files linked to the repository; a repeat returns false and links them to its repository too",
      withStore(async (store) => {
        const repoA = await store.createRepo("model", "alice/a");
        const repoB = await store.createRepo("dataset", "bob/b");
        const xorbs = [makeXorb("x0", 20), makeXorb("x1", 7)];
        for (const xorb of xorbs) await store.putXorb(xorb);
        const withSha = makeFile("with sha", xorbs, 5, hashOf("sha of with sha"));
        const withoutSha = makeFile("without sha", xorbs, 1, null);
        const reg = registration("first", repoA.id, [withSha, withoutSha, EMPTY_FILE], [{ chunkHash: xorbs[0].chunks[0].hash, xorbHash: xorbs[0].hash }]);

        assert.equal(await store.registerShard(reg), true);
        for (const file of reg.files) {
          assert.deepEqual(await store.getFile(file.hash), file);
          assert.equal(await store.isFileInRepo(file.hash, repoA.id), true);
          assert.equal(await store.isFileInRepo(file.hash, repoB.id), false);
        }
        assert.deepEqual(await store.findFileBySha256(repoA.id, withSha.sha256!), withSha.hash);
        assert.deepEqual(await store.findFileBySha256(repoA.id, EMPTY_FILE.sha256!), ZERO_HASH);
        assert.equal(await store.findFileBySha256(repoB.id, withSha.sha256!), null);

        assert.equal(await store.registerShard(reg), false, "the same shard again");
        assert.equal(await store.registerShard({ ...reg, repoId: repoB.id }), false, "the same shard from another repository");
        for (const file of reg.files) {
          assert.equal(await store.isFileInRepo(file.hash, repoB.id), true, "a repeat links the files to its repository");
          assert.deepEqual(await store.getFile(file.hash), file);
        }
        assert.deepEqual(await store.findFileBySha256(repoB.id, withSha.sha256!), withSha.hash);
        assert.deepEqual(await store.findDedupXorbs(xorbs[0].chunks[0].hash, 10), [xorbs[0].hash], "repeats add no second dedup entry");
      }),
    );

    it(
      "registers the packed form of a registration exactly as its object form",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/packed");
        const xorbs = [makeXorb("p0", 30), makeXorb("p1", 9)];
        for (const xorb of xorbs) await store.putXorb(xorb);
        const files = [makeFile("packed with sha", xorbs, 7, hashOf("sha of packed")), makeFile("packed without sha", xorbs, 2, null), EMPTY_FILE];
        const dedupEntries = [
          { chunkHash: xorbs[1].chunks[3].hash, xorbHash: xorbs[1].hash },
          { chunkHash: xorbs[0].chunks[0].hash, xorbHash: xorbs[0].hash },
        ];
        // A repeated file hash keeps its first occurrence in the packed form too.
        const packed = packShardRegistration(registration("packed", repo.id, [...files, { ...files[1], size: 1 }], dedupEntries));
        assert.equal(packed.files.count, files.length);
        assert.equal(await store.registerShard(packed), true);
        assert.equal(await store.registerShard(packed), false);
        for (const file of files) {
          assert.deepEqual(await store.getFile(file.hash), file);
          assert.equal(await store.isFileInRepo(file.hash, repo.id), true);
        }
        assert.deepEqual(await store.findFileBySha256(repo.id, files[0].sha256!), files[0].hash);
        for (const entry of dedupEntries) assert.deepEqual(await store.findDedupXorbs(entry.chunkHash, 10), [entry.xorbHash]);
      }),
    );

    it(
      "refuses a packed registration whose arrays disagree, storing nothing",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/bad-packed");
        const xorb = makeXorb("bp", 4);
        await store.putXorb(xorb);
        const reg = registration("bad packed", repo.id, [makeFile("bad packed", [xorb], 2, null)]);
        const packed = packShardRegistration(reg);
        const broken = [
          { ...packed, files: { ...packed.files, count: 2 } },
          { ...packed, files: { ...packed.files, terms: packed.files.terms.subarray(1) } },
          { ...packed, dedupEntries: new Uint8Array(63) },
        ];
        for (const bad of broken) await assert.rejects(store.registerShard(bad), InvalidRecordError);
        await assertNothingStored(store, reg, repo.id);
      }),
    );

    it(
      "round-trips files exactly: the empty file, 160 terms, extreme term values, SHA-256 null and set",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/files");
        const xorbs = Array.from({ length: 8 }, (_, i) => makeXorb(`big file ${i}`, 1000));
        const big = makeFile("10 GiB-like", xorbs, 160, hashOf("sha of big"));
        const extremes: FileRecord = {
          hash: hashOf("file extremes"),
          size: Number.MAX_SAFE_INTEGER,
          terms: [
            { xorbHash: xorbs[0].hash, chunkStart: 0, chunkEnd: 1, unpackedLength: 0 },
            { xorbHash: xorbs[1].hash, chunkStart: U32_MAX - 1, chunkEnd: U32_MAX, unpackedLength: U32_MAX },
          ],
          sha256: null,
        };
        const emptyWithoutSha: FileRecord = { ...EMPTY_FILE, sha256: null };
        assert.equal(await store.registerShard(registration("files", repo.id, [big, extremes])), true);
        assert.equal(await store.registerShard(registration("empty", repo.id, [emptyWithoutSha])), true);
        assert.deepEqual(await store.getFile(big.hash), big);
        assert.deepEqual(await store.getFile(extremes.hash), extremes);
        assert.deepEqual(await store.getFile(ZERO_HASH), emptyWithoutSha);
        assert.equal(await store.getFile(hashOf("never registered")), null);
      }),
    );

    it(
      "keeps the first record of a file hash, within one shard and across shards",
      withStore(async (store) => {
        const repoA = await store.createRepo("model", "alice/a");
        const repoB = await store.createRepo("model", "alice/b");
        const xorbs = [makeXorb("first wins", 30)];
        const first = makeFile("same", xorbs, 2, hashOf("sha one"));
        const laterInShard: FileRecord = { ...makeFile("same", xorbs, 5, hashOf("sha two")), hash: first.hash };
        const other = makeFile("other", xorbs, 1, null);
        assert.equal(await store.registerShard(registration("one", repoA.id, [first, other, laterInShard])), true);
        assert.deepEqual(await store.getFile(first.hash), first, "the first occurrence in a shard wins");
        assert.equal(await store.findFileBySha256(repoA.id, laterInShard.sha256!), null, "a skipped duplicate indexes nothing");

        const laterShard: FileRecord = { ...makeFile("same", xorbs, 7, null), hash: first.hash };
        assert.equal(await store.registerShard(registration("two", repoB.id, [laterShard])), true);
        assert.deepEqual(await store.getFile(first.hash), first, "an existing file keeps its record");
        assert.equal(await store.isFileInRepo(first.hash, repoB.id), true, "but is linked to the new repository");
        assert.equal(await store.isFileInRepo(other.hash, repoB.id), false);
      }),
    );

    it(
      "answers isFileInRepo and isFileInNamedRepo false for unknown files and repositories",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/a");
        const file = makeFile("linked", [makeXorb("l", 3)], 1, null);
        await store.registerShard(registration("linked", repo.id, [file]));
        assert.equal(await store.isFileInRepo(file.hash, repo.id), true);
        assert.equal(await store.isFileInRepo(hashOf("unknown file"), repo.id), false);
        assert.equal(await store.isFileInRepo(file.hash, repo.id + 1000), false);
        assert.equal(await store.isFileInNamedRepo(file.hash, "model", "alice/a"), true);
        assert.equal(await store.isFileInNamedRepo(hashOf("unknown file"), "model", "alice/a"), false);
        assert.equal(await store.isFileInNamedRepo(file.hash, "dataset", "alice/a"), false, "the type is part of the name");
        assert.equal(await store.isFileInNamedRepo(file.hash, "model", "alice/b"), false);
      }),
    );

    it(
      "indexes SHA-256 per repository; the latest registration of a digest wins",
      withStore(async (store) => {
        const repoA = await store.createRepo("model", "alice/a");
        const repoB = await store.createRepo("model", "alice/b");
        const xorbs = [makeXorb("sha", 10)];
        const digest = hashOf("shared digest");
        const inA = makeFile("in a", xorbs, 1, digest);
        const inB = makeFile("in b", xorbs, 2, digest);
        await store.registerShard(registration("a", repoA.id, [inA]));
        await store.registerShard(registration("b", repoB.id, [inB]));
        assert.deepEqual(await store.findFileBySha256(repoA.id, digest), inA.hash);
        assert.deepEqual(await store.findFileBySha256(repoB.id, digest), inB.hash);

        const newerInA = makeFile("newer in a", xorbs, 3, digest);
        await store.registerShard(registration("a again", repoA.id, [newerInA]));
        assert.deepEqual(await store.findFileBySha256(repoA.id, digest), newerInA.hash);
        assert.deepEqual(await store.findFileBySha256(repoB.id, digest), inB.hash, "other repositories are untouched");
        assert.equal(await store.findFileBySha256(repoA.id, hashOf("unknown digest")), null);
        assert.equal(await store.findFileBySha256(repoA.id + 1000, digest), null);
      }),
    );

    it(
      "answers dedup lookups oldest registration first, limited, across instances",
      withStore(async (store, reopen) => {
        const repo = await store.createRepo("model", "alice/dedup");
        // Byte order of these hashes is the reverse of their registration order.
        const oldest = hashStartingWith(0xff, "oldest");
        const middle = hashStartingWith(0x80, "middle");
        const newest = hashStartingWith(0x00, "newest");
        const chunk = hashOf("popular chunk");
        const lonely = hashOf("lonely chunk");
        const inOrder = hashOf("listed chunk");

        const first = registration(
          "d1",
          repo.id,
          [],
          [
            { chunkHash: chunk, xorbHash: oldest },
            { chunkHash: lonely, xorbHash: newest },
          ],
        );
        await store.registerShard(first);
        await store.registerShard(
          registration(
            "d2",
            repo.id,
            [],
            [
              { chunkHash: chunk, xorbHash: middle },
              { chunkHash: chunk, xorbHash: oldest },
            ],
          ),
        );
        const second = await reopen();
        await second.registerShard(registration("d3", repo.id, [], [{ chunkHash: chunk, xorbHash: newest }]));
        await store.registerShard(
          registration(
            "d4",
            repo.id,
            [],
            [
              { chunkHash: inOrder, xorbHash: middle },
              { chunkHash: inOrder, xorbHash: newest },
              { chunkHash: inOrder, xorbHash: oldest },
            ],
          ),
        );
        assert.equal(await second.registerShard(first), false);

        for (const reader of [store, second]) {
          assert.deepEqual(await reader.findDedupXorbs(chunk, 10), [oldest, middle, newest]);
          assert.deepEqual(await reader.findDedupXorbs(chunk, 2), [oldest, middle]);
          assert.deepEqual(await reader.findDedupXorbs(chunk, 1), [oldest]);
          assert.deepEqual(await reader.findDedupXorbs(chunk, 0), []);
          assert.deepEqual(await reader.findDedupXorbs(lonely, 10), [newest]);
          assert.deepEqual(await reader.findDedupXorbs(inOrder, 10), [middle, newest, oldest], "list order within one registration");
          assert.deepEqual(await reader.findDedupXorbs(hashOf("unindexed chunk"), 10), []);
          await assert.rejects(reader.findDedupXorbs(chunk, -1), RangeError);
        }
      }),
    );
  });

  describe("CAS: atomic registration", () => {
    it(
      "refuses an unknown repository with NotFoundError and stores nothing",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/real");
        const xorbs = [makeXorb("orphan", 5)];
        const reg = registration(
          "orphan",
          repo.id + 1000,
          [makeFile("orphan", xorbs, 2, hashOf("orphan sha")), EMPTY_FILE],
          [{ chunkHash: xorbs[0].chunks[0].hash, xorbHash: xorbs[0].hash }],
        );
        await assert.rejects(store.registerShard(reg), NotFoundError);
        await assertNothingStored(store, reg, repo.id);
        assert.equal(await store.registerShard({ ...reg, repoId: repo.id }), true, "no shard row was left behind");
        assert.equal(await store.isFileInRepo(reg.files[0].hash, repo.id), true);
      }),
    );

    it(
      "rolls back a registration whose last file is unstorable",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/a");
        const xorbs = [makeXorb("midway", 50)];
        const kept = makeFile("kept", xorbs, 2, hashOf("kept sha"));
        await store.registerShard(registration("earlier", repo.id, [kept]));

        const files = Array.from({ length: 50 }, (_, i) => makeFile(`rolled back ${i}`, xorbs, 2, hashOf(`sha ${i}`)));
        const broken = makeFile("broken", xorbs, 2, null);
        broken.terms[1] = { ...broken.terms[1], chunkEnd: U32_MAX + 1 };
        const reg = registration("midway", repo.id, [...files, kept, broken], [{ chunkHash: xorbs[0].chunks[3].hash, xorbHash: xorbs[0].hash }]);
        await assert.rejects(store.registerShard(reg), (err: unknown) => {
          assert.ok(err instanceof InvalidRecordError);
          assert.match(err.message, new RegExp(`chunk end of term 1 of file ${hashToHex(broken.hash)}`));
          return true;
        });
        await assertNothingStored(store, { ...reg, files: [...files, broken] }, repo.id);
        assert.deepEqual(await store.getFile(kept.hash), kept, "an earlier registration is untouched");
        assert.equal(await store.isFileInRepo(kept.hash, repo.id), true);
        assert.equal(await store.registerShard({ ...reg, files: [...files, kept] }), true, "no shard row was left behind");
      }),
    );

    it(
      "rolls back a registration whose last dedup entry is unstorable, and refuses a bad shard hash",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/a");
        const xorbs = [makeXorb("dedup midway", 40)];
        const files = Array.from({ length: 20 }, (_, i) => makeFile(`dedup midway ${i}`, xorbs, 1, hashOf(`dm sha ${i}`)));
        const entries = xorbs[0].chunks.map((chunk) => ({ chunkHash: chunk.hash, xorbHash: xorbs[0].hash }));
        const reg = registration("dedup midway", repo.id, files, [...entries, { chunkHash: hashOf("last"), xorbHash: xorbs[0].hash.subarray(0, 31) }]);
        await assert.rejects(store.registerShard(reg), InvalidRecordError);
        await assertNothingStored(store, reg, repo.id);

        const badShard = { ...reg, shardHash: new Uint8Array(16), dedupEntries: entries };
        await assert.rejects(store.registerShard(badShard), InvalidRecordError);
        await assertNothingStored(store, badShard, repo.id);
        assert.equal(await store.registerShard({ ...reg, dedupEntries: entries }), true);
      }),
    );
  });

  describe("CAS: scale and instances", () => {
    it(
      "registers 10,000 files and 100,000 dedup entries in one call",
      withStore(async (store, _reopen, t) => {
        const repo = await store.createRepo("model", "alice/large");
        const xorbs = Array.from({ length: 100 }, (_, i) => makeXorb(`large ${i}`, 1000));
        for (const xorb of xorbs) await store.putXorb(xorb);
        const files = Array.from({ length: 10_000 }, (_, i) =>
          makeFile(`large ${i}`, [xorbs[i % 100], xorbs[(i * 7 + 1) % 100]], 1 + (i % 4), i % 2 === 0 ? hashOf(`large sha ${i}`) : null),
        );
        const dedupEntries = Array.from({ length: 100_000 }, (_, i) => {
          const xorb = xorbs[i % 100];
          return { chunkHash: xorb.chunks[Math.floor(i / 100)].hash, xorbHash: xorb.hash };
        });
        const reg = registration("large", repo.id, files, dedupEntries);

        const started = performance.now();
        assert.equal(await store.registerShard(reg), true);
        t.diagnostic(`registerShard of 10,000 files / 100,000 dedup entries: ${(performance.now() - started).toFixed(0)} ms`);

        for (const i of [0, 1, 4_999, 9_998, 9_999]) {
          assert.deepEqual(await store.getFile(files[i].hash), files[i]);
          assert.equal(await store.isFileInRepo(files[i].hash, repo.id), true);
          if (files[i].sha256) assert.deepEqual(await store.findFileBySha256(repo.id, files[i].sha256!), files[i].hash);
        }
        for (const i of [0, 50_123, 99_999]) {
          assert.deepEqual(await store.findDedupXorbs(dedupEntries[i].chunkHash, 5), [dedupEntries[i].xorbHash]);
        }
      }),
    );

    it(
      "shows one instance's CAS writes to another at once",
      withStore(async (first, reopen) => {
        const second = await reopen();
        const repo = await first.createRepo("model", "alice/shared");
        const xorb = makeXorb("shared", 12);
        assert.equal(await second.putXorb(xorb), true);
        assert.deepEqual((await first.getXorbs([xorb.hash])).get(hashToHex(xorb.hash)), xorb);
        assert.equal(await first.getXorbSize(xorb.hash), xorb.serializedLength);

        const file = makeFile("shared", [xorb], 3, hashOf("shared sha"));
        const reg = registration("shared", repo.id, [file], [{ chunkHash: xorb.chunks[0].hash, xorbHash: xorb.hash }]);
        assert.equal(await first.registerShard(reg), true);
        assert.deepEqual(await second.getFile(file.hash), file);
        assert.equal(await second.isFileInRepo(file.hash, repo.id), true);
        assert.deepEqual(await second.findFileBySha256(repo.id, file.sha256!), file.hash);
        assert.deepEqual(await second.findDedupXorbs(xorb.chunks[0].hash, 1), [xorb.hash]);
        assert.equal(await second.registerShard(reg), false);
      }),
    );
  });
}
