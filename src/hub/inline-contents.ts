/**
 * The inline files of a commit between the moment their lines are read and the moment the commit
 * has validated: only then are they written to the blob store, so a refused commit (a bad line
 * after 10,000 good ones, a path refused, a deletion of a missing file) leaves no blob behind for
 * the garbage collector to find a day later.
 *
 * Each distinct content is kept once. The first `memoryBytes` stay in memory; the rest is appended
 * to one temp file in `dir` (named as body-spool.ts names its files, so `castor serve` sweeps a
 * file a crash left), which is removed by `close` in every case. A commit may carry up to 100,000
 * files of up to CASTOR_HUB_INLINE_MAX_BYTES each: the disk, not the memory, holds what it sends.
 *
 * Hand-written: it is an append and positioned reads over `fs.promises`.
 */
import { randomBytes } from "node:crypto";
import { mkdir, open, rm, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { leaseForWrite } from "../cas/leases.js";
import { TaskPool } from "../concurrency.js";
import type { GcRecords } from "../metadata/gc.js";
import { blobKeyFromHex, type BlobStore } from "../storage/blob-store.js";

/** Contents up to this many bytes in all stay in memory; most commits carry a few small files. */
export const DEFAULT_INLINE_MEMORY_BYTES = 8 * 1024 * 1024;

type Held = { content: Buffer } | { offset: number; length: number };

export class InlineContents {
  private readonly held = new Map<string, Held>();
  private inMemory = 0;
  private file: { handle: FileHandle; path: string; length: number } | null = null;
  private closed = false;

  constructor(private readonly options: { dir: string; memoryBytes: number }) {}

  /** Keeps `content`, the bytes whose SHA-256 is `sha256`, unless it is kept already. */
  async add(sha256: string, content: Buffer): Promise<void> {
    if (this.held.has(sha256)) return;
    if (this.file === null && this.inMemory + content.length <= this.options.memoryBytes) {
      // A copy: a small decoded content may be a view into a slab Node shares between buffers.
      this.held.set(sha256, { content: Buffer.from(content) });
      this.inMemory += content.length;
      return;
    }
    const file = await this.openFile();
    const offset = file.length;
    file.length += content.length;
    this.held.set(sha256, { offset, length: content.length });
    for (let at = 0; at < content.length; ) {
      const { bytesWritten } = await file.handle.write(content, at, content.length - at, offset + at);
      at += bytesWritten;
    }
  }

  /** The content kept under `sha256`, if any (a file the commit itself adds, read before it is stored). */
  async get(sha256: string): Promise<Buffer | null> {
    const held = this.held.get(sha256);
    return held === undefined ? null : this.read(held);
  }

  /** Writes every content kept to `blobs` (leased against a collection running meanwhile). */
  async store(blobs: BlobStore, gc: Pick<GcRecords, "leaseObjects">): Promise<void> {
    // Each store is a durable write (two fsyncs) of several milliseconds, which one after another
    // made a commit of 2,500 small files take 20 s: many small ones at once, few large ones, which
    // bounds the memory read back to about 4 MiB + 4 inline files.
    const small = new TaskPool(SMALL_WRITES_IN_FLIGHT);
    const large = new TaskPool(LARGE_WRITES_IN_FLIGHT);
    try {
      for (const [sha256, held] of this.held) {
        const length = "content" in held ? held.content.length : held.length;
        await (length <= SMALL_INLINE_BYTES ? small : large).submit(async () => {
          await leaseForWrite(gc, "inline", Buffer.from(sha256, "hex"));
          await blobs.putIfAbsent(blobKeyFromHex("inline", sha256), await this.read(held));
        });
      }
      await Promise.all([small.drain(), large.drain()]);
    } finally {
      await Promise.all([small.settle(), large.settle()]);
    }
  }

  /** Removes the temp file, if there is one. */
  async close(): Promise<void> {
    this.closed = true;
    this.held.clear();
    const file = this.file;
    this.file = null;
    if (file === null) return;
    await file.handle.close().catch(() => undefined);
    await rm(file.path, { force: true });
  }

  private async read(held: Held): Promise<Buffer> {
    if ("content" in held) return held.content;
    const bytes = Buffer.allocUnsafe(held.length);
    for (let at = 0; at < bytes.length; ) {
      const { bytesRead } = await this.file!.handle.read(bytes, at, bytes.length - at, held.offset + at);
      if (bytesRead === 0) throw new Error(`the commit's spooled contents in ${this.file!.path} end before the ${held.length} bytes written at ${held.offset}`);
      at += bytesRead;
    }
    return bytes;
  }

  private async openFile(): Promise<{ handle: FileHandle; path: string; length: number }> {
    if (this.file !== null) return this.file;
    if (this.closed) throw new Error("the commit's inline contents were already released");
    await mkdir(this.options.dir, { recursive: true });
    const path = join(this.options.dir, `body-${process.pid}-commit-${randomBytes(8).toString("hex")}`);
    this.file = { handle: await open(path, "wx+"), path, length: 0 };
    return this.file;
  }
}

const SMALL_INLINE_BYTES = 64 * 1024;
const SMALL_WRITES_IN_FLIGHT = 64;
const LARGE_WRITES_IN_FLIGHT = 4;
