/**
 * Runs a REAL `castor serve` child process for end-to-end tests: 127.0.0.1 with a port the OS
 * picks, a fresh temporary data dir (unless one is given), every output line captured. Ready
 * when the server logs its "castor listening" line, which also tells the bound URL.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The `castor` command run from source, as the CLI tests run it. */
const ENTRY = fileURLToPath(new URL("./castor-cli.ts", import.meta.url));
const TSX = import.meta.resolve("tsx");

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
  child: ChildProcess;
  /** Everything written to stdout and stderr so far. */
  output(): string;
  /** The JSON log lines written to stdout so far. */
  logLines(): Record<string, unknown>[];
  /** Resolves with the first log line (already written or still to come) that matches. */
  waitForLog(matches: (line: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** Resolves when the process has exited. */
  exited: Promise<ExitStatus>;
  /** Sends `signal` (SIGTERM by default), waits for the exit, removes a data dir the helper created. */
  stop(signal?: NodeJS.Signals): Promise<ExitStatus>;
}

export interface StartServerOptions {
  /** Extra CASTOR_* settings; inherited CASTOR_* variables are dropped so tests stay isolated. */
  env?: Record<string, string>;
  /** Extra `castor serve` arguments. */
  args?: string[];
  /** Reuse this data dir (kept on stop); default: a fresh temp dir, removed on stop. */
  dataDir?: string;
  readyTimeoutMs?: number;
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
  const ownsDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "castor-e2e-")));
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("CASTOR_")));
  Object.assign(env, { CASTOR_DATA_DIR: dataDir, CASTOR_LISTEN: "127.0.0.1:0", CASTOR_LOG_LEVEL: "info" }, options.env);

  const child = spawn(process.execPath, ["--import", TSX, ENTRY, "serve", ...(options.args ?? [])], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });

  let output = "";
  let stdoutRest = "";
  const lines: Record<string, unknown>[] = [];
  const lineListeners = new Set<(line: Record<string, unknown>) => void>();
  child.stdout!.setEncoding("utf8").on("data", (text: string) => {
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
    output += text;
  });
  const exited = new Promise<ExitStatus>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));

  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new ServerStartError(`castor serve was not ready within ${options.readyTimeoutMs ?? 15000} ms`, null, output));
    }, options.readyTimeoutMs ?? 15000);
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

  let stopping: Promise<ExitStatus> | undefined;
  return {
    url: ready.listenUrl as string,
    publicUrl: ready.publicUrl as string,
    dataDir,
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
    stop(signal: NodeJS.Signals = "SIGTERM") {
      stopping ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill(signal);
        const status = await exited;
        if (ownsDataDir) await rm(dataDir, { recursive: true, force: true });
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
