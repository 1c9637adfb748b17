/**
 * Format-layer throughput: keyed BLAKE3 (the floor under every hashing path), the CDC chunker
 * (castor's upload client) and xorb validation (the server's upload path), all on 64 MiB.
 * Each row is the best of REPETITIONS timed runs after one warm-up run, with the median beside.
 */
import { CompressionScheme } from "../src/format/compression.js";
import { ChunkBoundaryScanner, Chunker, chunkBoundaries, splitIntoChunks } from "../src/format/chunker.js";
import { chunkHash } from "../src/format/hash.js";
import { MAX_XORB_UNCOMPRESSED_BYTES, XorbValidator, serializeXorb, validateXorb, type XorbChunkSource } from "../src/format/xorb.js";
import { benchRow, deterministicRandomBytes, megabytesPerSecond, timeRepeated, type BenchRow, type Timing } from "./lib.js";

const GROUP = "format";
const DATA_BYTES = 64 * 1024 * 1024;
const PIECE_BYTES = 64 * 1024;
const REPETITIONS = 7;

const CHUNKER_TARGET_MB_S = 500;
const VALIDATION_TARGET_MB_S = 1_000;

export async function run(): Promise<BenchRow[]> {
  const random = deterministicRandomBytes(DATA_BYTES, 1);
  const rows: BenchRow[] = [];

  const blake3 = await benchBlake3(random);
  rows.push(blake3.row);
  rows.push(...(await benchChunker(random)));
  rows.push(...(await benchXorbValidation(blake3.megabytesPerSecond)));
  return rows;
}

async function benchBlake3(data: Uint8Array): Promise<{ row: BenchRow; megabytesPerSecond: number }> {
  const timing = await timeRepeated(() => {
    for (let at = 0; at < data.length; at += PIECE_BYTES) chunkHash(data.subarray(at, at + PIECE_BYTES));
  }, REPETITIONS);
  const best = megabytesPerSecond(data.length, timing.best);
  const row = benchRow(GROUP, "BLAKE3 keyed chunkHash, 64 KiB pieces", best, "MB/s", throughputOptions(data.length, timing));
  return { row, megabytesPerSecond: best };
}

async function benchChunker(data: Uint8Array): Promise<BenchRow[]> {
  let chunkCount = 0;
  const whole = await timeRepeated(() => {
    chunkCount = chunkBoundaries(data).length;
  }, REPETITIONS);

  // The upload client's shape: pieces as a stream delivers them, chunk bytes out.
  const streamed = await timeRepeated(() => {
    const chunker = new Chunker();
    for (let at = 0; at < data.length; at += PIECE_BYTES) chunker.update(data.subarray(at, at + PIECE_BYTES));
    chunker.finish();
  }, REPETITIONS);

  const boundariesOnly = await timeRepeated(() => {
    const scanner = new ChunkBoundaryScanner();
    for (let at = 0; at < data.length; at += PIECE_BYTES) scanner.update(data.subarray(at, at + PIECE_BYTES));
    scanner.finish();
  }, REPETITIONS);

  const averageKiB = (data.length / chunkCount / 1024).toFixed(1);
  return [
    benchRow(GROUP, "chunker chunkBoundaries, 64 MiB random", megabytesPerSecond(data.length, whole.best), "MB/s", {
      ...throughputOptions(data.length, whole),
      target: { atLeast: CHUNKER_TARGET_MB_S },
      note: `${chunkCount} chunks, avg ${averageKiB} KiB`,
    }),
    benchRow(GROUP, "chunker streaming Chunker, 64 KiB pieces", megabytesPerSecond(data.length, streamed.best), "MB/s", {
      ...throughputOptions(data.length, streamed),
      target: { atLeast: CHUNKER_TARGET_MB_S },
    }),
    benchRow(
      GROUP,
      "chunker streaming boundaries, 64 KiB pieces",
      megabytesPerSecond(data.length, boundariesOnly.best),
      "MB/s",
      throughputOptions(data.length, boundariesOnly),
    ),
  ];
}

type RegionKind = "incompressible" | "text" | "floats";

/**
 * A 64 MiB xorb made of 1 MiB regions cycling through `kinds`: incompressible bytes (stored
 * raw), text (LZ4) and smooth float32 series (byte-grouped LZ4).
 */
