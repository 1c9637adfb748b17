#!/usr/bin/env node
// Runs the test suite: each test file in a Node process of its own (node's test runner, the
// TypeScript through tsx), several files at once. Node 20's `--test` only discovers *.js files,
// so the *.test.ts files are listed here. Arguments narrow the run to files or folders:
// `npm test -- test/format`. The scale-out suite (test/scaleout) needs PostgreSQL and an S3
// endpoint (`scripts/services.sh start`), so it runs only when named.
//
// - Files run CASTOR_TEST_CONCURRENCY at a time: by default two per core, since most files
//   spend much of their time waiting on the servers, commands and clients they start. So a
//   file must not depend on another's state: `startCastorServer` (test/helpers/server.ts)
//   gives each server its own port and data dir, test/helpers/temp-dir.ts makes folders of a
//   file's own, and the Python venvs are built once under .venv/ by a race-safe builder.
// - The longest files start first, by the times of earlier runs on this machine (kept in
//   node_modules/.cache/castor-test-times.json; without them, as in CI, the folders whose files
//   start processes go first), so that no long file starts last and runs on alone.
// - Tests run the `castor` command compiled, as users do (CASTOR_COMMAND in
//   test/helpers/cli.ts): dist/ is rebuilt first whenever src/ or web/ changed since the last
//   build made here.
// - A file's output is printed whole when it ends, headed by its wall and CPU time (its own
//   and its child processes'); the run ends with the slowest files and the totals.
//   CASTOR_TEST_REPORTER picks node's reporter (spec by default; dot, tap, junit …), and
//   CASTOR_TEST_TIMES=FILE writes each file's seconds, CPU seconds and test counts as JSON.
import { spawn, spawnSync } from "node:child_process";
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statfsSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const SCALEOUT_DIR = join("test", "scaleout");
/**
 * Files that run after the others, one at a time: those that must have the machine to themselves
 * (a fixed port, say), and those that restart the services every other scale-out test shares
 * (the fault drills), so that no other test meets their outages.
 */
const RUN_ALONE = new Set([join(SCALEOUT_DIR, "faults.test.ts")]);
/**
 * The scale-out files share one PostgreSQL and one Ceph RGW, running on the same cores: a run
 * that has any of them runs at most this many files at once (as many as before this runner).
 */
const SCALEOUT_CONCURRENCY = 2;
/**
 * The heavy files, which CASTOR_SKIP_HEAVY=1 leaves out of a run over folders, for a quick
 * check on a developer's machine (a file named on the command line still runs, and where `CI`
 * is set the switch is ignored: CI runs everything). Each spends over 10 s of CPU, most of it
 * in the programs it starts; together they are about 60 % of the suite's CPU time.
 */
const HEAVY = new Set(
  [
    "interop/hub-libraries.test.ts", // transformers, datasets and torch in Python
    "interop/hub-cli.test.ts", // the hf CLI, a Python process per command
    "interop/clients-matrix.test.ts", // hf_xet and the other clients on every kind of file
    "interop/hub-features.test.ts", // huggingface_hub and the hf CLI
    "interop/hf-xet-behaviour.test.ts", // hf_xet in Python
    "web/web-ui.test.ts", // Chromium
    "e2e/crash-commit.test.ts", // servers killed mid-commit and restarted, fsck and gc after each
    "e2e/crash-shard.test.ts", // servers killed mid-registration and restarted
    "e2e/crash-xorb.test.ts", // servers killed mid-upload and restarted
    "e2e/workers.test.ts", // servers of three processes, workers killed and replaced
    "e2e/connection-limits.test.ts", // hundreds of slow and stalled connections
    "cli/admin.test.ts", // dozens of castor commands
    "cli/repo-client.test.ts", // dozens of castor commands
    "cli/backup.test.ts", // dozens of castor commands
    "cli/download-interrupt.test.ts", // downloads killed and resumed
    "ops/gc.test.ts", // castor gc and fsck runs beside a server
  ].map((file) => join("test", file)),
);
const TALLY_REPORTER = fileURLToPath(new URL("./test-tally.mjs", import.meta.url));
const TIMES_FILE = join("node_modules", ".cache", "castor-test-times.json");
const BUILD_STAMP = join("dist", ".tests-built");

function collect(path, out, explicit) {
  if (statSync(path).isDirectory()) {
    for (const name of readdirSync(path).sort()) {
      if (name === "node_modules" || name.startsWith(".")) continue;
      const child = join(path, name);
      if (child === SCALEOUT_DIR && !explicit) continue;
      collect(child, out, explicit);
    }
  } else if (path.endsWith(".test.ts")) {
    out.push(relative(process.cwd(), resolve(path)));
  }
  return out;
}

