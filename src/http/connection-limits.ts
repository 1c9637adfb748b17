/**
 * How long castor waits for a client, and how it lets go of one (CASTOR_HEADER_TIMEOUT,
 * CASTOR_BODY_TIMEOUT, CASTOR_BODY_MIN_RATE, CASTOR_SEND_TIMEOUT, CASTOR_LINGER_TIMEOUT,
 * CASTOR_LINGER_BYTES), and how many clients it holds at once (CASTOR_MAX_CONNECTIONS). Without
 * limits a client holds a connection, its descriptor and whatever the request staged for as long
 * as it likes, by sending nothing, or one byte every few seconds, or by not reading the answer.
 *
 * - Connections: Node's `server.maxConnections`. A connection beyond it is closed as soon as it
 *   is accepted, before a byte is read, so the descriptors held stay bounded whatever the
 *   timeouts below allow; clients (and nginx) see a reset and retry.
 * - Headers: Node's `headersTimeout` (408, then the connection is closed). It runs from the
 *   connection's first byte of each request, so a connection that sends nothing is covered too.
 * - Request bodies: a watchdog per request (`watchRequestBody`) cuts a body that pauses longer
 *   than `bodyTimeoutMs`, or averages under `bodyMinBytesPerSecond` over a `bodyTimeoutMs` window,
 *   counting only time in which castor was actually waiting for the client (not time its own
 *   consumer held the stream back). A route reading with `bodyPieces` sees a 408 error (its
 *   staged data is dropped as for any failed upload); otherwise the connection is destroyed.
 * - Answers the client does not read: the socket's inactivity timeout (`sendTimeoutMs`), which
 *   Node suspends while a write makes progress; when it fires with output still queued, the
 *   socket is destroyed, which fails the pending writes (their callbacks still run, so pooled
 *   buffers go back) and ends the response's streams.
 * - Answers sent before the body was read (401/403 from the auth hook, 413 by Content-Length,
 *   a 408, a route that gives up): RFC 9112 §9.6's graceful close. Closing a socket that still
 *   has unread input makes the kernel send a reset, which destroys the answer in flight (a
 *   client sees a reset; nginx, still writing the body, sees EPIPE, answers 502 and marks the
 *   node down). So such an answer carries `Connection: close`, then the write side is closed
 *   (FIN after the answer) and the rest of the body is read and dropped, at most `lingerBytes`
 *   of it (then castor stops reading: a client still sending stalls, and reads the answer), and
 *   the socket is closed when the body ends or after `lingerTimeoutMs`. The bounds are
 *   small on purpose: they are spent on clients castor refused (unauthenticated ones included),
 *   and a peer has the answer within milliseconds of its arrival; see the defaults (DEFAULT_CONNECTION_LIMITS in
 *   config.ts).
 *   A route may instead keep the connection and drop the rest in the background
 *   (`settleUnreadBody` in raw-body.ts); the rest must then end within `lingerTimeoutMs` of the
 *   answer too, or the connection is closed.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { FastifyInstance } from "fastify";
import type { OnRefusal } from "../metrics.js";
import type { ConnectionLimits } from "../config.js";
import { HttpError, pathOf } from "./errors.js";

/** Dropped connections are logged at most this often, so a flood of them cannot flood the log. */
const DROP_LOG_INTERVAL_MS = 10_000;

/** The options Node's HTTP server takes at construction (fastify's `http` option). */
export function httpServerOptions(limits: ConnectionLimits): { headersTimeout: number; connectionsCheckingInterval: number } {
  return {
    headersTimeout: limits.headerTimeoutMs,
    // Node checks header deadlines on this interval (default 30 s, which would double a 30 s
    // limit); a tenth of the limit, at most 1 s, keeps the overshoot small.
    connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(limits.headerTimeoutMs / 10))),
  };
}

/**
 * Installs the body watchdog, the send timeout and the graceful early close on `app` (the root
 * instance, before its routes). The header timeout is `httpServerOptions`' part; `onRefusal`
 * hears of every client each limit refuses or cuts off.
 */
