/**
 * Upstream xorb ranges read while a fill fetches them (src/mirror/span-taps.ts): bytes as they
 * arrive, the last one only once the range is proven, a failure cutting the stream, and only
 * ranges within a tap's range found.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { describe, it } from "node:test";
import { byteRange } from "../../src/format/ranges.js";
import { SpanTaps } from "../../src/mirror/span-taps.js";

const XORB = "ab".repeat(32);

/** Reads what the stream has now, without waiting for more. */
function readNow(stream: Readable): Buffer {
  const parts: Buffer[] = [];
  for (let piece: Buffer | null = stream.read(); piece !== null; piece = stream.read()) parts.push(piece);
  return Buffer.concat(parts);
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("ranges read while a fill fetches them", () => {
  it("stream as the bytes arrive, the last one once the range is proven", async () => {
    const taps = new SpanTaps();
    const buffer = new Uint8Array(1000);
    const bytes = randomBytes(1000);
    // The fill's range is bytes 5000..5999 of the upstream xorb.
    const tap = taps.open(XORB, 5000, 5999, buffer);
    const found = taps.read(XORB, byteRange(5100, 5499));
    assert.ok(found !== null);
    assert.equal(found.length, 400);
    const stream = found.body;
    let ended = false;
    found.body.once("end", () => (ended = true));

    buffer.set(bytes.subarray(0, 300));
    tap.progress(300);
    await tick();
    assert.ok(readNow(stream).equals(bytes.subarray(100, 300)), "what has arrived");
    buffer.set(bytes.subarray(300, 800), 300);
    tap.progress(800);
    await tick();
    assert.ok(readNow(stream).equals(bytes.subarray(300, 499)), "all but the last byte");
    assert.equal(ended, false);
    buffer.set(bytes.subarray(800), 800);
    tap.progress(1000);
    tap.verified();
    await tick();
    assert.ok(readNow(stream).equals(bytes.subarray(499, 500)), "and the last once proven");
    await tick();
    assert.equal(ended, true);
  });

  it("end a range larger than a stream's buffer, read at the client's pace", async () => {
    const taps = new SpanTaps();
    // Its last piece fills the stream's 4 MiB buffer exactly.
    const bytes = randomBytes(5 * 1024 * 1024);
    const tap = taps.open(XORB, 0, bytes.length - 1, bytes);
    tap.progress(bytes.length);
    tap.verified();
    const found = taps.read(XORB, byteRange(1024 * 1024, bytes.length - 1))!;
    const parts: Buffer[] = [];
    for await (const piece of found.body) {
      parts.push(piece as Buffer);
      await tick();
    }
    assert.ok(Buffer.concat(parts).equals(bytes.subarray(1024 * 1024)));
  });

  it("cut the stream when the fill fails, and find only ranges within a tap", async () => {
    const taps = new SpanTaps();
    const buffer = new Uint8Array(100);
    const tap = taps.open(XORB, 0, 99, buffer);
    assert.equal(taps.read(XORB, byteRange(50, 100)), null, "past the tap's end");
    assert.equal(taps.read("cd".repeat(32), byteRange(0, 10)), null, "another xorb");
    const found = taps.read(XORB, byteRange(0, 99))!;
    const failure = new Promise<Error>((resolve) => found.body.once("error", resolve));
    found.body.resume();
    tap.progress(100);
    tap.failed(new Error("the upstream sent bytes that do not match its tree"));
    assert.match((await failure).message, /do not match/);
    assert.equal(taps.read(XORB, byteRange(0, 10)), null, "a failed tap serves nobody");
    taps.close(tap);
    assert.equal(taps.read(XORB, byteRange(0, 10)), null);
  });
});
