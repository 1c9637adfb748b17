/**
 * A streaming `multipart/byteranges` body (RFC 9110 §14.6, the layout of
 * `test/vectors/http-formats.json` → `multipart_byteranges_example`):
 *
 *     --B\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes s-e/total\r\n\r\n<bytes>\r\n
 *     … one such part per range, ascending …
 *     --B--\r\n
 *
 * Hand-written because no maintained npm package *produces* this format as a stream (the
 * libraries parse it, or build it in memory). Each part's bytes come from its own source stream,
 * opened only when the previous part is done, so a response holds at most one open source and a
 * few hundred KiB in buffers whatever its size; the total length is computed up front from the
 * ranges, so the response carries a Content-Length.
 *
 * The boundary is random per response: hf.js finds parts by scanning for `\r\n--boundary`, so a
 * predictable boundary would let someone who uploads a xorb containing it corrupt the downloads
 * of anyone whose ranges share a response with theirs.
 */
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import type { ByteRange } from "../format/ranges.js";

export interface MultipartByteRangesOptions {
  /** The parts, in the order sent (ascending for byte ranges). */
  ranges: readonly ByteRange[];
  /** Size of the whole object, written after the `/` of every Content-Range. */
  totalSize: number;
  /** Opens the bytes of one range; called once per part, in order, when the part is due. */
  openPart: (range: ByteRange) => Promise<Readable>;
  /** Default: `castor-` + 32 random hex digits. Tests pin it. */
  boundary?: string;
  /** Each part's Content-Type. Default `application/octet-stream`. */
  partContentType?: string;
}

export interface MultipartByteRanges {
  /** `multipart/byteranges; boundary=…`, for the response's Content-Type. */
  readonly contentType: string;
  /** Exact byte length of `body`. */
  readonly contentLength: number;
  /** The body; opens no source until read. Destroying it destroys the part being read. */
  readonly body: Readable;
}

/** RFC 2046 boundary characters (without space, so it never needs quoting), 1–70 of them. */
const BOUNDARY = /^[0-9A-Za-z'()+_,\-./:=?]{1,70}$/;
const CRLF = Buffer.from("\r\n", "latin1");
/** Enough to keep a fs or socket source busy; bounds what one response buffers. */
const BODY_HIGH_WATER_MARK = 512 * 1024;

export function multipartByteRanges(options: MultipartByteRangesOptions): MultipartByteRanges {
  const boundary = options.boundary ?? `castor-${randomBytes(16).toString("hex")}`;
  if (!BOUNDARY.test(boundary)) {
    throw new TypeError(`invalid multipart boundary ${JSON.stringify(boundary)}: use 1–70 letters, digits or '()+_,-./:=?`);
  }
  const partContentType = options.partContentType ?? "application/octet-stream";
  const { ranges, totalSize } = options;
  if (ranges.length === 0) throw new RangeError("a multipart/byteranges body needs at least one part");

  const partHeader = (range: ByteRange) =>
    `--${boundary}\r\nContent-Type: ${partContentType}\r\nContent-Range: bytes ${range.start}-${range.end}/${totalSize}\r\n\r\n`;
  const closing = `--${boundary}--\r\n`;

  let contentLength = closing.length;
  for (const range of ranges) {
    if (!Number.isSafeInteger(range.start) || !Number.isSafeInteger(range.end) || range.start < 0 || range.end < range.start || range.end >= totalSize) {
      throw new RangeError(`part range ${range.start}-${range.end} does not lie inside an object of ${totalSize} bytes`);
    }
    // The headers are ASCII (boundary and content type checked), so characters = bytes.
    contentLength += partHeader(range).length + (range.end - range.start + 1) + CRLF.length;
  }

  return {
    contentType: `multipart/byteranges; boundary=${boundary}`,
    contentLength,
    body: new MultipartBody(ranges, options.openPart, partHeader, closing),
  };
}

class MultipartBody extends Readable {
  private nextPart = 0;
  private source: Readable | null = null;
  private opening = false;
  private done = false;

  constructor(
    private readonly ranges: readonly ByteRange[],
    private readonly openPart: (range: ByteRange) => Promise<Readable>,
    private readonly partHeader: (range: ByteRange) => string,
    private readonly closing: string,
  ) {
    super({ highWaterMark: BODY_HIGH_WATER_MARK });
  }

  override _read(): void {
    if (this.source !== null) {
      this.source.resume();
    } else if (!this.opening && !this.done) {
      this.startNextPart();
    }
  }

  private startNextPart(): void {
    if (this.nextPart === this.ranges.length) {
      this.done = true;
      this.push(this.closing, "latin1");
      this.push(null);
      return;
    }
    const range = this.ranges[this.nextPart++];
    this.opening = true;
    this.openPart(range).then(
      (source) => {
        this.opening = false;
        if (this.destroyed) {
          source.destroy();
          return;
        }
        this.stream(range, source);
      },
      (error: unknown) => {
        this.opening = false;
        this.destroy(error instanceof Error ? error : new Error(String(error)));
      },
    );
  }

  private stream(range: ByteRange, source: Readable): void {
    this.source = source;
    const expected = range.end - range.start + 1;
    let received = 0;
    this.push(this.partHeader(range), "latin1");
    source.on("data", (chunk: Buffer) => {
      received += chunk.length;
      if (!this.push(chunk)) source.pause();
    });
    source.once("error", (error) => this.destroy(error));
    source.once("close", () => {
      // Destroyed by someone else without an error: neither "end" nor "error" will come.
      if (this.source === source) this.destroy(new Error(`the source of part ${range.start}-${range.end} closed before its end`));
    });
    source.once("end", () => {
      this.source = null;
      // A short source would make the body disagree with the Content-Length already sent; the
      // client would wait for bytes that never come. Failing closes the connection instead.
      if (received !== expected) {
        this.destroy(new Error(`part ${range.start}-${range.end} produced ${received} bytes instead of ${expected}`));
        return;
      }
      if (this.push(CRLF)) this.startNextPart();
    });
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    const source = this.source;
    this.source = null;
    source?.destroy();
    callback(error);
  }
}
