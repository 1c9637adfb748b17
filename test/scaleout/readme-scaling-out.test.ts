/**
 * README.md's "Scaling out", run as printed (conventions: test/docs/readme-blocks.ts): from the
 * walkthrough's embedded data dir, through `scripts/services.sh settings`, `castor migrate`, two
 * nodes and nginx, to downloads and an upload through nginx with the walkthrough's token — and
 * every output the section shows compared. Part of the scale-out suite: it needs the services
 * of `scripts/services.sh start` (CI's scale-out step) and nginx, and fails without them.
 *
 * What stands in for the reader's machine, besides what test/docs/readme-walkthrough.test.ts
 * describes (a stand-in checkout, a fresh HOME and environment, the npx shim):
 * - the walkthrough's state: an embedded castor (the compiled one) made, in the stand-in's
 *   `./castor-data`, what the walkthrough leaves that the section uses — alice's write token,
 *   exported as HF_TOKEN and CASTOR_HUB_TOKEN with HF_ENDPOINT and CASTOR_ENDPOINT, and
 *   `model.bin` and `notes.txt` committed to alice/bert — and is stopped before the section runs;
 * - the README's ports 8080, 8081 and 8082 become free ports the OS handed out, so the run
 *   never meets another server; the services' own ports come from the running services
 *   (CASTOR_SERVICES_DIR and the port variables are passed through, as a reader's would be);
 * - the section's database `castor` and key prefix `castor/` are dropped before and after the
 *   run, so that each run starts from empty stores as a reader's first does (a developer's own
 *   use of `scripts/services.sh settings` on the same services loses them).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { checkoutStandIn, conventionProblems, freshShellEnv, runSection, sectionBlocks, type StandIn } from "../docs/readme-blocks.js";
import { runCastor } from "../helpers/cli.js";
import { ensureNginx } from "../helpers/nginx.js";
import { requireTestDatabaseUrl } from "../helpers/scaleout-postgres.js";
import { deleteS3Prefix, s3TestEnv } from "../helpers/scaleout-s3.js";
import { startCastorServer } from "../helpers/server.js";
import { PYTHON_VENVS } from "../interop/hub-clients.js";

// Fail the whole file, with the way to start the services, when they are not running.
const adminUrl = requireTestDatabaseUrl();
const s3Env = s3TestEnv();

/** What `scripts/services.sh settings` names: the database and the key prefix the section's castor uses. */
const SECTION_DATABASE = "castor";
const SECTION_PREFIX = "castor/";
/** The README's load balancer (the walkthrough's address) and its two nodes. */
const README_PORTS = [8080, 8081, 8082];
/** The variables that place the services, which a reader's shell would carry into `scripts/services.sh`. */
const SERVICE_VARIABLES = ["CASTOR_SERVICES_DIR", "CASTOR_PG_PORT", "CASTOR_RGW_PORT", "CASTOR_CEPH_MON_PORT"];
const SESSION_TIMEOUT_MS = 5 * 60 * 1000;
/** The walkthrough's notes.txt, byte for byte. */
const NOTES = "Trained on the walkthrough's random bytes.\n";

async function dropSectionStores(): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS ${SECTION_DATABASE} WITH (FORCE)`);
  } finally {
    await client.end();
  }
  await deleteS3Prefix(SECTION_PREFIX, s3Env);
}

/** A port nothing listens on now (the OS's choice); the README's servers bind it a moment later. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("README.md: scaling out, step by step", () => {
  const blocks = sectionBlocks("Scaling out");
  let work: StandIn | undefined;
  const walkthrough: Record<string, string> = {};
  let ports: Map<number, number>;

  before(async () => {
    await Promise.all([ensureNginx(), dropSectionStores()]);
    work = await checkoutStandIn("castor-readme-scaling-out-");
    ports = new Map();
    for (const port of README_PORTS) ports.set(port, await freePort());
    const endpoint = `http://127.0.0.1:${ports.get(8080)}`;

    // The walkthrough's state, made the way the walkthrough makes it.
    const dataDir = join(work.dir, "castor-data");
    await Promise.all([writeFile(join(work.dir, "model.bin"), randomBytes(20_000_000)), writeFile(join(work.dir, "notes.txt"), NOTES)]);
    const embedded = await startCastorServer({ dataDir, compiled: true });
    try {
      const admin = async (args: string[]) => {
        const result = await runCastor(args, { env: embedded.settings, cwd: work!.dir, timeoutMs: 60_000 });
        assert.equal(result.code, 0, `castor ${args.join(" ")}: ${result.stderr}`);
        return result.stdout;
      };
      const token = (await admin(["token", "create", "--user", "alice", "--namespace", "alice", "--access", "write", "--expires", "90d"])).trimEnd();
      await admin(["repo", "create", "model", "alice/bert"]);
      const client = { CASTOR_ENDPOINT: embedded.url, CASTOR_HUB_TOKEN: token };
      for (const args of [
        ["upload", "--repo", "model:alice/bert", "model.bin"],
        ["upload", "--repo", "model:alice/bert", "model.bin", "notes.txt", "--path", "weights"],
      ]) {
        const result = await runCastor(args, { env: client, cwd: work.dir, timeoutMs: 120_000 });
        assert.equal(result.code, 0, `castor ${args.join(" ")}: ${result.stderr}`);
      }
      Object.assign(walkthrough, { HF_TOKEN: token, CASTOR_HUB_TOKEN: token, HF_ENDPOINT: endpoint, CASTOR_ENDPOINT: endpoint });
    } finally {
      // "after stopping its server"
      await embedded.stop();
    }
  });

  after(async () => {
    await dropSectionStores();
    if (work !== undefined) await rm(work.dir, { recursive: true, force: true });
  });

  it("follows the documentation test's conventions", () => {
    assert.deepEqual(conventionProblems(blocks, PYTHON_VENVS), []);
  });

  it("every block runs, in order, and prints what the README shows; no node warns at start", async () => {
    const logs = async () =>
      (
        await Promise.all(
          ["node-1.log", "node-2.log", "nginx/error.log"].map(async (name) => {
            const text = await readFile(join(work!.dir, name), "utf8").catch(() => "(none)");
            return `--- ${name} (last lines) ---\n${text.trimEnd().split("\n").slice(-15).join("\n")}`;
          }),
        )
      ).join("\n");
    await runSection({
      blocks,
      cwd: work!.dir,
      env: { ...freshShellEnv(work!, SERVICE_VARIABLES), ...walkthrough },
      ports,
      venvDirs: {},
      timeoutMs: SESSION_TIMEOUT_MS,
    }).catch(async (error: Error) => {
      // The nodes' and nginx's logs say what the commands' output cannot.
      assert.fail(`${error.message}\n${await logs()}`);
    });
    // Started on the Node version CI tests, neither node may print a runtime warning (the AWS
    // SDK's notice about its future Node requirement among them).
    for (const name of ["node-1.log", "node-2.log"]) {
      const log = await readFile(join(work!.dir, name), "utf8");
      assert.doesNotMatch(log, /Warning/, `${name} warns:\n${log}`);
      assert.match(log, /castor listening on/, `${name} shows the node started`);
    }
  });
});
