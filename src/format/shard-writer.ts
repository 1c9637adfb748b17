/**
 * Writing MDB shards (docs/protocol.md §6, §7.3): the complete form with its footer that a
 * global-dedup answer is, and the upload bodies real clients send (shard.ts reads them all).
 * Everything the parser would refuse is refused here first, as a RangeError: writing such a
 * shard is a caller bug, not bad input.
 */
import { KeyedHasher, isZeroHash, HASH_BYTES, type Hash } from "./hash.js";
import {
  FILE_FLAG_WITH_METADATA_EXT,
  FILE_FLAG_WITH_VERIFICATION,
  SHARD_FOOTER_BYTES,
  SHARD_FOOTER_VERSION,
  SHARD_HEADER_BYTES,
  SHARD_HEADER_VERSION,
  SHARD_RECORD_BYTES,
  SHARD_TAG,
  dataViewOf,
  isBookend,
  type ShardContent,
  type ShardFile,
  type ShardFooterInput,
  type ShardXorb,
  type UploadShardVariant,
} from "./shard.js";

const U32_MAX = 0xffff_ffff;
const U64_MAX = (1n << 64n) - 1n;

/**
 * Writes a complete shard with a 200-byte footer and no lookup tables — the global-dedup answer
 * both real clients read (§7.3): header footer_size 200, the given files (usually none) and
 * xorbs, all three lookup offsets = footer_offset with count 0, stored_bytes_on_disk =
 * Σ numBytesOnDisk, materialized_bytes = Σ term bytes, stored_bytes = Σ numBytesInXorb.
 * Chunk hashes are given raw and written keyed when `footer.hmacKey` is non-zero.
 * Throws RangeError for content no shard can carry (it is a caller bug, not bad input).
 */
export function serializeFullShard(content: ShardContent, footer: ShardFooterInput): Uint8Array {
  const hmacKey = footer.hmacKey ?? null;
  if (hmacKey !== null) checkHash(hmacKey, "hmacKey");
  const chunkHasher = hmacKey === null || isZeroHash(hmacKey) ? null : new KeyedHasher(hmacKey);
  let materializedBytes = 0n;
  for (const file of content.files) for (const term of file.terms) materializedBytes += BigInt(term.unpackedBytes);
  return writeShard(content, chunkHasher, (layout) => ({
    xorbInfoOffset: layout.xorbSectionOffset,
    lookupOffset: layout.sectionsEnd,
    hmacKey,
    creationTimestamp: u64Input(footer.creationTimestamp, "creationTimestamp"),
    keyExpiry: u64Input(footer.keyExpiry, "keyExpiry"),
    storedBytesOnDisk: sumXorbField(content.xorbs, "numBytesOnDisk"),
    materializedBytes,
    storedBytes: sumXorbField(content.xorbs, "numBytesInXorb"),
  }));
}

/**
 * Writes a shard upload body the way a real client does (§6.7): `xet-core` (footer_size 0,
 * nothing after the xorb bookend) or `huggingface.js` (footer_size 200 and a footer with zero
 * lookup fields, zero key, zero expiry, materialized_bytes 0). Chunk hashes are written raw.
 */
export function serializeUploadShard(content: ShardContent, variant: UploadShardVariant): Uint8Array {
  if (variant.kind === "xet-core") return writeShard(content, null, null);
  const creationTimestamp = u64Input(variant.creationTimestamp, "creationTimestamp");
  return writeShard(content, null, (layout) => ({
    xorbInfoOffset: layout.xorbSectionOffset,
    lookupOffset: 0,
    hmacKey: null,
    creationTimestamp,
    keyExpiry: 0n,
    storedBytesOnDisk: sumXorbField(content.xorbs, "numBytesOnDisk"),
    materializedBytes: 0n,
    storedBytes: sumXorbField(content.xorbs, "numBytesInXorb"),
  }));
}

interface SectionLayout {
  xorbSectionOffset: number;
  sectionsEnd: number;
}

interface FooterFields {
  xorbInfoOffset: number;
  /** Written to all three lookup offsets; their counts are always 0. */
  lookupOffset: number;
  hmacKey: Hash | null;
  creationTimestamp: bigint;
  keyExpiry: bigint;
  storedBytesOnDisk: bigint;
  materializedBytes: bigint;
  storedBytes: bigint;
}

