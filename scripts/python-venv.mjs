#!/usr/bin/env node
// Builds (once) a Python virtual environment holding a pinned list of requirements, for the
// tests that drive real Python clients (hf_xet, huggingface_hub and its `hf` CLI, transformers,
// datasets, torch).
//
//   node scripts/python-venv.mjs NAME REQUIREMENT…
//   node scripts/python-venv.mjs hub-cli huggingface_hub==2.0.0 hf_xet==1.6.0
//
// The venv is `.venv/NAME-HASH` (git-ignored), HASH a short hash of the sorted requirement
// list and the python version: a changed pin makes a new venv, an unchanged one reuses the
// venv already built, so heavy sets (torch, transformers) install once per version set. The last
// stdout line is the venv's python; its console scripts (`hf`, …) are beside it in bin/.
//
// Safe when several runs start at once: each builds in a temporary folder of its own and renames
// it into place (the loser of a race keeps the winner's venv); a run that finds another one
// building the same venv waits for it instead of installing torch twice on a 2-core machine.
// Console scripts hold their venv's absolute path in their first line, so the builder writes the
// final path into them before the rename.
//
// Exits 1 with a message saying what to install when python3, its venv module or pip's index
// is missing. Also importable: `ensureVenv(name, requirements)` returns the python path.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Bump when the way venvs are built changes, so existing ones are rebuilt. */
const BUILDER_VERSION = 1;
/** What a complete venv holds: written last, before the rename. */
const MARKER = "castor-venv.json";
/** How long a run waits for another one building the same venv (torch takes minutes). */
const WAIT_FOR_OTHER_BUILDER_MS = 30 * 60 * 1000;

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/**
 * `.venv` of the checkout, through any symbolic link: a checkout whose `.venv` links to another
 * one's (a second worktree sharing the venvs) must write the real path into the console
 * scripts' first lines, or they break when the linking checkout is removed.
 */
export const VENV_ROOT = existsSync(join(repoRoot, ".venv")) ? realpathSync(join(repoRoot, ".venv")) : join(repoRoot, ".venv");

/** A problem the user fixes by installing something; reported without a stack trace. */
export class SetupError extends Error {}

function fail(message) {
  throw new SetupError(message);
}

function run(command, args, options = {}) {
  return spawnSync(command, args, {
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
    // One retry, not pip's five with back-off: where the default index is unreachable and a
    // mirror serves the packages (this project's machines), five cost ~10 s per package.
    env: { PIP_RETRIES: "1", ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: "1", PIP_NO_INPUT: "1" },
    ...options,
  });
}

function pythonIn(dir) {
  return join(dir, "bin", "python");
}

function systemPythonVersion() {
  const probe = run("python3", ["-c", "import sys; print(sys.version.split()[0])"]);
  if (probe.error || probe.status !== 0) {
    fail("python3 was not found. Install it (Debian/Ubuntu: apt-get install -y python3 python3-venv) and run the tests again.");
  }
  return probe.stdout.trim();
}

/** Requirement list in a canonical order (names compared case- and separator-insensitively). */
function canonical(requirements) {
  const key = (requirement) =>
    requirement
      .trim()
      .toLowerCase()
      .replace(/[-_.]+/g, "-");
  return [...new Set(requirements.map((requirement) => requirement.trim()))].filter(Boolean).sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

/** `.venv/NAME-HASH` for this requirement list on this python. */
export function venvDirFor(name, requirements, pythonVersion = systemPythonVersion()) {
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name)) fail(`venv name ${JSON.stringify(name)} must be letters, digits, '.', '_' or '-'`);
  const hash = createHash("sha256")
    .update(JSON.stringify({ builder: BUILDER_VERSION, python: pythonVersion, requirements: canonical(requirements) }))
    .digest("hex")
    .slice(0, 10);
  return join(VENV_ROOT, `${name}-${hash}`);
}

/** Whether `dir` is a venv this builder completed for `requirements`, with a python that runs. */
function isComplete(dir, requirements) {
  try {
    const marker = JSON.parse(readFileSync(join(dir, MARKER), "utf8"));
    if (JSON.stringify(marker.requirements) !== JSON.stringify(canonical(requirements))) return false;
  } catch {
    return false;
  }
  const probe = run(pythonIn(dir), ["-c", "import sys; print(sys.prefix)"]);
  return probe.status === 0 && resolve(probe.stdout.trim()) === resolve(dir);
}

/** Files in bin/ that name the build folder (console-script shebangs, activate scripts) now name `to`. */
function retarget(binDir, from, to) {
  for (const entry of readdirSync(binDir)) {
    const path = join(binDir, entry);
    const stat = statSync(path, { throwIfNoEntry: false });
    if (!stat?.isFile() || stat.size > 1024 * 1024) continue;
    const bytes = readFileSync(path);
    if (bytes.includes(0)) continue; // a binary
    const text = bytes.toString("utf8");
    if (text.includes(from)) writeFileSync(path, text.split(from).join(to), { mode: stat.mode });
  }
}

function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === "EPERM";
  }
}

