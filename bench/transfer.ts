/**
 * Transfer route throughput: what a downloading client gets from `GET /v1/transfer/{xorb}`.
 *
 * One 64 MiB xorb blob in a filesystem BlobStore. Requests of 8 ranges × 1 MiB (an 8 MiB
 * multipart/byteranges response, as hf.js asks) and of one 1 MiB range (xet-core's default
 * split requests), 4 in flight over keep-alive connections, against castor's transfer route and
 * against a bare `node:http` range server over the same file in the same run. The servers run in
 * a worker thread so the client's parsing does not share their event loop; castor/bare is the
 * number that matters (target ≥ 0.7). Also: µs per `sign` (called ~160 times per reconstruction
 * response) and per `verify` + Range check (once per transfer request).
 *
 * This module is also the worker's entry point (bench/run.ts loads every bench/*.ts as a group,
 * so a separate worker file would be mistaken for one).
 */
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { createReadStream } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { Agent, createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { HmacTransferUrls, selectRequestedRanges } from "../src/auth/transfer-url.js";
import { byteRange, type ByteRange } from "../src/format/ranges.js";
import { hashFromHex } from "../src/format/hash.js";
import { createHttpApp } from "../src/http/app.js";
import { createLogger } from "../src/http/logging.js";
import { transferRoutes } from "../src/http/transfer-routes.js";
import { blobKey } from "../src/storage/blob-store.js";
import { FsBlobStore } from "../src/storage/fs.js";
import { benchRow, deterministicRandomBytes, megabytesPerSecond, sized, timeRepeated, type BenchRow } from "./lib.js";
import { fetchCountedBytes } from "./support/fetch-bytes.js";

const GROUP = "transfer";
const MiB = 1024 * 1024;
export const XORB_BYTES = 64 * MiB;
export const XORB = hashFromHex("5a".repeat(32));
const KEY_BYTES = 32;
const REQUESTS_PER_RUN = sized(32, 4);
const IN_FLIGHT = 4;
const REPETITIONS = sized(4, 1);
const RATIO_TARGET = 0.7;
const WORKER_ROLE = "castor-transfer-bench-servers";

/** 8 ranges × 1 MiB spread over the xorb, with gaps (a file's chunks inside a shared xorb). */
function multiRanges(request: number): ByteRange[] {
  const stride = 7 * MiB + 300_000;
  const offset = (request * 1_234_567) % MiB;
  return Array.from({ length: 8 }, (_, i) => byteRange(offset + i * stride, offset + i * stride + MiB - 1));
}

export function singleRange(request: number): ByteRange[] {
  const start = ((request * 5 + 3) * MiB + 12_345) % (XORB_BYTES - MiB);
  return [byteRange(start, start + MiB - 1)];
}

function rangeHeader(ranges: readonly ByteRange[]): string {
  return `bytes=${ranges.map((r) => `${r.start}-${r.end}`).join(",")}`;
}

interface ServerAddresses {
  castor: string;
  bare: string;
  /** The URL key, so the client signs URLs the castor server accepts. */
  key: Uint8Array;
}

export async function run(): Promise<BenchRow[]> {
  const rows = benchSigning();
  const dir = await mkdtemp(join(tmpdir(), "castor-bench-transfer-"));
  const worker = startWorker({ role: WORKER_ROLE, dir });
  try {
    const [addresses] = (await once(worker, "message")) as [ServerAddresses];
    const urls = new HmacTransferUrls({ key: addresses.key, publicUrl: addresses.castor, ttlSeconds: 3600 });
    const agent = new Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
    try {
      for (const [shape, rangesOf] of [
        ["8 × 1 MiB ranges (multipart)", multiRanges],
        ["1 × 1 MiB range", singleRange],
      ] as const) {
        const bytesPerRun = Array.from({ length: REQUESTS_PER_RUN }, (_, i) => rangesOf(i).length * MiB).reduce((a, b) => a + b, 0);
        // Interleaved, so both servers see the same share of whatever else runs on the machine.
        const castorSamples: number[] = [];
        const bareSamples: number[] = [];
        for (let repetition = 0; repetition < REPETITIONS; repetition++) {
          castorSamples.push(
            (await timeRepeated(() => fetchAll(agent, (i) => ({ url: urls.sign(XORB, rangesOf(i)), ranges: rangesOf(i) })), 1, repetition === 0 ? 1 : 0)).best,
          );
          bareSamples.push(
            (await timeRepeated(() => fetchAll(agent, (i) => ({ url: `${addresses.bare}/xorb`, ranges: rangesOf(i) })), 1, repetition === 0 ? 1 : 0)).best,
          );
        }
        const castor = summarise(castorSamples);
        const bare = summarise(bareSamples);
        const castorMBs = megabytesPerSecond(bytesPerRun, castor.best);
        const bareMBs = megabytesPerSecond(bytesPerRun, bare.best);
        rows.push(
          benchRow(GROUP, `castor transfer route, ${shape}`, castorMBs, "MB/s", {
            median: megabytesPerSecond(bytesPerRun, castor.median),
            note: `${IN_FLIGHT} in flight, keep-alive, 64 MiB fs blob`,
          }),
          benchRow(GROUP, `bare node:http range server, ${shape}`, bareMBs, "MB/s", {
            median: megabytesPerSecond(bytesPerRun, bare.median),
          }),
          benchRow(GROUP, `castor / bare, ${shape}`, castorMBs / bareMBs, "ratio", { target: { atLeast: RATIO_TARGET } }),
        );
      }
    } finally {
      agent.destroy();
    }
  } finally {
    await worker.terminate();
    await rm(dir, { recursive: true, force: true });
  }
  return rows;
}

/**
 * Runs this module in a worker. Workers do not inherit the TypeScript loader that
 * `node --import tsx` installed on the main thread, so the worker installs it first.
 */
function startWorker(data: { role: string; dir: string }): Worker {
  const tsxApi = import.meta.resolve("tsx/esm/api");
  const source = `import(${JSON.stringify(tsxApi)}).then(({ register }) => { register(); return import(${JSON.stringify(import.meta.url)}); })`;
  const worker = new Worker(source, { eval: true, workerData: data });
  worker.once("error", (error) => console.error(`bench transfer: server worker failed: ${error.stack ?? error.message}`));
  return worker;
}

function benchSigning(): BenchRow[] {
  const urls = new HmacTransferUrls({ key: randomBytes(KEY_BYTES), publicUrl: "https://cas.example.com", ttlSeconds: 3600 });
  // A typical V2 entry: a handful of ranges per xorb.
  const ranges = multiRanges(1).slice(0, 4);
  const calls = 20_000;
  let url = "";
  const sign = timeSync(() => {
    for (let i = 0; i < calls; i++) url = urls.sign(XORB, ranges);
  });
  const target = url.slice("https://cas.example.com".length);
  const header = rangeHeader(ranges.slice(1, 2));
  const verify = timeSync(() => {
    for (let i = 0; i < calls; i++) selectRequestedRanges(urls.verify(target).ranges, header);
  });
  return [
    benchRow(GROUP, "sign, 4 ranges", (sign.best / calls) * 1e6, "µs/call", {
      median: (sign.median / calls) * 1e6,
      target: { atMost: 20 },
      note: `${url.length}-char URL; ~160 calls per reconstruction`,
    }),
    benchRow(GROUP, "verify + Range check, 4 ranges", (verify.best / calls) * 1e6, "µs/call", { median: (verify.median / calls) * 1e6 }),
  ];
}

function timeSync(fn: () => void): { best: number; median: number } {
  fn();
  const samples: number[] = [];
  for (let i = 0; i < REPETITIONS; i++) {
    const started = process.hrtime.bigint();
    fn();
    samples.push(Number(process.hrtime.bigint() - started) / 1e9);
  }
  return summarise(samples);
}

function summarise(samples: number[]): { best: number; median: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  return { best: sorted[0], median: sorted[sorted.length >> 1] };
}

/** REQUESTS_PER_RUN GETs, IN_FLIGHT at a time; checks status and length, drops the bytes. */
async function fetchAll(agent: Agent, requestOf: (i: number) => { url: string; ranges: ByteRange[] }): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < REQUESTS_PER_RUN) {
      const { url, ranges } = requestOf(next++);
      await fetchCountedBytes(agent, url, rangeHeader(ranges));
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
}

