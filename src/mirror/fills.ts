/**
 * The fills in progress: one per file, however many clients want it. The first client of an
 * uncached file starts its fill and reads along (broadcast.ts); the next ones join it; callers
 * that only need the file stored (hf_xet's reconstruction, `castor mirror pull`) wait for it.
 *
 * Across nodes sharing a database, a fill is claimed first (`mirror_fills`): a node that finds
 * another one's fresh claim does not fetch, it waits for the file to appear (or for the claim
 * to go stale — a node that died — and then fills it itself). The filling node renews its claim
 * every third of the stale time. So two nodes asked for the same file at once store it once.
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { MirrorRecords } from "../metadata/mirror.js";
import { FillBroadcast, type BroadcastOptions, type FillStream, type StoredRange } from "./broadcast.js";
import type { FillOutput } from "./fill-common.js";
import type { FillResult } from "./xet-fill.js";

/** One file to fill: its key (`xet:<hash>`, `inline:<git oid>`), how to fill it, how to read it once stored. */
export interface FillJob {
  key: string;
  /** Fetches, verifies and publishes the file, writing its bytes to `output` in order. */
  fill(output: FillOutput): Promise<FillResult>;
  /** Whether the file is stored now (another node filled it). */
  isStored(): Promise<boolean>;
  /** Reads bytes of the stored file. */
  stored: StoredRange;
}

export interface FillsOptions {
  claims: Pick<MirrorRecords, "claimFill" | "renewFill" | "releaseFill">;
  /** This node's name in claims (default: a random id per process). */
  node?: string;
  /** A claim whose holder has not renewed it for this long is taken over (default 30 s). */
  staleMs?: number;
  /** How often a node waiting for another one's fill looks whether it is done (default 250 ms). */
  pollMs?: number;
  broadcast?: BroadcastOptions;
  now?: () => Date;
  /** Told of each fill that ends: its result (null: the file was stored by another node), or its failure. */
  onFinished?: (key: string, outcome: { ok: true; result: FillResult | null } | { ok: false; error: unknown }) => void;
}

interface Running {
  broadcast: FillBroadcast;
  /** The fill's end: its result (null when another node filled the file). */
  done: Promise<FillResult | null>;
}

export class MirrorFills {
  private readonly running = new Map<string, Running>();
  private readonly node: string;
  private readonly staleMs: number;
  private readonly pollMs: number;
  private readonly now: () => Date;

  constructor(private readonly options: FillsOptions) {
    this.node = options.node ?? randomUUID();
    this.staleMs = options.staleMs ?? 30_000;
    this.pollMs = options.pollMs ?? 250;
    this.now = options.now ?? (() => new Date());
  }

  /** Fills in progress on this node. */
  get inProgress(): number {
    return this.running.size;
  }

  /** Bytes `start..end` (inclusive) of the file, streamed while it is filled (starting the fill if need be). */
  read(job: FillJob, start: number, end: number): FillStream {
    return this.start(job).broadcast.join(start, end);
  }

  /** Resolves once the file is stored (filling it if need be); rejects with the fill's failure. */
  async ensure(job: FillJob): Promise<FillResult | null> {
    return this.start(job).done;
  }

  private start(job: FillJob): Running {
    const existing = this.running.get(job.key);
    if (existing !== undefined) return existing;
    const broadcast = new FillBroadcast(job.stored, this.options.broadcast);
    const done = this.run(job, broadcast).finally(() => this.running.delete(job.key));
    // Failures reach callers through `done` and the streams; this keeps one nobody awaits quiet.
    done.catch(() => undefined);
    const running = { broadcast, done };
    this.running.set(job.key, running);
    return running;
  }

  private async run(job: FillJob, broadcast: FillBroadcast): Promise<FillResult | null> {
    const { claims } = this.options;
    const storedElsewhere = async () => {
      await broadcast.complete();
      this.options.onFinished?.(job.key, { ok: true, result: null });
      return null;
    };
    try {
      for (;;) {
        const now = this.now();
        if (await claims.claimFill(job.key, this.node, now, new Date(now.getTime() - this.staleMs))) break;
        // Another node fills it: wait until it is stored, or until that node stops renewing its claim.
        if (await job.isStored()) return await storedElsewhere();
        await sleep(this.pollMs);
      }
      if (await job.isStored()) {
        // Stored by a node whose claim ended just before this one's.
        await claims.releaseFill(job.key, this.node).catch(() => undefined);
        return await storedElsewhere();
      }
      const renew = setInterval(() => {
        claims.renewFill(job.key, this.node, this.now()).catch(() => undefined);
      }, this.staleMs / 3);
      renew.unref();
      try {
        const result = await job.fill(broadcast);
        await broadcast.complete();
        this.options.onFinished?.(job.key, { ok: true, result });
        return result;
      } finally {
        clearInterval(renew);
        await claims.releaseFill(job.key, this.node).catch(() => undefined);
      }
    } catch (error) {
      broadcast.fail(error instanceof Error ? error : new Error(String(error)));
      this.options.onFinished?.(job.key, { ok: false, error });
      throw error;
    }
  }
}
