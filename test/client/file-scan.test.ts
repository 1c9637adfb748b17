/**
 * Reading a file for upload: batches of whole chunks whose concatenation is the file, cut where
 * the format's chunker cuts, each with its chunk hash; the file's SHA-256 (on this thread for
 * small files, from the worker for large ones); reused buffers never leaking old bytes.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { ChunkBatcher, ScanError, SCAN_BUFFER_BYTES, SCAN_READ_BYTES, batchChunkBytes, scanFile, type ScannedBatch } from "../../src/client/file-scan.js";
import { WORKER_DIGEST_MIN_BYTES, sha256OfFile, sha256OfFileInWorker } from "../../src/client/file-digest.js";
import { ChunkBoundaryScanner, chunkBoundaries } from "../../src/format/chunker.js";
import { HASH_BYTES, chunkHash, hashToHex } from "../../src/format/hash.js";
import { splitmix64Bytes } from "../helpers/vectors.js";
import { tempDirForFile } from "../helpers/temp-dir.js";

/** Fast deterministic bytes: splitmix64 blocks repeated with a changing byte (its BigInts are slow for MiBs). */
function fileBytes(length: number, seed: number): Uint8Array {
  const block = splitmix64Bytes(BigInt(seed), 1 << 20);
  const out = new Uint8Array(length);
  for (let at = 0, round = 0; at < length; at += block.length, round++) {
    out.set(block.subarray(0, Math.min(block.length, length - at)), at);
    out[at] ^= round; // blocks differ, so chunking does not see one block repeated
  }
  return out;
}

interface Scanned {
  ends: number[];
  hashes: string[];
  bytes: Buffer;
}

/** Every batch of a scan, copied out before its buffer is released (as the uploader does). */
async function scanAll(path: string, size: number, release = true): Promise<Scanned & { sha256: string; batches: number; buffers: Set<ArrayBufferLike> }> {
  const scan = scanFile(path, size);
  const ends: number[] = [];
  const hashes: string[] = [];
  const parts: Buffer[] = [];
  const buffers = new Set<ArrayBufferLike>();
  let offset = 0;
  let batches = 0;
  for await (const batch of scan) {
    batches++;
    buffers.add(batch.bytes.buffer);
    collect(batch, offset, ends, hashes, parts);
    offset += batchChunkBytes(batch);
    if (release) scan.release(batch);
  }
  return { ends, hashes, bytes: Buffer.concat(parts), sha256: Buffer.from(await scan.sha256()).toString("hex"), batches, buffers };
}

function collect(batch: ScannedBatch, offset: number, ends: number[], hashes: string[], parts: Buffer[]): void {
  assert.equal(batch.hashes.length, batch.ends.length * HASH_BYTES);
  let start = 0;
  batch.ends.forEach((end, i) => {
    assert.ok(end > start, "chunks are not empty");
    ends.push(offset + end);
    hashes.push(hashToHex(batch.hashes.subarray(i * HASH_BYTES, (i + 1) * HASH_BYTES)));
    parts.push(Buffer.from(batch.bytes.subarray(start, end)));
    start = end;
  });
}

function expected(data: Uint8Array): Scanned {
  const ends = chunkBoundaries(data);
  let start = 0;
  const hashes = ends.map((end) => {
    const hash = hashToHex(chunkHash(data.subarray(start, end)));
    start = end;
    return hash;
  });
  return { ends, hashes, bytes: Buffer.from(data) };
}

const work = tempDirForFile("castor-file-scan-");

describe("ChunkBatcher", () => {
  it("carries each partial chunk to the next buffer, so batches hold whole chunks that add up to the input", () => {
    const data = fileBytes(1_500_000, 3);
    // Small buffers: most reads end inside a chunk, and many batches hold no whole chunk at all.
    const batcher = new ChunkBatcher(new ChunkBoundaryScanner());
    const ends: number[] = [];
    const hashes: string[] = [];
    const parts: Buffer[] = [];
    let offset = 0;
    for (let at = 0; ; ) {
      const buffer = new Uint8Array(200_000);
      const start = batcher.begin(buffer);
      const length = Math.min(buffer.length - start, 70_001, data.length - at);
      buffer.set(data.subarray(at, at + length), start);
      at += length;
      const batch = batcher.complete(buffer, start, length, length === 0);
      collect(batch, offset, ends, hashes, parts);
      offset += batchChunkBytes(batch);
      if (length === 0) break;
    }
    assert.deepEqual({ ends, hashes, bytes: Buffer.concat(parts) }, expected(data));
  });

  it("uses the WebAssembly scanner by default, with the same cuts", () => {
    const data = fileBytes(600_000, 4);
    const batcher = new ChunkBatcher();
    const buffer = new Uint8Array(data.length + 1);
    const start = batcher.begin(buffer);
    buffer.set(data, start);
    const batch = batcher.complete(buffer, start, data.length, true);
    assert.deepEqual([...batch.ends], chunkBoundaries(data));
  });

  it("refuses a buffer too small for the carried partial chunk", () => {
    const batcher = new ChunkBatcher();
    const buffer = new Uint8Array(20_000);
    buffer.set(fileBytes(20_000, 5));
    batcher.complete(buffer, 0, buffer.length, false);
    assert.throws(() => batcher.begin(new Uint8Array(100)), RangeError);
  });
});

