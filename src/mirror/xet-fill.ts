/**
 * Filling castor with one Xet file of the upstream hub, fetched through the upstream's own Xet
 * protocol and stored as castor's Xet file of the same file hash:
 *
 * 1. A read token from the upstream's token route (at the commit), then the reconstruction of
 *    the whole file from the upstream CAS (V2, V1 when V2 is not served): its terms, chunk
 *    ranges of upstream xorbs, and the byte ranges of those xorbs to fetch (on another host).
 * 2. Which chunks castor holds already: a term whose xorb castor has (the same xorb hash, e.g.
 *    uploaded here by hf_xet), or whose chunks an earlier fill stored (chunk runs, see
 *    ../metadata/mirror.ts), is read from castor's own store; a fetch range is asked of the
 *    upstream only for terms castor does not hold whole. A range must be fetched whole (the
 *    upstream signs exact ranges), so a term held in part still costs its range.
 * 3. The file's bytes are produced in order — fetched ranges decoded chunk by chunk as they
 *    arrive (`ChunkStreamDecoder`), held terms read and verified from castor's xorbs — and go to
 *    `output` (the clients reading along, broadcast.ts) and to the file hash (the chunk hashes).
 * 4. Each fetched range, once complete, is stored: as the upstream's xorb itself when it turns
 *    out to be a whole xorb (its chunks hash to the xorb's hash), otherwise its chunks not held
 *    yet are packed into castor's xorbs (xorb-packer.ts), their serialized bytes copied as they
 *    came. Either way the bytes stored were decoded and hashed chunk by chunk here.
 * 5. Verified before published: the file hash of the chunks must be the upstream's Xet hash
 *    and their total the size the tree states. The Xet hash commits to every byte (a Merkle tree
 *    of BLAKE3 chunk hashes), so the tree's SHA-256 (`lfs.oid`) is recorded as it states it, as
 *    castor records the one a shard states for an upload: computing it too would cost as much
 *    CPU again as hashing the chunks (SHA-256 runs at a fifth of BLAKE3's speed here) and prove
 *    nothing more about the bytes. Only then is the file registered (its terms now naming
 *    castor's xorbs), linked to the mirrored repository, and recorded with the chunk runs it
 *    proved. A mismatch registers nothing and throws `MirrorFillError` (`verification`);
 *    whatever was stored meanwhile is unreferenced, and garbage collection removes it.
 *
 * Runs are recorded only from a verified file: a run says "chunk i of upstream xorb X is chunk j
 * of castor xorb Y", which only a file hash over those very chunks proves.
 */
import type { CasClient } from "../client/cas.js";
import { ChunkStreamDecoder } from "../client/chunk-stream.js";
import { Limiter } from "../concurrency.js";
import { ReconstructionQueries, ReconstructionWindow, spanKey, type ReconstructionTerm } from "../client/reconstruction-query.js";
import {
  MerkleTreeBuilder,
  bytesToPlainHex,
  fileHashOf,
  hashEquals,
  hashFromHex,
  hashToHex,
  isGlobalDedupEligible,
  xorbHash,
  type FetchSource,
  type Hash,
} from "../format/index.js";
import type { CasMetadataStore, FileRecord, FileTerm, XorbRecord } from "../metadata/cas.js";
import type { GcRecords } from "../metadata/gc.js";
import type { ChunkRun, MirrorRecords } from "../metadata/mirror.js";
import { isUpstreamError } from "../upstream/errors.js";
import type { UpstreamHub, UpstreamRepoRef } from "../upstream/hub.js";
import type { SpanTap, SpanTaps } from "./span-taps.js";
import { XorbPacker } from "./xorb-packer.js";
import { MirrorFillError, registrationHash, type FillOutput } from "./fill-common.js";

