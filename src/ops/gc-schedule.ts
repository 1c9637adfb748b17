/**
 * Garbage collection on a schedule inside `castor serve` (CASTOR_GC_INTERVAL, off by default):
 * the first run one interval after start-up (a restart loop must not turn into a gc loop), the
 * next one interval after the previous ended. A failed run is logged and tried again at the next
 * interval; stopping aborts a run between two of its batches and waits for it, so the stores are
 * never closed under it. When scaled out, set the interval on one node only: two collectors are
 * safe together, but each repeats the other's work. For the same reason, of the workers of
 * `castor serve --workers N` only worker 1 runs it (server.ts).
 */
import type { MetadataStore } from "../metadata/store.js";
import type { BlobStore } from "../storage/blob-store.js";
import { withReserveReleased, type Reserve } from "../storage/reserve.js";
import { collectGarbage, type GcReport } from "./gc.js";

export interface GcScheduleOptions {
  intervalMs: number;
  graceMs: number;
  /** CASTOR_UPSTREAM_MAX_BYTES: each run evicts the least recently used mirrored files down to this many bytes. */
  mirrorMaxBytes?: number | null;
  onReport: (report: GcReport) => void;
  onError: (error: unknown) => void;
  /** The data disk's maintenance reserve, released for a run on a nearly full disk; null: none. */
  reserve?: Reserve | null;
  /** Hears what was done with the reserve. */
  onReserve?: (line: string) => void;
}

export class GcSchedule {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private readonly abort = new AbortController();

  constructor(
    private readonly store: MetadataStore,
    private readonly blobs: BlobStore,
    private readonly options: GcScheduleOptions,
  ) {}

  start(): void {
    if (this.abort.signal.aborted || this.timer !== null) return;
    // unref: a pending collection never keeps the process alive.
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.runOnce().finally(() => {
        this.running = null;
        this.start();
      });
    }, this.options.intervalMs).unref();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  private async runOnce(): Promise<void> {
    try {
      const { reserve = null, onReserve = () => {} } = this.options;
      const report = await withReserveReleased(reserve, onReserve, () =>
        collectGarbage(this.store, this.blobs, {
          graceMs: this.options.graceMs,
          signal: this.abort.signal,
          mirrorMaxBytes: this.options.mirrorMaxBytes ?? undefined,
        }),
      );
      this.options.onReport(report);
    } catch (error) {
      if (!this.abort.signal.aborted) this.options.onError(error);
    }
  }
}
