// Chunk decompression (src/format/compression.ts), i.e. the LZ4 frame decoder (lz4.ts) and the
// BG4 regrouping (bg4.ts). Input: byte 0 the scheme, bytes 1..3 the declared uncompressed size
// (u24 little-endian, so sizes past the 128 KiB limit are tried too), the rest the payload.
// Expected: FormatError only. Also checked: a decoded chunk has exactly the declared size, and
// BG4 split then regroup is the identity.
import { bg4Regroup, bg4Split, decodeLz4Frame, decompressChunk, FormatError } from "../../dist/format/index.js";
import { expected } from "./expect.mjs";

export function fuzz(data) {
  if (data.length < 4) return;
  const scheme = data[0];
  const size = data[1] | (data[2] << 8) | (data[3] << 16);
  const payload = data.subarray(4);
  try {
    const out = decompressChunk(scheme, payload, size);
    if (out.length !== size) throw new Error(`decompressChunk returned ${out.length} bytes, declared ${size}`);
  } catch (error) {
    expected(error, [FormatError]);
  }
  try {
    const out = decodeLz4Frame(payload, size);
    if (out.length !== size) throw new Error(`decodeLz4Frame returned ${out.length} bytes, expected ${size}`);
  } catch (error) {
    expected(error, [FormatError]);
  }
  const roundTrip = bg4Regroup(bg4Split(payload));
  if (!Buffer.from(roundTrip).equals(Buffer.from(payload))) throw new Error("bg4Regroup(bg4Split(x)) !== x");
  if (bg4Regroup(payload).length !== payload.length) throw new Error("bg4Regroup changed the length");
}
