/**
 * Shared pieces of the benchmark harness (`npm run bench`): the row type every group returns,
 * repeated timing, throughput units, deterministic test data and the one printed table.
 *
 * A group is a module in `bench/` (other than this file and `run.ts`) exporting
 * `run(): Promise<BenchRow[]>`; its file name is the group's name. Benchmarks report, they never
 * assert: targets are printed with an ok column, and the run does not fail on a missed target.
 */

/**
 * One measured number. `value` is the best repetition; `median` (same unit), when given, shows
 * how noisy the machine was. `target` is printed as given; `ok` says whether `value` meets it.
 */
export interface BenchRow {
  readonly group: string;
  readonly metric: string;
  readonly value: number;
  readonly unit: string;
  readonly median?: number;
  readonly target?: string;
  readonly ok?: boolean;
  readonly note?: string;
}

export type BenchGroup = () => Promise<BenchRow[]>;

/** Set by `npm run bench -- --smoke` (bench/run.ts), or by hand. */
export const SMOKE_VARIABLE = "CASTOR_BENCH_SMOKE";

/**
 * Whether this is a smoke run: every group once, on small sizes, one timed round, to prove that
 * each group still runs (CI does this), not to measure. Read when called, so that a group's
 * module-level sizes see what bench/run.ts set before it loaded the group.
 */
export function isSmokeRun(): boolean {
  const value = process.env[SMOKE_VARIABLE]?.trim().toLowerCase() ?? "";
  return value !== "" && value !== "0" && value !== "false";
}

/** `full` in a real run, `smoke` in a smoke run: the one switch a group needs for its sizes. */
export function sized<T>(full: T, smoke: T): T {
  return isSmokeRun() ? smoke : full;
}

/** A target on a row: at least / at most this value (in the row's unit). */
export interface BenchTarget {
  readonly atLeast?: number;
  readonly atMost?: number;
}

export function benchRow(
  group: string,
  metric: string,
  value: number,
  unit: string,
  options: { median?: number; target?: BenchTarget; note?: string } = {},
): BenchRow {
  const { median, target, note } = options;
  const extras = { ...(median !== undefined ? { median } : {}), ...(note ? { note } : {}) };
  if (!target) return { group, metric, value, unit, ...extras };
  const parts: string[] = [];
  let ok = true;
  if (target.atLeast !== undefined) {
    parts.push(`≥ ${formatNumber(target.atLeast)}`);
    ok &&= value >= target.atLeast;
  }
  if (target.atMost !== undefined) {
    parts.push(`≤ ${formatNumber(target.atMost)}`);
    ok &&= value <= target.atMost;
  }
  return { group, metric, value, unit, target: parts.join(" and "), ok, ...extras };
}

/** Durations in seconds of the timed repetitions (warm-up runs excluded). */
export interface Timing {
  readonly best: number;
  readonly median: number;
  readonly samples: readonly number[];
}

/**
 * Runs `fn` `warmup` times untimed (so V8 has optimised it), then `repetitions` times timed.
 * The best run is the least disturbed by the other processes sharing the 2 cores; the median
 * is kept to show how noisy the machine was.
 */
export async function timeRepeated(fn: () => unknown, repetitions: number, warmup = 1): Promise<Timing> {
  if (!Number.isInteger(repetitions) || repetitions < 1) throw new RangeError("repetitions must be a positive integer");
  // A smoke run times one round, unwarmed.
  if (isSmokeRun()) [repetitions, warmup] = [1, 0];
  for (let i = 0; i < warmup; i++) await fn();
  const samples: number[] = [];
  for (let i = 0; i < repetitions; i++) {
    const started = process.hrtime.bigint();
    await fn();
    samples.push(Number(process.hrtime.bigint() - started) / 1e9);
  }
  const sorted = [...samples].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
  return { best: sorted[0], median, samples };
}

/** Throughput in MB/s, with MB = 10^6 bytes (the unit docs/design.md §8 uses). */
export function megabytesPerSecond(bytes: number, seconds: number): number {
  return bytes / 1e6 / seconds;
}

/**
 * `length` pseudo-random bytes from a seed (xorshift128), so every run benchmarks the same
 * data — chunk counts and compressibility stay comparable between runs.
 */
export function deterministicRandomBytes(length: number, seed: number): Uint8Array {
  const words = new Uint32Array(Math.ceil(length / 4));
  let x = 123456789 ^ seed;
  let y = 362436069;
  let z = 521288629;
  let w = 88675123 ^ Math.imul(seed, 0x9e3779b9);
  for (let i = 0; i < words.length; i++) {
    const t = x ^ (x << 11);
    x = y;
    y = z;
    z = w;
    w = w ^ (w >>> 19) ^ (t ^ (t >>> 8));
    words[i] = w;
  }
  return new Uint8Array(words.buffer, 0, length);
}

/** The middle value (the mean of the two middle ones for an even count). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/**
 * The `q`-quantile (0 ≤ q ≤ 1) of `values` by the nearest-rank rule: the value at index
 * ⌊q·n⌋ of the sorted values (the last one for q = 1); NaN when there are none.
 */
export function percentile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  const magnitude = Math.abs(value);
  if (magnitude >= 100) return Math.round(value).toLocaleString("en-US");
  if (magnitude >= 1) return value.toFixed(2);
  return value.toPrecision(3);
}

const COLUMNS = ["group", "metric", "value", "median", "unit", "target", "ok", "note"] as const;
const NUMERIC_COLUMNS = new Set<string>(["value", "median"]);

/** All rows as one aligned table; numbers right-aligned, everything else left-aligned. */
export function formatTable(rows: readonly BenchRow[]): string {
  const cells = rows.map((row) => [
    row.group,
    row.metric,
    formatNumber(row.value),
    row.median === undefined ? "" : formatNumber(row.median),
    row.unit,
    row.target ?? "",
    row.ok === undefined ? "" : row.ok ? "ok" : "MISSED",
    row.note ?? "",
  ]);
  const widths = COLUMNS.map((title, c) => Math.max(title.length, ...cells.map((line) => line[c].length)));
  const render = (line: readonly string[]) =>
    line
      .map((cell, c) => (NUMERIC_COLUMNS.has(COLUMNS[c]) ? cell.padStart(widths[c]) : cell.padEnd(widths[c])))
      .join("  ")
      .trimEnd();
  return [render(COLUMNS), render(widths.map((w) => "-".repeat(w))), ...cells.map(render)].join("\n");
}
