/**
 * Reconstruction throughput: `GET /v2/reconstructions/{file_id}` for a 10 GiB file (160 xorbs ×
 * 1,024 chunks of 64 KiB, one term per xorb), 16 concurrent keep-alive clients, next to the
 * trivial `/healthz` JSON route of the same server in the same run. The ratio
 * reconstruction/healthz is the number that matters (target ≥ 0.3).
 *
 * The server runs in a worker thread (so the load generator does not share its event loop)
 * with the production frame: `createHttpApp`, the CAS auth hook (a real Ed25519 token is
 * verified per request), the health routes, the reconstruction routes over the SQLite metadata
 * store and the real HMAC transfer-URL signer. The main thread records the synthetic metadata
 * directly in the same data dir through its own store connection — no blob bytes are needed,
 * since reconstruction reads none.
 *
 * Requests ask for `bytes=1000-(size-1001)`, so the first and last terms are cut mid-chunk;
 * repeated, they are answered from the reuse window of signed URLs and encoded answers, as
 * many clients downloading one popular file would be. A last row asks for a new range every
 * request, so each answer is planned, rendered and encoded (signed URLs are still reused).
 * Rounds alternate the two routes; each row is the best round, with the median beside. Every
 * request is authenticated (JWT verification is part of the reconstruction cost; /healthz has
 * none), and clients count response bytes without parsing them.
 *
 * This module is also the worker's entry point (bench/run.ts loads every bench/*.ts as a group,
 * so a separate worker file would be mistaken for one).
 */
