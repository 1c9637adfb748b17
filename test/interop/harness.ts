/**
 * What the interop tests share: a real `castor serve` with a repository and hub tokens made by
 * the real admin CLI, the real hf_xet client (Python, driven through hf_xet_driver.py in the venv
 * made by scripts/setup-interop.mjs), the real @huggingface/hub client (in-process, with a
 * custom `fetch` standing in for the Hub's own endpoints), deterministic test data and a
 * byte-exact comparison that reports where two buffers differ instead of dumping megabytes.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createCipheriv, createHash, randomUUID } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before } from "node:test";
import { fileURLToPath } from "node:url";
import { __internal_XetBlob as XetBlob, commit } from "@huggingface/hub";
import { download as castorDownload, upload as castorUpload, type DownloadResult, type UploadedFile } from "../../src/client/index.js";
import { loadConfig } from "../../src/config.js";
import { chunkBoundaries } from "../../src/format/chunker.js";
import { chunkHash, fileHash, hashToHex, type MerkleEntry } from "../../src/format/hash.js";
import { parseUploadShard } from "../../src/format/shard.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess, type StartServerOptions } from "../helpers/server.js";

const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));
const SETUP_SCRIPT = join(REPO_ROOT, "scripts", "setup-interop.mjs");
const HF_XET_DRIVER = fileURLToPath(new URL("./hf_xet_driver.py", import.meta.url));

export const MIB = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Test data

/**
 * Deterministic pseudo-random bytes: AES-128-CTR keystream keyed by the label. Fast (GB/s) and
 * reproducible, so a failure can be replayed with the same bytes; different labels give
 * unrelated data, so one client's upload never dedups against another's by accident.
 */
export function pseudoRandomBytes(label: string, length: number): Uint8Array {
  const key = createHash("sha256").update(label).digest().subarray(0, 16);
  const cipher = createCipheriv("aes-128-ctr", key, Buffer.alloc(16));
  const out = Buffer.concat([cipher.update(Buffer.alloc(length)), cipher.final()]);
  return new Uint8Array(out.buffer, out.byteOffset, length);
}

/** `block` repeated `times` times. */
export function repeated(block: Uint8Array, times: number): Uint8Array {
  const out = new Uint8Array(block.length * times);
  for (let i = 0; i < times; i++) out.set(block, i * block.length);
  return out;
}

export function concatBytes(...parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}

/** Byte-exact equality with a readable failure: lengths and the first differing offset. */
export function assertSameBytes(actual: Uint8Array, expected: Uint8Array, what: string): void {
  if (actual.length === expected.length && Buffer.from(actual.buffer, actual.byteOffset, actual.length).equals(expected)) return;
  let at = 0;
  const common = Math.min(actual.length, expected.length);
  while (at < common && actual[at] === expected[at]) at++;
  assert.fail(
    `${what}: got ${actual.length} bytes, expected ${expected.length}; ` +
      (at < common ? `first difference at byte ${at} (got ${actual[at]}, expected ${expected[at]})` : `identical for the first ${common} bytes`),
  );
}

