/**
 * The 32-byte Xet hash, its string form, and every hash function of the protocol
 * (docs/protocol.md §2–§3): chunk hash, merkle internal node and aggregation, xorb hash,
 * file hash, term verification ("range") hash, keyed chunk hash, and the global-dedup rule.
 *
 * All are BLAKE3 in keyed mode. `@napi-rs/blake-hash` is native; one keyed hasher per fixed
 * key is created once and `reset()` between uses: twice the speed of a fresh hasher per call
 * (docs/design.md §8.1).
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
  // Written into a scratch buffer and read out as one flat string: appending digit by digit
  // builds a chain of 64 intermediate strings, and this runs for every term of every shard.
  const end = writeHashHex(hash, hexScratch, 0);
  return hexScratch.toString("latin1", 0, end);
}

/** Writes the string form of `hash` as ASCII into `out` at `at`; returns the offset after it. */
function writeHashHex(hash: Hash, out: Uint8Array, at: number): number {
  if (hash.length !== HASH_BYTES) throw new RangeError(`a hash has ${HASH_BYTES} bytes, got ${hash.length}`);
  return writeHashHexAt(hash, 0, out, at);
}

/**
 * Writes the string form of the hash at `bytes[from .. from + 32)` as ASCII into `out` at `at`;
 * returns the offset after it. For hashes packed back to back, without a view per hash.
 */
export function writeHashHexAt(bytes: Uint8Array, from: number, out: Uint8Array, at: number): number {
  for (let group = from; group < from + HASH_BYTES; group += 8) {
    for (let i = 7; i >= 0; i--) {
      const b = bytes[group + i];
      out[at++] = HEX_PAIRS[2 * b];
      out[at++] = HEX_PAIRS[2 * b + 1];
    }
  }
  return at;
}

/** ASCII codes of the two hex digits of every byte value. */
const HEX_PAIRS = (() => {
  const pairs = new Uint8Array(512);
  for (let b = 0; b < 256; b++) {
    pairs[2 * b] = HEX_DIGITS.charCodeAt(b >> 4);
    pairs[2 * b + 1] = HEX_DIGITS.charCodeAt(b & 15);
  }
  return pairs;
})();
const hexScratch = Buffer.alloc(2 * HASH_BYTES);

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
    this.hasher.reset();
    for (const part of parts) this.update(part);
    return this.digest();
  }
  /** Starts an incremental hash: `start()`, `update()` per part, then `digest()`. */
  start(): void {
    this.hasher.reset();
  }
  update(part: Uint8Array): void {
    // The binding is typed for Buffer; a Buffer view over the same memory costs no copy.
    this.hasher.update(Buffer.isBuffer(part) ? part : Buffer.from(part.buffer, part.byteOffset, part.byteLength));
  }
  /**
   * The digest, read from the binding as hex and decoded here: `digestBuffer()` creates a
   * native-backed Buffer per call, which costs ~3–5 µs and weighs on the garbage collector
   * (a shard registration takes two digests per file); the hex string costs under 1 µs.
   */
  digest(): Hash {
    const out = new Uint8Array(HASH_BYTES);
    this.digestInto(out, 0);
    return out;
  }
  /** `digest()` written into `out[at .. at + 32)`, for callers that keep hashes packed. */
  digestInto(out: Uint8Array, at: number): void {
    const hex = this.hasher.digest();
    for (let i = 0; i < HASH_BYTES; i++) out[at + i] = (HEX_VALUES[hex.charCodeAt(2 * i)] << 4) | HEX_VALUES[hex.charCodeAt(2 * i + 1)];
  }
}

/** Value of each lowercase hex digit by character code (the binding's hex is lowercase). */
const HEX_VALUES = (() => {
  const values = new Uint8Array(128);
  for (let i = 0; i < 16; i++) values[HEX_DIGITS.charCodeAt(i)] = i;
  return values;
})();

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

/** A group never has more children than this (§3.3). */
const MAX_GROUP = 9;
/** One child line: 64 hex digits, " : ", up to 16 decimal digits of a safe integer, "\n". */
const MAX_CHILD_LINE_BYTES = 64 + 3 + 16 + 1;
const nodeText = Buffer.alloc(MAX_GROUP * MAX_CHILD_LINE_BYTES);

/**
 * Internal node: BLAKE3_keyed(INTERNAL_NODE_KEY, "<hex> : <size>\n" per child) (§3.2).
 * Sizes are u64 on the wire; here they must be safe integers (2^53 bytes is 8 PiB).
 *
 * The text is written byte by byte into one reused buffer rather than built as a string: a
 * file hash visits every chunk of a file through here, and this is several times faster.
 */
