/**
 * What the hub interop tests share (hub-cli.test.ts, hub-libraries.test.ts): a real `castor
 * serve` with a hub token for user alice made by the admin CLI, a Python venv of pinned client
 * versions (scripts/python-venv.mjs), the environment a user points those clients at castor
 * with (HF_ENDPOINT, HF_TOKEN, a fresh HF_HOME and HF_XET_CACHE), and child-process runs whose
 * failures show the command's output, castor's last requests and the tail of castor's log.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type LoggedRequest, type ServerProcess } from "../helpers/server.js";

const VENV_SCRIPT = fileURLToPath(new URL("../../scripts/python-venv.mjs", import.meta.url));

/** The user and namespace the hub token acts for. */
export const USER = "alice";

export type RepoType = "model" | "dataset" | "space";
export const REPO_TYPES: readonly RepoType[] = ["model", "dataset", "space"];

/** `models`, `datasets`, `spaces`: the API path segment of a type. */
export function plural(type: RepoType): string {
  return `${type}s`;
}

/** The prefix of a type's file URLs: none for models, `datasets/`, `spaces/`. */
export function urlPrefix(type: RepoType): string {
  return type === "model" ? "" : `${plural(type)}/`;
}

// ---------------------------------------------------------------------------------------------
// The heavy parts' local switch

/** The environment variable with which a developer skips the heavy suites (torch, transformers, datasets) locally. */
export const SKIP_HEAVY_VARIABLE = "CASTOR_SKIP_HEAVY";

/**
 * The `skip` option of a heavy suite's `describe` in a file whose other tests are quick: a
 * message when a developer set CASTOR_SKIP_HEAVY (to anything but "", "0" or "false"), false
 * otherwise. (Whole heavy files are left out by scripts/run-tests.mjs, on the same terms.) CI
 * never skips: `.ci/run` unsets the variable, and where `CI` is set (as CI services do) it is
 * ignored.
 */
export function heavySuiteSkip(what: string): string | false {
  const value = process.env[SKIP_HEAVY_VARIABLE]?.trim().toLowerCase() ?? "";
  if (value === "" || value === "0" || value === "false") return false;
  const ci = process.env.CI?.trim().toLowerCase() ?? "";
  if (ci !== "" && ci !== "0" && ci !== "false") {
    process.stderr.write(`# ${SKIP_HEAVY_VARIABLE} is ignored because CI is set: ${what} runs\n`);
    return false;
  }
  return `${SKIP_HEAVY_VARIABLE}=${process.env[SKIP_HEAVY_VARIABLE]} skips ${what} on this machine (unset it to run them; CI always runs them)`;
}

// ---------------------------------------------------------------------------------------------
// Python

/**
 * The Python venvs of the real clients, by name, with their pins: shared by every test that
 * drives them and by README.md's walkthrough (test/docs), so that one venv of each serves all.
 */
export const PYTHON_VENVS = {
  /** The `hf` CLI: huggingface_hub 2.x with hf_xet. */
  "hub-cli": ["huggingface_hub==2.0.0", "hf_xet==1.6.0"],
  /** transformers and datasets, which need huggingface_hub 1.x, with a CPU torch. */
  "hub-libraries": ["huggingface_hub==1.33.0", "hf_xet==1.6.0", "transformers==5.17.0", "torch==2.13.0+cpu", "safetensors", "datasets==5.0.1"],
} as const satisfies Record<string, readonly string[]>;

export type PythonVenvName = keyof typeof PYTHON_VENVS;

const venvs = new Map<string, Promise<string>>();

/**
 * The python of the venv holding `requirements` (scripts/python-venv.mjs builds it once per
 * requirement list and reuses it afterwards). Its console scripts (`hf`) are beside it.
 */
export function pythonVenv(name: string, requirements: readonly string[]): Promise<string> {
  const key = `${name} ${requirements.join(" ")}`;
  let python = venvs.get(key);
  if (python === undefined) {
    python = new Promise<string>((resolve, reject) => {
      const started = Date.now();
      const child = spawn(process.execPath, [VENV_SCRIPT, name, ...requirements], { stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text));
      child.stderr.setEncoding("utf8").on("data", (text: string) => {
        stderr += text;
        // A first build takes minutes (torch): say so while it happens.
        if (process.env.CASTOR_TEST_VERBOSE) process.stderr.write(text);
      });
      child.once("error", reject);
      child.once("close", (code) => {
        if (code === 0) {
          if (stderr.includes("built ")) process.stderr.write(`# ${stderr.trim().split("\n").at(-1)} (${((Date.now() - started) / 1000).toFixed(0)} s)\n`);
          resolve(stdout.trimEnd().split("\n").at(-1)!);
        } else reject(new Error(`scripts/python-venv.mjs ${name} failed (exit ${code}):\n${stderr}`));
      });
    });
    venvs.set(key, python);
  }
  return python;
}

