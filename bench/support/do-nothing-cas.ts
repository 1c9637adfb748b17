/**
 * A do-nothing CAS: the measurement ceiling of the `clients` benchmark, NOT a server.
 *
 * It speaks just enough of the protocol for hf_xet to upload a file and download it again, and
 * does as little work as that allows, so a client's throughput against it is what the client
 * itself can reach on this machine. castor's throughput with the same client, divided by this,
 * is what castor's server costs.
 *
 *     GET  /api/{type}s/{ns}/{name}/{xet|cas}-{read|write}-token/{rev}   any hub token → a token
 *     GET  /v1/chunks/…                       404: nothing is known to global dedup
 *     POST /v1/xorbs/{prefix}/{hash}          body kept in memory → {"was_inserted":true}
 *     POST /v1/shards, /v2/shards             files remembered → {"result":1} / NDJSON result
 *     GET  /v2/reconstructions/{file}         V2 answer whose URLs point at /bytes/{xorb}
 *     GET  /bytes/{xorb}                      one `Range: bytes=s-e` of a kept xorb, 206
 *
 * "Validates nothing": no token is checked, no hash computed, nothing decompressed or
 * persisted. Two pieces of parsing are unavoidable, and both are cheap: a xorb's 8-byte chunk
 * headers are walked once on upload (the byte offsets a reconstruction hands out), and a shard
 * is read with `parseUploadShard` (the files and their terms). Reconstructions are planned and
 * rendered by castor's own pure planner (src/cas/reconstruction.ts), so both servers answer
 * with the same JSON and differ only in the work around it.
 *
 * Runs in the calling process: the benchmark's own event loop is idle while a client (a child
 * process) talks to it.
 *
 * `keepXorbsIn: "files"` writes each xorb to a file instead and serves a range by reading it
 * back (one open per request, positional reads into reused 1 MiB buffers, each given back once
 * the socket has it). That is the least any server that keeps its bytes in files does: the
 * kernel copies them out of the page cache into user memory before they are sent. castor's own
 * overhead is what it costs above this variant; this variant above the in-memory one is the
 * price of keeping the bytes in files (docs/design.md §8.12).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { mkdtemp, open, rm, writeFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  parseRangeHeader,
  planReconstruction,
  prepareFile,
  prepareXorb,
  ReconstructionError,
  resolveFileRange,
  type PreparedXorb,
} from "../../src/cas/reconstruction.js";
import { renderV2, type RangeUrlSigner } from "../../src/cas/reconstruction-render.js";
import { isFormatError } from "../../src/format/errors.js";
import { drainedOrClosed } from "../../src/writable-drain.js";
import { hashFromHex, hashToHex, ZERO_HASH } from "../../src/format/hash.js";
import { parseUploadShard } from "../../src/format/shard.js";
import { XORB_CHUNK_HEADER_BYTES } from "../../src/format/xorb.js";
import { BufferPool } from "../../src/http/buffer-pool.js";
import type { FileRecord, StoredChunk } from "../../src/metadata/cas.js";

/** Bodies beyond this are refused before they are read: a xorb is ≤ 64 MiB plus headers. */
const MAX_BODY_BYTES = 128 * 1024 * 1024;
/** Lifetime declared for the tokens it hands out; long enough that no client refreshes. */
const TOKEN_SECONDS = 3600;

const TOKEN_PATH = /^\/api\/(?:model|dataset|space)s\/[^/]+\/[^/]+\/(?:xet|cas)-(?:read|write)-token\/[^/]+$/;
const XORB_PATH = /^\/v1\/xorbs\/[^/]+\/([0-9a-f]{64})$/;
const RECONSTRUCTION_PATH = /^\/v2\/reconstructions\/([0-9a-f]{64})$/;
const BYTES_PATH = /^\/bytes\/([0-9a-f]{64})$/;
const SINGLE_RANGE = /^bytes=(\d+)-(\d+)$/;
/** "XETBLOB": a xorb footer (sent by clients older than mid-2025) starts here, not a chunk. */
const FOOTER_IDENT = Buffer.from("XETBLOB", "latin1");

interface KeptXorb {
  /** The xorb in memory, or null when it was written to `xorbFiles`. */
  bytes: Buffer | null;
  size: number;
  prepared: PreparedXorb;
}

export interface DoNothingOptions {
  /** Where uploaded xorbs are kept and served from (default "memory"). */
  keepXorbsIn?: "memory" | "files";
}

/** Read buffers of the "files" variant, shared by its responses. */
const fileReadBuffers = new BufferPool(1024 * 1024, 16);

export interface DoNothingCas {
  /** e.g. http://127.0.0.1:41234 — the hub base URL and the casUrl at once. */
  readonly url: string;
  /** The token operation URL a client is given as its refresher route. */
  tokenUrl(access: "read" | "write"): string;
  /** Any non-empty string works as a hub token here. */
  readonly hubToken: string;
  close(): Promise<void>;
}

