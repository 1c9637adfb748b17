/**
 * Runs a REAL `castor serve` child process (the compiled command, as installed: CASTOR_COMMAND in
 * cli.ts) for end-to-end tests: 127.0.0.1 with a port the OS picks, a fresh temporary data dir
 * (unless one is given), every output line captured. Ready when the server logs its "castor
 * listening" line, which also tells the bound URL (with `CASTOR_WORKERS` above 1, the
 * primary's, written once every worker listens).
 *
 * Embedded by default (SQLite and blobs in the data dir). `scaleOut` runs the server on the
 * scale-out backends instead — PostgreSQL, the S3 bucket and signing keys supplied by
 * configuration, from the `CASTOR_TEST_*` environment that `scripts/services.sh start` prints:
 * `scaleOut: true` gives the server a backend of its own (fresh database, fresh key prefix),
 * removed when it stops; a `ScaleOutBackend` from `createScaleOutBackend()` is shared by every
 * node started with it (the several-stateless-nodes deployment) and is the caller's to clean up.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { CastorFixture, CasToken } from "../interop/harness.js";
import { CASTOR_COMMAND, runCastor, TEST_RESERVED_SPACE } from "./cli.js";

/** The `castor` command run from the sources through tsx (`compiled: false`). */
const ENTRY = fileURLToPath(new URL("./castor-cli.ts", import.meta.url));
const TSX = import.meta.resolve("tsx");
/** The `castor` command as installed: the launcher of the compiled CLI in dist/, run as an executable (its first lines add V8 flags). */
export const COMPILED_COMMAND = CASTOR_COMMAND;

export interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ServerProcess {
  /** The bound address, e.g. http://127.0.0.1:41234. */
  url: string;
  /** The URL the server hands out as casUrl. */
  publicUrl: string;
  dataDir: string;
  /**
   * Every CASTOR_* setting the server was started with. Admin commands given these reach the
   * same stores: `runCastor(["repo", "create", …], { env: server.settings })`.
   */
  settings: Record<string, string>;
  /** The scale-out backend the server runs on; null for the embedded default. */
  scaleOut: ScaleOutBackend | null;
  child: ChildProcess;
  /** Everything written to stdout and stderr so far. */
  output(): string;
  /** The JSON log lines written to stdout so far. */
  logLines(): Record<string, unknown>[];
  /** Resolves with the first log line (already written or still to come) that matches. */
  waitForLog(matches: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** The request lines the server logged (one per answered request), from index `from` of its log lines. */
  requestLog(from?: number): LoggedRequest[];
  /**
   * The request log from `from`, once `complete` holds for it. A server logs a request just
   * after answering it, so a client holding its answer can be a moment ahead of the log; this
   * waits for the log to catch up, and after `timeoutMs` returns what is there for the caller's
   * assertion to report.
   */
  waitForRequests(from: number, complete: (requests: LoggedRequest[]) => boolean, timeoutMs?: number): Promise<LoggedRequest[]>;
  /** Resolves when the process has exited. */
  exited: Promise<ExitStatus>;
  /** Sends `signal` (SIGTERM by default), waits for the exit, removes a data dir the helper created. */
  stop(signal?: NodeJS.Signals): Promise<ExitStatus>;
}

export interface LoggedRequest {
  method: string;
  path: string;
  statusCode: number;
}

export interface StartServerOptions {
  /** Extra CASTOR_* settings; inherited CASTOR_* variables are dropped so tests stay isolated. */
  env?: Record<string, string>;
  /** Extra `castor serve` arguments. */
  args?: string[];
  /** Reuse this data dir (kept on stop); default: a fresh temp dir, removed on stop. */
  dataDir?: string;
  /** How long start-up may take before the server is killed and the start fails; default 60 s (a busy machine's worst). */
  readyTimeoutMs?: number;
  /**
   * Run on PostgreSQL + S3 with configured keys: `true` = a backend of the server's own, dropped
   * on stop; a `ScaleOutBackend` = shared with other nodes, left for its owner to clean up.
   * Default: embedded.
   */
  scaleOut?: boolean | ScaleOutBackend;
  /**
   * Run the compiled CLI (bin/castor.js → dist/), as users run castor: the default, as for
   * `runCastor` (see CASTOR_COMMAND; `npm test` and `npm run bench` build dist/ from the current
   * sources first). `false` runs the sources through tsx, whose loader costs every start ~0.7 s
   * of CPU and adds to the server's heap.
   */
  compiled?: boolean;
  /**
   * Once ready, stop keeping (and parsing) what the server prints: for benchmarks, whose servers
   * log a line per request by the ten thousand. `output()` and the log functions then see only
   * what came before.
   */
  discardOutputOnceReady?: boolean;
}

/**
 * What several castor nodes share when scaled out: one fresh PostgreSQL database, one fresh key
 * prefix in the test bucket, and the signing key, URL key and dedup-key seed every node must
 * hold alike (`CASTOR_SIGNING_KEY_FILE`, `CASTOR_URL_KEY`, `CASTOR_DEDUP_KEY_SEED`).
 */
export interface ScaleOutBackend {
  /** The CASTOR_* settings every node gets (database, S3, keys). */
  readonly env: Readonly<Record<string, string>>;
  /** Name of the fresh database (`castor_test_<hex>`). */
  readonly databaseName: string;
  /** The fresh key prefix in the test bucket, `castor-test-<hex>/`. */
  readonly s3Prefix: string;
  /** The Ed25519 PEM file the nodes sign CAS access tokens with. */
  readonly signingKeyFile: string;
  /** Drops the database, deletes the prefix's objects and the key folder. Idempotent. */
  cleanup(): Promise<void>;
}

/**
 * Creates a fresh scale-out backend from the CASTOR_TEST_* environment; throws with the way to
 * start the services when they are not configured (see `scaleOutUnavailable`).
 */
export async function createScaleOutBackend(): Promise<ScaleOutBackend> {
  // Loaded here, not at the top: the embedded suite imports this file and needs neither the
  // PostgreSQL driver nor the AWS SDK.
  const [{ createTestDatabase }, { s3ServerSettings }] = await Promise.all([import("./scaleout-postgres.js"), import("./scaleout-s3.js")]);
  const s3 = s3ServerSettings();
  const database = await createTestDatabase();
  let keysDir: string | undefined;
  try {
    keysDir = await mkdtemp(join(tmpdir(), "castor-scaleout-keys-"));
    const signingKeyFile = join(keysDir, "jwt-signing-key.pem");
    const pem = generateKeyPairSync("ed25519").privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    await writeFile(signingKeyFile, pem, { mode: 0o600 });
    const env = {
      CASTOR_DATABASE_URL: database.url,
      ...s3.env,
      CASTOR_SIGNING_KEY_FILE: signingKeyFile,
      CASTOR_URL_KEY: randomBytes(32).toString("base64url"),
      CASTOR_DEDUP_KEY_SEED: randomBytes(32).toString("base64url"),
    };
    const createdKeysDir = keysDir;
    let cleaned: Promise<void> | undefined;
    return {
      env,
      databaseName: database.name,
      s3Prefix: s3.prefix,
      signingKeyFile,
      cleanup() {
        cleaned ??= (async () => {
          // All three even when one fails; the first failure is reported.
          const results = await Promise.allSettled([database.drop(), s3.cleanup(), rm(createdKeysDir, { recursive: true, force: true })]);
          const failed = results.find((result): result is PromiseRejectedResult => result.status === "rejected");
          if (failed) throw failed.reason;
        })();
        return cleaned;
      },
    };
  } catch (error) {
    await Promise.allSettled([database.drop(), keysDir === undefined ? undefined : rm(keysDir, { recursive: true, force: true })]);
    throw error;
  }
}

/** Why scale-out servers cannot start here (the CASTOR_TEST_* variables missing), or null when they can. */
export function scaleOutUnavailable(env: NodeJS.ProcessEnv = process.env): string | null {
  // The names scaleout-postgres.ts and scaleout-s3.ts read, spelled out so that asking does not
  // load either driver.
  const missing = [
    "CASTOR_TEST_DATABASE_URL",
    "CASTOR_TEST_S3_ENDPOINT",
    "CASTOR_TEST_S3_REGION",
    "CASTOR_TEST_S3_ACCESS_KEY_ID",
    "CASTOR_TEST_S3_SECRET_ACCESS_KEY",
    "CASTOR_TEST_S3_BUCKET",
  ].filter((name) => !env[name]);
  if (missing.length === 0) return null;
  return `${missing.join(", ")} ${missing.length === 1 ? "is" : "are"} not set: start PostgreSQL and Ceph RGW with \`eval "$(scripts/services.sh start)"\` in the same shell`;
}

/** The process exited (or hung) before it was ready; carries what it printed. */
export class ServerStartError extends Error {
  constructor(
    message: string,
    readonly status: ExitStatus | null,
    readonly output: string,
  ) {
    super(`${message}\n--- server output ---\n${output}`);
  }
}

export async function startCastorServer(options: StartServerOptions = {}): Promise<ServerProcess> {
  const ownsBackend = options.scaleOut === true;
  const scaleOut = options.scaleOut === true ? await createScaleOutBackend() : options.scaleOut || null;
  try {
    return await startProcess(options, scaleOut, ownsBackend);
  } catch (error) {
    if (ownsBackend) await scaleOut?.cleanup();
    throw error;
  }
}

async function startProcess(options: StartServerOptions, scaleOut: ScaleOutBackend | null, ownsBackend: boolean): Promise<ServerProcess> {
  const ownsDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "castor-e2e-")));
  const settings: Record<string, string> = {
    CASTOR_DATA_DIR: dataDir,
    CASTOR_LISTEN: "127.0.0.1:0",
    CASTOR_LOG_LEVEL: "info",
    CASTOR_RESERVED_SPACE: TEST_RESERVED_SPACE,
    // One process, as castor ran before `--workers`: tests start many servers at once on two
    // cores, and only the worker tests (which set it) need more.
    CASTOR_WORKERS: "1",
    ...scaleOut?.env,
    ...options.env,
  };
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("CASTOR_")));
  Object.assign(env, settings);

  const [command, ...launcher] = options.compiled === false ? [process.execPath, "--import", TSX, ENTRY] : [COMPILED_COMMAND];
  const child = spawn(command, [...launcher, "serve", ...(options.args ?? [])], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });

  let output = "";
  let stdoutRest = "";
  let discarding = false;
  const lines: Record<string, unknown>[] = [];
  const lineListeners = new Set<(line: Record<string, unknown>) => void>();
  child.stdout!.setEncoding("utf8").on("data", (text: string) => {
    if (discarding) return;
    output += text;
    const parts = (stdoutRest + text).split("\n");
    stdoutRest = parts.pop()!;
    for (const part of parts) {
      if (part.trim() === "") continue;
      let line: Record<string, unknown>;
      try {
        line = JSON.parse(part);
      } catch {
        continue;
      }
      lines.push(line);
      for (const listener of lineListeners) listener(line);
    }
  });
  child.stderr!.setEncoding("utf8").on("data", (text: string) => {
    if (!discarding) output += text;
  });
  const exited = new Promise<ExitStatus>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));

  const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new ServerStartError(`castor serve was not ready within ${readyTimeoutMs} ms`, null, output));
    }, readyTimeoutMs);
    const onReady = (line: Record<string, unknown>) => {
      if (typeof line.listenUrl === "string" && typeof line.publicUrl === "string") {
        lineListeners.delete(onReady);
        clearTimeout(timer);
        resolve(line);
      }
    };
    lineListeners.add(onReady);
    void exited.then((status) => {
      clearTimeout(timer);
      reject(new ServerStartError(`castor serve exited before it was ready (code ${status.code}, signal ${status.signal})`, status, output));
    });
  }).catch(async (error) => {
    if (ownsDataDir) await rm(dataDir, { recursive: true, force: true });
    throw error;
  });
  discarding = options.discardOutputOnceReady === true;

  const requestLog = (from = 0): LoggedRequest[] =>
    lines
      .slice(from)
      .filter((line) => line.msg === "request")
      .map((line) => ({ method: String(line.method), path: String(line.path), statusCode: Number(line.statusCode) }));
  let stopping: Promise<ExitStatus> | undefined;
  return {
    url: ready.listenUrl as string,
    publicUrl: ready.publicUrl as string,
    dataDir,
    settings,
    scaleOut,
    child,
    output: () => output,
    logLines: () => [...lines],
    exited,
    waitForLog(matches, timeoutMs = 5000) {
      const earlier = lines.find(matches);
      if (earlier) return Promise.resolve(earlier);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          lineListeners.delete(listener);
          reject(new Error(`no matching log line within ${timeoutMs} ms\n--- server output ---\n${output}`));
        }, timeoutMs);
        const listener = (line: Record<string, unknown>) => {
          if (!matches(line)) return;
          clearTimeout(timer);
          lineListeners.delete(listener);
          resolve(line);
        };
        lineListeners.add(listener);
      });
    },
    requestLog,
    waitForRequests(from, complete, timeoutMs = 5000) {
      const now = requestLog(from);
      if (complete(now)) return Promise.resolve(now);
      // Checked again on every log line the process writes, until complete or `timeoutMs`.
      return new Promise((resolve) => {
        const finish = () => {
          clearTimeout(timer);
          lineListeners.delete(listener);
          resolve(requestLog(from));
        };
        const timer = setTimeout(finish, timeoutMs);
        const listener = () => {
          if (complete(requestLog(from))) finish();
        };
        lineListeners.add(listener);
      });
    },
    stop(signal: NodeJS.Signals = "SIGTERM") {
      stopping ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill(signal);
        const status = await exited;
        if (ownsDataDir) await rm(dataDir, { recursive: true, force: true });
        if (ownsBackend) await scaleOut?.cleanup();
        return status;
      })();
      return stopping;
    },
  };
}

