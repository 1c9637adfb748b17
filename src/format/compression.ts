/**
 * Chunk compression schemes of the xorb format (docs/protocol.md §5.3): None, LZ4 (one LZ4
 * frame) and ByteGrouping4LZ4 (an LZ4 frame of the BG4-split bytes). Scheme 99 ("Auto") is
 * internal to xet-core and never valid on the wire.
 */
import { compressFrame, compressSync } from "lz4-napi";
import { bg4Regroup, bg4Split } from "./bg4.js";
import { FormatError } from "./errors.js";
import { decodeLz4Frame, encodeLz4Frame } from "./lz4.js";

export const CompressionScheme = { None: 0, LZ4: 1, ByteGrouping4LZ4: 2 } as const;
export type CompressionScheme = (typeof CompressionScheme)[keyof typeof CompressionScheme];

/** Largest uncompressed chunk (2 × the 64 KiB target) and largest compressed payload. */
export const MAX_CHUNK_UNCOMPRESSED_BYTES = 131_072;
export const MAX_CHUNK_COMPRESSED_BYTES = 262_144;

export function isCompressionScheme(value: number): value is CompressionScheme {
  return value === 0 || value === 1 || value === 2;
}

function checkUncompressedSize(size: number): void {
  if (!Number.isInteger(size) || size < 0 || size > MAX_CHUNK_UNCOMPRESSED_BYTES) {
    throw new FormatError("chunk_too_large", `a chunk's uncompressed size must be 0..${MAX_CHUNK_UNCOMPRESSED_BYTES} bytes, got ${size}`);
  }
}

/**
 * Decodes one chunk payload. The result has exactly `uncompressedSize` bytes or a FormatError
 * is thrown (`unknown_compression_scheme`, `bad_compression`, `decompressed_size_mismatch`);
 * no decoder ever allocates more than `uncompressedSize` (≤ 128 KiB) for the output.
 * The result may share memory with `payload` (scheme None).
 */
export function decompressChunk(scheme: number, payload: Uint8Array, uncompressedSize: number): Uint8Array {
  checkUncompressedSize(uncompressedSize);
  if (scheme === CompressionScheme.None) {
    if (payload.length !== uncompressedSize) {
      throw new FormatError("decompressed_size_mismatch", `uncompressed chunk has ${payload.length} bytes but its header declares ${uncompressedSize}`);
    }
    return payload;
  }
  if (scheme !== CompressionScheme.LZ4 && scheme !== CompressionScheme.ByteGrouping4LZ4) {
    throw new FormatError("unknown_compression_scheme", `compression scheme ${scheme} is not one of 0 (None), 1 (LZ4), 2 (ByteGrouping4LZ4)`);
  }
  if (payload.length > MAX_CHUNK_COMPRESSED_BYTES) {
    throw new FormatError("chunk_too_large", `a compressed chunk may have at most ${MAX_CHUNK_COMPRESSED_BYTES} bytes, got ${payload.length}`);
  }
  const decoded = decodeLz4Frame(payload, uncompressedSize);
  return scheme === CompressionScheme.LZ4 ? decoded : bg4Regroup(decoded);
}

/** Encodes one chunk with the given scheme (for castor's client and tests). */
export function compressChunk(data: Uint8Array, scheme: CompressionScheme): Uint8Array {
  checkUncompressedSize(data.length);
  switch (scheme) {
    case CompressionScheme.None:
      return data;
    case CompressionScheme.LZ4:
      return encodeLz4Frame(data);
    case CompressionScheme.ByteGrouping4LZ4:
      return encodeLz4Frame(bg4Split(data));
    default:
      throw new FormatError("unknown_compression_scheme", `cannot compress with unknown scheme ${String(scheme)}`);
  }
}

