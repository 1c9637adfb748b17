/**
 * The real `git` (and `git-lfs`) run against a castor, isolated from the machine's own git
 * configuration: a HOME of the test's own, no system config, no prompts, a fixed identity.
 */
import { spawn } from "node:child_process";

export interface GitRun {
  status: number | null;
  stdout: string;
  stderr: string;
}

export interface GitOptions {
  cwd: string;
  /** The HOME git reads its global config from (the test's temp folder). */
  home: string;
  env?: Record<string, string>;
  input?: string | Buffer;
}

export function gitEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: home,
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_TERMINAL_PROMPT: "0",
    GIT_AUTHOR_NAME: "Tess Ter",
    GIT_AUTHOR_EMAIL: "tess@example.com",
    GIT_COMMITTER_NAME: "Tess Ter",
    GIT_COMMITTER_EMAIL: "tess@example.com",
    LANG: "C",
    ...(process.env.CASTOR_TEST_GIT_TRACE ? { GIT_TRACE_PACKET: process.env.CASTOR_TEST_GIT_TRACE } : {}),
    ...extra,
  };
}

/** Runs git; resolves with its exit status and output whatever they are. */
export function runGit(args: string[], options: GitOptions): Promise<GitRun> {
  return new Promise((resolve, reject) => {
    const child = spawn("git", args, {
      cwd: options.cwd,
      env: gitEnv(options.home, options.env),
      stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout!.on("data", (piece: Buffer) => stdout.push(piece));
    child.stderr!.on("data", (piece: Buffer) => stderr.push(piece));
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, stdout: Buffer.concat(stdout).toString("utf8"), stderr: Buffer.concat(stderr).toString("utf8") }));
    if (options.input !== undefined) {
      // git may exit without reading all of it.
      child.stdin!.on("error", () => undefined);
      child.stdin!.end(options.input);
    }
  });
}

/** Runs git and returns its stdout; throws with git's stderr when it fails. */
export async function git(args: string[], options: GitOptions): Promise<string> {
  const run = await runGit(args, options);
  if (run.status !== 0) throw new Error(`git ${args.join(" ")} exited with ${run.status}:\n${run.stderr}`);
  return run.stdout;
}

/** `http://git:TOKEN@host/…`: the URL a user clones with, the hub token as the password. */
export function gitUrl(base: string, path: string, token?: string): string {
  const url = new URL(`${base}/${path}`);
  if (token !== undefined) {
    url.username = "git";
    url.password = token;
  }
  return url.toString();
}
