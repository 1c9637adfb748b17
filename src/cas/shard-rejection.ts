/**
 * Why castor refuses an uploaded shard: the codes the HTTP layer answers by (src/http/errors.ts)
 * and the `/v2/shards` error frame carries in its message.
 */

export type ShardRejectionCode =
  /** The body exceeds the configured cap (HTTP 413). */
  | "shard_too_large"
  /** The files of the shard reference more chunks in all than the configured cap (HTTP 413). */
  | "too_many_chunk_references"
  /** A file's terms reference more chunks than its size allows at the smallest chunk real clients cut. */
  | "chunk_references_exceed_file_size"
  /** The bytes are not a well-formed shard (the format layer's message says why). */
  | "invalid_shard"
  /** A file with terms carries no verification entries. */
  | "missing_verification"
  /** A term or xorb block names a xorb castor has not stored. */
  | "missing_xorb"
  /** A term's chunk range does not lie inside its xorb. */
  | "term_out_of_range"
  /** A term's unpacked byte count differs from the stored chunk lengths of its range. */
  | "term_length_mismatch"
  /** A term's verification hash differs from the one computed over the stored chunk hashes. */
  | "verification_mismatch"
  /** The file hash differs from the one computed over the stored chunks of its terms. */
  | "file_hash_mismatch"
  /** A xorb block's chunk hashes or lengths differ from the stored xorb. */
  | "xorb_block_mismatch";

/** A shard castor refuses; the HTTP layer answers it by its `code` (src/http/errors.ts). */
export class ShardRejectedError extends Error {
  override readonly name = "ShardRejectedError";
  constructor(
    readonly code: ShardRejectionCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}
