/**
 * Garbage collection at scale (issue 13): `castor gc` on 100,000 files over 1,000,000 chunks,
 * half of them garbage — the time of each step of the run and its peak RSS.
 *
 * The store is filled through the stores' own APIs, in SQLite in a temp data dir (and in a fresh
 * PostgreSQL database when CASTOR_TEST_DATABASE_URL is set), with filesystem blobs:
 *
 * - 100,000 xorbs of 10 chunks, recorded 1,000 per `importXorbs` (one transaction each), and a
 *   16-byte blob per xorb (`putIfAbsent`): the collector never reads a blob, it lists and
 *   deletes them, so tiny blobs measure that work at the real count and keep the fill short;
 * - 100,000 files laid end to end over the chunk stream, 6 to 14 chunks each; a quarter of the
 *   file boundaries fall inside a xorb, so neighbours share it (those files have two terms).
 *   Registered 1,000 files per `registerShard`, each with a SHA-256, plus dedup entries for
 *   every 8th chunk;
 * - 10 repositories of 10 shards each. Even shards are committed on `main` (a folder of 1,000
 *   files per commit); odd ones on a branch `scratch`, which is then deleted. Its commits and
 *   trees, its 50,000 files, the xorbs only they use (all but those shared with a live
 *   neighbour), their dedup entries and blobs are the garbage.
 *
 * Then the compiled `castor gc --json --grace 0` runs in a child process, as an operator runs it
 * (`npm run bench` builds dist/ first): `--dry-run` first, then for real. Step times come from
 * the report's `phasesMs`, the peak RSS from a preload (support/max-rss.mjs); `castor gc` on the
 * same store while still empty gives the command's own baseline.
 */
