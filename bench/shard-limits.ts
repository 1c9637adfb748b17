/**
 * Shards that cost the server more than their size, against a real `castor serve` (compiled,
 * default settings):
 *
 * - the amplification probes of the first security review: one xorb of 8,192 two-byte chunks
 *   and one file of N terms that each name all 8,192 chunks (correct range hashes, wrong file
 *   hash): N = 2,000 (a 192 KB shard) and N = 20,000 (1.9 MB), refused by the per-file bound;
 * - 1,000 identical file blocks of a realistic file (one 1,024-chunk term each);
 * - a valid file of 16,384,000 chunk references within the per-file bound: 2,000 terms that
 *   each name a whole xorb of 8,192 chunks of 8 KiB (a 192 KB shard; before the memo, ~30 s of
 *   CPU), and for comparison one of 1,638,400 references to distinct chunks (200 xorbs named
 *   once each), whose cost per reference is what a shard of distinct chunks costs;
 * - a valid shard of 340,000 one-chunk files (49 MB): its registration alone, then 8 copies
 *   posted at once (before the budget: 4 at once peaked at 3.3 GiB, 8 killed the process).
 *
 * For each: how long the upload took to be answered, the server's CPU time, and the longest
 * `/healthz` round trip while it ran (a client polling every 10 ms) — what every other client
 * of the node sees. Memory is the server's resident set: its peak (VmHWM, reset before each
 * probe) against its size just before. The xorbs of the valid shards are synthetic records put
 * straight into the server's SQLite before it starts: registration reads chunk tables, never
 * xorb bytes.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { fileHash, hashToHex, verificationHash, type Hash } from "../src/format/hash.js";
import type { ShardFile } from "../src/format/shard.js";
import { serializeUploadShard } from "../src/format/shard-writer.js";
import { serializeXorb } from "../src/format/xorb.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { oneChunkFilesShard, storeSyntheticXorbs, wholeXorbsFileShard } from "../test/helpers/synthetic-xorbs.js";
import { benchRow, sized, type BenchRow } from "./lib.js";

const GROUP = "shard-limits";
/** What "no request blocks others for long" allows a polling client to see while one shard is registered, with loopback and scheduling noise. */
const HEALTHZ_TARGET_MS = 100;
/** The goal while 8 large shards are posted at once. */
const CONCURRENT_HEALTHZ_TARGET_MS = 500;
/** A smoke run: 5,000 files, 2 copies, 100 terms, 10 distinct xorbs. */
const LARGE_SHARD_FILES = sized(340_000, 5_000);
const CONCURRENT_COPIES = sized(8, 2);
/** Terms of the valid file that names one 8,192-chunk xorb again and again. */
const REPEATED_TERMS = sized(2_000, 100);
/** 8,192-chunk xorbs the valid file of distinct chunks names once each. */
const DISTINCT_XORBS = sized(200, 10);
const CLOCK_TICKS = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim());

