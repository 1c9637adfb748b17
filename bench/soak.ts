/**
 * Soak and load (issue 14, item 4): one real compiled `castor serve` (embedded SQLite + files,
 * every limit at its default) under a bounded mixed workload for a fixed time, with the
 * slow-header and slow-body attackers of item 1 running the whole time. It reports; it never
 * fails on a missed target.
 *
 *     npm run bench -- soak                           # 10 minutes, as the issue asks
 *     CASTOR_SOAK_SECONDS=90 npm run bench -- soak    # shorter, while developing (at least 10)
 *     CASTOR_SOAK_RATE=2 npm run bench -- soak        # every lane twice as fast (default 1)
 *
 * Settings are environment variables because bench/run.ts takes every argument that does not
 * start with a dash as a group name.
 *
 * The workload runs in this process, in lanes: each lane sends one request (or one round) after
 * another at a fixed rate, over keep-alive connections, so the offered load is the same on any
 * machine and the figures of two runs compare. A lane that falls behind goes on at once but
 * never bursts to catch up; the row "rounds done / rounds offered" then shows the shortfall.
 * At rate 1, ~250 requests a second (castor uses a fifth of a core for them here):
 *
 * - uploads (2 lanes × 1.5 rounds a second): a 1 MiB file of 16 chunks of 64 KiB, in runs of 4 that are
 *   alternately new and already stored (a run of a seed xorb), so half of every file's chunks
 *   are shared. The new half is one xorb (`POST /v1/xorbs/default/{hash}`), the file one shard
 *   (`POST /v1/shards`), then a hub commit names it by SHA-256 at one of 16 paths per lane, as
 *   `huggingface_hub` commits an upload. Bodies are built in memory with src/client's packing
 *   (no chunking of a file); new chunks are copies of a 4 MiB random pool with a serial number
 *   written in, so each is unique and the data dir grows by ~1.6 MB a second (~1 GB in 10 min).
 * - downloads (2 lanes × 8 a second): the V2 reconstruction of a known file, then each of its ranges by
 *   a single-range GET of the transfer URL (as hf_xet splits them); every chunk is decoded and
 *   hashed and the file hash recomputed: any wrong byte is a `hash mismatch`.
 * - reconstruction queries (4 lanes × 40), the p99 target's subject: V2 (V1 every 4th), half of
 *   them with a random Range.
 * - dedup queries (1 lane × 20): `GET /v1/chunks/default-merkledb/{hash}`, alternately the first
 *   chunk of a known file (a hit: castor indexes every file's first chunk) and a random hash.
 * - token refreshes (1 lane × 4): the hub's `xet-read-token` and `xet-write-token`, alternately;
 *   the other lanes use the tokens they hand out.
 * - attackers (support/slow-clients.ts): 64 connections dribbling a header line every 2 s and
 *   8 authenticated xorb uploads trickling 16 bytes/s; each reconnects when castor cuts it.
 *
 * Known files: 9 seed files (one per seed xorb, one spanning all 8) and the last 64 uploaded.
 *
 * Reported: per operation, throughput, p50 and p99 latency and the outcomes by status
 * (network failures by error code); 5xx answers in all; every 30 s, the server's RSS (VmRSS of
 * the `castor serve` process, /proc), CPU and open descriptors, and from its /metrics the V8
 * heap and the event loop's delay; how the attackers' connections ended and how long they were
 * held; what castor logged as warnings and errors. A line goes to stderr every 30 s.
 *
 * Warm-up is the first half of the run. castor's memory grows until its bounded caches are
 * full, as it would in the first minutes of any server's life; the random ranges above make a
 * new reconstruction answer each (~1.5 KB as the cache counts it, 80 a second at rate 1), so
 * the answer cache (32 MiB) is full after ~5 minutes, and the second half of a 10-minute run
 * sees castor's steady state. The record cache (128 MiB) and SQLite's page cache grow with the
 * uploaded files far more slowly. Heap snapshots of the server 3 minutes apart showed nothing
 * else growing.
 *
 * Targets (issue 14): no 5xx; RSS under 512 MiB and flat after warm-up (growth, by a
 * least-squares line through the samples, at most 32 MiB); reconstruction-query p99 under
 * 50 ms while the attackers run; attackers cut within their limit (+ 5 s of slack).
 */
import { createHash, randomBytes, randomInt } from "node:crypto";
import { readdir } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { decodeChunkStream, type DecodedChunks } from "../src/client/chunk-stream.js";
import { encodeCommit } from "../src/client/hub.js";
import { FileBuilder, XorbBuilder, toShardFile, type ChunkLocation, type SealedXorb, type XorbHandle } from "../src/client/packing.js";
import {
  chunkHash,
  coversTerm,
  fetchSourcesOf,
  fileHash,
  hashToHex,
  parseReconstructionV2,
  serializeUploadShard,
  shardSha256FromDigest,
  type FetchSource,
  type Hash,
  type MerkleEntry,
  type ShardFile,
} from "../src/format/index.js";
import { SPOOL_DIR_NAME } from "../src/http/app.js";
import { DEFAULT_CONNECTION_LIMITS } from "../src/config.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { benchRow, deterministicRandomBytes, formatNumber, median, megabytesPerSecond, percentile, sized, type BenchRow } from "./lib.js";
import { openDescriptorCount, processCpuSeconds, processStatusKiB } from "./support/proc-stats.js";
import { SlowClients, type SlowClientReport } from "./support/slow-clients.js";

const GROUP = "soak";
const KiB = 1024;
const MiB = 1024 * KiB;
/** A smoke run: 20 s, sampled every 5 s. */
const DEFAULT_SECONDS = sized(600, 20);
const MIN_SECONDS = 10;
const SAMPLE_SECONDS = sized(30, 5);
/** Warm-up: this share of the run, from its start (see the file comment). */
const WARMUP_SHARE = 0.5;
const REPO = { type: "model", name: "bench/soak" } as const;