export interface XetFillDeps {
  upstream: Pick<UpstreamHub, "cas" | "failure" | "origin">;
  store: Pick<CasMetadataStore, "getXorbs" | "registerShard"> &
    Pick<GcRecords, "leaseObjects"> & { mirror: Pick<MirrorRecords, "findChunkRuns" | "putMirroredFile"> };
  /** Stores a xorb the fill built (XorbIngestService.storeValidated). */
  storeXorb: (record: XorbRecord, bytes: Uint8Array) => Promise<unknown>;
  /** Reads chunks castor holds (FileReader.openTerms). */
  readTerms: (terms: readonly FileTerm[]) => AsyncIterable<Uint8Array>;
  now?: () => Date;
  /** Upstream ranges fetched at once (default 4). */
  concurrency?: number;
  /** Bytes of upstream ranges being fetched, read or stored at once (default 256 MiB, so ranges being stored do not stall the next fetches; one range is fetched anyway). */
  bufferBytes?: number;
  /** Serialized bytes of the xorbs it packs (default 16 MiB). */
  xorbBytes?: number;
  /** Told of bytes as they are fetched from the upstream. */
  onFetched?: (bytes: number) => void;
  /** Told of the upstream xorbs the file's reconstruction names, once it is known. */
  onPlan?: (xorbHexes: string[]) => void;
  /** Where clients reading upstream ranges through castor's CAS find the ranges being fetched (span-taps.ts). */
  taps?: SpanTaps;
}

/** The file to fill: what the upstream's tree states about it. */
export interface XetFillTarget {
  repo: UpstreamRepoRef;
  /** The upstream commit whose tree names the file (its read token is asked at that commit). */
  commit: string;
  path: string;
  /** The mirrored repository the file is registered in. */
  repoId: number;
  xetHash: string;
  size: number;
  /** The tree's `lfs.oid`; null when it states none. */
  sha256: string | null;
}

export interface FillResult {
  /** Bytes fetched from the upstream for it. */
  fetchedBytes: number;
  /** Bytes of it castor held already. */
  heldBytes: number;
}

const DEFAULT_CONCURRENCY = 4;
const DEFAULT_BUFFER_BYTES = 256 * 1024 * 1024;

/** A castor xorb a chunk is in: one stored already (by hash), or one of the fill's packer (by number). */
type XorbRef = { hash: Hash } | { packed: number };

interface Place {
  xorb: XorbRef;
  index: number;
}

export async function fillXetFile(deps: XetFillDeps, target: XetFillTarget, output: FillOutput): Promise<FillResult> {
  return new XetFill(deps, target, output).run();
}

class XetFill {
  private readonly places = new ChunkPlaces();
  private readonly packer: XorbPacker;
  private readonly limiter: Limiter;
  private readonly bufferBytes: number;
  /** Set when the fill failed: no range is fetched any more. */
  private ended = false;
  /** The ranges this fill fetches, as clients reading along see them. */
  private readonly taps: SpanTap[] = [];
  private readonly what: string;
  /** Xorbs the fill stored whole (upstream xorbs fetched whole), by hex: for dedup entries. */
  private readonly storedWhole = new Map<string, XorbRecord>();
  /** Chunks this fill packed: upstream xorb, chunk index, byte offset there, and where castor put it. */
  private readonly packedChunks: { upstream: Hash; index: number; offset: number; place: Place }[] = [];
  /** Span completions (packing, whole-xorb stores) still running. */
  private readonly spanWork: Promise<void>[] = [];
  /** Per fetched term (by index), its chunks' lengths: to place them in castor's xorbs at the end. */
  private readonly fetchedLengths = new Map<number, Uint32Array>();
  private cas: CasClient | null = null;
  private fetchedBytes = 0;
  private heldBytes = 0;

  constructor(
    private readonly deps: XetFillDeps,
    private readonly target: XetFillTarget,
    private readonly output: FillOutput,
  ) {
    this.packer = new XorbPacker(deps.storeXorb, deps.xorbBytes);
    this.limiter = new Limiter(deps.concurrency ?? DEFAULT_CONCURRENCY);
    this.bufferBytes = deps.bufferBytes ?? DEFAULT_BUFFER_BYTES;
    this.what = `fetching ${JSON.stringify(target.path)} of ${target.repo.type}:${target.repo.name} (Xet file ${target.xetHash}) from the upstream hub ${deps.upstream.origin}`;
  }

  async run(): Promise<FillResult> {
    try {
      return await this.fill();
    } catch (error) {
      this.ended = true;
      const failure = isUpstreamError(error) || error instanceof MirrorFillError ? error : this.deps.upstream.failure(error, this.what);
      for (const tap of this.taps) tap.failed(failure as Error);
      await this.packer.settle();
      await Promise.allSettled(this.spanWork);
      throw failure;
    } finally {
      for (const tap of this.taps) this.deps.taps?.close(tap);
    }
  }

