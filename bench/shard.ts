/**
 * Shard registration at the scale the design names: one shard of 10,000 files over 100,000
 * chunks (100 xorbs of 1,000 chunks, each file one 10-chunk term, and the xorb section listing
 * all 100 xorbs as a client does for xorbs it just uploaded — 6.3 MB). Measured through the
 * service (validation + shard blob + one SQLite transaction) and over HTTP (`POST /v1/shards`
 * on an in-process server), each on fresh stores so every run registers a new shard.
 *
 * The xorbs are synthetic: random chunk hashes recorded straight into the metadata store.
 * Registration reads only the xorbs' chunk tables, never their bytes, so no xorb blob is
 * written.
 */
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CasTokenIssuer, CasTokenVerifier } from "../src/auth/cas-token.js";
import { ShardRegistrationService } from "../src/cas/shard-registration.js";
import { fileHash, verificationHash, xorbHash, type Hash } from "../src/format/hash.js";
import type { ShardFile, ShardXorb } from "../src/format/shard.js";
import { serializeUploadShard } from "../src/format/shard-writer.js";
import { createHttpApp } from "../src/http/app.js";
import { casScope } from "../src/http/cas-scope.js";
import { createLogger } from "../src/http/logging.js";
import { shardRoutes } from "../src/http/shard-routes.js";
import type { ShardRegistration, XorbRecord } from "../src/metadata/cas.js";
import { SqliteMetadataStore } from "../src/metadata/sqlite.js";
import { FsBlobStore } from "../src/storage/fs.js";
import { benchRow, sized, type BenchRow } from "./lib.js";

const GROUP = "shard";
const XORBS = sized(100, 10);
const CHUNKS_PER_XORB = 1_000;
const CHUNKS_PER_FILE = 10;
const FILES = (XORBS * CHUNKS_PER_XORB) / CHUNKS_PER_FILE;
const REPETITIONS = 3;
/** A registration of this size should not keep a client waiting: the bar of the design notes ("well under a few seconds"). */
const TARGET_SECONDS = 3;

interface Fixture {
  xorbs: XorbRecord[];
  shard: Uint8Array;
}

