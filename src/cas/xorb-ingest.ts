/**
 * Xorb ingest: the service behind `POST /v1/xorbs/default/{hash}` (docs/protocol.md §5.6).
 *
 * A body streams through the `XorbValidator` and, piece by piece with backpressure, into a
 * staged blob; nothing is ever held whole in memory. Only once the last byte validated (every
 * chunk decoded and hashed, the footer if any checked, the xorb hash equal to the one claimed)
 * is the blob committed, and only then is the xorb recorded in the metadata store:
 *
 *   validate + stage  →  commit blob  →  putXorb (metadata)
 *
 * so a crash at any point leaves either nothing visible or a blob without metadata, which the
 * next upload of that xorb repairs (the blob store answers "already present", the metadata is
 * inserted). A failed or abandoned upload aborts its staged blob: no temp file stays.
 *
 * Stored bytes are exactly the chunk stream: a footer sent by an older client is validated
 * and then dropped, never stored, so it can never be served (it would reveal every chunk
 * hash, defeating the possession proof of §3.6).
 *
 * Concurrency: any number of uploads of one xorb may run at once. The blob store lets one
 * commit publish and the metadata store lets one `putXorb` insert, so exactly one caller sees
 * `wasInserted: true`. The metadata always describes the bytes actually stored: a client may
 * legally compress the same chunks differently (same xorb hash, different bytes and offsets),
 * so an upload that lost the race to publish records the stored blob's own layout, read back.
 */
import type { Writable } from "node:stream";
import { FormatError, type FormatErrorCode } from "../format/errors.js";
import { hashEquals, hashToHex, xorbHash, type Hash } from "../format/hash.js";
import { DEFAULT_MAX_XORB_BODY_BYTES, XORB_CHUNK_HEADER_BYTES, XorbValidator, type XorbInfo } from "../format/xorb.js";
import type { CasMetadataStore, XorbRecord } from "../metadata/cas.js";
import type { GcRecords } from "../metadata/gc.js";
import { leaseForWrite } from "./leases.js";
import { blobKey, type BlobStore, type StagedPut } from "../storage/blob-store.js";

export interface XorbIngestDeps {
  blobs: BlobStore;
  metadata: Pick<CasMetadataStore, "putXorb" | "getXorbSize"> & Pick<GcRecords, "leaseObjects">;
  /** Cap on a whole upload body, footer included (default `DEFAULT_MAX_XORB_BODY_BYTES`). */
  maxBodyBytes?: number;
}

export interface XorbIngestResult {
  /** The answer of the upload: true for exactly one of all uploads of this xorb. */
  wasInserted: boolean;
  /**
   * What this upload did with its body: `stored` (validated, and its bytes published),
   * `already_stored` (validated, but another upload had published the blob first),
   * `already_recorded` (the xorb was recorded before: the body was read and dropped unvalidated).
   */
  outcome: "stored" | "already_stored" | "already_recorded";
  /** The metadata of the stored xorb; null for `already_recorded`. */
  record: XorbRecord | null;
}

/**
 * The body is not a valid xorb, or not the xorb named, or too large (`code` and message are the
 * format layer's, which say why). Nothing was stored; the client's doing.
 */
export class XorbRejectedError extends Error {
  override readonly name = "XorbRejectedError";
  constructor(
    readonly code: FormatErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }

  static of(error: FormatError): XorbRejectedError {
    return new XorbRejectedError(error.code, error.message, { cause: error });
  }
}

/**
 * The blob stored under a xorb's key does not validate as that xorb (disk damage, tampering).
 * Not the client's fault: uploads of that xorb fail until an operator removes the blob.
 */
export class StoredXorbCorruptError extends Error {
  override readonly name = "StoredXorbCorruptError";
}

export class XorbIngestService {
  readonly maxBodyBytes: number;
  private readonly blobs: BlobStore;
  private readonly metadata: XorbIngestDeps["metadata"];

