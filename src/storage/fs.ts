/**
 * The embedded `BlobStore`: one file per object under a root folder (the data dir's `blobs/`).
 *
 *   <root>/xorbs/<first 2 hex>/<64 hex>     published objects, read-only
 *   <root>/shards/<first 2 hex>/<64 hex>
 *   <root>/inline/<first 2 hex>/<64 hex>    content of files hub commits store inline (by SHA-256)
 *   <root>/tmp/<uuid>.part                  bodies being written; swept at start-up
 *
 * The two-hex fan-out keeps each folder to ~1/256 of the objects of its kind.
 *
 * Publishing is crash-safe and race-safe: a body is written to a temp file in `tmp/` (same
 * filesystem, so it can be linked in), fsynced, then hard-linked to its final name, and the
 * final folder is fsynced. `link()` fails with EEXIST when the name exists, so of N concurrent
 * writers of one key exactly one inserts and the others see "already present"; `rename()` would
 * silently replace. A crash leaves at most a temp file, never a partial object. This needs a
 * filesystem with hard links (every Linux/macOS local filesystem).
 */
import { randomUUID } from "node:crypto";
import { constants as fsConstants } from "node:fs";
import { chmod, copyFile, link, lstat, mkdir, open, readdir, rm, stat, unlink, type FileHandle } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import {
  BLOB_KINDS,
  BlobStoreError,
  blobKeyParts,
  checkByteSpan,
  parseKeyPrefix,
  type BlobBody,
  type BlobKey,
  type BlobStore,
  type ByteSpan,
  type PutOutcome,
  type SpanReader,
  StagedPutBase,
  type StagedPut,
  type SweepOptions,
} from "./blob-store.js";
import { fsyncDir } from "./fsync-dir.js";

const TMP_DIR = "tmp";
/** Published objects are immutable; read-only files make an accidental in-place edit fail loudly. */
const BLOB_MODE = 0o444;
/**
 * Far larger than the 64 KiB default: xorb ranges run to many MiB, and each read costs a
 * read, a socket write and an event-loop turn. Measured serving hf_xet downloads on a loaded
 * 2-core machine: 256 KiB reads gave 184–274 MB/s, 1 MiB 272–558 MB/s, 4 MiB no better.
 */
const READ_HIGH_WATER_MARK = 1024 * 1024;
const FANOUT_RE = /^[0-9a-f]{2}$/;
const HEX64_RE = /^[0-9a-f]{64}$/;

function errorCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code;
}

function isMissing(err: unknown): boolean {
  const code = errorCode(err);
  return code === "ENOENT" || code === "ENOTDIR";
}

async function removeQuietly(path: string): Promise<void> {
  await unlink(path).catch((err: unknown) => {
    if (!isMissing(err)) throw err;
  });
}

async function readdirQuietly(path: string) {
  try {
    return await readdir(path, { withFileTypes: true });
  } catch (err) {
    if (isMissing(err)) return [];
    throw err;
  }
}

async function writeFully(file: FileHandle, bytes: Uint8Array): Promise<void> {
  for (let at = 0; at < bytes.length; ) {
    at += (await file.write(bytes, at, bytes.length - at)).bytesWritten;
  }
}

/**
 * A Writable over a FileHandle whose owner fsyncs and closes the handle afterwards. Not
 * fs.WriteStream: on a FileHandle it holds a reference that only its own auto-close releases, so
 * with autoClose off `handle.close()` waits forever, and with it on the handle is closed before
 * we can fsync it. FileHandle itself waits for in-flight writes before closing, so destroying
 * this stream mid-write and then closing the handle is safe.
 */
class FileHandleWriter extends Writable {
  constructor(private readonly file: FileHandle) {
    super();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    writeFully(this.file, chunk).then(() => done(), done);
  }

  override _writev(chunks: { chunk: Buffer }[], done: (error?: Error | null) => void): void {
    const buffers = chunks.map(({ chunk }) => chunk);
    (async () => {
      let written = (await this.file.writev(buffers)).bytesWritten;
      for (const buffer of buffers) {
        if (written >= buffer.length) {
          written -= buffer.length;
        } else {
          await writeFully(this.file, buffer.subarray(written));
          written = 0;
        }
      }
    })().then(() => done(), done);
  }
}

function discardBody(body: BlobBody): void {
  if (body instanceof Readable && !body.destroyed) body.destroy();
}

export class FsBlobStore implements BlobStore {
  private constructor(readonly root: string) {}

  /** Opens (creating if needed) a store rooted at `root`. Call `sweepTemp()` once at start-up. */
  static async open(root: string): Promise<FsBlobStore> {
    const absolute = resolve(root);
    await mkdir(absolute, { recursive: true });
    for (const dir of [TMP_DIR, ...BLOB_KINDS]) await mkdir(join(absolute, dir), { recursive: true });
    await fsyncDir(absolute);
    return new FsBlobStore(absolute);
  }

