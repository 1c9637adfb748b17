/**
 * A valid shard of many one-chunk files, and the xorb records it needs written straight into a
 * data dir's SQLite before a server starts on it: registration reads chunk tables, never xorb
 * bytes, so a shard of hundreds of thousands of files costs seconds to prepare, not an upload
 * of its data. Used by the shard-budget test and the `shard-limits` bench group.
 */
import { randomBytes } from "node:crypto";
import { fileHash, verificationHash, xorbHash } from "../../src/format/hash.js";
import type { ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import type { XorbRecord } from "../../src/metadata/cas.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";

/** Bytes each synthetic chunk claims to hold. */
const CHUNK_BYTES = 65_536;

/**
 * Records xorbs of `chunksPerXorb` random chunks in the SQLite store of `dataDir` and returns
 * the xet-core-style upload shard of `files` files, file i being chunk i of those xorbs, in order.
 */
export async function storeXorbsForOneChunkFiles(dataDir: string, files: number, chunksPerXorb = 1000): Promise<Uint8Array> {
  const store = await SqliteMetadataStore.open(dataDir);
  const shardFiles: ShardFile[] = [];
  try {
    while (shardFiles.length < files) {
      const chunks = Array.from({ length: chunksPerXorb }, (_, c) => ({
        hash: new Uint8Array(randomBytes(32)),
        uncompressedLength: CHUNK_BYTES,
        serializedEnd: (c + 1) * (CHUNK_BYTES + 8),
      }));
      const record: XorbRecord = {
        hash: xorbHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
        serializedLength: chunks.length * (CHUNK_BYTES + 8),
        uncompressedLength: chunks.length * CHUNK_BYTES,
        chunks,
      };
      await store.putXorb(record);
      for (let c = 0; c < chunks.length && shardFiles.length < files; c++) {
        shardFiles.push({
          fileHash: fileHash([{ hash: chunks[c].hash, size: CHUNK_BYTES }]),
          terms: [{ xorbHash: record.hash, chunkStart: c, chunkEnd: c + 1, unpackedBytes: CHUNK_BYTES }],
          verificationHashes: [verificationHash([chunks[c].hash])],
          sha256: null,
        });
      }
    }
  } finally {
    await store.close();
  }
  return serializeUploadShard({ files: shardFiles, xorbs: [] }, { kind: "xet-core" });
}
