/**
 * The hub's one error type. `status` is the HTTP status the HTTP layer answers with; the
 * admin commands map 400 to a usage error and the others to a failure. Messages are one
 * sentence a user can act on.
 *
 * `code` is what Hugging Face clients read from `X-Error-Code` to tell a missing repository,
 * revision or file apart (`file_exists` returns false, `hf download` says which one); a missing
 * file also names the commit it was looked up in.
 */
export type HubErrorStatus = 400 | 401 | 403 | 404 | 409 | 411 | 412 | 413 | 415 | 422 | 429 | 501 | 502 | 504;
/**
 * `NotSupported`: a Hub feature castor does not have (pull requests, discussions, gated
 * repositories, Spaces runtime, inference); `GatedRepo`: a mirrored repository the upstream hub
 * does not let castor's identity download.
 */
export type HubErrorCode = "RepoNotFound" | "RevisionNotFound" | "EntryNotFound" | "NotSupported" | "GatedRepo";

export class HubError extends Error {
  override readonly name = "HubError";
  constructor(
    readonly status: HubErrorStatus,
    message: string,
    readonly code?: HubErrorCode,
    /** The commit a missing entry was looked up in (`X-Repo-Commit`). */
    readonly commitOid?: string,
    /** Seconds a client should wait before asking again (`Retry-After`, with a 429). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/** The 400 for a Hub feature castor does not have: names the feature, carries `X-Error-Code: NotSupported`. */
export function notSupported(feature: string, hint = ""): HubError {
  return new HubError(400, `${feature} ${/s$/.test(feature) ? "are" : "is"} not supported by castor${hint === "" ? "" : `: ${hint}`}`, "NotSupported");
}
