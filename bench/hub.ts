/**
 * The hub's routes on a real compiled `castor serve` (embedded store):
 *
 * - plain HTTP download of a 256 MiB Xet-stored file (`GET /{ns}/{name}/resolve/main/…`,
 *   reconstructed and verified by the server) against fetching the same file's xorb ranges
 *   through the transfer route, as a Xet client does; one stream each, over keep-alive, 5 paired
 *   rounds. Target: resolve ≥ 0.7 × transfer.
 * - one NDJSON commit of 1,000 small inline files.
 * - tree listings of a 10,000-file repository (100 folders × 100 files): a full recursive
 *   page (1,000 entries) and a one-folder listing, requests per second from 4 clients.
 */
import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { upload } from "../src/client/index.js";
import { parseReconstructionV1 } from "../src/format/reconstruction.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { benchRow, deterministicRandomBytes, median, megabytesPerSecond, type BenchRow } from "./lib.js";

const GROUP = "hub";
const MiB = 1024 * 1024;
const FILE_BYTES = 256 * MiB;
const REPETITIONS = 5;
const COMMIT_FILES = 1000;
const TREE_FOLDERS = 100;
const FILES_PER_FOLDER = 100;
const TREE_CLIENTS = 4;
const TREE_SECONDS = 3;
const RATIO_TARGET = 0.7;

export async function run(): Promise<BenchRow[]> {
  const work = await mkdtemp(join(tmpdir(), "castor-bench-hub-"));
  const server = await startCastorServer({ compiled: true });
  const agent = new Agent({ keepAlive: true, maxSockets: TREE_CLIENTS });
  try {
    const fixture = await hubFixture(server, { repoType: "model", repoName: "bench/hub" });
    const token = fixture.hubTokens.write;
    const rows: BenchRow[] = [];

    // A 256 MiB file, uploaded through Xet and committed by its SHA-256.
    const content = deterministicRandomBytes(FILE_BYTES, 11);
    const path = join(work, "model.bin");
    await writeFile(path, content);
    const sha256 = createHash("sha256").update(content).digest("hex");
    const uploaded = await upload({ endpoint: server.url, hubToken: token, repo: "model:bench/hub", files: [path] });
    await commit(server, token, "bench/hub", [JSON.stringify({ key: "lfsFile", value: { path: "model.bin", algo: "sha256", oid: sha256, size: FILE_BYTES } })]);

    // Each round times both routes back to back, and the ratio is the median of the rounds' ratios: on a
    // shared machine a burst of other work then moves both sides of a round, not just one.
    const resolveRates: number[] = [];
    const transferRates: number[] = [];
    const ratios: number[] = [];
    for (let i = 0; i < REPETITIONS; i++) {
      const resolveSeconds = await timed(() =>
        drain(agent, `${server.url}/bench/hub/resolve/main/model.bin`, { authorization: `Bearer ${token}` }, FILE_BYTES),
      );
      const casToken = (await fixture.casToken("read")).accessToken;
      const transferSeconds = await timed(() => fetchThroughTransferRoute(agent, server, uploaded.files[0].fileHash, casToken));
      resolveRates.push(megabytesPerSecond(FILE_BYTES, resolveSeconds));
      transferRates.push(megabytesPerSecond(FILE_BYTES, transferSeconds));
      ratios.push(transferSeconds / resolveSeconds);
    }
    rows.push(benchRow(GROUP, "resolve GET, 256 MiB Xet file (server reconstructs)", median(resolveRates), "MB/s"));
    rows.push(benchRow(GROUP, "transfer route, same file's xorb ranges", median(transferRates), "MB/s"));
    rows.push(benchRow(GROUP, "resolve GET / transfer route (median of paired rounds)", median(ratios), "ratio", { target: { atLeast: RATIO_TARGET } }));

    // One commit of 1,000 inline files.
    const files = Array.from({ length: COMMIT_FILES }, (_, i) =>
      JSON.stringify({ key: "file", value: { path: `many/file-${i}.txt`, encoding: "base64", content: Buffer.from(`file ${i}\n`).toString("base64") } }),
    );
    const commitSeconds = await timed(() => commit(server, token, "bench/hub", files));
    rows.push(benchRow(GROUP, `commit of ${COMMIT_FILES} inline files`, commitSeconds * 1000, "ms"));

    // A 10,000-file repository, listed.
    const tree = Array.from({ length: TREE_FOLDERS * FILES_PER_FOLDER }, (_, i) =>
      JSON.stringify({
        key: "file",
        value: {
          path: `d${Math.floor(i / FILES_PER_FOLDER)}/f${i % FILES_PER_FOLDER}.txt`,
          encoding: "base64",
          content: Buffer.from(`${i}`).toString("base64"),
        },
      }),
    );
    const treeCommitSeconds = await timed(() => commit(server, token, "bench/hub", tree));
    rows.push(benchRow(GROUP, `commit of ${tree.length} inline files`, treeCommitSeconds * 1000, "ms"));
    const headers = { authorization: `Bearer ${token}` };
    rows.push(
      benchRow(
        GROUP,
        "tree, recursive page of 1,000 entries (11,000-file repo)",
        await requestsPerSecond(agent, `${server.url}/api/models/bench/hub/tree/main?recursive=true`, headers),
        "req/s",
      ),
    );
    rows.push(
      benchRow(GROUP, "tree, one folder of 100 files", await requestsPerSecond(agent, `${server.url}/api/models/bench/hub/tree/main/d42`, headers), "req/s"),
    );
    return rows;
  } finally {
    agent.destroy();
    await server.stop();
    await rm(work, { recursive: true, force: true });
  }
}

