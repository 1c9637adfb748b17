/**
 * How CAS upload routes receive their bodies: raw, streamed, capped.
 *
 * Real clients send xorbs and shards with no Content-Type at all (hf_xet) or with
 * `application/octet-stream` (huggingface.js), and a body may be 64 MiB: it must never be
 * parsed, buffered whole, or refused for its media type. The CAS scope (cas-scope.ts) calls
 * `acceptRawBodies` for all CAS routes; a route inside it reads its body like this:
 *
 * ```ts
 * export const shardRoutes: FastifyPluginAsync<Deps> = async (app, deps) => {
 *   app.post("/v1/shards", { bodyLimit: deps.maxShardBytes, config: { casScope: "write" } }, async (request) => {
 *     try {
 *       for await (const piece of bodyPieces(request)) parser.push(piece);   // 413 past bodyLimit
 *       …
 *     } catch (error) {
 *       throw settleUnreadBody(request, error);   // answer now, without a reset for the client
 *     }
 *   });
 * };
 * ```
 *
 * The cap is the route's own fastify `bodyLimit`, so one option sets it for both checks: a
 * `Content-Length` above it is refused with 413 before a single body byte is read, and a
 * body without a length (chunked) fails with 413 as soon as one byte too many arrives.
 *
 * Why not fastify's own body reading: it buffers the whole body before the handler runs. A
 * parser that passes the stream on instead gets no `bodyLimit` enforcement from fastify, so
 * both checks live here.
 */
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { bodyCutSignal, keepConnectionWhileDiscarding } from "./connection-limits.js";
import { HttpError, pathOf } from "./errors.js";

/** 413 for a body over the route's cap; the connection is closed since the rest is not read. */
export class PayloadTooLargeError extends HttpError {
  constructor(request: FastifyRequest, limit: number, declaredLength?: number) {
    const what =
      declaredLength === undefined
        ? `The request body exceeds the ${limit}-byte limit`
        : `The request body (Content-Length ${declaredLength}) exceeds the ${limit}-byte limit`;
    super(413, `${what} of ${request.method} ${pathOf(request.url)}: send a smaller body (split the data into smaller objects)`, {
      connection: "close",
    });
  }
}

/** The body ended before it was complete: the client went away or the connection broke. */
export class BodyInterruptedError extends HttpError {
  constructor(request: FastifyRequest) {
    super(400, `The request body of ${request.method} ${pathOf(request.url)} ended before it was complete (connection interrupted): send the request again`, {
      connection: "close",
    });
  }
}

/**
 * Makes every route of `scope` take its body raw: whatever the Content-Type (or none), the
 * body is left unread for the handler to stream with `bodyPieces`. `scope` must be an
 * encapsulated plugin instance (inside `app.register`): the parsers of its parent stay as
 * they were. A `Content-Length` above the route's `bodyLimit` is answered 413 here, before
 * the handler runs and without reading the body.
 */
export function acceptRawBodies(scope: FastifyInstance): void {
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser("*", (request: FastifyRequest, payload: IncomingMessage | Readable, done: (err: Error | null, body?: unknown) => void) => {
    const limit = bodyLimitOf(request);
    const declared = declaredLengthOf(request);
    if (declared !== undefined && declared > limit) {
      done(new PayloadTooLargeError(request, limit, declared));
      return;
    }
    // The payload stream (request.raw, or what a preParsing hook made of it) becomes the body, unread.
    done(null, payload);
  });
}

/** The byte cap of the request's route: its fastify `bodyLimit` option. */
export function bodyLimitOf(request: FastifyRequest): number {
  return request.routeOptions.bodyLimit;
}

/** The `Content-Length` the client announced, when it sent a valid one. */
export function declaredLengthOf(request: FastifyRequest): number | undefined {
  const header = request.headers["content-length"];
  if (header === undefined || !/^\d+$/.test(header)) return undefined;
  const length = Number(header);
  return Number.isSafeInteger(length) ? length : undefined;
}

