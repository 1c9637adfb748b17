/**
 * The source file of a transfer benchmark — deterministic random bytes, so nothing deduplicates
 * or compresses — and the byte-exact check of its downloaded copies.
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