  private async fill(): Promise<FillResult> {
    const { target } = this;
    const expected = hashFromHex(target.xetHash);
    const tree = new MerkleTreeBuilder();
    let total = 0;
    const emit = async (bytes: Uint8Array) => {
      total += bytes.length;
      await this.output.write(bytes);
    };

    let terms: ReconstructionTerm[] = [];
    let window: ReconstructionWindow | null = null;
    if (target.size > 0) {
      this.cas = this.deps.upstream.cas(target.repo, target.commit);
      window = new ReconstructionWindow(new ReconstructionQueries(this.cas, target.xetHash), 0, target.size - 1);
      const reconstruction = await window.load();
      if (reconstruction === null) throw this.bad(`the upstream CAS has no bytes of it (416), though its tree says ${target.size} bytes`);
      if (reconstruction.offsetIntoFirstRange !== 0) throw this.bad("the reconstruction of the whole file does not start at its first byte");
      terms = reconstruction.terms;
      this.deps.onPlan?.([...new Set(terms.map((term) => term.xorbHex))]);
    }
    const held = await this.plan(terms);

    // Fetch ranges of the terms castor does not hold whole, a few ahead of the writer: at most
    // `bufferBytes` of ranges being fetched, read or stored at once (one range in any case). A
    // range is stored in the background once fetched, and its room goes to the next range when
    // it is stored, so the writer never waits for the disk, only for the upstream.
    const spans = new Map<string, SpanFetch>();
    const inFlight = new Set<Promise<void>>();
    let buffered = 0;
    let ahead = 0;
    const schedule = () => {
      for (; ahead < terms.length && !this.ended; ahead++) {
        if (held[ahead] !== null) continue;
        const span = terms[ahead].span;
        const key = spanKey(span);
        const entry = spans.get(key);
        if (entry !== undefined) {
          entry.uses++;
          continue;
        }
        const bytes = span.bytes.end - span.bytes.start + 1;
        if (buffered > 0 && buffered + bytes > this.bufferBytes) break;
        const fetch = this.fetchSpan(window!, span, bytes);
        spans.set(key, fetch);
        buffered += bytes;
        inFlight.add(fetch.done);
        const release = () => {
          buffered -= bytes;
          inFlight.delete(fetch.done);
          schedule();
        };
        fetch.done.then(release, release);
      }
    };

    for (let cursor = 0; cursor < terms.length; cursor++) {
      const term = terms[cursor];
      const placed = held[cursor];
      let termBytes = 0;
      schedule();
      // Its range waits for room: ranges before it still being stored (a failed one fails here).
      while (placed === null && ahead <= cursor) {
        await Promise.race(inFlight);
        schedule();
      }
      if (placed !== null) {
        // Held: read from castor's xorbs (verified chunk by chunk there), chunk hashes from their tables.
        for (const { hash, length } of placed.chunks) tree.push(hash, length);
        if (this.output.wantsBytes === false && this.output.skip !== undefined) {
          // Nobody reads along: castor holds these bytes, so there is nothing to read back.
          termBytes = placed.chunks.reduce((sum, chunk) => sum + chunk.length, 0);
          total += termBytes;
          await this.output.skip(termBytes);
        } else {
          for await (const piece of this.deps.readTerms(placed.terms)) {
            termBytes += piece.length;
            await emit(piece);
          }
        }
        this.heldBytes += termBytes;
      } else {
        const key = spanKey(term.span);
        const entry = spans.get(key)!;
        const { decoder } = entry;
        const lengths = new Uint32Array(term.chunkEnd - term.chunkStart);
        this.fetchedLengths.set(cursor, lengths);
        const first = term.chunkStart - term.span.chunks.start;
        for (let c = first; c < term.chunkEnd - term.span.chunks.start; c++) {
          if (decoder.decodedCount <= c) {
            await decoder.whenDecoded(c + 1);
            if (decoder.decodedCount <= c) throw this.bad(`the range of xorb ${term.xorbHex} ended before chunk ${c}`);
          }
          const chunk = decoder.chunks[c];
          lengths[c - first] = chunk.length;
          tree.push(decoder.hashes[c], chunk.length);
          termBytes += chunk.length;
          await emit(chunk);
        }
        if (--entry.uses === 0) spans.delete(key);
      }
      if (termBytes !== term.unpackedLength) {
        throw this.bad(
          `chunks ${term.chunkStart}..${term.chunkEnd} of xorb ${term.xorbHex} hold ${termBytes} bytes; the reconstruction says ${term.unpackedLength}`,
        );
      }
    }

    const actual = fileHashOf(tree);
    if (!hashEquals(actual, expected) || total !== target.size) {
      const why = !hashEquals(actual, expected)
        ? `its bytes hash to the Xet hash ${hashToHex(actual)}`
        : `it has ${total} bytes, not the ${target.size} its tree states`;
      throw new MirrorFillError("verification", `${this.what}: the upstream sent bytes that do not match its tree: ${why}; nothing was stored as that file`);
    }
    // The readers along have the whole file, verified: they need not wait for the last stores.
    for (const tap of this.taps) tap.verified();
    await this.output.verified?.();
    // Every range fetched and stored (a range's own promise settles after its store starts).
    await Promise.all(inFlight);
    await Promise.all(this.spanWork);

    const packedHashes = await this.packer.finish();
    const sha256 = target.sha256 === null ? null : new Uint8Array(Buffer.from(target.sha256, "hex"));
    const record: FileRecord = { hash: expected, size: total, terms: this.castorTerms(terms, held, packedHashes), sha256 };
    await this.deps.store.registerShard({
      shardHash: registrationHash(expected),
      repoId: target.repoId,
      files: [record],
      dedupEntries: await this.dedupEntries(record, packedHashes),
    });
    const now = this.deps.now?.() ?? new Date();
    await this.deps.store.mirror.putMirroredFile(
      { kind: "xet", hash: expected, gitOid: null, size: total, fetchedBytes: this.fetchedBytes, fetchedAt: now, lastUsedAt: now },
      this.runs(packedHashes),
    );
    return { fetchedBytes: this.fetchedBytes, heldBytes: this.heldBytes };
  }

