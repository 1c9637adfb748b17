/**
 * Shards that cost the server more than their size, against a real `castor serve` (compiled):
 *
 * - the amplification probe: one xorb of 8,192 two-byte chunks and one file of N terms that
 *   each name all 8,192 chunks (correct range hashes, wrong file hash): N = 2,000 (a 192 KB
 *   shard) and N = 20,000 (1.9 MB). Before the work bounds, the first was answered after 50 s
 *   with 3.2 GB RSS and the second killed the process;
 * - 1,000 identical file blocks of a realistic file (one 1,024-chunk term each);
 * - a valid shard of 340,000 one-chunk files (49 MB), which one synchronous SQLite transaction
 *   used to register in 8.9 s with every other request waiting.
 *
 * For each: how long the upload took to be answered, and the longest `/healthz` round trip
 * while it ran (a client polling every 10 ms) — what every other client of the node sees.
 * The xorbs of the 340,000-file shard are synthetic records put straight into the server's
 * SQLite before it starts: registration reads chunk tables, never xorb bytes.
 */
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { fileHash, hashToHex, verificationHash, xorbHash, type Hash } from "../src/format/hash.js";
import type { ShardFile } from "../src/format/shard.js";
import { serializeUploadShard } from "../src/format/shard-writer.js";
import { serializeXorb } from "../src/format/xorb.js";
import type { XorbRecord } from "../src/metadata/cas.js";
import { SqliteMetadataStore } from "../src/metadata/sqlite.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { benchRow, type BenchRow } from "./lib.js";

const GROUP = "shard-limits";
/** What "no request blocks others for more than ~50 ms" allows a polling client to see, with loopback and scheduling noise. */
const HEALTHZ_TARGET_MS = 100;
const LARGE_SHARD_FILES = 340_000;
const LARGE_SHARD_CHUNKS_PER_XORB = 1_000;

export async function run(): Promise<BenchRow[]> {
  const dataDir = await prepareLargeShardStore();
  const server = await startCastorServer({ compiled: true, dataDir: dataDir.path });
  try {
    const fixture = await hubFixture(server, { repoType: "model", repoName: "bench/limits" });
    const token = (await fixture.casToken("write")).accessToken;
    const post = (path: string, body: Uint8Array) => fetch(`${server.url}${path}`, { method: "POST", body, headers: { authorization: `Bearer ${token}` } });

    const tiny = serializeXorb(Array.from({ length: 8192 }, (_, i) => ({ data: Uint8Array.of(i >> 8, i & 0xff) })));
    await expectOk(await post(`/v1/xorbs/default/${hashToHex(tiny.info.hash)}`, tiny.bytes), "tiny-chunk xorb upload");
    const rows: BenchRow[] = [];
    for (const terms of [2_000, 20_000]) {
      const shard = amplifiedShard(tiny.info, terms);
      const { seconds, status, healthzMs } = await whilePolling(server, () => post("/v1/shards", shard));
      rows.push(
        benchRow(GROUP, `amplified shard, ${terms.toLocaleString("en-US")} terms × 8,192 chunks: answered`, seconds * 1000, "ms", {
          note: `HTTP ${status}, ${(shard.length / 1024).toFixed(0)} KiB shard`,
        }),
        benchRow(GROUP, "  longest /healthz meanwhile", healthzMs, "ms", { target: { atMost: HEALTHZ_TARGET_MS } }),
      );
    }

    const real = serializeXorb(Array.from({ length: 1024 }, (_, i) => ({ data: randomBytes(8192 + i) })));
    await expectOk(await post(`/v1/xorbs/default/${hashToHex(real.info.hash)}`, real.bytes), "xorb upload");
    const repeated = repeatedBlocksShard(real.info, 1000);
    const repeatedRun = await whilePolling(server, () => post("/v1/shards", repeated));
    rows.push(
      benchRow(GROUP, "1,000 identical blocks of a 1,024-chunk file: answered", repeatedRun.seconds * 1000, "ms", { note: `HTTP ${repeatedRun.status}` }),
      benchRow(GROUP, "  longest /healthz meanwhile", repeatedRun.healthzMs, "ms", { target: { atMost: HEALTHZ_TARGET_MS } }),
    );

    const large = await readFile(dataDir.shardPath);
    const largeRun = await whilePolling(server, () => post("/v1/shards", large));
    rows.push(
      benchRow(GROUP, `valid shard of ${LARGE_SHARD_FILES.toLocaleString("en-US")} files: registered`, largeRun.seconds, "s", {
        note: `HTTP ${largeRun.status}, ${(large.length / 1e6).toFixed(0)} MB shard`,
      }),
      benchRow(GROUP, "  longest /healthz meanwhile", largeRun.healthzMs, "ms", { target: { atMost: HEALTHZ_TARGET_MS } }),
      benchRow(GROUP, "server peak RSS over the group", await peakRssMiB(server), "MiB"),
    );
    return rows;
  } finally {
    await server.stop();
    await dataDir.remove();
  }
}

async function expectOk(response: Response, what: string): Promise<void> {
  const text = await response.text();
  if (response.status !== 200) throw new Error(`${what} answered ${response.status}: ${text}`);
}

/** Runs `upload` while a client polls `/healthz` back to back (10 ms apart); the longest poll is what other clients waited. */
async function whilePolling(server: ServerProcess, upload: () => Promise<Response>): Promise<{ seconds: number; status: number; healthzMs: number }> {
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
  const started = performance.now();
  try {
    const response = await upload();
    await response.text();
    return { seconds: (performance.now() - started) / 1000, status: response.status, healthzMs: longest };
  } finally {
    done = true;
    await poller;
  }
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

/**
 * A data dir whose SQLite already records the synthetic xorbs of the large shard, and the
 * shard itself in a file: one-chunk files, each over its own chunk.
 */
async function prepareLargeShardStore(): Promise<{ path: string; shardPath: string; remove: () => Promise<void> }> {
  const { mkdtemp, rm, writeFile } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const path = await mkdtemp(join(tmpdir(), "castor-bench-limits-"));
  const store = await SqliteMetadataStore.open(path);
  const files: ShardFile[] = [];
  try {
    for (let _x = 0; files.length < LARGE_SHARD_FILES; _x++) {
      const chunks = Array.from({ length: LARGE_SHARD_CHUNKS_PER_XORB }, (_, c) => ({
        hash: new Uint8Array(randomBytes(32)),
        uncompressedLength: 65_536,
        serializedEnd: (c + 1) * 65_544,
      }));
      const record: XorbRecord = {
        hash: xorbHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
        serializedLength: chunks.length * 65_544,
        uncompressedLength: chunks.length * 65_536,
        chunks,
      };
      await store.putXorb(record);
      for (let c = 0; c < chunks.length && files.length < LARGE_SHARD_FILES; c++) {
        files.push({
          fileHash: fileHash([{ hash: chunks[c].hash, size: 65_536 }]),
          terms: [{ xorbHash: record.hash, chunkStart: c, chunkEnd: c + 1, unpackedBytes: 65_536 }],
          verificationHashes: [verificationHash([chunks[c].hash])],
          sha256: null,
        });
      }
    }
  } finally {
    await store.close();
  }
  const shardPath = join(path, "large-shard.bin");
  await writeFile(shardPath, serializeUploadShard({ files, xorbs: [] }, { kind: "xet-core" }));
  return { path, shardPath, remove: () => rm(path, { recursive: true, force: true }) };
}

async function peakRssMiB(server: ServerProcess): Promise<number> {
  const status = await readFile(`/proc/${server.child.pid}/status`, "utf8");
  const kib = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? NaN);
  return kib / 1024;
}
