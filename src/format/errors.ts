/**
 * The one error type the format layer throws for bad input. Every decoder in `src/format`
 * turns malformed, truncated or oversized bytes into a `FormatError` with a stable `code`
 * (for tests and metrics) and a message a client can act on; the services turn it into their
 * rejection of an upload (XorbRejectedError, ShardRejectedError), which the HTTP layer answers.
 */
export type FormatErrorCode =
  | "bad_hash"
  | "bad_chunk_header"
  | "unknown_compression_scheme"
  | "chunk_too_large"
  | "bad_compression"
  | "decompressed_size_mismatch"
  | "truncated"
  | "too_many_chunks"
  | "xorb_too_large"
  | "empty_xorb"
  | "hash_mismatch"
  | "bad_footer"
  | "bad_shard_header"
  | "bad_shard"
  | "shard_too_large"
  | "bad_reconstruction"
  | "bad_pkt_line"
  | "bad_pack"
  | "pack_too_large"
  | "git_object_too_large"
  | "bad_git_object";

export class FormatError extends Error {
  override readonly name = "FormatError";
  constructor(
    readonly code: FormatErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export function isFormatError(err: unknown): err is FormatError {
  return err instanceof FormatError;
}
