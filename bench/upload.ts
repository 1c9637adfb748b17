/**
 * The xorb upload path over HTTP: 64 MiB xorbs from 4 concurrent clients into a real
 * `castor serve` process, next to a raw baseline measured in the same run — a bare node:http
 * server (also its own process) streaming the same bodies to disk and fsyncing them — and the
 * ratio of the two. Then the server's peak RSS while 16 such uploads run at once.
 *
 * Every upload is a distinct xorb (castor reads an already stored xorb's body without
 * validating it, which would flatter it): one 64 MiB body of incompressible raw chunks is
 * built once, and each upload replaces only its first chunk, which gives it its own hash.
 * Incompressible data is what real uploads mostly carry, and it makes the validator hash every
 * byte (the LZ4 path is measured by the format group).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { writeFile, mkdtemp, rm } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CasTokenIssuer } from "../src/auth/cas-token.js";
import { loadOrCreateKeys } from "../src/auth/keys.js";
import { CompressionScheme } from "../src/format/compression.js";
import { chunkHash, hashToHex, xorbHash } from "../src/format/hash.js";
import { XORB_CHUNK_HEADER_BYTES, serializeXorb } from "../src/format/xorb.js";
import { startCastorServer } from "../test/helpers/server.js";
import { benchRow, deterministicRandomBytes, megabytesPerSecond, median, sized, type BenchRow } from "./lib.js";
import { processStatusKiB } from "./support/proc-stats.js";

const GROUP = "upload";
const CHUNK_BYTES = 128 * 1024;
/** 64 MiB of chunk data, the largest xorb clients build (4 MiB in a smoke run). */
const XORB_CHUNKS = sized(512, 32);
const XORB_MIB = (XORB_CHUNKS * CHUNK_BYTES) / 2 ** 20;
const CLIENTS = 4;
const XORBS_PER_CLIENT = 1;
const REPETITIONS = sized(3, 1);
const RSS_CONCURRENCY = sized(16, 2);

const RATIO_TARGET = 0.6;
const PEAK_RSS_TARGET_MIB = 512;

export async function run(): Promise<BenchRow[]> {
  const bodies = new XorbBodies();
  const scratch = await mkdtemp(join(tmpdir(), "castor-bench-upload-"));
  const stops: (() => Promise<unknown>)[] = [];
  try {
    const baseline = await startBaselineServer(join(scratch, "baseline"));
    stops.push(baseline.stop);

    const dataDir = join(scratch, "castor");
    // Keys generated before the server starts are the ones it loads, so a token can be minted
    // here without the hub (xorb uploads do not look at the token's repository).
    const keys = await loadOrCreateKeys({ dataDir, signingKeyFile: null, urlKey: null, dedupKeySeed: null });
    const { token } = await new CasTokenIssuer(keys.jwtSigningKey, 3600).issue({
      repo: { type: "model", id: "bench/upload" },
      rev: "main",
      scope: "write",
    });
    const castor = await startCastorServer({ dataDir, compiled: true });
    stops.push(() => castor.stop());
    const castorHeaders = { authorization: `Bearer ${token}` };

    // Rounds alternate between the two servers, so a burst of load from other processes on
    // the shared cores hits both alike and the ratio stays meaningful.
    const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
    const castorRates: number[] = [];
    const baselineRates: number[] = [];
    try {
      await uploadRound(baseline.url, {}, bodies, agent);
      await uploadRound(castor.url, castorHeaders, bodies, agent);
      for (let i = 0; i < REPETITIONS; i++) {
        baselineRates.push(await uploadRound(baseline.url, {}, bodies, agent));
        castorRates.push(await uploadRound(castor.url, castorHeaders, bodies, agent));
      }
    } finally {
      agent.destroy();
    }
    const ratios = castorRates.map((rate, i) => rate / baselineRates[i]);
    const peak = await measurePeakRss(castor.child, castor.url, castorHeaders, bodies);
    const roundNote = `${REPETITIONS} rounds of ${CLIENTS} clients × ${XORBS_PER_CLIENT} uploads (${(ROUND_BYTES / 2 ** 20).toFixed(0)} MiB)`;
    return [
      benchRow(GROUP, `castor POST /v1/xorbs, ${XORB_MIB} MiB xorbs, ${CLIENTS} clients`, Math.max(...castorRates), "MB/s", {
        median: median(castorRates),
        note: roundNote,
      }),
      benchRow(GROUP, "raw node:http → file + fsync, same bodies", Math.max(...baselineRates), "MB/s", {
        median: median(baselineRates),
        note: "rounds interleaved with castor's",
      }),
      benchRow(GROUP, "castor / raw baseline", Math.max(...ratios), "ratio", {
        median: median(ratios),
        target: { atLeast: RATIO_TARGET },
        note: "per pair of adjacent rounds",
      }),
      benchRow(GROUP, `castor peak RSS, ${RSS_CONCURRENCY} concurrent ${XORB_MIB} MiB uploads`, peak.mib, "MiB", {
        target: { atMost: PEAK_RSS_TARGET_MIB },
        note: peak.note,
      }),
    ];
  } finally {
    for (const stop of stops.reverse()) await stop();
    await rm(scratch, { recursive: true, force: true });
  }
}

