/**
 * Blob handling that `castor gc` (gc.ts) and `castor fsck` (fsck.ts) share: listing keys in
 * batches, the hash a key stands for, deleting condemned blobs (src/metadata/gc.ts says why
 * blobs are condemned before they are deleted), and store calls a few at a time.
 */
import { bytesToPlainHex, hashFromHex, type Hash } from "../format/hash.js";
import type { CondemnableKind, GcRecords } from "../metadata/gc.js";
import { blobKey, blobKeyFromHex, blobKeyParts, type BlobKey, type BlobStore } from "../storage/blob-store.js";

/** Blob deletions in flight at once (S3 deletes take a round trip each). */
const BLOB_DELETES_IN_FLIGHT = 16;

/** Deletes condemned blobs, then releases their marks (a crash in between: the next gc redoes both). */
export async function deleteCondemnedBlobs(store: Pick<GcRecords, "release">, blobs: BlobStore, kind: CondemnableKind, hashes: readonly Hash[]): Promise<void> {
  await forEachInFlight(hashes, BLOB_DELETES_IN_FLIGHT, (hash) => blobs.delete(condemnableKey(kind, hash)));
  await store.release(kind, hashes);
}

/** Runs `work` on every item, at most `limit` at once (remote stores answer in round trips). */
export async function forEachInFlight<T>(items: readonly T[], limit: number, work: (item: T) => Promise<unknown>): Promise<void> {
  for (let start = 0; start < items.length; start += limit) await Promise.all(items.slice(start, start + limit).map(work));
}

export async function* keyBatches(keys: AsyncIterable<BlobKey>, size: number): AsyncGenerator<BlobKey[]> {
  let batch: BlobKey[] = [];
  for await (const key of keys) {
    batch.push(key);
    if (batch.length >= size) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}

/**
 * The raw hash a blob is keyed by, as the metadata store keeps it: a xorb's or shard's key
 * spells its hash in the Xet string form, an inline blob's key its SHA-256 in plain hex.
 */
export function blobHash(key: BlobKey): Hash {
  const { kind, hex } = blobKeyParts(key);
  return kind === "inline" ? new Uint8Array(Buffer.from(hex, "hex")) : hashFromHex(hex);
}

export function condemnableKey(kind: CondemnableKind, hash: Hash): BlobKey {
  return kind === "xorb" ? blobKey("xorbs", hash) : blobKeyFromHex("inline", bytesToPlainHex(hash));
}
