#!/usr/bin/env node
// Prepares the Python side of the interop tests: a virtual environment under `.venv/interop`
// (git-ignored) holding the real `hf_xet` client at the pinned version. Idempotent and cheap
// when the venv is already right, so every interop test run calls it; on a fresh machine it
// builds the venv (pip is expected to reach an index or a local wheel mirror).
//
// On success the last stdout line is the venv's python interpreter. On failure it exits 1 with
// a message saying what to install.
//
// Concurrent runs (two test files starting at once) are safe: each builds in its own temporary
// folder and renames it into place; the loser of the race discards its copy and uses the winner's.
import { spawnSync } from "node:child_process";
import { existsSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HF_XET_VERSION = "1.6.0";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
const venvDir = join(repoRoot, ".venv", "interop");

function pythonIn(dir) {
  return join(dir, "bin", "python");
}

function run(command, args, options = {}) {
  return spawnSync(command, args, { encoding: "utf8", env: { ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: "1" }, ...options });
}

/** The hf_xet version importable by the venv's python, or null when the venv is unusable. */
function installedHfXetVersion(dir) {
  const python = pythonIn(dir);
  if (!existsSync(python)) return null;
  const probe = run(python, ["-c", "import hf_xet, importlib.metadata as m; print(m.version('hf_xet'))"]);
  return probe.status === 0 ? probe.stdout.trim() : null;
}

/** A problem the user fixes by installing something; reported without a stack trace. */
class SetupError extends Error {}

function fail(message) {
  throw new SetupError(message);
}

function systemPython() {
  const probe = run("python3", ["-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"]);
  if (probe.error || probe.status !== 0) {
    fail("python3 was not found. Install it (Debian/Ubuntu: apt-get install -y python3 python3-venv) and run the tests again.");
  }
  return probe.stdout.trim();
}

function buildVenv(pythonVersion) {
  const buildDir = `${venvDir}.tmp-${process.pid}-${Date.now()}`;
  try {
    const created = run("python3", ["-m", "venv", buildDir]);
    if (created.status !== 0) {
      const why = `${created.stderr}${created.stdout}`.trim();
      const hint = /ensurepip|No module named venv/i.test(why)
        ? ` The venv module or ensurepip is missing: on Debian/Ubuntu run apt-get install -y python3-venv (or python${pythonVersion}-venv).`
        : "";
      fail(`python3 -m venv failed.${hint}\n${why}`);
    }
    const installed = run(pythonIn(buildDir), ["-m", "pip", "install", "--quiet", `hf_xet==${HF_XET_VERSION}`], { stdio: ["ignore", "pipe", "pipe"] });
    if (installed.status !== 0) {
      fail(`pip could not install hf_xet==${HF_XET_VERSION} (is a package index or wheel mirror reachable?)\n${installed.stderr}${installed.stdout}`.trim());
    }
    if (installedHfXetVersion(buildDir) !== HF_XET_VERSION) fail(`hf_xet ${HF_XET_VERSION} was installed but does not import`);
    try {
      renameSync(buildDir, venvDir);
    } catch (error) {
      // Another run finished first: its venv is as good as ours.
      if (installedHfXetVersion(venvDir) !== HF_XET_VERSION) throw error;
    }
  } finally {
    rmSync(buildDir, { recursive: true, force: true });
  }
}

try {
  const current = installedHfXetVersion(venvDir);
  if (current !== HF_XET_VERSION) {
    const pythonVersion = systemPython();
    if (existsSync(venvDir)) {
      process.stderr.write(`setup-interop: rebuilding ${venvDir} (found hf_xet ${current ?? "missing"}, want ${HF_XET_VERSION})\n`);
      rmSync(venvDir, { recursive: true, force: true });
    }
    buildVenv(pythonVersion);
  }
  process.stdout.write(`${pythonIn(venvDir)}\n`);
} catch (error) {
  if (!(error instanceof SetupError)) throw error;
  process.stderr.write(`setup-interop: ${error.message}\n`);
  process.exitCode = 1;
}
