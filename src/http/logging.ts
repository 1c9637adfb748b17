/**
 * Logs: pino JSON lines through fastify, exactly one line per request, and no secrets. On a
 * terminal (or with CASTOR_LOG_FORMAT=pretty) the same records are written for a person to
 * read by pino-pretty; redaction happens before, in pino, so both formats carry the same
 * (secret-free) fields.
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
import pinoPretty from "pino-pretty";
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

export type LogFormat = "json" | "pretty";

/** CASTOR_LOG_FORMAT, or by default: readable lines on a terminal, JSON lines otherwise (a file, a pipe, a log collector). */
export function logFormatFor(configured: LogFormat | null, stdout: { isTTY?: boolean } = process.stdout): LogFormat {
  return configured ?? (stdout.isTTY === true ? "pretty" : "json");
}

/**
 * Where a server's log lines go: stdout (or `out`), as JSON lines or through pino-pretty. Both
 * write synchronously, so a line is out before the process can exit.
 */
export function logDestination(format: LogFormat, out?: NodeJS.WritableStream): DestinationStream {
  if (format === "json") return out ?? pino.destination({ fd: 1, sync: true });
  return pinoPretty({
    destination: out ?? 1,
    sync: true,
    translateTime: "SYS:HH:MM:ss",
    singleLine: true,
    // Shown in the message (see readableMessage) or of no use to a person watching the server:
    // the request id and session ids are in the JSON format for whoever correlates requests.
    ignore: "pid,hostname,worker,reqId,method,path,route,statusCode,durationMs,remoteAddress,xetSessionId,casTokenId",
    messageFormat: readableMessage,
  });
}

/** A line's message on a terminal: requests as `GET /path 200 3.1 ms`, each line with its worker. */
function readableMessage(line: Record<string, unknown>, messageKey: string): string {
  const worker = typeof line.worker === "number" ? (line.worker === 0 ? "[primary] " : `[worker ${line.worker}] `) : "";
  const message = String(line[messageKey] ?? "");
  if (typeof line.method !== "string" || typeof line.statusCode !== "number") return `${worker}${message}`;
  const request = `${line.method} ${String(line.path)} ${line.statusCode} ${String(line.durationMs)} ms`;
  return `${worker}${message === "request" ? request : `${message}: ${request}`}`;
}

/** Most lines a `HeldBackLines` keeps; past it they are let through (a start-up that logs that much is worth watching). */
const MAX_HELD_LINES = 1000;

/**
 * A destination that holds lines back until `release()`, then writes them and everything after
 * at once: `castor serve` prints its terminal banner before the start-up's log lines.
 */
export class HeldBackLines implements DestinationStream {
  private held: string[] | null = [];

  constructor(private readonly target: DestinationStream) {}

  write(line: string): void {
    if (this.held === null) this.target.write(line);
    else if (this.held.push(line) >= MAX_HELD_LINES) this.release();
  }

  /** Writes the lines held so far; from now on lines pass straight through. Idempotent. */
  release(): void {
    const held = this.held ?? [];
    this.held = null;
    for (const line of held) this.target.write(line);
  }
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
