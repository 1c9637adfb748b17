/**
 * The mirror's records (src/metadata/mirror.ts), part of the MetadataStore contract: mirrored
 * repositories, refs (negative answers included), snapshots, mirrored files in least-recently-
 * used order, chunk runs and fill claims. `runMetadataStoreContract` calls it with its
 * `withStore` wrapper, so every backend runs these cases unchanged.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { hashToHex } from "../../src/format/hash.js";
import type { MirroredFile } from "../../src/metadata/mirror.js";
import { AlreadyExistsError, NotFoundError, type CommitRecord, type TreeRecord } from "../../src/metadata/store.js";
import { hashOf, oidOf } from "../helpers/fixtures.js";
import type { WithStore } from "./cas-metadata.js";

const T0 = new Date("2031-03-04T05:06:07.891Z");
const at = (seconds: number) => new Date(T0.getTime() + seconds * 1000);

function mirrored(label: string, lastUsedAt: Date, options: Partial<MirroredFile> = {}): MirroredFile {
  return { kind: "xet", hash: hashOf(label), gitOid: null, size: 1000, fetchedBytes: 600, fetchedAt: T0, lastUsedAt, ...options };
}

export function runMirrorRecordsContract(withStore: WithStore): void {
  describe("mirror records", () => {
    it(
      "creates mirrored repositories flagged as such, next to local ones; the name stays unique",
      withStore(async (store) => {
        const local = await store.createRepo("model", "org/local");
        const repo = await store.mirror.createMirroredRepo("model", "org/remote", false, T0);
        assert.equal(repo.mirror, true);
        assert.equal(repo.private, false);
        assert.equal(local.mirror, undefined, "a local repository carries no mirror flag");
        assert.deepEqual(await store.getRepo("model", "org/remote"), repo);
        assert.deepEqual(await store.getRevision(repo.id, "main"), null, "a mirrored repository has no revisions of its own");
        await assert.rejects(store.mirror.createMirroredRepo("model", "org/local", true, T0), AlreadyExistsError);
        await assert.rejects(store.mirror.createMirroredRepo("model", "org/remote", true, T0), AlreadyExistsError);
        const other = await store.mirror.createMirroredRepo("dataset", "org/remote", true, T0);
        assert.equal(other.private, true);
        assert.deepEqual(
          [...(await store.mirror.mirroredRepoUses()).entries()],
          [
            [repo.id, T0],
            [other.id, T0],
          ],
        );
        await store.mirror.touchMirroredRepo(repo.id, at(5));
        await store.mirror.touchMirroredRepo(local.id, at(5));
        assert.deepEqual((await store.mirror.mirroredRepoUses()).get(repo.id), at(5));
        assert.equal((await store.mirror.mirroredRepoUses()).has(local.id), false, "touching a local repository does not make it a mirror");
        assert.equal((await store.getRepoById(local.id))?.mirror, undefined);
        assert.deepEqual(
          (await store.listRepos()).map((r) => [r.name, r.type, r.mirror ?? false]),
          [
            ["org/local", "model", false],
            ["org/remote", "model", true],
            ["org/remote", "dataset", true],
          ],
        );
      }),
    );

    it(
      "imports a mirrored repository as one (castor migrate)",
      withStore(async (store) => {
        const { repo, inserted } = await store.importRepo({ type: "model", name: "org/imported", createdAt: T0, private: false, mirror: true });
        assert.equal(inserted, true);
        assert.equal(repo.mirror, true);
        assert.equal((await store.getRepo("model", "org/imported"))?.mirror, true);
        assert.equal((await store.importRepo({ type: "model", name: "org/local", createdAt: T0, private: false })).repo.mirror, undefined);
      }),
    );

    it(
      "keeps refs, negative ones too, replaced by name; deleting the repository drops them",
      withStore(async (store) => {
        const repo = await store.mirror.createMirroredRepo("model", "org/remote", false, T0);
        assert.equal(await store.mirror.getMirrorRef(repo.id, "main"), null);
        await store.mirror.putMirrorRef(repo.id, { name: "main", kind: "branch", commitOid: oidOf("c1"), checkedAt: T0 });
        await store.mirror.putMirrorRef(repo.id, { name: "v1", kind: null, commitOid: null, checkedAt: at(1) });
        await store.mirror.putMirrorRef(repo.id, { name: "main", kind: "tag", commitOid: oidOf("c2"), checkedAt: at(2) });
        assert.deepEqual(await store.mirror.getMirrorRef(repo.id, "main"), { name: "main", kind: "tag", commitOid: oidOf("c2"), checkedAt: at(2) });
        assert.deepEqual(await store.mirror.listMirrorRefs(repo.id), [
          { name: "main", kind: "tag", commitOid: oidOf("c2"), checkedAt: at(2) },
          { name: "v1", kind: null, commitOid: null, checkedAt: at(1) },
        ]);
        await assert.rejects(store.mirror.putMirrorRef(987654, { name: "main", kind: null, commitOid: null, checkedAt: T0 }), NotFoundError);
        await store.deleteRepo(repo.id);
        assert.deepEqual(await store.mirror.listMirrorRefs(repo.id), []);
      }),
    );

    it(
      "stores snapshots as commits and trees of the repository, once",
      withStore(async (store) => {
        const repo = await store.mirror.createMirroredRepo("model", "org/remote", false, T0);
        const sub: TreeRecord = { oid: oidOf("sub"), entries: [{ type: "file", name: "b.txt", oid: oidOf("b"), size: 3, sha256: "", xetHash: null }] };
        const root: TreeRecord = {
          oid: oidOf("root"),
          entries: [
            { type: "file", name: "a.bin", oid: oidOf("a"), size: 9, sha256: hashToHex(hashOf("sha a")), xetHash: hashToHex(hashOf("xet a")) },
            { type: "directory", name: "d", oid: sub.oid },
          ],
        };
        const commit: CommitRecord = {
          oid: oidOf("c1"),
          treeOid: root.oid,
          parentOids: [],
          title: "",
          message: "",
          author: "",
          createdAt: new Date("2030-01-01T00:00:00Z"),
          object: "",
        };
        await store.mirror.putMirrorSnapshot(repo.id, commit, [root, sub]);
        await store.mirror.putMirrorSnapshot(repo.id, commit, [root, sub]);
        assert.deepEqual(await store.getCommit(repo.id, commit.oid), commit);
        assert.deepEqual(await store.getTree(repo.id, sub.oid), sub);
        assert.deepEqual(await store.getTree(repo.id, root.oid), root);
        await assert.rejects(store.mirror.putMirrorSnapshot(987654, commit, [root]), NotFoundError);
      }),
    );

    it(
      "lists mirrored files least recently used first, page by page; touches and repeats only move the last use forward",
      withStore(async (store) => {
        const a = mirrored("a", at(30));
        const b = mirrored("b", at(10), { kind: "inline", gitOid: oidOf("b"), size: 5, fetchedBytes: 5 });
        const c = mirrored("c", at(20));
        const d = mirrored("d", at(20), { kind: "inline", gitOid: oidOf("d") });
        for (const file of [a, b, c, d]) await store.mirror.putMirroredFile(file, []);
        const all = await store.mirror.listMirroredFiles(null, 10);
        assert.deepEqual(
          all.map((file) => file.hash),
          [b, d, c, a].map((file) => file.hash),
          "by last use, then kind (inline before xet), then hash",
        );
        assert.deepEqual(all[0], b);
        const first = await store.mirror.listMirroredFiles(null, 2);
        const rest = await store.mirror.listMirroredFiles(first[1], 10);
        assert.deepEqual([...first, ...rest], all);

        await store.mirror.putMirroredFile({ ...a, fetchedBytes: 1, fetchedAt: at(99), lastUsedAt: at(5) }, []);
        assert.deepEqual(await store.mirror.getMirroredFile("xet", a.hash), a, "a repeat keeps the first fetch and the later use");
        await store.mirror.touchMirroredFile("inline", b.hash, at(40));
        await store.mirror.touchMirroredFile("inline", b.hash, at(1));
        assert.deepEqual((await store.mirror.getMirroredFile("inline", b.hash))?.lastUsedAt, at(40));
        assert.equal(await store.mirror.getMirroredFile("inline", a.hash), null, "kinds are apart");

        assert.deepEqual(await store.mirror.findMirroredInline(oidOf("d")), d);
        assert.equal(await store.mirror.findMirroredInline(oidOf("zzz")), null);
        assert.deepEqual(await store.mirror.mirroredTotals(), { files: 4, bytes: 3005, fetchedBytes: 1805 });

        assert.equal(
          await store.mirror.deleteMirroredFiles([
            { kind: "xet", hash: a.hash },
            { kind: "inline", hash: d.hash },
            { kind: "inline", hash: a.hash },
          ]),
          2,
        );
        assert.deepEqual(
          (await store.mirror.listMirroredFiles(null, 10)).map((file) => file.hash),
          [c, b].map((file) => file.hash),
        );
        assert.equal(await store.mirror.deleteMirroredFiles([]), 0);
      }),
    );

    it(
      "keeps chunk runs with the file that proved them, and finds them by upstream xorb",
      withStore(async (store) => {
        const x = hashOf("upstream x");
        const y = hashOf("upstream y");
        const runs = [
          { upstreamXorb: x, upstreamStart: 10, upstreamEnd: 20, upstreamOffset: 400_080, xorb: hashOf("castor 1"), start: 0 },
          { upstreamXorb: x, upstreamStart: 0, upstreamEnd: 10, upstreamOffset: 0, xorb: hashOf("castor 1"), start: 10 },
          { upstreamXorb: y, upstreamStart: 0, upstreamEnd: 3, upstreamOffset: 0, xorb: hashOf("castor 2"), start: 7 },
        ];
        await store.mirror.putMirroredFile(mirrored("f", T0), runs);
        await store.mirror.putMirroredFile(mirrored("g", T0), [runs[0]]);
        assert.deepEqual(await store.mirror.findChunkRuns([x]), [runs[1], runs[0]]);
        const xFirst = Buffer.compare(Buffer.from(x), Buffer.from(y)) < 0;
        assert.deepEqual(
          await store.mirror.findChunkRuns([y, x, y]),
          xFirst ? [runs[1], runs[0], runs[2]] : [runs[2], runs[1], runs[0]],
          "in (upstream xorb, start) order",
        );
        assert.deepEqual(await store.mirror.findChunkRuns([hashOf("nothing")]), []);
        assert.deepEqual(await store.mirror.findChunkRuns([]), []);
        assert.equal(await store.mirror.forgetChunkRuns([hashOf("castor 1")]), 2, "the runs into a removed xorb go");
        assert.deepEqual(await store.mirror.findChunkRuns([x, y]), [runs[2]]);
        assert.equal(await store.mirror.forgetChunkRuns([]), 0);
      }),
    );

    it(
      "lets one owner at a time claim a fill, and another take over a stale claim",
      withStore(async (store) => {
        assert.equal(await store.mirror.activeFills(at(-30)), 0);
        assert.equal(await store.mirror.claimFill("xet:abc", "node-a", T0, at(-30)), true);
        assert.equal(await store.mirror.activeFills(at(-30)), 1, "a fill claimed and renewed since");
        assert.equal(await store.mirror.activeFills(at(1)), 0, "not renewed since");
        assert.equal(await store.mirror.claimFill("xet:abc", "node-b", at(1), at(-29)), false, "held and fresh");
        assert.equal(await store.mirror.claimFill("xet:abc", "node-a", at(2), at(-28)), true, "the holder may claim again");
        assert.equal(await store.mirror.renewFill("xet:abc", "node-a", at(10)), true);
        assert.equal(await store.mirror.renewFill("xet:abc", "node-b", at(10)), false);
        assert.equal(await store.mirror.claimFill("xet:abc", "node-b", at(50), at(20)), true, "a heartbeat older than the stale mark is taken over");
        assert.equal(await store.mirror.renewFill("xet:abc", "node-a", at(51)), false);
        await store.mirror.releaseFill("xet:abc", "node-a");
        assert.equal(await store.mirror.claimFill("xet:abc", "node-c", at(52), at(22)), false, "a release by a former owner does nothing");
        await store.mirror.releaseFill("xet:abc", "node-b");
        assert.equal(await store.mirror.claimFill("xet:abc", "node-c", at(53), at(23)), true);
      }),
    );
  });
}
