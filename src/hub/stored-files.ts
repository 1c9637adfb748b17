/**
 * Whether a recorded Xet file can still be rebuilt: every xorb its terms name is recorded. A
 * file stops being whole when `castor fsck --repair` removes a damaged xorb it uses; the hub
 * then asks clients to upload it again (LFS batch `upload: true`, no `oid` in preupload)
 * instead of telling them the server already has it.
 */
import { termXorbs, type FileRecord } from "../metadata/cas.js";
import type { MetadataStore } from "../metadata/store.js";

/** Existence only, so the xorbs' footprints are read, not their chunk tables. */
export async function isStoredWhole(store: Pick<MetadataStore, "xorbFootprints">, file: FileRecord): Promise<boolean> {
  const xorbs = termXorbs(file.terms);
  if (xorbs.length === 0) return true;
  return (await store.xorbFootprints(xorbs)).size === xorbs.length;
}
