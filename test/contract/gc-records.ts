/**
 * The garbage-collection part of the MetadataStore contract (src/metadata/gc.ts): leases, the
 * collector's deletions of files, xorbs and history, condemnation marks and their release, and
 * how putXorb and shard registrations meet a collection. `runMetadataStoreContract` runs it on
 * every backend.
 */
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";
import { bytesToPlainHex, type Hash } from "../../src/format/hash.js";
import { BeingCollectedError } from "../../src/metadata/errors.js";
import type { MetadataStore } from "../../src/metadata/store.js";
import { fileRecord, hashOf, oidOf, xorbRecord } from "../helpers/fixtures.js";
import type { WithStore } from "./cas-metadata.js";

const key = (hash: Hash) => bytesToPlainHex(hash);

/** A moment strictly between what happened before and what happens after the call. */
async function instant(): Promise<Date> {
  await sleep(5);
  const at = new Date();
  await sleep(5);
  return at;
}

async function repoWithFile(store: MetadataStore, label: string) {
  const repo = await store.createRepo("model", `alice/${label}`);
  const xorb = xorbRecord(label, 4);
  await store.putXorb(xorb);
  const file = fileRecord(label, xorb, { terms: 2 });
  await store.registerShard({
    shardHash: hashOf(`shard ${label}`),
    repoId: repo.id,
    files: [file],
    dedupEntries: [{ chunkHash: xorb.chunks[0].hash, xorbHash: xorb.hash }],
  });
  return { repo, xorb, file };
}