/** A console script of the venv whose python is `python`. */
export function venvScript(python: string, name: string): string {
  return join(python, "..", name);
}

// ---------------------------------------------------------------------------------------------
// castor

export interface HubServer {
  server: ServerProcess;
  /** Where clients reach castor: HF_ENDPOINT. */
  endpoint: string;
  /** A write token of user alice that covers (and may create repositories in) namespace alice. */
  token: string;
  /** The serialized xorbs stored under the data dir. */
  countStoredXorbs(): Promise<number>;
  /** Creates a repository with the admin CLI (`castor repo create`). */
  adminCreateRepo(type: RepoType, name: string, options?: { public?: boolean }): Promise<void>;
  /** castor's requests and recent log lines, for a failure message. */
  diagnostics(fromLogLine?: number): string;
  stop(): Promise<void>;
}

export async function startHub(): Promise<HubServer> {
  const server = await startCastorServer();
  try {
    const admin = async (args: string[]): Promise<string> => {
      const result = await runCastor(args, { env: server.settings });
      assert.equal(result.code, 0, `castor ${args.join(" ")} failed (exit ${result.code}):\n${result.stderr}`);
      return result.stdout;
    };
    const token = (await admin(["token", "create", "--user", USER, "--namespace", USER, "--access", "write"])).trimEnd().split("\n").at(-1) ?? "";
    assert.match(token, /^hf_[A-Za-z0-9_-]+$/, "castor token create prints the hub token on its last line");
    // HF_ENDPOINT must be the URL castor builds its answers' URLs from (HUB-API.md §7.3).
    assert.equal(server.publicUrl, server.url, "castor's public URL is the address the clients use");
    return {
      server,
      endpoint: server.publicUrl,
      token,
      async countStoredXorbs() {
        const root = join(server.dataDir, "blobs", "xorbs");
        let count = 0;
        for (const prefix of await readdir(root).catch(() => [] as string[])) {
          count += (await readdir(join(root, prefix))).filter((name) => /^[0-9a-f]{64}$/.test(name)).length;
        }
        return count;
      },
      async adminCreateRepo(type, name, options = {}) {
        await admin(["repo", "create", type, name, ...(options.public ? ["--public"] : [])]);
      },
      diagnostics(fromLogLine = 0) {
        return castorDiagnostics(server, fromLogLine);
      },
      async stop() {
        await server.stop();
      },
    };
  } catch (error) {
    await server.stop();
    throw error;
  }
}

export function describeRequests(lines: LoggedRequest[]): string {
  return lines.map((line) => `${line.method} ${line.path} → ${line.statusCode}`).join("\n");
}

/** The last requests castor answered and its last warnings and errors, from log line `from` on. */
export function castorDiagnostics(server: ServerProcess, from = 0): string {
  const requests = server.requestLog(from).slice(-40);
  const problems = server
    .logLines()
    .slice(from)
    .filter((line) => typeof line.level === "number" && line.level >= 40)
    .slice(-10)
    .map((line) => JSON.stringify(line).slice(0, 2000));
  const rawTail = server
    .output()
    .split("\n")
    .filter((line) => line.trim() !== "" && !line.startsWith("{"))
    .slice(-10);
  return (
    `--- castor's last requests (${requests.length}) ---\n${describeRequests(requests) || "(none)"}\n` +
    `--- castor's warnings and errors ---\n${problems.join("\n") || "(none)"}` +
    (rawTail.length > 0 ? `\n--- castor's non-JSON output ---\n${rawTail.join("\n")}` : "")
  );
}

// ---------------------------------------------------------------------------------------------
// Client environment and child processes

/**
 * The environment of a client machine pointed at castor: HF_ENDPOINT, HF_TOKEN (unless
 * `token` is null), its own HF_HOME and HF_XET_CACHE under `home`, no update check, telemetry or
 * download counters leaving the machine. Inherited HF_* / HUGGINGFACE_* variables are dropped.
 */