/** Starts the do-nothing CAS on 127.0.0.1 (a port the OS picks). */
export async function startDoNothingCas(options: DoNothingOptions = {}): Promise<DoNothingCas> {
  const xorbFiles = options.keepXorbsIn === "files" ? await mkdtemp(join(tmpdir(), "castor-do-nothing-")) : null;
  const xorbs = new Map<string, KeptXorb>();
  const files = new Map<string, FileRecord>();
  let baseUrl = "";
  const signer: RangeUrlSigner = { sign: (xorbHash) => `${baseUrl}/bytes/${hashToHex(xorbHash)}` };

  const server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      const message = error instanceof Error ? error.message : String(error);
      if (!response.headersSent) sendJson(response, error instanceof HttpFailure ? error.status : 500, { error: message });
      else response.destroy();
    });
  });

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const path = (request.url ?? "/").split("?", 1)[0];
    const method = request.method ?? "GET";
    let match: RegExpExecArray | null;

    if (method === "GET" && TOKEN_PATH.test(path)) {
      const exp = Math.floor(Date.now() / 1000) + TOKEN_SECONDS;
      const token = { accessToken: "do-nothing", exp, casUrl: baseUrl };
      response.setHeader("x-xet-cas-url", baseUrl);
      response.setHeader("x-xet-access-token", token.accessToken);
      response.setHeader("x-xet-token-expiration", String(exp));
      return sendJson(response, 200, token);
    }
    if (method === "GET" && path.startsWith("/v1/chunks/")) {
      return sendJson(response, 404, { error: "the do-nothing CAS has no global dedup index" });
    }
    if (method === "POST" && (match = XORB_PATH.exec(path)) !== null) {
      const hex = match[1];
      const bytes = await readBody(request);
      const chunks = walkChunkHeaders(bytes, hex);
      // Only the chunk table matters to the planner; the record's totals are never read.
      const prepared = prepareXorb({ hash: hashFromHex(hex), serializedLength: bytes.length, uncompressedLength: 0, chunks });
      if (xorbFiles === null) {
        xorbs.set(hex, { bytes, size: bytes.length, prepared });
      } else {
        await writeFile(join(xorbFiles, hex), bytes);
        xorbs.set(hex, { bytes: null, size: bytes.length, prepared });
      }
      return sendJson(response, 200, { was_inserted: true });
    }
    if (method === "POST" && (path === "/v1/shards" || path === "/v2/shards")) {
      rememberFiles(await readBody(request));
      if (path === "/v1/shards") return sendJson(response, 200, { result: 1 });
      response.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-cache" });
      response.end('{"type":"result","result":1}\n');
      return;
    }
    if (method === "GET" && (match = RECONSTRUCTION_PATH.exec(path)) !== null) {
      const file = files.get(match[1]);
      if (file === undefined) return sendJson(response, 404, { error: `file ${match[1]} was not uploaded to this do-nothing CAS` });
      return sendReconstruction(response, file, request.headers.range);
    }
    if (method === "GET" && (match = BYTES_PATH.exec(path)) !== null) {
      return sendRange(response, match[1], request.headers.range);
    }
    // Everything else (V1 reconstruction, telemetry, …) is outside what the benchmark needs.
    request.resume();
    return sendJson(response, 404, { error: `the do-nothing CAS does not serve ${method} ${path}` });
  }

  function rememberFiles(shard: Buffer): void {
    let parsed;
    try {
      parsed = parseUploadShard(shard);
    } catch (error) {
      if (isFormatError(error)) throw new HttpFailure(400, `unreadable shard: ${error.message}`);
      throw error;
    }
    for (const file of parsed.files) {
      let size = 0;
      const terms = file.terms.map((term) => {
        size += term.unpackedBytes;
        return { xorbHash: term.xorbHash, chunkStart: term.chunkStart, chunkEnd: term.chunkEnd, unpackedLength: term.unpackedBytes };
      });
      files.set(hashToHex(file.fileHash), { hash: file.fileHash, size, terms, sha256: null });
    }
  }

  function sendReconstruction(response: ServerResponse, file: FileRecord, rangeHeader: string | undefined): void {
    const preparedXorbs = new Map<string, PreparedXorb>();
    for (const term of file.terms) {
      const hex = hashToHex(term.xorbHash);
      const kept = xorbs.get(hex);
      if (kept === undefined) throw new HttpFailure(500, `file ${hashToHex(file.hash)} uses xorb ${hex}, which was never uploaded here`);
      preparedXorbs.set(hex, kept.prepared);
    }
    try {
      const prepared = prepareFile(file, preparedXorbs);
      const plan = planReconstruction(prepared, resolveFileRange(parseRangeHeader(rangeHeader), prepared.size));
      const body = renderV2(plan, signer);
      response.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body, "latin1") });
      response.end(body, "latin1");
    } catch (error) {
      if (!(error instanceof ReconstructionError)) throw error;
      // 416 past the end of the file is how xet-core learns that its download loop is done.
      throw new HttpFailure(error.code === "unsatisfiable_range" ? 416 : error.code === "malformed_range" ? 400 : 500, error.message);
    }
  }

  async function sendRange(response: ServerResponse, hex: string, rangeHeader: string | undefined): Promise<void> {
    const kept = xorbs.get(hex);
    if (kept === undefined) throw new HttpFailure(404, `xorb ${hex} was never uploaded here`);
    const match = SINGLE_RANGE.exec(rangeHeader ?? "");
    if (match === null) {
      // hf_xet sends one range per request unless HF_XET_CLIENT_ENABLE_MULTIRANGE_FETCHING is on.
      throw new HttpFailure(
        416,
        `send exactly one Range: bytes=START-END (got ${JSON.stringify(rangeHeader ?? null)}); the do-nothing CAS serves nothing else`,
      );
    }
    const start = Number(match[1]);
    const end = Number(match[2]);
    if (!(start <= end && end < kept.size)) {
      throw new HttpFailure(416, `range ${start}-${end} is not within xorb ${hex} (${kept.size} bytes)`);
    }
    response.writeHead(206, {
      "content-type": "application/octet-stream",
      "content-range": `bytes ${start}-${end}/${kept.size}`,
      "content-length": end - start + 1,
    });
    if (kept.bytes !== null) {
      response.end(kept.bytes.subarray(start, end + 1));
      return;
    }
    const file = await open(join(xorbFiles!, hex), "r");
    try {
      for (let at = start; at <= end && !response.destroyed; ) {
        const buffer = fileReadBuffers.take();
        const { bytesRead } = await file.read(buffer, 0, Math.min(buffer.length, end + 1 - at), at);
        if (bytesRead === 0) throw new Error(`xorb ${hex} ended at byte ${at}`);
        at += bytesRead;
        const flowing = response.write(buffer.subarray(0, bytesRead), () => fileReadBuffers.give(buffer));
        if (!flowing && at <= end) await drainedOrClosed(response);
      }
      response.end();
    } finally {
      await file.close();
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const hubToken = "hf_do_nothing";
  return {
    url: baseUrl,
    hubToken,
    tokenUrl: (access) => `${baseUrl}/api/models/bench/clients/xet-${access}-token/main`,
    close: () =>
      closeServer(server, () => {
        xorbs.clear();
        files.clear();
      }).finally(() => (xorbFiles === null ? undefined : rm(xorbFiles, { recursive: true, force: true }))),
  };
}

class HttpFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  response.end(text);
}

