/**
 * Builders of test data shared by the suites: hashes and git object ids named by a label, xorb
 * and file records whose fields agree with each other (lengths add up, ends ascend, terms name
 * chunks that exist), and CAS access tokens. Labels keep records deterministic and distinct,
 * and failures readable.
 *
 * Naming: the xorb of label L is `hashOf("xorb L")` with chunks `hashOf("L/chunk i")`; the
 * file of label L is `hashOf("file L")` with SHA-256 `hashOf("sha L")`.
 */
import { createHash, type KeyObject } from "node:crypto";
import { CasTokenIssuer, type CasScope, type CasTokenRequest } from "../../src/auth/cas-token.js";
import type { Hash } from "../../src/format/hash.js";
import type { FileRecord, StoredChunk, XorbRecord } from "../../src/metadata/store.js";

/** A deterministic 32-byte hash per label (its SHA-256), as a plain Uint8Array like the stores return. */
export function hashOf(label: string): Hash {
  return new Uint8Array(createHash("sha256").update(label).digest());
}

/** A git-like object id (40 hex digits) per label, for commits and trees. */
export function oidOf(label: string): string {
  return createHash("sha1").update(label).digest("hex");
}

export interface XorbShape {
  /** Uncompressed bytes of chunk `i`: one number for all, or per chunk. Default 65,536. */
  chunkBytes?: number | ((i: number) => number);
  /**
   * Serialized bytes of chunk `i` (its 8-byte header and payload), from its uncompressed
   * bytes: one number for all, or per chunk. Default 40,008.
   */
  serializedBytes?: number | ((uncompressed: number, i: number) => number);
}

/** A xorb record of `count` chunks, shaped by `shape`. */
export function xorbRecord(label: string, count: number, shape: XorbShape = {}): XorbRecord {
  const { chunkBytes = 65_536, serializedBytes = 40_008 } = shape;
  const chunks: StoredChunk[] = [];
  let serializedEnd = 0;
  let uncompressedLength = 0;
  for (let i = 0; i < count; i++) {
    const length = typeof chunkBytes === "number" ? chunkBytes : chunkBytes(i);
    serializedEnd += typeof serializedBytes === "number" ? serializedBytes : serializedBytes(length, i);
    uncompressedLength += length;
    chunks.push({ hash: hashOf(`${label}/chunk ${i}`), uncompressedLength: length, serializedEnd });
  }
  return { hash: hashOf(`xorb ${label}`), serializedLength: serializedEnd, uncompressedLength, chunks };
}

/**
 * A file record over the first `terms` chunks of `xorb`, one term per chunk (default one
 * term); its SHA-256 is `hashOf("sha <label>")` unless `sha256` is given (null: none).
 */
export function fileRecord(label: string, xorb: XorbRecord, options: { terms?: number; sha256?: Uint8Array | null } = {}): FileRecord {
  const { terms = 1 } = options;
  if (terms > xorb.chunks.length) throw new RangeError(`${terms} one-chunk terms need ${terms} chunks; the xorb has ${xorb.chunks.length}`);
  const fileTerms = xorb.chunks
    .slice(0, terms)
    .map((chunk, k) => ({ xorbHash: xorb.hash, chunkStart: k, chunkEnd: k + 1, unpackedLength: chunk.uncompressedLength }));
  return {
    hash: hashOf(`file ${label}`),
    size: fileTerms.reduce((sum, term) => sum + term.unpackedLength, 0),
    terms: fileTerms,
    sha256: options.sha256 === undefined ? hashOf(`sha ${label}`) : options.sha256,
  };
}

/**
 * A CAS access token signed with `key`, as a castor node holding it issues them: for `repo`
 * (default model alice/bert) at `rev` (default main), living `ttlSeconds` (default 600) from
 * `now` (default the real clock; a clock in the past gives an expired token).
 */
export async function casTokenSignedWith(
  key: KeyObject,
  scope: CasScope,
  options: { repo?: CasTokenRequest["repo"]; rev?: string; ttlSeconds?: number; now?: () => Date } = {},
): Promise<string> {
  const { repo = { type: "model", id: "alice/bert" }, rev = "main", ttlSeconds = 600, now } = options;
  return (await new CasTokenIssuer(key, ttlSeconds, now).issue({ repo, rev, scope })).token;
}
