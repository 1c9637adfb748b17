/**
 * The file hash (docs/protocol.md §3.3, §3.5) of a file described as runs of chunks of stored
 * xorbs — the way a shard's terms describe it — computed over packed hashes (no object per
 * chunk or node), with the merkle nodes of repeated runs looked up instead of hashed again.
 *
 * Why the memo: merkle grouping is content-defined (a group ends at an entry whose last word is
 * ≡ 0 mod 4 once it has 3 entries, or at 9 entries), so past its first cut a run of chunks
 * groups the same way wherever it appears in a file. A file that repeats a range — 2,000 terms
 * naming the same 8,192 chunks, 16 million leaves: a legitimate file, and the cheapest shard to
 * make a server hash for half a minute — builds the same nodes over and over. Hashing a node
 * is a native BLAKE3 call of 1–2 µs; looking it up takes tens of nanoseconds. Nodes are
 * remembered by what they are made of: a first-level node by (source, first chunk, count), a
 * higher one by the indexes of its children in the memo. The caller says which ranges are worth
 * remembering (a xorb named a second time), so a file of distinct chunks pays nothing for the
 * memo. The memo is bounded: when full it starts over, so whatever filled it cannot keep a
 * later repetition from being remembered.
 *
 * Checked against the plain definition (hash.ts `fileHash`) in test/format/file-hash-builder.test.ts.
 */
import { HASH_BYTES, INTERNAL_NODE_KEY, KeyedHasher, ZERO_HASH, writeHashHexAt, type Hash } from "./hash.js";
import { MAX_XORB_CHUNKS } from "./xorb.js";

/** A group never has more children than this (§3.3). */
const MAX_GROUP = 9;
/** One child line: 64 hex digits, " : ", up to 16 decimal digits of a safe integer, "\n". */
const MAX_CHILD_LINE_BYTES = 64 + 3 + 16 + 1;

/**
 * The largest source id a memo keys nodes by: a first-level node's key, id · 2^17 + first
 * chunk · 16 + count (chunk < MAX_XORB_CHUNKS = 8,192, count ≤ 9), then stays a small integer
 * (< 2^30), which a Map looks up without allocating.
 */
export const MAX_MEMO_SOURCE_ID = 8191;
/** Nodes a memo remembers by default: 2.5 MiB of hashes and sizes when full. */
const DEFAULT_MERKLE_MEMO_NODES = 1 << 16;

/** The chunks a file's leaves come from: one stored xorb's chunk hashes and lengths, packed. */
export interface LeafSource {
  /** Chunk hashes back to back, 32 bytes each. */
  readonly hashes: Uint8Array;
  /** `unpackedOffsets[i]`: uncompressed bytes before chunk i; one more entry than chunks. */
  readonly unpackedOffsets: Float64Array;
  /** The source's id in a memo, 0 to MAX_MEMO_SOURCE_ID, unique per memo; -1: its nodes are not remembered. */
  readonly memoId: number;
}

/** Merkle nodes remembered across the files (and ranges) of one job, e.g. one shard's validation. */
export class MerkleMemo {
  private hashes = new Uint8Array(64 * HASH_BYTES);
  private sizes = new Float64Array(64);
  private count = 0;
  /** Changes whenever the memo starts over: node indexes of an older generation mean nothing. */
  generation = 0;
  /** First-level nodes over consecutive chunks of one source → node index. */
  private readonly runs = new Map<number, number>();
  /** Nodes whose children are all remembered, by their children's indexes → node index. */
  private readonly parents = new Map<string, number>();

  constructor(readonly capacity: number = DEFAULT_MERKLE_MEMO_NODES) {
    if (!Number.isSafeInteger(capacity) || capacity < 0 || capacity >= 2 ** 31)
      throw new RangeError(`a merkle memo holds 0 to 2^31 − 1 nodes, got ${capacity}`);
  }

  /** Nodes remembered. */
  get size(): number {
    return this.count;
  }

  runNode(key: number): number | undefined {
    return this.runs.get(key);
  }

  parentNode(key: string): number | undefined {
    return this.parents.get(key);
  }

