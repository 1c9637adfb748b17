/** Loads the protocol test vectors copied from ../shared/protocol/vectors (sources kept inside). */
import { readFileSync } from "node:fs";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function loadVector(name: string): any {
  return JSON.parse(readFileSync(new URL(`../vectors/${name}`, import.meta.url), "utf8"));
}

export function fromHex(hex: string): Uint8Array {
  return new Uint8Array(Buffer.from(hex, "hex"));
}

export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

/** The splitmix64 byte stream that the chunk-hash and chunking vectors are computed over. */
export function splitmix64Bytes(seed: bigint, length: number): Uint8Array {
  const mask = (1n << 64n) - 1n;
  const out = Buffer.alloc(Math.ceil(length / 8) * 8);
  let state = seed & mask;
  for (let off = 0; off < out.length; off += 8) {
    state = (state + 0x9e3779b97f4a7c15n) & mask;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & mask;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & mask;
    z ^= z >> 31n;
    out.writeBigUInt64LE(z, off);
  }
  return new Uint8Array(out.buffer, out.byteOffset, length);
}

/** byte[i] = (i * mul + add) & 0xff — the "makeData" generator of the huggingface.js vectors. */
export function makeData(length: number, mul: number, add: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) out[i] = (i * mul + add) & 0xff;
  return out;
}

/** A small seeded generator (mulberry32) of numbers in [0, 1), for reproducible random choices in tests and benchmarks. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
