/**
 * The errors every metadata store throws, whatever its backend. They live apart from the
 * store interfaces (store.ts, cas.ts, migration.ts) so those modules import each other's types
 * only, never each other at run time.
 */

/** Thrown when creating something that already exists (repo, revision, token id or secret hash). */
export class AlreadyExistsError extends Error {
  override readonly name = "AlreadyExistsError";
}

/**
 * Thrown when a write refers to a row that does not exist (a revision, token or shard
 * registration naming an unknown repository id).
 */
export class NotFoundError extends Error {
  override readonly name = "NotFoundError";
}

/**
 * Thrown when a record cannot be stored as given: a CAS record with a hash that is not 32
 * bytes, a length that is not a u32, a xorb without chunks or with too many; a tree entry of
 * an unknown type or a commit with a field of the wrong type. Nothing of the write is stored.
 * It signals a bug in the caller, which validates untrusted input before recording it.
 */
export class InvalidRecordError extends Error {
  override readonly name = "InvalidRecordError";
}

/** Thrown by a read when a stored row no longer decodes (damaged database). */
export class CorruptRecordError extends Error {
  override readonly name = "CorruptRecordError";
}

/**
 * Thrown when a write relies on an object the garbage collector is deleting or has deleted
 * (gc.ts): `putXorb` with a lease the collector overtook, a shard registration naming such a
 * xorb. Nothing of the write is stored; the object must be uploaded again.
 */
export class BeingCollectedError extends Error {
  override readonly name = "BeingCollectedError";
}

/**
 * Thrown by a write of the embedded store that waited its longest for another process's write
 * lock (sqlite/connection.ts). Nothing was written; the same write can be sent again.
 */
export class MetadataBusyError extends Error {
  override readonly name = "MetadataBusyError";
}

/**
 * Thrown when the metadata database cannot be reached right now: it is restarting, down, or the
 * network to it broke (a connection refused, ended by the server, timed out). Nothing about the
 * request is wrong and castor has no bug: the same request may succeed a few seconds later. If
 * it broke during a transaction's COMMIT, whether that transaction was applied is unknown.
 */
export class MetadataUnavailableError extends Error {
  override readonly name = "MetadataUnavailableError";
}