const roots = process.argv.slice(2);
for (const root of roots) {
  if (!existsSync(root)) {
    console.error(`no such test file or folder: ${root}`);
    process.exit(2);
  }
}
const found = (roots.length ? roots : ["test"]).flatMap((root) => {
  const explicit = root.replace(/\/+$/, "").startsWith(SCALEOUT_DIR);
  return collect(root, [], explicit).map((file) => ({ file, named: !statSync(root).isDirectory() }));
});
if (found.length === 0) {
  console.error(`no test files found under ${roots.join(" ") || "test"}`);
  process.exit(1);
}
const skipped = skipHeavy() ? found.filter(({ file, named }) => !named && HEAVY.has(file)).map(({ file }) => file) : [];
const files = found.map(({ file }) => file).filter((file) => !skipped.includes(file));
if (skipped.length > 0) {
  console.log(`CASTOR_SKIP_HEAVY: not running ${skipped.length} heavy files (CI runs them): ${skipped.join(", ")}`);
  if (files.length === 0) process.exit(0);
}

/** Whether CASTOR_SKIP_HEAVY asks to skip the heavy files: set to anything but "", "0" or "false", and `CI` not set. */
function skipHeavy() {
  const set = (name) => !["", "0", "false"].includes(process.env[name]?.trim().toLowerCase() ?? "");
  if (!set("CASTOR_SKIP_HEAVY")) return false;
  if (set("CI")) {
    console.log("CASTOR_SKIP_HEAVY is ignored because CI is set: every file runs");
    return false;
  }
  return true;
}
/**
 * Builds dist/ (`npm run build`) unless it is newer than every source: the tests run the
 * `castor` command compiled, as users do (test/helpers/cli.ts, CASTOR_COMMAND). The compiler
 * leaves unchanged outputs untouched, so a stamp written after each build dates it.
 */
function buildIfStale() {
  const newest = (path) => {
    if (!existsSync(path)) return 0;
    const stat = statSync(path);
    if (!stat.isDirectory()) return stat.mtimeMs;
    return Math.max(stat.mtimeMs, ...readdirSync(path).map((name) => newest(join(path, name))));
  };
  const sources = Math.max(...["src", "web", "package.json", "tsconfig.json", "tsconfig.build.json"].map(newest));
  if (existsSync(BUILD_STAMP) && statSync(BUILD_STAMP).mtimeMs > sources) return;
  console.log("building dist/ (the sources changed since the tests last built it) …");
  const started = Date.now();
  const result = spawnSync("npm", ["run", "--silent", "build"], { stdio: "inherit" });
  if (result.status !== 0) {
    console.error("npm run build failed: the tests run the compiled castor command, so they need dist/ built from the current sources");
    process.exit(1);
  }
  writeFileSync(BUILD_STAMP, `${new Date(started).toISOString()}\n`);
  // Dated when the build started: a source saved while it ran makes the next run build again.
  utimesSync(BUILD_STAMP, started / 1000, started / 1000);
}
buildIfStale();

const reporter = process.env.CASTOR_TEST_REPORTER ?? "spec";
const concurrency = testConcurrency();

/** CASTOR_TEST_CONCURRENCY, or two files per core: most files spend much of their time waiting on child processes. */
function testConcurrency() {
  const setting = process.env.CASTOR_TEST_CONCURRENCY;
  if (setting === undefined || setting === "") return 2 * availableParallelism();
  const value = Number(setting);
  if (!Number.isInteger(value) || value < 1) {
    console.error(`CASTOR_TEST_CONCURRENCY must be a whole number ≥ 1, got ${JSON.stringify(setting)}`);
    process.exit(2);
  }
  return value;
}

/** Wall seconds of each file in earlier runs, longest first being the order that ends soonest. */
function readTimes() {
  try {
    return JSON.parse(readFileSync(TIMES_FILE, "utf8"));
  } catch {
    return {};
  }
}
const times = readTimes();

/**
 * TMPDIR of the test processes (and of the servers, commands and clients they start): a
 * RAM-backed /dev/shm where there is one with room, since the tests' data dirs and files live in
 * temp folders and castor syncs every blob it stores: on the disk, those syncs were much of the
 * time of the files that write many (a third to a half of backup, gc and sqlite's). Nothing the
 * tests check depends on the disk; test/e2e/disk-full.test.ts mounts a tmpfs of its own.
 * CASTOR_TEST_TMPDIR chooses another folder.
 */
function testTempDir() {
  const setting = process.env.CASTOR_TEST_TMPDIR;
  if (setting) return setting;
  const TMPFS_MAGIC = 0x01021994;
  try {
    const shm = statfsSync("/dev/shm");
    accessSync("/dev/shm", constants.W_OK);
    if (shm.type === TMPFS_MAGIC && shm.bavail * shm.bsize >= 4 * 1024 ** 3) return "/dev/shm";
  } catch {}
  return tmpdir();
}
const childEnv = { ...process.env, TMPDIR: testTempDir() };