  constructor(deps: XorbIngestDeps) {
    const maxBodyBytes = deps.maxBodyBytes ?? DEFAULT_MAX_XORB_BODY_BYTES;
    if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes < 1) {
      throw new RangeError(`maxBodyBytes must be a positive integer, got ${maxBodyBytes}`);
    }
    this.maxBodyBytes = maxBodyBytes;
    this.blobs = deps.blobs;
    this.metadata = deps.metadata;
  }

  /** Serialized size of a recorded xorb (chunks only), or null when it is not recorded. */
  storedSize(hash: Hash): Promise<number | null> {
    return this.metadata.getXorbSize(hash);
  }

  /**
   * Ingests one upload of the xorb `hash`. `body` yields the body as it arrives; its errors
   * (a size cap, a broken connection) propagate unchanged after the staged blob is discarded.
   * A malformed body, a body over `maxBodyBytes` or one whose hash is not `hash` rejects with
   * an `XorbRejectedError` carrying the validator's code and message, and nothing is stored.
   */
  async ingest(hash: Hash, body: AsyncIterable<Uint8Array>): Promise<XorbIngestResult> {
    if ((await this.metadata.getXorbSize(hash)) !== null && (await this.leaseRecorded(hash))) {
      // Validating would cost CPU for an answer that cannot change; reading the body to its
      // end keeps the connection healthy (a client still sending would otherwise see a reset).
      await this.drain(body);
      return { wasInserted: false, outcome: "already_recorded", record: null };
    }

    // Leased before the blob is stored, so a garbage collection that starts now leaves it
    // alone; putXorb checks the collector did not overtake the lease (src/metadata/gc.ts).
    const lease = await leaseForWrite(this.metadata, "xorb", hash);

    const validator = new XorbValidator({ expectedHash: hash, maxBodyBytes: this.maxBodyBytes });
    const chunkStream = new ChunkStreamEnd();
    const staged = await this.blobs.beginPut(blobKey("xorbs", hash));
    try {
      const info = await this.validateInto(body, validator, chunkStream, staged);
      const { inserted } = await staged.commit();
      const record = inserted ? recordOf(info) : await this.recordOfStoredXorb(hash);
      const wasInserted = await this.metadata.putXorb(record, lease);
      return { wasInserted, outcome: inserted ? "stored" : "already_stored", record };
    } finally {
      // No-op after a commit; otherwise removes the temp file whatever went wrong.
      await staged.abort();
    }
  }

  /**
   * Stores a xorb that castor itself built from chunks it decoded and hashed (the mirror's
   * repacked chunks, or an upstream xorb fetched whole): `bytes` are its chunks serialized, and
   * `record` their table. Only the xorb hash is checked against the table here — the builder
   * vouches for the rest — then it is stored as an upload is: lease, blob, record.
   */
  async storeValidated(record: XorbRecord, bytes: Uint8Array): Promise<XorbIngestResult> {
    const computed = xorbHash(record.chunks.map((chunk) => ({ hash: chunk.hash, size: chunk.uncompressedLength })));
    if (!hashEquals(computed, record.hash) || bytes.length !== record.serializedLength) {
      throw new Error(`xorb ${hashToHex(record.hash)}: the table given does not describe the bytes given (a bug in its builder)`);
    }
    if ((await this.metadata.getXorbSize(record.hash)) !== null && (await this.leaseRecorded(record.hash))) {
      return { wasInserted: false, outcome: "already_recorded", record: null };
    }
    const lease = await leaseForWrite(this.metadata, "xorb", record.hash);
    const { inserted } = await this.blobs.putIfAbsent(blobKey("xorbs", record.hash), bytes);
    const stored = inserted ? record : await this.recordOfStoredXorb(record.hash);
    const wasInserted = await this.metadata.putXorb(stored, lease);
    return { wasInserted, outcome: inserted ? "stored" : "already_stored", record: stored };
  }

  private async validateInto(body: AsyncIterable<Uint8Array>, validator: XorbValidator, chunkStream: ChunkStreamEnd, staged: StagedPut): Promise<XorbInfo> {
    const { writable } = staged;
    for await (const piece of body) {
      rejectingInvalid(() => validator.push(piece));
      const chunkBytes = chunkStream.take(piece);
      if (chunkBytes.length === 0) continue;
      writable.write(chunkBytes);
      if (writable.writableLength >= STAGING_WINDOW_BYTES) await drained(writable);
    }
    const info = rejectingInvalid(() => validator.finish());
    if (chunkStream.length !== info.serializedLength) {
      // Both walk the same headers; a disagreement is a bug here, and storing would be wrong.
      throw new Error(
        `xorb ${hashToHex(info.hash)}: the chunk stream was cut at byte ${chunkStream.length} but the validator counted ${info.serializedLength} chunk bytes`,
      );
    }
    // Ending publishes nothing; commit() waits for the last write and fsyncs.
    writable.end();
    return info;
  }

  /**
   * Leases a recorded xorb for the client that is about to name it in a shard, and confirms it
   * is still recorded; false when a garbage collection is deleting it (the body is then stored
   * anew).
   */
  private async leaseRecorded(hash: Hash): Promise<boolean> {
    const leased = await this.metadata.leaseObjects("xorb", [hash]);
    return leased.size === 1 && (await this.metadata.getXorbSize(hash)) !== null;
  }

  private async drain(body: AsyncIterable<Uint8Array>): Promise<void> {
    let received = 0;
    for await (const piece of body) {
      received += piece.length;
      if (received > this.maxBodyBytes) {
        throw new XorbRejectedError("xorb_too_large", `xorb body exceeds the limit of ${this.maxBodyBytes} bytes (${received} bytes received so far)`);
      }
    }
  }

  /** Re-derives the chunk table from the blob another upload published (see the file comment). */
  private async recordOfStoredXorb(hash: Hash): Promise<XorbRecord> {
    const validator = new XorbValidator({ expectedHash: hash, maxBodyBytes: this.maxBodyBytes });
    const stored = await this.blobs.read(blobKey("xorbs", hash));
    let info: XorbInfo;
    try {
      for await (const piece of stored as AsyncIterable<Uint8Array>) validator.push(piece);
      info = validator.finish();
    } catch (error) {
      stored.destroy();
      if (error instanceof FormatError) {
        throw new StoredXorbCorruptError(
          `the stored blob of xorb ${hashToHex(hash)} does not validate (${error.message}); it must be inspected and removed by an operator`,
        );
      }
      throw error;
    }
    if (info.hasFooter) {
      throw new StoredXorbCorruptError(
        `the stored blob of xorb ${hashToHex(hash)} carries a footer, which castor never stores; it must be inspected by an operator`,
      );
    }
    return recordOf(info);
  }
}