/** Header, both sections and (when `footerFor` is given) the footer, in one allocation. */
function writeShard(content: ShardContent, chunkHasher: KeyedHasher | null, footerFor: ((layout: SectionLayout) => FooterFields) | null): Uint8Array {
  const fileSectionBytes = checkFilesAndMeasure(content.files);
  const xorbSectionBytes = checkXorbsAndMeasure(content.xorbs);
  const xorbSectionOffset = SHARD_HEADER_BYTES + fileSectionBytes;
  const sectionsEnd = xorbSectionOffset + xorbSectionBytes;
  const out = new Uint8Array(sectionsEnd + (footerFor === null ? 0 : SHARD_FOOTER_BYTES)); // zero-filled: reserved fields need no writes
  const view = dataViewOf(out);

  out.set(SHARD_TAG, 0);
  view.setBigUint64(32, BigInt(SHARD_HEADER_VERSION), true);
  view.setBigUint64(40, BigInt(footerFor === null ? 0 : SHARD_FOOTER_BYTES), true);

  let at = SHARD_HEADER_BYTES;
  for (const file of content.files) {
    const flags = (file.verificationHashes !== null ? FILE_FLAG_WITH_VERIFICATION : 0) + (file.sha256 !== null ? FILE_FLAG_WITH_METADATA_EXT : 0); // `|` would make bit 31 negative
    out.set(file.fileHash, at);
    view.setUint32(at + 32, flags, true);
    view.setUint32(at + 36, file.terms.length, true);
    at += SHARD_RECORD_BYTES;
    for (const term of file.terms) {
      out.set(term.xorbHash, at);
      view.setUint32(at + 36, term.unpackedBytes, true);
      view.setUint32(at + 40, term.chunkStart, true);
      view.setUint32(at + 44, term.chunkEnd, true);
      at += SHARD_RECORD_BYTES;
    }
    for (const rangeHash of file.verificationHashes ?? []) {
      out.set(rangeHash, at);
      at += SHARD_RECORD_BYTES;
    }
    if (file.sha256 !== null) {
      out.set(file.sha256, at);
      at += SHARD_RECORD_BYTES;
    }
  }
  at = writeBookend(out, at);

  for (const xorb of content.xorbs) {
    out.set(xorb.xorbHash, at);
    view.setUint32(at + 32, xorb.flags, true);
    view.setUint32(at + 36, xorb.chunks.length, true);
    view.setUint32(at + 40, xorb.numBytesInXorb, true);
    view.setUint32(at + 44, xorb.numBytesOnDisk, true);
    at += SHARD_RECORD_BYTES;
    for (const chunk of xorb.chunks) {
      out.set(chunkHasher === null ? chunk.hash : chunkHasher.hash(chunk.hash), at);
      view.setUint32(at + 32, chunk.byteRangeStart, true);
      view.setUint32(at + 36, chunk.unpackedBytes, true);
      view.setUint32(at + 40, chunk.flags, true);
      at += SHARD_RECORD_BYTES;
    }
  }
  at = writeBookend(out, at);

  if (footerFor !== null) {
    const f = footerFor({ xorbSectionOffset, sectionsEnd });
    const lookupOffset = BigInt(f.lookupOffset);
    view.setBigUint64(at, BigInt(SHARD_FOOTER_VERSION), true);
    view.setBigUint64(at + 8, BigInt(SHARD_HEADER_BYTES), true);
    view.setBigUint64(at + 16, BigInt(f.xorbInfoOffset), true);
    view.setBigUint64(at + 24, lookupOffset, true);
    view.setBigUint64(at + 40, lookupOffset, true);
    view.setBigUint64(at + 56, lookupOffset, true);
    if (f.hmacKey !== null) out.set(f.hmacKey, at + 72);
    view.setBigUint64(at + 104, f.creationTimestamp, true);
    view.setBigUint64(at + 112, f.keyExpiry, true);
    view.setBigUint64(at + 168, f.storedBytesOnDisk, true);
    view.setBigUint64(at + 176, f.materializedBytes, true);
    view.setBigUint64(at + 184, f.storedBytes, true);
    view.setBigUint64(at + 192, BigInt(sectionsEnd), true);
  }
  return out;
}

function writeBookend(out: Uint8Array, at: number): number {
  out.fill(0xff, at, at + HASH_BYTES);
  return at + SHARD_RECORD_BYTES;
}

