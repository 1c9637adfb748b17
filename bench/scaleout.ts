/**
 * Scale-out mode next to embedded mode, in one run: castor's client uploading and downloading
 * a 256 MiB random file, and V2 reconstruction requests per second, against
 *
 * - an embedded `castor serve` (SQLite + files in its data dir), and
 * - a scale-out `castor serve` (PostgreSQL + Ceph RGW, keys from configuration), on the
 *   services of `scripts/services.sh start` (the `CASTOR_TEST_*` environment).
 *
 * Without that environment the group measures nothing and returns one row saying why.
 *
 * Every upload goes to a server that has never seen the file (a fresh data dir, or a fresh
 * database and key prefix), so deduplication skips nothing; downloads are checked byte-exact
 * (SHA-256) outside the timed part. A round starts both servers, then uploads to each and
 * downloads from each back to back (the order flips every round), so a burst of load from
 * other processes on the 2 shared cores tends to hit both modes alike; the ratios are
 * scale-out / embedded. Reconstruction load: 16 keep-alive clients, each request asking for a
 * new byte range of the uploaded file, so every answer is planned and rendered (castor checks
 * the file ↔ repository link in the metadata store on every request, which is where the
 * two modes differ).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CastorClient } from "../src/client/index.js";
import { hubFixture, scaleOutUnavailable, startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { benchRow, megabytesPerSecond, median, sized, type BenchRow } from "./lib.js";
import { verifyDownload, writeRandomFile } from "./support/random-file.js";

const GROUP = "scaleout";
const FILE_BYTES = sized(256, 8) * 1024 * 1024;
const FILE_SEED = 7;
const ROUNDS = sized(2, 1);
const LOAD_CLIENTS = 16;
const LOAD_WARMUP_SECONDS = sized(1, 0.2);
const LOAD_SECONDS = sized(3, 0.5);
/** Upper bound on requests per load run, so a fast machine does not queue unbounded work. */
const MAX_LOAD_REQUESTS = 100_000;
const REPO = { type: "model", name: "bench/scaleout" } as const;

type Mode = "embedded" | "scale-out";
const MODES: readonly Mode[] = ["embedded", "scale-out"];

interface Rates {
  upload: number[];
  download: number[];
}

interface Deployment {
  mode: Mode;
  server: ServerProcess;
  client: CastorClient;
  readToken(): Promise<string>;
}

