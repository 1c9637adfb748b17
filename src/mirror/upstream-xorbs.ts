/**
 * Byte ranges of upstream xorbs, served from castor's store — what a client reading a file
 * through castor's CAS while the mirror fetches it asks for (source.ts `liveReconstruction`
 * hands it the upstream's plan, with castor's URLs).
 *
 * A fill keeps the chunks of an upstream xorb either as that very xorb (it fetched it whole: same
 * hash, same bytes, served by the transfer route as any xorb) or repacked into castor's xorbs,
 * the serialized chunks copied byte for byte: then the chunk runs of that upstream xorb (where
 * each run starts in it, and where its chunks are in castor's xorbs) give the range as a
 * concatenation of byte ranges of castor's xorbs. Runs are recorded once the file is verified.
 *
 * While a fill of this process fetches a range holding the bytes, they stream from its buffer as
 * they arrive (span-taps.ts, the last byte held back until they are proven).
 *
 * Until one of these is there the request waits (polling the stores, so any node or worker can
 * answer, not only the one fetching), for as long as some fill is in progress, at most `maxWaitMs`:
 * then it answers `pending`, which the route turns into a 503 with Retry-After — hf_xet retries
 * those (5 attempts over up to 6 minutes), where a silent answer past 120 s would fail it.
 *
 * What a client reads this way is what castor verified: a whole upstream xorb is stored only when
 * its chunks hash to its hash, and runs are recorded only from a verified file. The plan it
 * reads by is the upstream's reconstruction, trusted as hf_xet trusts it reading from the
 * upstream itself.
 */
import { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { hashFromHex, hashToHex, type Hash } from "../format/hash.js";
import type { ByteRange } from "../format/ranges.js";
import { chunkRangeToByteRange } from "../format/xorb.js";
import type { CasMetadataStore, XorbRecord } from "../metadata/cas.js";
import type { ChunkRun, MirrorRecords } from "../metadata/mirror.js";
import type { UpstreamXorbRange } from "../hub/mirrored.js";
import { blobKey, blobKeyFromHex, type BlobStore } from "../storage/blob-store.js";

export interface UpstreamXorbDeps {
  store: Pick<CasMetadataStore, "getXorbs"> & { mirror: Pick<MirrorRecords, "findChunkRuns" | "activeFills"> };
  blobs: Pick<BlobStore, "exists" | "read">;
  /** Fills in progress in this process. */
  localFills: () => number;
  /** The range as a fill of this process fetches it, when one does (span-taps.ts). */
  tapped?: (xorbHex: string, range: ByteRange) => { body: Readable; length: number } | null;
  /** Why the fill last meant to bring an upstream xorb failed (by hex), if it did lately. */
  failure: (xorbHex: string) => string | undefined;
  /** A claim not renewed for this long belongs to a node that died (fills.ts). */
  staleMs?: number;
  pollMs?: number;
  now?: () => number;
}

export class UpstreamXorbs {
  private readonly staleMs: number;
  private readonly pollMs: number;
  private readonly now: () => number;

  constructor(private readonly deps: UpstreamXorbDeps) {
    this.staleMs = deps.staleMs ?? 30_000;
    this.pollMs = deps.pollMs ?? 250;
    this.now = deps.now ?? Date.now;
  }

  /** Bytes `range` of upstream xorb `xorbHex`; null when castor does not hold them and no fill runs that may bring them. */
  async range(xorbHex: string, range: ByteRange, maxWaitMs: number): Promise<UpstreamXorbRange | null> {
    const deadline = this.now() + maxWaitMs;
    const xorb = hashFromHex(xorbHex);
    for (;;) {
      if (await this.deps.blobs.exists(blobKeyFromHex("xorbs", xorbHex))) return "stored";
      const tapped = this.deps.tapped?.(xorbHex, range);
      if (tapped) return tapped;
      const assembled = await this.assemble(xorb, range);
      if (assembled !== null) return assembled;
      const failed = this.deps.failure(xorbHex);
      if (failed !== undefined) return { failed };
      const filling = this.deps.localFills() > 0 || (await this.deps.store.mirror.activeFills(new Date(this.now() - this.staleMs))) > 0;
      if (!filling) return null;
      if (this.now() >= deadline) return "pending";
      await sleep(this.pollMs);
    }
  }

  /** The range as pieces of castor's xorbs, from the recorded runs; null when they do not cover it. */
  private async assemble(xorb: Hash, range: ByteRange): Promise<UpstreamXorbRange | null> {
    const runs = await this.deps.store.mirror.findChunkRuns([xorb]);
    if (runs.length === 0) return null;
    const tables = await this.deps.store.getXorbs(runs.map((run) => run.xorb));
    const pieces: { xorb: Hash; start: number; end: number }[] = [];
    let at = range.start;
    while (at <= range.end) {
      const piece = pieceAt(runs, tables, at, range.end);
      if (piece === null) return null;
      pieces.push(piece);
      at += piece.end - piece.start + 1;
    }
    const { blobs } = this.deps;
    async function* bytes(): AsyncGenerator<Uint8Array> {
      for (const piece of pieces)
        yield* (await blobs.read(blobKey("xorbs", piece.xorb), { offset: piece.start, length: piece.end - piece.start + 1 })) as AsyncIterable<Uint8Array>;
    }
    return { body: Readable.from(bytes(), { objectMode: false }), length: range.end - range.start + 1 };
  }
}

/**
 * The bytes from `at` (a chunk boundary of the upstream xorb) up to at most `last`, within one
 * run: a byte range of the castor xorb holding those chunks. Null when no run holds chunk `at`
 * starts, or the range would end inside a chunk.
 */
function pieceAt(runs: readonly ChunkRun[], tables: Map<string, XorbRecord>, at: number, last: number): { xorb: Hash; start: number; end: number } | null {
  for (const run of runs) {
    const table = tables.get(hashToHex(run.xorb));
    if (table === undefined || run.upstreamOffset > at) continue;
    const ends = table.chunks.map((chunk) => chunk.serializedEnd);
    const count = run.upstreamEnd - run.upstreamStart;
    if (run.start + count > ends.length) continue;
    // Walk the run's chunks (same sizes as upstream) to the one starting at `at`.
    let offset = run.upstreamOffset;
    let k = 0;
    const size = (i: number) => ends[run.start + i] - (run.start + i === 0 ? 0 : ends[run.start + i - 1]);
    while (k < count && offset < at) offset += size(k++);
    if (k === count || offset !== at) continue;
    let end = k;
    let through = offset;
    while (end < count && through + size(end) - 1 <= last) through += size(end++);
    if (end === k) return null;
    if (end < count && through <= last) return null;
    const bytes = chunkRangeToByteRange(ends, run.start + k, run.start + end);
    return { xorb: run.xorb, start: bytes.start, end: bytes.end - 1 };
  }
  return null;
}
