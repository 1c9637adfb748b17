/**
 * The read path's in-memory caches. `RecordCache`: immutable metadata — prepared xorbs (chunk
 * prefix arrays) and prepared files (term arrays pointing at their xorbs) — in one LRU bounded
 * by bytes. `ReusingUrlSigner`: signed transfer URLs, reused for a twentieth of their lifetime.
 * `AnswerCache`: encoded reconstruction answers, reused for as long.
 *
 * Xorb and file records are content-addressed, so a cached entry can never be stale; only the
 * *access* question (is this file in the token's repository?) can change, and it is not cached
 * here — callers ask the metadata store on every request. A file that is not found is not
 * remembered either: it may be registered a moment later.
 *
 * A cached file holds its xorbs directly, so a request costs one cache lookup whatever the
 * number of terms; its byte cost counts those xorbs too (an overcount when files share xorbs,
 * which keeps the bound a true upper bound).
 */
import { hashEquals, hashToHex, type Hash } from "../format/hash.js";
import type { CasMetadataStore } from "../metadata/cas.js";
import type { ByteRange } from "../format/ranges.js";
import { jsonUrlLiteral, prepareFile, prepareXorb, type PreparedFile, type PreparedXorb, type RangeUrlSigner } from "./reconstruction.js";

/** Large enough for the chunk tables of ~1 TB of 64 MiB xorbs, small next to a server's memory. */
export const DEFAULT_RECORD_CACHE_BYTES = 128 * 1024 * 1024;

/**
 * Xorbs loaded per metadata query while preparing a file: their unpacked chunk tables (~100
 * bytes per chunk as objects) are reduced to prefix arrays before the next batch loads, so a
 * file naming thousands of xorbs never holds them all as objects at once.
 */
const XORBS_PER_LOAD = 64;

/**
 * A least-recently-used map whose entries each declare a byte cost; inserting past
 * `maxBytes` evicts the oldest entries. An entry costlier than the whole budget is not kept.
 * (A Map's insertion order is the recency order: a hit re-inserts its key.)
 */
export class ByteBoundedLru<K, V> {
  private readonly entries = new Map<K, { value: V; bytes: number }>();
  private totalBytes = 0;

  constructor(readonly maxBytes: number) {
    if (!(Number.isSafeInteger(maxBytes) && maxBytes >= 0)) throw new RangeError(`the cache budget must be a whole number of bytes ≥ 0, got ${maxBytes}`);
  }

  get bytes(): number {
    return this.totalBytes;
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: K): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry.value;
  }

  /** Whether `key` is cached, without refreshing it. */
  has(key: K): boolean {
    return this.entries.has(key);
  }

  set(key: K, value: V, bytes: number): void {
    if (!(bytes >= 0)) throw new RangeError(`an entry's byte cost must be ≥ 0, got ${bytes}`);
    this.delete(key);
    if (bytes > this.maxBytes) return;
    this.entries.set(key, { value, bytes });
    this.totalBytes += bytes;
    for (const [oldestKey, oldest] of this.entries) {
      if (this.totalBytes <= this.maxBytes) break;
      this.entries.delete(oldestKey);
      this.totalBytes -= oldest.bytes;
    }
  }

  delete(key: K): boolean {
    const entry = this.entries.get(key);
    if (entry === undefined) return false;
    this.entries.delete(key);
    this.totalBytes -= entry.bytes;
    return true;
  }

  clear(): void {
    this.entries.clear();
    this.totalBytes = 0;
  }
}

export interface RecordCacheOptions {
  /** Byte budget of all cached records (default DEFAULT_RECORD_CACHE_BYTES). */
  maxBytes?: number;
}

type CachedRecord = { kind: "file"; file: PreparedFile } | { kind: "xorb"; xorb: PreparedXorb };

/** Prepared files and xorbs, loaded from the metadata store on a miss. */
export class RecordCache {
  private readonly lru: ByteBoundedLru<string, CachedRecord>;
  /** Loads in progress, so concurrent misses of one file query the store once. */
  private readonly loadingFiles = new Map<string, Promise<PreparedFile | null>>();

  constructor(
    private readonly store: Pick<CasMetadataStore, "getFile" | "getXorbs">,
    options: RecordCacheOptions = {},
  ) {
    this.lru = new ByteBoundedLru(options.maxBytes ?? DEFAULT_RECORD_CACHE_BYTES);
  }

