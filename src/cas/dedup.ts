/**
 * The global-deduplication query (`GET /v1/chunks/{prefix}/{chunk_hash}`, docs/protocol.md §7):
 * for a chunk in the dedup index, a complete shard listing the xorbs that hold it, with every
 * chunk hash keyed by a server key so the answer never discloses raw chunk hashes (which the
 * term verification hashes of §3.6 rely on staying secret).
 *
 * The key comes from the dedup key seed and the UTC day. Deriving it rather than storing it
 * keeps scaled-out nodes in agreement with no shared state, and a daily rotation is what both
 * clients cope with best: hf.js tries every key it has seen for every lookup and xet-core
 * groups its cached answers per key, so a per-response key would defeat their caches (§7.3).
 */
import { createHmac } from "node:crypto";
import { bytesToPlainHex, HASH_BYTES, hashToHex, isZeroHash, type Hash } from "../format/hash.js";
import { SHARD_FOOTER_BYTES, SHARD_HEADER_BYTES, SHARD_RECORD_BYTES, type ShardXorb } from "../format/shard.js";
import { serializeFullShard } from "../format/shard-writer.js";
import type { CasMetadataStore, XorbRecord } from "../metadata/cas.js";
import type { GcRecords } from "../metadata/gc.js";

/** How long a client may use the keyed hashes of an answer: the production sample's 7 days. */
export const DEDUP_KEY_LIFETIME_SECONDS = 7 * 24 * 60 * 60;
/** At most this many xorbs per answer (the production sample holds 3). */
export const DEFAULT_MAX_DEDUP_XORBS = 16;
/** Answers stay far below the 64 MiB a shard may have; one 8,192-chunk xorb block is ~393 KB. */
export const DEFAULT_MAX_DEDUP_RESPONSE_BYTES = 64 * 1024 * 1024;

const KEY_DERIVATION_LABEL = "castor dedup key ";

/** The UTC calendar day of `when`, `YYYY-MM-DD`: the unit the dedup key rotates by. */
export function utcDay(when: Date): string {
  if (Number.isNaN(when.getTime())) throw new RangeError("utcDay needs a valid date");
  return when.toISOString().slice(0, 10);
}

/**
 * The dedup-response key of one UTC day: HMAC-SHA256(seed, "castor dedup key " + day). Every
 * node with the same seed derives the same key, and a key reveals nothing about the seed or
 * about other days' keys. An all-zero key means "hashes are not keyed" to clients, so that
 * (astronomically unlikely) output is replaced by a re-derivation.
 */
export function deriveDedupKey(seed: Uint8Array, day: string): Hash {
  if (seed.length === 0) throw new RangeError("the dedup key seed is empty");
  if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) throw new RangeError(`a day is written YYYY-MM-DD, got ${JSON.stringify(day)}`);
  let key: Hash = new Uint8Array(
    createHmac("sha256", seed)
      .update(KEY_DERIVATION_LABEL + day)
      .digest(),
  );
  for (let attempt = 1; isZeroHash(key); attempt++) {
    key = new Uint8Array(createHmac("sha256", seed).update(`${KEY_DERIVATION_LABEL}${day} retry ${attempt}`).digest());
  }
  return key;
}

/** Derives the key of the current day once and keeps it until the day changes. */
export class DedupKeyRing {
  private cachedDay = "";
  private cachedKey: Hash = new Uint8Array(HASH_BYTES);

  constructor(private readonly seed: Uint8Array) {
    if (seed.length === 0) throw new RangeError("the dedup key seed is empty");
  }

  keyFor(when: Date): Hash {
    const day = utcDay(when);
    if (day !== this.cachedDay) {
      this.cachedKey = deriveDedupKey(this.seed, day);
      this.cachedDay = day;
    }
    return this.cachedKey;
  }
}

export interface DedupServiceOptions {
  metadata: Pick<CasMetadataStore, "findDedupXorbs" | "getXorbs"> & Pick<GcRecords, "leaseObjects">;
  /** The dedup key seed (`CastorKeys.dedupKeySeed`); the same on every node. */
  dedupKeySeed: Uint8Array;
  now?: () => Date;
  maxXorbs?: number;
  maxResponseBytes?: number;
}