import { createPublicKey, generateKeyPairSync, randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { CasTokenIssuer, CasTokenVerifier } from "../src/auth/cas-token.js";
import { HmacTransferUrls } from "../src/auth/transfer-url.js";
import { ReconstructionService } from "../src/cas/reconstruction-service.js";
import { hashToHex } from "../src/format/hash.js";
import { createHttpApp } from "../src/http/app.js";
import { casScope } from "../src/http/cas-scope.js";
import { healthRoutes } from "../src/http/health.js";
import { createLogger } from "../src/http/logging.js";
import { reconstructionRoutes } from "../src/http/reconstruction-routes.js";
import type { FileRecord, XorbRecord } from "../src/metadata/cas.js";
import { SqliteMetadataStore } from "../src/metadata/sqlite.js";
import { StorageFullWatch } from "../src/storage/full.js";
import { benchRow, deterministicRandomBytes, median, sized, type BenchRow } from "./lib.js";

const GROUP = "reconstruction";
const XORBS = 160;
const CHUNKS_PER_XORB = 1024;
const CHUNK_BYTES = 64 * 1024;
/** Serialized size of a chunk: its 8-byte header plus a payload a little smaller than the data. */
const SERIALIZED_CHUNK_BYTES = 8 + 60_000;
export const FILE_BYTES = XORBS * CHUNKS_PER_XORB * CHUNK_BYTES;
const CLIENTS = 16;
const ROUNDS = sized(4, 1);
const ROUND_SECONDS = sized(2.5, 0.3);
const WARMUP_SECONDS = sized(1.5, 0.2);
/** Upper bound on requests per round, so a fast machine does not queue unbounded work. */
const MAX_REQUESTS_PER_ROUND = 200_000;
const RATIO_TARGET = 0.3;
const WORKER_ROLE = "castor-reconstruction-bench-server";
export const REPO = { type: "model", id: "bench/ten-gib" } as const;

interface WorkerData {
  role: string;
  dir: string;
  /** SPKI PEM of the token key, so the main thread's tokens verify in the server. */
  publicKeyPem: string;
}

interface LoadResult {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  responseBytes: number;
}

export async function run(): Promise<BenchRow[]> {
  const dir = await mkdtemp(join(tmpdir(), "castor-bench-reconstruction-"));
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const fileHex = await recordTenGibFile(dir);
  const token = (await new CasTokenIssuer(privateKey, 3600).issue({ repo: REPO, rev: "main", scope: "read" })).token;

  const worker = startWorker({ role: WORKER_ROLE, dir, publicKeyPem: publicKey.export({ type: "spki", format: "pem" }).toString() });
  const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
  try {
    const [{ url: base }] = (await once(worker, "message")) as [{ url: string }];
    const reconstruction: RequestSpec = {
      url: `${base}/v2/reconstructions/${fileHex}`,
      headers: { authorization: `Bearer ${token}`, range: `bytes=1000-${FILE_BYTES - 1001}` },
    };
    const gzipped: RequestSpec = { ...reconstruction, headers: { ...reconstruction.headers, "accept-encoding": "gzip" } };
    // A new range every request: no answer is reused, so each one is planned, rendered and encoded.
    const distinct: RequestSpec = { ...reconstruction, vary: (i) => ({ range: `bytes=${1000 + i * 4099}-${FILE_BYTES - 1001 - i}` }) };
    const health: RequestSpec = { url: `${base}/healthz`, headers: {} };

    const first = await requestOnce(agent, reconstruction, true);
    const plan = JSON.parse(first.body!.toString("utf8")) as { terms: unknown[]; xorbs: Record<string, unknown[]> };
    if (plan.terms.length !== XORBS || Object.keys(plan.xorbs).length !== XORBS) {
      throw new Error(`unexpected reconstruction: ${plan.terms.length} terms, ${Object.keys(plan.xorbs).length} xorbs`);
    }

    await load(agent, reconstruction, WARMUP_SECONDS);
    await load(agent, health, WARMUP_SECONDS);
    const healthRounds: LoadResult[] = [];
    const reconstructionRounds: LoadResult[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      healthRounds.push(await load(agent, health, ROUND_SECONDS));
      reconstructionRounds.push(await load(agent, reconstruction, ROUND_SECONDS));
    }
    const gzipRound = await load(agent, gzipped, ROUND_SECONDS);
    const distinctRound = await load(agent, distinct, ROUND_SECONDS);
    const lastHealth = healthRounds[healthRounds.length - 1].requestsPerSecond;

    // Rounds are paired in time, so a change in the machine's load affects both sides of a ratio.
    const ratios = reconstructionRounds.map((r, i) => r.requestsPerSecond / healthRounds[i].requestsPerSecond);
    const bestHealth = best(healthRounds);
    const bestReconstruction = best(reconstructionRounds);
    const shape = `${CLIENTS} clients, keep-alive`;
    return [
      benchRow(GROUP, "GET /healthz", bestHealth.requestsPerSecond, "req/s", {
        median: median(healthRounds.map((r) => r.requestsPerSecond)),
        note: `${shape}; p50 ${bestHealth.p50Ms.toFixed(2)} ms, p99 ${bestHealth.p99Ms.toFixed(2)} ms`,
      }),
      benchRow(GROUP, "GET /v2/reconstructions, 10 GiB file", bestReconstruction.requestsPerSecond, "req/s", {
        median: median(reconstructionRounds.map((r) => r.requestsPerSecond)),
        note: `${shape}; ${XORBS} terms, ${Math.round(bestReconstruction.responseBytes / 1024)} KiB JSON; p50 ${bestReconstruction.p50Ms.toFixed(2)} ms, p99 ${bestReconstruction.p99Ms.toFixed(2)} ms`,
      }),
      benchRow(GROUP, "V2 reconstruction p50 latency", bestReconstruction.p50Ms, "ms", { median: median(reconstructionRounds.map((r) => r.p50Ms)) }),
      benchRow(GROUP, "V2 reconstruction p99 latency", bestReconstruction.p99Ms, "ms", { median: median(reconstructionRounds.map((r) => r.p99Ms)) }),
      benchRow(GROUP, "reconstruction / healthz", Math.max(...ratios), "ratio", {
        median: median(ratios),
        target: { atLeast: RATIO_TARGET },
        note: "per round: each reconstruction round over the healthz round just before it",
      }),
      benchRow(GROUP, "GET /v2/reconstructions, Accept-Encoding: gzip", gzipRound.requestsPerSecond, "req/s", {
        note: `${Math.round(gzipRound.responseBytes / 1024)} KiB gzipped; p50 ${gzipRound.p50Ms.toFixed(2)} ms, p99 ${gzipRound.p99Ms.toFixed(2)} ms`,
      }),
      benchRow(GROUP, "GET /v2/reconstructions, a new range each request", distinctRound.requestsPerSecond, "req/s", {
        note: `no answer reuse (planned, rendered, encoded each time); ${(distinctRound.requestsPerSecond / lastHealth).toFixed(3)} × healthz; p50 ${distinctRound.p50Ms.toFixed(2)} ms, p99 ${distinctRound.p99Ms.toFixed(2)} ms`,
      }),
    ];
  } finally {
    agent.destroy();
    await worker.terminate();
    await rm(dir, { recursive: true, force: true });
  }
}

/** The 10 GiB file's metadata, written through the store like a shard registration would. */
export async function recordTenGibFile(dir: string): Promise<string> {
  const store = await SqliteMetadataStore.open(dir);
  try {
    const repo = await store.createRepo(REPO.type, REPO.id);
    const chunkHashes = deterministicRandomBytes(XORBS * CHUNKS_PER_XORB * 32, 11);
    const xorbs: XorbRecord[] = [];
    for (let x = 0; x < XORBS; x++) {
      const xorb: XorbRecord = {
        hash: randomBytes(32),
        serializedLength: CHUNKS_PER_XORB * SERIALIZED_CHUNK_BYTES,
        uncompressedLength: CHUNKS_PER_XORB * CHUNK_BYTES,
        chunks: Array.from({ length: CHUNKS_PER_XORB }, (_, i) => ({
          hash: chunkHashes.subarray((x * CHUNKS_PER_XORB + i) * 32, (x * CHUNKS_PER_XORB + i + 1) * 32),
          uncompressedLength: CHUNK_BYTES,
          serializedEnd: (i + 1) * SERIALIZED_CHUNK_BYTES,
        })),
      };
      await store.putXorb(xorb);
      xorbs.push(xorb);
    }
    const file: FileRecord = {
      hash: randomBytes(32),
      size: FILE_BYTES,
      terms: xorbs.map((xorb) => ({ xorbHash: xorb.hash, chunkStart: 0, chunkEnd: CHUNKS_PER_XORB, unpackedLength: CHUNKS_PER_XORB * CHUNK_BYTES })),
      sha256: null,
    };
    await store.registerShard({ shardHash: randomBytes(32), repoId: repo.id, files: [file], dedupEntries: [] });
    return hashToHex(file.hash);
  } finally {
    await store.close();
  }
}

interface RequestSpec {
  url: string;
  headers: Record<string, string>;
  /** Per-request headers on top of `headers` (request number → headers). */
  vary?: (request: number) => Record<string, string>;
}

/** CLIENTS lanes, each sending one request after another, for `seconds` (or the request cap). */
async function load(agent: Agent, spec: RequestSpec, seconds: number): Promise<LoadResult> {
  const latencies: number[] = [];
  let responseBytes = 0;
  let sequence = 0;
  const started = performance.now();
  const deadline = started + seconds * 1000;
  const lane = async () => {
    while (performance.now() < deadline && latencies.length < MAX_REQUESTS_PER_ROUND) {
      const sent = performance.now();
      const headers = spec.vary === undefined ? spec.headers : { ...spec.headers, ...spec.vary(sequence++) };
      responseBytes = (await requestOnce(agent, { url: spec.url, headers })).bytes;
      latencies.push(performance.now() - sent);
    }
  };
  await Promise.all(Array.from({ length: CLIENTS }, lane));
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    requestsPerSecond: latencies.length / elapsed,
    p50Ms: latencies[Math.floor(latencies.length * 0.5)],
    p99Ms: latencies[Math.floor(latencies.length * 0.99)],
    responseBytes,
  };
}