export async function run(): Promise<BenchRow[]> {
  const unavailable = scaleOutUnavailable();
  if (unavailable !== null) {
    return [benchRow(GROUP, "scale-out mode", 0, "skipped", { note: `not measured: ${unavailable}` })];
  }

  const scratch = await mkdtemp(join(tmpdir(), "castor-bench-scaleout-"));
  try {
    const source = join(scratch, "random.bin");
    const file = await writeRandomFile(source, FILE_BYTES, FILE_SEED);
    const rates: Record<Mode, Rates> = { embedded: { upload: [], download: [] }, "scale-out": { upload: [], download: [] } };
    const load = {} as Record<Mode, LoadResult>;

    for (let round = 0; round < ROUNDS; round++) {
      const deployments = await startDeployments();
      try {
        if (round % 2 === 1) deployments.reverse();
        const fileHashes = new Map<Mode, string>();
        for (const deployment of deployments) {
          const started = performance.now();
          const { files } = await deployment.client.upload([source]);
          rates[deployment.mode].upload.push(megabytesPerSecond(FILE_BYTES, (performance.now() - started) / 1000));
          // A dedup hit would flatter the mode: every byte must have been sent.
          if (files[0].newBytes !== FILE_BYTES) throw new Error(`${deployment.mode}: the client stored ${files[0].newBytes} of ${FILE_BYTES} bytes as new`);
          fileHashes.set(deployment.mode, files[0].fileHash);
        }
        if (new Set(fileHashes.values()).size !== 1) throw new Error(`the modes disagree on the file hash: ${[...fileHashes.values()].join(", ")}`);
        for (const deployment of deployments) {
          const output = join(scratch, `download-${deployment.mode}.bin`);
          const started = performance.now();
          await deployment.client.download({ fileHash: fileHashes.get(deployment.mode)!, output });
          rates[deployment.mode].download.push(megabytesPerSecond(FILE_BYTES, (performance.now() - started) / 1000));
          await verifyDownload(output, file, deployment.mode);
        }
        if (round === ROUNDS - 1) {
          for (const deployment of deployments) {
            load[deployment.mode] = await reconstructionLoad(deployment, fileHashes.get(deployment.mode)!);
          }
        }
      } finally {
        await Promise.all(deployments.map((deployment) => deployment.server.stop()));
      }
    }
    return report(rates, load);
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

function report(rates: Record<Mode, Rates>, load: Record<Mode, LoadResult>): BenchRow[] {
  const rows: BenchRow[] = [];
  const note = `castor's client, ${FILE_BYTES / 1024 / 1024} MiB random file, best and median of ${ROUNDS} rounds`;
  for (const transfer of ["upload", "download"] as const) {
    for (const mode of MODES) {
      const values = rates[mode][transfer];
      rows.push(benchRow(GROUP, `${mode} ${transfer}`, Math.max(...values), "MB/s", { median: median(values), note }));
    }
  }
  for (const mode of MODES) {
    const result = load[mode];
    rows.push(
      benchRow(GROUP, `${mode} GET /v2/reconstructions`, result.requestsPerSecond, "req/s", {
        note: `${LOAD_CLIENTS} keep-alive clients, a new range each request; p50 ${result.p50Ms.toFixed(2)} ms, p99 ${result.p99Ms.toFixed(2)} ms`,
      }),
    );
  }
  for (const transfer of ["upload", "download"] as const) {
    rows.push(
      benchRow(GROUP, `${transfer}: scale-out / embedded`, Math.max(...rates["scale-out"][transfer]) / Math.max(...rates.embedded[transfer]), "ratio", {
        note: "best ÷ best",
      }),
    );
  }
  rows.push(benchRow(GROUP, "reconstruction req/s: scale-out / embedded", load["scale-out"].requestsPerSecond / load.embedded.requestsPerSecond, "ratio"));
  return rows;
}

/** One fresh server per mode, each with its repository and tokens; all started before any transfer. */
async function startDeployments(): Promise<Deployment[]> {
  const deployments: Deployment[] = [];
  try {
    for (const mode of MODES) {
      const server = await startCastorServer({ scaleOut: mode === "scale-out", compiled: true });
      const deployment = await deploymentOn(mode, server).catch(async (error) => {
        await server.stop();
        throw error;
      });
      deployments.push(deployment);
    }
    return deployments;
  } catch (error) {
    await Promise.all(deployments.map((deployment) => deployment.server.stop()));
    throw error;
  }
}

async function deploymentOn(mode: Mode, server: ServerProcess): Promise<Deployment> {
  const fixture = await hubFixture(server, { repoType: REPO.type, repoName: REPO.name });
  return {
    mode,
    server,
    client: new CastorClient({ endpoint: server.url, hubToken: fixture.hubTokens.write, repo: `${REPO.type}:${REPO.name}` }),
    readToken: async () => (await fixture.casToken("read")).accessToken,
  };
}

interface LoadResult {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
}

/** V2 reconstructions of `fileHex` from LOAD_CLIENTS concurrent keep-alive clients, a new range each request. */
async function reconstructionLoad(deployment: Deployment, fileHex: string): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: LOAD_CLIENTS });
  try {
    const token = await deployment.readToken();
    const url = new URL(`${deployment.server.url}/v2/reconstructions/${fileHex}`);
    let sequence = 0;
    const requestOnce = async () => {
      const i = sequence++;
      // Ranges that differ every request, so no answer is reused; they stay well inside the file.
      const start = (i * 4099) % (FILE_BYTES / 2);
      const range = `bytes=${start}-${FILE_BYTES - 1 - (i % 65_536)}`;
      const status = await getDiscardingBody(agent, url, { authorization: `Bearer ${token}`, range });
      if (status !== 200) throw new Error(`${deployment.mode}: GET ${url.pathname} answered ${status}`);
    };
    await runLoad(requestOnce, LOAD_WARMUP_SECONDS);
    return await runLoad(requestOnce, LOAD_SECONDS);
  } finally {
    agent.destroy();
  }
}

async function runLoad(requestOnce: () => Promise<void>, seconds: number): Promise<LoadResult> {
  const latencies: number[] = [];
  const started = performance.now();
  const deadline = started + seconds * 1000;
  const worker = async () => {
    while (performance.now() < deadline && latencies.length < MAX_LOAD_REQUESTS) {
      const sent = performance.now();
      await requestOnce();
      latencies.push(performance.now() - sent);
    }
  };
  await Promise.all(Array.from({ length: LOAD_CLIENTS }, worker));
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))];
  return { requestsPerSecond: latencies.length / elapsed, p50Ms: at(0.5), p99Ms: at(0.99) };
}

function getDiscardingBody(agent: Agent, url: URL, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = httpRequest({ agent, hostname: url.hostname, port: url.port, path: url.pathname, headers }, (response) => {
      response.resume();
      response.once("end", () => resolve(response.statusCode ?? 0));
      response.once("error", reject);
    });
    request.once("error", reject);
    request.end();
  });
}
