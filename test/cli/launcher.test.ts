/**
 * The installed `castor` command (bin/castor.js, run as an executable as npm's bin link runs it)
 * starts Node with the V8 flag castor's transfer speed depends on (see bin/castor.js), and
 * serves from the compiled CLI in dist/ (built by `npm ci`).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { COMPILED_COMMAND, startCastorServer, type ServerProcess } from "../helpers/server.js";

describe("the castor command (bin/castor.js)", () => {
  let server: ServerProcess;

  before(async () => {
    server = await startCastorServer({ compiled: true });
  });

  after(async () => {
    await server?.stop();
  });

  it("runs castor serve in one Node process started with --initial-old-space-size=64", async () => {
    // /proc/<pid>/cmdline: the arguments, NUL-separated. The pid is the one spawned: sh exec'd node in place.
    const args = readFileSync(`/proc/${server.child.pid}/cmdline`, "utf8").split("\0");
    assert.ok(args.includes("--initial-old-space-size=64"), `castor serve runs as: ${args.join(" ")}`);
    assert.ok(
      args.some((arg) => arg.endsWith("bin/castor.js")),
      `castor serve runs as: ${args.join(" ")}`,
    );
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
  });

  it("prints nothing of its own: --version writes the version to stdout and nothing to stderr", async () => {
    const { stdout, stderr } = await promisify(execFile)(COMPILED_COMMAND, ["--version"]);
    assert.match(stdout, /^\d+\.\d+\.\d+\n$/);
    assert.equal(stderr, "");
  });
});