/** The whole body in one buffer (one copy of each piece), refused early when too large. */
async function readBody(request: IncomingMessage): Promise<Buffer> {
  const declared = Number(request.headers["content-length"] ?? NaN);
  if (declared > MAX_BODY_BYTES) {
    request.resume();
    throw new HttpFailure(413, `bodies over ${MAX_BODY_BYTES} bytes are refused (Content-Length ${declared})`);
  }
  const pieces: Buffer[] = [];
  let total = 0;
  for await (const piece of request as AsyncIterable<Buffer>) {
    total += piece.length;
    if (total > MAX_BODY_BYTES) throw new HttpFailure(413, `bodies over ${MAX_BODY_BYTES} bytes are refused`);
    pieces.push(piece);
  }
  return Buffer.concat(pieces, total);
}

/**
 * The chunk table the planner needs (serialized end offset and uncompressed length of each
 * chunk), read from the 8-byte chunk headers alone; payloads are skipped, not decoded. Chunk
 * hashes are not known without hashing, and the planner never reads them: they stay zero.
 * Each step advances at least one header, so the walk is bounded by the body length.
 */
function walkChunkHeaders(bytes: Buffer, hex: string): StoredChunk[] {
  const chunks: StoredChunk[] = [];
  let at = 0;
  while (at + XORB_CHUNK_HEADER_BYTES <= bytes.length && !bytes.subarray(at, at + FOOTER_IDENT.length).equals(FOOTER_IDENT)) {
    const compressed = bytes[at + 1] | (bytes[at + 2] << 8) | (bytes[at + 3] << 16);
    const uncompressed = bytes[at + 5] | (bytes[at + 6] << 8) | (bytes[at + 7] << 16);
    const end = at + XORB_CHUNK_HEADER_BYTES + compressed;
    if (end > bytes.length) throw new HttpFailure(400, `xorb ${hex}: chunk ${chunks.length} runs past the end of the body`);
    chunks.push({ hash: ZERO_HASH, uncompressedLength: uncompressed, serializedEnd: end });
    at = end;
  }
  if (chunks.length === 0) throw new HttpFailure(400, `xorb ${hex} holds no chunk`);
  return chunks;
}

function closeServer(server: Server, release: () => void): Promise<void> {
  return new Promise((resolve, reject) => {
    server.close((error) => {
      release();
      if (error) reject(error);
      else resolve();
    });
    server.closeAllConnections();
  });
}