const CHUNK_BYTES = 64 * KiB;
const FILE_CHUNKS = 16;
/** Chunks of one run: runs alternate between new chunks and a stretch of a seed xorb. */
const RUN_CHUNKS = 4;
const NEW_CHUNKS_PER_FILE = FILE_CHUNKS / 2;
const SEED_XORBS = 8;
const SEED_XORB_CHUNKS = 64;
const NEW_CHUNK_POOL_BYTES = 4 * MiB;
const RECENT_FILES = 64;
/** Paths each upload lane commits to in turn, so the repository's tree stays small. */
const COMMIT_PATHS = 16;
/** A request that takes longer is abandoned (and counted), so a stuck server cannot stall the run. */
const REQUEST_TIMEOUT_MS = 30_000;

/** Lanes per kind and requests (or rounds) per second per lane, at CASTOR_SOAK_RATE=1. */
const LANES = {
  upload: { lanes: 2, perSecond: 1.5 },
  download: { lanes: 2, perSecond: 8 },
  reconstruction: { lanes: 4, perSecond: 40 },
  dedup: { lanes: 1, perSecond: 20 },
  token: { lanes: 1, perSecond: 4 },
} as const;

const SLOW_HEADER_SLOTS = 64;
const SLOW_BODY_SLOTS = 8;
const DRIP_EVERY_MS = 2000;
/** Body bytes per drip: 16 bytes/s, far under CASTOR_BODY_MIN_RATE's default 1 KiB/s. */
const SLOW_BODY_DRIP_BYTES = 32;
/** Body bytes sent with the headers, so castor has parsed a chunk header and staged the upload. */
const SLOW_BODY_FIRST_BYTES = 4096;
const CUT_SLACK_SECONDS = 5;

const RSS_TARGET_MIB = 512;
const RSS_GROWTH_TARGET_MIB = 32;
const RECONSTRUCTION_P99_TARGET_MS = 50;

// ——— settings ———

interface SoakSettings {
  seconds: number;
  rate: number;
}

function soakSettings(env: NodeJS.ProcessEnv = process.env): SoakSettings {
  const seconds = Number(env.CASTOR_SOAK_SECONDS ?? DEFAULT_SECONDS);
  if (!Number.isFinite(seconds) || seconds < MIN_SECONDS) {
    throw new Error(`CASTOR_SOAK_SECONDS must be a number of seconds ≥ ${MIN_SECONDS}, got ${JSON.stringify(env.CASTOR_SOAK_SECONDS)}`);
  }
  const rate = Number(env.CASTOR_SOAK_RATE ?? 1);
  if (!Number.isFinite(rate) || rate <= 0) throw new Error(`CASTOR_SOAK_RATE must be a positive number, got ${JSON.stringify(env.CASTOR_SOAK_RATE)}`);
  return { seconds, rate };
}

// ——— measuring ———

/** One kind of request: latencies, and how each ended (`200`, `404`, `network: ECONNRESET`, …). */
class Operation {
  readonly latenciesMs: number[] = [];
  /** Latencies since the last progress line. */
  recentMs: number[] = [];
  readonly outcomes = new Map<string, number>();
  bytes = 0;

  constructor(
    readonly name: string,
    /** The outcome of a request that did what the workload asked. */
    readonly expected: string,
  ) {}

  record(ms: number, outcome: string, bytes = 0): void {
    this.latenciesMs.push(ms);
    this.recentMs.push(ms);
    this.outcomes.set(outcome, (this.outcomes.get(outcome) ?? 0) + 1);
    this.bytes += bytes;
  }

  count(which: (outcome: string) => boolean): number {
    let total = 0;
    for (const [outcome, n] of this.outcomes) if (which(outcome)) total += n;
    return total;
  }

  get serverErrors(): number {
    return this.count(isServerError);
  }

  /** Outcomes other than the expected one, 5xx excepted (they are counted on their own). */
  get otherUnexpected(): number {
    return this.count((outcome) => outcome !== this.expected && !isServerError(outcome));
  }
}

const isServerError = (outcome: string) => /^5\d\d$/.test(outcome);

function createOperations() {
  return {
    xorb: new Operation("upload: POST /v1/xorbs (512 KiB of new chunks)", "200"),
    shard: new Operation("upload: POST /v1/shards", "200"),
    commit: new Operation("upload: hub commit (one lfsFile)", "200"),
    downloadReconstruction: new Operation("download: GET /v2/reconstructions", "200"),
    transfer: new Operation("download: transfer GET, one range", "206"),
    download: new Operation("download: whole file, hash-checked", "ok"),
    reconstruction: new Operation("reconstruction query (V2, V1 every 4th; half with a Range)", "200"),
    dedupHit: new Operation("dedup query, hit", "200"),
    dedupMiss: new Operation("dedup query, miss", "404"),
    readToken: new Operation("token refresh: xet-read-token", "200"),
    writeToken: new Operation("token refresh: xet-write-token", "200"),
  };
}
type Operations = ReturnType<typeof createOperations>;

interface Answer {
  status: number;
  body: Buffer;
}

/** One request over the shared keep-alive agent; the whole answer is kept (they are small). */
function exchange(agent: Agent, url: string, init: { method?: "GET" | "POST"; headers?: Record<string, string>; body?: Uint8Array } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers = init.body === undefined ? init.headers : { ...init.headers, "content-length": String(init.body.length) };
    const request = httpRequest(url, { agent, method: init.method ?? "GET", headers }, (response) => {
      const pieces: Buffer[] = [];
      response.on("data", (piece: Buffer) => pieces.push(piece));
      response.once("end", () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(pieces) }));
      response.once("error", reject);
    });
    request.setTimeout(REQUEST_TIMEOUT_MS, () => request.destroy(Object.assign(new Error("no answer in time"), { code: "timeout" })));
    request.once("error", reject);
    request.end(init.body);
  });
}

/**
 * Sends, records the latency, the outcome and the bytes moved (`sentBytes` for an upload, else
 * the answer's) under `op`; returns the answer when it has the expected status, else null.
 */
async function timed(op: Operation, send: () => Promise<Answer>, sentBytes?: number): Promise<Answer | null> {
  const started = performance.now();
  try {
    const answer = await send();
    op.record(performance.now() - started, String(answer.status), sentBytes ?? answer.body.length);
    return String(answer.status) === op.expected ? answer : null;
  } catch (error) {
    op.record(performance.now() - started, `network: ${(error as NodeJS.ErrnoException).code ?? "error"}`);
    return null;
  }
}

