import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  chunkHash,
  fileHash,
  hashFromHex,
  hashToHex,
  internalNodeHash,
  INTERNAL_NODE_KEY,
  KeyedHasher,
  MerkleTreeBuilder,
  isGlobalDedupEligible,
  isHashHex,
  keyedChunkHash,
  lastWord,
  firstWord,
  verificationHash,
  xorbHash,
  ZERO_HASH,
  type MerkleEntry,
} from "../../src/format/hash.js";
import { FormatError } from "../../src/format/errors.js";
import { fromHex, loadVector, makeData, splitmix64Bytes, toHex } from "../helpers/vectors.js";

const entries = (list: [string, number][]): MerkleEntry[] => list.map(([h, size]) => ({ hash: hashFromHex(h), size }));

describe("hash string form (hex-rendering.json)", () => {
  const v = loadVector("hex-rendering.json");
  for (const c of v.vectors) {
    it(`renders and parses: ${c.name}`, () => {
      assert.equal(hashToHex(fromHex(c.raw_bytes_hex)), c.string);
      assert.equal(toHex(hashFromHex(c.string)), c.raw_bytes_hex);
    });
  }
  it("stores a SHA-256 in shards as its standard hex parsed with the Xet rule", () => {
    const s = v.sha256_in_shards;
    const digest = createHash("sha256").update(s.data_ascii).digest("hex");
    assert.equal(digest, s.sha256_standard_hex);
    assert.equal(toHex(hashFromHex(digest)), s.bytes_stored_in_shard_hex);
  });
  it("rejects anything but 64 lowercase hex characters", () => {
    const good = "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918";
    assert.ok(isHashHex(good));
    for (const bad of ["", good.slice(1), `${good}0`, good.toUpperCase(), good.replace("7", "g"), ` ${good.slice(1)}`, `${good.slice(0, 63)}\n`]) {
      assert.equal(isHashHex(bad), false, JSON.stringify(bad));
      assert.throws(
        () => hashFromHex(bad),
        (e: unknown) => e instanceof FormatError && e.code === "bad_hash",
      );
    }
  });
  it("first/last word are the first/last 16 characters of the string form", () => {
    const h = hashFromHex(v.vectors[1].string);
    assert.equal(firstWord(h).toString(16).padStart(16, "0"), v.vectors[1].string.slice(0, 16));
    assert.equal(lastWord(h).toString(16).padStart(16, "0"), v.vectors[1].string.slice(48));
  });
});

describe("chunk hash (chunk-hashes.json)", () => {
  const v = loadVector("chunk-hashes.json");
  it("hashes 'Hello World!'", () => {
    const c = v.vectors[0];
    const h = chunkHash(Buffer.from(c.input_ascii));
    assert.equal(toHex(h), c.hash_raw_hex);
    assert.equal(hashToHex(h), c.hash);
  });
  it("hashes the chunks of 1 MB splitmix64 data", () => {
    const c = v.vectors[1];
    const data = splitmix64Bytes(BigInt(c.input.seed), c.input.length);
    assert.equal(createHash("sha256").update(data).digest("hex"), c.input.sha256_of_input);
    let start = 0;
    c.chunk_end_offsets.forEach((end: number, i: number) => {
      assert.equal(hashToHex(chunkHash(data.subarray(start, end))), c.chunk_hashes[i], `chunk ${i}`);
      start = end;
    });
  });
});