export async function run(): Promise<BenchRow[]> {
  const fixture = buildFixture();
  const root = await mkdtemp(join(tmpdir(), "castor-bench-shard-"));
  try {
    const service = await benchService(fixture, root);
    const http = await benchHttp(fixture, root);
    const note = `${FILES.toLocaleString("en-US")} files, ${(XORBS * CHUNKS_PER_XORB).toLocaleString("en-US")} chunks, ${(fixture.shard.length / 1e6).toFixed(1)} MB shard`;
    return [
      benchRow(GROUP, "register new shard (service)", service.total.best, "s", {
        median: service.total.median,
        target: { atMost: TARGET_SECONDS },
        note,
      }),
      benchRow(GROUP, "  of which the registerShard transaction", service.commitBest, "s", { note: "SQLite, one transaction" }),
      benchRow(GROUP, "register new shard (POST /v1/shards)", http.best, "s", {
        median: http.median,
        target: { atMost: TARGET_SECONDS },
        note: "in-process server, loopback",
      }),
    ];
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

/** Stores with the synthetic xorbs recorded and one repository, in a fresh folder. */
async function freshStores(fixture: Fixture, root: string, name: string) {
  const dir = join(root, name);
  const metadata = await SqliteMetadataStore.open(dir);
  const blobs = await FsBlobStore.open(join(dir, "blobs"));
  for (const xorb of fixture.xorbs) await metadata.putXorb(xorb);
  const repo = await metadata.createRepo("model", "bench/shard");
  return { metadata, blobs, repoId: repo.id };
}

async function benchService(fixture: Fixture, root: string) {
  let run = 0;
  const commitSeconds: number[] = [];
  const total = await timeFreshRuns(async () => {
    const { metadata, blobs, repoId } = await freshStores(fixture, root, `service-${run++}`);
    const timedMetadata = {
      getChunkTables: (hashes: readonly Hash[]) => metadata.getChunkTables(hashes),
      registerShard: async (registration: ShardRegistration) => {
        const started = performance.now();
        try {
          return await metadata.registerShard(registration);
        } finally {
          commitSeconds.push((performance.now() - started) / 1000);
        }
      },
    };
    const service = new ShardRegistrationService({ metadata: timedMetadata, blobs, maxShardBytes: 64 * 1024 * 1024 });
    const body = Uint8Array.from(fixture.shard); // the service takes its body over
    return {
      run: async () => {
        const outcome = await service.register(body, { repoId });
        if (!outcome.inserted || outcome.files !== FILES) throw new Error(`unexpected registration outcome ${JSON.stringify(outcome)}`);
      },
      teardown: () => metadata.close(),
    };
  });
  return { total, commitBest: Math.min(...commitSeconds) };
}

async function benchHttp(fixture: Fixture, root: string) {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const { token } = await new CasTokenIssuer(privateKey, 3600).issue({ repo: { type: "model", id: "bench/shard" }, rev: "main", scope: "write" });
  let run = 0;
  return timeFreshRuns(async () => {
    const { metadata, blobs } = await freshStores(fixture, root, `http-${run++}`);
    const app = createHttpApp({ logger: createLogger("silent") });
    await app.register(casScope, {
      verifier: new CasTokenVerifier(publicKey),
      routes: (cas) =>
        cas.register(shardRoutes, {
          shards: new ShardRegistrationService({ metadata, blobs, maxShardBytes: 64 * 1024 * 1024 }),
          repos: metadata,
        }),
    });
    await app.listen({ host: "127.0.0.1", port: 0 });
    const { port } = app.server.address() as { port: number };
    return {
      run: async () => {
        const response = await fetch(`http://127.0.0.1:${port}/v1/shards`, {
          method: "POST",
          body: fixture.shard,
          headers: { authorization: `Bearer ${token}` },
        });
        const text = await response.text();
        if (text !== '{"result":1}') throw new Error(`POST /v1/shards answered ${response.status} ${text}`);
      },
      teardown: async () => {
        await app.close();
        await metadata.close();
      },
    };
  });
}

/**
 * Best and median of REPETITIONS timed runs, each on fresh stores set up (and torn down)
 * outside its clock: a registered shard would make every later run a cheaper "already known"
 * one.
 */
async function timeFreshRuns(setup: () => Promise<{ run: () => Promise<void>; teardown: () => Promise<void> }>): Promise<{ best: number; median: number }> {
  const samples: number[] = [];
  for (let i = 0; i < REPETITIONS; i++) {
    const { run, teardown } = await setup();
    try {
      const started = performance.now();
      await run();
      samples.push((performance.now() - started) / 1000);
    } finally {
      await teardown();
    }
  }
  samples.sort((a, b) => a - b);
  return { best: samples[0], median: samples[samples.length >> 1] };
}

function buildFixture(): Fixture {
  const xorbs: XorbRecord[] = [];
  const blocks: ShardXorb[] = [];
  const files: ShardFile[] = [];
  for (let x = 0; x < XORBS; x++) {
    const chunks = Array.from({ length: CHUNKS_PER_XORB }, (_, c) => {
      const uncompressedLength = 8_192 + ((x * 7_919 + c * 104_729) % 57_344);
      return { hash: new Uint8Array(randomBytes(32)), uncompressedLength, serializedEnd: 0 };
    });
    let offset = 0;
    let serialized = 0;
    for (const chunk of chunks) {
      serialized += 8 + chunk.uncompressedLength;
      chunk.serializedEnd = serialized;
    }
    const hash = xorbHash(chunks.map((c) => ({ hash: c.hash, size: c.uncompressedLength })));
    xorbs.push({ hash, serializedLength: serialized, uncompressedLength: chunks.reduce((sum, c) => sum + c.uncompressedLength, 0), chunks });
    blocks.push({
      xorbHash: hash,
      flags: 0,
      numBytesInXorb: xorbs[x].uncompressedLength,
      numBytesOnDisk: 0,
      chunks: chunks.map((c) => {
        const entry = { hash: c.hash, byteRangeStart: offset, unpackedBytes: c.uncompressedLength, flags: 0 };
        offset += c.uncompressedLength;
        return entry;
      }),
    });
    for (let start = 0; start < CHUNKS_PER_XORB; start += CHUNKS_PER_FILE) {
      const slice = chunks.slice(start, start + CHUNKS_PER_FILE);
      files.push({
        fileHash: fileHash(slice.map((c) => ({ hash: c.hash, size: c.uncompressedLength }))),
        terms: [
          { xorbHash: hash, chunkStart: start, chunkEnd: start + CHUNKS_PER_FILE, unpackedBytes: slice.reduce((sum, c) => sum + c.uncompressedLength, 0) },
        ],
        verificationHashes: [verificationHash(slice.map((c) => c.hash))],
        sha256: null,
      });
    }
  }
  return { xorbs, shard: serializeUploadShard({ files, xorbs: blocks }, { kind: "xet-core" }) };
}
