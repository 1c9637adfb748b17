/**
 * The hub on the scale-out deployment: two castor nodes on one PostgreSQL database and one S3
 * bucket, behind a round-robin proxy whose URL is the public URL. The real `hf` CLI
 * (huggingface_hub 2.0.0 + hf_xet 1.6.0) creates a repository, uploads a 12 MiB file (through
 * Xet) and a small text file (inline), and downloads both from a fresh machine, while requests
 * land on both nodes; then plain HTTP reads the Xet-stored file reconstructed from S3.
 */
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { assertSameBytes, MIB, pseudoRandomBytes, readBytes } from "../interop/harness.js";
import { clientEnv, lastJson, PYTHON_VENVS, pythonVenv, removeDir, runOk, tempDir, USER, venvScript, type HubServer } from "../interop/hub-clients.js";
import { runCastor } from "../helpers/cli.js";
import { startProxy, type TestProxy } from "../helpers/proxy.js";
import { createScaleOutBackend, scaleOutUnavailable, startCastorServer, type ScaleOutBackend, type ServerProcess } from "../helpers/server.js";

const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the scale-out hub tests need PostgreSQL and S3: ${unavailable}`);

const REQUIREMENTS = PYTHON_VENVS["hub-cli"];
const REPO_ID = `${USER}/scaled`;

let backend: ScaleOutBackend;
let proxy: TestProxy;
const nodes: ServerProcess[] = [];
let hub: HubServer;
let hf: string;
let work: string;

before(async () => {
  backend = await createScaleOutBackend();
  proxy = await startProxy();
  for (const name of ["a", "b"]) {
    const node = await startCastorServer({ scaleOut: backend, env: { CASTOR_PUBLIC_URL: proxy.url } });
    nodes.push(node);
    proxy.setUpstream(name, node.url);
  }
  const created = await runCastor(["token", "create", "--user", USER, "--namespace", USER, "--access", "write"], { env: nodes[0].settings });
  assert.equal(created.code, 0, created.stderr);
  const token = created.stdout.trimEnd().split("\n").at(-1)!;
  hub = {
    server: nodes[0],
    endpoint: proxy.url,
    token,
    countStoredXorbs: () => Promise.reject(new Error("not used")),
    adminCreateRepo: () => Promise.reject(new Error("not used")),
    diagnostics: () => nodes.map((node) => node.logLines().slice(-20).join("\n")).join("\n---\n"),
    stop: async () => {},
  };
  hf = venvScript(await pythonVenv("hub-cli", REQUIREMENTS), "hf");
  work = await tempDir("castor-scaleout-hub-");
});

after(async () => {
  await proxy?.close();
  await Promise.all(nodes.map((node) => node.stop()));
  await backend?.cleanup();
  await removeDir(work);
});

describe("hf upload and hf download through two nodes on PostgreSQL + S3", () => {
  const big = pseudoRandomBytes("scale-out hub: 12 MiB", 12 * MIB);
  const small = Buffer.from("a small text file, stored inline by the hub\n");

  it("hf repos create, hf upload of a Xet file and an inline file", async () => {
    const env = clientEnv(hub, join(work, "uploader"));
    await runOk(hub, "hf repos create", hf, ["repos", "create", REPO_ID, "--private"], { env });
    await writeFile(join(work, "big.bin"), big);
    await writeFile(join(work, "small.txt"), small);
    await runOk(hub, "hf upload big.bin", hf, ["upload", REPO_ID, join(work, "big.bin")], { env });
    await runOk(hub, "hf upload small.txt", hf, ["upload", REPO_ID, join(work, "small.txt")], { env });
  });

  it("hf download from a fresh machine, byte-exact; both nodes served the clients", async () => {
    const env = clientEnv(hub, join(work, "downloader"));
    for (const [name, bytes] of [
      ["big.bin", big],
      ["small.txt", small],
    ] as const) {
      const result = lastJson<{ path: string }>(await runOk(hub, `hf download ${name}`, hf, ["download", REPO_ID, name, "--format", "json"], { env }));
      assertSameBytes(await readBytes(result.path), bytes, `hf download ${name}`);
    }
    const servedBy = new Set(proxy.requests().map((request) => request.nodes.at(-1)));
    assert.ok(servedBy.has("a") && servedBy.has("b"), `requests went to both nodes (served by: ${[...servedBy].join(", ")})`);
  });

  it("plain HTTP resolve reconstructs the Xet file from S3 on either node, whole and ranged", async () => {
    for (const node of nodes) {
      const whole = await fetch(`${node.url}/${REPO_ID}/resolve/main/big.bin`, { headers: { authorization: `Bearer ${hub.token}` } });
      assert.equal(whole.status, 200);
      assertSameBytes(new Uint8Array(await whole.arrayBuffer()), big, "resolve GET of big.bin");
      const part = await fetch(`${node.url}/${REPO_ID}/resolve/main/big.bin`, {
        headers: { authorization: `Bearer ${hub.token}`, range: "bytes=5000000-6999999" },
      });
      assert.equal(part.status, 206);
      assertSameBytes(new Uint8Array(await part.arrayBuffer()), big.subarray(5_000_000, 7_000_000), "ranged resolve GET of big.bin");
    }
  });
});