describe("scanFile", () => {
  for (const size of [0, 1, 8191, 8192, 300_000, SCAN_READ_BYTES + 12_345]) {
    it(`gives the chunks, hashes and SHA-256 of a ${size}-byte file (hashed on this thread)`, async () => {
      const data = fileBytes(size, size);
      const path = join(work.path, `small-${size}`);
      await writeFile(path, data);
      const got = await scanAll(path, size);
      assert.deepEqual({ ends: got.ends, hashes: got.hashes, bytes: got.bytes }, expected(data));
      assert.equal(got.sha256, createHash("sha256").update(data).digest("hex"));
    });
  }

  it("reuses released buffers without mixing their old bytes into new batches, and hashes a large file on the worker", async () => {
    const size = WORKER_DIGEST_MIN_BYTES + 3 * SCAN_READ_BYTES + 777;
    const data = fileBytes(size, 9);
    const path = join(work.path, "large");
    await writeFile(path, data);
    const released = await scanAll(path, size, true);
    assert.ok(released.batches >= 8);
    assert.ok(released.buffers.size < released.batches, "released buffers were reused");
    for (const buffer of released.buffers) assert.equal(buffer.byteLength, SCAN_BUFFER_BYTES);
    const want = expected(data);
    assert.deepEqual(released.ends, want.ends);
    assert.deepEqual(released.hashes, want.hashes);
    assert.ok(released.bytes.equals(want.bytes));
    assert.equal(released.sha256, createHash("sha256").update(data).digest("hex"));

    const kept = await scanAll(path, size, false);
    assert.equal(kept.buffers.size, kept.batches, "unreleased buffers are never handed out twice");
    assert.deepEqual(kept.hashes, want.hashes);
  });

  it("reports a missing file or a directory as a ScanError with the system code", async () => {
    for (const [path, code] of [
      [join(work.path, "missing"), "ENOENT"],
      [work.path, "EISDIR"],
    ] as const) {
      await assert.rejects(
        (async () => {
          for await (const batch of scanFile(path, 0)) assert.ok(batch);
        })(),
        (error: unknown) => error instanceof ScanError && error.code === code,
      );
    }
  });
});

describe("file digests", () => {
  it("computes the same SHA-256 on the worker and on this thread", async () => {
    const data = fileBytes(3_000_000, 12);
    const path = join(work.path, "digest");
    await writeFile(path, data);
    const want = createHash("sha256").update(data).digest("hex");
    assert.equal(Buffer.from(await sha256OfFileInWorker(path).digest).toString("hex"), want);
    assert.equal(Buffer.from(await sha256OfFile(path)).toString("hex"), want);
  });

  it("falls back to this thread when the worker cannot read the file, which then reports the I/O error", async () => {
    await assert.rejects(sha256OfFileInWorker(join(work.path, "nope")).digest, (error: unknown) => (error as NodeJS.ErrnoException).code === "ENOENT");
  });

  it("stops the worker when cancelled", async () => {
    const path = join(work.path, "digest-cancel");
    await writeFile(path, fileBytes(2_000_000, 13));
    // The worker is an OS thread of this process, listed in /proc/self/task until it has
    // exited: a cancel() that only let go of it (unref, dropped listeners) leaves it there.
    const threads = () => readdirSync("/proc/self/task").length;
    const ports = () => process.getActiveResourcesInfo().filter((kind) => kind === "MessagePort").length;
    const [threadsBefore, portsBefore] = [threads(), ports()];
    const pending = sha256OfFileInWorker(path);
    assert.equal(threads(), threadsBefore + 1, "the worker thread is running");
    assert.equal(ports(), portsBefore + 1, "its port keeps the process alive");
    await pending.cancel();
    assert.equal(threads(), threadsBefore, "the worker thread has exited once cancel() resolves");
    assert.equal(ports(), portsBefore, "the worker's port is gone");
    // The worker has exited and delivered all its events: a digest still pending now never settles.
    const outcome = await Promise.race([pending.digest.then(() => "settled"), new Promise((resolve) => setImmediate(() => resolve("pending")))]);
    assert.equal(outcome, "pending", "a cancelled digest never settles");
  });
});
