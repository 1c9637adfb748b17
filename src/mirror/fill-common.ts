/**
 * What the fills of Xet and inline files share: where their bytes go, how they fail, and the
 * identity of the registration that publishes a mirrored Xet file.
 */
import { createHash } from "node:crypto";
import { bytesToPlainHex, type Hash } from "../format/hash.js";

/** Where a fill writes the file's bytes, in order (the clients reading along: broadcast.ts). */
export interface FillOutput {
  write(bytes: Uint8Array): Promise<void>;
  /**
   * Whether anyone reads the bytes as they come; when not, a fill may `skip` bytes it would
   * only have had to read back from castor's own store.
   */
  readonly wantsBytes?: boolean;
  /** The next `length` bytes, not written (only while `wantsBytes` is false). */
  skip?(length: number): Promise<void>;
  /**
   * Everything written is the file, verified against the upstream's tree (it may not be stored
   * yet): readers along may have their last bytes.
   */
  verified?(): Promise<void>;
}

/**
 * A fill that published nothing: `verification`, the upstream's bytes do not match what its
 * tree states; `upstream`, it answered something the protocol does not allow.
 */
export class MirrorFillError extends Error {
  override readonly name = "MirrorFillError";
  constructor(
    readonly kind: "verification" | "upstream",
    message: string,
  ) {
    super(message);
  }
}

/**
 * The "shard hash" a mirrored file is registered under: castor builds no shard for it, and the
 * registration of one file hash is one registration, whatever repository links it later.
 */
export function registrationHash(fileHash: Hash): Hash {
  return new Uint8Array(
    createHash("sha256")
      .update(`castor mirror registration ${bytesToPlainHex(fileHash)}`)
      .digest(),
  );
}