/**
 * One GET that must answer 200. The body is kept only when `keepBody` (the first request, to
 * check the answer); under load its bytes are counted and dropped, so the client's own cost
 * stays small next to the server's.
 */
function requestOnce(agent: Agent, spec: RequestSpec, keepBody = false): Promise<{ bytes: number; body: Buffer | null }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(spec.url, { agent, headers: spec.headers }, (response) => {
      const pieces: Buffer[] = [];
      let bytes = 0;
      response.on("data", (piece: Buffer) => {
        bytes += piece.length;
        if (keepBody || response.statusCode !== 200) pieces.push(piece);
      });
      response.once("error", reject);
      response.once("end", () => {
        const body = Buffer.concat(pieces);
        if (response.statusCode !== 200) reject(new Error(`${new URL(spec.url).pathname} answered ${response.statusCode}: ${body.toString("utf8", 0, 300)}`));
        else resolve({ bytes, body: keepBody ? body : null });
      });
    });
    request.once("error", reject);
    request.end();
  });
}

function best(rounds: readonly LoadResult[]): LoadResult {
  return rounds.reduce((a, b) => (b.requestsPerSecond > a.requestsPerSecond ? b : a));
}

/**
 * Runs this module in a worker. Workers do not inherit the TypeScript loader that
 * `node --import tsx` installed on the main thread, so the worker installs it first.
 */
function startWorker(data: WorkerData): Worker {
  const tsxApi = import.meta.resolve("tsx/esm/api");
  const source = `import(${JSON.stringify(tsxApi)}).then(({ register }) => { register(); return import(${JSON.stringify(import.meta.url)}); })`;
  const worker = new Worker(source, { eval: true, workerData: data });
  worker.once("error", (error) => console.error(`bench reconstruction: server worker failed: ${error.stack ?? error.message}`));
  return worker;
}

// ——— worker side: the server ———

async function startServer(data: WorkerData): Promise<void> {
  const store = await SqliteMetadataStore.open(data.dir);
  let baseUrl = "";
  const app = createHttpApp({ logger: createLogger("silent") });
  await app.register(healthRoutes, { store, dataDir: data.dir, minFreeBytes: 0, storageFull: new StorageFullWatch() });
  const reconstructions = new ReconstructionService({
    store,
    signer: new HmacTransferUrls({ key: randomBytes(32), publicUrl: () => baseUrl, ttlSeconds: 3600 }),
    transferUrlTtlSeconds: 3600,
  });
  await app.register(casScope, {
    verifier: new CasTokenVerifier(createPublicKey(data.publicKeyPem)),
    routes: (cas) => cas.register(reconstructionRoutes, { reconstructions, v2Reconstruction: "on" }),
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  baseUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  parentPort!.postMessage({ url: baseUrl });
}

if (!isMainThread && (workerData as WorkerData | undefined)?.role === WORKER_ROLE) {
  await startServer(workerData as WorkerData);
}