  /**
   * Remembers the node whose hash is `hash[from .. from + 32)` and returns its index, or -1
   * for a memo of capacity 0. A full memo first forgets everything (a new generation).
   */
  remember(hash: Uint8Array, from: number, size: number): number {
    if (this.capacity === 0) return -1;
    if (this.count === this.capacity) {
      this.count = 0;
      this.runs.clear();
      this.parents.clear();
      this.generation++;
    }
    if (this.count === this.sizes.length) {
      const length = Math.min(this.capacity, this.sizes.length * 2);
      const hashes = new Uint8Array(length * HASH_BYTES);
      hashes.set(this.hashes);
      const sizes = new Float64Array(length);
      sizes.set(this.sizes);
      this.hashes = hashes;
      this.sizes = sizes;
    }
    copyHash(hash, from, this.hashes, this.count * HASH_BYTES);
    this.sizes[this.count] = size;
    return this.count++;
  }

  rememberRun(key: number, node: number): void {
    this.runs.set(key, node);
  }

  rememberParent(key: string, node: number): void {
    this.parents.set(key, node);
  }

  /** The packed hashes, node `i` at `i · 32` (valid until the next `remember`). */
  get nodeHashes(): Uint8Array {
    return this.hashes;
  }

  nodeSize(node: number): number {
    return this.sizes[node];
  }
}

/** The open group of one level above the leaves: ≤ 9 entries with hash, size and memo index (-1: none). */
class Level {
  readonly hashes = new Uint8Array(MAX_GROUP * HASH_BYTES);
  readonly sizes = new Float64Array(MAX_GROUP);
  readonly nodes = new Int32Array(MAX_GROUP);
  /** Entries in the open group. */
  count = 0;
  /** Entries ever added to this level. */
  total = 0;
  /** The level's first entry, which is the root when the level is the top one and has only it. */
  readonly first = new Uint8Array(HASH_BYTES);
}

const nodeHasher = new KeyedHasher(INTERNAL_NODE_KEY);
const zeroSaltHasher = new KeyedHasher(ZERO_HASH);
const nodeText = Buffer.alloc(MAX_GROUP * MAX_CHILD_LINE_BYTES);
/**
 * `nodeText.subarray(0, length)` for every length, made once: a node is hashed every few
 * leaves, and a fresh view per node was garbage for the collector to sweep.
 */
const nodeTextViews: Buffer[] = Array.from({ length: nodeText.length + 1 }, (_, length) => nodeText.subarray(0, length));
/** Where `hashNode` writes the hash it computes. */
const nodeOut = new Uint8Array(HASH_BYTES);

/**
 * The file hash of the leaves given by `addRange` calls, in file order. Memory is O(levels),
 * whatever the number of leaves. `fileHash()` ends a file; the builder then starts the next
 * one (reusing one builder saves its arrays for every file of a shard).
 */
export class FileHashBuilder {
  private leaves = 0;
  /** The first leaf's hash: the root of a one-chunk file. */
  private readonly firstLeaf = new Uint8Array(HASH_BYTES);
  // The open group of leaves: while it holds consecutive chunks of one source it is that run
  // (source, start, count); once it spans two sources its leaves are copied into `mixed`.
  private groupSource: LeafSource | null = null;
  private groupStart = 0;
  private groupCount = 0;
  private groupIsMixed = false;
  /** Whether the open group's node goes into the memo (its range was added with `memoize`). */
  private groupMemoized = false;
  private readonly mixed = new Level();
  /** levels[0] is the first level of nodes above the leaves; the first `usedLevels` hold this file's entries. */
  private readonly levels: Level[] = [];
  private usedLevels = 0;
  /** The memo generation the node indexes in `levels` belong to. */
  private generation: number;

  constructor(private readonly memo: MerkleMemo | null = null) {
    this.generation = memo?.generation ?? 0;
  }

  get leafCount(): number {
    return this.leaves;
  }

  /**
   * Adds chunks [start, end) of `source` as the next leaves. With `memoize`, the nodes over
   * them are looked up in the memo and remembered there; without, they are only hashed.
   */
  addRange(source: LeafSource, start: number, end: number, memoize = true): void {
    const hashes = source.hashes;
    if (this.leaves === 0 && end > start) this.firstLeaf.set(hashes.subarray(start * HASH_BYTES, (start + 1) * HASH_BYTES));
    this.leaves += end - start;
    let c = start;
    // Finish a group left open by the previous range (its leaves come from elsewhere).
    while (c < end && this.groupCount > 0 && (this.groupIsMixed || this.groupSource !== source || this.groupStart + this.groupCount !== c)) {
      this.addMixedLeaf(source, c);
      c++;
    }
    // The fast path: groups of consecutive chunks, found by reading one byte per leaf.
    for (; c < end; c++) {
      if (this.groupCount === 0) {
        this.groupSource = source;
        this.groupStart = c;
        this.groupMemoized = memoize;
      }
      this.groupCount++;
      if (this.groupCount === MAX_GROUP || (this.groupCount >= 3 && (hashes[c * HASH_BYTES + 24] & 3) === 0)) this.closeLeafGroup();
    }
  }

