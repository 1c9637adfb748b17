#!/usr/bin/env node
// Prepares the Python side of the hf_xet interop tests and benchmarks: a virtual environment
// `.venv/interop-HASH` (git-ignored) holding the real `hf_xet` client at the pinned version,
// made by scripts/python-venv.mjs (built once, reused while the pin is unchanged; safe when two
// test files start at once). Cheap when the venv is already there, so every interop run calls it.
//
// On success the last stdout line is the venv's python interpreter. On failure it exits 1 with
// a message saying what to install.
import { ensureVenv, SetupError } from "./python-venv.mjs";

const HF_XET_VERSION = "1.6.0";

try {
  process.stdout.write(`${ensureVenv("interop", [`hf_xet==${HF_XET_VERSION}`], { log: (line) => process.stderr.write(`setup-interop: ${line}\n`) })}\n`);
} catch (error) {
  if (!(error instanceof SetupError)) throw error;
  process.stderr.write(`setup-interop: ${error.message}\n`);
  process.exitCode = 1;
}