  /** Bytes currently accounted (for tests and metrics). */
  get bytes(): number {
    return this.lru.bytes;
  }

  /**
   * The prepared file, or null when no file has that hash. `hex` must be `hashToHex(hash)`
   * (callers have it from the URL). ReconstructionError `inconsistent_records` when its
   * records contradict each other.
   */
  async file(hash: Hash, hex: string = hashToHex(hash)): Promise<PreparedFile | null> {
    const cached = this.lru.get(fileKey(hex));
    if (cached !== undefined && cached.kind === "file") return cached.file;
    let loading = this.loadingFiles.get(hex);
    if (loading === undefined) {
      loading = this.loadFile(hash, hex).finally(() => this.loadingFiles.delete(hex));
      this.loadingFiles.set(hex, loading);
    }
    return loading;
  }

  /** The prepared xorb, or null when no xorb has that hash. */
  async xorb(hash: Hash): Promise<PreparedXorb | null> {
    const hex = hashToHex(hash);
    const found = await this.xorbs([hash]);
    return found.get(hex) ?? null;
  }

  /** The prepared xorbs among `hashes` (absent ones are missing from the map), keyed by hex. */
  async xorbs(hashes: readonly Hash[]): Promise<Map<string, PreparedXorb>> {
    const found = new Map<string, PreparedXorb>();
    const missing = new Map<string, Hash>();
    for (const hash of hashes) {
      const hex = hashToHex(hash);
      if (found.has(hex) || missing.has(hex)) continue;
      const cached = this.lru.get(xorbKey(hex));
      if (cached !== undefined && cached.kind === "xorb") found.set(hex, cached.xorb);
      else missing.set(hex, hash);
    }
    const toLoad = [...missing.values()];
    for (let at = 0; at < toLoad.length; at += XORBS_PER_LOAD) {
      const records = await this.store.getXorbs(toLoad.slice(at, at + XORBS_PER_LOAD));
      for (const [hex, record] of records) {
        const xorb = prepareXorb(record);
        this.lru.set(xorbKey(hex), { kind: "xorb", xorb }, xorb.footprintBytes);
        found.set(hex, xorb);
      }
    }
    return found;
  }

  private async loadFile(hash: Hash, hex: string): Promise<PreparedFile | null> {
    const record = await this.store.getFile(hash);
    if (record === null) return null;
    const xorbHashes: Hash[] = [];
    let previous: Hash | null = null;
    for (const term of record.terms) {
      // Consecutive terms usually share a xorb; skip the repeats before any hex conversion.
      if (previous !== null && hashEquals(previous, term.xorbHash)) continue;
      previous = term.xorbHash;
      xorbHashes.push(term.xorbHash);
    }
    const xorbs = await this.xorbs(xorbHashes);
    const file = prepareFile(record, xorbs);
    let bytes = file.footprintBytes;
    for (const xorb of file.xorbs) bytes += xorb.footprintBytes;
    this.lru.set(fileKey(hex), { kind: "file", file }, bytes);
    return file;
  }
}

function fileKey(hex: string): string {
  return `f${hex}`;
}

function xorbKey(hex: string): string {
  return `x${hex}`;
}

/**
 * Reuse window of a signed URL: a twentieth of its lifetime, at most 30 s. A reconstruction
 * answer holding the URL may in turn be served again for the same window, so every URL handed
 * out keeps at least 90% of its lifetime (clients re-query on 403 anyway).
 */
export function urlReuseMsFor(transferUrlTtlSeconds: number): number {
  return Math.min(MAX_URL_REUSE_MS, Math.floor((transferUrlTtlSeconds * 1000) / 20));
}

export const MAX_URL_REUSE_MS = 30_000;

/**
 * Signed URLs remembered per xorb. A file's terms use few range sets per xorb; a xorb shared by
 * many files may see more, and then the oldest are dropped. Bounds the memory per prepared xorb
 * alive to ~7 KiB for single-range URLs, 16 × 16 KiB (URL and its JSON form) for the rare
 * multi-range URLs near 8 KiB.
 */
export const SIGNED_URLS_PER_XORB = 16;

interface SignedUrl {
  readonly url: string;
  readonly signedAt: number;
  /** `jsonUrlLiteral(url)`, made on first use. */
  json: string | undefined;
}

