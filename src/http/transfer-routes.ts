/**
 * The transfer route: xorb byte ranges behind signed URLs (docs/protocol.md §8.7, docs/design.md §4.2).
 *
 *     GET  /v1/transfer/{xorb}?x=…&r=…&s=…   Range: bytes=s-e | bytes=s1-e1,s2-e2,…
 *     HEAD /v1/transfer/{xorb}?x=…&r=…&s=…   the same checks and headers, no body
 *
 * No Authorization header: real clients send none, and one that is sent is ignored — the URL
 * authorises itself (src/auth/transfer-url.ts). Answers:
 *
 * - 206 with the bytes (`Content-Range: bytes s-e/<stored size>`) for one range; 206
 *   `multipart/byteranges` streamed part by part (src/http/multipart.ts) for the full list.
 * - 403 for everything that is the URL's fault: altered, expired, no Range header, or a Range
 *   that is not exactly one signed range or the whole signed list. Both clients react to 403
 *   by asking the reconstruction API for fresh URLs, which is the right recovery for all of these.
 * - 404 when the xorb is not stored.
 * - 416, with the unsatisfied form of Content-Range ("bytes", a star, a slash, the stored size),
 *   when a requested signed range ends beyond the stored object. The URL is genuine, so fresh
 *   URLs would fail the same way: 416 tells the client to stop instead of re-querying in a
 *   loop, and points operators at inconsistent metadata.
 *
 * Only bytes inside the requested signed ranges are ever read. Responses are never compressed
 * (`Cache-Control: no-transform` asks proxies not to either): the bytes are xorb chunks that
 * clients parse by offset, and the Content-Length is part of the contract.
 *
 * Logs: the request line carries the path without the query (logging.ts); nothing here logs
 * the URL, the signature or the Range header.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import type { ServerResponse } from "node:http";
import type { Readable } from "node:stream";
import { selectRequestedRanges, type TransferUrlVerifier } from "../auth/transfer-url.js";
import type { ByteRange } from "../format/ranges.js";
import { BlobStoreError, blobKeyFromHex, isBlobStoreError, type BlobKey, type BlobStore, type ByteSpan, type SpanReader } from "../storage/blob-store.js";
import type { UpstreamXorbRange } from "../hub/mirrored.js";
import { BufferPool } from "./buffer-pool.js";
import { HttpError } from "./errors.js";
import { sendHijacked } from "./hijacked-body.js";
import { multipartByteRanges } from "./multipart.js";
import { drainedOrClosed } from "../writable-drain.js";

export interface TransferRouteDeps {
  /** Where xorbs are stored (`xorbs/<hex>` keys). */
  blobs: BlobStore;
  /** Verifies the signed URLs (an `HmacTransferUrls` with the server's URL key). */
  transferUrls: TransferUrlVerifier;
  /**
   * A mirror's upstream xorbs (src/mirror/upstream-xorbs.ts): for a xorb not stored, waits while
   * a fill may bring it; `stored` once castor holds it, its range's bytes when castor holds its
   * chunks repacked, null when castor will not have it.
   */
  upstreamXorbRange?: (xorbHex: string, range: ByteRange) => Promise<UpstreamXorbRange | null>;
}

export const TRANSFER_ROUTE = "/v1/transfer/:xorb";

interface TransferPlan {
  key: BlobKey;
  xorbHex: string;
  ranges: readonly ByteRange[];
  size: number;
}

