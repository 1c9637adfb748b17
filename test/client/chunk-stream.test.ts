/**
 * The incremental range decoder: the same chunks and errors however the bytes arrive, chunks
 * readable as soon as their last byte is in, and waiters woken or failed accordingly.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ChunkStreamDecoder, decodeChunkStream } from "../../src/client/chunk-stream.js";
import { CastorClientError } from "../../src/client/errors.js";
import { hashToHex } from "../../src/format/index.js";
import { fromHex, loadVector } from "../helpers/vectors.js";

const xorbVector = loadVector("xorb-small.json");
const BODY = fromHex(xorbVector.body_hex);
/** Where each chunk (8-byte header + payload) ends in BODY. */
const CHUNK_ENDS: number[] = xorbVector.expected.chunks.map(
  (c: { header_offset: number; compressed_length: number }) => c.header_offset + 8 + c.compressed_length,
);
const HASHES: string[] = xorbVector.expected.chunks.map((c: { chunk_hash: string }) => c.chunk_hash);

/** Feeds BODY to a decoder in steps of `step` bytes; returns the chunk count after each step. */
function feed(step: number): { decoder: ChunkStreamDecoder; counts: number[] } {
  const buffer = new Uint8Array(BODY.length);
  const decoder = new ChunkStreamDecoder(buffer, 3, "range");
  const counts: number[] = [];
  for (let filled = 0; filled < BODY.length; ) {
    const next = Math.min(BODY.length, filled + step);
    buffer.set(BODY.subarray(filled, next), filled);
    filled = next;
    decoder.advance(filled);
    counts.push(decoder.decodedCount);
  }
  return { decoder, counts };
}

describe("ChunkStreamDecoder", () => {
  it("decodes the same chunks whatever the arrival steps, each as soon as it is complete", () => {
    assert.equal(CHUNK_ENDS.at(-1), BODY.length);
    const whole = decodeChunkStream(BODY, 3, "range");
    for (const step of [1, 7, 8, 9, 100, 294, BODY.length]) {
      const { decoder, counts } = feed(step);
      const done = decoder.finish();
      assert.deepEqual(done.hashes.map(hashToHex), HASHES, `step ${step}`);
      assert.deepEqual(
        done.chunks.map((c) => Buffer.from(c)),
        whole.chunks.map((c) => Buffer.from(c)),
      );
      assert.equal(done.uncompressedBytes, whole.uncompressedBytes);
      // Never behind: after each step, every chunk whose bytes are all in is decoded.
      counts.forEach((count, i) => {
        const filled = Math.min(BODY.length, (i + 1) * step);
        assert.equal(count, CHUNK_ENDS.filter((end) => end <= filled).length, `step ${step}, filled ${filled}`);
      });
    }
  });

  it("wakes a waiter when its chunk is decoded, and at once for chunks already there", async () => {
    const buffer = new Uint8Array(BODY.length);
    const decoder = new ChunkStreamDecoder(buffer, 3, "range");
    let woken = false;
    const waiting = decoder.whenDecoded(2).then(() => (woken = true));
    buffer.set(BODY);
    decoder.advance(1);
    await Promise.resolve();
    assert.equal(woken, false);
    decoder.advance(BODY.length);
    await waiting;
    assert.ok(decoder.decodedCount >= 2);
    await decoder.whenDecoded(1);
    decoder.finish();
    await decoder.whenDecoded(99); // finished: resolves, the caller checks the count
  });

  it("fails every waiter, present and future, with the range's error", async () => {
    const decoder = new ChunkStreamDecoder(new Uint8Array(BODY.length), 3, "range");
    const waiting = decoder.whenDecoded(1);
    decoder.fail(new Error("connection lost"));
    await assert.rejects(waiting, /connection lost/);
    await assert.rejects(decoder.whenDecoded(1), /connection lost/);
  });

  it("fails its waiters when the finished range is not whole chunks", async () => {
    const buffer = BODY.slice(0, BODY.length - 1);
    const decoder = new ChunkStreamDecoder(buffer, 3, "range");
    const waiting = decoder.whenDecoded(3);
    assert.throws(
      () => decoder.finish(),
      (error: unknown) => error instanceof CastorClientError && error.kind === "protocol",
    );
    await assert.rejects(waiting, /remain/);
  });

  it("refuses a bad header as soon as it arrives", () => {
    const buffer = Buffer.from(BODY);
    buffer[0] = 1;
    const decoder = new ChunkStreamDecoder(buffer, 3, "range");
    assert.throws(() => decoder.advance(8), /header version 1/);
  });
});