export function runGcRecordsContract(withStore: WithStore): void {
  describe("garbage collection records", () => {
    it(
      "leases any hash and keeps its epoch until the collector condemns it",
      withStore(async (store) => {
        const [a, b] = [hashOf("lease a"), hashOf("lease b")];
        const first = await store.leaseObjects("xorb", [a, b, a]);
        assert.deepEqual([...first.keys()].sort(), [key(a), key(b)].sort());
        const again = await store.leaseObjects("xorb", [a]);
        assert.equal(again.get(key(a))!.epoch, first.get(key(a))!.epoch);
        assert.equal((await store.leaseObjects("file", [a])).size, 1, "kinds are leased apart");
      }),
    );

    it(
      "deletes an unreachable file with its links and SHA-256 entry, unless it is young or leased",
      withStore(async (store) => {
        const beforeFile = await instant();
        const { repo, file } = await repoWithFile(store, "files");
        assert.deepEqual(await store.deleteFiles([file.hash], beforeFile), [], "created after the cutoff: kept");

        const cutoff = await instant();
        await store.leaseObjects("file", [file.hash]);
        assert.deepEqual(await store.deleteFiles([file.hash], cutoff), [], "leased after the cutoff: kept");
        assert.notEqual(await store.getFile(file.hash), null);

        const later = await instant();
        const deleted = await store.deleteFiles([file.hash, hashOf("no such file")], later);
        assert.deepEqual(
          deleted.map((gone) => [key(gone.hash), gone.size]),
          [[key(file.hash), file.size]],
        );
        assert.equal(await store.getFile(file.hash), null);
        assert.equal(await store.isFileInRepo(file.hash, repo.id), false);
        assert.equal(await store.findFileBySha256(repo.id, file.sha256!), null);
      }),
    );

    it(
      "deletes a file's SHA-256 entries in every repository; one under another digest is never answered again",
      withStore(async (store) => {
        const { repo, file, xorb } = await repoWithFile(store, "two repos");
        const other = await store.createRepo("dataset", "alice/other two repos");
        await store.registerShard({ shardHash: hashOf("shard other"), repoId: other.id, files: [file], dedupEntries: [] });
        // A client that gave the same file another digest: an entry the collector cannot find by key.
        const otherDigest = hashOf("another digest");
        await store.registerShard({ shardHash: hashOf("shard digest"), repoId: repo.id, files: [{ ...file, sha256: otherDigest }], dedupEntries: [] });
        assert.equal(key((await store.findFileBySha256(repo.id, otherDigest))!), key(file.hash));
        const unrelated = fileRecord("unrelated", xorb);
        await store.registerShard({ shardHash: hashOf("shard unrelated"), repoId: repo.id, files: [unrelated], dedupEntries: [] });

        const later = await instant();
        assert.equal((await store.deleteFiles([file.hash], later)).length, 1);
        for (const [repoId, digest] of [
          [repo.id, file.sha256!],
          [other.id, file.sha256!],
          [repo.id, otherDigest],
        ] as const) {
          assert.equal(await store.findFileBySha256(repoId, digest), null);
        }
        assert.equal(key((await store.findFileBySha256(repo.id, unrelated.sha256!))!), key(unrelated.hash), "other files keep theirs");
        // `castor migrate` does not carry the entry left behind, and skipping it ends no export early.
        const exported: [number, string][] = [];
        for (let after: string | null = null; ; ) {
          const page = await store.scanSha256Index(after, 1);
          exported.push(...page.rows.map((entry): [number, string] => [entry.repoId, key(entry.sha256)]));
          if (page.next === null) break;
          after = page.next;
        }
        assert.deepEqual(exported, [[repo.id, key(unrelated.sha256!)]]);

        // Registered again by the other repository only: alice/two repos does not hold it, whatever digest it asks by.
        await store.registerShard({ shardHash: hashOf("shard other again"), repoId: other.id, files: [file], dedupEntries: [] });
        assert.equal(key((await store.findFileBySha256(other.id, file.sha256!))!), key(file.hash));
        assert.equal(await store.findFileBySha256(repo.id, otherDigest), null);
        assert.equal(await store.findFileBySha256(repo.id, file.sha256!), null);
      }),
    );

    it(
      "a re-registration of a recorded file leases it against a collection",
      withStore(async (store) => {
        const { repo, file } = await repoWithFile(store, "reregistered");
        const cutoff = await instant();
        await store.registerShard({ shardHash: hashOf("shard again"), repoId: repo.id, files: [file], dedupEntries: [] });
        assert.deepEqual(await store.deleteFiles([file.hash], cutoff), []);
        assert.notEqual(await store.getFile(file.hash), null);
      }),
    );

    it(
      "condemns a xorb: record and dedup entries go, leases and writes wait for the release",
      withStore(async (store) => {
        const { repo, xorb, file } = await repoWithFile(store, "condemned");
        const uploaderLease = (await store.leaseObjects("xorb", [xorb.hash])).get(key(xorb.hash))!;
        const cutoff = await instant();

        const condemned = await store.condemnXorbs([xorb.hash], cutoff);
        assert.deepEqual(
          condemned.map((gone) => [key(gone.hash), gone.serializedLength, gone.chunks]),
          [[key(xorb.hash), xorb.serializedLength, xorb.chunks.length]],
        );
        assert.equal(await store.getXorbSize(xorb.hash), null);
        assert.deepEqual(await store.findDedupXorbs(xorb.chunks[0].hash, 5), []);
        assert.deepEqual(
          (await store.condemned(10)).map((blob) => [blob.kind, key(blob.hash)]),
          [["xorb", key(xorb.hash)]],
        );
        assert.equal((await store.leaseObjects("xorb", [xorb.hash])).size, 0, "no lease while condemned");
        await assert.rejects(store.putXorb(xorb, uploaderLease), BeingCollectedError);
        await assert.rejects(
          store.registerShard({ shardHash: hashOf("late shard"), repoId: repo.id, files: [fileRecord("late", xorb)], dedupEntries: [] }),
          BeingCollectedError,
        );

        await store.release("xorb", [xorb.hash]);
        assert.deepEqual(await store.condemned(10), []);
        await assert.rejects(store.putXorb(xorb, uploaderLease), BeingCollectedError, "a lease taken before the condemnation stays stale");
        await assert.rejects(
          store.registerShard({ shardHash: hashOf("later shard"), repoId: repo.id, files: [fileRecord("later", xorb)], dedupEntries: [] }),
          BeingCollectedError,
          "a registration naming the collected xorb is refused",
        );
        const fresh = (await store.leaseObjects("xorb", [xorb.hash])).get(key(xorb.hash));
        assert.ok(fresh, "leased again once released");
        assert.equal(await store.putXorb(xorb, fresh), true, "uploaded anew");
        assert.equal(await store.getXorbSize(xorb.hash), xorb.serializedLength);
        assert.notEqual(await store.getFile(file.hash), null, "condemning a xorb leaves file records to deleteFiles");
      }),
    );

    it(
      "skips leased and young xorbs, and condemns a blob without a record",
      withStore(async (store) => {
        const leased = xorbRecord("leased", 2);
        await store.putXorb(leased);
        const cutoff = await instant();
        await store.leaseObjects("xorb", [leased.hash]);
        const young = xorbRecord("young", 2);
        await store.putXorb(young);
        const orphan = hashOf("orphan blob");
        const condemned = await store.condemnXorbs([leased.hash, young.hash, orphan], cutoff);
        assert.deepEqual(
          condemned.map((gone) => [key(gone.hash), gone.serializedLength, gone.chunks]),
          [[key(orphan), null, 0]],
        );
        assert.notEqual(await store.getXorbSize(leased.hash), null);
        assert.notEqual(await store.getXorbSize(young.hash), null);
      }),
    );

    it(
      "condemns leased and young xorbs and inline blobs too when the cutoff is null (fsck --repair)",
      withStore(async (store) => {
        const { xorb, file } = await repoWithFile(store, "damaged");
        const uploaderLease = (await store.leaseObjects("xorb", [xorb.hash])).get(key(xorb.hash))!;
        const inline = hashOf("inline damaged");
        await store.leaseObjects("inline", [inline]);

        const condemned = await store.condemnXorbs([xorb.hash], null);
        assert.deepEqual(
          condemned.map((gone) => [key(gone.hash), gone.serializedLength, gone.chunks]),
          [[key(xorb.hash), xorb.serializedLength, xorb.chunks.length]],
        );
        assert.equal(await store.getXorbSize(xorb.hash), null);
        assert.deepEqual(await store.findDedupXorbs(xorb.chunks[0].hash, 5), []);
        assert.deepEqual((await store.condemnInline([inline], null)).map(key), [key(inline)]);
        assert.deepEqual((await store.condemned(10)).map((blob) => blob.kind).sort(), ["inline", "xorb"]);

        await store.release("xorb", [xorb.hash]);
        await store.release("inline", [inline]);
        await assert.rejects(store.putXorb(xorb, uploaderLease), BeingCollectedError, "the upload that leased it before stores it anew");
        const fresh = (await store.leaseObjects("xorb", [xorb.hash])).get(key(xorb.hash))!;
        assert.equal(await store.putXorb(xorb, fresh), true);
        assert.notEqual(await store.getFile(file.hash), null, "file records stay");
      }),
    );

    it(
      "deletes the dedup entries given whose xorb is not recorded, and only those",
      withStore(async (store) => {
        const { xorb } = await repoWithFile(store, "dangling");
        const recorded = { chunkHash: xorb.chunks[0].hash, xorbHash: xorb.hash };
        const dangling = { chunkHash: hashOf("dangling chunk"), xorbHash: hashOf("xorb nowhere") };
        await store.importDedupEntries([dangling]);
        const absent = { chunkHash: hashOf("absent chunk"), xorbHash: hashOf("xorb absent") };
        assert.equal(await store.deleteDanglingDedupEntries([recorded, dangling, absent]), 1);
        assert.deepEqual(await store.findDedupXorbs(dangling.chunkHash, 5), []);
        assert.deepEqual((await store.findDedupXorbs(recorded.chunkHash, 5)).map(key), [key(xorb.hash)], "an entry of a recorded xorb stays");
        assert.equal(await store.deleteDanglingDedupEntries([]), 0);
      }),
    );

    it(
      "condemns unleased inline blobs and prunes leases older than the cutoff",
      withStore(async (store) => {
        const [old, recent] = [hashOf("inline old"), hashOf("inline recent")];
        await store.leaseObjects("inline", [old]);
        const cutoff = await instant();
        await store.leaseObjects("inline", [recent]);
        assert.deepEqual((await store.condemnInline([old, recent], cutoff)).map(key), [key(old)]);
        assert.equal(await store.pruneLeases(await instant()), 1, "the recent lease is pruned, the condemned one kept");
        assert.equal((await store.condemned(10)).length, 1);
        await store.release("inline", [old]);
        assert.deepEqual(await store.condemned(10), []);
      }),
    );

    it(
      "deletes unreachable history only while the refs are as the collector saw them",
      withStore(async (store) => {
        const repo = await store.createRepo("model", "alice/history");
        const [main] = await store.listRevisions(repo.id);
        const seen = [{ name: "main", commitOid: main.commitOid }];
        assert.equal(await store.deleteHistory(repo.id, [{ name: "main", commitOid: oidOf("elsewhere") }], [], []), null);
        assert.equal(await store.deleteHistory(repo.id, [...seen, { name: "dev", commitOid: null }], [], []), null);
        const tree = { repoId: repo.id, oid: oidOf("lost tree"), entries: [] };
        const commit = {
          repoId: repo.id,
          oid: oidOf("lost commit"),
          treeOid: tree.oid,
          parentOids: [],
          title: "lost",
          message: "lost\n",
          author: "alice",
          createdAt: new Date(1_767_225_600_000),
          object: "lost",
        };
        await store.importTrees([tree]);
        await store.importCommits([commit]);
        assert.deepEqual(await store.deleteHistory(repo.id, seen, [commit.oid, oidOf("no such commit")], [tree.oid]), { commits: 1, trees: 1 });
        assert.equal(await store.getCommit(repo.id, commit.oid), null);
        assert.equal(await store.getTree(repo.id, tree.oid), null);
        assert.deepEqual(await store.deleteHistory(9_999_999, seen, [], []), { commits: 0, trees: 0 }, "an unknown repository has nothing");
      }),
    );

    it(
      "keeps the last maintenance run of each kind",
      withStore(async (store) => {
        assert.deepEqual(await store.lastMaintenanceRuns(), []);
        const at = (ms: number) => new Date(1_767_225_600_000 + ms);
        await store.recordMaintenanceRun({ kind: "fsck", startedAt: at(0), finishedAt: at(1), totals: { problems: 2 } });
        await store.recordMaintenanceRun({ kind: "gc", startedAt: at(2), finishedAt: at(3), totals: { xorbs: 1, xorb_bytes: 10 } });
        await store.recordMaintenanceRun({ kind: "gc", startedAt: at(4), finishedAt: at(5), totals: { xorbs: 7 } });
        assert.deepEqual(await store.lastMaintenanceRuns(), [
          { kind: "gc", startedAt: at(4), finishedAt: at(5), totals: { xorbs: 7 } },
          { kind: "fsck", startedAt: at(0), finishedAt: at(1), totals: { problems: 2 } },
        ]);
      }),
    );

    it(
      "a registration replaces a file record whose xorb was removed, with one naming recorded xorbs",
      withStore(async (store) => {
        const { repo, xorb, file } = await repoWithFile(store, "broken");
        await store.condemnXorbs([xorb.hash], await instant());
        await store.release("xorb", [xorb.hash]);
        const other = xorbRecord("replacement", 4);
        const replacement = { ...fileRecord("replacement", other, { terms: 2 }), hash: file.hash, sha256: file.sha256 };
        const register = (label: string) => store.registerShard({ shardHash: hashOf(label), repoId: repo.id, files: [replacement], dedupEntries: [] });

        await register("shard on an unrecorded xorb");
        assert.equal(key((await store.getFile(file.hash))!.terms[0].xorbHash), key(xorb.hash), "not while the new record names unrecorded xorbs either");
        await store.putXorb(other);
        await register("shard on a recorded xorb");
        assert.deepEqual(await store.getFile(file.hash), replacement);

        const whole = { ...fileRecord("whole", other), hash: file.hash, sha256: file.sha256 };
        await store.registerShard({ shardHash: hashOf("shard again"), repoId: repo.id, files: [whole], dedupEntries: [] });
        assert.deepEqual(await store.getFile(file.hash), replacement, "a whole record is never replaced");
      }),
    );
  });
}
