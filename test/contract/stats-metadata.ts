/**
 * The storage-statistics half of the MetadataStore contract: daily samples (one per UTC day,
 * the last measurement kept) and the reads statistics are computed from (xorb footprints, the xorbs of
 * files, sums over all xorbs). `runMetadataStoreContract` calls it with its `withStore`
 * wrapper, so every backend runs these cases unchanged.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { hashToHex, ZERO_HASH, type Hash } from "../../src/format/hash.js";
import { MAX_XORB_CHUNKS } from "../../src/format/xorb.js";
import { InvalidRecordError, type FileRecord, type StatsSample, type XorbRecord } from "../../src/metadata/store.js";
import { hashOf, xorbRecord } from "../helpers/fixtures.js";
import type { WithStore } from "./cas-metadata.js";

/** A sample of `day` whose totals are all `value` (distinct per field when `value` is a function). */
function sample(day: string, takenAt: Date, value: number | ((i: number) => number) = 1): StatsSample {
  const at = (i: number) => (typeof value === "number" ? value : value(i));
  return {
    day,
    takenAt,
    repositories: at(0),
    files: at(1),
    logicalBytes: at(2),
    storedBytes: at(3),
    xorbs: at(4),
    chunks: at(5),
    inlineBlobs: at(6),
    inlineBytes: at(7),
    recordedXorbs: at(8),
    recordedXorbBytes: at(9),
    recordedChunks: at(10),
    uniqueBytes: at(11),
  };
}

/** A file with one term on each of `xorbs` in order (repeats allowed), chunk 0 of each. */
function fileOn(label: string, xorbs: readonly XorbRecord[]): FileRecord {
  const terms = xorbs.map((xorb) => ({ xorbHash: xorb.hash, chunkStart: 0, chunkEnd: 1, unpackedLength: xorb.chunks[0].uncompressedLength }));
  return { hash: hashOf(`file ${label}`), size: terms.reduce((sum, term) => sum + term.unpackedLength, 0), terms, sha256: null };
}

const hexes = (hashes: readonly Hash[]) => hashes.map(hashToHex);