  /**
   * A store over `root` as it is, creating nothing (`open` creates its folders): for reading a
   * folder that must stay unchanged, such as a backup. A missing root or kind folder lists as
   * empty; writes fail, since there is no `tmp/`.
   */
  static at(root: string): FsBlobStore {
    return new FsBlobStore(resolve(root));
  }

  /**
   * The file that holds (or would hold) `key`'s object. The only place a path is derived from a
   * key, and it re-validates the key first; public for tools that copy a store file by file
   * (`castor backup`, `castor restore`), so the layout stays known to this file alone.
   */
  objectPath(key: BlobKey): string {
    const { kind, hex } = blobKeyParts(key);
    return join(this.root, kind, hex.slice(0, 2), hex);
  }

  private async createTemp(): Promise<{ path: string; file: FileHandle }> {
    const path = join(this.root, TMP_DIR, `${randomUUID()}.part`);
    return { path, file: await open(path, "wx", BLOB_MODE) };
  }

  /** Links a complete, fsynced temp file to `finalPath`; the caller removes the temp name. */
  private async publish(tempPath: string, finalPath: string): Promise<PutOutcome> {
    const dir = dirname(finalPath);
    const created = await mkdir(dir, { recursive: true });
    // A freshly created folder must itself be made durable in its parent, up to the first that existed.
    if (created !== undefined) {
      for (let made = dir; ; made = dirname(made)) {
        await fsyncDir(dirname(made));
        if (made === created || made === this.root) break;
      }
    }
    try {
      await link(tempPath, finalPath);
    } catch (err) {
      if (errorCode(err) === "EEXIST") return { inserted: false };
      throw err;
    }
    await fsyncDir(dir);
    return { inserted: true };
  }

  async putIfAbsent(key: BlobKey, body: BlobBody): Promise<PutOutcome> {
    let finalPath: string;
    let temp: { path: string; file: FileHandle };
    try {
      finalPath = this.objectPath(key);
      if (await this.exists(key)) {
        discardBody(body);
        return { inserted: false };
      }
      temp = await this.createTemp();
    } catch (err) {
      discardBody(body);
      throw err;
    }
    let fileOpen = true;
    try {
      if (body instanceof Uint8Array) {
        await writeFully(temp.file, body);
      } else {
        await pipeline(body, new FileHandleWriter(temp.file));
      }
      await temp.file.sync();
      fileOpen = false;
      await temp.file.close();
      return await this.publish(temp.path, finalPath);
    } finally {
      if (fileOpen) await temp.file.close().catch(() => undefined);
      await removeQuietly(temp.path);
    }
  }

  async putFileIfAbsent(key: BlobKey, path: string): Promise<PutOutcome> {
    const finalPath = this.objectPath(key);
    if (await this.exists(key)) return { inserted: false };
    const tempPath = join(this.root, TMP_DIR, `${randomUUID()}.part`);
    try {
      // FICLONE shares extents on filesystems that can (btrfs, xfs) and silently copies elsewhere.
      await copyFile(path, tempPath, fsConstants.COPYFILE_EXCL | fsConstants.COPYFILE_FICLONE);
      await chmod(tempPath, BLOB_MODE);
      const copy = await open(tempPath, "r");
      try {
        await copy.sync();
      } finally {
        await copy.close();
      }
      return await this.publish(tempPath, finalPath);
    } finally {
      await removeQuietly(tempPath);
    }
  }

  async beginPut(key: BlobKey): Promise<StagedPut> {
    const finalPath = this.objectPath(key);
    const temp = await this.createTemp();
    return new FsStagedPut(key, temp.path, temp.file, () => this.publish(temp.path, finalPath));
  }

  async read(key: BlobKey, span?: ByteSpan): Promise<Readable> {
    const file = await this.openStored(key);
    try {
      if (span === undefined) return file.createReadStream({ highWaterMark: READ_HIGH_WATER_MARK });
      // Checked against the open descriptor, so a concurrent delete cannot make the read short.
      checkByteSpan(key, span, (await file.stat()).size);
      return file.createReadStream({
        start: span.offset,
        end: span.offset + span.length - 1,
        highWaterMark: READ_HIGH_WATER_MARK,
      });
    } catch (err) {
      await file.close();
      throw err;
    }
  }

  async openSpan(key: BlobKey, span: ByteSpan): Promise<SpanReader> {
    const file = await this.openStored(key);
    try {
      // Checked against the open descriptor, as in read().
      checkByteSpan(key, span, (await file.stat()).size);
      return new FileSpanReader(file, span);
    } catch (err) {
      await file.close();
      throw err;
    }
  }

