/**
 * README.md's "Walkthrough", run as a reader runs it (conventions: ./readme-blocks.ts): a fresh
 * `castor serve` (the compiled one, as `npx castor serve` starts it) with its data in
 * `./castor-data` of a fresh folder, and every block of the section in order in one bash session
 * in that folder — the admin commands, the `hf` CLI, `huggingface_hub`, `transformers` and
 * `datasets` in the venvs the README makes, `curl`, castor's own client and library,
 * `hf_xet` and `@huggingface/hub` — each output the README shows compared with what was printed.
 *
 * What stands in for the reader's machine, and why:
 * - the folder is a stand-in for the castor checkout: links to its package.json, node_modules,
 *   bin, dist and scripts, so `import "castor/client"` and `scripts/…` resolve as they do there,
 *   while what the walkthrough writes stays out of the real checkout; `npx castor` is the
 *   checkout's bin/castor.js, which is what npx runs (NPX_SHIM says why it is not npx itself);
 * - HOME is a fresh folder (no HF cache, no castor shard cache, no hf login), and the
 *   environment carries no HF_*, CASTOR_*, npm_* or venv variables of the test's own;
 *   `npm_config_update_notifier=false` keeps npx from asking the registry for npm updates;
 * - the server listens on a port the OS chose: `127.0.0.1:8080` is rewritten to it;
 * - the two venv blocks are not built (minutes, for torch): the interop tests' venvs of the same
 *   pins are linked where the README makes them (`<!-- doc-test: venv … -->`), after checking that
 *   the README installs exactly those pins.
 *
 * The run needs the `hub-libraries` venv (torch), so `CASTOR_SKIP_HEAVY=1` skips it on a
 * developer's machine as it skips test/interop/hub-libraries.test.ts; CI always runs it. The
 * checks of the conventions run always.
 */
import assert from "node:assert/strict";
import { readFile, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { castorDiagnostics, heavySuiteSkip, PYTHON_VENVS, pythonVenv } from "../interop/hub-clients.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";
import { CHECKOUT, checkoutStandIn, conventionProblems, freshShellEnv, README_PATH, runSection, sectionBlocks, type StandIn } from "./readme-blocks.js";

/** The README's server address, `npx castor serve`'s default. */
const README_PORT = 8080;
/** Torch and transformers take their time on two busy cores. */
const SESSION_TIMEOUT_MS = 10 * 60 * 1000;

describe("README.md: the walkthrough", () => {
  const blocks = sectionBlocks("Walkthrough");

  it("follows the documentation test's conventions (runnable blocks, directives, venv pins, the JS client's pin)", async () => {
    assert.deepEqual(conventionProblems(blocks, PYTHON_VENVS), []);
    const pkg = JSON.parse(await readFile(join(CHECKOUT, "package.json"), "utf8")) as { devDependencies: Record<string, string> };
    const jsPins = [...(await readFile(README_PATH, "utf8")).matchAll(/npm install\s+@huggingface\/hub@([\w.-]+)/g)].map((match) => match[1]);
    assert.ok(jsPins.length > 0, "the README says which @huggingface/hub to install");
    for (const pin of jsPins) assert.equal(pin, pkg.devDependencies["@huggingface/hub"], "the README installs the @huggingface/hub the tests use");
  });

  describe("run as printed against a fresh castor serve", { skip: heavySuiteSkip("the README walkthrough (it needs the transformers/torch venv)") }, () => {
    let server: ServerProcess | undefined;
    let work: StandIn | undefined;
    let venvDirs: Record<string, string>;

    before(async () => {
      work = await checkoutStandIn("castor-readme-walkthrough-");
      const [cli, libraries, started] = await Promise.all([
        pythonVenv("hub-cli", PYTHON_VENVS["hub-cli"]),
        pythonVenv("hub-libraries", PYTHON_VENVS["hub-libraries"]),
        startCastorServer({ dataDir: join(work.dir, "castor-data"), compiled: true }),
      ]);
      server = started;
      venvDirs = { "hub-cli": dirname(dirname(cli)), "hub-libraries": dirname(dirname(libraries)) };
    });

    after(async () => {
      await server?.stop();
      if (work !== undefined) await rm(work.dir, { recursive: true, force: true });
    });

    it("every block runs, in order, and prints what the README shows", async (t) => {
      const port = Number(new URL(server!.url).port);
      const run = await runSection({
        blocks,
        cwd: work!.dir,
        env: freshShellEnv(work!),
        ports: new Map([[README_PORT, port]]),
        venvDirs,
        timeoutMs: SESSION_TIMEOUT_MS,
        diagnostics: () => castorDiagnostics(server!),
      });
      assert.match(run.bindings.get("model.bin hash") ?? "", /^[0-9a-f]{64}$/, "castor's client, curl's tree listing and hf_xet print one file hash");
      // Where the time goes, per step of the walkthrough.
      const bySection = new Map<string, number>();
      for (const { block, seconds } of run.seconds) bySection.set(block.heading, (bySection.get(block.heading) ?? 0) + seconds);
      for (const [heading, seconds] of bySection) t.diagnostic(`${seconds.toFixed(1)} s  ${heading}`);
    });
  });
});