import { spawn } from "node:child_process";
import { rename, rm } from "node:fs/promises";
import { loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { hashToHex, type Hash } from "../src/format/hash.js";
import { buildCommit, initialCommit, xetFileEntry } from "../src/hub/history.js";
import type { FileRecord, MetadataStore, ShardRegistration, TreeEntry, TreeRecord } from "../src/metadata/store.js";
import type { GcPhases } from "../src/ops/gc.js";
import { blobKey } from "../src/storage/blob-store.js";
import { FsBlobStore } from "../src/storage/fs.js";
import { benchRow, sized, type BenchRow } from "./lib.js";
import { labelHash, onEachMetadataBackend, syntheticXorb, termsOver, treeOf } from "./support/synthetic-metadata.js";

const GROUP = "gc";
/** A smoke run: 2,000 files over 20,000 chunks, in 2 repositories of 10 shards of 100 files. */
const XORBS = sized(100_000, 2_000);
const CHUNKS_PER_XORB = 10;
const CHUNKS = XORBS * CHUNKS_PER_XORB;
const FILES = sized(100_000, 2_000);
const CHUNKS_PER_FILE = CHUNKS / FILES;
const FILES_PER_SHARD = sized(1_000, 100);
const SHARDS = FILES / FILES_PER_SHARD;
const SHARDS_PER_REPO = 10;
const REPOS = SHARDS / SHARDS_PER_REPO;
/** One chunk in this many gets a dedup index entry. */
const DEDUP_EVERY = 8;
const XORBS_PER_IMPORT = 1_000;
const BLOB_BYTES = 16;
/** Blob writes in flight: each waits on two fsyncs, which overlap well on the machine's disk (~2,000 puts/s at 256, ~400 one at a time). */
const BLOB_PUTS_IN_FLIGHT = 256;
const AUTHOR = "bench";
const CASTOR_BIN = fileURLToPath(new URL("../bin/castor.js", import.meta.url));
const MAX_RSS_PRELOAD = pathToFileURL(fileURLToPath(new URL("./support/max-rss.mjs", import.meta.url))).href;
const MiB = 1024 * 1024;

type Say = (line: string) => void;

export async function run(): Promise<BenchRow[]> {
  const say: Say = (line) => process.stderr.write(`\n  gc: ${line}`);
  const data = new SyntheticStore();
  return onEachMetadataBackend(GROUP, (backend, previous) =>
    // After SQLite's run, the live half of the blobs it kept is moved over: only the garbage half is written again.
    benchBackend(backend.name, data, { ...backend, blobsFrom: previous === null ? undefined : join(previous.dataDir, "blobs") }, say),
  );
}

interface Backend {
  /** CASTOR_DATA_DIR of the runs; the blobs live in its `blobs/`. */
  dataDir: string;
  /** Settings besides the data dir that select the backend. */
  env: Record<string, string>;
  open(): Promise<MetadataStore>;
  /** A blobs folder to start from (moved in) instead of an empty one. */
  blobsFrom?: string;
}

async function benchBackend(name: string, data: SyntheticStore, backend: Backend, say: Say): Promise<BenchRow[]> {
  const loadBefore = loadavg()[0];
  const env = { CASTOR_DATA_DIR: backend.dataDir, ...backend.env };
  // Also creates the schema and the blobs folder the fill writes into.
  const empty = await castorGc(env, [], (line) => say(`${name}, empty store: ${line}`));

  const blobsDir = join(backend.dataDir, "blobs");
  if (backend.blobsFrom !== undefined) {
    await rm(blobsDir, { recursive: true, force: true });
    await rename(backend.blobsFrom, blobsDir);
  }
  const store = await backend.open();
  let fill: FillTimes;
  try {
    fill = await data.fill(store, await FsBlobStore.open(blobsDir), (line) => say(`${name} fill: ${line}`));
  } finally {
    await store.close();
  }

  const dryRun = await castorGc(env, ["--dry-run"], (line) => say(`${name} gc --dry-run: ${line}`));
  const real = await castorGc(env, [], (line) => say(`${name} gc: ${line}`));
  const load = `load ${loadBefore.toFixed(1)}→${loadavg()[0].toFixed(1)}`;

  const { report } = real;
  const { removed, reachable, phasesMs } = report;
  const total = (Date.parse(report.finishedAt) - Date.parse(report.startedAt)) / 1000;
  const count = (value: number) => value.toLocaleString("en-US");
  const xorbsRemoved = removed.xorbs.objects + removed.orphanXorbBlobs.objects;
  return [
    benchRow(GROUP, `${name}: fill, ${count(FILES)} files / ${count(CHUNKS)} chunks`, fill.total, "s", {
      note: `for information: xorb records ${fill.xorbs.toFixed(1)} s, ${count(fill.blobsWritten)} blobs ${fill.blobs.toFixed(1)} s, ${SHARDS} shards + ${fill.commits} commits ${fill.history.toFixed(1)} s`,
    }),
    benchRow(GROUP, `${name}: gc --dry-run`, (Date.parse(dryRun.report.finishedAt) - Date.parse(dryRun.report.startedAt)) / 1000, "s", {
      note: `would remove ${count(dryRun.report.removed.files.objects)} files, ${count(dryRun.report.removed.xorbs.objects)} xorbs; peak RSS ${dryRun.maxRssMiB.toFixed(0)} MiB`,
    }),
    benchRow(GROUP, `${name}: gc, whole run`, total, "s", {
      note: `removed ${count(removed.files.objects)} files, ${count(xorbsRemoved)} xorbs and blobs, ${removed.commits} commits, ${removed.trees} trees; ${load}`,
    }),
    benchRow(GROUP, `${name}:   mark`, phasesMs.mark, "ms", {
      note: `${reachable.repositories} repos, ${reachable.commits} commits, ${reachable.trees} trees, ${count(reachable.files)} files reachable`,
    }),
    benchRow(GROUP, `${name}:   history sweep`, phasesMs.history, "ms"),
    benchRow(GROUP, `${name}:   files sweep`, phasesMs.files, "ms", { note: `${count(removed.files.objects)} of ${count(FILES)} file records` }),
    benchRow(GROUP, `${name}:   xorbs sweep`, phasesMs.xorbs, "ms", {
      // The report counts every chunk of a removed xorb as a dedup entry; the store held fewer in all.
      note: `${count(removed.xorbs.objects)} of ${count(XORBS)} xorbs with their blobs; ${count(removed.chunks)} chunks (the index held ${count(fill.dedupEntries)} dedup entries)`,
    }),
    benchRow(GROUP, `${name}:   orphan xorb blobs (list all)`, phasesMs.orphans, "ms", { note: `${count(removed.orphanXorbBlobs.objects)} removed` }),
    benchRow(GROUP, `${name}:   of which blob deletes`, phasesMs.blobDeletes, "ms", { note: "unlink + folder fsync each, 16 in flight; marks released" }),
    benchRow(GROUP, `${name}: gc peak RSS`, real.maxRssMiB, "MiB", { note: `castor gc on the empty store: ${empty.maxRssMiB.toFixed(0)} MiB` }),
  ];
}

// ---------------------------------------------------------------------------------------------
// The child process.

/** What the benchmark reads of `castor gc --json` (dates arrive as ISO strings). */
interface GcJson {
  startedAt: string;
  finishedAt: string;
  reachable: { repositories: number; commits: number; trees: number; files: number };
  removed: {
    files: { objects: number };
    xorbs: { objects: number };
    orphanXorbBlobs: { objects: number };
    chunks: number;
    commits: number;
    trees: number;
  };
  phasesMs: GcPhases;
}

const MAX_RSS_LINE = /^castor-bench max-rss-kib (\d+)$/;

/** Runs the compiled `castor gc --json --grace 0 ARGS`; its progress lines go to `say` (but the per-batch ones). */
async function castorGc(settings: Record<string, string>, args: string[], say: Say): Promise<{ report: GcJson; maxRssMiB: number }> {
  // The child sees only the settings given: a CASTOR_* variable of the caller's shell would change the stores it opens.
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("CASTOR_") && key !== "NODE_OPTIONS"));
  Object.assign(env, settings, { NODE_OPTIONS: `--import=${MAX_RSS_PRELOAD}` });
  const child = spawn(CASTOR_BIN, ["gc", "--json", "--grace", "0", ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  let maxRssKiB: number | null = null;
  child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text));
  let rest = "";
  child.stderr.setEncoding("utf8").on("data", (text: string) => {
    stderr += text;
    const lines = (rest + text).split("\n");
    rest = lines.pop()!;
    for (const line of lines) {
      const rss = MAX_RSS_LINE.exec(line);
      if (rss !== null) maxRssKiB = Number(rss[1]);
      else if (line.startsWith("castor gc: ") && !line.includes("so far")) say(line.slice("castor gc: ".length));
    }
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", resolve);
  });
  if (code !== 0) throw new Error(`castor gc ${args.join(" ")} exited with ${code}: ${stderr.slice(-2_000)}`);
  if (maxRssKiB === null) throw new Error("castor gc did not report its peak RSS (bench/support/max-rss.mjs not preloaded?)");
  return { report: JSON.parse(stdout) as GcJson, maxRssMiB: (maxRssKiB * 1024) / MiB };
}

