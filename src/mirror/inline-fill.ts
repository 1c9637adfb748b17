/**
 * Filling castor with one file of the upstream hub that is not Xet-stored: a small file git
 * keeps itself, or a plain LFS file. Its bytes come from the upstream's `resolve` (redirects
 * followed — the Hub sends LFS files from a CDN — castor's token going only to the upstream's
 * own host), go to `output` as they arrive, and are stored as castor stores inline content: a
 * blob under its SHA-256.
 *
 * Verified before published: the size the tree states, and the git blob id (`oid`) of a git
 * file, or the SHA-256 (`lfs.oid`) of an LFS file, whose pointer must then have that blob id.
 * A git file is held in memory until verified (git files on the Hub are small: it refuses
 * larger ones, and castor refuses them past `maxInlineBytes`); an LFS file streams into a
 * staged blob that is published only once its digest matched.
 */
import { createHash } from "node:crypto";
import { leaseForWrite } from "../cas/leases.js";
import { gitBlobId, lfsPointer } from "../format/git.js";
import type { GcRecords } from "../metadata/gc.js";
import type { MirrorRecords } from "../metadata/mirror.js";
import { blobKeyFromHex, type BlobStore, type StagedPut } from "../storage/blob-store.js";
import { isUpstreamError } from "../upstream/errors.js";
import type { UpstreamHub, UpstreamRepoRef } from "../upstream/hub.js";
import { MirrorFillError, type FillOutput } from "./fill-common.js";
import type { FillResult } from "./xet-fill.js";

export interface InlineFillDeps {
  upstream: Pick<UpstreamHub, "openFile" | "failure" | "origin">;
  blobs: Pick<BlobStore, "putIfAbsent" | "beginPut">;
  store: Pick<GcRecords, "leaseObjects"> & { mirror: Pick<MirrorRecords, "putMirroredFile"> };
  /** Largest git (non-LFS) file held in memory while it is verified (default 64 MiB). */
  maxInlineBytes?: number;
  now?: () => Date;
  onFetched?: (bytes: number) => void;
}

export interface InlineFillTarget {
  repo: UpstreamRepoRef;
  commit: string;
  path: string;
  /** git blob id the tree states (of the LFS pointer, for an LFS file). */
  gitOid: string;
  size: number;
  /** The tree's `lfs.oid` for an LFS file; null for a git file. */
  sha256: string | null;
}

const DEFAULT_MAX_INLINE_BYTES = 64 * 1024 * 1024;

export async function fillInlineFile(deps: InlineFillDeps, target: InlineFillTarget, output: FillOutput): Promise<FillResult> {
  const what = `fetching ${JSON.stringify(target.path)} of ${target.repo.type}:${target.repo.name} at ${target.commit} from the upstream hub ${deps.upstream.origin}`;
  const maxInline = deps.maxInlineBytes ?? DEFAULT_MAX_INLINE_BYTES;
  if (target.sha256 === null && target.size > maxInline) {
    throw new MirrorFillError(
      "upstream",
      `${what}: a git file of ${target.size} bytes is larger than castor mirrors (${maxInline}); the Hub keeps files that large in LFS`,
    );
  }
  if (target.sha256 !== null && gitBlobId(lfsPointer(target.sha256, target.size)) !== target.gitOid) {
    throw new MirrorFillError("verification", `${what}: its tree states an LFS SHA-256 and size whose pointer is not the blob ${target.gitOid}`);
  }
  let staged: StagedPut | null = null;
  try {
    const response = await deps.upstream.openFile(target.repo, target.commit, target.path);
    const body = response.body;
    if (response.status !== 200 || body === null) {
      await body?.cancel().catch(() => undefined);
      throw new MirrorFillError("upstream", `${what}: the upstream answered ${response.status} instead of the file's bytes`);
    }
    const sha256 = createHash("sha256");
    const sha1 = createHash("sha1").update(`blob ${target.size}\0`);
    const held = target.sha256 === null ? new Uint8Array(target.size) : null;
    if (target.sha256 !== null) staged = await deps.blobs.beginPut(blobKeyFromHex("inline", target.sha256));
    let received = 0;
    for await (const piece of body as AsyncIterable<Uint8Array>) {
      if (received + piece.length > target.size)
        throw new MirrorFillError("verification", `${what}: the upstream sent more than the ${target.size} bytes its tree states`);
      sha256.update(piece);
      sha1.update(piece);
      if (held !== null) held.set(piece, received);
      if (staged !== null && !staged.writable.write(piece)) await new Promise((resolve) => staged!.writable.once("drain", resolve));
      received += piece.length;
      deps.onFetched?.(piece.length);
      await output.write(piece);
    }
    const digest = sha256.digest("hex");
    const blobId = sha1.digest("hex");
    if (received !== target.size) throw new MirrorFillError("verification", `${what}: the upstream sent ${received} bytes; its tree states ${target.size}`);
    if (target.sha256 === null ? blobId !== target.gitOid : digest !== target.sha256) {
      const why = target.sha256 === null ? `git blob id ${blobId}, not ${target.gitOid}` : `SHA-256 ${digest}, not ${target.sha256}`;
      throw new MirrorFillError("verification", `${what}: the upstream sent bytes that do not match its tree (${why}); nothing was stored`);
    }
    await leaseForWrite(deps.store, "inline", sha256Bytes(digest));
    if (staged !== null) {
      staged.writable.end();
      await staged.commit();
    } else {
      await deps.blobs.putIfAbsent(blobKeyFromHex("inline", digest), held!);
    }
    const now = deps.now?.() ?? new Date();
    await deps.store.mirror.putMirroredFile(
      { kind: "inline", hash: sha256Bytes(digest), gitOid: target.gitOid, size: target.size, fetchedBytes: received, fetchedAt: now, lastUsedAt: now },
      [],
    );
    return { fetchedBytes: received, heldBytes: 0 };
  } catch (error) {
    throw isUpstreamError(error) || error instanceof MirrorFillError ? error : deps.upstream.failure(error, what);
  } finally {
    await staged?.abort();
  }
}

/** A SHA-256 given in hex, as the raw digest (the key of an inline blob's lease and mirror record). */
export function sha256Bytes(hex: string): Uint8Array {
  return new Uint8Array(Buffer.from(hex, "hex"));
}