function sleep(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Takes the build lock of `dir` (a folder, created atomically, holding the builder's pid), or
 * waits while a live builder holds it; returns false when the venv appeared meanwhile.
 */
function lockOrWait(dir, requirements, log) {
  const lock = `${dir}.lock`;
  const deadline = Date.now() + WAIT_FOR_OTHER_BUILDER_MS;
  let announced = false;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, "pid"), String(process.pid));
      return true;
    } catch (error) {
      if (error.code !== "EEXIST") throw error;
    }
    if (isComplete(dir, requirements)) return false;
    let pid = Number.NaN;
    try {
      pid = Number.parseInt(readFileSync(join(lock, "pid"), "utf8"), 10);
    } catch (error) {
      if (error.code !== "ENOENT") throw error;
    }
    const lockAgeMs = Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
    // Its builder died (or died between taking the lock and writing its pid).
    if (Number.isSafeInteger(pid) && pid > 0 ? !pidAlive(pid) : lockAgeMs > 60_000) {
      rmSync(lock, { recursive: true, force: true });
      continue;
    }
    if (Date.now() > deadline) fail(`gave up waiting for process ${pid} to build ${dir}; remove ${lock} if it is stale`);
    if (!announced) log(`waiting for process ${Number.isNaN(pid) ? "?" : pid} to finish building ${dir}`);
    announced = true;
    sleep(1000);
  }
}

function build(dir, requirements, pythonVersion, log) {
  // Left by builders that were killed: this one holds the lock, so no other is at work.
  const leftover = `${dir.slice(VENV_ROOT.length + 1)}.tmp-`;
  for (const entry of readdirSync(VENV_ROOT)) if (entry.startsWith(leftover)) rmSync(join(VENV_ROOT, entry), { recursive: true, force: true });
  const buildDir = `${dir}.tmp-${process.pid}-${Date.now()}`;
  try {
    const started = Date.now();
    log(`building ${dir}: ${canonical(requirements).join(" ")}`);
    const created = run("python3", ["-m", "venv", buildDir]);
    if (created.status !== 0) {
      const why = `${created.stderr}${created.stdout}`.trim();
      const hint = /ensurepip|No module named venv/i.test(why)
        ? ` The venv module or ensurepip is missing: on Debian/Ubuntu run apt-get install -y python3-venv (or python${pythonVersion.split(".").slice(0, 2).join(".")}-venv).`
        : "";
      fail(`python3 -m venv failed.${hint}\n${why}`);
    }
    const installed = run(pythonIn(buildDir), ["-m", "pip", "install", "--quiet", ...canonical(requirements)], { stdio: ["ignore", "pipe", "pipe"] });
    if (installed.status !== 0) {
      fail(
        `pip could not install ${canonical(requirements).join(" ")} (is a package index or wheel mirror reachable?)\n${installed.stderr}${installed.stdout}`.trim(),
      );
    }
    retarget(join(buildDir, "bin"), buildDir, dir);
    writeFileSync(
      join(buildDir, MARKER),
      `${JSON.stringify({ requirements: canonical(requirements), python: pythonVersion, builtAt: new Date().toISOString() }, null, 2)}\n`,
    );
    try {
      renameSync(buildDir, dir);
    } catch (error) {
      // Another run finished first: its venv is as good as ours.
      if (!isComplete(dir, requirements)) throw error;
    }
    if (!isComplete(dir, requirements)) fail(`the venv built in ${dir} does not run its python`);
    log(`built ${dir} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  } finally {
    rmSync(buildDir, { recursive: true, force: true });
  }
}

/** The python of the venv holding `requirements`, built first when missing or incomplete. */
export function ensureVenv(name, requirements, { log = (line) => process.stderr.write(`python-venv: ${line}\n`) } = {}) {
  if (canonical(requirements).length === 0) fail("name at least one requirement, e.g. hf_xet==1.6.0");
  const pythonVersion = systemPythonVersion();
  const dir = venvDirFor(name, requirements, pythonVersion);
  if (isComplete(dir, requirements)) return pythonIn(dir);
  mkdirSync(VENV_ROOT, { recursive: true });
  if (lockOrWait(dir, requirements, log)) {
    try {
      if (!isComplete(dir, requirements)) {
        if (existsSync(dir)) {
          log(`removing the incomplete ${dir}`);
          rmSync(dir, { recursive: true, force: true });
        }
        build(dir, requirements, pythonVersion, log);
      }
    } finally {
      rmSync(`${dir}.lock`, { recursive: true, force: true });
    }
  }
  return pythonIn(dir);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [name, ...requirements] = process.argv.slice(2);
  try {
    if (name === undefined || name.startsWith("-")) {
      process.stderr.write("usage: node scripts/python-venv.mjs NAME REQUIREMENT…\n");
      process.exitCode = 2;
    } else {
      process.stdout.write(`${ensureVenv(name, requirements)}\n`);
    }
  } catch (error) {
    if (!(error instanceof SetupError)) throw error;
    process.stderr.write(`python-venv: ${error.message}\n`);
    process.exitCode = 1;
  }
}
