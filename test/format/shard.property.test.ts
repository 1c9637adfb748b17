import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  SHARD_FOOTER_BYTES,
  SHARD_HEADER_BYTES,
  SHARD_RECORD_BYTES,
  parseFullShard,
  parseUploadShard,
  type ShardContent,
  type ShardFile,
  type ShardSections,
  type ShardXorb,
} from "../../src/format/shard.js";
import { serializeFullShard, serializeUploadShard } from "../../src/format/shard-writer.js";
import { FormatError } from "../../src/format/errors.js";
import { hashToHex, isZeroHash, keyedChunkHash, type Hash } from "../../src/format/hash.js";

const U32_MAX = 0xffff_ffff;

// fast-check biases towards extreme values, so an all-0xFF hash (a bookend) is a real draw.
const hashArb: fc.Arbitrary<Hash> = fc.uint8Array({ minLength: 32, maxLength: 32 }).filter((h) => !h.every((b) => b === 0xff));
const u32Arb = fc.integer({ min: 0, max: U32_MAX });

const termArb = fc
  .record({ xorbHash: hashArb, unpackedBytes: u32Arb, chunkStart: fc.integer({ min: 0, max: U32_MAX - 1 }), span: u32Arb })
  .map(({ span, chunkStart, ...rest }) => ({ ...rest, chunkStart, chunkEnd: Math.min(U32_MAX, chunkStart + Math.max(1, span)) }));

function fileArb(withVerification: boolean): fc.Arbitrary<ShardFile> {
  return fc
    .record({
      fileHash: hashArb,
      terms: fc.array(termArb, { maxLength: 4 }),
      rangeHashes: fc.array(hashArb, { minLength: 4, maxLength: 4 }),
      sha256: fc.option(hashArb, { nil: null }),
    })
    .map(({ rangeHashes, terms, ...rest }) => ({
      ...rest,
      terms,
      verificationHashes: withVerification ? rangeHashes.slice(0, terms.length) : null,
    }));
}

const chunkArb = fc.record({ hash: hashArb, byteRangeStart: u32Arb, unpackedBytes: u32Arb, flags: u32Arb });
const xorbArb: fc.Arbitrary<ShardXorb> = fc.record({
  xorbHash: hashArb,
  flags: u32Arb,
  numBytesInXorb: u32Arb,
  numBytesOnDisk: u32Arb,
  chunks: fc.array(chunkArb, { maxLength: 5 }),
});

const contentArb: fc.Arbitrary<ShardContent> = fc
  .boolean()
  .chain((withVerification) => fc.record({ files: fc.array(fileArb(withVerification), { maxLength: 4 }), xorbs: fc.array(xorbArb, { maxLength: 4 }) }));

const footerArb = fc.record({
  hmacKey: fc.option(fc.uint8Array({ minLength: 32, maxLength: 32 }), { nil: undefined }),
  creationTimestamp: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
  keyExpiry: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
});

type Variant = "xet-core" | "huggingface.js" | "full";
const variantArb = fc.constantFrom<Variant>("xet-core", "huggingface.js", "full");

function serialize(content: ShardContent, variant: Variant): Uint8Array {
  if (variant === "full") return serializeFullShard(content, { creationTimestamp: 1, keyExpiry: 2 });
  if (variant === "xet-core") return serializeUploadShard(content, { kind: "xet-core" });
  return serializeUploadShard(content, { kind: "huggingface.js", creationTimestamp: 1_754_059_905 });
}

/** Compares parsed sections with the serializer input, chunk hashes mapped through `chunkHashAsStored`. */
function assertSameContent(parsed: ShardSections, content: ShardContent, chunkHashAsStored: (h: Hash) => Hash = (h) => h): void {
  assert.deepEqual(
    parsed.files.map(({ fileHash, terms, verificationHashes, sha256 }) => ({ fileHash, terms, verificationHashes, sha256 })),
    content.files.map(({ fileHash, terms, verificationHashes, sha256 }) => ({ fileHash, terms, verificationHashes, sha256 })),
  );
  parsed.files.forEach((file, i) => {
    const source = content.files[i];
    assert.equal(file.flags, (source.verificationHashes ? 0x8000_0000 : 0) + (source.sha256 ? 0x4000_0000 : 0));
    assert.equal(file.sha256Hex, source.sha256 ? hashToHex(source.sha256) : null);
  });
  assert.deepEqual(
    parsed.xorbs,
    content.xorbs.map((x) => ({ ...x, chunks: x.chunks.map((c) => ({ ...c, hash: chunkHashAsStored(c.hash) })) })),
  );
}

/** Runs both readers; returns what each threw (undefined where it accepted the bytes). */
function parseAll(bytes: Uint8Array): [unknown, unknown] {
  const attempt = (parse: (b: Uint8Array) => unknown): unknown => {
    try {
      parse(bytes);
      return undefined;
    } catch (err) {
      return err ?? new Error("thrown undefined");
    }
  };
  return [attempt(parseUploadShard), attempt(parseFullShard)];
}

/** Byte offsets of every count field (file term counts, xorb chunk counts), computed from the content. */
function countFieldOffsets(content: ShardContent): number[] {
  const offsets: number[] = [];
  let at = SHARD_HEADER_BYTES;
  for (const f of content.files) {
    offsets.push(at + 36);
    at += (1 + f.terms.length * (f.verificationHashes ? 2 : 1) + (f.sha256 ? 1 : 0)) * SHARD_RECORD_BYTES;
  }
  at += SHARD_RECORD_BYTES;
  for (const x of content.xorbs) {
    offsets.push(at + 36);
    at += (1 + x.chunks.length) * SHARD_RECORD_BYTES;
  }
  return offsets;
}