/** Runs a step of the upload's validation: the validator's FormatError is the upload's rejection. */
function rejectingInvalid<T>(step: () => T): T {
  try {
    return step();
  } catch (error) {
    throw error instanceof FormatError ? XorbRejectedError.of(error) : error;
  }
}

function recordOf(info: XorbInfo): XorbRecord {
  return {
    hash: info.hash,
    serializedLength: info.serializedLength,
    uncompressedLength: info.uncompressedLength,
    chunks: info.chunks.map(({ hash, uncompressedLength, serializedEnd }) => ({ hash, uncompressedLength, serializedEnd })),
  };
}

/**
 * Bytes an upload may have queued for its staged blob before it stops reading the body. Wider
 * than a stream's 16 KiB default so that queued pieces reach the file as one writev (~16
 * pieces per system call instead of one); per upload this bounds memory at about 1 MiB.
 */
const STAGING_WINDOW_BYTES = 1024 * 1024;

const NOTHING = new Uint8Array(0);
/** A chunk header starts with version 0; the footer with "XETBLOB" (0x58). */
const CHUNK_HEADER_VERSION = 0;

/**
 * Finds where the chunk stream ends in a body that arrives in pieces, so that a footer is
 * never stored. It only follows the chain of chunk headers (each names its payload size);
 * judging the bytes is entirely the validator's job, which sees the same pieces. The
 * validator does not expose this offset while streaming, hence this small walker.
 */
export class ChunkStreamEnd {
  /** Body offset of the next piece. */
  private received = 0;
  /** Body offset of the next chunk header. */
  private headerAt = 0;
  /** How many of bytes 0..3 of the header at `headerAt` were seen (version + 24-bit payload size). */
  private headerSeen = 0;
  private payloadSize = 0;
  /** Where the bytes after the chunks (a footer, or junk the validator refuses) begin. */
  private trailerAt: number | null = null;

  /** The part of `piece` that belongs to the chunk stream (a view, never a copy). */
  take(piece: Uint8Array): Uint8Array {
    const pieceStart = this.received;
    const pieceEnd = pieceStart + piece.length;
    this.received = pieceEnd;
    if (this.trailerAt !== null) return NOTHING;
    for (let at = this.headerAt + this.headerSeen; at < pieceEnd; at = this.headerAt + this.headerSeen) {
      const byte = piece[at - pieceStart];
      if (this.headerSeen === 0) {
        if (byte !== CHUNK_HEADER_VERSION) {
          this.trailerAt = at;
          return piece.subarray(0, at - pieceStart);
        }
        this.payloadSize = 0;
      } else {
        this.payloadSize |= byte << (8 * (this.headerSeen - 1));
      }
      if (++this.headerSeen === 4) {
        this.headerAt += XORB_CHUNK_HEADER_BYTES + this.payloadSize;
        this.headerSeen = 0;
      }
    }
    return piece;
  }

  /** Length of the chunk stream among the bytes taken so far. */
  get length(): number {
    return this.trailerAt ?? this.received;
  }
}

/**
 * Resolves once `writable` has written everything queued ('drain'); rejects if it fails or is
 * destroyed first. Call only after a `write` returned false, or 'drain' never comes.
 */
function drained(writable: Writable): Promise<void> {
  return new Promise((resolve, reject) => {
    if (writable.errored || writable.destroyed) {
      reject(writable.errored ?? new Error("the staged blob was closed while the upload was being written"));
      return;
    }
    const cleanup = () => {
      writable.off("drain", onDrain);
      writable.off("error", onError);
      writable.off("close", onClose);
    };
    const onDrain = () => {
      cleanup();
      resolve();
    };
    const onError = (error: Error) => {
      cleanup();
      reject(error);
    };
    const onClose = () => {
      cleanup();
      reject(writable.errored ?? new Error("the staged blob was closed while the upload was being written"));
    };
    writable.on("drain", onDrain);
    writable.on("error", onError);
    writable.on("close", onClose);
  });
}