export function installConnectionLimits(app: FastifyInstance, limits: ConnectionLimits, onRefusal: OnRefusal = () => {}): void {
  const requestsInProgress = new WeakMap<Socket, number>();
  app.server.maxConnections = limits.maxConnections;
  // Node's header timeout answers 408 through the server's clientError event (fastify's
  // handler writes the answer; this listener only counts). Fastify sets no request timeout,
  // so this code comes from the header timeout alone.
  app.server.on("clientError", (error: NodeJS.ErrnoException) => {
    if (error.code === "ERR_HTTP_REQUEST_TIMEOUT") onRefusal("header_timeout");
  });
  let dropped = 0;
  let lastDropLog = 0;
  app.server.on("drop", () => {
    onRefusal("connection_limit");
    dropped++;
    const now = Date.now();
    if (now - lastDropLog < DROP_LOG_INTERVAL_MS) return;
    lastDropLog = now;
    app.log.warn(
      { dropped, maxConnections: limits.maxConnections },
      `connections refused: ${limits.maxConnections} already open (CASTOR_MAX_CONNECTIONS); ${dropped} refused since start-up`,
    );
  });
  app.server.setTimeout(limits.sendTimeoutMs);
  // With a listener, Node leaves the decision to it. Queued output that made no progress for
  // the whole timeout (Node suspends the timeout while a write progresses) is an answer the
  // client does not read; a socket with nothing in progress is idle, and Node would close it.
  // A request being worked on (a long validation, a body the watchdog watches) is left alone.
  app.server.on("timeout", (socket: Socket) => {
    if (socket.writableLength > 0) {
      onRefusal("send_timeout");
      socket.destroy();
    } else if (!requestsInProgress.get(socket)) socket.destroy();
  });

  app.addHook("onRequest", async (request, reply) => {
    const socket = request.raw.socket;
    requestsInProgress.set(socket, (requestsInProgress.get(socket) ?? 0) + 1);
    reply.raw.once("close", () => requestsInProgress.set(socket, (requestsInProgress.get(socket) ?? 1) - 1));
    if (hasBody(request.raw)) watchRequestBody(request.raw, reply.raw, limits, onRefusal);
  });

  app.addHook("onSend", async (request, reply, payload) => {
    const raw = request.raw;
    if (!hasBody(raw) || raw.complete) return payload;
    if (discardingInBackground.has(raw)) {
      boundBackgroundDiscard(raw, reply.raw, limits);
    } else {
      reply.header("connection", "close");
      lingerAfterAnswer(raw, limits);
    }
    return payload;
  });
}

/** The request announced a body (a positive Content-Length, or chunked). */
export function hasBody(request: IncomingMessage): boolean {
  return request.headers["transfer-encoding"] !== undefined || Number(request.headers["content-length"] ?? 0) > 0;
}

/** Requests whose route chose to read the rest of the body on a connection it keeps (settleUnreadBody). */
const discardingInBackground = new WeakSet<IncomingMessage>();

/** Marks the request's answer as one that keeps its connection while the rest of its body is dropped. */
export function keepConnectionWhileDiscarding(request: IncomingMessage): void {
  discardingInBackground.add(request);
}

/** Per request with a body: aborted with a 408 `HttpError` when the watchdog cuts the body. */
const bodyCuts = new WeakMap<IncomingMessage, AbortController>();

/** Aborted (reason: a 408 `HttpError`) when the request's body arrives too slowly; undefined without a watchdog. */
export function bodyCutSignal(request: IncomingMessage): AbortSignal | undefined {
  return bodyCuts.get(request)?.signal;
}

/**
 * Watches a body's progress by the socket's byte count (no listener on the body, so the
 * consumer's flow control stays its own) until the body is complete or the connection closes.
 */
