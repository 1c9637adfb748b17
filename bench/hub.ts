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
 * - paths that once took a quadratic regular expression hours: paths-info of a path of
 *   1,000,000 slashes between two letters, `trimSlashes` on it, and a commit line deleting a
 *   folder of 200,000 slashes (the unit tests check the answers, these rows the time).
 *
 * The server runs without the per-token request limit (CASTOR_HUB_RATE_LIMIT=off): the listings
 * send thousands of requests a minute with one token, and a benchmark of the routes must not
 * measure the limiter's 429s instead.
 */
import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { Agent, request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { upload } from "../src/client/index.js";
import { parseReconstructionV1 } from "../src/format/reconstruction.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../test/helpers/server.js";
import { trimSlashes } from "../src/format/repo.js";
import { CommitPayloadParser, maxCommitLineBytes } from "../src/hub/commit-payload.js";
import { HubError } from "../src/hub/errors.js";
import { DEFAULT_HUB_INLINE_MAX_BYTES } from "../src/config.js";
import { benchRow, deterministicRandomBytes, median, megabytesPerSecond, sized, timeRepeated, type BenchRow } from "./lib.js";

const GROUP = "hub";
const MiB = 1024 * 1024;
const FILE_BYTES = sized(256, 8) * MiB;
const REPETITIONS = sized(5, 1);
const COMMIT_FILES = sized(1000, 50);
const TREE_FOLDERS = sized(100, 5);
const FILES_PER_FOLDER = sized(100, 10);
/** The folder of the one-folder listing. */
const LISTED_FOLDER = `d${Math.min(42, TREE_FOLDERS - 1)}`;
const TREE_CLIENTS = 4;
const TREE_SECONDS = sized(3, 0.5);
const RATIO_TARGET = 0.7;
const SLASHES_IN_PATH = 1_000_000;
const SLASHES_IN_COMMIT_LINE = 200_000;

export async function run(): Promise<BenchRow[]> {
  const work = await mkdtemp(join(tmpdir(), "castor-bench-hub-"));
  const server = await startCastorServer({ compiled: true, env: { CASTOR_HUB_RATE_LIMIT: "off" } });
  const agent = new Agent({ keepAlive: true, maxSockets: TREE_CLIENTS });
  try {
    const fixture = await hubFixture(server, { repoType: "model", repoName: "bench/hub" });
    const token = fixture.hubTokens.write;
    const rows: BenchRow[] = [];

    // A 256 MiB file (8 MiB in a smoke run), uploaded through Xet and committed by its SHA-256.
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
    rows.push(benchRow(GROUP, `resolve GET, ${FILE_BYTES / MiB} MiB Xet file (server reconstructs)`, median(resolveRates), "MB/s"));
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
    const repoFiles = 1 + COMMIT_FILES + tree.length;
    rows.push(
      benchRow(
        GROUP,
        `tree, recursive page of ${Math.min(1000, repoFiles).toLocaleString("en-US")} entries (${repoFiles.toLocaleString("en-US")}-file repo)`,
        await requestsPerSecond(agent, `${server.url}/api/models/bench/hub/tree/main?recursive=true`, headers),
        "req/s",
      ),
    );
    rows.push(
      benchRow(
        GROUP,
        `tree, one folder of ${FILES_PER_FOLDER} files`,
        await requestsPerSecond(agent, `${server.url}/api/models/bench/hub/tree/main/${LISTED_FOLDER}`, headers),
        "req/s",
      ),
    );
    rows.push(...(await longPathRows(server, token)));
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

/**
 * The inputs that once met a quadratic regular expression, timed: milliseconds now, hours then.
 * test/hub/commit-payload.test.ts and test/http/hub-routes-more.ts check their answers.
 */
async function longPathRows(server: ServerProcess, token: string): Promise<BenchRow[]> {
  const long = `a${"/".repeat(SLASHES_IN_PATH)}b`;
  const slashes = SLASHES_IN_PATH.toLocaleString("en-US");
  const pathsInfo = await timeRepeated(async () => {
    for (const expand of [false, true]) {
      const response = await fetch(`${server.url}/api/models/bench/hub/paths-info/main`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ paths: [long, `${long}/`], expand }),
      });
      if (response.status !== 200) throw new Error(`paths-info answered ${response.status}: ${await response.text()}`);
      await response.arrayBuffer();
    }
  }, 3);
  const trim = await timeRepeated(() => {
    if (trimSlashes(`${long}/`) !== long) throw new Error("trimSlashes changed the path");
  }, 3);
  const folderLine = JSON.stringify({ key: "deletedFolder", value: { path: `a${"/".repeat(SLASHES_IN_COMMIT_LINE)}b` } });
  const header = JSON.stringify({ key: "header", value: { summary: "bench", description: "" } });
  const parse = await timeRepeated(() => {
    const parser = new CommitPayloadParser(DEFAULT_HUB_INLINE_MAX_BYTES);
    parser.line(header);
    try {
      parser.line(folderLine);
    } catch (error) {
      if (error instanceof HubError && error.status === 400) return;
      throw error;
    }
    throw new Error("a deletedFolder path of slashes was accepted");
  }, 3);
  if (folderLine.length > maxCommitLineBytes(DEFAULT_HUB_INLINE_MAX_BYTES)) throw new Error("the commit line is longer than the server would take");
  return [
    benchRow(GROUP, `paths-info, 2 paths of ${slashes} slashes between two letters, without and with expand`, pathsInfo.best * 1000, "ms", {
      median: pathsInfo.median * 1000,
    }),
    benchRow(GROUP, `trimSlashes, ${slashes} slashes between two letters`, trim.best * 1000, "ms", { median: trim.median * 1000 }),
    benchRow(GROUP, `commit line deleting a folder of ${SLASHES_IN_COMMIT_LINE.toLocaleString("en-US")} slashes (refused, 400)`, parse.best * 1000, "ms", {
      median: parse.median * 1000,
    }),
  ];
}