// ---------------------------------------------------------------------------------------------
// The synthetic store. Every hash is the SHA-256 of a label, so both backends get the same data.

interface FillTimes {
  total: number;
  xorbs: number;
  blobs: number;
  blobsWritten: number;
  history: number;
  commits: number;
  dedupEntries: number;
}

/** A well-mixed 32-bit number per integer (murmur3's finalizer), for reproducible variety. */
function mix(i: number): number {
  let h = Math.imul(i ^ 0x9e3779b9, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** First chunk of file `i`: every fourth boundary falls 1 to 9 chunks into a xorb. */
function fileStart(i: number): number {
  if (i === 0 || i === FILES) return i * CHUNKS_PER_FILE;
  const m = mix(i);
  return i * CHUNKS_PER_FILE + (m % 4 === 0 ? 1 + ((m >>> 2) % 9) : 0);
}

function folderName(shard: number): string {
  return `shard-${String(shard).padStart(2, "0")}`;
}

class SyntheticStore {
  private readonly xorbHashes: Hash[] = Array.from({ length: XORBS }, (_, x) => labelHash(`gc-bench xorb ${x}`));

  async fill(store: MetadataStore, blobs: FsBlobStore, say: Say): Promise<FillTimes> {
    const started = performance.now();
    const createdAt = new Date();
    for (let first = 0; first < XORBS; first += XORBS_PER_IMPORT) {
      await store.importXorbs(
        Array.from({ length: Math.min(XORBS_PER_IMPORT, XORBS - first) }, (_, k) =>
          syntheticXorb(this.xorbHashes[first + k], (first + k) * CHUNKS_PER_XORB, CHUNKS_PER_XORB, chunkHash, createdAt),
        ),
      );
      if ((first + XORBS_PER_IMPORT) % 20_000 === 0) say(`${first + XORBS_PER_IMPORT} xorb records`);
    }
    const xorbsDone = performance.now();

    let blobsWritten = 0;
    let next = 0;
    const body = new Uint8Array(BLOB_BYTES);
    const putter = async () => {
      for (let x = next++; x < XORBS; x = next++) {
        if ((await blobs.putIfAbsent(blobKey("xorbs", this.xorbHashes[x]), body)).inserted) blobsWritten++;
        if ((x + 1) % 20_000 === 0) say(`${x + 1} blobs`);
      }
    };
    await Promise.all(Array.from({ length: BLOB_PUTS_IN_FLIGHT }, putter));
    const blobsDone = performance.now();

    let commits = 0;
    let dedupEntries = 0;
    for (let r = 0; r < REPOS; r++) {
      const init = initialCommit(AUTHOR, new Date());
      const repo = await store.createRepo("model", `bench/gc-${r}`, { private: false, ...init });
      let main = { head: init.commit.oid, folders: [] as TreeEntry[] };
      let scratch: typeof main | null = null;
      for (let shard = r * SHARDS_PER_REPO; shard < (r + 1) * SHARDS_PER_REPO; shard++) {
        const registration = this.registration(shard, repo.id);
        await store.registerShard(registration);
        dedupEntries += registration.dedupEntries.length;
        const folder = this.folder(registration.files, shard);
        if (shard % 2 === 0) {
          main = await commitFolder(store, repo.id, "main", main, folder, shard);
        } else {
          if (scratch === null) {
            await store.createRevision(repo.id, "scratch", "branch", main.head);
            scratch = main;
          }
          scratch = await commitFolder(store, repo.id, "scratch", scratch, folder, shard);
        }
        commits++;
      }
      // The deleted branch: what only it reached is the garbage.
      await store.deleteRevision(repo.id, "scratch");
      say(`repository ${r + 1}/${REPOS}: ${SHARDS_PER_REPO} shards registered and committed`);
    }
    const done = performance.now();
    return {
      total: (done - started) / 1000,
      xorbs: (xorbsDone - started) / 1000,
      blobs: (blobsDone - xorbsDone) / 1000,
      blobsWritten,
      history: (done - blobsDone) / 1000,
      commits,
      dedupEntries,
    };
  }

  private file(i: number): FileRecord {
    const { terms, size } = termsOver(fileStart(i), fileStart(i + 1), CHUNKS_PER_XORB, (x) => this.xorbHashes[x]);
    return { hash: labelHash(`gc-bench file ${i}`), size, terms, sha256: labelHash(`gc-bench content ${i}`) };
  }

  /** Shard `shard`: its 1,000 files, and dedup entries for the xorbs whose first chunk is in them. */
  private registration(shard: number, repoId: number): ShardRegistration {
    const first = shard * FILES_PER_SHARD;
    const files = Array.from({ length: FILES_PER_SHARD }, (_, k) => this.file(first + k));
    const dedupEntries: ShardRegistration["dedupEntries"] = [];
    for (let x = Math.ceil(fileStart(first) / CHUNKS_PER_XORB); x * CHUNKS_PER_XORB < fileStart(first + FILES_PER_SHARD); x++) {
      for (let c = x * CHUNKS_PER_XORB; c < (x + 1) * CHUNKS_PER_XORB; c++) {
        if (c % DEDUP_EVERY === 0) dedupEntries.push({ chunkHash: chunkHash(c), xorbHash: this.xorbHashes[x] });
      }
    }
    return { shardHash: labelHash(`gc-bench shard ${shard}`), repoId, files, dedupEntries };
  }

  /** The folder tree of a shard's files (names ascend as the files do: git's order). */
  private folder(files: readonly FileRecord[], shard: number): TreeRecord {
    return treeOf(
      files.map((file, k) => {
        const name = `f-${String(shard * FILES_PER_SHARD + k).padStart(6, "0")}.bin`;
        return xetFileEntry(name, Buffer.from(file.sha256!).toString("hex"), file.size, hashToHex(file.hash));
      }),
    );
  }
}

function chunkHash(c: number): Hash {
  return labelHash(`gc-bench chunk ${c}`);
}

/** Commits `folder` onto `branch` at `tip`: a new root tree naming the branch's folders and this one. */
async function commitFolder(
  store: MetadataStore,
  repoId: number,
  branch: string,
  tip: { head: string; folders: TreeEntry[] },
  folder: TreeRecord,
  shard: number,
): Promise<{ head: string; folders: TreeEntry[] }> {
  // Shards come in ascending order, so appending keeps the folders in git's order.
  const folders: TreeEntry[] = [...tip.folders, { type: "directory", name: folderName(shard), oid: folder.oid }];
  const root = treeOf(folders);
  const commit = buildCommit(root.oid, [tip.head], `Add ${folderName(shard)}`, "", AUTHOR, new Date());
  const outcome = await store.advanceBranch({ repoId, branch, expectedHead: tip.head, commit, trees: [folder, root] });
  if (outcome !== "advanced") throw new Error(`advancing ${branch} of repository ${repoId}: ${outcome}`);
  return { head: commit.oid, folders };
}
