/**
 * Metadata at scale (issue 15): how castor's answers change as the metadata grows to what a
 * team accumulates — 1,000,000 files over 10,050,000 chunks in 150,000 xorbs, 1,000 repositories
 * of 10 commits each — on SQLite and (with CASTOR_TEST_DATABASE_URL set) on PostgreSQL.
 *
 * The store is filled through the stores' own APIs (`importXorbs`, `registerShard`,
 * `advanceBranch`), a repository at a time, with a dedup index entry for each file's first chunk
 * and each chunk eligible for global dedup, as registrations make them; no blob is written, as
 * nothing measured reads one.
 * At three sizes — one repository ("empty": 0.1 %), 10 % and 100 % — the compiled `castor serve`
 * is started on the store and measured over HTTP, one request at a time on a keep-alive
 * connection, by a client that writes prepared bytes and frames the answers (`timed`):
 *
 * - start-up: spawn to the "listening" log line;
 * - V2 reconstruction p50/p99 of a hot file (the same one again and again) and of cold ones (a
 *   different file of a different repository each time, asked with a token that repository's
 *   client has used before, as a client session does), as the client sees them and as the
 *   server logs them (`durationMs`: from the request's arrival to the answer's end);
 * - the first request with a token the server has not seen (a dedup miss with a fresh token of
 *   a sampled repository): its signature is checked then, and only then;
 * - dedup query p50/p99 for indexed chunks (hits) and unknown ones (misses);
 * - shard registration throughput, in chunk references per second: shards of 1,000 new files,
 *   each over a random one of all the stored xorbs (the worst case: every file's xorb is loaded
 *   and leased apart), and shards of 1,000 new files over the 256 xorbs recorded last (as an
 *   upload's shard names the xorbs it has just sent);
 * - a one-file commit, a tree listing (100 entries) and a commit listing, p50/p99;
 * - database size per chunk.
 *
 * Goals (issue 15): no figure worse than 2× from the empty store to the full one, and
 * reconstruction p99 < 5 ms at full size. `CASTOR_BENCH_SCALE=0.1` runs everything at a tenth of
 * the size (for trying the group out; the figures are then not the issue's).
 */
