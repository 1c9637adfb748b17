/**
 * Lines of a byte stream, each bounded. Node's readline buffers a line of any length, which a
 * client could use to fill the server's memory; this splitter refuses a line over the bound
 * (413) as soon as it has seen that many bytes without a newline.
 */
import { HubError } from "./errors.js";

/** The lines of `pieces` (a body read with raw-body.ts's `bodyPieces`, which leaves the rest unread when a line is refused). */
export async function* readLines(pieces: AsyncIterable<Buffer>, maxLineBytes: number): AsyncGenerator<string> {
  const lines = new LineSplitter(maxLineBytes);
  for await (const piece of pieces) yield* lines.push(piece);
  yield* lines.end();
}

/**
 * The synchronous core of `readLines`: pieces in, complete lines out (UTF-8 decoded, without
 * their `\n`). Separate so the fuzz target can feed it pieces of any size without a stream.
 */
export class LineSplitter {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(private readonly maxLineBytes: number) {}

  /** The lines `chunk` completes; HubError 413 once a line is longer than the bound. */
  push(chunk: Buffer): string[] {
    const lines: string[] = [];
    let start = 0;
    for (let newline = chunk.indexOf(10, start); newline !== -1; newline = chunk.indexOf(10, start)) {
      const part = chunk.subarray(start, newline);
      if (this.pendingBytes + part.length > this.maxLineBytes) throw tooLong(this.maxLineBytes);
      lines.push((this.pendingBytes === 0 ? part : Buffer.concat([...this.pending, part])).toString("utf8"));
      this.pending = [];
      this.pendingBytes = 0;
      start = newline + 1;
    }
    const rest = chunk.subarray(start);
    if (rest.length > 0) {
      this.pendingBytes += rest.length;
      if (this.pendingBytes > this.maxLineBytes) throw tooLong(this.maxLineBytes);
      this.pending.push(rest);
    }
    return lines;
  }

  /** The last line, when the stream did not end with a newline. */
  end(): string[] {
    const last = this.pendingBytes > 0 ? [Buffer.concat(this.pending).toString("utf8")] : [];
    this.pending = [];
    this.pendingBytes = 0;
    return last;
  }
}

function tooLong(maxLineBytes: number): HubError {
  return new HubError(413, `a line of the body is longer than ${maxLineBytes} bytes: large files go through Xet, not inline`);
}
