/**
 * The 32-byte Xet hash, its string form, and every hash function of the protocol
 * (XET-PROTOCOL.md §2–§3): chunk hash, merkle internal node and aggregation, xorb hash,
 * file hash, term verification ("range") hash, keyed chunk hash, and the global-dedup rule.
 *
 * All are BLAKE3 in keyed mode. `@napi-rs/blake-hash` is native; one keyed hasher per fixed
 * key is created once and `reset()` between uses, which FACTS.md measured at twice the speed of
 * a fresh hasher per call.
 */
import { Blake3Hasher } from "@napi-rs/blake-hash";
import { FormatError } from "./errors.js";

/** A hash is always its 32 raw bytes; the string form exists only at the edges (URLs, JSON). */
export type Hash = Uint8Array;

export const HASH_BYTES = 32;
export const ZERO_HASH: Hash = new Uint8Array(HASH_BYTES);

export const DATA_KEY = Buffer.from("6697f5775b9550de3135cbaca597181c9de421109beb2b58b4d0b04b93adf229", "hex");
export const INTERNAL_NODE_KEY = Buffer.from("017ec5c7a5472996fd946666b48a02e65ddd536f37c76dd2f86352e64a53713f", "hex");
export const VERIFICATION_KEY = Buffer.from("7f1857d6ce56ed66127ff913e7a5c3f3a4cd26d5b5db49e64124987f28fb94c3", "hex");

/** Clients query global dedup for chunks whose last 64-bit word is ≡ 0 mod this (§7.1). */
export const GLOBAL_DEDUP_MODULUS = 1024n;

const HEX_RE = /^[0-9a-f]{64}$/;
const HEX_DIGITS = "0123456789abcdef";

/**
 * String form: four 8-byte groups, each read as a little-endian u64 and printed as 16 hex
 * digits — i.e. every group's bytes reversed, then hex-dumped (§2).
 */
export function hashToHex(hash: Hash): string {
  if (hash.length !== HASH_BYTES) throw new RangeError(`a hash has ${HASH_BYTES} bytes, got ${hash.length}`);
  let out = "";
  for (let group = 0; group < 4; group++) {
    for (let i = 7; i >= 0; i--) {
      const b = hash[group * 8 + i];
      out += HEX_DIGITS[b >> 4] + HEX_DIGITS[b & 15];
    }
  }
  return out;
}

export function isHashHex(text: string): boolean {
  return HEX_RE.test(text);
}

/** Parses the string form; anything but exactly 64 lowercase hex digits is a `bad_hash`. */
export function hashFromHex(text: string): Hash {
  if (typeof text !== "string" || !HEX_RE.test(text)) {
    throw new FormatError("bad_hash", "a hash must be exactly 64 lowercase hexadecimal characters");
  }
  const out = new Uint8Array(HASH_BYTES);
  for (let group = 0; group < 4; group++) {
    for (let i = 0; i < 8; i++) {
      const at = group * 16 + (7 - i) * 2;
      out[group * 8 + i] = parseInt(text.slice(at, at + 2), 16);
    }
  }
  return out;
}

/** Raw bytes written as plain hex (not the string form) — used for keys and debugging. */
export function bytesToPlainHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}

export function hashEquals(a: Hash, b: Hash): boolean {
  if (a.length !== HASH_BYTES || b.length !== HASH_BYTES) return false;
  for (let i = 0; i < HASH_BYTES; i++) if (a[i] !== b[i]) return false;
  return true;
}

export function isZeroHash(hash: Hash): boolean {
  for (let i = 0; i < HASH_BYTES; i++) if (hash[i] !== 0) return false;
  return true;
}

/** Bytes 24..31 as a little-endian u64 (= the last 16 characters of the string form). */
export function lastWord(hash: Hash): bigint {
  return Buffer.from(hash.buffer, hash.byteOffset, HASH_BYTES).readBigUInt64LE(24);
}

/** Bytes 0..7 as a little-endian u64: the "truncated hash" of shard lookup tables. */
export function firstWord(hash: Hash): bigint {
  return Buffer.from(hash.buffer, hash.byteOffset, HASH_BYTES).readBigUInt64LE(0);
}

/** The 1-in-1024 rule under which a chunk is tracked by global deduplication (§7.1). */
export function isGlobalDedupEligible(chunkHash: Hash): boolean {
  return lastWord(chunkHash) % GLOBAL_DEDUP_MODULUS === 0n;
}