// ——— worker side: castor and the bare server over the same file ———

async function startServers(dir: string): Promise<void> {
  const key = randomBytes(KEY_BYTES);
  const blobs = await FsBlobStore.open(join(dir, "blobs"));
  await blobs.putIfAbsent(blobKey("xorbs", XORB), deterministicRandomBytes(XORB_BYTES, 7));
  const filePath = join(blobs.root, "xorbs", "5a", "5a".repeat(32));

  let castorUrl = "";
  const app = createHttpApp({ logger: createLogger("silent") });
  await app.register(transferRoutes, {
    blobs,
    transferUrls: new HmacTransferUrls({ key, publicUrl: () => castorUrl, ttlSeconds: 3600 }),
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  castorUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

  const bare = createServer((request, response) => void serveRanges(filePath, request, response));
  bare.listen(0, "127.0.0.1");
  await once(bare, "listening");
  parentPort!.postMessage({ castor: castorUrl, bare: `http://127.0.0.1:${(bare.address() as AddressInfo).port}`, key } satisfies ServerAddresses);
}

/** The baseline: parse the Range list, stream each range straight from the file, nothing else. */
async function serveRanges(filePath: string, request: IncomingMessage, response: ServerResponse): Promise<void> {
  const ranges = /^bytes=(.+)$/
    .exec(request.headers.range ?? "")![1]
    .split(",")
    .map((spec) => spec.split("-").map(Number))
    .map(([start, end]) => byteRange(start, end));
  const copy = async (range: ByteRange) => {
    for await (const chunk of createReadStream(filePath, { start: range.start, end: range.end, highWaterMark: 256 * 1024 })) {
      if (!response.write(chunk)) await once(response, "drain");
    }
  };
  if (ranges.length === 1) {
    const [range] = ranges;
    response.writeHead(206, {
      "content-type": "application/octet-stream",
      "content-range": `bytes ${range.start}-${range.end}/${XORB_BYTES}`,
      "content-length": range.end - range.start + 1,
    });
    await copy(range);
  } else {
    const boundary = "bare-boundary";
    const head = (range: ByteRange) =>
      `--${boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes ${range.start}-${range.end}/${XORB_BYTES}\r\n\r\n`;
    const closing = `--${boundary}--\r\n`;
    const length = ranges.reduce((sum, range) => sum + head(range).length + range.end - range.start + 1 + 2, closing.length);
    response.writeHead(206, { "content-type": `multipart/byteranges; boundary=${boundary}`, "content-length": length });
    for (const range of ranges) {
      response.write(head(range));
      await copy(range);
      response.write("\r\n");
    }
    response.write(closing);
  }
  response.end();
}

if (!isMainThread && (workerData as { role?: string } | null)?.role === WORKER_ROLE) {
  await startServers((workerData as { dir: string }).dir);
}
