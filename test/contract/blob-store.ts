/**
 * The behaviour every `BlobStore` must have, as node:test cases. A backend's test file calls
 * `runBlobStoreContract` with a factory that opens a fresh, empty store; each case opens its
 * own store, so cases never see each other's objects.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import {
  blobKey,
  blobKeyFromHex,
  isBlobStoreError,
  rangeHeaderOf,
  type BlobKey,
  type BlobKind,
  type BlobStore,
  type BlobStoreErrorCode,
  type SpanReader,
} from "../../src/storage/blob-store.js";

export interface OpenedBlobStore {
  store: BlobStore;
  cleanup(): Promise<void>;
}

const MiB = 1024 * 1024;

function randomKey(kind: BlobKind = "xorbs"): BlobKey {
  return blobKey(kind, randomBytes(32));
}

/** A key whose string form starts with `hexStart` (to exercise prefix listing and fan-out). */
function keyStartingWith(kind: BlobKind, hexStart: string): BlobKey {
  const hex = hexStart + randomBytes(32).toString("hex").slice(hexStart.length);
  return blobKeyFromHex(kind, hex);
}

/** `body` delivered in `pieceSize` slices, yielding to the event loop between them so writers interleave. */
function slowStream(body: Uint8Array, pieceSize = 64 * 1024): Readable {
  return Readable.from(
    (async function* () {
      for (let at = 0; at < body.length; at += pieceSize) {
        await new Promise((resolve) => setImmediate(resolve));
        yield body.subarray(at, Math.min(at + pieceSize, body.length));
      }
    })(),
  );
}

/** Emits `prefix`, then fails: a client that disconnects mid-upload, or a validator that rejects. */
function failingStream(prefix: Uint8Array, error: Error): Readable {
  return Readable.from(
    (async function* () {
      yield prefix;
      await new Promise((resolve) => setImmediate(resolve));
      throw error;
    })(),
  );
}

/** The whole stream as one buffer. */
export async function readAll(stream: Readable): Promise<Buffer> {
  const pieces: Buffer[] = [];
  for await (const piece of stream) pieces.push(piece as Buffer);
  return Buffer.concat(pieces);
}

export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

export function errorWithCode(code: BlobStoreErrorCode) {
  return (err: unknown) => {
    assert.ok(isBlobStoreError(err, code), `expected a BlobStoreError "${code}", got ${String(err)}`);
    return true;
  };
}

async function assertAbsent(store: BlobStore, key: BlobKey): Promise<void> {
  assert.equal(await store.exists(key), false);
  assert.equal(await store.size(key), null);
  await assert.rejects(store.read(key), errorWithCode("not_found"));
  assert.deepEqual(await collect(store.list(key)), []);
}

async function assertStored(store: BlobStore, key: BlobKey, body: Uint8Array): Promise<void> {
  assert.equal(await store.exists(key), true);
  assert.equal(await store.size(key), body.length);
  const stored = await readAll(await store.read(key));
  assert.equal(stored.length, body.length);
  assert.ok(stored.equals(body), `stored bytes of ${key} differ from what was put`);
}

/** Optional `BlobStore` methods the backend under test declares it offers. */
export interface BlobStoreCapabilities {
  /** `openSpan`: positional reads into the caller's buffers. */
  spanReads?: boolean;
  /** `createRangePresigner`: URLs clients fetch byte ranges with, straight from the backend. */
  rangePresigning?: boolean;
}

/** Reads a whole span through `reader` in `bufferBytes` reads into one reused buffer. */
async function readSpan(reader: SpanReader, bufferBytes: number): Promise<Buffer> {
  const buffer = Buffer.alloc(bufferBytes);
  const pieces: Buffer[] = [];
  for (let from = 0; ; ) {
    const got = await reader.read(buffer, from);
    if (got === 0) break;
    pieces.push(Buffer.from(buffer.subarray(0, got)));
    from += got;
  }
  return Buffer.concat(pieces);
}

