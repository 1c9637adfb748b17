/**
 * What can go wrong asking the upstream hub, in the terms the mirror decides by: the upstream
 * said a name does not exist (`not_found`, with its `X-Error-Code`), refused castor's identity
 * (`gated`, `unauthorized`, `forbidden`), asked castor to slow down (`rate_limited`, after the
 * client's own waits), could not be reached or did not answer in time (`unreachable`,
 * `timeout`), or answered something the Hub API does not (`bad_answer`, also bytes that fail
 * verification).
 *
 * Messages name the upstream by its URL and never carry a token or a URL's query.
 */
export type UpstreamErrorKind = "not_found" | "gated" | "unauthorized" | "forbidden" | "rate_limited" | "unreachable" | "timeout" | "bad_answer";

export class UpstreamError extends Error {
  override readonly name = "UpstreamError";
  constructor(
    readonly kind: UpstreamErrorKind,
    message: string,
    readonly details: {
      /** The upstream's status, when it answered. */
      status?: number;
      /** Its `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`, `GatedRepo`). */
      code?: string | null;
      /** Its `Retry-After`, in milliseconds, on a 429. */
      retryAfterMs?: number | null;
      cause?: unknown;
    } = {},
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
  }

  get status(): number | null {
    return this.details.status ?? null;
  }

  get code(): string | null {
    return this.details.code ?? null;
  }

  /** Whether the upstream could not be asked at all: then castor serves what it holds. */
  get isOutage(): boolean {
    return this.kind === "unreachable" || this.kind === "timeout" || this.kind === "rate_limited";
  }
}

export function isUpstreamError(error: unknown, kind?: UpstreamErrorKind): error is UpstreamError {
  return error instanceof UpstreamError && (kind === undefined || error.kind === kind);
}
