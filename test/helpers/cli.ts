/**
 * Runs the `castor` command as a real child process, as installed (`CASTOR_COMMAND`), so tests
 * see exactly what a user sees: stdout, stderr and the exit code.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The `castor` command as tests run it: bin/castor.js, the launcher of the compiled CLI in
 * dist/, run as an executable as npm's bin link runs it. `npm test` (scripts/run-tests.mjs)
 * rebuilds dist/ first whenever src/ changed since the last build. Run from the sources through
 * tsx instead, every command and server compiled them again: ~0.7 s of CPU more per process,
 * which made test/cli/admin.test.ts cost 37 s of CPU instead of 15.
 */
export const CASTOR_COMMAND = fileURLToPath(new URL("../../bin/castor.js", import.meta.url));

export interface CliResult {
  code: number | null;
  /** The signal that ended the process, if one did. */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  /** Extra environment; the parent's CASTOR_* variables are never passed on. */
  env?: Record<string, string>;
  /** Working directory (the default `./castor-data` is relative to it). */
  cwd?: string;
  /** Kill the child after this long (a hung command fails the test instead of the run). */
  timeoutMs?: number;
  /** Sees stderr as it arrives, with the child (to signal it at a given point). */
  onStderr?: (text: string, child: ChildProcess) => void;
}

/**
 * CASTOR_RESERVED_SPACE for the castor processes tests start, unless a test sets it: the 64 MiB
 * default, written out by each of the hundreds of servers the suite starts, would cost gigabytes
 * of disk writes. Still non-zero, so the reserve is made and released as in production.
 */
export const TEST_RESERVED_SPACE = String(1024 * 1024);

/**
 * CASTOR_CACHE_DIR for the client commands tests run, unless a test sets it: one shard cache per
 * test process (as one user has one), never the home folder's; removed when the process exits.
 */
export const TEST_CACHE_DIR = join(tmpdir(), `castor-test-cache-${process.pid}`);
process.once("exit", () => rmSync(TEST_CACHE_DIR, { recursive: true, force: true }));

export function runCastor(args: string[], options: CliOptions = {}): Promise<CliResult> {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("CASTOR_")));
  const child = spawn(CASTOR_COMMAND, args, {
    cwd: options.cwd,
    env: { ...inherited, CASTOR_RESERVED_SPACE: TEST_RESERVED_SPACE, CASTOR_CACHE_DIR: TEST_CACHE_DIR, ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
    timeout: options.timeoutMs ?? 20_000,
  });
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  child.stdout.on("data", (chunk: Buffer) => stdout.push(chunk));
  child.stderr.on("data", (chunk: Buffer) => {
    stderr.push(chunk);
    options.onStderr?.(chunk.toString("utf8"), child);
  });
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) =>
      resolve({ code, signal, stdout: Buffer.concat(stdout).toString("utf8"), stderr: Buffer.concat(stderr).toString("utf8") }),
    );
  });
}
