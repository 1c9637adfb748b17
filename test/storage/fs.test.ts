import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { link, mkdir, mkdtemp, readdir, readFile, rm, stat, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { blobKeyFromHex, isBlobStoreError, type BlobKey } from "../../src/storage/blob-store.js";
import { type FsBlobStore, openFsBlobStore } from "../../src/storage/fs.js";
import { collect, readAll, runBlobStoreContract } from "../contract/blob-store.js";

async function makeRoot(): Promise<{ parent: string; root: string; cleanup(): Promise<void> }> {
  const parent = await mkdtemp(join(tmpdir(), "castor-fs-blobs-"));
  return { parent, root: join(parent, "blobs"), cleanup: () => rm(parent, { recursive: true, force: true }) };
}

async function withFsStore(body: (store: FsBlobStore, root: string, parent: string) => Promise<void>): Promise<void> {
  const { parent, root, cleanup } = await makeRoot();
  try {
    await body(await openFsBlobStore(root), root, parent);
  } finally {
    await cleanup();
  }
}

const tempFiles = (root: string) => readdir(join(root, "tmp"));
const hexStarting = (start: string) => start + randomBytes(32).toString("hex").slice(start.length);

runBlobStoreContract(
  "fs",
  async () => {
    const { root, cleanup } = await makeRoot();
    return { store: await openFsBlobStore(root), cleanup };
  },
  { spanReads: true },
);

describe("FsBlobStore", () => {
  it("lays objects out in two-hex fan-out folders, read-only, with nothing else in the root", () =>
    withFsStore(async (store, root) => {
      const hex = hexStarting("ab");
      const body = randomBytes(1234);
      await store.putIfAbsent(blobKeyFromHex("xorbs", hex), body);
      await store.putIfAbsent(blobKeyFromHex("shards", hexStarting("07")), randomBytes(5));
      const path = join(root, "xorbs", "ab", hex);
      assert.ok((await readFile(path)).equals(body));
      assert.equal((await stat(path)).mode & 0o222, 0, "published objects must not be writable");
      assert.deepEqual((await readdir(root)).sort(), ["inline", "shards", "tmp", "xorbs"]);
      assert.deepEqual(await readdir(join(root, "xorbs")), ["ab"]);
      assert.deepEqual(await readdir(join(root, "shards")), ["07"]);
    }));

  it("leaves no temp file after any kind of put, successful or not", () =>
    withFsStore(async (store, root, parent) => {
      const key = blobKeyFromHex("xorbs", hexStarting(""));
      await store.putIfAbsent(key, Readable.from([randomBytes(1000), randomBytes(1000)]));
      await store.putIfAbsent(key, randomBytes(10)); // not inserted
      await assert.rejects(
        store.putIfAbsent(
          blobKeyFromHex("xorbs", hexStarting("")),
          Readable.from(
            (async function* () {
              yield randomBytes(5000);
              throw new Error("disconnected");
            })(),
          ),
        ),
      );
      const local = join(parent, "local.bin");
      await writeFile(local, randomBytes(4000));
      await store.putFileIfAbsent(blobKeyFromHex("shards", hexStarting("")), local);
      await assert.rejects(store.putFileIfAbsent(blobKeyFromHex("shards", hexStarting("")), join(parent, "missing")));

      const committed = await store.beginPut(blobKeyFromHex("xorbs", hexStarting("")));
      assert.equal((await tempFiles(root)).length, 1, "a staged body lives in tmp/ until commit");
      committed.writable.end(randomBytes(100));
      await committed.commit();

      const aborted = await store.beginPut(blobKeyFromHex("xorbs", hexStarting("")));
      aborted.writable.write(randomBytes(100));
      await aborted.abort();

      const failed = await store.beginPut(blobKeyFromHex("xorbs", hexStarting("")));
      await assert.rejects(
        pipeline(
          Readable.from(
            (async function* () {
              yield randomBytes(10);
              throw new Error("bad chunk");
            })(),
          ),
          failed.writable,
        ),
      );
      await assert.rejects(failed.commit());

      const unended = await store.beginPut(blobKeyFromHex("xorbs", hexStarting("")));
      await assert.rejects(unended.commit());

      assert.deepEqual(await tempFiles(root), []);
      assert.equal((await collect(store.list())).length, 3);
    }));

  it("sweeps temp leftovers of a crashed process, sparing fresh ones when asked", () =>
    withFsStore(async (store, root) => {
      const key = blobKeyFromHex("xorbs", hexStarting("cd"));
      const body = randomBytes(300);
      await store.putIfAbsent(key, body);
      const tmp = join(root, "tmp");
      // A crash between link() and the temp unlink leaves a second name for a published object.
      await link(join(root, "xorbs", "cd", key.slice("xorbs/".length)), join(tmp, "linked.part"));
      await writeFile(join(tmp, "partial.part"), randomBytes(50));
      await writeFile(join(tmp, "old.part"), randomBytes(50));
      const anHourAgo = new Date(Date.now() - 60 * 60 * 1000);
      await utimes(join(tmp, "old.part"), anHourAgo, anHourAgo);

      // Leftovers are never visible as objects.
      assert.deepEqual(await collect(store.list()), [key]);

      assert.equal(await store.sweepTemp({ olderThanMs: 10 * 60 * 1000 }), 1);
      assert.deepEqual((await tempFiles(root)).sort(), ["linked.part", "partial.part"]);
      assert.equal(await store.sweepTemp(), 2);
      assert.deepEqual(await tempFiles(root), []);
      assert.ok((await readAll(await store.read(key))).equals(body));
      await assert.rejects(store.sweepTemp({ olderThanMs: -1 }), RangeError);
    }));

  it("never touches a path outside its root, whatever the key", () =>
    withFsStore(async (store, root, parent) => {
      const victim = join(parent, "victim");
      await writeFile(victim, "keep me");
      await mkdir(join(root, "xorbs", "aa"), { recursive: true });
      const attempts = [
        "../victim",
        "xorbs/../../victim",
        `xorbs/aa/../../../victim`,
        victim,
        `xorbs/${"a".repeat(62)}/..`,
        "xorbs\\..\\..\\victim",
        `xorbs/${"a".repeat(64)}\0../../victim`,
      ];
      for (const text of attempts) {
        const key = text as BlobKey;
        const rejectsAsInvalidKey = (err: unknown) => isBlobStoreError(err, "invalid_key");
        await assert.rejects(store.delete(key), rejectsAsInvalidKey, text);
        await assert.rejects(store.putIfAbsent(key, Buffer.from("overwritten")), rejectsAsInvalidKey, text);
        await assert.rejects(store.putFileIfAbsent(key, victim), rejectsAsInvalidKey, text);
        await assert.rejects(store.beginPut(key), rejectsAsInvalidKey, text);
        await assert.rejects(store.read(key), rejectsAsInvalidKey, text);
        await assert.rejects(store.size(key), rejectsAsInvalidKey, text);
      }
      assert.equal(await readFile(victim, "utf8"), "keep me");
      assert.deepEqual((await readdir(parent)).sort(), ["blobs", "victim"]);
      assert.deepEqual(await tempFiles(root), []);
    }));

  it("lists only well-formed names in the right fan-out folder", () =>
    withFsStore(async (store, root) => {
      const key = blobKeyFromHex("xorbs", hexStarting("ab"));
      await store.putIfAbsent(key, randomBytes(8));
      await writeFile(join(root, "xorbs", "ab", "notes.txt"), "stray");
      await writeFile(join(root, "xorbs", "ab", hexStarting("cd")), "wrong fan-out folder");
      await writeFile(join(root, "xorbs", "ab", hexStarting("ab").toUpperCase()), "upper case");
      await mkdir(join(root, "xorbs", "zz"));
      await writeFile(join(root, "xorbs", "zz", hexStarting("00")), "bad folder");
      await mkdir(join(root, "xorbs", "ab", hexStarting("ab")));
      assert.deepEqual(await collect(store.list()), [key]);
    }));

  it("sees objects written before it was reopened", () =>
    withFsStore(async (store, root) => {
      const key = blobKeyFromHex("shards", hexStarting("12"));
      const body = randomBytes(64);
      await store.putIfAbsent(key, body);
      const reopened = await openFsBlobStore(root);
      assert.ok((await readAll(await reopened.read(key))).equals(body));
      assert.deepEqual(await reopened.putIfAbsent(key, randomBytes(64)), { inserted: false });
    }));

  it("finishes a ranged read already opened when the object is deleted", () =>
    withFsStore(async (store) => {
      const key = blobKeyFromHex("xorbs", hexStarting(""));
      const body = randomBytes(2 * 1024 * 1024);
      await store.putIfAbsent(key, body);
      const stream = await store.read(key, { offset: 1000, length: 1024 * 1024 });
      await store.delete(key);
      assert.ok((await readAll(stream)).equals(body.subarray(1000, 1000 + 1024 * 1024)));
      assert.equal(await store.exists(key), false);
    }));
});
