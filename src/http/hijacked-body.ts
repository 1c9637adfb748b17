/**
 * Sending a body straight to the socket, past fastify (`reply.hijack()`), for the routes that
 * write pooled buffers and must know when each write is done (the transfer route, resolve of
 * Xet files): `reply.send` takes a stream, whose buffers cannot be known to be written. The
 * request is still logged as usual.
 */
import type { ServerResponse } from "node:http";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";

/**
 * Writes the status and the headers already set on `reply`, then the body `write` produces;
 * `close` runs at the end whatever happened. A failure after the status line can only cut the
 * response short (the client sees a body shorter than its Content-Length); it is logged with
 * `failure` as the message.
 */
export async function sendHijacked(
  app: FastifyInstance,
  request: FastifyRequest,
  reply: FastifyReply,
  body: { write(out: ServerResponse): Promise<void>; close(): Promise<void>; failure: string },
): Promise<void> {
  reply.hijack();
  const out = reply.raw;
  try {
    for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) out.setHeader(name, value);
    // The onSend hook that says so during shutdown does not run for a hijacked reply.
    if (!app.server.listening) out.setHeader("connection", "close");
    out.writeHead(reply.statusCode);
    await body.write(out);
    if (!out.destroyed) out.end();
  } catch (error) {
    request.log.error({ err: error }, body.failure);
    out.destroy();
  } finally {
    await body.close();
  }
}