/**
 * Hands out the same signed URL for the same xorb ranges for a short while instead of signing
 * again. Signing (an HMAC per URL) is most of the cost of answering a large file's
 * reconstruction — 160 signatures for a 10 GiB file — and popular files are asked for again
 * and again. Sharing a URL grants nothing new: it authorises exactly the byte ranges that every
 * caller it is handed to is entitled to (each one passed the file ↔ repository check), and it
 * expires when it would have anyway.
 *
 * URLs are remembered per xorb hash *object* in a WeakMap: the planner passes the hash of a
 * cached PreparedXorb, which lives as long as the record stays cached, so remembered URLs go
 * with their xorb and no hash is converted to a string per call. A caller passing fresh hash
 * objects simply gets fresh signatures.
 */
export class ReusingUrlSigner implements RangeUrlSigner {
  private readonly byXorb = new WeakMap<Hash, Map<string, SignedUrl>>();

  constructor(
    private readonly inner: RangeUrlSigner,
    readonly reuseMs: number,
    private readonly now: () => number = Date.now,
  ) {
    if (!(reuseMs >= 0)) throw new RangeError(`the URL reuse window must be ≥ 0 ms, got ${reuseMs}`);
  }

  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    return this.remembered(xorbHash, ranges).url;
  }

  signAsJson(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    const signed = this.remembered(xorbHash, ranges);
    return (signed.json ??= jsonUrlLiteral(signed.url));
  }

  private remembered(xorbHash: Hash, ranges: readonly ByteRange[]): SignedUrl {
    const now = this.now();
    if (this.reuseMs === 0) return { url: this.inner.sign(xorbHash, ranges), signedAt: now, json: undefined };
    const key = ranges.length === 1 ? `${ranges[0].start}-${ranges[0].end}` : rangeListKey(ranges);
    let urls = this.byXorb.get(xorbHash);
    if (urls === undefined) {
      urls = new Map();
      this.byXorb.set(xorbHash, urls);
    } else {
      const remembered = urls.get(key);
      if (remembered !== undefined && now - remembered.signedAt < this.reuseMs) return remembered;
      if (remembered === undefined && urls.size >= SIGNED_URLS_PER_XORB) urls.delete(urls.keys().next().value!);
    }
    const signed: SignedUrl = { url: this.inner.sign(xorbHash, ranges), signedAt: now, json: undefined };
    urls.set(key, signed);
    return signed;
  }
}

function rangeListKey(ranges: readonly ByteRange[]): string {
  let key = "";
  for (const range of ranges) key += `${range.start}-${range.end},`;
  return key;
}

/** ~450 answers for a 10 GiB file (73 KiB each). */
export const DEFAULT_ANSWER_CACHE_BYTES = 32 * 1024 * 1024;

/** An encoded reconstruction answer: JSON, pure ASCII, and its gzipped form once made. */
export interface ReconstructionAnswer {
  readonly key: string;
  readonly body: Buffer;
  gzipped: Buffer | undefined;
  readonly createdAt: number;
}

/**
 * Encoded answers, served again for the URL reuse window. An answer is a function of the file,
 * the range and the signed URLs, and the URLs are themselves reused for that window, so a hit
 * is byte-identical to what rendering would produce — without planning, rendering, encoding
 * or compressing again. Popular files are asked for again and again with the same ranges
 * (xet-core downloads in fixed blocks). Looked up only after the repository check.
 */
export class AnswerCache {
  private readonly lru: ByteBoundedLru<string, ReconstructionAnswer>;

  constructor(
    maxBytes: number,
    private readonly reuseMs: number,
    private readonly now: () => number,
  ) {
    this.lru = new ByteBoundedLru(maxBytes);
  }

  get(key: string): ReconstructionAnswer | undefined {
    const answer = this.lru.get(key);
    return answer !== undefined && this.now() - answer.createdAt < this.reuseMs ? answer : undefined;
  }

  put(key: string, body: Buffer): ReconstructionAnswer {
    const answer: ReconstructionAnswer = { key, body, gzipped: undefined, createdAt: this.now() };
    if (this.reuseMs > 0) this.lru.set(key, answer, this.cost(answer));
    return answer;
  }

  addGzipped(answer: ReconstructionAnswer, gzipped: Buffer): Buffer {
    answer.gzipped = gzipped;
    if (this.lru.has(answer.key)) this.lru.set(answer.key, answer, this.cost(answer));
    return gzipped;
  }

  private cost(answer: ReconstructionAnswer): number {
    return answer.body.length + (answer.gzipped?.length ?? 0) + answer.key.length * 2 + 200;
  }
}
