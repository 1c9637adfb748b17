#!/usr/bin/env node
// The `castor` command: a thin launcher for the compiled CLI in dist/.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const main = new URL("../dist/cli/main.js", import.meta.url);
if (!existsSync(fileURLToPath(main))) {
  console.error("castor: dist/ is missing — run `npm ci` (or `npm run build`) in the castor folder first.");
  process.exit(1);
}
const { run } = await import(main.href);
process.exitCode = await run(process.argv.slice(2));
