/**
 * A file's SHA-256 computed on a worker thread that reads the file on its own (from the page
 * cache, since the upload reads the same bytes), so the ~0.2 s per 256 MiB it costs is taken
 * off the thread that chunks, hashes, compresses and sends. The digest is only needed once the
 * whole file has been read, by which time the worker is done.
 *
 * The worker is a few lines of plain JavaScript using only Node's own modules, evaluated from
 * a string with no inherited `execArgv`: it needs none of castor's modules, so it starts in a
 * few tens of milliseconds whether castor runs compiled or from TypeScript under a loader.
 * If it cannot run, the file is hashed here instead.
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { Worker } from "node:worker_threads";

const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const { openSync, readSync, closeSync } = require("node:fs");
const hash = createHash("sha256");
const fd = openSync(workerData.path, "r");
try {
  const buffer = Buffer.allocUnsafe(1 << 20);
  for (let position = 0; ; ) {
    const n = readSync(fd, buffer, 0, buffer.length, position);
    if (n === 0) break;
    hash.update(buffer.subarray(0, n));
    position += n;
  }
} finally {
  closeSync(fd);
}
parentPort.postMessage(hash.digest());
`;

/** Files below this are hashed on the calling thread: a worker's start-up would cost more. */
export const WORKER_DIGEST_MIN_BYTES = 16 * 1024 * 1024;

export interface PendingDigest {
  /** The digest; rejects only for I/O errors (worker trouble falls back to this thread). */
  digest: Promise<Uint8Array>;
  /**
   * Stops the worker (the upload ended early); `digest` then never settles. Resolves once the
   * worker thread has exited.
   */
  cancel(): Promise<void>;
}

/** Starts hashing `path` on a worker. */
export function sha256OfFileInWorker(path: string): PendingDigest {
  let worker: Worker | null = null;
  let cancelled = false;
  const digest = new Promise<Uint8Array>((resolve) => {
    try {
      worker = new Worker(WORKER_SOURCE, { eval: true, execArgv: [], workerData: { path } });
    } catch {
      resolve(sha256OfFile(path));
      return;
    }
    let settled = false;
    worker.once("message", (digest: Uint8Array) => {
      settled = true;
      resolve(new Uint8Array(digest));
    });
    // A worker that failed (or could not read the file) leaves the work, and any I/O error
    // worth reporting, to the calling thread.
    worker.once("error", () => {
      if (!settled && !cancelled) resolve(sha256OfFile(path));
      settled = true;
    });
    worker.once("exit", () => {
      if (!settled && !cancelled) resolve(sha256OfFile(path));
      settled = true;
    });
  });
  return {
    digest,
    async cancel() {
      cancelled = true;
      await (worker as Worker | null)?.terminate();
    },
  };
}

/** The same digest computed on this thread. */
export async function sha256OfFile(path: string): Promise<Uint8Array> {
  const handle = await open(path, "r");
  try {
    const hash = createHash("sha256");
    const buffer = new Uint8Array(1024 * 1024);
    for (let position = 0; ; ) {
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, position);
      if (bytesRead === 0) break;
      hash.update(buffer.subarray(0, bytesRead));
      position += bytesRead;
    }
    return new Uint8Array(hash.digest());
  } finally {
    await handle.close();
  }
}