  /** The file hash (zero salt) of the leaves added: the zero hash for none. The builder starts over. */
  fileHash(): Hash {
    const hash = this.leaves === 0 ? ZERO_HASH : zeroSaltHasher.hash(this.root());
    this.leaves = 0;
    this.groupCount = 0;
    this.groupIsMixed = false;
    this.groupSource = null;
    for (const level of this.levels) {
      level.count = 0;
      level.total = 0;
    }
    this.usedLevels = 0;
    return hash;
  }

  /** The merkle root, closing the open groups bottom up (hash.ts `MerkleTreeBuilder.root`). */
  private root(): Hash {
    if (this.usedLevels === 0 && this.leaves === 1) return this.firstLeaf.slice();
    if (this.groupCount > 0) this.closeLeafGroup();
    for (let l = 0; ; l++) {
      const level = this.levels[l];
      const isTop = l === this.usedLevels - 1;
      // The single entry of the top level is the root; a single entry below it still becomes a
      // one-child node (the definition groups a tail of one, too).
      if (isTop && level.total === 1) return level.first.slice();
      if (level.count > 0) this.closeNodeGroup(l);
    }
  }

  /** Adds leaf `c` of `source` to a group that spans sources: its hash and size are copied. */
  private addMixedLeaf(source: LeafSource, c: number): void {
    const group = this.mixed;
    if (!this.groupIsMixed) {
      // Copy the run so far.
      const from = this.groupSource!;
      for (let i = 0; i < this.groupCount; i++) copyLeaf(from, this.groupStart + i, group, i);
      this.groupIsMixed = true;
    }
    copyLeaf(source, c, group, this.groupCount);
    this.groupCount++;
    if (this.groupCount === MAX_GROUP || (this.groupCount >= 3 && (source.hashes[c * HASH_BYTES + 24] & 3) === 0)) this.closeLeafGroup();
  }

  private closeLeafGroup(): void {
    const count = this.groupCount;
    this.groupCount = 0;
    if (this.groupIsMixed) {
      this.groupIsMixed = false;
      hashNode(this.mixed.hashes, 0, this.mixed.sizes, 0, count);
      this.push(0, nodeOut, 0, sum(this.mixed.sizes, count), -1);
      return;
    }
    const source = this.groupSource!;
    const start = this.groupStart;
    const size = source.unpackedOffsets[start + count] - source.unpackedOffsets[start];
    const memo = this.memo;
    if (memo === null || !this.groupMemoized || source.memoId < 0 || source.memoId > MAX_MEMO_SOURCE_ID || start >= MAX_XORB_CHUNKS) {
      hashLeafRun(source, start, count);
      this.push(0, nodeOut, 0, size, -1);
      return;
    }
    const key = source.memoId * (MAX_XORB_CHUNKS * 16) + start * 16 + count;
    let node = memo.runNode(key);
    if (node === undefined) {
      hashLeafRun(source, start, count);
      node = memo.remember(nodeOut, 0, size);
      if (node === -1) {
        this.push(0, nodeOut, 0, size, -1);
        return;
      }
      memo.rememberRun(key, node);
    }
    this.push(0, memo.nodeHashes, node * HASH_BYTES, size, node);
  }

  /** Adds an entry to level `l` (0: the first level of nodes); closes the group when it ends there. */
  private push(l: number, hash: Uint8Array, from: number, size: number, node: number): void {
    if (l === this.usedLevels) {
      if (l === this.levels.length) this.levels.push(new Level());
      this.usedLevels++;
    }
    const level = this.levels[l];
    const at = level.count * HASH_BYTES;
    copyHash(hash, from, level.hashes, at);
    level.sizes[level.count] = size;
    level.nodes[level.count] = node;
    if (level.total === 0) copyHash(hash, from, level.first, 0);
    level.count++;
    level.total++;
    if (level.count === MAX_GROUP || (level.count >= 3 && (level.hashes[at + 24] & 3) === 0)) this.closeNodeGroup(l);
  }