/** Checks what the parser would reject (or what would not fit the fields); returns the section size. */
function checkFilesAndMeasure(files: readonly ShardFile[]): number {
  let records = 1; // the bookend
  let withVerification: boolean | null = null;
  files.forEach((file, index) => {
    const where = `files[${index}]`;
    checkHash(file.fileHash, `${where}.fileHash`);
    checkNotBookend(file.fileHash, `${where}.fileHash`);
    checkU32(file.terms.length, `${where}.terms.length`);
    file.terms.forEach((term, t) => {
      checkHash(term.xorbHash, `${where}.terms[${t}].xorbHash`);
      checkU32(term.unpackedBytes, `${where}.terms[${t}].unpackedBytes`);
      checkU32(term.chunkStart, `${where}.terms[${t}].chunkStart`);
      checkU32(term.chunkEnd, `${where}.terms[${t}].chunkEnd`);
      if (term.chunkStart >= term.chunkEnd) {
        throw new RangeError(`${where}.terms[${t}] has chunk range [${term.chunkStart}, ${term.chunkEnd}); start must be < end`);
      }
    });
    const hasVerification = file.verificationHashes !== null;
    if (withVerification !== null && hasVerification !== withVerification) {
      throw new RangeError(`${where}: either every file of a shard carries verification hashes or none does`);
    }
    withVerification = hasVerification;
    if (file.verificationHashes !== null) {
      if (file.verificationHashes.length !== file.terms.length) {
        throw new RangeError(`${where} has ${file.terms.length} terms but ${file.verificationHashes.length} verification hashes`);
      }
      file.verificationHashes.forEach((h, t) => {
        checkHash(h, `${where}.verificationHashes[${t}]`);
      });
    }
    if (file.sha256 !== null) checkHash(file.sha256, `${where}.sha256`);
    records += 1 + file.terms.length * (hasVerification ? 2 : 1) + (file.sha256 !== null ? 1 : 0);
  });
  return records * SHARD_RECORD_BYTES;
}

function checkXorbsAndMeasure(xorbs: readonly ShardXorb[]): number {
  let records = 1; // the bookend
  xorbs.forEach((xorb, index) => {
    const where = `xorbs[${index}]`;
    checkHash(xorb.xorbHash, `${where}.xorbHash`);
    checkNotBookend(xorb.xorbHash, `${where}.xorbHash`);
    checkU32(xorb.flags, `${where}.flags`);
    checkU32(xorb.chunks.length, `${where}.chunks.length`);
    checkU32(xorb.numBytesInXorb, `${where}.numBytesInXorb`);
    checkU32(xorb.numBytesOnDisk, `${where}.numBytesOnDisk`);
    xorb.chunks.forEach((chunk, c) => {
      checkHash(chunk.hash, `${where}.chunks[${c}].hash`);
      checkU32(chunk.byteRangeStart, `${where}.chunks[${c}].byteRangeStart`);
      checkU32(chunk.unpackedBytes, `${where}.chunks[${c}].unpackedBytes`);
      checkU32(chunk.flags, `${where}.chunks[${c}].flags`);
    });
    records += 1 + xorb.chunks.length;
  });
  return records * SHARD_RECORD_BYTES;
}

function checkHash(hash: Uint8Array, what: string): void {
  if (!(hash instanceof Uint8Array) || hash.length !== HASH_BYTES) {
    throw new RangeError(`${what} must be ${HASH_BYTES} raw bytes`);
  }
}

/** A block header hash of all 0xFF would read back as the end of its section. */
function checkNotBookend(hash: Hash, what: string): void {
  if (isBookend(hash, 0)) throw new RangeError(`${what} is all 0xFF, which readers take for a section bookend`);
}

/** DataView.setUint32 silently wraps out-of-range values; refuse them instead. */
function checkU32(value: number, what: string): void {
  if (!Number.isInteger(value) || value < 0 || value > U32_MAX) {
    throw new RangeError(`${what} must be an integer in [0, 2^32 − 1], got ${value}`);
  }
}

function u64Input(value: number | bigint, what: string): bigint {
  if (typeof value === "number" && !Number.isSafeInteger(value)) {
    throw new RangeError(`${what} must be an integer, got ${value}`);
  }
  const big = BigInt(value);
  if (big < 0n || big > U64_MAX) throw new RangeError(`${what} must fit an unsigned 64-bit integer, got ${big}`);
  return big;
}

function sumXorbField(xorbs: readonly ShardXorb[], field: "numBytesInXorb" | "numBytesOnDisk"): bigint {
  let total = 0n;
  for (const xorb of xorbs) total += BigInt(xorb[field]);
  return total;
}