  /**
   * For each term: null when its range must be fetched, otherwise castor's terms holding it
   * (leased, so a garbage collection running meanwhile keeps them) and its chunks' hashes.
   */
  private async plan(terms: readonly ReconstructionTerm[]): Promise<(HeldTerm | null)[]> {
    const upstreamXorbs = distinctHashes(terms.map((term) => term.xorbHash));
    const direct = await this.deps.store.getXorbs(upstreamXorbs);
    const runs = await this.deps.store.mirror.findChunkRuns(upstreamXorbs.filter((hash) => !direct.has(hashToHex(hash))));
    const runXorbs = await this.deps.store.getXorbs(distinctHashes(runs.map((run) => run.xorb)));
    const tables = new Map([...direct, ...runXorbs]);
    const leased = await this.deps.store.leaseObjects(
      "xorb",
      [...tables.values()].map((xorb) => xorb.hash),
    );
    const usable = (hash: Hash) => leased.has(bytesToPlainHex(hash)) && tables.has(hashToHex(hash));
    for (const xorb of direct.values()) if (usable(xorb.hash)) this.places.addWhole(xorb.hash, xorb.chunks.length);
    for (const run of runs)
      if (usable(run.xorb) && run.start + (run.upstreamEnd - run.upstreamStart) <= tables.get(hashToHex(run.xorb))!.chunks.length) this.places.addRun(run);

    return terms.map((term) => {
      const chunks: { hash: Hash; length: number }[] = [];
      const castor: FileTerm[] = [];
      for (let i = term.chunkStart; i < term.chunkEnd; i++) {
        const place = this.places.locate(term.xorbHash, i);
        if (place === null || !("hash" in place.xorb)) return null;
        const chunk = tables.get(hashToHex(place.xorb.hash))!.chunks[place.index];
        chunks.push({ hash: chunk.hash, length: chunk.uncompressedLength });
        appendTerm(castor, place.xorb.hash, place.index, chunk.uncompressedLength);
      }
      return { terms: castor, chunks };
    });
  }

  /** Starts fetching one range; its chunks decode as they arrive, and the range is stored once complete. */
  private fetchSpan(window: ReconstructionWindow, span: FetchSource, bytes: number): SpanFetch {
    const what = `${this.what}: chunks ${span.chunks.start}..${span.chunks.end} of xorb ${span.xorbHex}`;
    const decoder = new ChunkStreamDecoder(new Uint8Array(bytes), span.chunks.end - span.chunks.start, what);
    const tap = this.deps.taps?.open(span.xorbHex, span.bytes.start, span.bytes.end, decoder.bytes);
    if (tap !== undefined) this.taps.push(tap);
    const http = this.cas!.http;
    const done = this.limiter
      .run(() =>
        window.fetchSpan(span, async (url) => {
          // No Authorization header: the upstream's transfer URLs authorise themselves.
          const { status } = await http.getInto(
            { what, url, headers: { range: `bytes=${span.bytes.start}-${span.bytes.end}` }, passStatuses: [403] },
            decoder.bytes,
            (filled) => {
              decoder.advance(filled);
              tap?.progress(filled);
            },
          );
          if (status === 403) return "expired";
          decoder.finish();
          return "done";
        }),
      )
      .then(() => {
        this.fetchedBytes += bytes;
        this.deps.onFetched?.(bytes);
        if (this.ended) return;
        const work = this.storeSpan(span, decoder, tap);
        this.spanWork.push(work);
        return work;
      })
      .catch((error: unknown) => {
        decoder.fail(error);
        throw error;
      });
    done.catch(() => undefined);
    return { decoder, done, uses: 1 };
  }

