import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { DistinctKeys } from "../../src/cas/distinct-keys.js";

describe("DistinctKeys", () => {
  it("keeps each key once, in the order first added, through many growths", () => {
    const keys = new DistinctKeys(64, 4);
    const unique = randomBytes(20_000 * 64);
    for (let i = 0; i < 20_000; i++) assert.equal(keys.add(unique, i * 64), i);
    // Every key again, in another order: each is found where it was first put.
    for (let i = 19_999; i >= 0; i -= 7) {
      assert.equal(keys.add(unique, i * 64), i);
      assert.equal(keys.indexOf(unique, i * 64), i);
    }
    assert.equal(keys.count, 20_000);
    assert.ok(Buffer.from(keys.packed()).equals(unique), "the packed keys are the distinct keys in order");
    assert.equal(keys.indexOf(randomBytes(64), 0), -1);
  });

  it("reads keys at any offset of any buffer, and tells keys apart that differ in one byte only", () => {
    const keys = new DistinctKeys(32);
    const base = randomBytes(32);
    const shifted = Buffer.concat([Buffer.alloc(5), base]);
    assert.equal(keys.add(base, 0), 0);
    assert.equal(keys.add(shifted, 5), 0, "the same key at another offset");
    for (let byte = 0; byte < 32; byte++) {
      const other = Buffer.from(base);
      other[byte] ^= 1;
      assert.equal(keys.indexOf(other, 0), -1);
      assert.equal(keys.add(other, 0), byte + 1);
    }
    assert.equal(keys.count, 33);
  });
});
