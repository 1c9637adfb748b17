/**
 * The real clients against castor as a pull-through mirror. Content is pushed to a test upstream
 * (a second castor behind a proxy answering as huggingface.co does: resolve of Xet files as a
 * redirect to another host, its CAS on that host) with the very libraries users push with; the
 * clients then talk to the mirror only (HF_ENDPOINT = the mirror):
 *
 * - curl with Range of a cold Xet file (castor streams it while fetching it), and of a git file;
 * - `hf download` (huggingface_hub 2.0.0 + hf_xet 1.6.0) of a whole repository, cold: hf_xet reads
 *   the Xet files through castor's own CAS, which fetched them through the upstream's Xet protocol;
 * - hf_hub_download and snapshot_download (huggingface_hub 1.33.0) on a fresh machine, warm: no
 *   file content is fetched from the upstream again;
 * - HfFileSystem: listings, info, ranged reads (seek + read) and copies;
 * - transformers' from_pretrained at a branch, a tag and a commit id;
 * - datasets' load_dataset, full and streaming (ranged GETs of the parquet file);
 * - `castor mirror pull`, then the upstream gone, then from_pretrained still loads the model;
 * - a private upstream repository refused to a token of another namespace.
 *
 * Heavy (torch, transformers, datasets): skipped with CASTOR_SKIP_HEAVY=1 locally, never in CI.
 */
import assert from "node:assert/strict";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";
import { startTestUpstream, type TestUpstream } from "../helpers/upstream-hub.js";
import { until } from "../helpers/wait.js";
import {
  clientEnv,
  describeRequests,
  filesBelow,
  heavySuiteSkip,
  lastJson,
  pythonVenv,
  removeDir,
  runChild,
  runOk,
  sha256Hex,
  tempDir,
  USER,
  venvScript,
  type HubServer,
} from "./hub-clients.js";

/** The pins of hub-libraries.test.ts and hub-cli.test.ts, so the venvs are shared. */
const LIBRARIES = ["huggingface_hub==1.33.0", "hf_xet==1.6.0", "transformers==5.17.0", "torch==2.13.0+cpu", "safetensors", "datasets==5.0.1"];
const CLI = ["huggingface_hub==2.0.0", "hf_xet==1.6.0"];
const LIBRARIES_DRIVER = fileURLToPath(new URL("./hub_libraries_driver.py", import.meta.url));
const HFAPI_DRIVER = fileURLToPath(new URL("./hub_hfapi_driver.py", import.meta.url));
const PYTHON_TIMEOUT_MS = 300_000;

