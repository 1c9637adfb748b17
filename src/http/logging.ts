/**
 * Logs: pino JSON lines through fastify, exactly one line per request, and no secrets.
 *
 * Secrets reach castor in three places: the `Authorization` header (hub tokens, CAS tokens),
 * the token operation's response (a CAS token in the body and in `X-Xet-Access-Token`) and
 * transfer-URL queries (signatures). The request line therefore carries the path without its
 * query and no headers or bodies at all; the redaction paths below are a second line of
 * defence for anything that logs a raw request or its headers anyway.
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import type { IncomingMessage } from "node:http";
import { LogController, type FastifyReply, type FastifyRequest } from "fastify";
import { pino, type DestinationStream, type Logger } from "pino";
import type { CastorConfig } from "../config.js";
import { pathOf, REQUEST_ID_HEADER } from "./errors.js";

export const REDACTED_PATHS = [
  "req.headers.authorization",
  "req.headers.cookie",
  'req.headers["x-xet-access-token"]',
  "headers.authorization",
  "headers.cookie",
  'res.headers["x-xet-access-token"]',
];

/**
 * The server's logger. `worker` (`castor serve --workers N`) is written on every line: 1…N for
 * the worker that answered or logged, 0 for the primary; absent when castor runs as one process.
 */
export function createLogger(level: CastorConfig["logLevel"], destination?: DestinationStream, worker?: number): Logger {
  return pino(
    {
      level,
      ...(worker === undefined ? {} : { base: { pid: process.pid, hostname: hostname(), worker } }),
      redact: { paths: REDACTED_PATHS, censor: "[redacted]" },
      serializers: { req: requestSummary, res: responseSummary, err: pino.stdSerializers.err },
    },
    destination ?? pino.destination({ fd: 1, sync: true }),
  );
}

/** What any code that logs a request object gets: never the query, never a header. */
function requestSummary(request: { method?: string; url?: string }): Record<string, unknown> {
  return { method: request.method, path: request.url === undefined ? undefined : pathOf(request.url) };
}

/** A response's headers may carry a freshly issued token (`X-Xet-Access-Token`): only the status is logged. */
function responseSummary(reply: { statusCode?: number }): Record<string, unknown> {
  return { statusCode: reply.statusCode };
}

/** Incoming ids are reused (a proxy in front may have set one) only when short and plain. */
const ACCEPTABLE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestIdFor(raw: IncomingMessage): string {
  const incoming = raw.headers[REQUEST_ID_HEADER];
  return typeof incoming === "string" && ACCEPTABLE_REQUEST_ID.test(incoming) ? incoming : randomUUID();
}

const SESSION_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Replaces fastify's two lines per request ("incoming request", "request completed", the
 * latter with the full URL) by one line written when the response is done.
 */
export class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}

  override routeNotFound(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const sessionId = request.headers["x-xet-session-id"];
    const line: Record<string, unknown> = {
      method: request.method,
      path: pathOf(request.url),
      route: request.routeOptions.url,
      statusCode: reply.statusCode,
      durationMs: Math.round(reply.elapsedTime * 100) / 100,
      remoteAddress: request.ip,
    };
    if (typeof sessionId === "string" && SESSION_ID.test(sessionId)) line.xetSessionId = sessionId;
    // The token's id, never the token: enough to tie a request to an issue in the log.
    if (request.casAccess) line.casTokenId = request.casAccess.jti;
    if (error) {
      line.err = error;
      request.log.error(line, "request aborted");
    } else {
      request.log.info(line, "request");
    }
  }
}
