/**
 * The objects of a pushed pack while the push is checked: written to a temporary file as the
 * pack is read (each object whole, deltas resolved), found again by id or by their offset in
 * the pack (a later delta's base). Memory holds the index and a few recently read objects,
 * whatever the size of the pack; the file is removed when the push is done.
 */
import { randomUUID } from "node:crypto";
import { mkdir, open, rm, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import type { DeltaBase, DeltaBases, PackObject, PackObjectType } from "../format/git-pack.js";
import type { PushedObject, PushObjects } from "./source.js";

interface Stored {
  type: PackObjectType;
  at: number;
  length: number;
  depth: number;
}

/** Bytes of recently read objects kept in memory: delta bases are usually read again soon. */
const CACHE_BYTES = 32 * 1024 * 1024;

export class ObjectSpool implements DeltaBases, PushObjects {
  private readonly stored = new Map<string, Stored>();
  private readonly oidAt = new Map<number, string>();
  /** Insertion order is recency: the oldest entries go first. */
  private readonly cache = new Map<string, Buffer>();
  private cached = 0;
  private size = 0;

  private constructor(
    private readonly file: FileHandle,
    private readonly path: string,
  ) {}

  /** A spool in a new file under `dir`. */
  static async create(dir: string): Promise<ObjectSpool> {
    await mkdir(dir, { recursive: true });
    const path = join(dir, `git-push-${randomUUID()}.objects`);
    return new ObjectSpool(await open(path, "w+", 0o600), path);
  }

  get count(): number {
    return this.stored.size;
  }

  async put(object: PackObject): Promise<void> {
    this.oidAt.set(object.offset, object.oid);
    if (this.stored.has(object.oid)) return;
    let written = 0;
    while (written < object.data.length) {
      written += (await this.file.write(object.data, written, object.data.length - written, this.size + written)).bytesWritten;
    }
    this.stored.set(object.oid, { type: object.type, at: this.size, length: object.data.length, depth: object.depth });
    this.size += object.data.length;
    this.remember(object.oid, object.data);
  }

  async atOffset(offset: number): Promise<DeltaBase | undefined> {
    const oid = this.oidAt.get(offset);
    return oid === undefined ? undefined : this.find(oid);
  }

  byOid(oid: string): Promise<DeltaBase | undefined> {
    return this.find(oid);
  }

  async get(oid: string): Promise<PushedObject | null> {
    return (await this.find(oid)) ?? null;
  }

  /** Removes the file. */
  async close(): Promise<void> {
    await this.file.close();
    await rm(this.path, { force: true });
  }

  private async find(oid: string): Promise<DeltaBase | undefined> {
    const stored = this.stored.get(oid);
    if (stored === undefined) return undefined;
    let data = this.cache.get(oid);
    if (data === undefined) {
      data = Buffer.allocUnsafe(stored.length);
      let read = 0;
      while (read < stored.length) {
        const { bytesRead } = await this.file.read(data, read, stored.length - read, stored.at + read);
        if (bytesRead === 0) throw new Error(`the push's object spool ended before object ${oid}`);
        read += bytesRead;
      }
      this.remember(oid, data);
    }
    return { type: stored.type, data, depth: stored.depth };
  }

  private remember(oid: string, data: Buffer): void {
    if (data.length > CACHE_BYTES / 4) return;
    const previous = this.cache.get(oid);
    if (previous !== undefined) {
      this.cache.delete(oid);
      this.cached -= previous.length;
    }
    this.cache.set(oid, data);
    this.cached += data.length;
    for (const [old, bytes] of this.cache) {
      if (this.cached <= CACHE_BYTES) break;
      this.cache.delete(old);
      this.cached -= bytes.length;
    }
  }
}