/** The file hash castor's own format code gives `bytes` (xet-core's chunking and hashing). */
export function expectedFileHash(bytes: Uint8Array): string {
  const leaves: MerkleEntry[] = [];
  let start = 0;
  for (const end of chunkBoundaries(bytes)) {
    leaves.push({ hash: chunkHash(bytes.subarray(start, end)), size: end - start });
    start = end;
  }
  return hashToHex(fileHash(leaves));
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

// ---------------------------------------------------------------------------------------------
// castor: one server, one repository, a read and a write hub token

export const REPO_TYPE = "model";
export const REPO_NAME = "interop/files";
export const REPO = `${REPO_TYPE}:${REPO_NAME}`;

export interface CasToken {
  accessToken: string;
  exp: number;
  casUrl: string;
}

export interface CastorFixture {
  server: ServerProcess;
  dataDir: string;
  hubTokens: { read: string; write: string };
  /** castor's token operation for this repository at `main`, as real clients build it. */
  tokenUrl(access: "read" | "write"): string;
  /** Calls the token operation exactly as a client does. */
  casToken(access: "read" | "write"): Promise<CasToken>;
  /** The serialized xorbs stored under the data dir. */
  countStoredXorbs(): Promise<number>;
  /**
   * What a Hub next to castor would resolve a commit's LFS pointer to: castor's (repository,
   * SHA-256) index, filled from the shards' metadata extension, and that file's recorded size.
   */
  lookupBySha256(sha256: string): Promise<{ hash: string; size: number } | null>;
  stop(): Promise<void>;
}

async function castorOk(dataDir: string, args: string[]): Promise<string> {
  const result = await runCastor(args, { env: { CASTOR_DATA_DIR: dataDir } });
  assert.equal(result.code, 0, `castor ${args.join(" ")} failed:\n${result.stderr}`);
  return result.stdout;
}

async function createHubToken(dataDir: string, access: "read" | "write"): Promise<string> {
  const lastLine = (await castorOk(dataDir, ["token", "create", "--repo", REPO, "--access", access])).trimEnd().split("\n").at(-1) ?? "";
  assert.match(lastLine, /^hf_[A-Za-z0-9_-]+$/, "castor token create prints the hub token on its last line");
  return lastLine;
}

/** A fresh data dir, the repository and tokens made with the admin CLI, then `castor serve`. */
export async function startCastorFixture(env: Record<string, string> = {}, serverOptions: Pick<StartServerOptions, "compiled"> = {}): Promise<CastorFixture> {
  const dataDir = await mkdtemp(join(tmpdir(), "castor-interop-"));
  try {
    await castorOk(dataDir, ["repo", "create", REPO_TYPE, REPO_NAME]);
    const hubTokens = { read: await createHubToken(dataDir, "read"), write: await createHubToken(dataDir, "write") };
    const server = await startCastorServer({ ...serverOptions, dataDir, env });
    const tokenUrl = (access: "read" | "write") => `${server.url}/api/${REPO_TYPE}s/${REPO_NAME}/xet-${access}-token/main`;
    return {
      server,
      dataDir,
      hubTokens,
      tokenUrl,
      async casToken(access) {
        const response = await fetch(tokenUrl(access), { headers: { authorization: `Bearer ${hubTokens[access]}` } });
        assert.equal(response.status, 200, `token operation answered ${response.status}: ${await response.clone().text()}`);
        const body = (await response.json()) as CasToken;
        assert.equal(typeof body.accessToken, "string");
        assert.equal(typeof body.exp, "number");
        assert.equal(typeof body.casUrl, "string");
        return body;
      },
      async countStoredXorbs() {
        const root = join(dataDir, "blobs", "xorbs");
        let count = 0;
        for (const prefix of await readdir(root).catch(() => [] as string[])) {
          count += (await readdir(join(root, prefix))).filter((name) => /^[0-9a-f]{64}$/.test(name)).length;
        }
        return count;
      },
      async lookupBySha256(sha256) {
        const store = await openMetadataStore(loadConfig({ CASTOR_DATA_DIR: dataDir }));
        try {
          const repo = await store.getRepo(REPO_TYPE, REPO_NAME);
          assert.ok(repo, `repository ${REPO} is missing from the metadata store`);
          const hash = await store.findFileBySha256(repo.id, new Uint8Array(Buffer.from(sha256, "hex")));
          if (hash === null) return null;
          const file = await store.getFile(hash);
          assert.ok(file, `castor indexes SHA-256 ${sha256} to ${hashToHex(hash)} but has no such file`);
          return { hash: hashToHex(hash), size: file.size };
        } finally {
          await store.close();
        }
      },
      async stop() {
        await server.stop();
        await rm(dataDir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await rm(dataDir, { recursive: true, force: true });
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------
// hf_xet (Python)

let pythonPromise: Promise<string> | undefined;

/**
 * The venv python with hf_xet installed, made (once per process) by scripts/setup-interop.mjs;
 * building it from scratch takes ~20 s, checking an existing one well under a second.
 */
export function interopPython(): Promise<string> {
  pythonPromise ??= new Promise<string>((resolve, reject) => {
    const child = spawn(process.execPath, [SETUP_SCRIPT], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text));
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));
    child.once("error", reject);
    child.once("close", (code) => {
      if (code === 0) resolve(stdout.trimEnd().split("\n").at(-1)!);
      else reject(new Error(`scripts/setup-interop.mjs failed (exit ${code}):\n${stderr}`));
    });
  });
  return pythonPromise;
}

export interface HfXetUploaded {
  path: string;
  hash: string;
  size: number;
  sha256: string;
}

export interface HfXetRun<T> {
  files: T[];
  /** How often hf_xet called the token refresher. */
  refreshes: number;
}

export interface HfXetOptions {
  /** Declare this expiry for the initial token instead of the real one (to force a refresh). */
  declaredExp?: number;
  /** Run with a cache dir of its own instead of the client's shared one. */
  freshCache?: boolean;
}

/**
 * Runs hf_xet in a child python. Every run of one client shares one HF_XET_CACHE / HF_HOME (a
 * temp dir of this client), like one user's machine; `freshCache` gives a run its own, like a
 * second machine. A failure reports hf_xet's stderr, the tail of its log and castor's last
 * requests; RUST_LOG=debug in the test's environment makes hf_xet's log more detailed.
 */
/** What a suite of interop tests runs against: one castor server, an hf_xet client bound to it, a scratch dir. */
export interface InteropSuite {
  castor: CastorFixture;
  hfxet: HfXetClient;
  workDir: string;
}

/**
 * Registers the `before`/`after` hooks of a suite that drives hf_xet against one castor server
 * started with `env`. The returned object is filled in `before`: read it inside the tests.
 */
export function interopSuite(workDirPrefix: string, env: Record<string, string> = {}): InteropSuite {
  const suite = {} as InteropSuite;
  before(async () => {
    suite.castor = await startCastorFixture(env);
    suite.hfxet = await HfXetClient.create(suite.castor);
    suite.workDir = await mkdtemp(join(tmpdir(), workDirPrefix));
  });
  after(async () => {
    await suite.hfxet?.dispose();
    await suite.castor?.stop();
    if (suite.workDir) await rm(suite.workDir, { recursive: true, force: true });
  });
  return suite;
}

export class HfXetClient {
  private constructor(
    private readonly python: string,
    private readonly castor: CastorFixture,
    private readonly home: string,
  ) {}

  static async create(castor: CastorFixture): Promise<HfXetClient> {
    const python = await interopPython();
    return new HfXetClient(python, castor, await mkdtemp(join(tmpdir(), "castor-interop-hfxet-")));
  }

  upload(paths: string[], options: HfXetOptions = {}): Promise<HfXetRun<HfXetUploaded>> {
    return this.run("write", { op: "upload", paths, repoType: REPO_TYPE }, options);
  }

  download(files: { hash: string; size: number; path: string }[], options: HfXetOptions = {}): Promise<HfXetRun<string>> {
    return this.run("read", { op: "download", files }, options);
  }

  async dispose(): Promise<void> {
    await rm(this.home, { recursive: true, force: true });
  }

  private async run<T>(access: "read" | "write", request: Record<string, unknown>, options: HfXetOptions): Promise<HfXetRun<T>> {
    const token = await this.castor.casToken(access);
    const home = options.freshCache ? await mkdtemp(join(this.home, "fresh-")) : this.home;
    const cache = join(home, "xet-cache");
    await mkdir(cache, { recursive: true });
    const input = JSON.stringify({
      ...request,
      casUrl: token.casUrl,
      accessToken: token.accessToken,
      exp: options.declaredExp ?? token.exp,
      tokenUrl: this.castor.tokenUrl(access),
      hubToken: this.castor.hubTokens[access],
    });
    const env = { ...process.env, HF_HOME: join(home, "hf-home"), HF_XET_CACHE: cache };
    const { code, stdout, stderr } = await runChild(this.python, [HF_XET_DRIVER], input, env, 120_000);
    if (code !== 0) {
      const requests = this.castor.server
        .requestLog()
        .slice(-15)
        .map((line) => `${line.method} ${line.path} → ${line.statusCode}`)
        .join("\n");
      assert.fail(
        `hf_xet ${String(request.op)} failed (exit ${code}):\n${stderr}\n--- hf_xet log (tail) ---\n${await logTail(join(cache, "logs"))}\n` +
          `--- last castor requests ---\n${requests}`,
      );
    }
    return JSON.parse(stdout) as HfXetRun<T>;
  }
}

/**
 * The last lines of hf_xet's newest log file (it logs JSON lines to HF_XET_CACHE/logs, not to
 * stderr), without the start-up dump of its configuration.
 */
export async function logTail(logDir: string, lines = 30): Promise<string> {
  const names = (await readdir(logDir).catch(() => [] as string[])).sort();
  const latest = names.at(-1);
  if (latest === undefined) return "(hf_xet wrote no log file)";
  const text = await readFile(join(logDir, latest), "utf8");
  return text
    .split("\n")
    .filter((line) => line !== "" && !line.includes('"message":"Config: '))
    .slice(-lines)
    .join("\n");
}

/** Runs `command` with `input` on stdin; resolves with its exit code and output. */
export function runChild(
  command: string,
  args: string[],
  input: string,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ["pipe", "pipe", "pipe"], timeout: timeoutMs });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text));
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