const ROUND_BYTES = CLIENTS * XORBS_PER_CLIENT * (XORB_CHUNKS * (CHUNK_BYTES + XORB_CHUNK_HEADER_BYTES));

/** CLIENTS clients each uploading XORBS_PER_CLIENT fresh xorbs one after another; returns MB/s. */
async function uploadRound(url: string, headers: Record<string, string>, bodies: XorbBodies, agent: Agent): Promise<number> {
  const started = process.hrtime.bigint();
  let bytes = 0;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      for (let i = 0; i < XORBS_PER_CLIENT; i++) {
        const sent = await uploadOnce(url, headers, bodies.next(), agent);
        bytes += sent;
      }
    }),
  );
  return megabytesPerSecond(bytes, Number(process.hrtime.bigint() - started) / 1e9);
}

/** The server's VmHWM (peak resident set) across RSS_CONCURRENCY simultaneous uploads. */
async function measurePeakRss(server: ChildProcess, url: string, headers: Record<string, string>, bodies: XorbBodies): Promise<{ mib: number; note: string }> {
  const procDir = `/proc/${server.pid}`;
  let note = `VmHWM of the server process over the ${RSS_CONCURRENCY} uploads`;
  try {
    // "5" resets the peak to the current RSS (Linux ≥ 4.0), so earlier runs do not count.
    await writeFile(`${procDir}/clear_refs`, "5");
  } catch {
    note = "VmHWM since server start (could not reset it: /proc/<pid>/clear_refs not writable)";
  }
  const agent = new Agent({ keepAlive: false });
  try {
    await Promise.all(Array.from({ length: RSS_CONCURRENCY }, () => uploadOnce(url, headers, bodies.next(), agent)));
  } finally {
    agent.destroy();
  }
  return { mib: (await processStatusKiB(server.pid, "VmHWM")) / 1024, note };
}

/** Posts one xorb body (without Content-Type, like hf_xet); returns the bytes sent. */
function uploadOnce(url: string, headers: Record<string, string>, body: XorbBody, agent: Agent): Promise<number> {
  const length = body.parts.reduce((sum, part) => sum + part.length, 0);
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      `${url}/v1/xorbs/default/${body.hex}`,
      { method: "POST", agent, headers: { ...headers, "content-length": String(length) } },
      (response) => {
        let text = "";
        response.setEncoding("utf8").on("data", (part: string) => (text += part));
        response.on("end", () => {
          // A benchmark of failed uploads would measure nothing: stop loudly.
          if (response.statusCode !== 200 || text !== '{"was_inserted":true}') {
            reject(new Error(`upload of ${body.hex} answered ${response.statusCode} ${text}`));
          } else {
            resolve(length);
          }
        });
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    for (const part of body.parts) request.write(part);
    request.end();
  });
}

