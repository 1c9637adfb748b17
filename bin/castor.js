#!/bin/sh
//bin/true; exec node --initial-old-space-size=64 "$0" "$@"
// The `castor` command: a thin launcher for the compiled CLI in dist/.
//
// The first two lines are read by sh and skipped by Node (a hashbang and a comment): sh runs
// `//bin/true` (that is, /bin/true), then re-executes this file with Node and a V8 flag, in
// the same process. (Written `":"; //;`, sh ran `//` as a command and every run printed
// "//: Permission denied" on stderr; `":" //;` works too, but the formatter puts the `;` back.) A
// `#!/usr/bin/env -S node …` line would say the same, but -S is an extension not every env
// has; and V8 takes this flag neither from NODE_OPTIONS nor from v8.setFlagsFromString.
//
// --initial-old-space-size: V8 sizes the old generation from the live heap, and castor's is
// small (~12 MB). Streaming a 64 MiB xorb in or out then kept V8 restarting full garbage
// collections, one every ~16 MiB transferred: about 40 % of the server's CPU on hf_xet
// uploads. With 64 MB before the first full collection, 0–1 ran per 256 MiB upload (see
// bench/clients.ts). `node bin/castor.js` runs without the flag.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const main = new URL("../dist/cli/main.js", import.meta.url);
if (!existsSync(fileURLToPath(main))) {
  console.error("castor: dist/ is missing — run `npm ci` (or `npm run build`) in the castor folder first.");
  process.exit(1);
}
const { run } = await import(main.href);
process.exitCode = await run(process.argv.slice(2));
