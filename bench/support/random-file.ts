/**
 * The source files of a transfer benchmark — deterministic random bytes, so nothing
 * deduplicates or compresses, or deterministic word salad that LZ4 halves, as it does text and
 * much of a model's weights — and the byte-exact check of their downloaded copies.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { rm, writeFile } from "node:fs/promises";
import { deterministicRandomBytes } from "../lib.js";

export interface RandomFile {
  readonly size: number;
  /** SHA-256 (hex) every downloaded copy must have. */
  readonly sha256: string;
}

/** Writes `size` deterministic random bytes from `seed` to `path`. */
export async function writeRandomFile(path: string, size: number, seed: number): Promise<RandomFile> {
  const bytes = deterministicRandomBytes(size, seed);
  await writeFile(path, bytes);
  return { size, sha256: createHash("sha256").update(bytes).digest("hex") };
}

/** Words in the compressible files' vocabulary: with 512, LZ4 stores a 64 KiB chunk in ~49% of its size. */
const VOCABULARY_WORDS = 512;

/**
 * Writes `size` bytes of words drawn at random (from `seed`) out of a vocabulary of 512 random
 * lowercase words of 2–9 letters, each followed by a space. Every chunk differs, so nothing
 * deduplicates, yet each compresses to about half with LZ4 (measured: ~2.0×).
 */
export async function writeCompressibleFile(path: string, size: number, seed: number): Promise<RandomFile> {
  const letters = deterministicRandomBytes(VOCABULARY_WORDS * 10, seed ^ 0x5a5a5a5a);
  const vocabulary: Uint8Array[] = [];
  for (let i = 0; i < VOCABULARY_WORDS; i++) {
    const length = 2 + (letters[i * 10] % 8);
    const word = new Uint8Array(length + 1);
    for (let j = 0; j < length; j++) word[j] = 97 + (letters[i * 10 + 1 + j] % 26);
    word[length] = 0x20;
    vocabulary.push(word);
  }
  // A word takes at least 3 bytes, so size / 2 picks are more than enough.
  const picks = new Uint16Array(deterministicRandomBytes(size, seed).buffer);
  const bytes = new Uint8Array(size);
  for (let at = 0, next = 0; at < size; next++) {
    const word = vocabulary[picks[next] % VOCABULARY_WORDS];
    const length = Math.min(word.length, size - at);
    bytes.set(length === word.length ? word : word.subarray(0, length), at);
    at += length;
  }
  await writeFile(path, bytes);
  return { size, sha256: createHash("sha256").update(bytes).digest("hex") };
}

/**
 * Checks that the download at `path` is a byte-exact copy of `file`, then removes it (copies
 * are large). A benchmark of a wrong download measures nothing, so a mismatch throws, naming `what`.
 */
export async function verifyDownload(path: string, file: RandomFile, what: string): Promise<void> {
  try {
    const hash = createHash("sha256");
    let size = 0;
    for await (const piece of createReadStream(path, { highWaterMark: 4 * 1024 * 1024 }) as AsyncIterable<Buffer>) {
      size += piece.length;
      hash.update(piece);
    }
    const sha256 = hash.digest("hex");
    if (size !== file.size || sha256 !== file.sha256) {
      throw new Error(`${what}: the download has ${size} bytes with SHA-256 ${sha256}; the file has ${file.size} bytes with SHA-256 ${file.sha256}`);
    }
  } finally {
    await rm(path, { force: true });
  }
}
