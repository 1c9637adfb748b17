/**
 * Where a download's bytes go: a file, written to a temporary name beside it, flushed to disk
 * as the download goes and renamed into place on success (removed on failure), or a stream.
 */
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { open, rename, stat, unlink, type FileHandle } from "node:fs/promises";
import type { Writable } from "node:stream";
import { finished } from "node:stream/promises";
import { CastorClientError } from "./errors.js";

/** Writes are grouped so one call never passes more buffers than an iovec takes. */
const MAX_WRITE_PARTS = 512;
/** Written bytes after which a file output is flushed to disk in the background. */
const SYNC_EVERY_BYTES = 32 * 1024 * 1024;

export interface Sink {
  /** Whether a written buffer may be reused once `write` resolved (not so for streams, which may still hold it). */
  readonly releasesWrittenBuffers: boolean;
  write(parts: Uint8Array[]): Promise<void>;
  /** Makes the output final (rename into place, end the stream). */
  commit(): Promise<void>;
  /** Removes a partial output file; leaves a stream as it is. */
  abandon(): Promise<void>;
}

export async function fileSink(path: string): Promise<Sink> {
  // Refused before anything is fetched: the final rename would fail only after the download.
  const existing = await stat(path).catch(() => null);
  if (existing?.isDirectory()) throw new CastorClientError("usage", `cannot write ${path}: it is a directory; give a file name`);
  const temporary = `${path}.castor-partial-${randomBytes(4).toString("hex")}`;
  let handle: FileHandle;
  try {
    handle = await open(temporary, "w");
  } catch (error) {
    throw new CastorClientError("io", `cannot write ${path}: ${(error as Error).message}`, { cause: error });
  }
  let closed = false;
  const close = async () => {
    if (!closed) {
      closed = true;
      await handle.close();
    }
  };
  // The file is made durable before it is renamed into place. Flushing as the download goes
  // (in the background, every SYNC_EVERY_BYTES) leaves the final sync only the last part: the
  // disk works while the network does, instead of after it (~0.2 s for 256 MiB here).
  let unsynced = 0;
  let syncing: Promise<void> = Promise.resolve();
  let syncFailure: unknown = null;
  return {
    releasesWrittenBuffers: true,
    async write(parts) {
      if (syncFailure !== null) throw syncFailure;
      for (let i = 0; i < parts.length; i += MAX_WRITE_PARTS) {
        const group = parts.slice(i, i + MAX_WRITE_PARTS);
        let expected = 0;
        for (const part of group) expected += part.length;
        const { bytesWritten } = await handle.writev(group);
        if (bytesWritten !== expected) {
          // writev may write less on some filesystems; finish what is left part by part.
          let skip = bytesWritten;
          for (const part of group) {
            if (skip >= part.length) {
              skip -= part.length;
              continue;
            }
            await handle.write(part.subarray(skip));
            skip = 0;
          }
        }
        unsynced += expected;
      }
      if (unsynced >= SYNC_EVERY_BYTES) {
        unsynced = 0;
        syncing = syncing
          .then(() => handle.datasync())
          .catch((error: unknown) => {
            syncFailure ??= new CastorClientError("io", `cannot write ${path}: ${(error as Error).message}`, { cause: error });
          });
      }
    },
    async commit() {
      try {
        await syncing;
        if (syncFailure !== null) throw syncFailure;
        await handle.sync();
        await close();
        await rename(temporary, path);
      } catch (error) {
        throw new CastorClientError("io", `cannot write ${path}: ${(error as Error).message}`, { cause: error });
      }
    },
    async abandon() {
      await syncing;
      await close().catch(() => undefined);
      await unlink(temporary).catch(() => undefined);
    },
  };
}

export function streamSink(stream: Writable, endOutput: boolean): Sink {
  return {
    releasesWrittenBuffers: false,
    async write(parts) {
      for (const part of parts) {
        if (!stream.write(part)) await once(stream, "drain");
      }
    },
    async commit() {
      if (endOutput) {
        stream.end();
        await finished(stream);
      }
    },
    async abandon() {},
  };
}
