/**
 * The server's storage-statistics samples (stats.ts): today's kept current as the repositories
 * change, and one for each UTC day.
 *
 * - At start-up: today's sample, the one stored already (by another node, `castor stats`, an
 *   earlier start) or a new measurement.
 * - After changes: the server reports every request that changed something (`changed()`), and
 *   a measurement follows `delayMs` after the first change since the last one; so today's sample
 *   — the Prometheus gauges, `castor stats --history`, the web interface's chart — shows today's
 *   uploads. A measurement walks every repository, so measurements are spaced out: the next one
 *   starts no sooner after the last ended than 99 times the last one took, which keeps them
 *   to 1 % of one core's time whatever the store's size (a walk of 1 ms waits only `delayMs`,
 *   one of a minute waits an hour and a half).
 * - After each UTC midnight: the new day's first sample, unless it has one already.
 *
 * Its timer never keeps the process alive, and `stop` ends it, abandoning a walk in progress,
 * before the store closes. Of the workers of `castor serve --workers N`, worker 1 alone takes
 * the daily samples (`daily: false` for the others): a walk at start-up and at midnight in each
 * worker would be N walks for one sample. Each worker measures after its own changes.
 */
import type { StatsSample } from "../metadata/store.js";
import { msUntilNextUtcDay, sampleOf, type StorageStatsService } from "./stats.js";

/** After a failed sample, the next attempt comes this much later (or at midnight, if sooner). */
const RETRY_AFTER_FAILURE_MS = 60 * 60 * 1000;
/** The default of `delayMs`: a burst of commits (a folder upload) makes one measurement. */
export const DEFAULT_CHANGE_DELAY_MS = 10_000;
/** The part of one core's time measurements may take (see the file comment). */
const MAX_TIME_SHARE = 0.01;

export interface StatsSamplerOptions {
  now?: () => Date;
  /** The samples at start-up and after each UTC midnight; true by default. */
  daily?: boolean;
  /** How long after the first change since the last measurement the next one starts, at least. */
  delayMs?: number;
  /** Receives each sample taken or found. */
  onSample?: (sample: StatsSample) => void;
  /** Receives what made a sample fail; the sampler tries again later. */
  onError?: (error: unknown) => void;
}

export class StatsSampler {
  private readonly now: () => Date;
  private readonly daily: boolean;
  private readonly delayMs: number;
  private readonly abort = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  /** When the timer fires (performance.now() time); Infinity without one. */
  private timerAt = Number.POSITIVE_INFINITY;
  private running: Promise<void> | null = null;
  private stopped = false;
  /** A change was reported since the last measurement began. */
  private changes = false;
  /** When the last run ended and how long it took, in performance.now() milliseconds. */
  private lastEndedAt = Number.NEGATIVE_INFINITY;
  private lastTookMs = 0;

  constructor(
    private readonly service: StorageStatsService,
    private readonly options: StatsSamplerOptions = {},
  ) {
    this.now = options.now ?? (() => new Date());
    this.daily = options.daily ?? true;
    this.delayMs = options.delayMs ?? DEFAULT_CHANGE_DELAY_MS;
  }

  /** Takes today's sample now (when daily), and from then on samples as the file comment says. */
  start(): void {
    // At once, not through the timer: an unref'd timer would let a process that has nothing
    // else to do end before its first sample.
    if (this.daily && this.running === null && !this.stopped) this.run();
  }

  /** Something changed the stored repositories or objects: measure again, soon. */
  changed(): void {
    if (this.stopped) return;
    this.changes = true;
    // A change during a run is picked up when it ends.
    if (this.running === null) this.scheduleAt(this.nextMeasurementAt());
  }

  /** Ends the sampling; resolves once a sample in progress has stopped. Idempotent. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.clearTimer();
    this.abort.abort(new Error("the server is stopping"));
    await this.running;
  }

  private nextMeasurementAt(): number {
    return Math.max(performance.now() + this.delayMs, this.lastEndedAt + (this.lastTookMs * (1 - MAX_TIME_SHARE)) / MAX_TIME_SHARE);
  }

  /** Runs at `at`, or keeps the timer already set if it fires sooner. */
  private scheduleAt(at: number): void {
    if (this.stopped || this.timerAt <= at) return;
    this.clearTimer();
    this.timerAt = at;
    // Whole milliseconds, rounded up: a timer never fires before its time then (midnight included).
    this.timer = setTimeout(() => this.run(), Math.max(0, Math.ceil(at - performance.now()))).unref();
  }

  private clearTimer(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Number.POSITIVE_INFINITY;
  }

  private run(): void {
    this.clearTimer();
    if (this.stopped) return;
    // After changes, a new measurement; else today's sample, measured only if the day has none.
    const measure = this.changes;
    this.changes = false;
    const started = performance.now();
    let failed = false;
    const signal = this.abort.signal;
    this.running = (measure ? this.service.measure(signal).then(sampleOf) : this.service.sampleToday(signal))
      .then(
        (sample) => this.options.onSample?.(sample),
        (error: unknown) => {
          failed = true;
          if (this.stopped) return;
          this.options.onError?.(error);
          // The changes are still to be counted: at the retry, or sooner with the next change.
          if (measure) this.changes = true;
        },
      )
      .finally(() => {
        this.running = null;
        this.lastEndedAt = performance.now();
        this.lastTookMs = this.lastEndedAt - started;
        if (this.stopped) return;
        if (this.daily) {
          // A timer that fires a little early finds today's sample kept and comes back at midnight.
          const untilMidnight = msUntilNextUtcDay(this.now());
          this.scheduleAt(this.lastEndedAt + (failed ? Math.min(RETRY_AFTER_FAILURE_MS, untilMidnight) : untilMidnight));
        } else if (failed) {
          this.scheduleAt(this.lastEndedAt + RETRY_AFTER_FAILURE_MS);
        }
        if (this.changes && !failed) this.scheduleAt(this.nextMeasurementAt());
      });
  }
}