export async function run(): Promise<BenchRow[]> {
  const { mkdtemp, rm } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const dataDir = await mkdtemp(join(tmpdir(), "castor-bench-limits-"));
  try {
    const [manyFilesXorbs, [repeatedXorb], distinctXorbs] = [
      await storeSyntheticXorbs(dataDir, LARGE_SHARD_FILES / 1000, 1000, 65_536),
      await storeSyntheticXorbs(dataDir, 1, 8192, 8192),
      await storeSyntheticXorbs(dataDir, DISTINCT_XORBS, 8192, 8192),
    ];
    const shards = {
      large: oneChunkFilesShard(manyFilesXorbs, LARGE_SHARD_FILES),
      repeated: wholeXorbsFileShard(Array.from({ length: REPEATED_TERMS }, () => repeatedXorb)),
      distinct: wholeXorbsFileShard(distinctXorbs),
    };
    const server = await startCastorServer({ compiled: true, dataDir });
    try {
      return await probes(server, shards);
    } finally {
      await server.stop();
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}

async function probes(server: ServerProcess, shards: { large: Uint8Array; repeated: Uint8Array; distinct: Uint8Array }): Promise<BenchRow[]> {
  const fixture = await hubFixture(server, { repoType: "model", repoName: "bench/limits" });
  const token = (await fixture.casToken("write")).accessToken;
  const post = (path: string, body: Uint8Array) => postRaw(server.url, path, body, token);
  const rows: BenchRow[] = [];

  const tiny = serializeXorb(Array.from({ length: 8192 }, (_, i) => ({ data: Uint8Array.of(i >> 8, i & 0xff) })));
  await expectOk(await post(`/v1/xorbs/default/${hashToHex(tiny.info.hash)}`, tiny.bytes), "tiny-chunk xorb upload");
  for (const terms of [2_000, 20_000]) {
    const shard = amplifiedShard(tiny.info, terms);
    const probe = await measured(server, () => post("/v1/shards", shard));
    rows.push(
      benchRow(GROUP, `amplified shard, ${count(terms)} terms × 8,192 chunks: answered`, probe.seconds * 1000, "ms", {
        note: `HTTP ${probe.answers[0].status}, ${(shard.length / 1024).toFixed(0)} KiB shard`,
      }),
      benchRow(GROUP, "  longest /healthz meanwhile", probe.healthzMs, "ms", { target: { atMost: HEALTHZ_TARGET_MS } }),
    );
  }

  const real = serializeXorb(Array.from({ length: 1024 }, (_, i) => ({ data: randomBytes(8192 + i) })));
  await expectOk(await post(`/v1/xorbs/default/${hashToHex(real.info.hash)}`, real.bytes), "xorb upload");
  const repeatedBlocks = await measured(server, () => post("/v1/shards", repeatedBlocksShard(real.info, 1000)));
  rows.push(
    benchRow(GROUP, "1,000 identical blocks of a 1,024-chunk file: answered", repeatedBlocks.seconds * 1000, "ms", {
      note: `HTTP ${repeatedBlocks.answers[0].status}`,
    }),
    benchRow(GROUP, "  longest /healthz meanwhile", repeatedBlocks.healthzMs, "ms", { target: { atMost: HEALTHZ_TARGET_MS } }),
  );

  const repeated = await measured(server, () => post("/v1/shards", shards.repeated));
  rows.push(
    benchRow(
      GROUP,
      `valid file of ${count(REPEATED_TERMS * 8192)} references (${count(REPEATED_TERMS)} × one 8,192-chunk xorb): answered`,
      repeated.seconds,
      "s",
      {
        note: `HTTP ${repeated.answers[0].status}, ${(shards.repeated.length / 1024).toFixed(0)} KiB shard`,
      },
    ),
    benchRow(GROUP, "  server CPU", repeated.cpuSeconds, "s", { target: { atMost: 5 } }),
    benchRow(GROUP, "  longest /healthz meanwhile", repeated.healthzMs, "ms", { target: { atMost: HEALTHZ_TARGET_MS } }),
  );
  const distinct = await measured(server, () => post("/v1/shards", shards.distinct));
  rows.push(
    benchRow(
      GROUP,
      `valid file of ${count(DISTINCT_XORBS * 8192)} references to distinct chunks (${DISTINCT_XORBS} xorbs): server CPU`,
      distinct.cpuSeconds,
      "s",
      {
        note: `HTTP ${distinct.answers[0].status}; ${((distinct.cpuSeconds / (DISTINCT_XORBS * 8192)) * 1e6).toFixed(2)} µs per reference`,
      },
    ),
    benchRow(GROUP, "  longest /healthz meanwhile", distinct.healthzMs, "ms", { target: { atMost: HEALTHZ_TARGET_MS } }),
  );

  const large = await measured(server, () => post("/v1/shards", shards.large));
  rows.push(
    benchRow(GROUP, `valid shard of ${count(LARGE_SHARD_FILES)} files: registered`, large.seconds, "s", {
      note: `HTTP ${large.answers[0].status}, ${(shards.large.length / 1e6).toFixed(0)} MB shard`,
    }),
    benchRow(GROUP, "  server CPU", large.cpuSeconds, "s"),
    benchRow(GROUP, "  server memory above idle (peak RSS − RSS before)", large.peakAboveIdleMiB, "MiB", { target: { atMost: 256 } }),
    benchRow(GROUP, "  longest /healthz meanwhile", large.healthzMs, "ms", { target: { atMost: HEALTHZ_TARGET_MS } }),
  );

  const copies = await measured(server, () => Promise.all(Array.from({ length: CONCURRENT_COPIES }, () => post("/v1/shards", shards.large))));
  const status = (answer: RawAnswer) =>
    answer.status === 503 || answer.status === 429 ? (answer.retryAfter === null ? "no-retry-after" : "busy") : String(answer.status);
  const tally = new Map<string, number>();
  for (const answer of copies.answers) tally.set(status(answer), (tally.get(status(answer)) ?? 0) + 1);
  const alive = server.child.exitCode === null && (await fetch(`${server.url}/healthz`)).status === 200;
  rows.push(
    benchRow(GROUP, `${CONCURRENT_COPIES} copies posted at once: all answered`, copies.seconds, "s", {
      note: [...tally].map(([what, n]) => `${n} × ${what === "busy" ? "503/429 + Retry-After" : what}`).join(", "),
    }),
    benchRow(GROUP, "  answered 200", tally.get("200") ?? 0, "uploads"),
    benchRow(GROUP, "  answered 503 or 429 with Retry-After", tally.get("busy") ?? 0, "uploads"),
    benchRow(GROUP, "  other answers", CONCURRENT_COPIES - (tally.get("200") ?? 0) - (tally.get("busy") ?? 0), "uploads", { target: { atMost: 0 } }),
    benchRow(GROUP, "  server alive afterwards", alive ? 1 : 0, "", { target: { atLeast: 1 } }),
    benchRow(GROUP, "  server peak RSS", copies.peakRssMiB, "MiB", { target: { atMost: 2048 } }),
    benchRow(GROUP, "  longest /healthz meanwhile", copies.healthzMs, "ms", { target: { atMost: CONCURRENT_HEALTHZ_TARGET_MS } }),
  );
  return rows;
}

function count(n: number): string {
  return n.toLocaleString("en-US");
}

interface RawAnswer {
  status: number;
  retryAfter: string | null;
  text: string;
}

/**
 * POSTs `body` with node:http, which has no answer timeout: a registration of a large shard
 * among several may take minutes on a busy machine (fetch gives up on headers after 300 s).
 * A connection error is an answer of status 0.
 */
function postRaw(url: string, path: string, body: Uint8Array, token: string): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const req = request(`${url}${path}`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-length": body.length } }, (response) => {
      let text = "";
      response.setEncoding("utf8").on("data", (piece: string) => (text += piece));
      response.on("end", () =>
        resolve({ status: response.statusCode ?? 0, retryAfter: (response.headers["retry-after"] as string | undefined) ?? null, text }),
      );
      response.on("error", (error) => resolve({ status: 0, retryAfter: null, text: error.message }));
    });
    req.on("error", (error) => resolve({ status: 0, retryAfter: null, text: error.message }));
    req.end(body);
  });
}

