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
import { LRUCache } from "lru-cache";
import { hashEquals, hashToHex, type Hash } from "../format/hash.js";
import type { CasMetadataStore } from "../metadata/cas.js";
import type { ByteRange } from "../format/ranges.js";
import { prepareFile, prepareXorb, type PreparedFile, type PreparedXorb } from "./reconstruction.js";
import { jsonUrlLiteral, type RangeUrlSigner } from "./reconstruction-render.js";

/** Large enough for the chunk tables of ~1 TB of 64 MiB xorbs, small next to a server's memory. */
export const DEFAULT_RECORD_CACHE_BYTES = 128 * 1024 * 1024;

/**
 * Xorbs loaded per metadata query while preparing a file: their unpacked chunk tables (~100
 * bytes per chunk as objects) are reduced to prefix arrays before the next batch loads, so a
 * file naming thousands of xorbs never holds them all as objects at once.
 */
const XORBS_PER_LOAD = 64;

/**
 * A least-recently-used map bounded by bytes (lru-cache's `maxSize`): `sizeOf` gives an
 * entry's cost (a positive integer); inserting past `maxBytes` evicts the least recently used
 * entries, and an entry costlier than the whole budget is not kept (it replaces, i.e. removes,
 * an entry of its key). Null for a budget of 0, which keeps nothing. With `reuse`, an entry
 * also expires once `reuse.ms` old (`reuseWindow`).
 */
export function byteBoundedLru<K extends {}, V extends {}>(
  maxBytes: number,
  sizeOf: (value: V) => number,
  reuse?: { ms: number; now: () => number },
): LRUCache<K, V> | null {
  if (!(Number.isSafeInteger(maxBytes) && maxBytes >= 0)) throw new RangeError(`the cache budget must be a whole number of bytes ≥ 0, got ${maxBytes}`);
  if (maxBytes === 0) return null;
  return new LRUCache<K, V>({ maxSize: maxBytes, sizeCalculation: sizeOf, ...(reuse && reuseWindow(reuse.ms, reuse.now)) });
}

/**
 * lru-cache options under which an entry is served while younger than `reuseMs` by the clock
 * `now` (whole milliseconds, as `Date.now`). lru-cache counts an entry stale once its age
 * *exceeds* `ttl`, hence one millisecond less; it reads the clock on every check
 * (`ttlResolution: 0`), so a pinned test clock is honoured. Needs `reuseMs` ≥ 2 (`ttl` 0 would
 * mean "never stale"): callers reuse nothing under a shorter window.
 */
function reuseWindow(reuseMs: number, now: () => number) {
  return { ttl: reuseMs - 1, ttlResolution: 0, perf: { now } };
}

/** The shortest window in which `reuseWindow` can reuse anything. */
const MIN_REUSE_MS = 2;

export interface RecordCacheOptions {
  /** Byte budget of all cached records (default DEFAULT_RECORD_CACHE_BYTES). */
  maxBytes?: number;
}

type CachedRecord = { kind: "file"; file: PreparedFile } | { kind: "xorb"; xorb: PreparedXorb };

/** A cached file also accounts for its xorbs, which it keeps alive. */
function recordBytes(record: CachedRecord): number {
  if (record.kind === "xorb") return record.xorb.footprintBytes;
  let bytes = record.file.footprintBytes;
  for (const xorb of record.file.xorbs) bytes += xorb.footprintBytes;
  return bytes;
}

/** Prepared files and xorbs, loaded from the metadata store on a miss. */
export class RecordCache {
  /** Null for a budget of 0. */
  private readonly lru: LRUCache<string, CachedRecord> | null;
  /** Loads in progress, so concurrent misses of one file query the store once. */
  private readonly loadingFiles = new Map<string, Promise<PreparedFile | null>>();

  constructor(
    private readonly store: Pick<CasMetadataStore, "getFile" | "getXorbs">,
    options: RecordCacheOptions = {},
  ) {
    this.lru = byteBoundedLru(options.maxBytes ?? DEFAULT_RECORD_CACHE_BYTES, recordBytes);
  }

  /** Bytes currently accounted (for tests and metrics). */
  get bytes(): number {
    return this.lru?.calculatedSize ?? 0;
  }