export const transferRoutes: FastifyPluginAsync<TransferRouteDeps> = async (app, deps) => {
  const { blobs, transferUrls } = deps;

  /** Everything short of reading bytes: the URL, the Range header, the stored size. */
  async function plan(request: FastifyRequest): Promise<TransferPlan> {
    // A refused URL or Range is a TransferUrlError (403, errors.ts).
    const { xorbHex, ranges: signed } = transferUrls.verify(request.url);
    const ranges = selectRequestedRanges(signed, request.headers.range);
    const key = blobKeyFromHex("xorbs", xorbHex);
    const size = await blobs.size(key);
    if (size === null) throw notStored(xorbHex);
    const last = ranges[ranges.length - 1];
    if (last.end >= size) throw unsatisfiable(xorbHex, last, size);
    return { key, xorbHex, ranges, size };
  }

  /**
   * A single signed range of a xorb castor does not store whole but a mirror holds (or is about to
   * hold) the chunks of: its bytes, assembled from castor's xorbs. Null when the xorb is stored (or
   * becomes stored while waiting: the ordinary path serves it) or when there is no mirror; the
   * ordinary path answers 404 when castor will not have it.
   */
  async function upstreamRange(request: FastifyRequest): Promise<{ ranges: readonly ByteRange[]; body: Readable; length: number } | null> {
    if (deps.upstreamXorbRange === undefined) return null;
    const { xorbHex, ranges: signed } = transferUrls.verify(request.url);
    const ranges = selectRequestedRanges(signed, request.headers.range);
    if (ranges.length !== 1 || (await blobs.size(blobKeyFromHex("xorbs", xorbHex))) !== null) return null;
    const found = await deps.upstreamXorbRange(xorbHex, ranges[0]);
    if (found === null || found === "stored") return null;
    if (found === "pending") {
      throw new HttpError(503, `xorb ${xorbHex}'s bytes are still being fetched from the mirror's upstream hub: retry shortly`, { "retry-after": "2" });
    }
    // The upstream failed the fill meant to bring these bytes: the mirror's 502, naming it.
    if ("failed" in found) throw new HttpError(502, found.failed);
    return { ranges, ...found };
  }

  /** Opens a signed range with `how` (a stream or a span), its errors mapped as `plan` maps them. */
  async function openRange<T>(transfer: TransferPlan, range: ByteRange, how: (key: BlobKey, span: ByteSpan) => Promise<T>): Promise<T> {
    try {
      return await how(transfer.key, { offset: range.start, length: range.end - range.start + 1 });
    } catch (error) {
      // The object vanished or shrank between size() and the open: answer as if seen in plan().
      if (isBlobStoreError(error, "not_found")) throw notStored(transfer.xorbHex, error);
      if (isBlobStoreError(error, "range_not_satisfiable")) throw unsatisfiable(transfer.xorbHex, range, transfer.size, error);
      throw error;
    }
  }
  const open = (transfer: TransferPlan, range: ByteRange) => openRange(transfer, range, (key, span) => blobs.read(key, span));
  // Stores that offer positional reads serve single ranges from pooled buffers (see sendSpan).
  const openSpan = blobs.openSpan?.bind(blobs);

  /** Sets the 206 headers; returns the multipart body when there are several ranges. */
  function describe(reply: FastifyReply, transfer: TransferPlan) {
    reply.code(206).header("accept-ranges", "bytes").header("cache-control", "no-transform");
    if (transfer.ranges.length === 1) {
      const [range] = transfer.ranges;
      reply
        .header("content-type", "application/octet-stream")
        .header("content-range", `bytes ${range.start}-${range.end}/${transfer.size}`)
        .header("content-length", String(range.end - range.start + 1));
      return null;
    }
    const multipart = multipartByteRanges({
      ranges: transfer.ranges,
      totalSize: transfer.size,
      openPart: (range) => open(transfer, range),
    });
    reply.header("content-type", multipart.contentType).header("content-length", String(multipart.contentLength));
    return multipart.body;
  }

  // HEAD is declared explicitly (fastify's automatic HEAD would run the GET handler and open
  // the blob only to drop its bytes).
  app.get(TRANSFER_ROUTE, { exposeHeadRoute: false }, async (request, reply) => {
    const upstream = await upstreamRange(request);
    if (upstream !== null) {
      const [range] = upstream.ranges;
      reply
        .code(206)
        .header("accept-ranges", "bytes")
        .header("cache-control", "no-transform")
        .header("content-type", "application/octet-stream")
        // The upstream xorb's size is not known here, only its bytes in the range.
        .header("content-range", `bytes ${range.start}-${range.end}/*`)
        .header("content-length", String(upstream.length));
      return reply.send(upstream.body);
    }
    const transfer = await plan(request);
    // A single range is opened before any header is set, so a failure still gets a clean error
    // response; multipart parts open as the body is read.
    if (transfer.ranges.length === 1 && openSpan) {
      const span = await openRange(transfer, transfer.ranges[0], openSpan);
      describe(reply, transfer);
      // The client retries a response cut short.
      return sendHijacked(app, request, reply, {
        write: (out) => pumpSpan(span, out),
        close: () => span.close(),
        failure: "transfer aborted while reading the stored xorb",
      });
    }
    const singleBody = transfer.ranges.length === 1 ? await open(transfer, transfer.ranges[0]) : null;
    const multipartBody = describe(reply, transfer);
    return reply.send(singleBody ?? multipartBody);
  });

  app.head(TRANSFER_ROUTE, async (request, reply) => {
    const transfer = await plan(request);
    const multipartBody = describe(reply, transfer);
    // Built only for its headers; it opened nothing.
    multipartBody?.destroy();
    return reply.send();
  });
};

/**
 * Read buffers shared by all single-range responses. A response holds at most two at a time
 * (one being read, one being written), so this many idle ones cover many concurrent downloads;
 * beyond that, buffers are allocated and left to the GC.
 */
const spanBuffers = new BufferPool(1024 * 1024, 64);

/** Reads the span into pooled buffers and gives each back in its write's callback, once the socket has it. */

async function pumpSpan(span: SpanReader, out: ServerResponse): Promise<void> {
  let from = 0;
  while (from < span.length && !out.destroyed) {
    const buffer = spanBuffers.take();
    let bytesRead: number;
    try {
      bytesRead = await span.read(buffer, from);
    } catch (error) {
      spanBuffers.give(buffer);
      throw error;
    }
    if (bytesRead === 0) {
      spanBuffers.give(buffer);
      throw new Error(`the stored xorb ended ${span.length - from} bytes before the end of the signed range`);
    }
    from += bytesRead;
    // The callback runs once the bytes are with the socket, or once the write has failed.
    const flowing = out.write(bytesRead === buffer.length ? buffer : buffer.subarray(0, bytesRead), () => spanBuffers.give(buffer));
    if (!flowing && from < span.length) await drainedOrClosed(out);
  }
}

/** The store's `not_found` in words for the client (404, errors.ts). */
function notStored(xorbHex: string, cause?: unknown): BlobStoreError {
  return new BlobStoreError(
    "not_found",
    `Xorb ${xorbHex} is not stored on this server: its file may have been removed; request fresh URLs from the reconstruction API`,
    {
      cause,
    },
  );
}

/** The store's `range_not_satisfiable` in words for the client (416 naming the stored size, errors.ts). */
function unsatisfiable(xorbHex: string, range: ByteRange, size: number, cause?: unknown): BlobStoreError {
  return new BlobStoreError(
    "range_not_satisfiable",
    `The signed range ${range.start}-${range.end} lies beyond the end of xorb ${xorbHex} (${size} bytes): the server's records disagree with the stored object; report this to the server operator`,
    { objectSize: size, cause },
  );
}