/**
 * Whether BG4 regrouping is worth trying: xet-core's predictor (cas_object bg4_prediction.rs).
 * Per byte lane (offset mod 4) it histograms the bytes' popcounts (0..8) and recommends BG4 when
 * some lane's distribution diverges from the pooled one by more than 0.02 nats (KL divergence;
 * xet-core fitted that threshold on real model files). Float tensors have lanes that differ
 * (exponent vs mantissa bytes); text and random bytes look the same in every lane.
 *
 * Computed on a sample of at most `BG4_SAMPLE_BYTES` (evenly spaced windows) rather than the
 * whole chunk: a JavaScript byte loop runs at a few hundred MB/s, and with 1,024 bytes per lane
 * the estimate's bias (≈ (9 − 1) / (2 · 1,024) ≈ 0.004) stays well below the threshold.
 * Unlike xet-core, an empty bin counts 0 (0·ln 0 = 0) instead of voiding the lane (a NaN that
 * `f64::max` skips), so very skewed lanes — the best BG4 candidates — are not ignored; a wrong
 * "yes" only costs one extra LZ4 pass, since both encodings are then compared.
 */
export function bg4Recommended(data: Uint8Array): boolean {
  const histograms = new Int32Array(4 * 9);
  if (data.length <= BG4_SAMPLE_BYTES) {
    addPopcounts(histograms, data, 0, data.length);
  } else {
    const stride = Math.floor((data.length - BG4_SAMPLE_WINDOW_BYTES) / (BG4_SAMPLE_WINDOWS - 1));
    for (let w = 0; w < BG4_SAMPLE_WINDOWS; w++) addPopcounts(histograms, data, w * stride, w * stride + BG4_SAMPLE_WINDOW_BYTES);
  }
  const pooled = new Float64Array(9).fill(1);
  const laneTotals = [0, 0, 0, 0];
  for (let lane = 0; lane < 4; lane++) {
    for (let bin = 0; bin < 9; bin++) {
      pooled[bin] += histograms[lane * 9 + bin];
      laneTotals[lane] += histograms[lane * 9 + bin];
    }
  }
  const pooledTotal = laneTotals[0] + laneTotals[1] + laneTotals[2] + laneTotals[3];
  for (let lane = 0; lane < 4; lane++) {
    if (laneTotals[lane] === 0) continue;
    let divergence = 0;
    for (let bin = 0; bin < 9; bin++) {
      const p = histograms[lane * 9 + bin] / laneTotals[lane];
      if (p > 0) divergence += p * Math.log(p / (pooled[bin] / pooledTotal));
    }
    if (divergence > BG4_KL_THRESHOLD) return true;
  }
  return false;
}

/** Adds the popcount of each byte of data[from, to) to its lane's histogram (lane = index mod 4). */
function addPopcounts(histograms: Int32Array, data: Uint8Array, from: number, to: number): void {
  let i = from;
  for (; i < to && (i & 3) !== 0; i++) histograms[(i & 3) * 9 + POPCOUNT[data[i]]]++;
  // Four lanes per step: fixed histogram offsets instead of an index computation per byte.
  for (const end = to - 3; i < end; i += 4) {
    histograms[POPCOUNT[data[i]]]++;
    histograms[9 + POPCOUNT[data[i + 1]]]++;
    histograms[18 + POPCOUNT[data[i + 2]]]++;
    histograms[27 + POPCOUNT[data[i + 3]]]++;
  }
  for (; i < to; i++) histograms[(i & 3) * 9 + POPCOUNT[data[i]]]++;
}

/**
 * Whether LZ4 on a few small windows of `data` saved nothing at all, taken as "LZ4 cannot shrink
 * this chunk". Deliberately strict — any saving in any window means the whole chunk is tried —
 * so what it skips is data LZ4 leaves as it is anyway: random or already-compressed bytes. The
 * known miss: a chunk whose only redundancy is repeats farther apart than a window (e.g. one
 * random block of several KiB repeated) is stored raw, which is correct, just larger.
 * Chunks below `LZ4_SAMPLE_MIN_CHUNK_BYTES` are always compressed whole.
 */
