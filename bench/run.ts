/**
 * `npm run bench [-- group ...]`: runs the benchmark groups (every `bench/*.ts` module other than
 * `lib.ts` and this file, named after its file), prints one table and writes the rows to
 * `bench/results/latest.json` plus a timestamped copy. With names, only those groups run.
 *
 * `npm run bench` builds dist/ first: the groups that start castor run the compiled `castor`
 * command, as users run it, not the sources through tsx.
 *
 * Without names, every group runs but the long ones of ON_DEMAND.
 *
 * Groups run one after another, never in parallel: the machine has 2 cores and each group
 * wants them to itself. A group that throws is reported and makes the exit code 1; the others
 * still run.
 *
 * `npm run bench -- --smoke` (or CASTOR_BENCH_SMOKE=1) is a smoke run: every group, the long
 * ones of ON_DEMAND included, once on small sizes (`sized` and `timeRepeated` in lib.ts), to
 * show that each still runs; CI runs it. Its figures measure nothing, so it writes no results.
 */
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { SMOKE_VARIABLE, formatTable, isSmokeRun, type BenchGroup, type BenchRow } from "./lib.js";

const benchDir = fileURLToPath(new URL(".", import.meta.url));
const resultsDir = join(benchDir, "results");
const NOT_GROUPS = new Set(["lib.ts", "run.ts"]);
/** Groups that take many minutes by design (a 10-minute soak, a store of ten million chunks): run only when named. */
const ON_DEMAND = new Set(["scale", "soak"]);

function availableGroups(): string[] {
  return readdirSync(benchDir)
    .filter((name) => name.endsWith(".ts") && !name.endsWith(".d.ts") && !NOT_GROUPS.has(name))
    .map((name) => basename(name, ".ts"))
    .sort((a, b) => (a === "format" ? -1 : b === "format" ? 1 : a.localeCompare(b)));
}

async function loadGroup(name: string): Promise<BenchGroup> {
  const module: { run?: unknown } = await import(pathToFileURL(join(benchDir, `${name}.ts`)).href);
  if (typeof module.run !== "function") {
    throw new Error(`bench/${name}.ts must export \`async function run(): Promise<BenchRow[]>\``);
  }
  return module.run as BenchGroup;
}

async function main(): Promise<number> {
  const available = availableGroups();
  const args = process.argv.slice(2);
  const options = args.filter((arg) => arg.startsWith("-"));
  const unknownOptions = options.filter((option) => option !== "--smoke");
  if (unknownOptions.length > 0) {
    console.error(`unknown option(s): ${unknownOptions.join(", ")}; the one option is --smoke (every group once, on small sizes)`);
    return 2;
  }
  // Set before any group is loaded: their sizes are read from it as their modules load.
  if (options.includes("--smoke")) process.env[SMOKE_VARIABLE] = "1";
  const smoke = isSmokeRun();
  const requested = args.filter((arg) => !arg.startsWith("-"));
  const unknown = requested.filter((name) => !available.includes(name));
  if (unknown.length > 0) {
    console.error(`unknown benchmark group(s): ${unknown.join(", ")}; available: ${available.join(", ")}`);
    return 2;
  }
  const selected = requested.length > 0 ? available.filter((name) => requested.includes(name)) : available.filter((name) => smoke || !ON_DEMAND.has(name));
  if (requested.length === 0 && !smoke) process.stderr.write(`bench: not running ${[...ON_DEMAND].join(" and ")} (long by design): name them to run them\n`);
  if (smoke) process.stderr.write("bench: smoke run — small sizes, one round; the figures measure nothing and no results are written\n");

  const startedAt = new Date();
  const rows: BenchRow[] = [];
  const failures: { group: string; error: string }[] = [];
  for (const name of selected) {
    const groupStarted = performance.now();
    process.stderr.write(`bench: ${name} …`);
    try {
      const run = await loadGroup(name);
      rows.push(...(await run()));
      process.stderr.write(` ${((performance.now() - groupStarted) / 1000).toFixed(1)} s\n`);
    } catch (err) {
      const error = err instanceof Error ? (err.stack ?? err.message) : String(err);
      failures.push({ group: name, error });
      process.stderr.write(` FAILED\n${error}\n`);
    }
  }

  console.log(formatTable(rows));
  if (smoke) {
    console.log(
      `\nsmoke run: ${selected.length - failures.length} of ${selected.length} groups ran${failures.length ? `; failed: ${failures.map((failure) => failure.group).join(", ")}` : ""}`,
    );
    return failures.length > 0 ? 1 : 0;
  }

  const report = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    cpu: { model: cpus()[0]?.model ?? "unknown", count: cpus().length },
    groups: selected,
    rows,
    failures,
  };
  mkdirSync(resultsDir, { recursive: true });
  const json = `${JSON.stringify(report, null, 2)}\n`;
  const stamped = join(resultsDir, `${startedAt.toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(stamped, json);
  writeFileSync(join(resultsDir, "latest.json"), json);
  console.log(`\nresults: ${join("bench", "results", "latest.json")} and ${join("bench", "results", basename(stamped))}`);
  return failures.length > 0 ? 1 : 0;
}

process.exitCode = await main();
