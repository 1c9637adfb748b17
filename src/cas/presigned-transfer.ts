/**
 * `CASTOR_TRANSFER_MODE=presigned`: reconstruction answers hand out URLs the blob store signs for
 * its own objects (`BlobStore.createRangePresigner`; the S3 store's are presigned S3 GETs, see
 * src/storage/s3/range-presigner.ts) instead of castor's own transfer URLs, so clients fetch
 * bytes from the object store directly and castor serves JSON only. Each URL names one byte
 * range, so V2 answers put one range in each entry (S3 serves no multi-range GET) and V1
 * answers are unchanged. Clients re-query on 403 (an expired URL, rotated credentials).
 */
import type { Hash } from "../format/hash.js";
import { blobKey, type RangePresigner } from "../storage/blob-store.js";
import type { ByteRange } from "../format/ranges.js";
import type { RangeUrlSigner } from "./reconstruction-render.js";

export class PresignedTransferUrls implements RangeUrlSigner {
  constructor(private readonly presigner: RangePresigner) {}

  /** Renews the presigner's credentials; awaited before each answer is rendered, so `sign` stays synchronous. */
  refresh(): Promise<void> {
    return this.presigner.refresh();
  }

  /** A presigned GET of exactly one byte range (inclusive end) of the xorb. */
  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    if (ranges.length !== 1) {
      throw new RangeError(`a presigned S3 URL covers exactly one byte range, ${ranges.length} were asked (render V2 with one range per entry)`);
    }
    const { start, end } = ranges[0];
    return this.presigner.presign(blobKey("xorbs", xorbHash), { offset: start, length: end - start + 1 });
  }
}