describe("shard round trip (property)", () => {
  it("parseUploadShard reads back what either upload variant wrote", () => {
    fc.assert(
      fc.property(contentArb, fc.constantFrom<Variant>("xet-core", "huggingface.js"), (content, variant) => {
        const bytes = serialize(content, variant);
        const parsed = parseUploadShard(bytes);
        assert.equal(parsed.declaredFooterSize, variant === "xet-core" ? 0n : 200n);
        assert.equal(parsed.sectionsEnd, variant === "xet-core" ? bytes.length : bytes.length - SHARD_FOOTER_BYTES);
        assertSameContent(parsed, content);
      }),
      { numRuns: 150 },
    );
  });

  it("parseFullShard reads back a complete shard, chunk hashes keyed by a non-zero key", () => {
    fc.assert(
      fc.property(contentArb, footerArb, (content, footer) => {
        const bytes = serializeFullShard(content, footer);
        const parsed = parseFullShard(bytes);
        const key = footer.hmacKey;
        const keyed = key !== undefined && !isZeroHash(key);
        assertSameContent(parsed, content, keyed ? (h) => keyedChunkHash(key, h) : undefined);
        assert.deepEqual(parsed.footer.hmacKey, key ?? new Uint8Array(32));
        assert.equal(parsed.footer.creationTimestamp, footer.creationTimestamp);
        assert.equal(parsed.footer.keyExpiry, footer.keyExpiry);
        const end = BigInt(bytes.length - SHARD_FOOTER_BYTES);
        assert.deepEqual(
          [parsed.footer.fileLookupOffset, parsed.footer.xorbLookupOffset, parsed.footer.chunkLookupOffset, parsed.footer.footerOffset],
          [end, end, end, end],
        );
        assert.equal(
          parsed.footer.storedBytes,
          content.xorbs.reduce((sum, x) => sum + BigInt(x.numBytesInXorb), 0n),
        );
        assert.equal(
          parsed.footer.storedBytesOnDisk,
          content.xorbs.reduce((sum, x) => sum + BigInt(x.numBytesOnDisk), 0n),
        );
        assert.equal(
          parsed.footer.materializedBytes,
          content.files.reduce((sum, f) => sum + f.terms.reduce((s, t) => s + BigInt(t.unpackedBytes), 0n), 0n),
        );
        // The complete shard is also a valid upload.
        assertSameContent(parseUploadShard(bytes), content, keyed ? (h) => keyedChunkHash(key, h) : undefined);
      }),
      { numRuns: 100 },
    );
  });
});

describe("shard readers on damaged input (property)", () => {
  it("every truncation yields a FormatError", () => {
    fc.assert(
      fc.property(contentArb, variantArb, fc.nat(), (content, variant, cutSeed) => {
        const bytes = serialize(content, variant);
        // Cutting anywhere before the end of the xorb bookend breaks the sections; cutting a
        // complete shard anywhere breaks its footer.
        const sectionsEnd = variant === "xet-core" ? bytes.length : bytes.length - SHARD_FOOTER_BYTES;
        const cut = bytes.subarray(0, cutSeed % sectionsEnd);
        for (const err of parseAll(cut)) assert.ok(err instanceof FormatError, String(err));
        if (variant === "full") {
          const inFooter = bytes.subarray(0, sectionsEnd + (cutSeed % SHARD_FOOTER_BYTES));
          assert.throws(() => parseFullShard(inFooter), FormatError);
        }
      }),
      { numRuns: 200 },
    );
  });

  it("random byte corruption yields a result or a FormatError, never another exception", () => {
    fc.assert(
      fc.property(
        contentArb,
        variantArb,
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 6 }),
        (content, variant, edits) => {
          const bytes = serialize(content, variant);
          for (const [position, value] of edits) bytes[position % bytes.length] = value;
          for (const err of parseAll(bytes)) assert.ok(err === undefined || err instanceof FormatError, String(err));
        },
      ),
      { numRuns: 300 },
    );
  });

  it("a corrupted count is rejected before the parser allocates or loops per that count", { timeout: 20_000 }, () => {
    let worstGrowth = 0;
    fc.assert(
      fc.property(
        contentArb.filter((c) => c.files.length + c.xorbs.length > 0),
        variantArb,
        fc.nat(),
        // ≥ 2^24 records would be ≥ 768 MiB of input and hundreds of MiB of parsed objects.
        fc.integer({ min: 2 ** 24, max: U32_MAX }),
        (content, variant, which, count) => {
          const bytes = serialize(content, variant);
          const fields = countFieldOffsets(content);
          const field = fields[which % fields.length];
          new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).setUint32(field, count, true);
          const before = process.memoryUsage();
          const [uploadError, fullError] = parseAll(bytes);
          const after = process.memoryUsage();
          worstGrowth = Math.max(worstGrowth, after.heapUsed - before.heapUsed + (after.arrayBuffers - before.arrayBuffers));
          assert.ok(uploadError instanceof FormatError, String(uploadError));
          assert.equal(uploadError.code, "truncated", uploadError.message);
          // The full reader may stop earlier (an upload variant's footer), but only with a FormatError.
          assert.ok(fullError instanceof FormatError, String(fullError));
          if (variant === "full") assert.equal(fullError.code, "truncated", fullError.message);
        },
      ),
      { numRuns: 100 },
    );
    assert.ok(worstGrowth < 32 * 1024 * 1024, `parsing grew memory by ${worstGrowth} bytes`);
  });
});
