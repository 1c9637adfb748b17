/**
 * A set of fixed-length byte keys (file hashes, dedup entries) kept packed back to back in
 * insertion order, with an open-addressing table of their indexes. A shard registration keeps
 * one key per file of the shard; as strings in a `Set` they cost ~110 bytes each, 37 MB for a
 * shard of 340,000 files. Here a key costs its own bytes plus 4–8 bytes of table, and the keys
 * array is itself the packed list the registration stores.
 *
 * Keys come from the uploader, so their slots must not be predictable: every word of a key is
 * whitened with a secret seed drawn once per process before it is mixed, so keys chosen to
 * collide (which would make every insert scan the table) cannot be built without the seed. And
 * whatever happens, a lookup visits at most MAX_PROBES slots: past that it throws
 * `TooManyCollisionsError` instead of scanning on (random keys at this load reach ~10).
 *
 * Hand-written: no maintained library keeps byte keys packed in typed arrays like this.
 */
import { randomBytes } from "node:crypto";

const SEED = new Int32Array(randomBytes(8).buffer);
/** Slots one lookup may visit; random keys in a table at most half full need a few. */
const MAX_PROBES = 256;

/** Keys that collide as random keys never do: chosen to, by someone who guessed the seed. */
export class TooManyCollisionsError extends Error {
  override readonly name = "TooManyCollisionsError";
}

export class DistinctKeys {
  /** Keys back to back, `keyBytes` each; key `i` at `i · keyBytes`. Grows: read it after adding. */
  keys: Uint8Array;
  /** Keys added. */
  count = 0;
  /** Slots holding a key's index + 1; 0 is an empty slot. At most half full. */
  private slots: Int32Array;

  constructor(
    readonly keyBytes: number,
    expectedKeys = 16,
  ) {
    if (!Number.isInteger(keyBytes) || keyBytes <= 0 || keyBytes % 4 !== 0) throw new RangeError(`keys are a positive multiple of 4 bytes, got ${keyBytes}`);
    this.keys = new Uint8Array(Math.max(1, expectedKeys) * keyBytes);
    let slots = 16;
    while (slots < 2 * expectedKeys) slots *= 2;
    this.slots = new Int32Array(slots);
  }

  /** The index of the key `bytes[at .. at + keyBytes)`, or -1 when it was never added. */
  indexOf(bytes: Uint8Array, at: number): number {
    const entry = this.slots[this.find(bytes, at)];
    return entry - 1;
  }

  /** Adds the key `bytes[at .. at + keyBytes)` when absent; returns its index either way. */
  add(bytes: Uint8Array, at: number): number {
    const slot = this.find(bytes, at);
    if (this.slots[slot] !== 0) return this.slots[slot] - 1;
    const index = this.count++;
    if (this.keys.length < this.count * this.keyBytes) {
      const grown = new Uint8Array(this.keys.length * 2);
      grown.set(this.keys);
      this.keys = grown;
    }
    this.keys.set(bytes.subarray(at, at + this.keyBytes), index * this.keyBytes);
    this.slots[slot] = index + 1;
    if (2 * this.count > this.slots.length) this.grow();
    return index;
  }

  /** The keys added, exactly (a view). */
  packed(): Uint8Array {
    return this.keys.subarray(0, this.count * this.keyBytes);
  }

  /** The slot holding the key, or the empty slot where it would go. */
  private find(bytes: Uint8Array, at: number): number {
    const mask = this.slots.length - 1;
    let slot = this.slotOf(bytes, at) & mask;
    for (let probes = 0; probes < MAX_PROBES; probes++, slot = (slot + 1) & mask) {
      const entry = this.slots[slot];
      if (entry === 0 || this.keyEquals(entry - 1, bytes, at)) return slot;
    }
    throw new TooManyCollisionsError(`more than ${MAX_PROBES} keys collide in one place: the keys were chosen to collide`);
  }

  private grow(): void {
    const slots = new Int32Array(this.slots.length * 2);
    const mask = slots.length - 1;
    for (let index = 0; index < this.count; index++) {
      let slot = this.slotOf(this.keys, index * this.keyBytes) & mask;
      while (slots[slot] !== 0) slot = (slot + 1) & mask;
      slots[slot] = index + 1;
    }
    this.slots = slots;
  }

  private keyEquals(index: number, bytes: Uint8Array, at: number): boolean {
    const keys = this.keys;
    const from = index * this.keyBytes;
    for (let i = 0; i < this.keyBytes; i++) if (keys[from + i] !== bytes[at + i]) return false;
    return true;
  }

  /** A seeded mix of every 32-bit word of the key (murmur3's multiply-rotate steps and finalizer). */
  private slotOf(bytes: Uint8Array, at: number): number {
    let h = SEED[0];
    for (let i = at; i < at + this.keyBytes; i += 4) {
      let k = (bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24)) ^ SEED[1];
      k = Math.imul(k, 0xcc9e2d51);
      k = (k << 15) | (k >>> 17);
      k = Math.imul(k, 0x1b873593);
      h ^= k;
      h = (h << 13) | (h >>> 19);
      h = (Math.imul(h, 5) + 0xe6546b64) | 0;
    }
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    return h >>> 0;
  }
}
