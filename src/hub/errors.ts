/**
 * The hub's one error type. `status` is the HTTP status the HTTP layer answers with; the
 * admin commands map 400 to a usage error and the others to a failure. Messages are one
 * sentence a user can act on.
 */
export class HubError extends Error {
  override readonly name = "HubError";
  constructor(
    readonly status: 400 | 404 | 409,
    message: string,
  ) {
    super(message);
  }
}