describe("merkle hashes (merkle-hashes.json)", () => {
  const v = loadVector("merkle-hashes.json");
  it("internal node hash", () => {
    const node = internalNodeHash(entries(v.internal_node_vector.children));
    assert.equal(hashToHex(node.hash), v.internal_node_vector.result);
    assert.equal(node.size, 300);
  });
  for (const c of v.aggregated_cases) {
    it(`xorb and file hashes, case ${c.index} (${c.chunks.length} chunks)`, () => {
      const chunks = entries(c.chunks);
      assert.equal(hashToHex(xorbHash(chunks)), c.xorb_hash);
      for (const [salt, expected] of c.file_hashes) {
        assert.equal(hashToHex(fileHash(chunks, hashFromHex(salt))), expected, `salt ${salt}`);
      }
    });
  }
  for (const c of v.from_data) {
    it(`hashes built from data: ${c.name}`, () => {
      const m = /makeData\((\d+), (\d+), (\d+)\)/.exec(c.name)!;
      const data = makeData(Number(m[1]), Number(m[2]), Number(m[3]));
      let start = 0;
      const chunks = c.chunk_end_offsets.map((end: number, i: number) => {
        const hash = chunkHash(data.subarray(start, end));
        assert.equal(hashToHex(hash), c.chunks[i][0]);
        const entry = { hash, size: end - start };
        start = end;
        return entry;
      });
      assert.equal(hashToHex(xorbHash(chunks)), c.xorb_hash);
      assert.equal(hashToHex(fileHash(chunks)), c.file_hash);
    });
  }
  it("the empty file is the zero hash, not the keyed hash of the zero root", () => {
    assert.equal(hashToHex(fileHash([])), v.empty.file_hash);
    assert.equal(hashToHex(xorbHash([])), v.empty.xorb_hash);
    assert.notEqual(hashToHex(fileHash([])), v.empty.wrong_value_do_not_use);
    assert.deepEqual(fileHash([]), ZERO_HASH);
  });
  it("builds the same root incrementally as the level-by-level definition, for every leaf count up to 300 and a few large ones", () => {
    // The definition of §3.3 written out as plainly as possible, strings and all.
    const nodeKey = INTERNAL_NODE_KEY;
    const referenceRoot = (leaves: MerkleEntry[]): string => {
      let level = leaves.map((leaf) => ({ hex: hashToHex(leaf.hash), hash: leaf.hash, size: leaf.size }));
      while (level.length > 1) {
        const next: typeof level = [];
        for (let i = 0; i < level.length; ) {
          let n = Math.min(9, level.length - i);
          if (level.length - i > 2) {
            for (let j = 2; j < n; j++) {
              if (lastWord(level[i + j].hash) % 4n === 0n) {
                n = j + 1;
                break;
              }
            }
          }
          const group = level.slice(i, i + n);
          const text = group.map((e) => `${e.hex} : ${e.size}\n`).join("");
          const hash = new KeyedHasher(nodeKey).hash(Buffer.from(text));
          next.push({ hex: hashToHex(hash), hash, size: group.reduce((sum, e) => sum + e.size, 0) });
          i += n;
        }
        level = next;
      }
      return level.length === 0 ? hashToHex(ZERO_HASH) : level[0].hex;
    };
    const leavesOf = (count: number, seed: number): MerkleEntry[] =>
      Array.from({ length: count }, (_, i) => ({ hash: chunkHash(Buffer.from(`${seed}:${i}`)), size: 1 + ((i * 7919) % 131072) }));
    const counts = [...Array.from({ length: 301 }, (_, n) => n), 1000, 4097, 20_000];
    for (const count of counts) {
      const leaves = leavesOf(count, count);
      const builder = new MerkleTreeBuilder();
      for (const leaf of leaves) builder.push(leaf.hash, leaf.size);
      assert.equal(builder.leafCount, count);
      assert.equal(hashToHex(builder.root()), referenceRoot(leaves), `${count} leaves`);
    }
  });
  it("a single chunk's file hash is not the chunk hash", () => {
    const h = chunkHash(Buffer.from("x"));
    assert.deepEqual(xorbHash([{ hash: h, size: 1 }]), h);
    assert.notDeepEqual(fileHash([{ hash: h, size: 1 }]), h);
  });
});

describe("verification and keyed hashes (verification-and-hmac.json)", () => {
  const v = loadVector("verification-and-hmac.json");
  for (const [i, c] of v.verification_vectors.entries()) {
    it(`range hash ${i}`, () => {
      assert.equal(hashToHex(verificationHash(c.chunk_hashes.map(hashFromHex))), c.range_hash);
    });
  }
  for (const [i, c] of v.hmac_vectors.entries()) {
    it(`keyed chunk hash ${i}`, () => {
      assert.equal(hashToHex(keyedChunkHash(hashFromHex(c.key), hashFromHex(c.chunk_hash))), c.keyed_hash);
    });
  }
});

describe("global-dedup eligibility (global-dedup-eligibility.json)", () => {
  const v = loadVector("global-dedup-eligibility.json");
  for (const c of v.vectors) {
    it(`${c.hash.slice(0, 12)}… eligible=${c.hash_eligible}`, () => {
      const h = hashFromHex(c.hash);
      assert.equal(Number(lastWord(h) % 1024n), c.last_word_mod_1024);
      assert.equal(isGlobalDedupEligible(h), c.hash_eligible);
      assert.equal(lastWord(h) % 4n === 0n, c.merkle_cut_candidate);
    });
  }
});
