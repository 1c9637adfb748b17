#!/usr/bin/env node
// Runs the test suite with node's own runner (TypeScript through tsx). Node 20's `--test` only
// discovers *.js files, so the *.test.ts files are listed here. Arguments narrow the run to
// files or folders: `npm test -- test/format`. The scale-out suite (test/scaleout) needs
// PostgreSQL and an S3 endpoint (`scripts/services.sh start`), so it runs only when named.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";

const SCALEOUT_DIR = join("test", "scaleout");
/**
 * Files that restart the services every other scale-out test shares (the fault drills): they
 * run after the other files, one at a time, so that no other test meets their outages.
 */
const RUN_ALONE = new Set([join(SCALEOUT_DIR, "faults.test.ts")]);

function collect(path, out, explicit) {
  if (statSync(path).isDirectory()) {
    for (const name of readdirSync(path).sort()) {
      if (name === "node_modules" || name.startsWith(".")) continue;
      const child = join(path, name);
      if (child === SCALEOUT_DIR && !explicit) continue;
      collect(child, out, explicit);
    }
  } else if (path.endsWith(".test.ts")) {
    out.push(path);
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
const files = (roots.length ? roots : ["test"]).flatMap((root) => {
  const explicit = root.replace(/\/+$/, "").startsWith(SCALEOUT_DIR);
  return collect(root, [], explicit);
});
if (files.length === 0) {
  console.error(`no test files found under ${roots.join(" ") || "test"}`);
  process.exit(1);
}
const reporter = process.env.CASTOR_TEST_REPORTER ?? "spec";
const runsAlone = (file) => RUN_ALONE.has(relative(process.cwd(), resolve(file)));
const groups = [
  { files: files.filter((file) => !runsAlone(file)), concurrency: 2 },
  { files: files.filter(runsAlone), concurrency: 1 },
].filter((group) => group.files.length > 0);
let failed = false;
for (const { files: group, concurrency } of groups) {
  const result = spawnSync(process.execPath, ["--import", "tsx", "--test", `--test-reporter=${reporter}`, `--test-concurrency=${concurrency}`, ...group], {
    stdio: "inherit",
  });
  failed ||= result.status !== 0;
}
if (groups.length > 1) {
  console.log(
    `${failed ? "FAILED" : "passed"}: ${files.length - groups[1].files.length} test files together, then ${groups[1].files.length} alone (${[...groups[1].files].join(", ")})`,
  );
}
process.exit(failed ? 1 : 0);
