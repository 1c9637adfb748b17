/**
 * Reading objects from S3: ranged GETs checked against what was asked for before a byte is
 * handed on, and bodies that resume after a connection fails mid-way. The SDK retries opening
 * a response; it cannot retry a body that breaks off, so castor re-requests the rest of the
 * range itself — objects are immutable, so the bytes cannot have changed in between.
 */
import { Readable } from "node:stream";
import { GetObjectCommand, HeadObjectCommand, type GetObjectCommandOutput } from "@aws-sdk/client-s3";
import { BlobStoreError, checkByteSpan, rangeHeaderOf, type BlobKey, type ByteSpan } from "../blob-store.js";
import { backOffBeforeRetry, describeS3Error, httpStatusOf, isNotFound, type RetryPolicy, type S3Target } from "./client.js";

const CONTENT_RANGE_RE = /^bytes (\d+)-(\d+)\/(\d+|\*)$/;
/** Bytes a resuming body buffers ahead of its reader. */
const BODY_HIGH_WATER_MARK = 256 * 1024;

interface OpenedRange {
  body: Readable;
  /** Total object size when the response told it. */
  objectSize: number | null;
}

export class S3Reads {
  constructor(
    private readonly target: S3Target,
    private readonly retryPolicy: RetryPolicy,
  ) {}

  /** `BlobStore.read` of the object `objectKey` that stores `key`. */
  async read(key: BlobKey, objectKey: string, span?: ByteSpan): Promise<Readable> {
    // Malformed spans are refused before any request (an infinite size only checks the form).
    if (span !== undefined) checkByteSpan(key, span, Number.POSITIVE_INFINITY);
    // The SDK retries opening; what it cannot retry is a body failing mid-way, which resumingBody handles.
    const first = await this.openRange(key, objectKey, span ?? null);
    const start = span?.offset ?? 0;
    const end = span !== undefined ? span.offset + span.length : first.objectSize;
    if (end === null) return first.body; // no length known: nothing to resume against
    return this.resumingBody(key, objectKey, first.body, start, end);
  }

  /** `BlobStore.size`: the object's Content-Length, or null when it is absent. */
  async size(objectKey: string): Promise<number | null> {
    try {
      const head = await this.target.client.send(new HeadObjectCommand({ Bucket: this.target.bucket, Key: objectKey }));
      if (head.ContentLength === undefined) throw new Error(`S3 HeadObject of ${objectKey} answered without a Content-Length`);
      return head.ContentLength;
    } catch (err) {
      if (isNotFound(err)) return null;
      throw describeS3Error("HeadObject", objectKey, err);
    }
  }

  /** One GET of `range` (or the whole object), checked against what was asked for before a byte is handed on. */
  private async openRange(key: BlobKey, objectKey: string, range: ByteSpan | null): Promise<OpenedRange> {
    let response: GetObjectCommandOutput;
    try {
      response = await this.target.client.send(
        new GetObjectCommand({ Bucket: this.target.bucket, Key: objectKey, ...(range ? { Range: rangeHeaderOf(range) } : {}) }),
      );
    } catch (err) {
      if (isNotFound(err)) throw new BlobStoreError("not_found", `${key} is not stored`);
      if (range && httpStatusOf(err) === 416) {
        const size = await this.size(objectKey);
        if (size === null) throw new BlobStoreError("not_found", `${key} is not stored`);
        checkByteSpan(key, range, size);
      }
      throw describeS3Error("GetObject", objectKey, err);
    }
    const body = response.Body as Readable | undefined;
    if (!(body instanceof Readable)) throw new Error(`S3 GetObject of ${objectKey} returned no readable body`);
    try {
      const contentLength = response.ContentLength ?? null;
      if (range === null) return { body, objectSize: contentLength };
      const match = CONTENT_RANGE_RE.exec(response.ContentRange ?? "");
      if (match === null) {
        // A store that ignored Range sent the whole object; acceptable only if that is exactly what was asked.
        if (range.offset === 0 && contentLength === range.length) return { body, objectSize: contentLength };
        if (contentLength !== null) checkByteSpan(key, range, contentLength);
        throw new Error(`S3 GetObject of ${objectKey} ignored the Range header (answered ${JSON.stringify(response.ContentRange ?? null)})`);
      }
      const [first, last] = [Number(match[1]), Number(match[2])];
      const objectSize = match[3] === "*" ? null : Number(match[3]);
      if (first !== range.offset || last !== range.offset + range.length - 1) {
        // S3 clips a range that runs past the end rather than refusing it.
        if (objectSize !== null) checkByteSpan(key, range, objectSize);
        throw new Error(`S3 GetObject of ${objectKey} answered bytes ${first}-${last} for bytes ${range.offset}-${range.offset + range.length - 1}`);
      }
      return { body, objectSize };
    } catch (err) {
      body.destroy();
      throw err;
    }
  }

  /**
   * The bytes [start, end) of an object, starting from an already open response, re-requesting
   * the remainder when the connection fails mid-way. A short or long body is an error, never
   * silently passed on.
   */
  private resumingBody(key: BlobKey, objectKey: string, firstBody: Readable, start: number, end: number): Readable {
    const reads = this;
    return Readable.from(
      (async function* () {
        let body = firstBody;
        let position = start;
        let failures = 0;
        for (;;) {
          try {
            for await (const piece of body as AsyncIterable<Buffer>) {
              if (position + piece.length > end) {
                throw new Error(`S3 GetObject of ${objectKey} sent more than the ${end - start} bytes asked for`);
              }
              position += piece.length;
              failures = 0;
              yield piece;
            }
            if (position === end) return;
            throw Object.assign(new Error(`S3 GetObject of ${objectKey} ended at byte ${position} of ${end}`), {
              code: "ERR_STREAM_PREMATURE_CLOSE",
            });
          } catch (err) {
            body.destroy();
            failures++;
            if (!(await backOffBeforeRetry(reads.retryPolicy, failures, err))) throw err;
            body = (await reads.openRange(key, objectKey, { offset: position, length: end - position })).body;
          }
        }
      })(),
      { objectMode: false, highWaterMark: BODY_HIGH_WATER_MARK },
    );
  }
}
