#!/usr/bin/env node
// Runs the test suite with node's own runner (TypeScript through tsx). Node 20's `--test` only
// discovers *.js files, so the *.test.ts files are listed here. Arguments narrow the run to
// files or folders: `npm test -- test/format`.
import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

function collect(path, out) {
  if (statSync(path).isDirectory()) {
    for (const name of readdirSync(path).sort()) {
      if (name === "node_modules" || name.startsWith(".")) continue;
      collect(join(path, name), out);
    }
  } else if (path.endsWith(".test.ts")) {
    out.push(path);
  }
  return out;
}

const roots = process.argv.slice(2);
const files = (roots.length ? roots : ["test"]).flatMap((root) => collect(root, []));
if (files.length === 0) {
  console.error("no test files found under " + (roots.join(" ") || "test"));
  process.exit(1);
}
const reporter = process.env.CASTOR_TEST_REPORTER ?? "spec";
const result = spawnSync(
  process.execPath,
  ["--import", "tsx", "--test", `--test-reporter=${reporter}`, "--test-concurrency=2", ...files],
  { stdio: "inherit" },
);
process.exit(result.status ?? 1);