describe("the real clients against castor mirroring an upstream hub", { skip: heavySuiteSkip("the mirror's client suite") }, () => {
  let upstream: TestUpstream;
  let mirror: ServerProcess;
  let python: string;
  let cliPython: string;
  let workDir: string;
  /** Pushing to the upstream directly, as its users do. */
  let upstreamHub: HubServer;
  /** Reading through the mirror. */
  let mirrorHub: HubServer;
  let machines = 0;
  const files = { repo: `${USER}/hfapi-files`, dir: "", commits: [] as string[] };

  /**
   * The files repository as the upstream holds it at its last commit: the files uploaded, and the
   * .gitattributes the upstream keeps covering its Xet files (as the Hub does), read from the upstream.
   */
  async function upstreamFiles(): Promise<Map<string, Buffer>> {
    const held = await filesBelow(join(files.dir, "originals"));
    const response = await fetch(`${upstream.hubUrl}/${files.repo}/resolve/${files.commits.at(-1)}/.gitattributes`, {
      headers: { authorization: `Bearer ${upstream.adminToken}` },
    });
    assert.equal(response.status, 200, "the upstream holds a .gitattributes");
    held.set(".gitattributes", Buffer.from(await response.arrayBuffer()));
    return held;
  }

  const machine = () => join(workDir, "machines", String(machines++));

  before(async () => {
    [python, cliPython, upstream, workDir] = await Promise.all([
      pythonVenv("hub-libraries", LIBRARIES),
      pythonVenv("hub-cli", CLI),
      startTestUpstream(),
      tempDir("castor-mirror-clients-"),
    ]);
    mirror = await startCastorServer({
      env: { CASTOR_UPSTREAM_URL: upstream.hubUrl, CASTOR_UPSTREAM_TOKEN: upstream.adminToken, CASTOR_UPSTREAM_REFRESH: "1s", CASTOR_HUB_RATE_LIMIT: "off" },
    });
    const mirrorToken = await runCastor(["token", "create", "--user", USER, "--namespace", USER, "--access", "read"], { env: mirror.settings });
    assert.equal(mirrorToken.code, 0, mirrorToken.stderr);
    // The upstream castor's public URL is the proxy's CAS host, which forwards every route to it.
    upstreamHub = { ...hubOf(upstream.castor), endpoint: upstream.casUrl, token: await upstream.token({ namespace: USER }, "write") };
    mirrorHub = { ...hubOf(mirror), endpoint: mirror.url, token: mirrorToken.stdout.trimEnd().split("\n").at(-1)! };
  });

  after(async () => {
    await mirror?.stop();
    await upstream?.stop();
    await removeDir(workDir);
  });

  const run = async <T>(hub: HubServer, script: string, command: string, args: string[], extra: Record<string, string> = {}): Promise<T> => {
    const env = clientEnv(hub, machine(), { TRANSFORMERS_VERBOSITY: "error", TOKENIZERS_PARALLELISM: "false", ...extra });
    return lastJson<T>(await runOk(hub, `${script} ${command}`, python, [script, command, ...args], { env, timeoutMs: PYTHON_TIMEOUT_MS }));
  };

  it("curl with Range reads a cold Xet file through the mirror while castor fetches it; a git file whole", async () => {
    files.dir = join(workDir, "hfapi-files");
    await mkdir(files.dir, { recursive: true });
    files.commits = (await run<{ commits: string[] }>(upstreamHub, HFAPI_DRIVER, "upload", [files.repo, files.dir])).commits;
    const originals = await filesBelow(join(files.dir, "originals"));
    const big = originals.get("big.bin")!;
    const from = upstream.casBytes();
    const curl = async (path: string, ...args: string[]) => {
      const out = join(workDir, `curl-${path}`);
      const result = await runChild(
        "curl",
        [
          "-sS",
          "-f",
          "-H",
          `Authorization: Bearer ${mirrorHub.token}`,
          "-o",
          out,
          "-w",
          "%{http_code}",
          ...args,
          `${mirror.url}/${files.repo}/resolve/main/${path}`,
        ],
        { env: process.env, timeoutMs: 120_000 },
      );
      assert.equal(result.code, 0, `curl ${path}: ${result.stderr}`);
      return { status: result.stdout.trim(), body: await readFile(out) };
    };
    const ranged = await curl("big.bin", "-r", "5000000-6999999");
    assert.equal(ranged.status, "206");
    assert.equal(sha256Hex(ranged.body), sha256Hex(big.subarray(5_000_000, 7_000_000)), "the range, byte-exact");
    // The fill goes on past the range curl asked for: castor fetches the whole file from the upstream.
    await until(() => upstream.casBytes() - from >= big.length * 0.99, "castor fetched the file from the upstream", 60_000, 50);
    const small = await curl("small.txt");
    assert.deepEqual([small.status, small.body.toString()], ["200", originals.get("small.txt")!.toString()]);
  });

  it("hf download of a whole repository, cold: hf_xet reads the Xet files through castor's CAS", async () => {
    const originals = await upstreamFiles();
    const out = join(workDir, "hf-download");
    const from = mirror.logLines().length;
    const casFrom = upstream.casBytes();
    const upstreamFrom = upstream.requests().length;
    const env = clientEnv(mirrorHub, machine());
    await runOk(mirrorHub, "hf download", venvScript(cliPython, "hf"), ["download", files.repo, "--local-dir", out], { env, timeoutMs: PYTHON_TIMEOUT_MS });
    const downloaded = await filesBelow(out);
    assert.deepEqual([...downloaded.keys()].sort(), [...originals.keys()].sort());
    for (const [path, bytes] of originals) assert.equal(sha256Hex(downloaded.get(path)!), sha256Hex(bytes), path);
    const requests = mirror.requestLog(from);
    assert.ok(
      requests.some((line) => /^\/v[12]\/reconstructions\//.test(line.path) && line.statusCode === 200),
      `hf_xet asked castor's CAS:\n${describeRequests(requests)}`,
    );
    assert.ok(!upstream.requests(upstreamFrom).some((r) => r.host === "cas" && r.hubToken), "castor's upstream token never went to the upstream's CAS host");
    assert.ok(upstream.casBytes() > casFrom, "the files not fetched before came from the upstream now");
  });

  it("hf_hub_download and snapshot_download on a fresh machine, warm: nothing fetched upstream again", async () => {
    const originals = await filesBelow(join(files.dir, "originals"));
    const held = await upstreamFiles();
    const casFrom = upstream.casBytes();
    const downloaded = await run<{ hfHubDownload: Record<string, string>; snapshot: Record<string, string>; snapshotCommit: string }>(
      mirrorHub,
      HFAPI_DRIVER,
      "download",
      [files.repo, join(workDir, "warm")],
    );
    const digests = (files: Map<string, Buffer>) =>
      Object.fromEntries([...files].map(([path, bytes]) => [path, sha256Hex(bytes)]).sort(([a], [b]) => (a < b ? -1 : 1)));
    assert.deepEqual(downloaded.hfHubDownload, digests(originals), "each file asked for");
    assert.deepEqual(downloaded.snapshot, digests(held), "the whole repository");
    assert.equal(downloaded.snapshotCommit, files.commits[2], "filed under the upstream's commit id");
    assert.equal(upstream.casBytes(), casFrom, "every file came from castor's store");
  });

  it("HfFileSystem lists, describes and reads slices through the mirror", async () => {
    const originals = await filesBelow(join(files.dir, "originals"));
    const fs = await run<{ lsNames: string[]; reads: Record<string, { start: number; length: number; sha256: string }>; readWhole: string; getFile: string }>(
      mirrorHub,
      HFAPI_DRIVER,
      "fs",
      [files.repo, files.dir, files.commits[0]],
    );
    const at = (path: string) => `${files.repo}/${path}`;
    assert.deepEqual(fs.lsNames, [at(".gitattributes"), at("big.bin"), at("folder"), at("small.txt")]);
    const big = originals.get("big.bin")!;
    const middle = fs.reads["big.bin middle"];
    assert.equal(middle.sha256, sha256Hex(big.subarray(middle.start, middle.start + middle.length)), "a slice of the Xet file");
    assert.equal(fs.readWhole, sha256Hex(big));
    assert.equal(fs.getFile, sha256Hex(big));
  });

  it("from_pretrained at a branch, a tag and a commit id through the mirror", async () => {
    const repo = `${USER}/tiny-bert-revisions`;
    const pushed = await run<{ commits: Record<"v1" | "v2" | "v3", string>; digests: Record<"v1" | "v2" | "v3", string> }>(
      upstreamHub,
      LIBRARIES_DRIVER,
      "push-revisions",
      [repo],
    );
    const revisions = ["main", "v1", "dev", pushed.commits.v2];
    const loaded = await run<Record<string, { digest: string; commitFolders: string[] }>>(mirrorHub, LIBRARIES_DRIVER, "load-revisions", [
      repo,
      join(workDir, "revisions"),
      ...revisions,
    ]);
    assert.deepEqual(
      revisions.map((revision) => [revision, loaded[revision].digest, loaded[revision].commitFolders]),
      [
        ["main", pushed.digests.v3, [pushed.commits.v3]],
        ["v1", pushed.digests.v1, [pushed.commits.v1]],
        ["dev", pushed.digests.v2, [pushed.commits.v2]],
        [pushed.commits.v2, pushed.digests.v2, [pushed.commits.v2]],
      ],
    );
  });

  it("load_dataset, full and streaming, through the mirror", async () => {
    const repo = `${USER}/table`;
    const pushed = await run<{ rows: unknown[] }>(upstreamHub, LIBRARIES_DRIVER, "push-dataset", [repo]);
    const full = await run<{ rows: unknown[]; type: string }>(mirrorHub, LIBRARIES_DRIVER, "load-dataset", [repo]);
    assert.equal(full.type, "Dataset");
    assert.deepEqual(full.rows, pushed.rows);
    const streamed = await run<{ rows: unknown[]; type: string }>(mirrorHub, LIBRARIES_DRIVER, "stream-dataset", [repo]);
    assert.equal(streamed.type, "IterableDataset");
    assert.deepEqual(streamed.rows, pushed.rows);
  });

  it("castor mirror pull, then the upstream gone: from_pretrained still loads the model", async () => {
    const repo = `${USER}/tiny-bert`;
    const modelDir = join(workDir, "bert");
    await mkdir(modelDir, { recursive: true });
    await run(upstreamHub, LIBRARIES_DRIVER, "push-model", [repo, modelDir]);
    const pulled = await runCastor(["mirror", "pull", `model:${repo}`], { env: mirror.settings, timeoutMs: 120_000 });
    assert.equal(pulled.code, 0, pulled.stderr);
    upstream.stopUpstream();
    try {
      await new Promise((resolve) => setTimeout(resolve, 1100));
      const loaded = await run<{ differingTensors: string[]; sameOutput: boolean }>(mirrorHub, LIBRARIES_DRIVER, "load-model", [repo, modelDir]);
      assert.deepEqual(loaded.differingTensors, []);
      assert.equal(loaded.sameOutput, true);
    } finally {
      upstream.startUpstream();
    }
  });

  it("gives a private upstream repository to tokens of its namespace only", async () => {
    await upstream.createRepo("model:someone/private", { private: true });
    await upstream.commit("model:someone/private", [{ path: "secret.txt", bytes: Buffer.from("not for alice\n"), storage: "inline" }]);
    const hf = venvScript(cliPython, "hf");
    const refused = await runChild(hf, ["download", "someone/private", "--local-dir", join(workDir, "refused")], {
      env: clientEnv(mirrorHub, machine()),
      timeoutMs: 120_000,
    });
    assert.notEqual(refused.code, 0);
    assert.match(refused.stdout + refused.stderr, /'someone\/private' not found/);
    const created = await runCastor(["token", "create", "--user", "someone", "--namespace", "someone", "--access", "read"], { env: mirror.settings });
    const someone = { ...mirrorHub, token: created.stdout.trimEnd().split("\n").at(-1)! };
    const out = join(workDir, "granted");
    await runOk(someone, "hf download", hf, ["download", "someone/private", "--local-dir", out], { env: clientEnv(someone, machine()), timeoutMs: 120_000 });
    assert.equal((await readFile(join(out, "secret.txt"))).toString(), "not for alice\n");
  });
});

function hubOf(server: ServerProcess): Omit<HubServer, "endpoint" | "token"> {
  return {
    server,
    countStoredXorbs: async () => 0,
    adminCreateRepo: async () => undefined,
    diagnostics: () => "",
    stop: () => server.stop().then(() => undefined),
  };
}
