/**
 * ByteGrouping4 (XET-PROTOCOL.md §5.3): the transform behind compression scheme 2. Splitting
 * puts every 4th byte together (group g holds bytes i ≡ g mod 4, in order), so the exponent
 * and high-mantissa bytes of 32-bit floats end up side by side where LZ4 finds repeats.
 * For n bytes with q = floor(n/4), r = n % 4, group g has q+1 bytes when g < r, else q.
 */
import { endianness } from "node:os";

/** Regrouping assembles each 4-byte run as one u32 store, which only has this byte order on LE hosts. */
const LITTLE_ENDIAN_HOST = endianness() === "LE";

/** Start offsets of the four groups in the split layout of `length` bytes. */
function groupStarts(length: number): [number, number, number, number] {
  const quarter = length >>> 2;
  const leftover = length & 3;
  const start1 = quarter + (leftover > 0 ? 1 : 0);
  const start2 = start1 + quarter + (leftover > 1 ? 1 : 0);
  const start3 = start2 + quarter + (leftover > 2 ? 1 : 0);
  return [0, start1, start2, start3];
}

/** A fresh, unpooled, 4-byte-aligned buffer; callers write every byte before handing it out. */
function allocateUninitialised(length: number): Uint8Array {
  return new Uint8Array(Buffer.allocUnsafeSlow(length).buffer, 0, length);
}

/** Splits `data` into its four byte groups (the encode direction). Returns a new buffer. */
export function bg4Split(data: Uint8Array): Uint8Array {
  const length = data.length;
  const grouped = allocateUninitialised(length);
  const [, start1, start2, start3] = groupStarts(length);
  const quarter = length >>> 2;
  for (let j = 0, i = 0; j < quarter; j++, i += 4) {
    grouped[j] = data[i];
    grouped[start1 + j] = data[i + 1];
    grouped[start2 + j] = data[i + 2];
    grouped[start3 + j] = data[i + 3];
  }
  // The r leftover bytes are each the last member of groups 0..r-1.
  const tail = quarter * 4;
  const starts = [0, start1, start2];
  for (let g = 0; tail + g < length; g++) grouped[starts[g] + quarter] = data[tail + g];
  return grouped;
}

/** Interleaves the four byte groups back into the original order (the decode direction). */
export function bg4Regroup(grouped: Uint8Array): Uint8Array {
  const length = grouped.length;
  const data = allocateUninitialised(length);
  const [, start1, start2, start3] = groupStarts(length);
  const quarter = length >>> 2;
  if (LITTLE_ENDIAN_HOST) {
    // One u32 store per 4 output bytes measured ~40% faster than four byte stores.
    const words = new Uint32Array(data.buffer, data.byteOffset, quarter);
    for (let j = 0; j < quarter; j++) {
      words[j] =
        grouped[j] | (grouped[start1 + j] << 8) | (grouped[start2 + j] << 16) | (grouped[start3 + j] << 24);
    }
  } else {
    for (let j = 0, i = 0; j < quarter; j++, i += 4) {
      data[i] = grouped[j];
      data[i + 1] = grouped[start1 + j];
      data[i + 2] = grouped[start2 + j];
      data[i + 3] = grouped[start3 + j];
    }
  }
  const tail = quarter * 4;
  const starts = [0, start1, start2];
  for (let g = 0; tail + g < length; g++) data[tail + g] = grouped[starts[g] + quarter];
  return data;
}