import { loadavg } from "node:os";
import { fileHash, hashToHex, isGlobalDedupEligible, verificationHash, type Hash } from "../src/format/hash.js";
import type { ShardFile } from "../src/format/shard.js";
import { serializeUploadShard } from "../src/format/shard-writer.js";
import { buildCommit, initialCommit, xetFileEntry } from "../src/hub/history.js";
import { createAdminHub, OPERATOR } from "../src/hub/index.js";
import type { DatedXorb, FileRecord, MetadataStore, ShardRegistration, TreeEntry } from "../src/metadata/store.js";
import { startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { seededRandom } from "../test/helpers/vectors.js";
import { benchRow, sized, type BenchRow, type BenchTarget } from "./lib.js";
import { prepareRequest, runLightLoad } from "./support/light-load.js";
import { chunkLength, labelHash, onEachMetadataBackend, syntheticXorb, termsOver, treeOf, type MetadataBackend } from "./support/synthetic-metadata.js";

const GROUP = "scale";
/** A smoke run: 10 repositories, 1,500 xorbs. */
const SCALE = Number(process.env.CASTOR_BENCH_SCALE ?? sized(1, 0.01));
const REPOS = Math.round(1_000 * SCALE);
const COMMITS_PER_REPO = 10;
const FILES_PER_COMMIT = 100;
const FILES_PER_REPO = COMMITS_PER_REPO * FILES_PER_COMMIT;
const FILES = REPOS * FILES_PER_REPO;
const CHUNKS_PER_XORB = 67;
const XORBS = Math.round(150_000 * SCALE);
const CHUNKS = XORBS * CHUNKS_PER_XORB;
/** Repositories filled when each measurement is taken: one, a tenth, all. */
const STAGES = [
  { label: "empty (1 repo)", repos: 1 },
  { label: "10 %", repos: Math.round(REPOS / 10) },
  { label: "100 %", repos: REPOS },
];
const SAMPLES = sized(
  { hot: 1_000, cold: 500, newTokens: 200, dedupHits: 300, dedupMisses: 300, shards: 5, commits: 100, listings: 300 },
  { hot: 50, cold: 20, newTokens: 10, dedupHits: 20, dedupMisses: 20, shards: 1, commits: 10, listings: 20 },
);
const FILES_PER_MEASURED_SHARD = 1_000;
/** Xorbs an upload's shard names in the second registration figure: ~16 GiB of 64 MiB xorbs. */
const RECENT_XORBS = 256;
const AUTHOR = "bench";
const MiB = 1024 * 1024;

type Say = (line: string) => void;

export async function run(): Promise<BenchRow[]> {
  if (!(SCALE > 0 && SCALE <= 1)) throw new Error(`CASTOR_BENCH_SCALE must be in (0, 1], got ${process.env.CASTOR_BENCH_SCALE}`);
  const say: Say = (line) => process.stderr.write(`\n  scale: ${line}`);
  return onEachMetadataBackend(GROUP, (backend) => benchBackend(backend, say));
}

/** One measurement of a stage. */
interface StageFigures {
  startupMs: number;
  hot: Latencies;
  hotServer: Latencies;
  cold: Latencies;
  coldServer: Latencies;
  newToken: Latencies;
  dedupHit: Latencies;
  dedupMiss: Latencies;
  registrationChunksPerSecond: number;
  recentRegistrationChunksPerSecond: number;
  commit: Latencies;
  tree: Latencies;
  commits: Latencies;
  bytesPerChunk: number;
  chunks: number;
}

async function benchBackend(backend: MetadataBackend, say: Say): Promise<BenchRow[]> {
  const { name } = backend;
  const data = new SyntheticMetadata();
  const figures: { stage: string; figures: StageFigures; fillSeconds: number }[] = [];
  const store = await backend.open();
  let adminToken: string;
  try {
    adminToken = (await createAdminHub(store).tokens.create(OPERATOR, { repos: "all", access: "write", expiresAt: null })).secret;
  } catch (error) {
    await store.close();
    throw error;
  }
  let filled = 0;
  let openStore: MetadataStore | null = store;
  try {
    for (const stage of STAGES) {
      const loadBefore = loadavg()[0];
      const started = performance.now();
      openStore ??= await backend.open();
      for (; filled < stage.repos; filled++) {
        await data.fillRepo(openStore, filled);
        if ((filled + 1) % Math.max(1, Math.round(REPOS / 20)) === 0) say(`${name}: ${filled + 1}/${REPOS} repositories filled`);
      }
      const fillSeconds = (performance.now() - started) / 1000;
      // The server gets the store to itself, as in production: the fill's connection closes.
      await openStore.close();
      openStore = null;
      say(`${name} at ${stage.label}: measuring (load ${loadBefore.toFixed(1)})`);
      figures.push({ stage: stage.label, fillSeconds, figures: await measure(backend, data, filled, adminToken, say) });
    }
  } finally {
    await openStore?.close();
  }
  return report(name, figures);
}

// ---------------------------------------------------------------------------------------------
// Measuring a stage.

interface Latencies {
  p50: number;
  p99: number;
}

function latencies(samplesMs: number[]): Latencies {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { p50: at(0.5), p99: at(0.99) };
}

/**
 * Latencies the server logged (`durationMs`) for the `count` requests sent with an
 * `x-request-id` starting with `phase`, once all of them are logged.
 */
async function serverLatencies(server: ServerProcess, phase: string, count: number): Promise<Latencies> {
  const logged = () => server.logLines().filter((line) => line.msg === "request" && String(line.reqId).startsWith(phase));
  await server.waitForRequests(0, () => logged().length >= count);
  const samples = logged().map((line) => Number(line.durationMs));
  if (samples.length !== count) throw new Error(`the server logged ${samples.length} requests of ${phase}, expected ${count}`);
  return latencies(samples);
}

interface TimedRequest {
  method?: "GET" | "POST";
  path: string;
  headers: Record<string, string>;
  body?: string;
}

/**
 * Sends `requests` one after another on one keep-alive connection and times each, from its
 * bytes written to its answer's last byte read: bytes built beforehand, answers framed, not
 * parsed (support/light-load.ts). With `fetch` the client's own work (undici's request and
 * header objects, its garbage) added ~0.4 ms to every median and most of every p99 here, which
 * is not what castor's answers cost a client such as hf_xet.
 */
async function timed(server: ServerProcess, expectedStatus: number, requests: readonly TimedRequest[]): Promise<Latencies> {
  const { host, port } = new URL(server.url);
  const prepared = requests.map((request) =>
    prepareRequest(request.method ?? "GET", request.path, host, request.headers, request.body === undefined ? [] : [Buffer.from(request.body)]),
  );
  const samples: number[] = [];
  await runLightLoad({ port: Number(port), connections: 1, expectedStatus, requests: prepared.length, nextRequest: (i) => prepared[i], latenciesMs: samples });
  return latencies(samples);
}

async function expectStatus(response: Response, status: number, what: string): Promise<void> {
  const body = await response.arrayBuffer();
  if (response.status !== status) throw new Error(`${what}: HTTP ${response.status}, expected ${status}: ${Buffer.from(body).toString("utf8").slice(0, 300)}`);
}

async function measure(backend: MetadataBackend, data: SyntheticMetadata, repos: number, adminToken: string, say: Say): Promise<StageFigures> {
  const started = performance.now();
  const server: ServerProcess = await startCastorServer({ compiled: true, dataDir: backend.dataDir, env: backend.env, readyTimeoutMs: 600_000 });
  const startupMs = performance.now() - started;
  try {
    const hubHeaders = { authorization: `Bearer ${adminToken}` };
    const hub = (path: string) => fetch(`${server.url}${path}`, { headers: hubHeaders });
    const casTokens = new Map<string, string>();
    const casHeaders = async (repo: number, access: "read" | "write"): Promise<Record<string, string>> => {
      const key = `${repo} ${access}`;
      let token = casTokens.get(key);
      if (token === undefined) {
        const response = await hub(`/api/models/${repoName(repo)}/xet-${access}-token/main`);
        if (response.status !== 200) throw new Error(`token for ${repoName(repo)}: HTTP ${response.status}`);
        token = ((await response.json()) as { accessToken: string }).accessToken;
        casTokens.set(key, token);
      }
      return { authorization: `Bearer ${token}` };
    };
    // Seeded, so each stage samples the same way on both backends.
    const random = seededRandom(repos);
    const pick = (n: number) => Math.floor(random() * n);

    // Tokens are fetched before timing, so only the request itself is timed. The server checks a
    // token's signature on its first use only: that first use is a figure of its own (fresh
    // tokens of sampled repositories, each used once, by a dedup miss after a few untimed ones),
    // and the tokens the file requests use have each been used once before, as in a client's
    // session, so those requests measure the files.
    const dedupMissPath = (label: string) => `/v1/chunks/default-merkledb/${hashToHex(labelHash(`scale ${label} ${repos}`))}`;
    const freshTokens: TimedRequest[] = [];
    for (let i = 0; i < SAMPLES.newTokens + 5; i++) {
      const response = await hub(`/api/models/${repoName(pick(repos))}/xet-read-token/main`);
      if (response.status !== 200) throw new Error(`a read token: HTTP ${response.status}`);
      const { accessToken } = (await response.json()) as { accessToken: string };
      freshTokens.push({ path: dedupMissPath(`token ${i}`), headers: { authorization: `Bearer ${accessToken}` } });
    }
    await timed(server, 404, freshTokens.slice(0, 5));
    const newToken = await timed(server, 404, freshTokens.slice(5));
    const coldFiles = Array.from({ length: SAMPLES.cold }, () => pick(repos * FILES_PER_REPO));
    const coldRepos = [...new Set(coldFiles.map(repoOfFile))];
    const firstUses: TimedRequest[] = [];
    for (const repo of coldRepos) firstUses.push({ path: dedupMissPath(`first use ${repo}`), headers: await casHeaders(repo, "read") });
    await timed(server, 404, firstUses);
    // Request ids name the phase, so the server's log lines of each can be told apart.
    const reconstructions = async (files: readonly number[], phase: string) => {
      const requests: TimedRequest[] = [];
      for (const [i, file] of files.entries()) {
        const headers = { ...(await casHeaders(repoOfFile(file), "read")), "x-request-id": `${phase}${i}` };
        requests.push({ path: `/v2/reconstructions/${hashToHex(data.fileRecord(file).hash)}`, headers });
      }
      return requests;
    };
    const hotFile = 17;
    await timed(server, 200, await reconstructions(Array(20).fill(hotFile), "warm-"));
    const hot = await timed(server, 200, await reconstructions(Array(SAMPLES.hot).fill(hotFile), "hot-"));
    const hotServer = await serverLatencies(server, "hot-", SAMPLES.hot);
    const cold = await timed(server, 200, await reconstructions(coldFiles, "cold-"));
    const coldServer = await serverLatencies(server, "cold-", SAMPLES.cold);

    const indexed = data.indexedChunks();
    const readHeaders = await casHeaders(0, "read");
    const dedupHit = await timed(
      server,
      200,
      Array.from({ length: SAMPLES.dedupHits }, () => ({
        path: `/v1/chunks/default-merkledb/${hashToHex(chunkHash(indexed[pick(indexed.length)]))}`,
        headers: readHeaders,
      })),
    );
    const dedupMiss = await timed(
      server,
      404,
      Array.from({ length: SAMPLES.dedupMisses }, (_, i) => ({ path: dedupMissPath(`miss ${i}`), headers: readHeaders })),
    );

    const writeHeaders = await casHeaders(0, "write");
    const registration = async (shard: (s: number) => ShardFile[]): Promise<number> => {
      let chunkRefs = 0;
      let registrationMs = 0;
      for (let s = 0; s < SAMPLES.shards; s++) {
        const files = shard(s);
        const body = serializeUploadShard({ files, xorbs: [] }, { kind: "xet-core" });
        const at = performance.now();
        await expectStatus(await fetch(`${server.url}/v1/shards`, { method: "POST", body, headers: writeHeaders }), 200, "shard registration");
        registrationMs += performance.now() - at;
        chunkRefs += files.reduce((sum, file) => sum + file.terms.reduce((n, term) => n + term.chunkEnd - term.chunkStart, 0), 0);
      }
      return chunkRefs / (registrationMs / 1000);
    };
    const registrationChunksPerSecond = await registration((s) => data.newFilesOverStoredXorbs(`${repos}/${s}`, FILES_PER_MEASURED_SHARD, repos, random));
    const recentRegistrationChunksPerSecond = await registration((s) =>
      data.newFilesOverRecentXorbs(s * FILES_PER_MEASURED_SHARD, FILES_PER_MEASURED_SHARD, repos),
    );

    const commit = await timed(
      server,
      200,
      Array.from({ length: SAMPLES.commits }, (_, i) => ({
        method: "POST" as const,
        path: `/api/models/${repoName(pick(repos))}/commit/main`,
        headers: { ...hubHeaders, "content-type": "application/x-ndjson" },
        body: [
          { key: "header", value: { summary: `bench ${i}`, description: "" } },
          { key: "file", value: { path: `notes/${repos}-${i}.txt`, encoding: "base64", content: Buffer.from(`note ${i}\n`).toString("base64") } },
        ]
          .map((line) => `${JSON.stringify(line)}\n`)
          .join(""),
      })),
    );
    const tree = await timed(
      server,
      200,
      Array.from({ length: SAMPLES.listings }, () => ({
        path: `/api/models/${repoName(pick(repos))}/tree/main/${folderName(pick(COMMITS_PER_REPO))}`,
        headers: hubHeaders,
      })),
    );
    const commits = await timed(
      server,
      200,
      Array.from({ length: SAMPLES.listings }, () => ({ path: `/api/models/${repoName(pick(repos))}/commits/main`, headers: hubHeaders })),
    );
    say(`measured in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    const chunks = data.chunksOf(repos);
    return {
      startupMs,
      hot,
      hotServer,
      cold,
      coldServer,
      newToken,
      dedupHit,
      dedupMiss,
      registrationChunksPerSecond,
      recentRegistrationChunksPerSecond,
      commit,
      tree,
      commits,
      bytesPerChunk: (await backend.databaseBytes()) / chunks,
      chunks,
    };
  } finally {
    await server.stop();
  }
}

function report(name: string, stages: { stage: string; figures: StageFigures; fillSeconds: number }[]): BenchRow[] {
  const rows: BenchRow[] = [];
  const empty = stages[0].figures;
  const count = (value: number) => value.toLocaleString("en-US");
  for (const [index, { stage, figures, fillSeconds }] of stages.entries()) {
    const full = index === stages.length - 1;
    /** Targets compare with the empty store, so it has none itself. */
    const goal = (target: BenchTarget) => (index === 0 ? undefined : target);
    /** Latency rows: the 2× goal against the empty store, and for reconstructions at full size also < 5 ms. */
    const latencyRows = (metric: string, value: Latencies, base: Latencies, absoluteMs?: number) => {
      const p99Target = full && absoluteMs !== undefined ? Math.min(absoluteMs, 2 * base.p99) : 2 * base.p99;
      rows.push(benchRow(GROUP, `${name} ${stage}: ${metric} p50`, value.p50, "ms", { note: `empty store: ${base.p50.toFixed(2)} ms` }));
      rows.push(benchRow(GROUP, `${name} ${stage}: ${metric} p99`, value.p99, "ms", { target: goal({ atMost: p99Target }) }));
    };
    rows.push(
      benchRow(GROUP, `${name} ${stage}: store`, figures.chunks, "chunks", {
        note: `filled to here in ${fillSeconds.toFixed(0)} s; ${((figures.bytesPerChunk * figures.chunks) / MiB).toFixed(0)} MiB of database`,
      }),
    );
    rows.push(benchRow(GROUP, `${name} ${stage}: castor serve start-up`, figures.startupMs, "ms", { target: goal({ atMost: 2 * empty.startupMs }) }));
    latencyRows("V2 reconstruction, hot file", figures.hot, empty.hot, 5);
    latencyRows("V2 reconstruction, hot file, server's own time", figures.hotServer, empty.hotServer, 5);
    latencyRows("V2 reconstruction, cold files", figures.cold, empty.cold, 5);
    latencyRows("V2 reconstruction, cold files, server's own time", figures.coldServer, empty.coldServer, 5);
    latencyRows("first request with a new token (dedup miss)", figures.newToken, empty.newToken);
    latencyRows("dedup query, hit", figures.dedupHit, empty.dedupHit);
    latencyRows("dedup query, miss", figures.dedupMiss, empty.dedupMiss);
    rows.push(
      benchRow(GROUP, `${name} ${stage}: shard registration`, figures.registrationChunksPerSecond, "chunks/s", {
        target: goal({ atLeast: empty.registrationChunksPerSecond / 2 }),
        note: `shards of ${count(FILES_PER_MEASURED_SHARD)} new files, each over a random one of all the stored xorbs (the worst case)`,
      }),
    );
    rows.push(
      benchRow(GROUP, `${name} ${stage}: shard registration, files over the latest xorbs`, figures.recentRegistrationChunksPerSecond, "chunks/s", {
        target: goal({ atLeast: empty.recentRegistrationChunksPerSecond / 2 }),
        note: `shards of ${count(FILES_PER_MEASURED_SHARD)} new files over the ${RECENT_XORBS} xorbs recorded last, as an upload's shard names the xorbs it just sent`,
      }),
    );
    latencyRows("one-file commit", figures.commit, empty.commit);
    latencyRows("tree listing (100 entries)", figures.tree, empty.tree);
    latencyRows("commit listing", figures.commits, empty.commits);
    rows.push(
      benchRow(GROUP, `${name} ${stage}: database size per chunk`, figures.bytesPerChunk, "B", {
        target: goal({ atMost: 2 * empty.bytesPerChunk }),
      }),
    );
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// The synthetic metadata. Every hash is the SHA-256 of a label, so both backends get the same data.

function chunkHash(c: number): Hash {
  return labelHash(`scale chunk ${c}`);
}

function xorbHash(x: number): Hash {
  return labelHash(`scale xorb ${x}`);
}

/** First chunk of file `i`: the files lie end to end over the chunk stream, ~10 chunks each, boundaries anywhere in a xorb. */
function fileStart(i: number): number {
  return Math.floor((i * CHUNKS) / FILES);
}

/** A new file over chunks `start` … `start + length - 1` of xorb `x`, with the hashes a server checks. */
function newFile(x: number, start: number, length: number, sha256Label: string): ShardFile {
  const chunks = Array.from({ length }, (_, j) => x * CHUNKS_PER_XORB + start + j);
  const hashes = chunks.map(chunkHash);
  return {
    fileHash: fileHash(chunks.map((c, j) => ({ hash: hashes[j], size: chunkLength(c) }))),
    terms: [{ xorbHash: xorbHash(x), chunkStart: start, chunkEnd: start + length, unpackedBytes: chunks.reduce((sum, c) => sum + chunkLength(c), 0) }],
    verificationHashes: [verificationHash(hashes)],
    sha256: labelHash(sha256Label),
  };
}

const repoName = (r: number) => `bench/scale-${r}`;
const repoOfFile = (file: number) => Math.floor(file / FILES_PER_REPO);
const folderName = (k: number) => `c${k}`;

class SyntheticMetadata {
  /** Xorbs recorded so far (they are recorded in order, as the repositories' files need them). */
  private xorbsRecorded = 0;
  private readonly indexed: number[] = [];

  chunksOf(repos: number): number {
    return Math.min(CHUNKS, Math.ceil(fileStart(repos * FILES_PER_REPO) / CHUNKS_PER_XORB) * CHUNKS_PER_XORB);
  }

  /** Chunks with a dedup index entry, in the repositories filled so far. */
  indexedChunks(): readonly number[] {
    return this.indexed;
  }

  /** Records repository `r`: its xorbs not recorded yet, one shard of its 1,000 files, and 10 commits of a folder of 100 files each. */
  async fillRepo(store: MetadataStore, r: number): Promise<void> {
    const firstFile = r * FILES_PER_REPO;
    const xorbsNeeded = Math.ceil(fileStart(firstFile + FILES_PER_REPO) / CHUNKS_PER_XORB);
    const createdAt = new Date();
    const xorbs: DatedXorb[] = [];
    for (; this.xorbsRecorded < xorbsNeeded; this.xorbsRecorded++)
      xorbs.push(syntheticXorb(xorbHash(this.xorbsRecorded), this.xorbsRecorded * CHUNKS_PER_XORB, CHUNKS_PER_XORB, chunkHash, createdAt));
    if (xorbs.length > 0) await store.importXorbs(xorbs);

    const files = Array.from({ length: FILES_PER_REPO }, (_, k) => this.fileRecord(firstFile + k));
    // What a registration indexes: every file's first chunk (what clients ask about) and the chunks eligible for global dedup.
    const dedupEntries: ShardRegistration["dedupEntries"] = [];
    const firstChunks = new Set(files.map((_, k) => fileStart(firstFile + k)));
    for (let c = fileStart(firstFile); c < fileStart(firstFile + FILES_PER_REPO); c++) {
      const hash = chunkHash(c);
      if (firstChunks.has(c) || isGlobalDedupEligible(hash)) {
        dedupEntries.push({ chunkHash: hash, xorbHash: xorbHash(Math.floor(c / CHUNKS_PER_XORB)) });
        this.indexed.push(c);
      }
    }
    const init = initialCommit(AUTHOR, new Date());
    const repo = await store.createRepo("model", repoName(r), { private: false, ...init });
    await store.registerShard({ shardHash: labelHash(`scale shard ${r}`), repoId: repo.id, files, dedupEntries });

    let head = init.commit.oid;
    const folders: TreeEntry[] = [];
    for (let k = 0; k < COMMITS_PER_REPO; k++) {
      const folder = treeOf(
        files.slice(k * FILES_PER_COMMIT, (k + 1) * FILES_PER_COMMIT).map((file, j) => {
          const name = `f-${String(k * FILES_PER_COMMIT + j).padStart(4, "0")}.bin`;
          return xetFileEntry(name, Buffer.from(file.sha256!).toString("hex"), file.size, hashToHex(file.hash));
        }),
      );
      folders.push({ type: "directory", name: folderName(k), oid: folder.oid });
      const root = treeOf([...folders]);
      const commit = buildCommit(root.oid, [head], `Add ${folderName(k)}`, "", AUTHOR, new Date());
      const outcome = await store.advanceBranch({ repoId: repo.id, branch: "main", expectedHead: head, commit, trees: [folder, root] });
      if (outcome !== "advanced") throw new Error(`advancing main of ${repoName(r)}: ${outcome}`);
      head = commit.oid;
    }
  }

  /** File `i`: a term per xorb its chunks fall in. Its hash is a label: the stores do not recompute it. */
  fileRecord(i: number): FileRecord {
    const { terms, size } = termsOver(fileStart(i), fileStart(i + 1), CHUNKS_PER_XORB, xorbHash);
    return { hash: labelHash(`scale file ${i}`), size, terms, sha256: labelHash(`scale content ${i}`) };
  }

  /**
   * `count` files no shard named before, each a run of 5 to 14 chunks of a random one of the
   * stored xorbs, with the real file and verification hashes a server checks.
   */
  newFilesOverStoredXorbs(label: string, count: number, repos: number, random: () => number): ShardFile[] {
    const xorbs = this.xorbsOf(repos);
    return Array.from({ length: count }, (_, k) => {
      const length = 5 + Math.floor(random() * 10);
      return newFile(Math.floor(random() * xorbs), Math.floor(random() * (CHUNKS_PER_XORB - length)), length, `scale new ${label} ${k}`);
    });
  }

  /**
   * Files `first` … `first + count - 1` over the RECENT_XORBS xorbs recorded last: file g is a
   * run of 5 to 14 chunks (as many as the other kind on average) of xorb g mod RECENT_XORBS, its
   * length and start counted on from g, so no two are alike (nor like a file of another stage,
   * whose latest xorbs are others).
   */
  newFilesOverRecentXorbs(first: number, count: number, repos: number): ShardFile[] {
    const xorbs = this.xorbsOf(repos);
    const pool = Math.min(RECENT_XORBS, xorbs);
    const starts = CHUNKS_PER_XORB - 14;
    return Array.from({ length: count }, (_, k) => {
      const g = first + k;
      const run = Math.floor(g / pool);
      return newFile(xorbs - 1 - (g % pool), Math.floor(run / 10) % starts, 5 + (run % 10), `scale recent ${repos} ${g}`);
    });
  }

  private xorbsOf(repos: number): number {
    return Math.max(1, Math.floor(fileStart(repos * FILES_PER_REPO) / CHUNKS_PER_XORB));
  }
}
