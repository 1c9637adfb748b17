/**
 * Receives a request body that must be processed whole (a shard: its sections are read
 * sequentially and cross-referenced) without holding it in memory while it arrives. The first
 * `memoryBytes` stay in memory; past that, everything received is appended to a temp file in
 * `dir`. So an upload that stalls holds at most `memoryBytes` of memory whatever it announced
 * or sent (40 uploads of 65 MiB stalled just before their end held 2.6 GB before), and the disk
 * holds the rest until the body timeout cuts it.
 *
 * The complete body stays where it is until its reader asks for it (`SpooledBody.read`): a
 * shard registration first waits for room in its memory budget (src/cas/shard-admission.ts),
 * and a spooled body waiting its turn costs no memory. The temp file is removed once read, or
 * by `dispose`, which the receiver calls in every case.
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

/** A body received whole, in memory or in a temp file. */
export interface SpooledBody {
  readonly length: number;
  /** The whole body in one buffer; the temp file, if any, is removed. Once only. */
  read(): Promise<Uint8Array>;
  /** Removes the temp file if the body was not read; safe to call in every case, more than once. */
  dispose(): Promise<void>;
}

/** Receives the whole body of `pieces`. Errors of `pieces` (too large, too slow, interrupted) pass through, the temp file removed. */
export async function receiveSpooled(pieces: AsyncIterable<Buffer>, options: SpoolOptions): Promise<SpooledBody> {
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
  } catch (error) {
    if (file !== null) await removeSpoolFile(file);
    throw error;
  }
  if (file === null) {
    const body = memory.subarray(0, inMemory);
    return { length: body.length, read: async () => body, dispose: async () => {} };
  }
  return spooledFile(file);
}

/** The body in `file`, read back on demand. */
function spooledFile(file: { handle: FileHandle; path: string; length: number }): SpooledBody {
  let removed: Promise<void> | null = null;
  const dispose = () => (removed ??= removeSpoolFile(file));
  return {
    length: file.length,
    read: async () => {
      if (removed !== null) throw new Error(`the spooled body ${file.path} was read or disposed of already`);
      try {
        const body = Buffer.allocUnsafe(file.length);
        for (let at = 0; at < body.length; ) {
          const { bytesRead } = await file.handle.read(body, at, body.length - at, at);
          if (bytesRead === 0) throw new Error(`the spooled body ${file.path} is shorter than the ${body.length} bytes written`);
          at += bytesRead;
        }
        return body;
      } finally {
        await dispose();
      }
    },
    dispose,
  };
}

async function removeSpoolFile(file: { handle: FileHandle; path: string }): Promise<void> {
  await file.handle.close().catch(() => undefined);
  await rm(file.path, { force: true });
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
