/**
 * Taking a lease for a write (src/metadata/gc.ts): an uploader leases a xorb or an inline blob
 * before it stores the blob, so a garbage collection running meanwhile leaves it alone. If the
 * collector has the object condemned right now — its blob is being deleted — the lease waits
 * for the deletion to finish and the uploader then writes the blob anew.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { bytesToPlainHex, hashToHex, type Hash } from "../format/hash.js";
import { BeingCollectedError } from "../metadata/errors.js";
import type { GcRecords, Lease, LeaseKind } from "../metadata/gc.js";

/** How long a write waits for the collector to finish deleting a blob (it deletes in small batches). */
export const LEASE_WAIT_MS = 30_000;
const LEASE_POLL_MS = 100;

export async function leaseForWrite(store: Pick<GcRecords, "leaseObjects">, kind: LeaseKind, hash: Hash, options: { waitMs?: number } = {}): Promise<Lease> {
  const deadline = Date.now() + (options.waitMs ?? LEASE_WAIT_MS);
  for (;;) {
    const lease = (await store.leaseObjects(kind, [hash])).get(bytesToPlainHex(hash));
    if (lease !== undefined) return lease;
    if (Date.now() >= deadline) {
      const shown = kind === "inline" ? bytesToPlainHex(hash) : hashToHex(hash);
      throw new BeingCollectedError(`${kind} ${shown} is being deleted by garbage collection; retry in a few seconds`);
    }
    await sleep(LEASE_POLL_MS);
  }
}
