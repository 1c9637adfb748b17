/**
 * The errors castor's client throws. Every failure the caller can act on is a
 * `CastorClientError` whose `kind` says whose fault it is, so a command line can pick an exit
 * code and a library user can decide what to retry:
 *
 * - `usage`: the request itself is wrong (malformed repository reference, hash or range);
 * - `http`: the server answered with a status that ends the operation (it carries the status
 *   and the server's own `{"error": …}` message);
 * - `network`: the server could not be reached, even after retries;
 * - `protocol`: the server answered something the protocol does not allow (bad JSON shape,
 *   a byte range that does not parse as chunks, a body longer than announced);
 * - `integrity`: data arrived intact as HTTP but does not hash to what was asked for;
 * - `io`: a local file could not be read or written.
 */
export type ClientErrorKind = "usage" | "http" | "network" | "protocol" | "integrity" | "io";

export class CastorClientError extends Error {
  override readonly name: string = "CastorClientError";
  constructor(
    readonly kind: ClientErrorKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** A non-retryable HTTP status (or a retryable one that outlasted every retry). */
export class HttpStatusError extends CastorClientError {
  override readonly name: string = "HttpStatusError";
  constructor(
    readonly status: number,
    /** The server's `error` field, or the start of a non-JSON body; null for an empty body. */
    readonly serverMessage: string | null,
    message: string,
  ) {
    super("http", message);
  }
}

export function isClientError(error: unknown, kind?: ClientErrorKind): error is CastorClientError {
  return error instanceof CastorClientError && (kind === undefined || error.kind === kind);
}