  /** Stores a fetched range: whole, when it is its upstream xorb; otherwise the chunks castor does not hold, packed. */
  private async storeSpan(span: FetchSource, decoder: ChunkStreamDecoder, tap: SpanTap | undefined): Promise<void> {
    const upstream = hashFromHex(span.xorbHex);
    const first = span.chunks.start;
    const count = decoder.decodedCount;
    if (first === 0 && !this.places.holdsWhole(upstream)) {
      const chunks = decoder.chunks.map((chunk, k) => ({ hash: decoder.hashes[k], uncompressedLength: chunk.length, serializedEnd: decoder.ends[k] }));
      if (hashEquals(xorbHash(chunks.map((chunk) => ({ hash: chunk.hash, size: chunk.uncompressedLength }))), upstream)) {
        const record: XorbRecord = {
          hash: upstream,
          serializedLength: decoder.bytes.length,
          uncompressedLength: chunks.reduce((sum, c) => sum + c.uncompressedLength, 0),
          chunks,
        };
        // The upstream xorb itself, proven: readers along may have all of it.
        tap?.verified();
        await this.deps.storeXorb(record, decoder.bytes);
        this.storedWhole.set(hashToHex(upstream), record);
        this.places.addWhole(upstream, count);
        return;
      }
    }
    for (let k = 0; k < count; k++) {
      if (this.places.locate(upstream, first + k) !== null) continue;
      const start = k === 0 ? 0 : decoder.ends[k - 1];
      const packed = await this.packer.add(decoder.bytes.subarray(start, decoder.ends[k]), decoder.hashes[k], decoder.chunks[k].length);
      const place: Place = { xorb: { packed: packed.xorb }, index: packed.index };
      this.places.addPacked(upstream, first + k, place);
      this.packedChunks.push({ upstream, index: first + k, offset: span.bytes.start + start, place });
    }
  }

  /** The file's terms in castor's xorbs, adjacent chunks of one xorb merged. */
  private castorTerms(terms: readonly ReconstructionTerm[], held: readonly (HeldTerm | null)[], packed: readonly Hash[]): FileTerm[] {
    const out: FileTerm[] = [];
    terms.forEach((term, t) => {
      const placed = held[t];
      if (placed !== null) {
        for (const part of placed.terms) appendTerm(out, part.xorbHash, part.chunkStart, part.unpackedLength, part.chunkEnd - part.chunkStart);
        return;
      }
      const lengths = this.fetchedLengths.get(t)!;
      for (let i = term.chunkStart; i < term.chunkEnd; i++) {
        const place = this.places.locate(term.xorbHash, i);
        if (place === null) throw new Error(`chunk ${i} of upstream xorb ${term.xorbHex} was neither held nor packed (a bug in the fill)`);
        const xorb = "hash" in place.xorb ? place.xorb.hash : packed[place.xorb.packed];
        appendTerm(out, xorb, place.index, lengths[i - term.chunkStart]);
      }
    });
    return out;
  }

  /** Chunk runs proven by this file: its packed chunks, consecutive ones merged. */
  private runs(packed: readonly Hash[]): ChunkRun[] {
    const sorted = [...this.packedChunks].sort((a, b) => compareBytes(a.upstream, b.upstream) || a.index - b.index);
    const runs: ChunkRun[] = [];
    for (const { upstream, index, offset, place } of sorted) {
      const xorb = packed[(place.xorb as { packed: number }).packed];
      const last = runs.at(-1);
      if (
        last !== undefined &&
        hashEquals(last.upstreamXorb, upstream) &&
        last.upstreamEnd === index &&
        hashEquals(last.xorb, xorb) &&
        last.start + (last.upstreamEnd - last.upstreamStart) === place.index
      ) {
        last.upstreamEnd++;
      } else {
        runs.push({ upstreamXorb: upstream, upstreamStart: index, upstreamEnd: index + 1, upstreamOffset: offset, xorb, start: place.index });
      }
    }
    return runs;
  }