/** The stream the body arrives on: what `acceptRawBodies` passed on, or the raw request. */
function bodyStreamOf(request: FastifyRequest): Readable {
  // A request without a body and without a Content-Type never reaches the parser.
  return request.body instanceof Readable ? request.body : request.raw;
}

/**
 * How many pieces (each up to 64 KiB, as the socket delivers them) may wait for a slow consumer
 * before the stream is paused, which pauses the socket and lets TCP hold back the client.
 */
const MAX_WAITING_PIECES = 4;

/**
 * The body's pieces as they arrive, in order, each a buffer the caller may keep. Throws
 * `PayloadTooLargeError` as soon as more than `maxBytes` (default: the route's `bodyLimit`)
 * have arrived, before handing on the piece that crossed the line, `BodyInterruptedError`
 * when the client goes away mid-body, and a 408 `HttpError` when the body arrives too slowly
 * (CASTOR_BODY_TIMEOUT, CASTOR_BODY_MIN_RATE: see connection-limits.ts).
 *
 * Stopping early (an exception in the consuming loop, a `break`) leaves the rest of the body
 * unread and the connection intact, so the route can still answer; `settleUnreadBody` then
 * disposes of the rest.
 *
 * Hand-written rather than `for await (… of stream)`: node's stream iterator destroys the
 * request (and with it the socket, and the answer) when the loop stops early, and it joins
 * whatever is buffered into one new buffer on every read, a copy per piece on the hot path.
 */
export async function* bodyPieces(request: FastifyRequest, maxBytes: number = bodyLimitOf(request)): AsyncGenerator<Buffer, void, undefined> {
  const stream = bodyStreamOf(request);
  if (stream.readableEnded) return;
  const waiting: Buffer[] = [];
  let ended = false;
  let failure: unknown = null;
  let wake: (() => void) | null = null;
  const notify = () => {
    const resolve = wake;
    wake = null;
    resolve?.();
  };
  const onData = (piece: Buffer) => {
    waiting.push(piece);
    if (waiting.length >= MAX_WAITING_PIECES) stream.pause();
    notify();
  };
  const onEnd = () => {
    ended = true;
    notify();
  };
  const onError = (error: unknown) => {
    failure ??= error;
    notify();
  };
  const onClose = () => {
    if (!ended) failure ??= new BodyInterruptedError(request);
    notify();
  };
  const cut = bodyCutSignal(request.raw);
  const onCut = () => {
    failure ??= cut!.reason;
    notify();
  };
  if (cut?.aborted) onCut();
  cut?.addEventListener("abort", onCut);
  stream.on("data", onData).on("end", onEnd).on("error", onError).on("close", onClose);
  let received = 0;
  try {
    for (;;) {
      const piece = waiting.shift();
      if (piece !== undefined) {
        received += piece.length;
        if (received > maxBytes) throw new PayloadTooLargeError(request, maxBytes);
        yield piece;
        continue;
      }
      if (failure !== null) throw failure instanceof HttpError || !isInterruption(failure, request) ? failure : new BodyInterruptedError(request);
      if (ended) return;
      if (stream.isPaused()) stream.resume();
      await new Promise<void>((resolve) => (wake = resolve));
    }
  } finally {
    stream.off("data", onData).off("end", onEnd).off("error", onError).off("close", onClose);
    cut?.removeEventListener("abort", onCut);
    // Whatever was not consumed stays unread (pieces already taken off the stream are dropped).
    if (!ended) stream.pause();
  }
}

/**
 * Makes `scope` read the bodies of `contentTypes` itself, with `bodyPieces`, and hand the route
 * `parse(text)`: the route's `bodyLimit` (413, by Content-Length before a byte is read), the body
 * timeouts (408) and an interrupted body (400) then apply as on the upload routes. fastify's own
 * body reading, which `addContentTypeParser(…, { parseAs: "string" })` uses, does not see the body
 * watchdog's cut: a body dribbled to it was closed without an answer.
 */