// ---------------------------------------------------------------------------------------------
// @huggingface/hub (in-process)

/** A request hf.js made, as seen by the recording fetch. */
export interface RecordedRequest {
  method: string;
  url: string;
  range: string | null;
  status: number;
  contentType: string | null;
}

/** Wraps the global fetch, recording each request's method, URL, Range and the answer's status. */
export function recordingFetch(log: RecordedRequest[]): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init);
    const response = await fetch(request);
    log.push({
      method: request.method,
      url: request.url,
      range: request.headers.get("range"),
      status: response.status,
      contentType: response.headers.get("content-type"),
    });
    return response;
  };
}

/** The address hf.js is told the Hub lives at; its requests there never leave the process. */
const FAKE_HUB_URL = "http://hub.castor-interop.invalid";

export interface HfJsUploaded {
  path: string;
  /** The file hash hf.js registered (read from the shard it posted to castor). */
  hash: string;
  sha256: string;
  size: number;
}

export interface HfJsUploadResult {
  files: HfJsUploaded[];
  /** Every request hf.js sent to castor. */
  castorRequests: RecordedRequest[];
  /** The `lfsFile` entries of the commit hf.js sent to the Hub. */
  committed: { path: string; oid: string; size: number }[];
}

/**
 * Uploads with hf.js's `commit`, exactly as against huggingface.co, except that a custom `fetch`
 * answers the Hub's own endpoints in-process — preupload ("lfs" for every file), the LFS batch
 * (`"transfer": "xet"` with castor's token-operation URL and a fresh write token in the upload
 * action, as the Hub does), and the commit — while every CAS call and token refresh goes to
 * castor unchanged. The file hashes come from the shards hf.js posted.
 */
