/**
 * `castor serve --workers 1` against `--workers 2` (CASTOR_WORKERS): the compiled server on one
 * data dir, both started side by side and measured in interleaved rounds, so a change in the
 * machine's load hits both alike. Per round and server:
 *
 * - `GET /healthz` and `GET /v2/reconstructions` of the reconstruction group's 10 GiB file
 *   (160 terms), 16 keep-alive clients: request handling, JWT checks, SQLite reads, JSON;
 * - xorb uploads as the upload group makes them (4 clients × a fresh 64 MiB xorb of raw
 *   chunks): receiving, validating (every chunk hashed) and storing;
 * - transfer-route downloads as the transfer group makes them (32 × one 1 MiB range of a
 *   64 MiB blob, 4 in flight).
 *
 * The load generator runs on the same machine: with 2 cores, two workers and the clients share
 * them, so the ratio shows what a second worker adds here, not on a machine with spare cores.
 * The servers log every request at info, as in production (the lines go to a pipe that is read
 * and dropped).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { Agent } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CasTokenIssuer } from "../src/auth/cas-token.js";
import { loadOrCreateKeys } from "../src/auth/keys.js";
import { HmacTransferUrls } from "../src/auth/transfer-url.js";
import { blobKey } from "../src/storage/blob-store.js";
import { FsBlobStore } from "../src/storage/fs.js";
import { BLOBS_DIR_NAME } from "../src/storage/open.js";
import { startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { benchRow, deterministicRandomBytes, median, megabytesPerSecond, type BenchRow } from "./lib.js";
import { FILE_BYTES, load, recordTenGibFile, REPO, type RequestSpec } from "./reconstruction.js";
import { fetchAll, REQUESTS_PER_RUN, singleRange, XORB, XORB_BYTES } from "./transfer.js";
import { CLIENTS as UPLOAD_CLIENTS, uploadRound, XorbBodies } from "./upload.js";

const GROUP = "workers";
const WORKER_COUNTS = [1, 2] as const;
const ROUNDS = 3;
const LOAD_SECONDS = 2;
const LOAD_CLIENTS = 16;
const TRANSFER_IN_FLIGHT = 4;
const MiB = 1024 * 1024;

interface Measured {
  healthz: number[];
  reconstruction: number[];
  upload: number[];
  transfer: number[];
}

type Metric = keyof Measured;

const METRICS: { metric: Metric; label: string; unit: string }[] = [
  { metric: "healthz", label: `GET /healthz, ${LOAD_CLIENTS} keep-alive clients`, unit: "req/s" },
  { metric: "reconstruction", label: `GET /v2/reconstructions (10 GiB file, 160 terms), ${LOAD_CLIENTS} keep-alive clients`, unit: "req/s" },
  { metric: "upload", label: `POST /v1/xorbs, 64 MiB xorbs, ${UPLOAD_CLIENTS} clients`, unit: "MB/s" },
  { metric: "transfer", label: `GET /v1/transfer, 1 MiB ranges, ${TRANSFER_IN_FLIGHT} in flight`, unit: "MB/s" },
];

export async function run(): Promise<BenchRow[]> {
  const dataDir = await mkdtemp(join(tmpdir(), "castor-bench-workers-"));
  const servers: ServerProcess[] = [];
  try {
    // What the servers will serve, put in place before they start: the reconstruction group's
    // file metadata, the transfer group's blob, and keys to mint tokens and sign URLs with.
    const fileHex = await recordTenGibFile(dataDir);
    const blobs = await FsBlobStore.open(join(dataDir, BLOBS_DIR_NAME));
    await blobs.putIfAbsent(blobKey("xorbs", XORB), deterministicRandomBytes(XORB_BYTES, 7));
    const keys = await loadOrCreateKeys({ dataDir, signingKeyFile: null, urlKey: null, dedupKeySeed: null });
    const issuer = new CasTokenIssuer(keys.jwtSigningKey, 3600);
    const readToken = (await issuer.issue({ repo: REPO, rev: "main", scope: "read" })).token;
    const writeToken = (await issuer.issue({ repo: REPO, rev: "main", scope: "write" })).token;

    for (const workers of WORKER_COUNTS) {
      servers.push(
        await startCastorServer({ dataDir, compiled: true, env: { CASTOR_WORKERS: String(workers) }, discardOutputOnceReady: true, readyTimeoutMs: 60_000 }),
      );
    }
    const bodies = new XorbBodies();
    const measured = servers.map((): Measured => ({ healthz: [], reconstruction: [], upload: [], transfer: [] }));
    const measureRound = async (server: ServerProcess, into: Measured | null) => {
      const loadAgent = new Agent({ keepAlive: true, maxSockets: LOAD_CLIENTS });
      const bodyAgent = new Agent({ keepAlive: true, maxSockets: Math.max(UPLOAD_CLIENTS, TRANSFER_IN_FLIGHT) });
      try {
        const health: RequestSpec = { url: `${server.url}/healthz`, headers: {} };
        const reconstruction: RequestSpec = {
          url: `${server.url}/v2/reconstructions/${fileHex}`,
          headers: { authorization: `Bearer ${readToken}`, range: `bytes=1000-${FILE_BYTES - 1001}` },
        };
        const healthz = (await load(loadAgent, health, LOAD_SECONDS)).requestsPerSecond;
        const reconstructions = (await load(loadAgent, reconstruction, LOAD_SECONDS)).requestsPerSecond;
        const upload = await uploadRound(server.url, { authorization: `Bearer ${writeToken}` }, bodies, bodyAgent);
        const urls = new HmacTransferUrls({ key: keys.urlKey, publicUrl: server.url, ttlSeconds: 3600 });
        const started = performance.now();
        await fetchAll(bodyAgent, (i) => ({ url: urls.sign(XORB, singleRange(i)), ranges: singleRange(i) }));
        const transfer = megabytesPerSecond(REQUESTS_PER_RUN * MiB, (performance.now() - started) / 1000);
        into?.healthz.push(healthz);
        into?.reconstruction.push(reconstructions);
        into?.upload.push(upload);
        into?.transfer.push(transfer);
      } finally {
        loadAgent.destroy();
        bodyAgent.destroy();
      }
    };
    // A warm-up round each (JIT, page cache, connections), then the measured rounds in turn.
    for (const server of servers) await measureRound(server, null);
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, server] of servers.entries()) await measureRound(server, measured[i]);
    }

    const rows: BenchRow[] = [];
    for (const { metric, label, unit } of METRICS) {
      for (const [i, workers] of WORKER_COUNTS.entries()) {
        rows.push(benchRow(GROUP, `--workers ${workers}: ${label}`, Math.max(...measured[i][metric]), unit, { median: median(measured[i][metric]) }));
      }
      const ratios = measured[1][metric].map((value, round) => value / measured[0][metric][round]);
      rows.push(
        benchRow(GROUP, `--workers 2 / --workers 1: ${metric}`, Math.max(...ratios), "ratio", {
          median: median(ratios),
          note: "per round: the two servers measured one after the other",
        }),
      );
    }
    return rows;
  } finally {
    await Promise.all(servers.map((server) => server.stop()));
    await rm(dataDir, { recursive: true, force: true });
  }
}
