#!/usr/bin/env node
// Coverage-guided fuzzing of the wire parsers with Jazzer.js (README, Development, Fuzzing).
//   npm run fuzz -- TARGET [--seconds N]     one target of fuzz/targets/ for N seconds (default 60)
//   npm run fuzz -- all [--seconds N]        every target in turn, N seconds each
// Builds dist/ first (the targets import the compiled parsers). Each run starts from a temporary
// copy of fuzz/corpus/<target>/, so the committed corpus is never modified; a finding's input is
// kept under the temporary directory printed at the end. libFuzzer limits: -rss_limit_mb=512
// (an allocation beyond that is a finding), -timeout=5 (an input taking longer is a hang); a
// target with fuzz/dictionaries/<target>.dict is given it (-dict).
// Exits non-zero when any target reports a finding.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
/** Target → whether its fuzz function is synchronous (Jazzer's faster --sync mode). */
const TARGETS = {
  xorb: true,
  shard: true,
  chunk: true,
  range: true,
  "transfer-url": true,
  "cas-token": false,
  "hub-names": true,
  commit: true,
  "pkt-line": true,
  "git-pack": false,
};

function usage(message) {
  console.error(`${message}\nusage: npm run fuzz -- <${Object.keys(TARGETS).join("|")}|all> [--seconds N]`);
  process.exit(2);
}

const args = process.argv.slice(2);
let seconds = 60;
const names = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--seconds") {
    seconds = Number(args[++i]);
    if (!Number.isInteger(seconds) || seconds < 1) usage(`--seconds needs a positive integer, got ${args[i]}`);
  } else names.push(args[i]);
}
if (names.length !== 1) usage("name exactly one target, or all");
const selected = names[0] === "all" ? Object.keys(TARGETS) : names;
for (const name of selected) if (!Object.hasOwn(TARGETS, name)) usage(`unknown target ${name}`);

const build = spawnSync("npm", ["run", "--silent", "build"], { cwd: root, stdio: "inherit" });
if (build.status !== 0) process.exit(build.status ?? 1);

const jazzer = createRequire(import.meta.url).resolve("@jazzer.js/core/dist/cli.js");
const work = mkdtempSync(path.join(tmpdir(), "castor-fuzz-"));
const failed = [];
for (const name of selected) {
  const corpus = path.join(work, name, "corpus");
  const artifacts = path.join(work, name, "artifacts");
  mkdirSync(artifacts, { recursive: true });
  cpSync(path.join(root, "fuzz", "corpus", name), corpus, { recursive: true });
  const seeds = readdirSync(corpus).length;
  // A target whose input is text with structure (JSON) gets its tokens from a libFuzzer dictionary.
  const dictionary = path.join(root, "fuzz", "dictionaries", `${name}.dict`);
  console.log(`== fuzz ${name}: ${seconds} s from ${seeds} seeds`);
  const started = Date.now();
  const run = spawnSync(
    process.execPath,
    [
      "--require",
      path.join(root, "scripts", "jazzer-glibc-compat.cjs"),
      jazzer,
      path.join(root, "fuzz", "targets", `${name}.mjs`),
      corpus,
      ...(TARGETS[name] ? ["--sync"] : []),
      "--",
      `-max_total_time=${seconds}`,
      "-rss_limit_mb=512",
      "-timeout=5",
      `-artifact_prefix=${artifacts}${path.sep}`,
      "-print_final_stats=1",
      ...(existsSync(dictionary) ? [`-dict=${dictionary}`] : []),
    ],
    { cwd: root, stdio: ["ignore", "inherit", "inherit"], timeout: (seconds + 60) * 1000 },
  );
  const took = ((Date.now() - started) / 1000).toFixed(0);
  if (run.status === 0) console.log(`== fuzz ${name}: no finding (${took} s)`);
  else {
    failed.push(name);
    console.log(`== fuzz ${name}: FINDING (exit ${run.status ?? run.signal}, ${took} s); inputs in ${artifacts}`);
  }
}
if (failed.length > 0) {
  console.error(`fuzzing found problems in: ${failed.join(", ")} (inputs under ${work})`);
  process.exit(1);
}
console.log(`fuzzing: ${selected.length} target(s), no finding`);
