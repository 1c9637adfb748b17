/**
 * Sets of hashes as one statement parameter: 32-byte hashes packed back to back in a bytea,
 * unpacked by the SQL below. `pg` would send an array of hashes as hex text; one binary bytea
 * measured about 1.7× faster for 100,000 hashes.
 */
import { bytesToPlainHex, HASH_BYTES, type Hash } from "../../format/hash.js";

/** The `index`-th (1-based) hash of a parameter holding packed 32-byte hashes. */
export const hashAt = (param: string, index: string): string => `substring(${param}::bytea FROM (${index})::integer * 32 - 31 FOR 32)`;
/** The indexes 1..n of a parameter holding n packed 32-byte hashes. */
export const packedIndexes = (param: string): string => `generate_series(1, length(${param}::bytea) / 32)`;

/** Distinct hashes packed back to back in ascending order, as the upserts take them. */
export function packDistinct(hashes: readonly Hash[]): Buffer {
  const distinct = [...new Map(hashes.map((hash) => [bytesToPlainHex(hash), hash])).entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const packed = Buffer.allocUnsafe(distinct.length * HASH_BYTES);
  for (const [i, [, hash]] of distinct.entries()) packed.set(hash, i * HASH_BYTES);
  return packed;
}