  /**
   * The prepared file, or null when no file has that hash. `hex` must be `hashToHex(hash)`
   * (callers have it from the URL). ReconstructionError `inconsistent_records` when its
   * records contradict each other.
   */
  async file(hash: Hash, hex: string = hashToHex(hash)): Promise<PreparedFile | null> {
    const cached = this.lru?.get(fileKey(hex));
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
      const cached = this.lru?.get(xorbKey(hex));
      if (cached !== undefined && cached.kind === "xorb") found.set(hex, cached.xorb);
      else missing.set(hex, hash);
    }
    const toLoad = [...missing.values()];
    for (let at = 0; at < toLoad.length; at += XORBS_PER_LOAD) {
      const records = await this.store.getXorbs(toLoad.slice(at, at + XORBS_PER_LOAD));
      for (const [hex, record] of records) {
        const xorb = prepareXorb(record);
        this.lru?.set(xorbKey(hex), { kind: "xorb", xorb });
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
    this.lru?.set(fileKey(hex), { kind: "file", file });
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
 * many files may see more, and then the least recently used are dropped. Bounds the memory per
 * prepared xorb alive to ~7 KiB for single-range URLs, 16 × 16 KiB (URL and its JSON form) for
 * the rare multi-range URLs near 8 KiB, plus the Map holding them.
 */
export const SIGNED_URLS_PER_XORB = 16;

interface SignedUrl {
  readonly url: string;
  /** `jsonUrlLiteral(url)`, made on first use. */
  json: string | undefined;
  /** When it was signed (by the signer's clock). */
  readonly signedAt: number;
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
 *
 * Each xorb's URLs are a plain Map in least-recently-used order (a hit moves to the end, the
 * first is dropped past SIGNED_URLS_PER_XORB): an lru-cache instance per xorb allocated typed
 * arrays of its own, which every cold reconstruction left behind for the young-generation
 * garbage collector to copy and sweep (scavenges of 3–5 ms, the p99 of cold reconstructions
 * at a million files; `npm run bench -- scale`).
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
    if (this.reuseMs < MIN_REUSE_MS) return { url: this.inner.sign(xorbHash, ranges), json: undefined, signedAt: now };
    const key = ranges.length === 1 ? `${ranges[0].start}-${ranges[0].end}` : rangeListKey(ranges);
    let urls = this.byXorb.get(xorbHash);
    if (urls === undefined) {
      urls = new Map();
      this.byXorb.set(xorbHash, urls);
    } else {
      const remembered = urls.get(key);
      if (remembered !== undefined) {
        urls.delete(key);
        if (now - remembered.signedAt < this.reuseMs) {
          urls.set(key, remembered);
          return remembered;
        }
      }
    }
    const signed: SignedUrl = { url: this.inner.sign(xorbHash, ranges), json: undefined, signedAt: now };
    if (urls.size >= SIGNED_URLS_PER_XORB) urls.delete(urls.keys().next().value!);
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
  /** Terms the answer lists (for `/metrics`). */
  readonly terms: number;
  gzipped: Buffer | undefined;
}

/**
 * Encoded answers, served again for the URL reuse window. An answer is a function of the file,
 * the range and the signed URLs, and the URLs are themselves reused for that window, so a hit
 * is byte-identical to what rendering would produce — without planning, rendering, encoding
 * or compressing again. Popular files are asked for again and again with the same ranges
 * (xet-core downloads in fixed blocks). Looked up only after the repository check.
 */
export class AnswerCache {
  /** Null when nothing is kept (no budget, or no reuse window). */
  private readonly lru: LRUCache<string, ReconstructionAnswer> | null;

  constructor(maxBytes: number, reuseMs: number, now: () => number) {
    this.lru = reuseMs >= MIN_REUSE_MS ? byteBoundedLru(maxBytes, answerBytes, { ms: reuseMs, now }) : null;
  }

  get(key: string): ReconstructionAnswer | undefined {
    return this.lru?.get(key);
  }

  put(key: string, body: Buffer, terms: number): ReconstructionAnswer {
    const answer: ReconstructionAnswer = { key, body, terms, gzipped: undefined };
    this.lru?.set(key, answer);
    return answer;
  }

  /** Keeps the gzipped form with the answer; a cached answer's cost grows, its age does not change. */
  addGzipped(answer: ReconstructionAnswer, gzipped: Buffer): Buffer {
    answer.gzipped = gzipped;
    if (this.lru?.has(answer.key)) this.lru.set(answer.key, answer, { noUpdateTTL: true });
    return gzipped;
  }
}

function answerBytes(answer: ReconstructionAnswer): number {
  return answer.body.length + (answer.gzipped?.length ?? 0) + answer.key.length * 2 + 200;
}