function watchRequestBody(request: IncomingMessage, response: ServerResponse, limits: ConnectionLimits, onRefusal: OnRefusal): void {
  const socket = request.socket;
  const cut = new AbortController();
  bodyCuts.set(request, cut);
  const tickMs = Math.max(10, Math.min(1000, Math.floor(limits.bodyTimeoutMs / 4)));
  const windowMinBytes = (limits.bodyMinBytesPerSecond * limits.bodyTimeoutMs) / 1000;
  let lastBytes = socket.bytesRead;
  let lastTick = Date.now();
  let waitedSinceByte = 0;
  let windowWaited = 0;
  let windowStartBytes = lastBytes;

  const timer = setInterval(() => {
    if (request.complete || socket.destroyed) return stop();
    const now = Date.now();
    const elapsed = now - lastTick;
    lastTick = now;
    const bytes = socket.bytesRead;
    // Only time in which castor wanted bytes and had none buffered counts against the client:
    // a consumer that paused the stream (backpressure) or has not started reading holds it back.
    const waitingForClient = request.readableFlowing === true && request.readableLength === 0;
    if (bytes !== lastBytes) {
      lastBytes = bytes;
      waitedSinceByte = 0;
    } else if (waitingForClient) {
      waitedSinceByte += elapsed;
    }
    if (waitingForClient) windowWaited += elapsed;
    if (waitedSinceByte >= limits.bodyTimeoutMs) {
      return cutBody("body_timeout", `no byte of it arrived for ${limits.bodyTimeoutMs / 1000} s`);
    }
    if (windowWaited >= limits.bodyTimeoutMs) {
      if (bytes - windowStartBytes < windowMinBytes) {
        return cutBody("body_too_slow", `it arrived at less than ${limits.bodyMinBytesPerSecond} bytes/s over ${limits.bodyTimeoutMs / 1000} s`);
      }
      windowWaited = 0;
      windowStartBytes = bytes;
    }
  }, tickMs).unref();
  // Stopped as soon as the exchange ends: a keep-alive socket carries many requests, and a
  // listener left on it until the next tick would pile up (MaxListenersExceededWarning).
  const stop = () => {
    clearInterval(timer);
    socket.off("close", stop);
    response.off("close", stop);
  };
  socket.once("close", stop);
  response.once("close", stop);

  function cutBody(reason: "body_timeout" | "body_too_slow", why: string): void {
    stop();
    onRefusal(reason);
    // The answer is out (lingering, or dropping the rest in the background): nothing to tell.
    if (response.headersSent || response.writableEnded) {
      socket.destroy();
      return;
    }
    cut.abort(
      new HttpError(
        408,
        `The request body of ${request.method} ${pathOf(request.url ?? "")} was cut because ${why}: check the connection and send the request again`,
        {
          connection: "close",
        },
      ),
    );
    // A route reading with bodyPieces answers the 408 now; anything else (a route not reading,
    // fastify's own body parser) gets no say: the connection goes once the linger bound passed.
    setTimeout(() => {
      if (!response.headersSent) socket.destroy();
    }, limits.lingerTimeoutMs).unref();
  }
}

/**
 * A route dropping the rest of a body in the background keeps the connection for the next
 * request, but not for longer than a refused client gets: once the answer is out, the rest must
 * end within the linger time, or the connection is closed (the answer is with the client by
 * then). Without this, a client answered 400 could hold the connection by sending the rest one
 * byte at a time, since the body watchdog stops with the exchange.
 */
function boundBackgroundDiscard(request: IncomingMessage, response: ServerResponse, limits: ConnectionLimits): void {
  const socket = request.socket;
  if (socket === null) return;
  response.once("finish", () => {
    if (request.complete || socket.destroyed) return;
    const timer = setTimeout(() => socket.destroy(), limits.lingerTimeoutMs).unref();
    const cancel = () => {
      clearTimeout(timer);
      request.off("end", cancel);
      socket.off("close", cancel);
    };
    request.once("end", cancel);
    socket.once("close", cancel);
  });
}

/**
 * Instead of Node closing the socket once the answer is written (it would, for `Connection:
 * close`), closes the write side, reads and drops the rest of the body up to the linger bytes,
 * and closes once it ends or at the linger time. See the file comment for why.
 */
function lingerAfterAnswer(request: IncomingMessage, limits: ConnectionLimits): void {
  const socket = request.socket;
  // Gone already (the client left): there is nothing to linger on.
  if (socket === null || socket.destroyed) return;
  socket.destroySoon = () => {
    if (socket.destroyed) return;
    // FIN after the answer: the client (or proxy) sees the answer complete.
    socket.end();
    if (request.complete) {
      socket.destroy();
      return;
    }
    let dropped = 0;
    const close = () => {
      clearTimeout(timer);
      socket.destroy();
    };
    const timer = setTimeout(close, limits.lingerTimeoutMs).unref();
    // Our own listener instead of Node's discarding: it counts, and it keeps reading even when
    // a route had paused the body.
    request.removeAllListeners("data");
    request.on("data", (piece: Buffer) => {
      dropped += piece.length;
      // Past the byte bound castor stops reading rather than closing at once: a close with
      // unread input is a reset, which can destroy the answer before a client busy sending has
      // read it; stopped, the client's sending stalls and it reads the answer, and the socket
      // still closes at the time bound.
      if (dropped > limits.lingerBytes) request.pause();
    });
    request.once("end", close);
    request.on("error", () => undefined);
    socket.once("close", () => clearTimeout(timer));
    request.resume();
  };
}
