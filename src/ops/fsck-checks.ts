/**
 * The checks of `castor fsck` (fsck.ts) on one object at a time — a xorb's blob against its
 * record, a file term against its xorb, an inline blob against its tree entry — and the
 * problems they report.
 */
import { createHash } from "node:crypto";
import { FormatError } from "../format/errors.js";
import { hashToHex } from "../format/hash.js";
import { XorbValidator } from "../format/xorb.js";
import type { XorbRecord } from "../metadata/cas.js";
import { blobKey, blobKeyFromHex, isBlobStoreError, type BlobKey, type BlobStore } from "../storage/blob-store.js";
import type { ReachedFile } from "./reachability.js";

export type FsckProblemKind =
  /** A recorded xorb has no blob. */
  | "xorb_missing"
  /** A recorded xorb's blob does not validate as that xorb, or differs from its record. */
  | "xorb_corrupt"
  /** A file term names a xorb that is not recorded. */
  | "file_missing_xorb"
  /** A file term's chunk range or length does not fit its xorb's record. */
  | "file_bad_term"
  /** A file term names a xorb whose blob is missing or corrupt. */
  | "file_damaged_xorb"
  /** A dedup index entry names a xorb that is not recorded. */
  | "dedup_missing_xorb"
  /** A ref or a commit names a commit that is not stored. */
  | "commit_missing"
  /** A commit or a tree names a tree that is not stored. */
  | "tree_missing"
  /** A reachable tree names a Xet file that is not recorded: downloads of that path fail. */
  | "file_missing"
  /** A reachable tree names an inline file whose blob is missing. */
  | "inline_missing"
  /** An inline file's blob does not hold the entry's bytes (size or SHA-256). */
  | "inline_corrupt"
  /** A blob nothing needs (not damage): see `FsckReport.orphans`. */
  | "orphan_blob";

export interface FsckProblem {
  kind: FsckProblemKind;
  /**
   * What is damaged: `xorb <hex>`, `file <hex>`, `chunk <hex>` (a dedup entry), `commit <oid>`,
   * `tree <oid>`, `inline <sha256>`, or `blob <key>` (an orphan).
   */
  subject: string;
  /** The xorb involved, hex, when the subject is not that xorb itself. */
  xorb?: string;
  message: string;
  /** With `repair`: what was done about it, or why it was left. */
  repair?: string;
}

/** The problem of an inline file's blob, or null when it holds the entry's bytes. */
export async function inlineProblem(blobs: BlobStore, file: ReachedFile): Promise<FsckProblem | null> {
  const { entry } = file;
  // An empty file is answered without reading a blob.
  if (entry.size === 0) return null;
  const key = blobKeyFromHex("inline", entry.sha256);
  const subject = `inline ${entry.sha256}`;
  const at = `${file.path} in ${file.repo.type}:${file.repo.name}`;
  const missing: FsckProblem = { kind: "inline_missing", subject, message: `${at} names inline blob ${key}, which is missing` };
  const size = await blobs.size(key);
  if (size === null) return missing;
  const corrupt = (why: string): FsckProblem => ({ kind: "inline_corrupt", subject, message: `the inline blob ${key} of ${at} ${why}` });
  if (size !== entry.size) return corrupt(`has ${size} bytes where the tree says ${entry.size}`);
  const digest = await sha256Of(blobs, key);
  if (digest === null) return missing;
  return digest === entry.sha256 ? null : corrupt(`hashes to SHA-256 ${digest}`);
}

/** SHA-256 (hex) of a blob, streamed; null when it is gone. Inline blobs are small (10 MiB by default). */
async function sha256Of(blobs: BlobStore, key: BlobKey): Promise<string | null> {
  let stream;
  try {
    stream = await blobs.read(key);
  } catch (error) {
    if (isBlobStoreError(error, "not_found")) return null;
    throw error;
  }
  const hash = createHash("sha256");
  try {
    for await (const piece of stream as AsyncIterable<Uint8Array>) hash.update(piece);
  } finally {
    stream.destroy();
  }
  return hash.digest("hex");
}

/** The first problem of one recorded xorb's blob, or null when it is intact. */
export async function checkXorb(blobs: BlobStore, xorb: XorbRecord): Promise<FsckProblem | null> {
  const hex = hashToHex(xorb.hash);
  const subject = `xorb ${hex}`;
  const corrupt = (why: string): FsckProblem => ({ kind: "xorb_corrupt", subject, message: `the blob of xorb ${hex} ${why}` });
  const key = blobKey("xorbs", xorb.hash);
  const size = await blobs.size(key);
  if (size === null) return { kind: "xorb_missing", subject, message: `xorb ${hex} is recorded but its blob ${key} is missing` };
  if (size !== xorb.serializedLength) return corrupt(`has ${size} bytes where its record says ${xorb.serializedLength}`);

  // Streamed piece by piece: the validator holds at most one chunk, never the whole blob.
  const validator = new XorbValidator({ expectedHash: xorb.hash });
  let stream;
  try {
    stream = await blobs.read(key);
  } catch (error) {
    // Deleted between size() and read().
    if (isBlobStoreError(error, "not_found")) return { kind: "xorb_missing", subject, message: `xorb ${hex} is recorded but its blob ${key} is missing` };
    throw error;
  }
  let info;
  try {
    for await (const piece of stream as AsyncIterable<Uint8Array>) validator.push(piece);
    info = validator.finish();
  } catch (error) {
    if (error instanceof FormatError) return corrupt(`does not validate: ${error.message}`);
    throw error;
  } finally {
    stream.destroy();
  }
  if (info.hasFooter) return corrupt("carries a footer, which castor never stores");
  if (info.serializedLength !== xorb.serializedLength || info.uncompressedLength !== xorb.uncompressedLength || info.chunks.length !== xorb.chunks.length) {
    return corrupt(
      `validates with ${info.chunks.length} chunks, ${info.serializedLength} bytes (${info.uncompressedLength} uncompressed) where its record says ${xorb.chunks.length}, ${xorb.serializedLength} (${xorb.uncompressedLength})`,
    );
  }
  for (let i = 0; i < info.chunks.length; i++) {
    const found = info.chunks[i];
    const recorded = xorb.chunks[i];
    if (
      Buffer.compare(found.hash, recorded.hash) !== 0 ||
      found.serializedEnd !== recorded.serializedEnd ||
      found.uncompressedLength !== recorded.uncompressedLength
    ) {
      return corrupt(`differs from its record's chunk table at chunk ${i}`);
    }
  }
  return null;
}

/** Why chunks [start, end) with `unpacked` bytes do not fit `xorb`'s record, or null. */
export function termMismatch(xorb: XorbRecord, start: number, end: number, unpacked: number): string | null {
  const count = xorb.chunks.length;
  if (!(start >= 0 && start < end && end <= count)) return `chunk range [${start}, ${end}) lies outside the xorb's ${count} chunks`;
  let length = 0;
  for (let i = start; i < end; i++) length += xorb.chunks[i].uncompressedLength;
  if (length !== unpacked) return `chunks [${start}, ${end}) hold ${length} bytes but the term says ${unpacked}`;
  return null;
}