  /** Turns the open group of level `l` into an entry of level `l + 1`. */
  private closeNodeGroup(l: number): void {
    const level = this.levels[l];
    const count = level.count;
    level.count = 0;
    const size = sum(level.sizes, count);
    const memo = this.memo;
    if (memo !== null && memo.generation !== this.generation) {
      // The memo started over: the indexes held here name other nodes now.
      for (const each of this.levels) each.nodes.fill(-1);
      this.generation = memo.generation;
    }
    const key = memo === null ? null : parentKey(level.nodes, count);
    if (memo === null || key === null) {
      hashNode(level.hashes, 0, level.sizes, 0, count);
      this.push(l + 1, nodeOut, 0, size, -1);
      return;
    }
    let node = memo.parentNode(key);
    if (node === undefined) {
      hashNode(level.hashes, 0, level.sizes, 0, count);
      node = memo.remember(nodeOut, 0, size);
      if (node === -1) {
        this.push(l + 1, nodeOut, 0, size, -1);
        return;
      }
      // A key made of the indexes of a generation the memo has just forgotten would name
      // other nodes in the new one.
      if (memo.generation === this.generation) memo.rememberParent(key, node);
    }
    this.push(l + 1, memo.nodeHashes, node * HASH_BYTES, size, node);
  }
}

function copyLeaf(source: LeafSource, c: number, group: Level, i: number): void {
  copyHash(source.hashes, c * HASH_BYTES, group.hashes, i * HASH_BYTES);
  group.sizes[i] = source.unpackedOffsets[c + 1] - source.unpackedOffsets[c];
}

/** Copies the hash at `from[fromAt ..]` to `to[toAt ..]` (a loop: no view object per copy). */
function copyHash(from: Uint8Array, fromAt: number, to: Uint8Array, toAt: number): void {
  for (let i = 0; i < HASH_BYTES; i++) to[toAt + i] = from[fromAt + i];
}

function sum(sizes: Float64Array, count: number): number {
  let total = 0;
  for (let i = 0; i < count; i++) total += sizes[i];
  if (!Number.isSafeInteger(total)) throw new RangeError("merkle node size exceeds 2^53");
  return total;
}

/** The memo key of a node whose children are remembered nodes; null when one of them is not. */
function parentKey(nodes: Int32Array, count: number): string | null {
  let key = "";
  for (let i = 0; i < count; i++) {
    const node = nodes[i];
    if (node < 0) return null;
    key += String.fromCharCode(node & 0xffff, node >>> 16);
  }
  return key;
}

/** Hashes chunks [start, start + count) of `source` as one node, into `nodeOut`. */
function hashLeafRun(source: LeafSource, start: number, count: number): void {
  let at = 0;
  const offsets = source.unpackedOffsets;
  for (let i = 0; i < count; i++) {
    const c = start + i;
    at = writeChildLine(source.hashes, c * HASH_BYTES, offsets[c + 1] - offsets[c], at);
  }
  nodeHasher.start();
  nodeHasher.update(nodeTextViews[at]);
  nodeHasher.digestInto(nodeOut, 0);
}

/**
 * Internal node: BLAKE3_keyed(INTERNAL_NODE_KEY, "<hex> : <size>\n" per child) (§3.2), over the
 * `count` children whose hashes are packed in `hashes` from `from` and sizes in `sizes` from
 * `sizeFrom`; written into `nodeOut`.
 */
function hashNode(hashes: Uint8Array, from: number, sizes: Float64Array, sizeFrom: number, count: number): void {
  let at = 0;
  for (let i = 0; i < count; i++) at = writeChildLine(hashes, from + i * HASH_BYTES, sizes[sizeFrom + i], at);
  nodeHasher.start();
  nodeHasher.update(nodeTextViews[at]);
  nodeHasher.digestInto(nodeOut, 0);
}

/** Writes one child line of a node's text at `at`; returns the offset after it. */
function writeChildLine(hashes: Uint8Array, from: number, size: number, at: number): number {
  at = writeHashHexAt(hashes, from, nodeText, at);
  nodeText[at++] = 0x20; // " : "
  nodeText[at++] = 0x3a;
  nodeText[at++] = 0x20;
  at = writeDecimal(size, at);
  nodeText[at++] = 0x0a;
  return at;
}

/** Writes a non-negative safe integer in decimal at `at`; returns the offset after it. */
function writeDecimal(value: number, at: number): number {
  let digits = 1;
  for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) digits++;
  let rest = value;
  for (let i = digits - 1; i >= 0; i--) {
    nodeText[at + i] = 0x30 + (rest % 10);
    rest = Math.floor(rest / 10);
  }
  return at + digits;
}