export function clientEnv(hub: HubServer, home: string, extra: Record<string, string> = {}, token: string | null = hub.token): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(HF_|HUGGINGFACE_)/.test(name)));
  Object.assign(env, {
    HF_ENDPOINT: hub.endpoint,
    HF_HOME: join(home, "hf-home"),
    HF_XET_CACHE: join(home, "xet-cache"),
    HF_HUB_DISABLE_UPDATE_CHECK: "1",
    HF_HUB_DISABLE_TELEMETRY: "1",
    HF_HUB_DISABLE_PROGRESS_BARS: "1",
    HF_UPDATE_DOWNLOAD_COUNTS: "0",
    // No terminal: keeps the CLI's output plain.
    NO_COLOR: "1",
    PYTHONUNBUFFERED: "1",
    ...(token === null ? {} : { HF_TOKEN: token }),
    ...extra,
  });
  return env;
}

export interface ChildResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function runChild(
  command: string,
  args: string[],
  options: { env: NodeJS.ProcessEnv; cwd?: string; input?: string; timeoutMs?: number },
): Promise<ChildResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: options.env, cwd: options.cwd, stdio: ["pipe", "pipe", "pipe"], timeout: options.timeoutMs ?? 180_000 });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (text: string) => (stdout += text));
    child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
    child.stdin.end(options.input ?? "");
  });
}

function tail(text: string, lines: number): string {
  const all = text.trimEnd().split("\n");
  return (all.length > lines ? [`(… ${all.length - lines} earlier lines)`, ...all.slice(-lines)] : all).join("\n");
}

/**
 * Runs a client command that must succeed; on failure the assertion shows the command, its
 * stdout and stderr tails, castor's requests since it started and castor's warnings.
 */
export async function runOk(
  hub: HubServer,
  what: string,
  command: string,
  args: string[],
  options: { env: NodeJS.ProcessEnv; cwd?: string; input?: string; timeoutMs?: number },
): Promise<ChildResult> {
  const from = hub.server.logLines().length;
  const result = await runChild(command, args, options);
  if (result.code !== 0) {
    assert.fail(
      `${what} failed (exit ${result.code}${result.signal ? `, signal ${result.signal}` : ""}):\n` +
        `$ ${[command, ...args].map((arg) => (/[\s"']/.test(arg) ? JSON.stringify(arg) : arg)).join(" ")}\n` +
        `--- stdout ---\n${tail(result.stdout, 30) || "(empty)"}\n--- stderr ---\n${tail(result.stderr, 60) || "(empty)"}\n` +
        castorDiagnostics(hub.server, from),
    );
  }
  return result;
}

/** The last stdout line parsed as JSON (the hf CLI's `--format json` result, a driver's answer). */
export function lastJson<T>(result: ChildResult): T {
  const line = result.stdout.trimEnd().split("\n").at(-1) ?? "";
  try {
    return JSON.parse(line) as T;
  } catch {
    assert.fail(`expected JSON on the last stdout line, got:\n${tail(result.stdout, 20)}\n--- stderr ---\n${tail(result.stderr, 20)}`);
  }
}

/** A fresh temporary folder. */
export function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}

export async function removeDir(dir: string | undefined): Promise<void> {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
}

/** Every file below `dir` (following symlinks, as the hub cache's snapshots are), by relative path, skipping `.cache/`. */
export async function filesBelow(dir: string): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  const walk = async (folder: string): Promise<void> => {
    for (const entry of await readdir(folder, { withFileTypes: true })) {
      const path = join(folder, entry.name);
      const rel = relative(dir, path).split("\\").join("/");
      if (rel === ".cache" || rel.startsWith(".cache/")) continue;
      if (entry.isDirectory()) await walk(path);
      else out.set(rel, await readFile(path));
    }
  };
  await walk(dir);
  return out;
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Fetches `url` from castor, failing with castor's answer body when the status is not `status`. */
export async function fetchExpecting(url: string, init: RequestInit, status: number): Promise<Response> {
  const response = await fetch(url, init);
  if (response.status !== status) {
    const headers = [...response.headers].map(([name, value]) => `${name}: ${value}`).join("\n");
    assert.fail(`${init.method ?? "GET"} ${url} answered ${response.status}, expected ${status}\n${headers}\n\n${(await response.text()).slice(0, 2000)}`);
  }
  return response;
}