  /** Global-dedup entries for the xorbs this fill stored, and the file's first chunk (as shard registration makes them). */
  private async dedupEntries(record: FileRecord, packed: readonly Hash[]): Promise<{ chunkHash: Hash; xorbHash: Hash }[]> {
    const entries: { chunkHash: Hash; xorbHash: Hash }[] = [];
    const tables = await this.deps.store.getXorbs([
      ...packed,
      ...[...this.storedWhole.values()].map((xorb) => xorb.hash),
      ...(record.terms[0] ? [record.terms[0].xorbHash] : []),
    ]);
    const seen = new Set<string>();
    const add = (chunkHash: Hash, xorb: Hash) => {
      const key = bytesToPlainHex(chunkHash) + bytesToPlainHex(xorb);
      if (seen.has(key)) return;
      seen.add(key);
      entries.push({ chunkHash: chunkHash.slice(), xorbHash: xorb });
    };
    const first = record.terms[0];
    if (first !== undefined) {
      const table = tables.get(hashToHex(first.xorbHash));
      if (table !== undefined) add(table.chunks[first.chunkStart].hash, first.xorbHash);
    }
    for (const xorb of [...packed, ...[...this.storedWhole.values()].map((x) => x.hash)]) {
      for (const chunk of tables.get(hashToHex(xorb))?.chunks ?? []) if (isGlobalDedupEligible(chunk.hash)) add(chunk.hash, xorb);
    }
    return entries;
  }

  private bad(why: string): MirrorFillError {
    return new MirrorFillError("upstream", `${this.what}: ${why}`);
  }
}

/** A term castor holds: its chunks as castor terms, and each chunk's hash and length. */
interface HeldTerm {
  terms: FileTerm[];
  chunks: { hash: Hash; length: number }[];
}

interface SpanFetch {
  decoder: ChunkStreamDecoder;
  done: Promise<void>;
  uses: number;
}

/**
 * Where castor holds chunks of upstream xorbs: whole xorbs it has under the same hash, runs an
 * earlier fill recorded, chunks this fill packed.
 */
class ChunkPlaces {
  private readonly whole = new Map<string, number>();
  private readonly runs = new Map<string, ChunkRun[]>();
  private readonly packed = new Map<string, Place>();

  addWhole(xorb: Hash, chunks: number): void {
    this.whole.set(bytesToPlainHex(xorb), chunks);
  }

  holdsWhole(xorb: Hash): boolean {
    return this.whole.has(bytesToPlainHex(xorb));
  }

  addRun(run: ChunkRun): void {
    const key = bytesToPlainHex(run.upstreamXorb);
    const list = this.runs.get(key) ?? [];
    list.push(run);
    this.runs.set(key, list);
  }

  addPacked(xorb: Hash, index: number, place: Place): void {
    this.packed.set(`${bytesToPlainHex(xorb)}:${index}`, place);
  }

  locate(xorb: Hash, index: number): Place | null {
    const key = bytesToPlainHex(xorb);
    const chunks = this.whole.get(key);
    if (chunks !== undefined && index < chunks) return { xorb: { hash: xorb }, index };
    for (const run of this.runs.get(key) ?? []) {
      if (run.upstreamStart <= index && index < run.upstreamEnd) return { xorb: { hash: run.xorb }, index: run.start + (index - run.upstreamStart) };
    }
    return this.packed.get(`${key}:${index}`) ?? null;
  }
}

/** Appends `count` chunks from `index` of `xorb` (`length` bytes in all) to `terms`, merging with the last term when adjacent. */
function appendTerm(terms: FileTerm[], xorb: Hash, index: number, length: number, count = 1): void {
  const last = terms.at(-1);
  if (last !== undefined && last.chunkEnd === index && hashEquals(last.xorbHash, xorb)) {
    last.chunkEnd += count;
    last.unpackedLength += length;
  } else {
    terms.push({ xorbHash: xorb, chunkStart: index, chunkEnd: index + count, unpackedLength: length });
  }
}

function distinctHashes(hashes: readonly Hash[]): Hash[] {
  return [...new Map(hashes.map((hash) => [bytesToPlainHex(hash), hash])).values()];
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.length), Buffer.from(b.buffer, b.byteOffset, b.length));
}
