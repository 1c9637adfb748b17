/**
 * The bytes of files stored inline (small files, kept in the blob store under their SHA-256):
 * reading one, and writing one under a garbage-collection lease, so that a collection running
 * meanwhile leaves it alone until the commit naming it lands (src/metadata/gc.ts).
 */
import { createHash } from "node:crypto";
import { buffer } from "node:stream/consumers";
import { leaseForWrite } from "../cas/leases.js";
import { gitBlobId } from "../format/git.js";
import type { GcRecords } from "../metadata/gc.js";
import { blobKeyFromHex, type BlobStore } from "../storage/blob-store.js";

/** An inline file as a tree names it. */
export interface StoredInline {
  sha256: string;
  size: number;
  /** Its git blob id. */
  oid: string;
}

export class InlineBlobs {
  constructor(
    private readonly blobs: Pick<BlobStore, "read" | "putIfAbsent">,
    private readonly store: Pick<GcRecords, "leaseObjects">,
  ) {}

  async read(file: { sha256: string; size: number }): Promise<Buffer> {
    if (file.size === 0) return Buffer.alloc(0);
    return buffer(await this.blobs.read(blobKeyFromHex("inline", file.sha256), { offset: 0, length: file.size }));
  }

  /** How a tree names `content` once it is stored. */
  static describe(content: Buffer): StoredInline {
    return { sha256: createHash("sha256").update(content).digest("hex"), size: content.length, oid: gitBlobId(content) };
  }

  /** Stores `content` (leased first) unless present; returns how a tree names it. */
  async write(content: Buffer): Promise<StoredInline> {
    const stored = InlineBlobs.describe(content);
    await leaseForWrite(this.store, "inline", Buffer.from(stored.sha256, "hex"));
    await this.blobs.putIfAbsent(blobKeyFromHex("inline", stored.sha256), content);
    return stored;
  }
}