// ——— the data: seed xorbs, new chunks, known files ———

/** A stored xorb whose chunks later files share. */
interface SeedXorb {
  handle: XorbHandle;
  hashes: Hash[];
  chunks: Uint8Array[];
}

interface KnownFile {
  hex: string;
  size: number;
  /** The file's first chunk, which castor's dedup index holds. */
  firstChunkHex: string;
}

class KnownFiles {
  private readonly recent: KnownFile[] = [];
  private next = 0;

  constructor(private readonly seeds: readonly KnownFile[]) {}

  add(file: KnownFile): void {
    if (this.recent.length < RECENT_FILES) this.recent.push(file);
    else this.recent[this.next++ % RECENT_FILES] = file;
  }

  pick(): KnownFile {
    const i = randomInt(this.seeds.length + this.recent.length);
    return i < this.seeds.length ? this.seeds[i] : this.recent[i - this.seeds.length];
  }
}

/** A file's chunks in order, where each is stored, and its bytes (for the SHA-256 a commit names). */
interface FilePart {
  location: ChunkLocation;
  hash: Hash;
  data: Uint8Array;
}

/** The shard form of a file and what the workload remembers of it. */
function describeFile(parts: readonly FilePart[]): { shardFile: ShardFile; known: KnownFile; sha256Hex: string } {
  const builder = new FileBuilder();
  const sha256 = createHash("sha256");
  for (const part of parts) {
    builder.addChunk(part.location, part.hash, part.data.length);
    sha256.update(part.data);
  }
  const built = builder.finish(shardSha256FromDigest(sha256.digest()));
  return {
    shardFile: toShardFile(built),
    known: { hex: hashToHex(built.fileHash), size: built.size, firstChunkHex: hashToHex(parts[0].hash) },
    sha256Hex: hashToHex(built.sha256),
  };
}

/** New chunks: copies of a random pool, each with a serial number of the run written in, so none repeats. */
class NewChunks {
  private readonly pool = deterministicRandomBytes(NEW_CHUNK_POOL_BYTES, 1402);
  private readonly runId = randomBytes(8);
  private serial = 0;

  next(): Uint8Array {
    const n = this.serial++;
    const offset = (n * 7919 * 64) % (NEW_CHUNK_POOL_BYTES - CHUNK_BYTES);
    const data = this.pool.slice(offset, offset + CHUNK_BYTES);
    data.set(this.runId, 0);
    new DataView(data.buffer).setFloat64(8, n, true);
    return data;
  }
}

// ——— the run ———

interface Context {
  url: string;
  agent: Agent;
  ops: Operations;
  files: KnownFiles;
  seeds: readonly SeedXorb[];
  newChunks: NewChunks;
  /** Current CAS tokens, replaced by the token lane. */
  casTokens: { read: string; write: string };
  hubTokens: { read: string; write: string };
  tokenUrl: (access: "read" | "write") => string;
}

export async function run(): Promise<BenchRow[]> {
  const settings = soakSettings();
  const server = await startCastorServer({ compiled: true });
  const log = watchServerLog(server);
  const agent = new Agent({ keepAlive: true, maxSockets: 32 });
  try {
    const fixture = await hubFixture(server, { repoType: REPO.type, repoName: REPO.name });
    const casTokens = { read: (await fixture.casToken("read")).accessToken, write: (await fixture.casToken("write")).accessToken };
    const seeded = await storeSeeds(server.url, agent, casTokens.write);
    const ctx: Context = {
      url: server.url,
      agent,
      ops: createOperations(),
      files: new KnownFiles(seeded.files),
      seeds: seeded.xorbs,
      newChunks: new NewChunks(),
      casTokens,
      hubTokens: fixture.hubTokens,
      tokenUrl: fixture.tokenUrl,
    };
    const attackers = startAttackers(ctx, Number(new URL(server.url).port));

    const samples = new ServerSamples(server.child.pid, `${server.url}/metrics`, agent);
    const ownCpuBefore = process.cpuUsage();
    const deadline = samples.started + settings.seconds * 1000;
    const sampling = sampleEvery(settings, samples.started, deadline, async () => progress(settings, await samples.take(), ctx.ops, attackers));
    const rounds = await runLanes(ctx, settings.rate, deadline);
    const elapsed = (performance.now() - samples.started) / 1000;
    await sampling;
    const attacked = { headers: await attackers.headers.stop(), bodies: await attackers.bodies.stop() };
    const leftOver = await stagedFilesLeft(server.dataDir);
    // A last sample at the end, unless the last regular one was taken just now.
    if (elapsed - samples.last.at > 2) await samples.take();
    const { user, system } = process.cpuUsage(ownCpuBefore);
    return reportRows({
      settings,
      elapsed,
      rounds,
      ops: ctx.ops,
      server: {
        samples: samples.all,
        cpuPercent: samples.cpuPercentSinceStart(),
        peakMiB: (await processStatusKiB(server.child.pid, "VmHWM")) / 1024,
        alive: server.child.exitCode === null && server.child.signalCode === null,
        stagedFilesLeft: leftOver,
        log,
      },
      ownCpuPercent: ((user + system) / 1e6 / elapsed) * 100,
      attackers: attacked,
    });
  } finally {
    agent.destroy();
    await server.stop();
  }
}