let runCount = 0;
const scratch = mkdtempSync(join(tmpdir(), "castor-test-run-"));
process.once("exit", () => rmSync(scratch, { recursive: true, force: true }));

/** Runs one file; resolves with its exit status, counts, times and everything it printed. */
function runFile(file, index, streamOutput) {
  const tallyFile = join(scratch, `${index}.json`);
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      `--test-reporter=${reporter}`,
      "--test-reporter-destination=stdout",
      `--test-reporter=${TALLY_REPORTER}`,
      `--test-reporter-destination=${tallyFile}`,
      file,
    ],
    { env: childEnv, stdio: streamOutput ? "inherit" : ["ignore", "pipe", "pipe"] },
  );
  const output = [];
  child.stdout?.on("data", (chunk) => output.push(chunk));
  child.stderr?.on("data", (chunk) => output.push(chunk));
  return new Promise((resolvePromise) => {
    child.once("close", (code, signal) => {
      let tally = null;
      try {
        tally = JSON.parse(readFileSync(tallyFile, "utf8"));
      } catch {}
      resolvePromise({ file, code, signal, tally, seconds: (performance.now() - started) / 1000, output: Buffer.concat(output) });
    });
  });
}

/**
 * The order files start in: longest first (by the last run's times on this machine), so that no
 * long file starts last and runs on alone. Files without a time yet (a fresh clone, as in CI)
 * come after those known, the folders whose files start servers and clients first.
 */
function startOrder(group) {
  const slowFolders = ["interop", "e2e", "cli", "ops", "web"].map((name) => join("test", name) + sep);
  const guess = (file) => (slowFolders.some((folder) => file.startsWith(folder)) ? 1 : 0);
  return [...group].sort((a, b) => (times[b] ?? -1) - (times[a] ?? -1) || guess(b) - guess(a));
}

async function runGroup(group, limit, results) {
  const queue = startOrder(group);
  const streamOutput = group.length === 1;
  const worker = async () => {
    while (queue.length > 0) {
      const file = queue.shift();
      const result = await runFile(file, runCount++, streamOutput);
      results.push(result);
      if (!streamOutput) {
        process.stdout.write(`\n── ${file} (${timing(result)})\n`);
        process.stdout.write(result.output);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, group.length) }, worker));
}

function timing(result) {
  const cpu = result.tally?.cpuSeconds;
  const status = result.code === 0 ? "" : result.signal ? `, killed by ${result.signal}` : `, exit ${result.code}`;
  return `${result.seconds.toFixed(1)} s${cpu == null ? "" : `, CPU ${cpu.toFixed(1)} s`}${status}`;
}

const runsAlone = (file) => RUN_ALONE.has(file);
const limit = files.some((file) => file.startsWith(SCALEOUT_DIR + sep)) ? Math.min(concurrency, SCALEOUT_CONCURRENCY) : concurrency;
const started = performance.now();
const results = [];
await runGroup(
  files.filter((file) => !runsAlone(file)),
  limit,
  results,
);
await runGroup(files.filter(runsAlone), 1, results);
const wall = (performance.now() - started) / 1000;

// A run that skipped tests (CASTOR_SKIP_HEAVY) says nothing of the file's whole length.
for (const result of results) if (!result.tally?.skipped) times[result.file] = Math.round(result.seconds * 10) / 10;
try {
  mkdirSync(join("node_modules", ".cache"), { recursive: true });
  writeFileSync(TIMES_FILE, `${JSON.stringify(times, null, 1)}\n`);
} catch {}

const failed = results.filter((result) => result.code !== 0);
const sum = (name) => results.reduce((total, result) => total + (result.tally?.[name] ?? 0), 0);
const cpu = results.reduce((total, result) => total + (result.tally?.cpuSeconds ?? 0), 0);
if (results.length > 1) {
  console.log(`\n── slowest files (wall, CPU):`);
  for (const result of [...results].sort((a, b) => b.seconds - a.seconds).slice(0, 10)) console.log(`   ${result.file} (${timing(result)})`);
}
console.log(
  `\n${failed.length ? "FAILED" : "passed"}: ${results.length} files, ${sum("tests")} tests, ${sum("pass")} passed, ${sum("fail")} failed, ${sum("cancelled")} cancelled, ${sum("skipped")} skipped in ${wall.toFixed(1)} s (CPU ${cpu.toFixed(1)} s, ${limit} files at once)${skipped.length ? `; ${skipped.length} heavy files not run (CASTOR_SKIP_HEAVY)` : ""}`,
);
for (const result of failed) console.log(`   failed: ${result.file} (${timing(result)})`);
if (process.env.CASTOR_TEST_TIMES) {
  writeFileSync(
    process.env.CASTOR_TEST_TIMES,
    `${JSON.stringify(
      results.map(({ file, seconds, tally, code }) => ({ file, seconds, code, ...tally })),
      null,
      1,
    )}\n`,
  );
}
process.exit(failed.length ? 1 : 0);