export function lz4SamplesIncompressible(data: Uint8Array): boolean {
  if (data.length < LZ4_SAMPLE_MIN_CHUNK_BYTES) return false;
  const source = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const stride = Math.floor((data.length - LZ4_SAMPLE_WINDOW_BYTES) / (LZ4_SAMPLE_WINDOWS - 1));
  for (let w = 0; w < LZ4_SAMPLE_WINDOWS; w++) {
    const window = source.subarray(w * stride, w * stride + LZ4_SAMPLE_WINDOW_BYTES);
    // lz4-napi prefixes its raw block with the 4-byte decoded size.
    if (compressSync(window).length - 4 < window.length) return false;
  }
  return true;
}

const LZ4_SAMPLE_WINDOWS = 4;
const LZ4_SAMPLE_WINDOW_BYTES = 1_024;
const LZ4_SAMPLE_MIN_CHUNK_BYTES = 16 * 1_024;

const BG4_KL_THRESHOLD = 0.02;
const BG4_SAMPLE_WINDOWS = 8;
const BG4_SAMPLE_WINDOW_BYTES = 512;
const BG4_SAMPLE_BYTES = BG4_SAMPLE_WINDOWS * BG4_SAMPLE_WINDOW_BYTES;
const POPCOUNT = new Uint8Array(256);
for (let i = 1; i < 256; i++) POPCOUNT[i] = (i & 1) + POPCOUNT[i >> 1];

/**
 * The smallest of None, LZ4 (unless `lz4SamplesIncompressible`) and — when `bg4Recommended` says
 * the byte lanes differ — BG4+LZ4; None unless strictly smaller, so the payload is never larger
 * than the chunk.
 *
 * Why not always try all three: on data neither helps (random, already compressed) the two
 * passes and their discarded outputs were most of an upload's CPU time, where hf_xet pays for
 * one LZ4 pass. BG4 is gated like xet-core gates it; LZ4 by a sample that costs ~5% of a pass.
 */
export function compressChunkBest(data: Uint8Array): { scheme: CompressionScheme; payload: Uint8Array } {
  checkUncompressedSize(data.length);
  let best: { scheme: CompressionScheme; payload: Uint8Array } = { scheme: CompressionScheme.None, payload: data };
  if (!lz4SamplesIncompressible(data)) {
    const lz4 = encodeLz4Frame(data);
    if (lz4.length < best.payload.length) best = { scheme: CompressionScheme.LZ4, payload: lz4 };
  }
  if (bg4Recommended(data)) {
    const bg4 = encodeLz4Frame(bg4Split(data));
    if (bg4.length < best.payload.length) best = { scheme: CompressionScheme.ByteGrouping4LZ4, payload: bg4 };
  }
  return best;
}

/**
 * `compressChunkBest` with its LZ4 passes on libuv's thread pool, so several chunks compress in
 * parallel while the calling thread goes on; same rule, same contract. The frames come from
 * lz4-napi's `compressFrame`, i.e. lz4_flex's frame encoder — exactly what xet-core writes. From
 * 64 KiB on they are byte for byte `encodeLz4Frame`'s; below, lz4_flex's frame path uses another
 * match table than its block path, so the block (never the frame layout) can differ slightly.
 */
export async function compressChunkBestAsync(data: Uint8Array): Promise<{ scheme: CompressionScheme; payload: Uint8Array }> {
  checkUncompressedSize(data.length);
  const [lz4, bg4] = await Promise.all([
    lz4SamplesIncompressible(data) ? null : compressFrame(data),
    bg4Recommended(data) ? compressFrame(bg4Split(data)) : null,
  ]);
  let best: { scheme: CompressionScheme; payload: Uint8Array } = { scheme: CompressionScheme.None, payload: data };
  if (lz4 !== null && lz4.length < best.payload.length) best = { scheme: CompressionScheme.LZ4, payload: lz4 };
  if (bg4 !== null && bg4.length < best.payload.length) best = { scheme: CompressionScheme.ByteGrouping4LZ4, payload: bg4 };
  return best;
}