export async function hfJsUpload(castor: CastorFixture, files: { path: string; bytes: Uint8Array }[]): Promise<HfJsUploadResult> {
  const castorRequests: RecordedRequest[] = [];
  const toCastor = recordingFetch(castorRequests);
  const shards: Uint8Array[] = [];
  const committed: HfJsUploadResult["committed"] = [];
  const sessionId = randomUUID();
  const hubPrefix = `${FAKE_HUB_URL}/api/${REPO_TYPE}s/${REPO_NAME}`;

  const hubFetch: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const url = new URL(request.url);
    if (url.origin !== FAKE_HUB_URL) {
      if (request.method === "POST" && url.pathname.endsWith("/shards")) shards.push(new Uint8Array(await request.clone().arrayBuffer()));
      return toCastor(request);
    }
    assert.equal(request.headers.get("authorization"), `Bearer ${castor.hubTokens.write}`, "hf.js sends the hub token to the Hub");
    if (request.method === "POST" && url.pathname === `${new URL(hubPrefix).pathname}/preupload/main`) {
      const body = (await request.json()) as { files: { path: string }[] };
      return Response.json({ files: body.files.map((file) => ({ path: file.path, uploadMode: "lfs" })) });
    }
    if (request.method === "POST" && url.pathname === `/${REPO_NAME}.git/info/lfs/objects/batch`) {
      const body = (await request.json()) as { transfers: string[]; objects: { oid: string; size: number }[] };
      assert.ok(body.transfers.includes("xet"), "hf.js offers the xet transfer");
      const token = await castor.casToken("write");
      const header = {
        "X-Xet-Cas-Url": token.casUrl,
        "X-Xet-Access-Token": token.accessToken,
        "X-Xet-Token-Expiration": String(token.exp),
        "X-Xet-Session-Id": sessionId,
      };
      return Response.json(
        {
          transfer: "xet",
          objects: body.objects.map((object) => ({ ...object, actions: { upload: { href: castor.tokenUrl("write"), header } } })),
        },
        { headers: { "content-type": "application/vnd.git-lfs+json" } },
      );
    }
    if (request.method === "POST" && url.pathname === `${new URL(hubPrefix).pathname}/commit/main`) {
      for (const line of (await request.text()).split("\n")) {
        const entry = JSON.parse(line) as { key: string; value: { path: string; oid: string; size: number } };
        if (entry.key === "lfsFile") committed.push({ path: entry.value.path, oid: entry.value.oid, size: entry.value.size });
      }
      return Response.json({ commitOid: "0".repeat(40), commitUrl: `${FAKE_HUB_URL}/${REPO_NAME}/commit/${"0".repeat(40)}` });
    }
    return Response.json({ error: `the fake Hub does not serve ${request.method} ${url.pathname}` }, { status: 404 });
  };

  await commit({
    repo: { type: REPO_TYPE, name: REPO_NAME },
    accessToken: castor.hubTokens.write,
    hubUrl: FAKE_HUB_URL,
    title: "interop upload",
    operations: files.map((file) => ({ operation: "addOrUpdate", path: file.path, content: new Blob([file.bytes]) })),
    fetch: hubFetch,
    useWebWorkers: false,
  });

  // The shards name each file hash with its SHA-256 (metadata extension): that is how a Hub maps
  // the commit's LFS pointers (by SHA-256) to Xet files.
  const hashBySha256 = new Map<string, string>();
  for (const shard of shards) {
    for (const file of parseUploadShard(shard).files) {
      if (file.sha256Hex !== null) hashBySha256.set(file.sha256Hex, hashToHex(file.fileHash));
    }
  }
  return {
    castorRequests,
    committed,
    files: files.map((file) => {
      const sha256 = sha256Hex(file.bytes);
      const hash = hashBySha256.get(sha256);
      assert.ok(hash !== undefined, `no shard hf.js posted registers ${file.path} (SHA-256 ${sha256})`);
      return { path: file.path, hash, sha256, size: file.bytes.length };
    }),
  };
}