async function timed(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return (performance.now() - started) / 1000;
}

async function commit(server: ServerProcess, token: string, repo: string, operations: string[]): Promise<void> {
  const body = `${[JSON.stringify({ key: "header", value: { summary: "bench", description: "" } }), ...operations].join("\n")}\n`;
  const response = await fetch(`${server.url}/api/models/${repo}/commit/main`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/x-ndjson" },
    body,
  });
  if (response.status !== 200) throw new Error(`commit answered ${response.status}: ${await response.text()}`);
}

/** GETs `url` and discards the body; fails unless it is exactly `expectedBytes` long. */
function drain(agent: Agent, url: string, headers: Record<string, string>, expectedBytes?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { agent, headers }, (response) => {
      let bytes = 0;
      response.on("data", (piece: Buffer) => (bytes += piece.length));
      response.on("end", () => {
        if ((response.statusCode ?? 0) >= 300) reject(new Error(`GET ${url} answered ${response.statusCode}`));
        else if (expectedBytes !== undefined && bytes !== expectedBytes) reject(new Error(`GET ${url}: ${bytes} bytes, expected ${expectedBytes}`));
        else resolve(bytes);
      });
      response.on("error", reject);
    });
    request.on("error", reject);
    request.end();
  });
}

/** The file's reconstruction, then every fetch range of it through the transfer route, one after another. */
async function fetchThroughTransferRoute(agent: Agent, server: ServerProcess, fileHash: string, casToken: string): Promise<void> {
  const response = await fetch(`${server.url}/v1/reconstructions/${fileHash}`, { headers: { authorization: `Bearer ${casToken}` } });
  const reconstruction = parseReconstructionV1(await response.json());
  for (const infos of Object.values(reconstruction.fetch_info)) {
    for (const info of infos) {
      await drain(agent, info.url, { range: `bytes=${info.url_range.start}-${info.url_range.end}` }, info.url_range.end - info.url_range.start + 1);
    }
  }
}

async function requestsPerSecond(agent: Agent, url: string, headers: Record<string, string>): Promise<number> {
  await drain(agent, url, headers);
  let count = 0;
  const deadline = performance.now() + TREE_SECONDS * 1000;
  const client = async () => {
    while (performance.now() < deadline) {
      await drain(agent, url, headers);
      count++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: TREE_CLIENTS }, client));
  return count / ((performance.now() - started) / 1000);
}