export function internalNodeHash(children: readonly MerkleEntry[]): MerkleEntry {
  if (children.length > MAX_GROUP) throw new RangeError(`a merkle node has at most ${MAX_GROUP} children, got ${children.length}`);
  let at = 0;
  let size = 0;
  for (const child of children) {
    at = writeHashHex(child.hash, nodeText, at);
    nodeText[at++] = 0x20; // " : "
    nodeText[at++] = 0x3a;
    nodeText[at++] = 0x20;
    at += nodeText.write(String(child.size), at, "latin1");
    nodeText[at++] = 0x0a;
    size += child.size;
  }
  if (!Number.isSafeInteger(size)) throw new RangeError("merkle node size exceeds 2^53");
  return { hash: nodeHasher.hash(nodeText.subarray(0, at)), size };
}

/**
 * Whether a group that has `count` entries, the last one `last`, ends there: entries 3..9 of
 * a group end it when the entry's last word ≡ 0 mod 4, and a group never exceeds 9 (§3.3).
 */
function endsGroup(count: number, last: MerkleEntry): boolean {
  // last_u64 % 4 == 0 ⇔ the low two bits of byte 24 are zero.
  return count === MAX_GROUP || (count >= 3 && (last.hash[24] & 3) === 0);
}

/**
 * The variable-branching merkle root of §3.3, computed as leaves arrive: each level keeps
 * only its open group (≤ 9 entries), so memory is O(log n) whatever the number of leaves,
 * and the work can be spread over many event-loop turns. A group's end depends only on its
 * own entries, so groups close as soon as they fill; `root()` closes the open groups bottom
 * up, which gives exactly what the level-by-level definition gives (a tail of 1–2 entries,
 * or of up to 8 without a cut, is one group).
 */
export class MerkleTreeBuilder {
  /** levels[i]: the open group of level i (level 0 = leaves). */
  private readonly levels: MerkleEntry[][] = [];
  /** Entries ever added to each level. */
  private readonly counts: number[] = [];
  private leaves = 0;

  /** Leaves added so far. */
  get leafCount(): number {
    return this.leaves;
  }

  /** Adds the next leaf. `hash` is kept as given (not copied) until its group closes. */
  push(hash: Hash, size: number): void {
    this.leaves++;
    this.add(0, { hash, size });
  }

  /** The root of the leaves added; the zero hash for none. The builder is spent afterwards. */
  root(): Hash {
    if (this.leaves === 0) return ZERO_HASH;
    for (let level = 0; ; level++) {
      const open = this.levels[level];
      const isTop = level === this.levels.length - 1;
      // The single entry of the top level is the root; a single entry below it still becomes
      // a one-child node (the definition groups a tail of one, too).
      if (isTop && this.counts[level] === 1) return open[0].hash;
      if (open.length > 0) {
        this.add(level + 1, internalNodeHash(open));
        open.length = 0;
      }
    }
  }

  private add(level: number, entry: MerkleEntry): void {
    if (level === this.levels.length) {
      this.levels.push([]);
      this.counts.push(0);
    }
    const open = this.levels[level];
    open.push(entry);
    this.counts[level]++;
    if (endsGroup(open.length, entry)) {
      const node = internalNodeHash(open);
      open.length = 0;
      this.add(level + 1, node);
    }
  }
}

/** The variable-branching merkle root of §3.3; the empty list gives the zero hash. */
export function merkleRoot(leaves: readonly MerkleEntry[]): Hash {
  const builder = new MerkleTreeBuilder();
  for (const leaf of leaves) builder.push(leaf.hash, leaf.size);
  return builder.root();
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
  const builder = new MerkleTreeBuilder();
  for (const chunk of chunks) builder.push(chunk.hash, chunk.size);
  return fileHashOf(builder, salt);
}

/** `fileHash` of the leaves pushed into `builder` (which is spent afterwards). */
export function fileHashOf(builder: MerkleTreeBuilder, salt: Uint8Array = ZERO_HASH): Hash {
  if (builder.leafCount === 0) return ZERO_HASH;
  const hasher = isZeroHash(salt) ? zeroSaltHasher : new KeyedHasher(salt);
  return hasher.hash(builder.root());
}

/** Term verification hash: BLAKE3_keyed(VERIFICATION_KEY, raw chunk hashes concatenated) (§3.6). */
export function verificationHash(chunkHashes: readonly Hash[]): Hash {
  return verificationHashOf(chunkHashes.length, (i) => chunkHashes[i]);
}

/**
 * The verification hash of `count` chunk hashes produced by `hashAt(i)` for i in [0, count),
 * without collecting them in an array first.
 */
export function verificationHashOf(count: number, hashAt: (index: number) => Hash): Hash {
  verificationHasher.start();
  for (let i = 0; i < count; i++) verificationHasher.update(hashAt(i));
  return verificationHasher.digest();
}

/** Keyed chunk hash as it appears in dedup shards: BLAKE3_keyed(key, raw chunk hash) (§3.7). */
export function keyedChunkHash(key: Uint8Array, hash: Hash): Hash {
  return new KeyedHasher(key).hash(hash);
}