export function parseTextBodies(scope: FastifyInstance, contentTypes: string | string[], parse: (text: string, request: FastifyRequest) => unknown): void {
  scope.addContentTypeParser(contentTypes, async (request: FastifyRequest) => {
    const limit = bodyLimitOf(request);
    const declared = declaredLengthOf(request);
    if (declared !== undefined && declared > limit) throw new PayloadTooLargeError(request, limit, declared);
    const pieces: Buffer[] = [];
    for await (const piece of bodyPieces(request, limit)) pieces.push(piece);
    return parse(Buffer.concat(pieces).toString("utf8"), request);
  });
}

/**
 * `parseTextBodies` for JSON media types: the text is parsed by fastify's own JSON parser of
 * `scope`, which refuses `__proto__` and `constructor` keys. A text that does not parse is not
 * refused here but becomes an `UnparsedBody` carrying the error (400, worded as for
 * `application/json`), which the routes throw once they have checked who is calling
 * (`refuseUnparsedBody`): the caller's 401 comes first whatever the body holds. The body's size
 * and time limits still apply as it arrives.
 */
export function parseJsonBodies(scope: FastifyInstance, contentTypes: string | string[]): void {
  const parseJson = scope.getDefaultJsonParser("error", "error");
  parseTextBodies(
    scope,
    contentTypes,
    (text, request) => new Promise((resolve) => parseJson(request, text, (error, value) => resolve(error ? new UnparsedBody(error as Error) : value))),
  );
}

/** A JSON body that did not parse (parseJsonBodies). */
export class UnparsedBody {
  constructor(readonly error: Error) {}
}

/** Throws the parse error of an `UnparsedBody` (a `preValidation` hook, after the access check). */
export async function refuseUnparsedBody(request: FastifyRequest): Promise<void> {
  if (request.body instanceof UnparsedBody) throw request.body.error;
}

/** Reads the body to its end and drops it (routes that accept and ignore a body); returns its length. */
export async function discardBody(request: FastifyRequest, maxBytes: number = bodyLimitOf(request)): Promise<number> {
  let length = 0;
  for await (const piece of bodyPieces(request, maxBytes)) length += piece.length;
  return length;
}

/**
 * Call when a route gives up on a body it has not read to the end (it is about to answer an
 * error); returns `error` for `throw settleUnreadBody(request, error)`.
 *
 * Closing the connection with body bytes still in flight makes the client's TCP stack see a
 * reset, and many clients then report the reset instead of the answer. So, unless the error
 * itself asks for `Connection: close` (413: the rest may be endless; then the answer is
 * followed by a bounded linger, see connection-limits.ts), the rest of the body is read and
 * dropped in the background while the answer goes out; the connection stays usable. That
 * background read is bounded by the route's `bodyLimit` (past it the socket is closed) and must
 * end within the linger time of the answer (CASTOR_LINGER_TIMEOUT; connection-limits.ts closes
 * the connection otherwise).
 */
export function settleUnreadBody<E>(request: FastifyRequest, error: E): E {
  const stream = bodyStreamOf(request);
  if (stream.readableEnded || stream.destroyed) return error;
  if (error instanceof HttpError && error.headers.connection === "close") return error;
  keepConnectionWhileDiscarding(request.raw);
  const limit = bodyLimitOf(request);
  let dropped = 0;
  const onData = (piece: Buffer) => {
    dropped += piece.length;
    if (dropped > limit) {
      stream.off("data", onData);
      request.raw.socket?.destroy();
    }
  };
  // The request may still fail (client gone); nobody else listens any more.
  stream.on("error", () => undefined);
  stream.on("data", onData);
  stream.resume();
  return error;
}

function isInterruption(error: unknown, request: FastifyRequest): boolean {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return code === "ECONNRESET" || code === "ERR_STREAM_PREMATURE_CLOSE" || request.raw.destroyed;
}