/** Uploads the seed xorbs and registers one file per xorb plus one over all of them. */
async function storeSeeds(url: string, agent: Agent, writeToken: string): Promise<{ xorbs: SeedXorb[]; files: KnownFile[] }> {
  const data = deterministicRandomBytes(SEED_XORBS * SEED_XORB_CHUNKS * CHUNK_BYTES, 1401);
  const headers = { authorization: `Bearer ${writeToken}` };
  const xorbs: SeedXorb[] = [];
  const sealed: SealedXorb[] = [];
  for (let x = 0; x < SEED_XORBS; x++) {
    const builder = new XorbBuilder({ maxChunks: SEED_XORB_CHUNKS, maxUncompressedBytes: SEED_XORB_CHUNKS * CHUNK_BYTES });
    const chunks = Array.from({ length: SEED_XORB_CHUNKS }, (_, c) =>
      data.subarray((x * SEED_XORB_CHUNKS + c) * CHUNK_BYTES, (x * SEED_XORB_CHUNKS + c + 1) * CHUNK_BYTES),
    );
    const hashes = chunks.map((chunk) => chunkHash(chunk));
    for (const [c, chunk] of chunks.entries()) builder.add(chunk, hashes[c]);
    const xorb = builder.seal();
    await expectStatus(
      exchange(agent, `${url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { method: "POST", headers, body: xorb.bytes }),
      200,
      "seed xorb upload",
    );
    sealed.push(xorb);
    xorbs.push({ handle: xorb.handle, hashes, chunks });
  }
  const partsOf = (seed: SeedXorb) => seed.chunks.map((chunk, index) => ({ location: { xorb: seed.handle, index }, hash: seed.hashes[index], data: chunk }));
  const described = [...xorbs.map((seed) => describeFile(partsOf(seed))), describeFile(xorbs.flatMap(partsOf))];
  const shard = serializeUploadShard({ files: described.map((file) => file.shardFile), xorbs: sealed.map((xorb) => xorb.block) }, { kind: "xet-core" });
  await expectStatus(exchange(agent, `${url}/v1/shards`, { method: "POST", headers, body: shard }), 200, "seed shard upload");
  return { xorbs, files: described.map((file) => file.known) };
}

async function expectStatus(pending: Promise<Answer>, status: number, what: string): Promise<void> {
  const answer = await pending;
  if (answer.status !== status) throw new Error(`${what} answered ${answer.status}: ${answer.body.toString("utf8", 0, 500)}`);
}

/** Every lane of the workload, each running until `deadline`. */
type LaneKind = keyof typeof LANES;

/** Runs every lane of the workload until `deadline`; returns the rounds each kind of lane completed. */
async function runLanes(ctx: Context, rate: number, deadline: number): Promise<Record<LaneKind, number>> {
  const work: Record<LaneKind, (n: number, lane: number) => Promise<void>> = {
    upload: (n, lane) => uploadRound(ctx, lane, n),
    download: () => download(ctx),
    reconstruction: (n) => reconstruct(ctx, n),
    dedup: (n) => dedupQuery(ctx, n),
    token: (n) => refreshToken(ctx, n % 2 === 0 ? "read" : "write"),
  };
  const rounds: Record<LaneKind, number> = { upload: 0, download: 0, reconstruction: 0, dedup: 0, token: 0 };
  const running: Promise<void>[] = [];
  for (const kind of Object.keys(LANES) as LaneKind[]) {
    for (let lane = 0; lane < LANES[kind].lanes; lane++) {
      running.push(paced(LANES[kind].perSecond * rate, deadline, (n) => work[kind](n, lane)).then((done) => void (rounds[kind] += done)));
    }
  }
  await Promise.all(running);
  return rounds;
}

/**
 * Runs `work` `perSecond` times a second until `deadline`; late work goes on at once, without a
 * catch-up burst. Returns how many times it ran.
 */
async function paced(perSecond: number, deadline: number, work: (n: number) => Promise<void>): Promise<number> {
  const interval = 1000 / perSecond;
  // Lanes of one kind start spread over an interval, not in step.
  let next = performance.now() + Math.random() * interval;
  for (let n = 0; ; n++) {
    const wait = next - performance.now();
    if (wait > 0) await sleep(wait);
    if (performance.now() >= deadline) return n;
    await work(n);
    next = Math.max(next + interval, performance.now());
  }
}

/** One upload: the file's new chunks as one xorb, its shard, then a commit naming it. */
async function uploadRound(ctx: Context, lane: number, round: number): Promise<void> {
  const builder = new XorbBuilder({ maxChunks: NEW_CHUNKS_PER_FILE, maxUncompressedBytes: NEW_CHUNKS_PER_FILE * CHUNK_BYTES });
  const parts: FilePart[] = [];
  const newFirst = randomInt(2) === 0;
  for (let run = 0; run < FILE_CHUNKS / RUN_CHUNKS; run++) {
    if ((run % 2 === 0) === newFirst) {
      for (let i = 0; i < RUN_CHUNKS; i++) {
        const data = ctx.newChunks.next();
        const hash = chunkHash(data);
        parts.push({ location: { xorb: builder.handle, index: builder.add(data, hash) }, hash, data });
      }
    } else {
      const seed = ctx.seeds[randomInt(ctx.seeds.length)];
      const start = randomInt(SEED_XORB_CHUNKS - RUN_CHUNKS + 1);
      for (let index = start; index < start + RUN_CHUNKS; index++)
        parts.push({ location: { xorb: seed.handle, index }, hash: seed.hashes[index], data: seed.chunks[index] });
    }
  }
  const xorb = builder.seal();
  const file = describeFile(parts);
  const cas = { authorization: `Bearer ${ctx.casTokens.write}` };
  const stored = await timed(
    ctx.ops.xorb,
    () => exchange(ctx.agent, `${ctx.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { method: "POST", headers: cas, body: xorb.bytes }),
    xorb.bytes.length,
  );
  if (stored === null) return;
  const shard = serializeUploadShard({ files: [file.shardFile], xorbs: [xorb.block] }, { kind: "xet-core" });
  if ((await timed(ctx.ops.shard, () => exchange(ctx.agent, `${ctx.url}/v1/shards`, { method: "POST", headers: cas, body: shard }))) === null) return;
  ctx.files.add(file.known);
  const commit = encodeCommit({
    summary: `soak upload ${lane}.${round}`,
    operations: [{ kind: "lfsFile", path: `soak/lane-${lane}/file-${round % COMMIT_PATHS}.bin`, sha256: file.sha256Hex, size: file.known.size }],
  });
  await timed(ctx.ops.commit, () =>
    exchange(ctx.agent, `${ctx.url}/api/${REPO.type}s/${REPO.name}/commit/main`, {
      method: "POST",
      headers: { authorization: `Bearer ${ctx.hubTokens.write}`, "content-type": "application/x-ndjson" },
      body: commit,
    }),
  );
}

/** One whole-file download, recorded as a whole next to its requests. */
async function download(ctx: Context): Promise<void> {
  const file = ctx.files.pick();
  const started = performance.now();
  const outcome = await downloadAndCheck(ctx, file);
  ctx.ops.download.record(performance.now() - started, outcome, outcome === "ok" ? file.size : 0);
}

/** `ok`, or what went wrong: the reconstruction, a range, or the bytes themselves. */
async function downloadAndCheck(ctx: Context, file: KnownFile): Promise<string> {
  const headers = { authorization: `Bearer ${ctx.casTokens.read}` };
  const answer = await timed(ctx.ops.downloadReconstruction, () => exchange(ctx.agent, `${ctx.url}/v2/reconstructions/${file.hex}`, { headers }));
  if (answer === null) return "reconstruction failed";
  let plan: ReturnType<typeof parseReconstructionV2>;
  try {
    plan = parseReconstructionV2(JSON.parse(answer.body.toString("utf8")));
  } catch {
    return "malformed reconstruction";
  }
  const sources = fetchSourcesOf(plan);
  const decoded = new Map<FetchSource, DecodedChunks>();
  for (const source of [...sources.values()].flat()) {
    const range = `bytes=${source.bytes.start}-${source.bytes.end}`;
    const fetched = await timed(ctx.ops.transfer, () => exchange(ctx.agent, source.url, { headers: { range } }));
    if (fetched === null) return "transfer failed";
    try {
      decoded.set(source, decodeChunkStream(fetched.body, source.chunks.end - source.chunks.start, `xorb ${source.xorbHex}`));
    } catch {
      return "undecodable range";
    }
  }
  // The file hash over the hashes of the decoded chunks, term by term: any wrong byte changes it.
  const leaves: MerkleEntry[] = [];
  for (const term of plan.terms) {
    const source = sources.get(term.hash)?.find((candidate) => coversTerm(candidate, term));
    if (source === undefined) return "term without a range";
    const chunks = decoded.get(source)!;
    for (let c = term.range.start; c < term.range.end; c++) {
      const i = c - source.chunks.start;
      leaves.push({ hash: chunks.hashes[i], size: chunks.chunks[i].length });
    }
  }
  const size = leaves.reduce((sum, leaf) => sum + leaf.size, 0);
  return size === file.size && hashToHex(fileHash(leaves)) === file.hex ? "ok" : "hash mismatch";
}

async function reconstruct(ctx: Context, n: number): Promise<void> {
  const file = ctx.files.pick();
  const version = n % 4 === 3 ? 1 : 2;
  const headers: Record<string, string> = { authorization: `Bearer ${ctx.casTokens.read}` };
  if (n % 2 === 1) {
    const start = randomInt(file.size);
    headers.range = `bytes=${start}-${randomInt(start, file.size)}`;
  }
  await timed(ctx.ops.reconstruction, () => exchange(ctx.agent, `${ctx.url}/v${version}/reconstructions/${file.hex}`, { headers }));
}

async function dedupQuery(ctx: Context, n: number): Promise<void> {
  const hit = n % 2 === 0;
  const hex = hit ? ctx.files.pick().firstChunkHex : randomBytes(32).toString("hex");
  const headers = { authorization: `Bearer ${ctx.casTokens.read}` };
  await timed(hit ? ctx.ops.dedupHit : ctx.ops.dedupMiss, () => exchange(ctx.agent, `${ctx.url}/v1/chunks/default-merkledb/${hex}`, { headers }));
}

async function refreshToken(ctx: Context, access: "read" | "write"): Promise<void> {
  const op = access === "read" ? ctx.ops.readToken : ctx.ops.writeToken;
  const answer = await timed(op, () => exchange(ctx.agent, ctx.tokenUrl(access), { headers: { authorization: `Bearer ${ctx.hubTokens[access]}` } }));
  if (answer === null) return;
  const token = (JSON.parse(answer.body.toString("utf8")) as { accessToken?: unknown }).accessToken;
  if (typeof token === "string") ctx.casTokens[access] = token;
}

// ——— attackers ———

interface Attackers {
  headers: SlowClients;
  bodies: SlowClients;
}

function startAttackers(ctx: Context, port: number): Attackers {
  const headers = new SlowClients({
    port,
    slots: SLOW_HEADER_SLOTS,
    opening: () => "GET /healthz HTTP/1.1\r\nHost: castor\r\n",
    drip: (n) => `X-Slow-${n}: ${n}\r\n`,
    everyMs: DRIP_EVERY_MS,
  });
  // A real xorb's body, so castor validates and stages what arrives.
  const builder = new XorbBuilder({ maxChunks: NEW_CHUNKS_PER_FILE, maxUncompressedBytes: NEW_CHUNKS_PER_FILE * CHUNK_BYTES });
  for (let i = 0; i < NEW_CHUNKS_PER_FILE; i++) {
    const data = ctx.newChunks.next();
    builder.add(data, chunkHash(data));
  }
  const xorb = builder.seal();
  const body = xorb.bytes;
  const bodies = new SlowClients({
    port,
    slots: SLOW_BODY_SLOTS,
    opening: () =>
      Buffer.concat([
        Buffer.from(
          `POST /v1/xorbs/default/${hashToHex(xorb.info.hash)} HTTP/1.1\r\nHost: castor\r\nAuthorization: Bearer ${ctx.casTokens.write}\r\nContent-Length: ${body.length}\r\n\r\n`,
        ),
        body.subarray(0, SLOW_BODY_FIRST_BYTES),
      ]),
    drip: (n) => body.subarray(SLOW_BODY_FIRST_BYTES + n * SLOW_BODY_DRIP_BYTES, SLOW_BODY_FIRST_BYTES + (n + 1) * SLOW_BODY_DRIP_BYTES),
    everyMs: DRIP_EVERY_MS,
  });
  headers.start();
  bodies.start();
  return { headers, bodies };
}

// ——— the server: memory, log ———

interface ServerSample {
  /** Seconds since the workload started. */
  at: number;
  rssMiB: number;
  /** From the server's /metrics: V8's heap in use and reserved, and memory outside it (Buffers). */
  heapUsedMiB: number;
  heapTotalMiB: number;
  externalMiB: number;
  /** The 99th percentile of the event loop's delay since the previous scrape (prom-client resets it), in ms. */
  loopLagP99Ms: number;
  /** CPU used since the previous sample, in % of one core (NaN for the first). */
  cpuPercent: number;
  descriptors: number;
}

/**
 * The server process as /proc and its /metrics show it, sampled from the start of the
 * workload. The heap figures tell a leak in JavaScript objects from memory held elsewhere.
 */
class ServerSamples {
  readonly started = performance.now();
  readonly all: ServerSample[] = [];
  private readonly cpuAtStart: number;
  private previousCpu: { at: number; seconds: number };

  constructor(
    private readonly pid: number | undefined,
    private readonly metricsUrl: string,
    private readonly agent: Agent,
  ) {
    this.cpuAtStart = processCpuSeconds(pid) ?? Number.NaN;
    this.previousCpu = { at: 0, seconds: this.cpuAtStart };
  }

  get last(): ServerSample {
    return this.all[this.all.length - 1];
  }

  async take(): Promise<ServerSample> {
    const at = (performance.now() - this.started) / 1000;
    const cpu = processCpuSeconds(this.pid) ?? Number.NaN;
    const metrics = await this.metrics();
    const sample: ServerSample = {
      at: Math.round(at),
      rssMiB: (await processStatusKiB(this.pid, "VmRSS")) / 1024,
      heapUsedMiB: metrics("nodejs_heap_size_used_bytes") / MiB,
      heapTotalMiB: metrics("nodejs_heap_size_total_bytes") / MiB,
      externalMiB: metrics("nodejs_external_memory_bytes") / MiB,
      loopLagP99Ms: metrics("nodejs_eventloop_lag_p99_seconds") * 1000,
      cpuPercent: at - this.previousCpu.at < 1 ? Number.NaN : ((cpu - this.previousCpu.seconds) / (at - this.previousCpu.at)) * 100,
      descriptors: await openDescriptorCount(this.pid),
    };
    this.previousCpu = { at, seconds: cpu };
    this.all.push(sample);
    return sample;
  }

  /** The server's metrics now, by name (NaN for one it did not give, or when it did not answer). */
  private async metrics(): Promise<(name: string) => number> {
    let text = "";
    try {
      const answer = await exchange(this.agent, this.metricsUrl);
      if (answer.status === 200) text = answer.body.toString("utf8");
    } catch {
      // The samples show NaN: the process gone or stuck is reported by the other figures.
    }
    return (name) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? Number.NaN);
  }

  cpuPercentSinceStart(): number {
    const { at, seconds } = this.previousCpu;
    return ((seconds - this.cpuAtStart) / at) * 100;
  }
}

/** Calls `sample` at 0, 30, 60 … s after `started`, the last one no later than `deadline`. */
async function sampleEvery(settings: SoakSettings, started: number, deadline: number, sample: () => Promise<void>): Promise<void> {
  for (let k = 0; k * SAMPLE_SECONDS <= settings.seconds; k++) {
    const due = Math.min(started + k * SAMPLE_SECONDS * 1000, deadline);
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    await sample();
  }
}

/** How long castor may take to remove what the cut uploads staged. */
const STAGED_WAIT_MS = 5000;

/**
 * Files in the data dir's staging folders, polled until there are none or STAGED_WAIT_MS
 * passed: every upload the workload and the slow-body attacker started has ended by now, so
 * anything left leaks disk.
 */
async function stagedFilesLeft(dataDir: string): Promise<string[]> {
  const deadline = performance.now() + STAGED_WAIT_MS;
  for (;;) {
    const found: string[] = [];
    for (const dir of [join("blobs", "tmp"), SPOOL_DIR_NAME]) {
      for (const name of await readdir(join(dataDir, dir)).catch(() => [] as string[])) found.push(join(dir, name));
    }
    if (found.length === 0 || performance.now() > deadline) return found;
    await sleep(100);
  }
}

interface ServerLog {
  warnings: number;
  errors: number;
  /** The first error lines' messages. */
  firstErrors: string[];
}

const MAX_QUOTED_ERRORS = 3;

/**
 * castor logs a line per request. The test helper keeps every line (for tests' assertions),
 * which over a 10-minute run would grow this process by tens of MB and cost it parsing time:
 * its listener is replaced by one that counts warnings (pino level 40) and errors (≥ 50) only.
 */
function watchServerLog(server: ServerProcess): ServerLog {
  const log: ServerLog = { warnings: 0, errors: 0, firstErrors: [] };
  const stdout = server.child.stdout!;
  stdout.removeAllListeners("data");
  let rest = "";
  stdout.on("data", (text: string) => {
    const lines = (rest + text).split("\n");
    rest = lines.pop()!;
    for (const line of lines) {
      const level = Number(/"level":(\d+)/.exec(line)?.[1] ?? 0);
      if (level >= 50) {
        log.errors++;
        if (log.firstErrors.length < MAX_QUOTED_ERRORS) log.firstErrors.push(messageOf(line));
      } else if (level >= 40) {
        log.warnings++;
      }
    }
  });
  return log;
}

function messageOf(line: string): string {
  try {
    const parsed = JSON.parse(line) as { msg?: unknown; err?: { message?: unknown } };
    return String(parsed.err?.message ?? parsed.msg ?? line).slice(0, 200);
  } catch {
    return line.slice(0, 200);
  }
}

// ——— reporting ———

function progress(settings: SoakSettings, sample: ServerSample, ops: Operations, attackers: Attackers): void {
  const all = Object.values(ops);
  const requests = all.filter((op) => op !== ops.download).reduce((sum, op) => sum + op.recentMs.length, 0);
  const reconstructionP99 = percentile(ops.reconstruction.recentMs, 0.99);
  const fiveXx = all.reduce((sum, op) => sum + op.serverErrors, 0);
  const unexpected = all.reduce((sum, op) => sum + op.otherUnexpected, 0);
  const headers = attackers.headers.counts();
  const bodies = attackers.bodies.counts();
  for (const op of all) op.recentMs = [];
  process.stderr.write(
    `${sample.at === 0 ? "\n" : ""}soak ${sample.at}/${settings.seconds} s: server RSS ${formatNumber(sample.rssMiB)} MiB (heap ${formatNumber(sample.heapUsedMiB)}), ` +
      `CPU ${whole(sample.cpuPercent)} %, event-loop lag p99 ${formatNumber(sample.loopLagP99Ms)} ms, ${sample.descriptors} descriptors; ` +
      (sample.at === 0
        ? "seeded; workload and attackers started (a line every 30 s)\n"
        : `${requests} requests since the last line; reconstruction p99 ${formatNumber(reconstructionP99)} ms; 5xx ${fiveXx}; other unexpected ${unexpected}; ` +
          `attackers cut: slow-header ${headers.cut}/${headers.opened}, slow-body ${bodies.cut}/${bodies.opened}\n`),
  );
}

interface RunResult {
  settings: SoakSettings;
  elapsed: number;
  /** Rounds completed per kind of lane. */
  rounds: Record<LaneKind, number>;
  ops: Operations;
  server: {
    samples: readonly ServerSample[];
    /** Over the whole workload, in % of one core. */
    cpuPercent: number;
    peakMiB: number;
    alive: boolean;
    /** Staged uploads and spooled bodies still on disk once every client has stopped. */
    stagedFilesLeft: string[];
    log: ServerLog;
  };
  /** This process's CPU over the workload (load generator and attackers), in % of one core. */
  ownCpuPercent: number;
  attackers: { headers: SlowClientReport; bodies: SlowClientReport };
}

function reportRows(result: RunResult): BenchRow[] {
  const { settings, elapsed, ops } = result;
  const all = Object.values(ops);
  const lanes = Object.entries(LANES)
    .map(([kind, lane]) => `${kind} ${lane.lanes} × ${lane.perSecond * settings.rate}/s`)
    .join(", ");
  const rows: BenchRow[] = [
    benchRow(GROUP, "workload duration", elapsed, "s", {
      note: `one compiled castor serve (SQLite + files, default limits); lanes ${lanes}; CASTOR_SOAK_SECONDS=${settings.seconds}, CASTOR_SOAK_RATE=${settings.rate}`,
    }),
  ];
  const offered = (kind: LaneKind) => LANES[kind].lanes * LANES[kind].perSecond * settings.rate * elapsed;
  const kinds = Object.keys(LANES) as LaneKind[];
  const achieved = kinds.reduce((sum, kind) => sum + result.rounds[kind], 0) / kinds.reduce((sum, kind) => sum + offered(kind), 0);
  rows.push(
    benchRow(GROUP, "rounds done / rounds offered", achieved, "ratio", {
      note: `${kinds.map((kind) => `${kind} ${formatNumber(result.rounds[kind] / elapsed)}/${formatNumber(offered(kind) / elapsed)} per s`).join(", ")}; under 1, the lanes waited on castor (or on a busy machine) and fell behind`,
    }),
  );
  const requests = all.filter((op) => op !== ops.download).reduce((sum, op) => sum + op.latenciesMs.length, 0);
  rows.push(
    benchRow(GROUP, "requests, all operations", requests / elapsed, "req/s", { note: `${requests} in all (a whole download counted by its requests)` }),
  );
  for (const op of all) {
    const moved =
      op.bytes > 0 && (op === ops.xorb || op === ops.transfer || op === ops.download) ? `; ${formatNumber(megabytesPerSecond(op.bytes, elapsed))} MB/s` : "";
    rows.push(
      benchRow(GROUP, op.name, op.latenciesMs.length / elapsed, "ops/s", { note: `${op.latenciesMs.length} in all: ${outcomesText(op.outcomes)}${moved}` }),
      benchRow(GROUP, `${op.name}: p50`, percentile(op.latenciesMs, 0.5), "ms"),
      benchRow(GROUP, `${op.name}: p99`, percentile(op.latenciesMs, 0.99), "ms", {
        ...(op === ops.reconstruction ? { target: { atMost: RECONSTRUCTION_P99_TARGET_MS }, note: "while the attackers run" } : {}),
      }),
    );
  }
  const perOperation = (count: (op: Operation) => number) =>
    all
      .filter((op) => count(op) > 0)
      .map((op) => `${op.name}: ${outcomesText(op.outcomes, (outcome) => outcome !== op.expected)}`)
      .join("; ") || "none";
  rows.push(
    benchRow(
      GROUP,
      "5xx answers, all operations",
      all.reduce((sum, op) => sum + op.serverErrors, 0),
      "answers",
      { target: { atMost: 0 }, note: perOperation((op) => op.serverErrors) },
    ),
    benchRow(
      GROUP,
      "other unexpected outcomes, all operations",
      all.reduce((sum, op) => sum + op.otherUnexpected, 0),
      "requests",
      { note: perOperation((op) => op.otherUnexpected) },
    ),
    benchRow(
      GROUP,
      "files uploaded (xorb + shard)",
      ops.shard.count((outcome) => outcome === "200"),
      "files",
      {
        note: `${formatNumber(ops.xorb.bytes / 1e6)} MB of new chunks stored; half of each file's chunks already stored`,
      },
    ),
    ...serverRows(result),
    ...attackerRows(
      "slow-header",
      result.attackers.headers,
      DEFAULT_CONNECTION_LIMITS.headerTimeoutMs / 1000,
      `${SLOW_HEADER_SLOTS} connections, a header line every ${DRIP_EVERY_MS / 1000} s`,
    ),
    ...attackerRows(
      "slow-body",
      result.attackers.bodies,
      DEFAULT_CONNECTION_LIMITS.bodyTimeoutMs / 1000,
      `${SLOW_BODY_SLOTS} xorb uploads at ${(SLOW_BODY_DRIP_BYTES * 1000) / DRIP_EVERY_MS} bytes/s`,
    ),
  );
  return rows;
}

/** A rounded figure, or a dash when there is none (a sample that could not be taken). */
function whole(value: number): string {
  return Number.isNaN(value) ? "–" : String(Math.round(value));
}

/** `200×1234, 404×2`, the most frequent first; only the outcomes `keep` accepts. */
function outcomesText(outcomes: ReadonlyMap<string, number>, keep: (outcome: string) => boolean = () => true): string {
  return (
    [...outcomes]
      .filter(([outcome]) => keep(outcome))
      .sort((a, b) => b[1] - a[1])
      .map(([outcome, n]) => `${outcome}×${n}`)
      .join(", ") || "none"
  );
}

function serverRows(result: RunResult): BenchRow[] {
  const { samples, log } = result.server;
  const warmup = result.settings.seconds * WARMUP_SHARE;
  const after = samples.filter((sample) => sample.at >= warmup && Number.isFinite(sample.rssMiB));
  const series = (value: (sample: ServerSample) => number) => samples.map((sample) => `${sample.at} s: ${whole(value(sample))}`).join(", ");
  const growth = fittedGrowth(after);
  return [
    benchRow(GROUP, "server RSS after warm-up, highest sample", after.length > 0 ? Math.max(...after.map((sample) => sample.rssMiB)) : Number.NaN, "MiB", {
      target: { atMost: RSS_TARGET_MIB },
      note: `VmRSS every ${SAMPLE_SECONDS} s (MiB): ${series((sample) => sample.rssMiB)}; warm-up: the first ${formatNumber(warmup)} s`,
    }),
    benchRow(GROUP, "server RSS growth after warm-up", growth.mib, "MiB", { target: { atMost: RSS_GROWTH_TARGET_MIB }, note: growth.note }),
    benchRow(GROUP, "server peak RSS (VmHWM), whole run", result.server.peakMiB, "MiB", { note: "seeding included" }),
    benchRow(GROUP, "server V8 heap in use, last sample", samples[samples.length - 1].heapUsedMiB, "MiB", {
      note: `every ${SAMPLE_SECONDS} s (MiB, in use / reserved / external): ${samples
        .map((sample) => `${sample.at} s: ${[sample.heapUsedMiB, sample.heapTotalMiB, sample.externalMiB].map(whole).join("/")}`)
        .join(", ")}`,
    }),
    benchRow(GROUP, "server CPU during the workload", result.server.cpuPercent, "% of a core", {
      note: `per ${SAMPLE_SECONDS} s: ${series((sample) => sample.cpuPercent)}; the load generator and attackers (this process): ${Math.round(result.ownCpuPercent)} %`,
    }),
    benchRow(
      GROUP,
      "server event-loop lag p99, worst 30 s",
      samples.length > 1 ? Math.max(...samples.slice(1).map((sample) => sample.loopLagP99Ms)) : Number.NaN,
      "ms",
      {
        note: `per ${SAMPLE_SECONDS} s (ms): ${series((sample) => sample.loopLagP99Ms)}; from /metrics, reset at each scrape`,
      },
    ),
    benchRow(GROUP, "server open descriptors at the end", samples[samples.length - 1].descriptors, "descriptors", {
      note: `every ${SAMPLE_SECONDS} s: ${series((sample) => sample.descriptors)} (the attackers hold ${SLOW_HEADER_SLOTS + SLOW_BODY_SLOTS} connections)`,
    }),
    benchRow(GROUP, "server process alive at the end", result.server.alive ? 1 : 0, "1 = yes", { target: { atLeast: 1 } }),
    benchRow(GROUP, "staged upload files left after the run", result.server.stagedFilesLeft.length, "files", {
      target: { atMost: 0 },
      note: `blobs/tmp and ${SPOOL_DIR_NAME}/ of the data dir, ${STAGED_WAIT_MS / 1000} s after the last client stopped${result.server.stagedFilesLeft.length > 0 ? `: ${result.server.stagedFilesLeft.slice(0, 3).join(", ")}` : ""}`,
    }),
    benchRow(GROUP, "server error log lines", log.errors, "lines", {
      note: `${log.warnings} warnings${log.firstErrors.length > 0 ? `; first errors: ${log.firstErrors.join(" | ")}` : ""}`,
    }),
  ];
}

/**
 * How much the RSS grew over the samples after warm-up, read off a least-squares line through
 * them: one sample caught at a garbage collection's high or low then moves it little.
 */
function fittedGrowth(samples: readonly ServerSample[]): { mib: number; note: string } {
  if (samples.length < 2) return { mib: 0, note: `${samples.length} sample after warm-up: run longer to see a trend` };
  const n = samples.length;
  const meanT = samples.reduce((sum, s) => sum + s.at, 0) / n;
  const meanM = samples.reduce((sum, s) => sum + s.rssMiB, 0) / n;
  let covariance = 0;
  let variance = 0;
  for (const s of samples) {
    covariance += (s.at - meanT) * (s.rssMiB - meanM);
    variance += (s.at - meanT) ** 2;
  }
  const slope = covariance / variance;
  const span = samples[n - 1].at - samples[0].at;
  const lastMinusFirst = samples[n - 1].rssMiB - samples[0].rssMiB;
  return {
    mib: slope * span,
    note: `least-squares line through ${n} samples over ${span} s: ${formatNumber(slope * 60)} MiB/min; last − first sample ${formatNumber(lastMinusFirst)} MiB`,
  };
}

function attackerRows(kind: string, report: SlowClientReport, limitSeconds: number, shape: string): BenchRow[] {
  const longest = Math.max(0, ...report.heldSeconds, report.oldestAtStopSeconds);
  return [
    benchRow(GROUP, `${kind} attacker: connections cut by castor`, report.cut, "connections", {
      note: `${shape}, reconnecting after each cut; ${report.opened} opened; endings ${outcomesText(report.endings)}; ${report.openAtStop} still open at the end (oldest ${formatNumber(report.oldestAtStopSeconds)} s)`,
    }),
    benchRow(GROUP, `${kind} attacker: longest hold`, longest, "s", {
      ...(report.heldSeconds.length > 0 ? { median: median(report.heldSeconds) } : {}),
      target: { atMost: limitSeconds + CUT_SLACK_SECONDS },
      note: `castor's default limit: ${limitSeconds} s; median column: the cut connections' median hold`,
    }),
  ];
}