interface XorbBody {
  hex: string;
  /** The body as sent: the varied first chunk, then the shared rest. */
  parts: Uint8Array[];
}

/** Distinct 64 MiB xorbs that share all but their first chunk, so they cost no extra memory. */
export class XorbBodies {
  private readonly rest: Uint8Array;
  private readonly firstData: Uint8Array;
  private readonly restEntries: { hash: Uint8Array; size: number }[];
  private counter = 0;

  constructor() {
    const data = deterministicRandomBytes(CHUNK_BYTES * XORB_CHUNKS, 42);
    const sources = Array.from({ length: XORB_CHUNKS }, (_, i) => ({
      data: data.subarray(i * CHUNK_BYTES, (i + 1) * CHUNK_BYTES),
      scheme: CompressionScheme.None,
    }));
    const base = serializeXorb(sources);
    const firstEnd = base.info.chunks[0].serializedEnd;
    this.rest = base.bytes.subarray(firstEnd);
    this.firstData = base.bytes.slice(XORB_CHUNK_HEADER_BYTES, firstEnd);
    this.restEntries = base.info.chunks.slice(1).map((c) => ({ hash: c.hash, size: c.uncompressedLength }));
  }

  next(): XorbBody {
    const first = new Uint8Array(XORB_CHUNK_HEADER_BYTES + CHUNK_BYTES);
    // Header: version 0, compressed = uncompressed = CHUNK_BYTES, scheme 0 (None).
    first.set([0, CHUNK_BYTES & 0xff, (CHUNK_BYTES >> 8) & 0xff, CHUNK_BYTES >> 16, 0, CHUNK_BYTES & 0xff, (CHUNK_BYTES >> 8) & 0xff, CHUNK_BYTES >> 16]);
    const data = first.subarray(XORB_CHUNK_HEADER_BYTES);
    data.set(this.firstData);
    new DataView(data.buffer, data.byteOffset).setUint32(0, ++this.counter, true);
    const hash = xorbHash([{ hash: chunkHash(data), size: CHUNK_BYTES }, ...this.restEntries]);
    return { hex: hashToHex(hash), parts: [first, this.rest] };
  }
}

/**
 * The floor castor is compared with: node:http piping each body into a file, fsyncing it and
 * answering — no validation, no hashing, no metadata. Run as its own process like castor, so
 * neither shares an event loop with the load generator.
 */
const BASELINE_SERVER = `
import { createServer } from "node:http";
import { createWriteStream } from "node:fs";
import { mkdir, open } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
const dir = process.argv[1];
await mkdir(dir, { recursive: true });
let count = 0;
const server = createServer(async (request, response) => {
  const path = join(dir, String(count++));
  try {
    await pipeline(request, createWriteStream(path));
    const file = await open(path, "r+");
    await file.sync();
    await file.close();
    response.setHeader("content-type", "application/json");
    response.end('{"was_inserted":true}');
  } catch (error) {
    response.statusCode = 500;
    response.end(String(error));
  }
});
server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: server.address().port })));
`;

async function startBaselineServer(dir: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, ["--input-type=module", "-e", BASELINE_SERVER, dir], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise<number>((resolve, reject) => {
    let output = "";
    child.stdout!.setEncoding("utf8").on("data", (text: string) => {
      output += text;
      const line = output.split("\n").find((candidate) => candidate.startsWith("{"));
      if (line) resolve((JSON.parse(line) as { port: number }).port);
    });
    child.once("exit", (code) => reject(new Error(`the baseline server exited early (code ${code})`)));
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return {
    url: `http://127.0.0.1:${port}`,
    stop: async () => {
      child.kill("SIGTERM");
      await exited;
    },
  };
}