export function runStatsMetadataContract(withStore: WithStore): void {
  describe("storage statistics: daily samples", () => {
    it(
      "keeps one sample per day, its last measurement; lists them oldest day first",
      withStore(async (store) => {
        assert.deepEqual(await store.listStatsSamples(), []);
        const second = sample("2030-01-02", new Date("2030-01-02T00:00:01.234Z"), (i) => 200 + i);
        const first = sample("2030-01-01", new Date("2030-01-01T23:59:59.999Z"), (i) => 100 + i);
        assert.equal(await store.recordStatsSample(second), true);
        assert.equal(await store.recordStatsSample(first), true, "an earlier day recorded later");
        const later = sample("2030-01-02", new Date("2030-01-02T12:00:00Z"), (i) => 300 + i);
        assert.equal(await store.recordStatsSample(later), true, "a later measurement of a day replaces its sample");
        assert.deepEqual(await store.listStatsSamples(), [first, later]);
        assert.equal(await store.recordStatsSample(second), false, "an earlier measurement does not replace a later one");
        assert.equal(await store.recordStatsSample(later), false, "the same sample again changes nothing");
        assert.deepEqual(await store.listStatsSamples(), [first, later]);
      }),
    );

    it(
      "keeps a sample without unique bytes (recorded before castor measured them) as null",
      withStore(async (store) => {
        const old = { ...sample("2029-12-31", new Date("2029-12-31T08:00:00Z"), 5), uniqueBytes: null };
        assert.equal(await store.recordStatsSample(old), true);
        assert.deepEqual(await store.listStatsSamples(), [old]);
      }),
    );

    it(
      "round-trips totals up to Number.MAX_SAFE_INTEGER, zeros, and the time to the millisecond",
      withStore(async (store) => {
        const huge = sample("2125-12-31", new Date("2125-12-31T23:59:59.999Z"), (i) => Number.MAX_SAFE_INTEGER - i);
        const zero = sample("1999-02-28", new Date(0), 0);
        await store.recordStatsSample(huge);
        await store.recordStatsSample(zero);
        assert.deepEqual(await store.listStatsSamples(), [zero, huge]);
      }),
    );

    it(
      "refuses unstorable samples with InvalidRecordError and stores nothing",
      withStore(async (store) => {
        const good = sample("2030-03-01", new Date("2030-03-01T06:00:00Z"));
        const cases: [string, StatsSample][] = [
          ["a day with a time", { ...good, day: "2030-03-01T00:00:00Z" }],
          ["a day of another format", { ...good, day: "1.3.2030" }],
          ["a day that does not exist", { ...good, day: "2030-02-30" }],
          ["a day as a Date", { ...good, day: new Date() as unknown as string }],
          ["an invalid takenAt", { ...good, takenAt: new Date(Number.NaN) }],
          ["a negative total", { ...good, files: -1 }],
          ["a fractional total", { ...good, logicalBytes: 1.5 }],
          ["a total past 2^53", { ...good, recordedXorbBytes: 2 ** 53 }],
          ["a missing total", { ...good, chunks: undefined as unknown as number }],
        ];
        for (const [what, record] of cases) {
          await assert.rejects(store.recordStatsSample(record), InvalidRecordError, `${what} must be refused`);
        }
        assert.deepEqual(await store.listStatsSamples(), [], "nothing was stored");
        assert.equal(await store.recordStatsSample(good), true);
      }),
    );

    it(
      "keeps the latest of concurrent samples of a day, across instances, and shows it to both",
      withStore(async (store, reopen) => {
        const second = await reopen();
        const base = Date.parse("2030-05-05T10:00:00Z");
        // Taken in an order the writes do not follow: the last taken must win whatever lands last.
        const order = [3, 7, 0, 5, 1, 6, 2, 4];
        await Promise.all(order.map((i, n) => (n % 2 === 0 ? store : second).recordStatsSample(sample("2030-05-05", new Date(base + i * 1000), i))));
        const kept = await store.listStatsSamples();
        assert.deepEqual(kept, [sample("2030-05-05", new Date(base + 7000), 7)]);
        assert.deepEqual(await second.listStatsSamples(), kept);
      }),
    );
  });

  describe("storage statistics: reads", () => {
    it(
      "sums every recorded xorb: count, serialized bytes and chunks (zeros when there is none)",
      withStore(async (store) => {
        assert.deepEqual(await store.xorbTotals(), { xorbs: 0, bytes: 0, chunks: 0 });
        const xorbs = [xorbRecord("t0", 1), xorbRecord("t1", 3, { serializedBytes: 1001 }), xorbRecord("t2", MAX_XORB_CHUNKS, { serializedBytes: 8 })];
        for (const xorb of xorbs) await store.putXorb(xorb);
        assert.deepEqual(await store.xorbTotals(), {
          xorbs: 3,
          bytes: 40_008 + 3 * 1001 + MAX_XORB_CHUNKS * 8,
          chunks: 1 + 3 + MAX_XORB_CHUNKS,
        });
      }),
    );

    it(
      "reads xorb footprints of a large mixed request: present, absent and repeated hashes",
      withStore(async (store) => {
        assert.equal((await store.xorbFootprints([])).size, 0);
        const present = Array.from({ length: 600 }, (_, i) => xorbRecord(`footprint ${i}`, 1 + (i % 5), { serializedBytes: 100 + i }));
        for (const xorb of present) await store.putXorb(xorb);
        const absent = Array.from({ length: 300 }, (_, i) => hashOf(`no footprint ${i}`));
        const found = await store.xorbFootprints([...absent, ...present.map((x) => x.hash), present[3].hash]);
        assert.equal(found.size, present.length);
        for (const xorb of present) {
          assert.deepEqual(found.get(hashToHex(xorb.hash)), {
            serializedLength: xorb.serializedLength,
            uncompressedLength: xorb.uncompressedLength,
            chunks: xorb.chunks.length,
          });
        }
        for (const hash of absent) assert.equal(found.has(hashToHex(hash)), false);
      }),
    );

    it(
      "reads the distinct xorbs of files in term order; unknown files are absent, the empty file has none",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/stats");
        const [a, b, c] = ["a", "b", "c"].map((label) => xorbRecord(`files ${label}`, 2));
        for (const xorb of [a, b, c]) await store.putXorb(xorb);
        const mixed = fileOn("mixed", [b, a, b, c, a]);
        const single = fileOn("single", [c]);
        const empty: FileRecord = { hash: ZERO_HASH, size: 0, terms: [], sha256: null };
        const many = Array.from({ length: 300 }, (_, i) => fileOn(`many ${i}`, i % 2 === 0 ? [a] : [c, b]));
        await store.registerShard({ shardHash: hashOf("stats shard"), repoId: repo.id, files: [mixed, single, empty, ...many], dedupEntries: [] });

        const found = await store.fileXorbs([mixed.hash, single.hash, empty.hash, hashOf("file unknown"), mixed.hash]);
        assert.deepEqual([...found.keys()].sort(), hexes([mixed.hash, single.hash, empty.hash]).sort());
        assert.deepEqual(hexes(found.get(hashToHex(mixed.hash))!), hexes([b.hash, a.hash, c.hash]));
        assert.deepEqual(hexes(found.get(hashToHex(single.hash))!), hexes([c.hash]));
        assert.deepEqual(found.get(hashToHex(empty.hash)), []);

        const all = await store.fileXorbs(many.map((file) => file.hash));
        assert.equal(all.size, many.length);
        for (const [i, file] of many.entries()) {
          assert.deepEqual(hexes(all.get(hashToHex(file.hash))!), hexes(i % 2 === 0 ? [a.hash] : [c.hash, b.hash]));
        }
      }),
    );
  });
}
