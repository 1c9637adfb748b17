/**
 * Xorb records written straight into a data dir's SQLite before a server starts on it, and
 * valid shards over them: registration reads chunk tables, never xorb bytes, so a shard of
 * hundreds of thousands of files (or of millions of chunk references) costs seconds to prepare,
 * not an upload of its data. Used by the shard-budget test and the `shard-limits` bench group.
 */
import { randomBytes } from "node:crypto";
import { FileHashBuilder, MerkleMemo, type LeafSource } from "../../src/format/file-hash-builder.js";
import { fileHash, verificationHash, xorbHash } from "../../src/format/hash.js";
import type { ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import type { XorbRecord } from "../../src/metadata/cas.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";

/**
 * Records `xorbs` xorbs of `chunksPerXorb` chunks with random hashes, each chunk claiming
 * `chunkBytes` bytes, in the SQLite store of `dataDir`; returns their records.
 */
export async function storeSyntheticXorbs(dataDir: string, xorbs: number, chunksPerXorb: number, chunkBytes: number): Promise<XorbRecord[]> {
  const store = await SqliteMetadataStore.open(dataDir);
  const records: XorbRecord[] = [];
  try {
    for (let x = 0; x < xorbs; x++) {
      const hashes = randomBytes(chunksPerXorb * 32);
      const chunks = Array.from({ length: chunksPerXorb }, (_, c) => ({
        hash: new Uint8Array(hashes.buffer, hashes.byteOffset + c * 32, 32),
        uncompressedLength: chunkBytes,
        serializedEnd: (c + 1) * (chunkBytes + 8),
      }));
      const record: XorbRecord = {
        hash: xorbHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
        serializedLength: chunks.length * (chunkBytes + 8),
        uncompressedLength: chunks.length * chunkBytes,
        chunks,
      };
      await store.putXorb(record);
      records.push(record);
    }
  } finally {
    await store.close();
  }
  return records;
}

/** The xet-core-style upload shard of `files` one-chunk files: file i is the i-th chunk of `xorbs`, in order. */
export function oneChunkFilesShard(xorbs: readonly XorbRecord[], files: number): Uint8Array {
  const shardFiles: ShardFile[] = [];
  for (const xorb of xorbs) {
    for (const [c, chunk] of xorb.chunks.entries()) {
      if (shardFiles.length === files) break;
      shardFiles.push({
        fileHash: fileHash([{ hash: chunk.hash, size: chunk.uncompressedLength }]),
        terms: [{ xorbHash: xorb.hash, chunkStart: c, chunkEnd: c + 1, unpackedBytes: chunk.uncompressedLength }],
        verificationHashes: [verificationHash([chunk.hash])],
        sha256: null,
      });
    }
  }
  if (shardFiles.length < files) throw new RangeError(`${files} one-chunk files need ${files} chunks, the xorbs have ${shardFiles.length}`);
  return serializeUploadShard({ files: shardFiles, xorbs: [] }, { kind: "xet-core" });
}

/**
 * The upload shard of one valid file whose terms name every chunk of the given xorbs, in order
 * (a xorb may be named many times): its file hash computed with the memoizing builder the
 * server uses, which the format tests check against the plain definition.
 */
export function wholeXorbsFileShard(terms: readonly XorbRecord[]): Uint8Array {
  const builder = new FileHashBuilder(new MerkleMemo());
  const sources = new Map<XorbRecord, { source: LeafSource; verification: Uint8Array }>();
  for (const xorb of terms) {
    let known = sources.get(xorb);
    if (known === undefined) {
      const hashes = new Uint8Array(xorb.chunks.length * 32);
      const unpackedOffsets = new Float64Array(xorb.chunks.length + 1);
      xorb.chunks.forEach((chunk, c) => {
        hashes.set(chunk.hash, c * 32);
        unpackedOffsets[c + 1] = unpackedOffsets[c] + chunk.uncompressedLength;
      });
      known = { source: { hashes, unpackedOffsets, memoId: sources.size }, verification: verificationHash(xorb.chunks.map((chunk) => chunk.hash)) };
      sources.set(xorb, known);
    }
    builder.addRange(known.source, 0, xorb.chunks.length);
  }
  const file: ShardFile = {
    fileHash: builder.fileHash(),
    terms: terms.map((xorb) => ({ xorbHash: xorb.hash, chunkStart: 0, chunkEnd: xorb.chunks.length, unpackedBytes: xorb.uncompressedLength })),
    verificationHashes: terms.map((xorb) => sources.get(xorb)!.verification),
    sha256: null,
  };
  return serializeUploadShard({ files: [file], xorbs: [] }, { kind: "xet-core" });
}
