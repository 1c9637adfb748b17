/**
 * Progress of uploads and downloads: the event the library reports through `onProgress`, and a
 * renderer for a terminal — a redrawn bar on a TTY, a plain line every few seconds (and on
 * every phase change) otherwise, so logs of non-interactive runs stay readable.
 */

export interface ProgressEvent {
  operation: "upload" | "download";
  /**
   * upload: "checking" (hashing a file whose first chunk is stored, to ask whether the whole
   * file is), "reading" (chunking, deduplicating, sending xorbs as they fill), "uploading" (the
   * last xorbs), "registering" (the shard); download: "downloading".
   */
  phase: "checking" | "reading" | "uploading" | "registering" | "downloading";
  /** Input bytes processed (upload) or output bytes written (download). */
  bytesDone: number;
  /** What `bytesDone` runs up to; null when unknown (a whole-file download before its end). */
  bytesTotal: number | null;
  /** Bytes sent or received over the network so far (serialized xorbs; fetched xorb ranges). */
  transferredBytes: number;
  /** The file being processed, when there is one. */
  file?: string;
}

export type ProgressListener = (event: ProgressEvent) => void;

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"] as const;

/** `10485760` → `"10.0 MiB"`; below 1 KiB the exact count: `"512 B"`. */
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  // Rates are fractional: below 1 KiB they are rounded to whole bytes too.
  return unit === 0 ? `${Math.round(bytes)} B` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

/** The part of a stream the renderer needs (process.stderr fits). */
export interface ProgressOutput {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface ProgressRendererOptions {
  /** Milliseconds since the epoch; injectable for tests. */
  now?: () => number;
  /** Redraw interval on a TTY. */
  ttyIntervalMs?: number;
  /** Interval between plain lines. */
  lineIntervalMs?: number;
}

const BAR_WIDTH = 24;

export class ProgressRenderer {
  private readonly tty: boolean;
  private readonly now: () => number;
  private readonly interval: number;
  private readonly started: number;
  private lastDrawn = -Infinity;
  private lastPhase: string | null = null;
  private drawnLine = false;
  private latest: ProgressEvent | null = null;

  constructor(
    private readonly output: ProgressOutput,
    options: ProgressRendererOptions = {},
  ) {
    this.tty = output.isTTY === true;
    this.now = options.now ?? Date.now;
    this.interval = this.tty ? (options.ttyIntervalMs ?? 100) : (options.lineIntervalMs ?? 2000);
    this.started = this.now();
  }

  /** Pass as `onProgress`. */
  readonly update: ProgressListener = (event) => {
    this.latest = event;
    const now = this.now();
    const phaseChanged = event.phase !== this.lastPhase;
    if (!phaseChanged && now - this.lastDrawn < this.interval) return;
    this.lastPhase = event.phase;
    this.lastDrawn = now;
    this.draw(event, now);
  };

  /** Draws the final state and, on a TTY, ends the bar's line. */
  finish(): void {
    if (this.latest !== null && this.tty) this.draw(this.latest, this.now());
    if (this.tty && this.drawnLine) this.output.write("\n");
    this.drawnLine = false;
  }

  /** Removes the bar (before printing an error on a TTY). */
  clear(): void {
    if (this.tty && this.drawnLine) this.output.write("\r\x1b[2K");
    this.drawnLine = false;
  }

  private draw(event: ProgressEvent, now: number): void {
    const seconds = Math.max((now - this.started) / 1000, 0.001);
    const rate = `${formatBytes(event.bytesDone / seconds)}/s`;
    const total = event.bytesTotal;
    const fraction = total === null || total === 0 ? null : Math.min(1, event.bytesDone / total);
    const amount = total === null ? formatBytes(event.bytesDone) : `${formatBytes(event.bytesDone)} / ${formatBytes(total)}`;
    if (this.tty) {
      const filled = fraction === null ? 0 : Math.round(fraction * BAR_WIDTH);
      const bar = fraction === null ? "" : `[${"#".repeat(filled)}${"-".repeat(BAR_WIDTH - filled)}] ${(fraction * 100).toFixed(0).padStart(3)}%  `;
      let line = `${event.phase} ${bar}${amount}  ${rate}`;
      const columns = this.output.columns ?? 80;
      if (line.length > columns - 1) line = line.slice(0, Math.max(0, columns - 1));
      this.output.write(`\r\x1b[2K${line}`);
      this.drawnLine = true;
    } else {
      const percent = fraction === null ? "" : ` (${(fraction * 100).toFixed(0)}%)`;
      const file = event.file === undefined ? "" : ` ${event.file}:`;
      this.output.write(`${event.operation} ${event.phase}:${file} ${amount}${percent}, ${rate}\n`);
    }
  }
}
