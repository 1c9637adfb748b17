import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { BufferPool } from "../../src/http/buffer-pool.js";

describe("BufferPool", () => {
  it("lends buffers of its size and reuses those given back", () => {
    const pool = new BufferPool(1024, 2);
    const a = pool.take();
    const b = pool.take();
    assert.equal(a.length, 1024);
    assert.notEqual(a.buffer, b.buffer, "two buffers taken at once are distinct");
    pool.give(a);
    assert.equal(pool.idleCount, 1);
    assert.equal(pool.take(), a);
    assert.equal(pool.idleCount, 0);
  });

  it("keeps at most maxIdle buffers and ignores buffers of another size", () => {
    const pool = new BufferPool(16, 2);
    const taken = [pool.take(), pool.take(), pool.take()];
    for (const buffer of taken) pool.give(buffer);
    assert.equal(pool.idleCount, 2);
    pool.take();
    pool.give(Buffer.alloc(8));
    assert.equal(pool.idleCount, 1);
    const empty = new BufferPool(16, 0);
    empty.give(empty.take());
    assert.equal(empty.idleCount, 0);
  });

  it("refuses nonsensical sizes", () => {
    assert.throws(() => new BufferPool(0, 1), RangeError);
    assert.throws(() => new BufferPool(1.5, 1), RangeError);
    assert.throws(() => new BufferPool(16, -1), RangeError);
  });
});