/** A BLAKE3 keyed hasher bound to one key, reused across calls (not re-entrant). */
export class KeyedHasher {
  private readonly hasher: Blake3Hasher;
  constructor(key: Uint8Array) {
    if (key.length !== HASH_BYTES) throw new RangeError("a BLAKE3 key has 32 bytes");
    this.hasher = Blake3Hasher.newKeyed(Buffer.from(key));
  }
  /** Hash of the concatenation of `parts`. */
  hash(...parts: Uint8Array[]): Hash {
    const h = this.hasher;
    h.reset();
    // The binding is typed for Buffer; a Buffer view over the same memory costs no copy.
    for (const part of parts) h.update(Buffer.isBuffer(part) ? part : Buffer.from(part.buffer, part.byteOffset, part.byteLength));
    return new Uint8Array(h.digestBuffer());
  }
}

const dataHasher = new KeyedHasher(DATA_KEY);
const nodeHasher = new KeyedHasher(INTERNAL_NODE_KEY);
const verificationHasher = new KeyedHasher(VERIFICATION_KEY);
const zeroSaltHasher = new KeyedHasher(ZERO_HASH);

/** chunk_hash = BLAKE3_keyed(DATA_KEY, uncompressed bytes) (§3.1). */
export function chunkHash(data: Uint8Array): Hash {
  return dataHasher.hash(data);
}

/** A merkle leaf or node: a hash and the number of uncompressed bytes it covers. */
export interface MerkleEntry {
  hash: Hash;
  size: number;
}

/**
 * Internal node: BLAKE3_keyed(INTERNAL_NODE_KEY, "<hex> : <size>\n" per child) (§3.2).
 * Sizes are u64 on the wire; here they must be safe integers (2^53 bytes is 8 PiB).
 */
export function internalNodeHash(children: readonly MerkleEntry[]): MerkleEntry {
  let text = "";
  let size = 0;
  for (const child of children) {
    text += `${hashToHex(child.hash)} : ${child.size}\n`;
    size += child.size;
  }
  if (!Number.isSafeInteger(size)) throw new RangeError("merkle node size exceeds 2^53");
  return { hash: nodeHasher.hash(Buffer.from(text, "latin1")), size };
}

/**
 * Size of the next group at one level of the tree: entries 3..9 of a group end it when the
 * entry's last word ≡ 0 mod 4; a group never exceeds 9, and a tail of 1–2 entries is one group.
 */
function nextGroupSize(level: readonly MerkleEntry[], start: number): number {
  const remaining = level.length - start;
  if (remaining <= 2) return remaining;
  const limit = Math.min(9, remaining);
  for (let j = 2; j < limit; j++) {
    // last_u64 % 4 == 0 ⇔ the low two bits of byte 24 are zero.
    if ((level[start + j].hash[24] & 3) === 0) return j + 1;
  }
  return limit;
}

/** The variable-branching merkle root of §3.3; the empty list gives the zero hash. */
export function merkleRoot(leaves: readonly MerkleEntry[]): Hash {
  if (leaves.length === 0) return ZERO_HASH;
  let level: readonly MerkleEntry[] = leaves;
  while (level.length > 1) {
    const next: MerkleEntry[] = [];
    for (let i = 0; i < level.length; ) {
      const n = nextGroupSize(level, i);
      next.push(internalNodeHash(level.slice(i, i + n)));
      i += n;
    }
    level = next;
  }
  return level[0].hash;
}

/** xorb_hash = merkle root over the xorb's (chunk hash, uncompressed length) list (§3.4). */
export function xorbHash(chunks: readonly MerkleEntry[]): Hash {
  return merkleRoot(chunks);
}

/**
 * file_hash = BLAKE3_keyed(salt, root) over all chunks of the file in order; the empty file is
 * the zero hash (not the keyed hash of the zero root — the draft's mistake, §3.5).
 */
export function fileHash(chunks: readonly MerkleEntry[], salt: Uint8Array = ZERO_HASH): Hash {
  if (chunks.length === 0) return ZERO_HASH;
  const hasher = isZeroHash(salt) ? zeroSaltHasher : new KeyedHasher(salt);
  return hasher.hash(merkleRoot(chunks));
}

/** Term verification hash: BLAKE3_keyed(VERIFICATION_KEY, raw chunk hashes concatenated) (§3.6). */
export function verificationHash(chunkHashes: readonly Hash[]): Hash {
  return verificationHasher.hash(...chunkHashes);
}

/** Keyed chunk hash as it appears in dedup shards: BLAKE3_keyed(key, raw chunk hash) (§3.7). */
export function keyedChunkHash(key: Uint8Array, hash: Hash): Hash {
  return new KeyedHasher(key).hash(hash);
}
