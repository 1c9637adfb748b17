#!/usr/bin/env node
// Runs the test suite with node's own runner (TypeScript through tsx). Node 20's `--test` only
// discovers *.js files, so the *.test.ts files are listed here. Arguments narrow the run to
// files or folders: `npm test -- test/format`. The scale-out suite (test/scaleout) needs
// PostgreSQL and an S3 endpoint (`scripts/services.sh start`), so it runs only when named.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

const SCALEOUT_DIR = join("test", "scaleout");

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
const result = spawnSync(process.execPath, ["--import", "tsx", "--test", `--test-reporter=${reporter}`, "--test-concurrency=2", ...files], {
  stdio: "inherit",
});
process.exit(result.status ?? 1);