  private async openStored(key: BlobKey): Promise<FileHandle> {
    try {
      return await open(this.objectPath(key), "r");
    } catch (err) {
      if (isMissing(err)) throw new BlobStoreError("not_found", `${key} is not stored`);
      throw err;
    }
  }

  async size(key: BlobKey): Promise<number | null> {
    const path = this.objectPath(key);
    try {
      return (await stat(path)).size;
    } catch (err) {
      if (isMissing(err)) return null;
      throw err;
    }
  }

  async exists(key: BlobKey): Promise<boolean> {
    return (await this.size(key)) !== null;
  }

  async delete(key: BlobKey): Promise<void> {
    const path = this.objectPath(key);
    try {
      await unlink(path);
    } catch (err) {
      if (isMissing(err)) return;
      throw err;
    }
    await fsyncDir(dirname(path));
  }

  list(prefix = ""): AsyncIterable<BlobKey> {
    // Validated here, synchronously, so a bad prefix fails at the call and not at first iteration.
    return this.listValidPrefix(parseKeyPrefix(prefix));
  }

  private async *listValidPrefix(prefix: string): AsyncGenerator<BlobKey> {
    for (const kind of [...BLOB_KINDS].sort()) {
      const head = `${kind}/`;
      let hexPrefix: string;
      if (prefix.length <= head.length) {
        if (!head.startsWith(prefix)) continue;
        hexPrefix = "";
      } else {
        if (!prefix.startsWith(head)) continue;
        hexPrefix = prefix.slice(head.length);
      }
      const fanoutPrefix = hexPrefix.slice(0, 2);
      const fanouts = (await readdirQuietly(join(this.root, kind)))
        .filter((entry) => entry.isDirectory() && FANOUT_RE.test(entry.name) && entry.name.startsWith(fanoutPrefix))
        .map((entry) => entry.name)
        .sort();
      for (const fanout of fanouts) {
        // Stray names (not a hash, or in the wrong fan-out folder) are never reported as keys.
        const names = (await readdirQuietly(join(this.root, kind, fanout)))
          .filter((entry) => entry.isFile() && HEX64_RE.test(entry.name) && entry.name.startsWith(fanout) && entry.name.startsWith(hexPrefix))
          .map((entry) => entry.name)
          .sort();
        for (const name of names) yield `${kind}/${name}` as BlobKey;
      }
    }
  }

  async sweepTemp(options: SweepOptions = {}): Promise<number> {
    const olderThanMs = options.olderThanMs ?? 0;
    if (!Number.isFinite(olderThanMs) || olderThanMs < 0) {
      throw new RangeError(`sweepTemp olderThanMs must be a finite number >= 0, got ${String(olderThanMs)}`);
    }
    const tempDir = join(this.root, TMP_DIR);
    const now = Date.now();
    let removed = 0;
    for (const entry of await readdirQuietly(tempDir)) {
      const path = join(tempDir, entry.name);
      if (olderThanMs > 0) {
        const info = await lstat(path).catch(() => null);
        if (info === null || now - info.mtimeMs < olderThanMs) continue;
      }
      await rm(path, { recursive: true, force: true });
      removed++;
    }
    return removed;
  }
}

export function openFsBlobStore(root: string): Promise<FsBlobStore> {
  return FsBlobStore.open(root);
}

class FileSpanReader implements SpanReader {
  readonly length: number;

  constructor(
    private readonly file: FileHandle,
    private readonly span: ByteSpan,
  ) {
    this.length = span.length;
  }

  async read(buffer: Uint8Array, from: number): Promise<number> {
    const wanted = Math.min(buffer.length, this.length - from);
    if (wanted <= 0) return 0;
    const { bytesRead } = await this.file.read(buffer, 0, wanted, this.span.offset + from);
    return bytesRead;
  }

  close(): Promise<void> {
    return this.file.close();
  }
}

class FsStagedPut extends StagedPutBase {
  private fileOpen = true;

  constructor(
    key: BlobKey,
    private readonly tempPath: string,
    private readonly file: FileHandle,
    private readonly publish: () => Promise<PutOutcome>,
  ) {
    super(key, new FileHandleWriter(file));
  }

  protected async publishStaged(): Promise<PutOutcome> {
    await this.file.sync();
    this.fileOpen = false;
    await this.file.close();
    return this.publish();
  }

  protected async cleanUpStaging(): Promise<void> {
    if (this.fileOpen) {
      this.fileOpen = false;
      await this.file.close().catch(() => undefined);
    }
    await removeQuietly(this.tempPath);
  }
}
