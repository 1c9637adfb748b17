/**
 * Receives a request body that must be processed whole (a shard: its sections are read
 * sequentially and cross-referenced) without holding it in memory while it arrives. The first
 * `memoryBytes` stay in memory; past that, everything received is appended to a temp file in
 * `dir`, and read back into one buffer once the body is complete. So an upload that stalls
 * holds at most `memoryBytes` of memory whatever it announced or sent (40 uploads of 65 MiB
 * stalled just before their end held 2.6 GB before), and the disk holds the rest until the
 * body timeout cuts it. The temp file is removed in every case.
 *
 * Hand-written: it is a few lines over `fs.promises`, and a general spooling library would
 * still need the read-back into one buffer.
 */
import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, rm, stat, type FileHandle } from "node:fs/promises";
import { join } from "node:path";

export interface SpoolOptions {
  /** Folder of the temp files (created when needed). */
  dir: string;
  /** Bytes kept in memory before the body goes to a temp file. */
  memoryBytes: number;
}

/** Bodies up to this size never touch the disk: most shards are a few KiB to a few MiB. */
export const DEFAULT_SPOOL_MEMORY_BYTES = 2 * 1024 * 1024;

/** The whole body of `pieces`, in one buffer. Errors of `pieces` (too large, too slow, interrupted) pass through. */
export async function receiveSpooled(pieces: AsyncIterable<Buffer>, options: SpoolOptions): Promise<Uint8Array> {
  let memory = Buffer.allocUnsafe(Math.min(64 * 1024, options.memoryBytes));
  let inMemory = 0;
  let file: { handle: FileHandle; path: string; length: number } | null = null;
  try {
    for await (const piece of pieces) {
      if (file === null && inMemory + piece.length <= options.memoryBytes) {
        if (inMemory + piece.length > memory.length) {
          // Grows by doubling up to the memory bound; each piece is copied in and released at
          // once (a piece can pin a whole 64 KiB socket read buffer).
          const grown = Buffer.allocUnsafe(Math.min(Math.max(memory.length * 2, inMemory + piece.length), options.memoryBytes));
          memory.copy(grown, 0, 0, inMemory);
          memory = grown;
        }
        memory.set(piece, inMemory);
        inMemory += piece.length;
        continue;
      }
      if (file === null) {
        await mkdir(options.dir, { recursive: true });
        const path = join(options.dir, `body-${process.pid}-${randomBytes(8).toString("hex")}`);
        file = { handle: await open(path, "wx+"), path, length: 0 };
        await writeAll(file.handle, memory.subarray(0, inMemory), 0);
        file.length = inMemory;
        memory = Buffer.alloc(0);
      }
      await writeAll(file.handle, piece, file.length);
      file.length += piece.length;
    }
    if (file === null) return memory.subarray(0, inMemory);
    const body = Buffer.allocUnsafe(file.length);
    for (let at = 0; at < body.length; ) {
      const { bytesRead } = await file.handle.read(body, at, body.length - at, at);
      if (bytesRead === 0) throw new Error(`the spooled body ${file.path} is shorter than the ${body.length} bytes written`);
      at += bytesRead;
    }
    return body;
  } finally {
    if (file !== null) {
      await file.handle.close().catch(() => undefined);
      await rm(file.path, { force: true });
    }
  }
}

async function writeAll(handle: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  for (let at = 0; at < bytes.length; ) {
    const { bytesWritten } = await handle.write(bytes, at, bytes.length - at, position + at);
    at += bytesWritten;
  }
}

/** Removes temp files older than `olderThanMs` (left by a crash); returns how many. */
export async function sweepSpool(dir: string, olderThanMs: number): Promise<number> {
  let removed = 0;
  const names = await readdir(dir).catch(() => [] as string[]);
  for (const name of names) {
    if (!name.startsWith("body-")) continue;
    const path = join(dir, name);
    const info = await stat(path).catch(() => null);
    if (info !== null && Date.now() - info.mtimeMs >= olderThanMs) {
      await rm(path, { force: true });
      removed++;
    }
  }
  return removed;
}