export class DedupService {
  private readonly metadata: DedupServiceOptions["metadata"];
  private readonly keys: DedupKeyRing;
  private readonly now: () => Date;
  private readonly maxXorbs: number;
  private readonly maxResponseBytes: number;

  constructor(options: DedupServiceOptions) {
    this.metadata = options.metadata;
    this.keys = new DedupKeyRing(options.dedupKeySeed);
    this.now = options.now ?? (() => new Date());
    this.maxXorbs = options.maxXorbs ?? DEFAULT_MAX_DEDUP_XORBS;
    this.maxResponseBytes = options.maxResponseBytes ?? DEFAULT_MAX_DEDUP_RESPONSE_BYTES;
    if (!Number.isSafeInteger(this.maxXorbs) || this.maxXorbs < 1) throw new RangeError(`maxXorbs must be an integer ≥ 1, got ${this.maxXorbs}`);
    if (!Number.isSafeInteger(this.maxResponseBytes) || this.maxResponseBytes < 1) {
      throw new RangeError(`maxResponseBytes must be a positive integer, got ${this.maxResponseBytes}`);
    }
  }

  /**
   * The dedup answer for `chunkHash` (§7.3), or null when the chunk is not in the index:
   * header footer_size 200, no files, one xorb block per xorb holding the chunk (oldest
   * registration first, all of its chunks in order with cumulative uncompressed offsets),
   * chunk hashes keyed with today's key, expiry = creation + 7 days, no lookup tables.
   * At most `maxXorbs` xorbs and about `maxResponseBytes`; the first xorb is always included.
   */
  async query(chunkHash: Hash): Promise<Uint8Array | null> {
    const found = await this.metadata.findDedupXorbs(chunkHash, this.maxXorbs);
    if (found.length === 0) return null;
    // The client will name these xorbs in its shard: a lease keeps them from a garbage
    // collection running now, and one being deleted already is left out of the answer.
    const leases = await this.metadata.leaseObjects("xorb", found);
    const xorbHashes = found.filter((hash) => leases.has(bytesToPlainHex(hash)));
    if (xorbHashes.length === 0) return null;
    const records = await this.metadata.getXorbs(xorbHashes);

    const blocks: ShardXorb[] = [];
    // Header, footer and the bookends of the two sections.
    let responseBytes = SHARD_HEADER_BYTES + SHARD_FOOTER_BYTES + 2 * SHARD_RECORD_BYTES;
    for (const xorbHash of xorbHashes) {
      const record = records.get(hashToHex(xorbHash));
      if (record === undefined) continue;
      const blockBytes = (1 + record.chunks.length) * SHARD_RECORD_BYTES;
      if (blocks.length > 0 && responseBytes + blockBytes > this.maxResponseBytes) break;
      blocks.push(xorbBlockOf(record));
      responseBytes += blockBytes;
    }
    // The index names xorbs that are recorded before their chunks are indexed, so this only
    // happens if the metadata lost rows: answer "not tracked" rather than an empty shard.
    if (blocks.length === 0) return null;

    const when = this.now();
    const creation = Math.floor(when.getTime() / 1000);
    return serializeFullShard(
      { files: [], xorbs: blocks },
      { hmacKey: this.keys.keyFor(when), creationTimestamp: creation, keyExpiry: creation + DEDUP_KEY_LIFETIME_SECONDS },
    );
  }
}

/**
 * A xorb block built from castor's own records, never from what an uploader claimed. Flags
 * and `num_bytes_on_disk` are 0, as in the production answer.
 */
function xorbBlockOf(record: XorbRecord): ShardXorb {
  let offset = 0;
  const chunks = record.chunks.map((chunk) => {
    const entry = { hash: chunk.hash, byteRangeStart: offset, unpackedBytes: chunk.uncompressedLength, flags: 0 };
    offset += chunk.uncompressedLength;
    return entry;
  });
  return { xorbHash: record.hash, flags: 0, numBytesInXorb: offset, numBytesOnDisk: 0, chunks };
}