/** Runs `castor serve` expecting it to fail at start-up; returns its exit status and output. */
export async function serveExpectingFailure(options: StartServerOptions = {}): Promise<{ status: ExitStatus; output: string }> {
  try {
    const server = await startCastorServer(options);
    await server.stop("SIGKILL");
  } catch (error) {
    if (error instanceof ServerStartError && error.status !== null) return { status: error.status, output: error.output };
    throw error;
  }
  throw new Error("castor serve started although it was expected to fail");
}

export interface HubFixtureOptions {
  repoType: "model" | "dataset" | "space";
  /** `namespace/name`. */
  repoName: string;
  /** Where clients reach castor (a proxy in front of several nodes); default the server's own URL. */
  baseUrl?: string;
}

/**
 * A repository with a read and a write hub token made by the real admin CLI on `server`'s
 * stores, shaped as the interop harness's `CastorFixture` so its clients (`HfXetClient`, …) run
 * against any server: an embedded one, a scale-out node, or a proxy in front of several. The
 * blob-level helpers answer from the server's own stores (the data dir, or the S3 prefix).
 * `stop()` stops `server` only.
 */
export async function hubFixture(server: ServerProcess, options: HubFixtureOptions): Promise<CastorFixture> {
  const { repoType, repoName } = options;
  const baseUrl = (options.baseUrl ?? server.url).replace(/\/+$/, "");
  const repo = `${repoType}:${repoName}`;
  const admin = async (args: string[]): Promise<string> => {
    const result = await runCastor(args, { env: server.settings });
    if (result.code !== 0) throw new Error(`castor ${args.join(" ")} failed (exit ${result.code}):\n${result.stderr}`);
    return result.stdout;
  };
  const hubToken = async (access: "read" | "write") => {
    const lastLine = (await admin(["token", "create", "--repo", repo, "--access", access])).trimEnd().split("\n").at(-1) ?? "";
    if (!/^hf_[A-Za-z0-9_-]+$/.test(lastLine)) throw new Error(`castor token create printed no hub token on its last line: ${JSON.stringify(lastLine)}`);
    return lastLine;
  };
  await admin(["repo", "create", repoType, repoName]);
  const hubTokens = { read: await hubToken("read"), write: await hubToken("write") };
  const tokenUrl = (access: "read" | "write") => `${baseUrl}/api/${repoType}s/${repoName}/xet-${access}-token/main`;
  return {
    server,
    dataDir: server.dataDir,
    hubTokens,
    tokenUrl,
    async casToken(access) {
      const response = await fetch(tokenUrl(access), { headers: { authorization: `Bearer ${hubTokens[access]}` } });
      const text = await response.text();
      if (response.status !== 200) throw new Error(`the token operation answered ${response.status}: ${text}`);
      const body = JSON.parse(text) as CasToken;
      if (typeof body.accessToken !== "string" || typeof body.exp !== "number" || typeof body.casUrl !== "string") {
        throw new Error(`the token operation answered an unexpected body: ${text}`);
      }
      return body;
    },
    async countStoredXorbs() {
      if (server.scaleOut === null) {
        const { readdir } = await import("node:fs/promises");
        const root = join(server.dataDir, "blobs", "xorbs");
        let count = 0;
        for (const prefix of await readdir(root).catch(() => [] as string[])) {
          count += (await readdir(join(root, prefix))).filter((name) => /^[0-9a-f]{64}$/.test(name)).length;
        }
        return count;
      }
      return (await listScaleOutXorbs(server.scaleOut)).length;
    },
    async lookupBySha256(sha256) {
      const [{ loadConfig }, { openMetadataStore }, { hashToHex }] = await Promise.all([
        import("../../src/config.js"),
        import("../../src/metadata/open.js"),
        import("../../src/format/hash.js"),
      ]);
      const store = await openMetadataStore(loadConfig(server.settings));
      try {
        const found = await store.getRepo(repoType, repoName);
        if (found === null) throw new Error(`repository ${repo} is missing from the metadata store`);
        const hash = await store.findFileBySha256(found.id, new Uint8Array(Buffer.from(sha256, "hex")));
        if (hash === null) return null;
        const file = await store.getFile(hash);
        if (file === null) throw new Error(`castor indexes SHA-256 ${sha256} to ${hashToHex(hash)} but has no such file`);
        return { hash: hashToHex(hash), size: file.size };
      } finally {
        await store.close();
      }
    },
    async stop() {
      await server.stop();
    },
  };
}

/** The stored xorbs of a scale-out backend: hash (hex) and object size, read from the bucket itself. */
export async function listScaleOutXorbs(backend: ScaleOutBackend): Promise<{ hex: string; size: number }[]> {
  const [{ ListObjectsV2Command }, { s3TestClient }] = await Promise.all([import("@aws-sdk/client-s3"), import("./scaleout-s3.js")]);
  const client = s3TestClient();
  const bucket = backend.env.CASTOR_S3_BUCKET;
  const prefix = `${backend.s3Prefix}xorbs/`;
  try {
    const found: { hex: string; size: number }[] = [];
    let continuationToken: string | undefined;
    do {
      const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: continuationToken }));
      for (const entry of page.Contents ?? []) {
        // Listed as found, names that are not a hash included: a caller checking the names
        // (or validating each object) then sees anything the store should never have published.
        found.push({ hex: entry.Key?.slice(prefix.length) ?? "", size: entry.Size ?? -1 });
      }
      continuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (continuationToken !== undefined);
    return found;
  } finally {
    client.destroy();
  }
}
