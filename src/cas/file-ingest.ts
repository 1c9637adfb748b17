/**
 * A whole file taken into the CAS by the server itself, for clients that send plain bytes (a
 * Git LFS basic upload): chunked with the content-defined chunker as Xet clients chunk, each
 * run of chunks the CAS already has referenced where it lies (global deduplication, as a Xet
 * client would find it), the new chunks packed into xorbs, and the file registered with a shard
 * through the same services as a client's uploads — so the result is a Xet file like any other,
 * which hf_xet downloads and later uploads deduplicate against.
 *
 * Memory holds the xorb being filled (XORB_TARGET_BYTES) and one entry per chunk of the file.
 * The SHA-256 and size the client announced are checked before anything is registered; a
 * mismatch registers nothing (xorbs already stored stay unreferenced, for gc).
 */
import { createHash } from "node:crypto";
import { Chunker } from "../format/chunker.js";
import { chunkHash, fileHash, hashEquals, isGlobalDedupEligible, verificationHash, type Hash } from "../format/hash.js";
import { CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE, shardSha256FromDigest, type ShardTerm, type ShardXorb } from "../format/shard.js";
import { serializeUploadShard } from "../format/shard-writer.js";
import { MAX_XORB_CHUNKS, serializeXorb } from "../format/xorb.js";
import type { CasMetadataStore, XorbRecord } from "../metadata/cas.js";
import type { RegisterShardOptions, ShardRegistrationResult } from "./shard-registration.js";
import type { XorbIngestResult } from "./xorb-ingest.js";

/** New chunks per xorb: smaller than a client's 64 MiB, since the server fills many at once. */
const XORB_TARGET_BYTES = 16 * 1024 * 1024;

export interface FileIngestDeps {
  xorbs: { ingest(hash: Hash, body: AsyncIterable<Uint8Array>): Promise<XorbIngestResult> };
  shards: { register(body: Uint8Array, options: RegisterShardOptions): Promise<ShardRegistrationResult> };
  metadata: Pick<CasMetadataStore, "findDedupXorbs" | "getXorbs">;
}

/** What the client announced: the file must have this SHA-256 and size. */
export interface ExpectedFile {
  sha256: string;
  size: number;
  /** The repository the file is registered in (its SHA-256 index). */
  repoId: number;
}

export interface IngestedFile {
  fileHash: Hash;
  /** Bytes found already in the CAS and referenced, not stored again. */
  dedupedBytes: number;
  /** New xorbs stored for the rest. */
  xorbs: number;
}

/** The bytes are not the file announced; nothing was registered. */
export class FileMismatchError extends Error {
  override readonly name = "FileMismatchError";
}

interface ChunkRef {
  hash: Hash;
  size: number;
}

/** A run of chunks of one xorb: an existing one (`xorb` set) or the n-th new one. */
interface Term {
  xorb: Hash | number;
  start: number;
  end: number;
  bytes: number;
  hashes: Hash[];
}

export class FileIngest {
  constructor(private readonly deps: FileIngestDeps) {}