async function expectOk(answer: RawAnswer, what: string): Promise<void> {
  if (answer.status !== 200) throw new Error(`${what} answered ${answer.status}: ${answer.text}`);
}

interface Probe {
  answers: RawAnswer[];
  seconds: number;
  cpuSeconds: number;
  /** The longest /healthz round trip while the probe ran. */
  healthzMs: number;
  peakRssMiB: number;
  peakAboveIdleMiB: number;
}

/**
 * Runs `upload` while a client polls `/healthz` back to back (10 ms apart), with the server's
 * CPU time and its peak resident set (reset first) measured around it.
 */
async function measured(server: ServerProcess, upload: () => Promise<RawAnswer | RawAnswer[]>): Promise<Probe> {
  const pid = server.child.pid!;
  let done = false;
  let longest = 0;
  const poller = (async () => {
    while (!done) {
      const started = performance.now();
      await (await fetch(`${server.url}/healthz`)).text();
      longest = Math.max(longest, performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();
  const rssBefore = await memoryKiB(pid, "VmRSS");
  // Resets VmHWM to the current resident set (Linux ≥ 4.0), so the peak read after is this probe's.
  await writeFile(`/proc/${pid}/clear_refs`, "5");
  const cpuBefore = await cpuSeconds(pid);
  const started = performance.now();
  try {
    const answered = await upload();
    const answers = Array.isArray(answered) ? answered : [answered];
    const peak = await memoryKiB(pid, "VmHWM");
    return {
      answers,
      seconds: (performance.now() - started) / 1000,
      cpuSeconds: (await cpuSeconds(pid)) - cpuBefore,
      healthzMs: longest,
      peakRssMiB: peak / 1024,
      peakAboveIdleMiB: (peak - rssBefore) / 1024,
    };
  } finally {
    done = true;
    await poller;
  }
}

async function memoryKiB(pid: number, field: "VmRSS" | "VmHWM"): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? Number.NaN);
}

/** User + system CPU time of process `pid` so far (fields 14 and 15 of /proc/pid/stat, in clock ticks). */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

function amplifiedShard(xorb: { hash: Hash; chunks: readonly { hash: Hash; uncompressedLength: number }[] }, terms: number): Uint8Array {
  const rangeHash = verificationHash(xorb.chunks.map((c) => c.hash));
  const bytes = xorb.chunks.reduce((sum, c) => sum + c.uncompressedLength, 0);
  const file: ShardFile = {
    fileHash: new Uint8Array(32).fill(0xab),
    terms: Array.from({ length: terms }, () => ({ xorbHash: xorb.hash, chunkStart: 0, chunkEnd: xorb.chunks.length, unpackedBytes: bytes })),
    verificationHashes: Array.from({ length: terms }, () => rangeHash),
    sha256: null,
  };
  return serializeUploadShard({ files: [file], xorbs: [] }, { kind: "xet-core" });
}

function repeatedBlocksShard(xorb: { hash: Hash; chunks: readonly { hash: Hash; uncompressedLength: number }[] }, blocks: number): Uint8Array {
  const file: ShardFile = {
    fileHash: fileHash(xorb.chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
    terms: [{ xorbHash: xorb.hash, chunkStart: 0, chunkEnd: xorb.chunks.length, unpackedBytes: xorb.chunks.reduce((sum, c) => sum + c.uncompressedLength, 0) }],
    verificationHashes: [verificationHash(xorb.chunks.map((c) => c.hash))],
    sha256: null,
  };
  return serializeUploadShard({ files: Array.from({ length: blocks }, () => file), xorbs: [] }, { kind: "xet-core" });
}
