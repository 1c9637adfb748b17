/**
 * A reference client for reconstruction answers, shared by the end-to-end suites (embedded and
 * scale-out): fetch each listed byte range from its URL with no Authorization, unpack the
 * chunks, concatenate the terms, skip the offset — checking the answer's shape on the way (with
 * the wire parser of src/format, which castor's client uses too).
 * Also the reconstruction.json vector's file contents and the URL-free form its expectations
 * are written in.
 */
import assert from "node:assert/strict";
import { decompressChunk } from "../../src/format/compression.js";
import { fileHash, verificationHash } from "../../src/format/hash.js";
import {
  coversTerm,
  fetchSourcesOf,
  parseReconstructionV1,
  parseReconstructionV2,
  type FetchSource,
  type QueryReconstructionResponse,
  type QueryReconstructionResponseV2,
} from "../../src/format/reconstruction.js";
import type { ShardFile } from "../../src/format/shard.js";
import { validateXorb, XORB_CHUNK_HEADER_BYTES, type SerializedXorb } from "../../src/format/xorb.js";
import type { XorbRecord } from "../../src/metadata/cas.js";
import { loadVector } from "./vectors.js";

/** A V2 answer (`xorbs`) or a V1 answer (`fetch_info`), as its JSON arrives. */
export type Answer = Omit<QueryReconstructionResponseV2, "xorbs"> &
  Partial<Pick<QueryReconstructionResponseV2, "xorbs">> &
  Partial<Pick<QueryReconstructionResponse, "fetch_info">>;

/** The contents of the files of shard-upload-small.json (its `files_content`), by name. */
export function vectorFileContents(): Record<string, Buffer> {
  const xorbVector = loadVector("xorb-small.json");
  const chunks: Buffer[] = xorbVector.chunk_data_hex.map((hex: string) => Buffer.from(hex, "hex"));
  return {
    A: Buffer.concat([chunks[0], chunks[1], chunks[2]]),
    B: Buffer.concat([chunks[2], chunks[0], chunks[1]]),
  };
}

/** One case of reconstruction.json, as the suites that serve it over HTTP ask it. */
export interface ReconstructionVectorCase {
  /** The test's title: file, Range and the status the answer must have. */
  title: string;
  file: "A" | "B";
  /** The Range header to send, if any. */
  range: string | undefined;
  status: number;
  /** The case at each route that must answer it (/v2, /v1, unversioned), with its expected answer in URL-free form. */
  requests: (readonly [path: string, expected: Answer])[];
}

export function reconstructionVectorCases(): ReconstructionVectorCase[] {
  const vector = loadVector("reconstruction.json");
  return vector.cases.map((vectorCase: { file: "A" | "B"; range_header: string | null; status: number; v1: Answer; v2: Answer }) => {
    const file: string = vector.file_hashes[vectorCase.file];
    const range = vectorCase.range_header ?? undefined;
    return {
      title: `file ${vectorCase.file}, Range ${range ?? "(none)"} → ${vectorCase.status}`,
      file: vectorCase.file,
      range,
      status: vectorCase.status,
      requests: [
        [`/v2/reconstructions/${file}`, vectorCase.v2],
        [`/v1/reconstructions/${file}`, vectorCase.v1],
        [`/reconstructions/${file}`, vectorCase.v1],
      ],
    };
  });
}

/** Every term of a file over single chunks `indices` of `xorb`, with correct hashes. */
export function fileOfChunks(xorb: SerializedXorb["info"], indices: number[]): ShardFile {
  const chunks = indices.map((i) => xorb.chunks[i]);
  return {
    fileHash: fileHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
    terms: indices.map((i) => ({ xorbHash: xorb.hash, chunkStart: i, chunkEnd: i + 1, unpackedBytes: xorb.chunks[i].uncompressedLength })),
    verificationHashes: chunks.map((c) => verificationHash([c.hash])),
    sha256: null,
  };
}

/** The metadata record of a serialized xorb, as registration stores it. */
export function xorbRecordOf(body: Uint8Array): XorbRecord {
  const info = validateXorb(body);
  return {
    hash: info.hash,
    serializedLength: info.serializedLength,
    uncompressedLength: info.uncompressedLength,
    chunks: info.chunks.map((c) => ({ hash: c.hash, uncompressedLength: c.uncompressedLength, serializedEnd: c.serializedEnd })),
  };
}

/** The answer with its signed URLs replaced by the placeholders reconstruction.json uses. */
export function withPlaceholderUrls(body: Answer): Answer {
  const copy = structuredClone(body);
  for (const entries of Object.values(copy.xorbs ?? {})) for (const entry of entries) (entry as { url: string }).url = "<signed url covering all ranges below>";
  for (const entries of Object.values(copy.fetch_info ?? {})) for (const entry of entries) (entry as { url: string }).url = "<url>";
  return copy;
}

/** What a client does with an answer: the `length` bytes of the file it describes. */
export async function downloadAnswer(body: Answer, length: number): Promise<Buffer> {
  const sources = fetchSourcesOf(body.xorbs !== undefined ? parseReconstructionV2(body) : parseReconstructionV1(body));
  assert.deepEqual(new Set(sources.keys()), new Set(body.terms.map((t) => t.hash)), "the map holds exactly the terms' xorbs");
  const covering = body.terms.map((term) => {
    const found = (sources.get(term.hash) ?? []).filter((source) => coversTerm(source, term));
    assert.equal(found.length, 1, "every term is covered by exactly one range");
    return found[0];
  });
  // Each listed range once, all at once, as clients fetch them.
  const fetched = new Map<FetchSource, Promise<Buffer[]>>();
  for (const source of covering) {
    if (fetched.has(source)) continue;
    fetched.set(
      source,
      (async () => {
        const response = await fetch(source.url, { headers: { range: `bytes=${source.bytes.start}-${source.bytes.end}` } });
        assert.equal(response.status, 206, await response.clone().text());
        const chunks = unpackChunks(Buffer.from(await response.arrayBuffer()));
        assert.equal(chunks.length, source.chunks.end - source.chunks.start);
        return chunks;
      })(),
    );
  }
  const pieces = await Promise.all(
    body.terms.map(async (term, i) => {
      const source = covering[i];
      const data = Buffer.concat((await fetched.get(source)!).slice(term.range.start - source.chunks.start, term.range.end - source.chunks.start));
      assert.equal(data.length, term.unpacked_length);
      return data;
    }),
  );
  return Buffer.concat(pieces).subarray(body.offset_into_first_range, body.offset_into_first_range + length);
}

/** Splits a byte range of a xorb into its chunks' data (8-byte header, then the payload). */
function unpackChunks(bytes: Buffer): Buffer[] {
  const chunks: Buffer[] = [];
  for (let at = 0; at < bytes.length; ) {
    const compressed = bytes.readUIntLE(at + 1, 3);
    const scheme = bytes[at + 4];
    const uncompressed = bytes.readUIntLE(at + 5, 3);
    const payload = bytes.subarray(at + XORB_CHUNK_HEADER_BYTES, at + XORB_CHUNK_HEADER_BYTES + compressed);
    chunks.push(Buffer.from(decompressChunk(scheme, payload, uncompressed)));
    at += XORB_CHUNK_HEADER_BYTES + compressed;
  }
  return chunks;
}
