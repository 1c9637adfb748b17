/**
 * Whether a recorded Xet file can still be rebuilt: every xorb its terms name is recorded. A
 * file stops being whole when `castor fsck --repair` removes a damaged xorb it uses; the hub
 * then asks clients to upload it again (LFS batch `upload: true`, no `oid` in preupload)
 * instead of telling them the server already has it.
 */
import { bytesToPlainHex, type Hash } from "../format/hash.js";
import type { FileRecord } from "../metadata/cas.js";
import type { MetadataStore } from "../metadata/store.js";

export async function isStoredWhole(store: Pick<MetadataStore, "getXorbs">, file: FileRecord): Promise<boolean> {
  const xorbs = new Map<string, Hash>();
  for (const term of file.terms) xorbs.set(bytesToPlainHex(term.xorbHash), term.xorbHash);
  if (xorbs.size === 0) return true;
  return (await store.getXorbs([...xorbs.values()])).size === xorbs.size;
}