  async ingest(body: AsyncIterable<Uint8Array>, expected: ExpectedFile): Promise<IngestedFile> {
    const sha256 = createHash("sha256");
    const chunker = new Chunker();
    const chunks: ChunkRef[] = [];
    const terms: Term[] = [];
    const newXorbs: { hash: Hash; block: ShardXorb }[] = [];
    let pending: Uint8Array[] = [];
    let pendingBytes = 0;
    let match: { xorb: XorbRecord; next: number } | null = null;
    let size = 0;
    let dedupedBytes = 0;

    const addToTerm = (xorb: Hash | number, index: number, chunk: ChunkRef) => {
      const last = terms[terms.length - 1];
      const sameXorb = last !== undefined && (typeof xorb === "number" ? last.xorb === xorb : typeof last.xorb !== "number" && hashEquals(last.xorb, xorb));
      if (sameXorb && last.end === index) {
        last.end++;
        last.bytes += chunk.size;
        last.hashes.push(chunk.hash);
      } else {
        terms.push({ xorb, start: index, end: index + 1, bytes: chunk.size, hashes: [chunk.hash] });
      }
    };

    const sealPending = async () => {
      if (pending.length === 0) return;
      const { bytes, info } = serializeXorb(pending.map((data) => ({ data })));
      await this.deps.xorbs.ingest(
        info.hash,
        (async function* () {
          yield bytes;
        })(),
      );
      let start = 0;
      newXorbs.push({
        hash: info.hash,
        block: {
          xorbHash: info.hash,
          flags: 0,
          numBytesInXorb: info.uncompressedLength,
          numBytesOnDisk: info.serializedLength,
          chunks: info.chunks.map((chunk) => {
            const entry = {
              hash: chunk.hash,
              byteRangeStart: start,
              unpackedBytes: chunk.uncompressedLength,
              flags: isGlobalDedupEligible(chunk.hash) ? CHUNK_FLAG_GLOBAL_DEDUP_ELIGIBLE : 0,
            };
            start += chunk.uncompressedLength;
            return entry;
          }),
        },
      });
      pending = [];
      pendingBytes = 0;
    };

    const take = async (data: Uint8Array) => {
      const chunk = { hash: chunkHash(data), size: data.length };
      const first = chunks.length === 0;
      chunks.push(chunk);
      size += data.length;
      sha256.update(data);
      // The next chunk of the xorb the previous one was found in?
      if (match !== null && match.next < match.xorb.chunks.length) {
        const stored = match.xorb.chunks[match.next];
        if (hashEquals(stored.hash, chunk.hash) && stored.uncompressedLength === chunk.size) {
          addToTerm(match.xorb.hash, match.next++, chunk);
          dedupedBytes += chunk.size;
          return;
        }
      }
      match = null;
      if (first || isGlobalDedupEligible(chunk.hash)) {
        const found = await this.findStored(chunk);
        if (found !== null) {
          match = { xorb: found.xorb, next: found.index + 1 };
          addToTerm(found.xorb.hash, found.index, chunk);
          dedupedBytes += chunk.size;
          return;
        }
      }
      if (pending.length >= MAX_XORB_CHUNKS || pendingBytes + data.length > XORB_TARGET_BYTES) await sealPending();
      addToTerm(newXorbs.length, pending.length, chunk);
      // A chunk may be a view of the piece it came in; the xorb keeps a copy.
      pending.push(Uint8Array.from(data));
      pendingBytes += data.length;
    };

    for await (const piece of body) for (const data of chunker.update(piece)) await take(data);
    for (const data of chunker.finish()) await take(data);

    const digest = sha256.digest();
    if (size !== expected.size) throw new FileMismatchError(`the upload has ${size} bytes, not the ${expected.size} announced`);
    if (digest.toString("hex") !== expected.sha256) {
      throw new FileMismatchError(`the upload's SHA-256 is ${digest.toString("hex")}, not ${expected.sha256} (its Git LFS object id)`);
    }
    await sealPending();

    const hash = fileHash(chunks);
    const shardTerms: ShardTerm[] = terms.map((term) => ({
      xorbHash: typeof term.xorb === "number" ? newXorbs[term.xorb].hash : term.xorb,
      unpackedBytes: term.bytes,
      chunkStart: term.start,
      chunkEnd: term.end,
    }));
    const shard = serializeUploadShard(
      {
        files: [
          {
            fileHash: hash,
            terms: shardTerms,
            verificationHashes: terms.map((term) => verificationHash(term.hashes)),
            sha256: shardSha256FromDigest(digest),
          },
        ],
        xorbs: newXorbs.map((xorb) => xorb.block),
      },
      { kind: "xet-core" },
    );
    await this.deps.shards.register(shard, { repoId: expected.repoId });
    return { fileHash: hash, dedupedBytes, xorbs: newXorbs.length };
  }

  /** A stored xorb holding `chunk` (found through the global-dedup index), and the chunk's place in it. */
  private async findStored(chunk: ChunkRef): Promise<{ xorb: XorbRecord; index: number } | null> {
    const [xorbHash] = await this.deps.metadata.findDedupXorbs(chunk.hash, 1);
    if (xorbHash === undefined) return null;
    const xorb = (await this.deps.metadata.getXorbs([xorbHash])).values().next().value;
    if (xorb === undefined) return null;
    const index = xorb.chunks.findIndex((stored) => hashEquals(stored.hash, chunk.hash) && stored.uncompressedLength === chunk.size);
    return index < 0 ? null : { xorb, index };
  }
}