function buildXorb(kinds: readonly RegionKind[]): ReturnType<typeof serializeXorb> {
  const regionBytes = 1024 * 1024;
  const data = new Uint8Array(MAX_XORB_UNCOMPRESSED_BYTES);
  const schemeOfRegion: CompressionScheme[] = [];
  for (let region = 0; region * regionBytes < data.length; region++) {
    const kind = kinds[region % kinds.length];
    const target = data.subarray(region * regionBytes, (region + 1) * regionBytes);
    if (kind === "incompressible") {
      target.set(deterministicRandomBytes(regionBytes, 100 + region));
      schemeOfRegion.push(CompressionScheme.None);
    } else if (kind === "text") {
      let text = "";
      for (let line = 0; text.length < regionBytes; line++) {
        text += `region ${region} line ${line}: value=${(line * 7919) % 10007} status=${line % 5 ? "ok" : "retry"}\n`;
      }
      target.set(Buffer.from(text.slice(0, regionBytes), "latin1"));
      schemeOfRegion.push(CompressionScheme.LZ4);
    } else {
      const floats = new Float32Array(target.buffer, target.byteOffset, regionBytes / 4);
      for (let i = 0; i < floats.length; i++) floats[i] = Math.sin((region * floats.length + i) / 500) * 1000;
      schemeOfRegion.push(CompressionScheme.ByteGrouping4LZ4);
    }
  }
  const sources: XorbChunkSource[] = [];
  let start = 0;
  for (const chunk of splitIntoChunks(data)) {
    // A chunk straddling two regions takes the scheme of the region it starts in.
    sources.push({ data: chunk, scheme: schemeOfRegion[Math.floor(start / regionBytes)] });
    start += chunk.length;
  }
  return serializeXorb(sources);
}

/**
 * The measure is a xorb of mixed compressible/incompressible chunks: half stored raw,
 * half LZ4 text. A second xorb adds a third of byte-grouped floats (BG4 decoding is the
 * slowest scheme) and is reported alongside, without a target.
 */
async function benchXorbValidation(blake3MegabytesPerSecond: number): Promise<BenchRow[]> {
  const mixed = buildXorb(["incompressible", "text"]);
  const body = mixed.bytes;
  const uncompressed = mixed.info.uncompressedLength;
  const options = { expectedHash: mixed.info.hash };

  const whole = await timeRepeated(() => validateXorb(body, options), REPETITIONS);
  // How the server sees an upload: the body arriving in network-sized pieces.
  const streamed = await timeRepeated(() => {
    const validator = new XorbValidator(options);
    for (let at = 0; at < body.length; at += PIECE_BYTES) validator.push(body.subarray(at, at + PIECE_BYTES));
    validator.finish();
  }, REPETITIONS);

  const withFloats = buildXorb(["incompressible", "text", "floats"]);
  const allSchemes = await timeRepeated(() => validateXorb(withFloats.bytes, { expectedHash: withFloats.info.hash }), REPETITIONS);

  const wholeMBs = megabytesPerSecond(uncompressed, whole.best);
  const streamedMBs = megabytesPerSecond(uncompressed, streamed.best);
  const shape = (xorb: ReturnType<typeof serializeXorb>) => `${xorb.info.chunks.length} chunks, body ${(xorb.bytes.length / 1024 / 1024).toFixed(1)} MiB`;
  return [
    benchRow(GROUP, "xorb validateXorb, 64 MiB raw+LZ4 mix (uncompressed MB/s)", wholeMBs, "MB/s", {
      ...throughputOptions(uncompressed, whole),
      target: { atLeast: VALIDATION_TARGET_MB_S },
      note: shape(mixed),
    }),
    benchRow(GROUP, "xorb XorbValidator, same, 64 KiB pushes", streamedMBs, "MB/s", {
      ...throughputOptions(uncompressed, streamed),
      target: { atLeast: VALIDATION_TARGET_MB_S },
    }),
    benchRow(GROUP, "xorb validateXorb, 64 MiB raw+LZ4+BG4 floats", megabytesPerSecond(withFloats.info.uncompressedLength, allSchemes.best), "MB/s", {
      ...throughputOptions(withFloats.info.uncompressedLength, allSchemes),
      note: `${shape(withFloats)}; BG4 decoding is the slowest scheme`,
    }),
    benchRow(GROUP, "xorb validation / BLAKE3 speed", wholeMBs / blake3MegabytesPerSecond, "ratio", {
      note: "raw+LZ4 validateXorb MB/s over keyed BLAKE3 MB/s",
    }),
  ];
}

function throughputOptions(bytes: number, timing: Timing): { median: number } {
  return { median: megabytesPerSecond(bytes, timing.median) };
}