export function runBlobStoreContract(name: string, open: () => Promise<OpenedBlobStore>, capabilities: BlobStoreCapabilities = {}): void {
  async function withStore(body: (store: BlobStore) => Promise<void>): Promise<void> {
    const { store, cleanup } = await open();
    try {
      await body(store);
    } finally {
      await cleanup();
    }
  }

  describe(`BlobStore contract: ${name}`, () => {
    describe("round trip", () => {
      for (const [label, size] of [
        ["empty", 0],
        ["one byte", 1],
        ["small", 1000],
        ["multi-MiB", 5 * MiB + 17],
      ] as const) {
        it(`stores and reads back a ${label} body given as a stream`, () =>
          withStore(async (store) => {
            const key = randomKey();
            const body = randomBytes(size);
            assert.deepEqual(await store.putIfAbsent(key, slowStream(body)), { inserted: true });
            await assertStored(store, key, body);
          }));
        it(`stores and reads back a ${label} body given as bytes`, () =>
          withStore(async (store) => {
            const key = randomKey("shards");
            const body = randomBytes(size);
            assert.deepEqual(await store.putIfAbsent(key, body), { inserted: true });
            await assertStored(store, key, body);
          }));
      }

      it("stores a copy of a local file and leaves the file alone", () =>
        withStore(async (store) => {
          const dir = await mkdtemp(join(tmpdir(), "castor-blob-contract-"));
          try {
            const path = join(dir, "upload.bin");
            const body = randomBytes(2 * MiB + 3);
            await writeFile(path, body);
            const key = randomKey();
            assert.deepEqual(await store.putFileIfAbsent(key, path), { inserted: true });
            await assertStored(store, key, body);
            assert.deepEqual(await store.putFileIfAbsent(key, path), { inserted: false });
            // The copy is independent: changing the source afterwards does not change the object.
            await writeFile(path, randomBytes(10));
            await assertStored(store, key, body);
          } finally {
            await rm(dir, { recursive: true, force: true });
          }
        }));

      it("rejects a missing local file and stores nothing", () =>
        withStore(async (store) => {
          const key = randomKey();
          await assert.rejects(store.putFileIfAbsent(key, join(tmpdir(), `castor-missing-${randomBytes(8).toString("hex")}`)));
          await assertAbsent(store, key);
        }));
    });

    describe("put-if-absent", () => {
      it("keeps the first body and reports the second put as not inserted", () =>
        withStore(async (store) => {
          const key = randomKey();
          const first = randomBytes(4096);
          assert.deepEqual(await store.putIfAbsent(key, first), { inserted: true });
          const second = slowStream(randomBytes(4096));
          assert.deepEqual(await store.putIfAbsent(key, second), { inserted: false });
          assert.ok(second.destroyed || second.readableEnded, "the second body must be consumed or destroyed");
          await assertStored(store, key, first);
        }));

      it("lets exactly one of 16 concurrent puts of one key insert, leaving the content intact", () =>
        withStore(async (store) => {
          const key = randomKey();
          const body = randomBytes(MiB + 5);
          const sources = Array.from({ length: 16 }, () => slowStream(body, 32 * 1024));
          const outcomes = await Promise.all(sources.map((source) => store.putIfAbsent(key, source)));
          assert.equal(outcomes.filter((outcome) => outcome.inserted).length, 1);
          for (const source of sources) assert.ok(source.destroyed || source.readableEnded);
          await assertStored(store, key, body);
          assert.deepEqual(await collect(store.list()), [key]);
        }));

      it("lets exactly one of 8 concurrent staged commits of one key insert", () =>
        withStore(async (store) => {
          const key = randomKey("shards");
          const body = randomBytes(200_000);
          const staged = await Promise.all(Array.from({ length: 8 }, () => store.beginPut(key)));
          await Promise.all(staged.map((put) => pipeline(slowStream(body, 16 * 1024), put.writable)));
          const outcomes = await Promise.all(staged.map((put) => put.commit()));
          assert.equal(outcomes.filter((outcome) => outcome.inserted).length, 1);
          await assertStored(store, key, body);
        }));

      it("stores nothing when the source stream fails, and a retry then succeeds", () =>
        withStore(async (store) => {
          const key = randomKey();
          const failure = new Error("client went away");
          await assert.rejects(store.putIfAbsent(key, failingStream(randomBytes(100_000), failure)), (err) => err === failure);
          await assertAbsent(store, key);
          const body = randomBytes(100_000);
          assert.deepEqual(await store.putIfAbsent(key, body), { inserted: true });
          await assertStored(store, key, body);
        }));

      it("stores nothing when the source stream is destroyed mid-way", () =>
        withStore(async (store) => {
          const key = randomKey();
          const source = new Readable({ read() {} });
          source.push(randomBytes(10_000));
          const put = store.putIfAbsent(key, source);
          setImmediate(() => source.destroy());
          await assert.rejects(put);
          await assertAbsent(store, key);
        }));
    });

    describe("staged put", () => {
      it("is invisible until committed, then visible whole", () =>
        withStore(async (store) => {
          const key = randomKey();
          const body = randomBytes(3 * MiB);
          const staged = await store.beginPut(key);
          assert.equal(staged.key, key);
          await pipeline(slowStream(body, 256 * 1024), staged.writable);
          await assertAbsent(store, key);
          assert.deepEqual(await collect(store.list()), []);
          assert.deepEqual(await staged.commit(), { inserted: true });
          await assertStored(store, key, body);
          await staged.abort(); // the `finally` of the write path: a no-op once committed
          await assertStored(store, key, body);
        }));

      it("leaves nothing when aborted, before or after the body ended", () =>
        withStore(async (store) => {
          const key = randomKey();
          const midway = await store.beginPut(key);
          midway.writable.write(randomBytes(50_000));
          await midway.abort();
          await midway.abort();
          await assertAbsent(store, key);

          const ended = await store.beginPut(key);
          await pipeline(slowStream(randomBytes(50_000)), ended.writable);
          await ended.abort();
          await assertAbsent(store, key);
          await assert.rejects(ended.commit(), errorWithCode("invalid_state"));
          await assertAbsent(store, key);
        }));

      it("refuses to commit a body that was not ended, and leaves nothing", () =>
        withStore(async (store) => {
          const key = randomKey();
          const staged = await store.beginPut(key);
          staged.writable.write(randomBytes(1000));
          await assert.rejects(staged.commit(), errorWithCode("invalid_state"));
          await staged.abort();
          await assertAbsent(store, key);
        }));

      it("refuses a second commit", () =>
        withStore(async (store) => {
          const key = randomKey();
          const body = randomBytes(1000);
          const staged = await store.beginPut(key);
          staged.writable.end(body);
          assert.deepEqual(await staged.commit(), { inserted: true });
          await assert.rejects(staged.commit(), errorWithCode("invalid_state"));
          await assertStored(store, key, body);
        }));

      it("rejects the commit when the writable failed, and leaves nothing", () =>
        withStore(async (store) => {
          const key = randomKey();
          const staged = await store.beginPut(key);
          const failure = new Error("xorb hash mismatch");
          await assert.rejects(pipeline(failingStream(randomBytes(20_000), failure), staged.writable));
          await assert.rejects(staged.commit());
          await staged.abort();
          await assertAbsent(store, key);
        }));

      it("commits as not inserted when the key appeared meanwhile, keeping the first body", () =>
        withStore(async (store) => {
          const key = randomKey();
          const staged = await store.beginPut(key);
          staged.writable.end(randomBytes(5000));
          const first = randomBytes(6000);
          assert.deepEqual(await store.putIfAbsent(key, first), { inserted: true });
          assert.deepEqual(await staged.commit(), { inserted: false });
          await assertStored(store, key, first);
        }));

      it("stores an empty staged body", () =>
        withStore(async (store) => {
          const key = randomKey("shards");
          const staged = await store.beginPut(key);
          staged.writable.end();
          assert.deepEqual(await staged.commit(), { inserted: true });
          await assertStored(store, key, new Uint8Array(0));
        }));
    });

    describe("ranged reads", () => {
      const size = 300_001;
      async function withObject(body: (store: BlobStore, key: BlobKey, bytes: Buffer) => Promise<void>) {
        await withStore(async (store) => {
          const key = randomKey();
          const bytes = randomBytes(size);
          await store.putIfAbsent(key, bytes);
          await body(store, key, bytes);
        });
      }
      const cases: [string, number, number][] = [
        ["first byte", 0, 1],
        ["last byte", size - 1, 1],
        ["middle", 12_345, 200_000],
        ["whole object", 0, size],
        ["tail", 100_000, size - 100_000],
      ];
      for (const [label, offset, length] of cases) {
        it(`reads the ${label}`, () =>
          withObject(async (store, key, bytes) => {
            const got = await readAll(await store.read(key, { offset, length }));
            assert.equal(got.length, length);
            assert.ok(got.equals(bytes.subarray(offset, offset + length)));
          }));
      }

      it("refuses ranges past the end instead of reading short", () =>
        withObject(async (store, key) => {
          for (const span of [
            { offset: 0, length: size + 1 },
            { offset: size - 1, length: 2 },
            { offset: size, length: 1 },
            { offset: size + 10, length: 5 },
            { offset: Number.MAX_SAFE_INTEGER - 1, length: 1 },
          ]) {
            await assert.rejects(store.read(key, span), errorWithCode("range_not_satisfiable"), JSON.stringify(span));
          }
        }));

      it("refuses malformed ranges", () =>
        withObject(async (store, key) => {
          for (const span of [
            { offset: -1, length: 1 },
            { offset: 0, length: 0 },
            { offset: 1.5, length: 1 },
            { offset: 0, length: Number.NaN },
            { offset: 0, length: 2 ** 53 },
          ]) {
            await assert.rejects(store.read(key, span), errorWithCode("bad_range"), JSON.stringify(span));
          }
        }));

      it("refuses any range of an empty object, yet reads it whole", () =>
        withStore(async (store) => {
          const key = randomKey();
          await store.putIfAbsent(key, new Uint8Array(0));
          await assert.rejects(store.read(key, { offset: 0, length: 1 }), errorWithCode("range_not_satisfiable"));
          assert.equal((await readAll(await store.read(key))).length, 0);
        }));

      it("reports a missing object as not_found, with or without a range", () =>
        withStore(async (store) => {
          const key = randomKey();
          await assert.rejects(store.read(key), errorWithCode("not_found"));
          await assert.rejects(store.read(key, { offset: 0, length: 1 }), errorWithCode("not_found"));
        }));
    });

    describe(`span reads (${capabilities.spanReads ? "offered" : "not offered"})`, () => {
      it("offers openSpan exactly when it says it does", () =>
        withStore(async (store) => {
          assert.equal(typeof store.openSpan === "function", capabilities.spanReads === true);
        }));

      if (!capabilities.spanReads) return;
      const size = 300_001;
      it("reads every span as read() reads it, into a buffer of any size", () =>
        withStore(async (store) => {
          const key = randomKey();
          const bytes = randomBytes(size);
          await store.putIfAbsent(key, bytes);
          for (const [offset, length] of [
            [0, 1],
            [size - 1, 1],
            [12_345, 200_000],
            [0, size],
          ]) {
            for (const bufferBytes of [1, 4096, 65_537, size + 10]) {
              if (bufferBytes === 1 && length > 1) continue; // a byte at a time: only for the short spans
              const reader = await store.openSpan!(key, { offset, length });
              try {
                assert.equal(reader.length, length);
                const got = await readSpan(reader, bufferBytes);
                assert.ok(got.equals(bytes.subarray(offset, offset + length)), `span ${offset}+${length} read with a ${bufferBytes}-byte buffer`);
                assert.equal(await reader.read(Buffer.alloc(10), length), 0, "reading from the span's end gives 0");
              } finally {
                await reader.close();
              }
            }
          }
        }));

      it("refuses what read() refuses, with the same codes", () =>
        withStore(async (store) => {
          const key = randomKey();
          await assert.rejects(store.openSpan!(key, { offset: 0, length: 1 }), errorWithCode("not_found"));
          await store.putIfAbsent(key, randomBytes(10));
          await assert.rejects(store.openSpan!(key, { offset: 5, length: 6 }), errorWithCode("range_not_satisfiable"));
          await assert.rejects(store.openSpan!(key, { offset: 0, length: 0 }), errorWithCode("bad_range"));
        }));
    });

    describe(`range presigning (${capabilities.rangePresigning ? "offered" : "not offered"})`, () => {
      it("offers createRangePresigner exactly when it says it does", () =>
        withStore(async (store) => {
          assert.equal(typeof store.createRangePresigner === "function", capabilities.rangePresigning === true);
        }));

      if (!capabilities.rangePresigning) return;
      it("serves exactly the presigned range, and refuses the URL with any other Range or none", () =>
        withStore(async (store) => {
          const key = randomKey();
          const body = randomBytes(10_000);
          await store.putIfAbsent(key, body);
          const presigner = await store.createRangePresigner!({ ttlSeconds: 60 });
          await presigner.refresh();
          const span = { offset: 1000, length: 2345 };
          const url = presigner.presign(key, span);

          const ranged = await fetch(url, { headers: { Range: rangeHeaderOf(span) } });
          assert.equal(ranged.status, 206);
          assert.equal(ranged.headers.get("content-range"), `bytes 1000-3344/10000`);
          assert.ok(Buffer.from(await ranged.arrayBuffer()).equals(body.subarray(1000, 3345)));

          for (const headers of [{ Range: "bytes=0-9999" }, { Range: "bytes=1000-3345" }, {}] as Record<string, string>[]) {
            const refused = await fetch(url, { headers });
            assert.equal(refused.status, 403, `Range ${JSON.stringify(headers)} must be refused`);
            await refused.arrayBuffer();
          }
          const otherSpan = { offset: 0, length: 1 };
          const shard = blobKey("shards", randomBytes(32));
          await store.putIfAbsent(shard, body);
          const shardBytes = await fetch(presigner.presign(shard, otherSpan), { headers: { Range: rangeHeaderOf(otherSpan) } });
          assert.equal(shardBytes.status, 206, "every kind of object can be presigned");
          assert.ok(Buffer.from(await shardBytes.arrayBuffer()).equals(body.subarray(0, 1)));
        }));

      it("makes URLs that stop working when their lifetime runs out", () =>
        withStore(async (store) => {
          const key = randomKey();
          await store.putIfAbsent(key, randomBytes(100));
          const span = { offset: 10, length: 20 };
          // Signed 10 s ago (the presigner's clock), checked by the backend on its own clock:
          // a 1-second URL has run out, a 60-second one signed at the same moment still works.
          const tenSecondsAgo = () => Date.now() - 10_000;
          const expiredUrl = (await store.createRangePresigner!({ ttlSeconds: 1, now: tenSecondsAgo })).presign(key, span);
          const expired = await fetch(expiredUrl, { headers: { Range: rangeHeaderOf(span) } });
          assert.equal(expired.status, 403, "an expired URL must be refused");
          await expired.arrayBuffer();
          const liveUrl = (await store.createRangePresigner!({ ttlSeconds: 60, now: tenSecondsAgo })).presign(key, span);
          const live = await fetch(liveUrl, { headers: { Range: rangeHeaderOf(span) } });
          assert.equal(live.status, 206, "the same signing time with time left is served");
          await live.arrayBuffer();
        }));

      it("refuses malformed spans and keys without a request", () =>
        withStore(async (store) => {
          const presigner = await store.createRangePresigner!({ ttlSeconds: 60 });
          const key = randomKey();
          assert.throws(() => presigner.presign(key, { offset: 0, length: 0 }), errorWithCode("bad_range"));
          assert.throws(() => presigner.presign(key, { offset: -1, length: 5 }), errorWithCode("bad_range"));
          assert.throws(() => presigner.presign("xorbs/../x" as BlobKey, { offset: 0, length: 1 }), errorWithCode("invalid_key"));
        }));
    });

    describe("size, exists, delete, list", () => {
      it("reports size and existence, and deletes idempotently", () =>
        withStore(async (store) => {
          const key = randomKey();
          const other = randomKey();
          await assertAbsent(store, key);
          await store.putIfAbsent(key, randomBytes(777));
          await store.putIfAbsent(other, randomBytes(3));
          assert.equal(await store.size(key), 777);
          assert.equal(await store.exists(key), true);
          await store.delete(key);
          await assertAbsent(store, key);
          await store.delete(key);
          await store.delete(randomKey());
          assert.equal(await store.size(other), 3, "deleting one key must not touch another");
          const again = randomBytes(10);
          assert.deepEqual(await store.putIfAbsent(key, again), { inserted: true });
          await assertStored(store, key, again);
        }));

      it("lists by prefix in ascending order", () =>
        withStore(async (store) => {
          const xorbs = [keyStartingWith("xorbs", "ab01"), keyStartingWith("xorbs", "ab02"), keyStartingWith("xorbs", "ac"), keyStartingWith("xorbs", "0f")];
          const shards = [keyStartingWith("shards", "ab01"), keyStartingWith("shards", "ff")];
          for (const key of [...xorbs, ...shards]) await store.putIfAbsent(key, randomBytes(10));
          const sorted = (keys: BlobKey[]) => [...keys].sort();

          assert.deepEqual(await collect(store.list()), sorted([...xorbs, ...shards]));
          assert.deepEqual(await collect(store.list("")), sorted([...xorbs, ...shards]));
          assert.deepEqual(await collect(store.list("xorbs/")), sorted(xorbs));
          assert.deepEqual(await collect(store.list("xo")), sorted(xorbs));
          assert.deepEqual(await collect(store.list("shards/")), sorted(shards));
          assert.deepEqual(await collect(store.list("xorbs/a")), sorted(xorbs.slice(0, 3)));
          assert.deepEqual(await collect(store.list("xorbs/ab")), sorted(xorbs.slice(0, 2)));
          assert.deepEqual(await collect(store.list("xorbs/ab0")), sorted(xorbs.slice(0, 2)));
          assert.deepEqual(await collect(store.list("xorbs/ab01")), [xorbs[0]]);
          assert.deepEqual(await collect(store.list(xorbs[1])), [xorbs[1]]);
          assert.deepEqual(await collect(store.list("xorbs/e")), []);

          await store.delete(xorbs[0]);
          assert.deepEqual(await collect(store.list("xorbs/ab")), [xorbs[1]]);
        }));

      it("lists nothing in an empty store", () =>
        withStore(async (store) => {
          assert.deepEqual(await collect(store.list()), []);
        }));
    });

    describe("keys", () => {
      const badKeys = [
        "",
        "xorbs",
        "xorbs/",
        `xorbs/${"a".repeat(63)}`,
        `xorbs/${"a".repeat(65)}`,
        `xorbs/${"A".repeat(64)}`,
        `xorbs/${"g".repeat(64)}`,
        `blobs/${"a".repeat(64)}`,
        `tmp/${"a".repeat(64)}`,
        `/xorbs/${"a".repeat(64)}`,
        `xorbs//${"a".repeat(64)}`,
        `xorbs/../${"a".repeat(64)}`,
        `../xorbs/${"a".repeat(64)}`,
        "../../etc/passwd",
        "/etc/passwd",
        `xorbs\\${"a".repeat(64)}`,
        `xorbs/${"a".repeat(64)}\0`,
        `xorbs/${"a".repeat(64)}\n`,
        `xorbs/${"a".repeat(64)}/..`,
        `./xorbs/${"a".repeat(64)}`,
      ];

      it("rejects invalid keys in every operation", () =>
        withStore(async (store) => {
          for (const text of badKeys) {
            const key = text as BlobKey; // what an unchecked caller could pass at runtime
            const label = JSON.stringify(text);
            const source = slowStream(randomBytes(10));
            await assert.rejects(store.putIfAbsent(key, source), errorWithCode("invalid_key"), label);
            assert.ok(source.destroyed, `put with bad key ${label} must destroy its body`);
            await assert.rejects(store.putIfAbsent(key, randomBytes(10)), errorWithCode("invalid_key"), label);
            await assert.rejects(store.putFileIfAbsent(key, "/etc/hostname"), errorWithCode("invalid_key"), label);
            await assert.rejects(store.beginPut(key), errorWithCode("invalid_key"), label);
            await assert.rejects(store.read(key), errorWithCode("invalid_key"), label);
            await assert.rejects(store.read(key, { offset: 0, length: 1 }), errorWithCode("invalid_key"), label);
            await assert.rejects(store.size(key), errorWithCode("invalid_key"), label);
            await assert.rejects(store.exists(key), errorWithCode("invalid_key"), label);
            await assert.rejects(store.delete(key), errorWithCode("invalid_key"), label);
          }
          assert.deepEqual(await collect(store.list()), []);
        }));

      it("rejects list prefixes that no key could start with", () =>
        withStore(async (store) => {
          for (const prefix of ["../", "/", "/xorbs/", "xorb/", "xorbs/../", "xorbs/A", "xorbs/a/", "tmp/", "xorbs/\0", `xorbs/${"a".repeat(65)}`]) {
            await assert.rejects(async () => collect(store.list(prefix)), errorWithCode("invalid_key"), JSON.stringify(prefix));
          }
        }));
    });

    describe("sweepTemp", () => {
      it("spares a staged put younger than olderThanMs", () =>
        withStore(async (store) => {
          const key = randomKey();
          const body = randomBytes(10_000);
          const staged = await store.beginPut(key);
          staged.writable.write(body.subarray(0, 5000));
          await store.sweepTemp({ olderThanMs: 60 * 60 * 1000 });
          staged.writable.end(body.subarray(5000));
          assert.deepEqual(await staged.commit(), { inserted: true });
          await assertStored(store, key, body);
        }));

      it("never removes published objects", () =>
        withStore(async (store) => {
          const key = randomKey();
          const body = randomBytes(100);
          await store.putIfAbsent(key, body);
          await store.sweepTemp();
          await assertStored(store, key, body);
        }));
    });
  });
}