export interface HfJsDownloadOptions {
  /** `XetBlob.slice(start, end)` before reading. */
  slice?: [number, number];
  parallelDownloads?: boolean;
  /** Record the requests here (kept even when the read fails) instead of in a fresh list. */
  requests?: RecordedRequest[];
}

/** Reads a file (or a slice) with hf.js's XetBlob: token from castor's token operation, then V2 reconstruction. */
export async function hfJsDownload(
  castor: CastorFixture,
  file: { hash: string; size: number },
  options: HfJsDownloadOptions = {},
): Promise<{ bytes: Uint8Array; requests: RecordedRequest[] }> {
  const requests = options.requests ?? [];
  let blob: Blob = new XetBlob({
    hash: file.hash,
    size: file.size,
    refreshUrl: castor.tokenUrl("read"),
    accessToken: castor.hubTokens.read,
    fetch: recordingFetch(requests),
    parallelDownloads: options.parallelDownloads ?? true,
  });
  if (options.slice) blob = blob.slice(...options.slice);
  return { bytes: new Uint8Array(await blob.arrayBuffer()), requests };
}

/** Writes `bytes` to a new file under `dir`. */
export async function writeTemp(dir: string, name: string, bytes: Uint8Array): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, bytes);
  return path;
}

export async function readBytes(path: string): Promise<Uint8Array> {
  const buffer = await readFile(path);
  return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
}

// ---------------------------------------------------------------------------------------------
// castor's own client (src/client), through its public functions

export async function castorClientUpload(castor: CastorFixture, path: string): Promise<UploadedFile> {
  const result = await castorUpload({ endpoint: castor.server.url, hubToken: castor.hubTokens.write, repo: REPO, files: [path] });
  assert.equal(result.files.length, 1);
  return result.files[0];
}

/** Downloads `fileHash` (or the inclusive byte `range` of it) into `output`. */
export function castorClientDownload(castor: CastorFixture, fileHash: string, output: string, range?: { start: number; end: number }): Promise<DownloadResult> {
  return castorDownload({ endpoint: castor.server.url, hubToken: castor.hubTokens.read, repo: REPO, fileHash, output, range });
}
