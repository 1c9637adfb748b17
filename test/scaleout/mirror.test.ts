/**
 * The mirror scaled out: the mirror's end-to-end suite (test/e2e/mirror-suite.ts) on PostgreSQL
 * and S3 with CASTOR_TRANSFER_MODE=presigned, then two `castor serve` nodes mirroring one test
 * upstream, sharing one PostgreSQL database, one S3 bucket prefix and their keys. Asked for the
 * same cold file at the same moment, the nodes fetch and store it once (one claims the fill, the
 * other waits for it); what one node mirrored the other serves without asking the upstream; a
 * client of one node's CAS reads a cold file's ranges from the other while the first fetches it;
 * refused corrupted bytes and gc's eviction work as on the embedded stores.
 *
 * Needs the services: `eval "$(scripts/services.sh start)"`, then `npm test -- test/scaleout`.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { runCastor } from "../helpers/cli.js";
import {
  createScaleOutBackend,
  listScaleOutXorbs,
  scaleOutUnavailable,
  startCastorServer,
  type ScaleOutBackend,
  type ServerProcess,
} from "../helpers/server.js";
import { startTestUpstream, type TestUpstream } from "../helpers/upstream-hub.js";
import { runMirrorSuite } from "../e2e/mirror-suite.js";

const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the scaled-out mirror tests need PostgreSQL and S3: ${unavailable}`);

// With presigned S3 GETs for stored xorbs: a cold file's ranges still come through castor.
runMirrorSuite("PostgreSQL and S3, presigned transfers", { scaleOut: true, env: { CASTOR_TRANSFER_MODE: "presigned" } });

const MiB = 1024 * 1024;
const REPO = "model:org/shared";

let upstream: TestUpstream;
let backend: ScaleOutBackend;
const nodes: ServerProcess[] = [];
let token = "";
let work: string;
const big = randomBytes(24 * MiB);
const other = randomBytes(6 * MiB);
const live = randomBytes(8 * MiB);

function resolve(node: ServerProcess, path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${node.url}/org/shared/resolve/main/${path}`, { ...init, headers: { ...init.headers, authorization: `Bearer ${token}` } });
}

before(async () => {
  upstream = await startTestUpstream();
  await upstream.createRepo(REPO);
  await upstream.commit(REPO, [
    { path: "big.bin", bytes: big },
    { path: "other.bin", bytes: other },
    { path: "corrupt.bin", bytes: randomBytes(3 * MiB) },
  ]);
  backend = await createScaleOutBackend();
  const env = { CASTOR_UPSTREAM_URL: upstream.hubUrl, CASTOR_UPSTREAM_TOKEN: upstream.adminToken, CASTOR_HUB_RATE_LIMIT: "off" };
  nodes.push(await startCastorServer({ scaleOut: backend, env }), await startCastorServer({ scaleOut: backend, env }));
  const created = await runCastor(["token", "create", "--user", "alice", "--all-repos", "--access", "read"], { env: nodes[0].settings });
  assert.equal(created.code, 0, created.stderr);
  token = created.stdout.trimEnd().split("\n").at(-1)!;
  work = await mkdtemp(join(tmpdir(), "castor-scaleout-mirror-"));
});

after(async () => {
  await Promise.all(nodes.map((node) => node.stop()));
  await backend?.cleanup();
  await upstream?.stop();
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

describe("the mirror on PostgreSQL and S3 with two nodes", () => {
  it("fetches and stores a cold file once when both nodes are asked for it at once", async () => {
    const from = upstream.casBytes();
    const [a, b] = await Promise.all(nodes.map(async (node) => Buffer.from(await (await resolve(node, "big.bin")).arrayBuffer())));
    assert.ok(a.equals(big) && b.equals(big), "both nodes answer the whole file");
    const fetched = upstream.casBytes() - from;
    assert.ok(fetched >= big.length * 0.99 && fetched <= big.length * 1.01, `one upstream fetch of ${big.length} bytes, not ${fetched}`);
    const xorbs = await listScaleOutXorbs(backend);
    assert.ok(xorbs.length > 0 && xorbs.every((xorb) => /^[0-9a-f]{64}$/.test(xorb.hex)), "whole xorbs only, under their hashes");
  });

  it("serves what one node mirrored from the other without asking the upstream, also through the CAS", async () => {
    const from = upstream.casBytes();
    const viaB = Buffer.from(await (await resolve(nodes[1], "big.bin")).arrayBuffer());
    assert.ok(viaB.equals(big));
    // A file node A fills for a client reading through castor's CAS, then read through node B's.
    await new CastorClient({ endpoint: nodes[0].url, hubToken: token, repo: REPO }).downloadFile({ path: "other.bin", output: join(work, "a.bin") });
    const fetchedOther = upstream.casBytes() - from;
    await new CastorClient({ endpoint: nodes[1].url, hubToken: token, repo: REPO }).downloadFile({ path: "other.bin", output: join(work, "b.bin") });
    assert.ok((await readFile(join(work, "b.bin"))).equals(other));
    assert.equal(upstream.casBytes() - from, fetchedOther, "node B fetched nothing");
    assert.ok(fetchedOther >= other.length * 0.99 && fetchedOther <= other.length * 1.01);
  });

  it("lets a client of one node's CAS read a cold file's ranges from the other node while the first fetches it", async () => {
    const commit = await upstream.commit(REPO, [{ path: "live.bin", bytes: live }], { message: "live" });
    const from = upstream.casBytes();
    const fromB = nodes[1].logLines().length;
    // Node A answers the reconstruction (and fetches the file); its transfer URLs go to node B.
    const viaB: typeof fetch = (input, init) =>
      fetch(typeof input === "string" && input.startsWith(`${nodes[0].url}/v1/transfer/`) ? nodes[1].url + input.slice(nodes[0].url.length) : input, init);
    const client = new CastorClient({ endpoint: nodes[0].url, hubToken: token, repo: REPO, revision: commit, fetch: viaB });
    await client.downloadFile({ path: "live.bin", output: join(work, "live.bin") });
    assert.ok((await readFile(join(work, "live.bin"))).equals(live));
    const transfers = await nodes[1].waitForRequests(fromB, (requests) => requests.some((r) => r.path.startsWith("/v1/transfer/")));
    assert.ok(
      transfers.some((r) => r.path.startsWith("/v1/transfer/") && r.statusCode === 206),
      "node B served the ranges",
    );
    const fetched = upstream.casBytes() - from;
    assert.ok(fetched >= live.length * 0.99 && fetched <= live.length * 1.01, `one upstream fetch, not ${fetched} bytes`);
  });

  it("refuses corrupted bytes, storing nothing as that file", async () => {
    upstream.corrupt(true);
    try {
      const response = await resolve(nodes[0], "corrupt.bin");
      if (response.status === 200) await assert.rejects(response.arrayBuffer(), "cut short, never completed");
      else assert.equal(response.status, 502);
    } finally {
      upstream.corrupt(false);
    }
    const listed = await runCastor(["mirror", "list", "--json"], { env: nodes[1].settings });
    const { totals } = JSON.parse(listed.stdout) as { totals: { files: number } };
    assert.equal(totals.files, 3, "big.bin, other.bin and live.bin only");
  });

  it("evicts mirrored files with gc on the shared stores", async () => {
    const gc = await runCastor(["gc", "--grace", "0", "--mirror-unused", "0", "--json"], { env: nodes[0].settings, timeoutMs: 120_000 });
    assert.equal(gc.code, 0, gc.stderr);
    const report = JSON.parse(gc.stdout) as { evicted: { objects: number; bytes: number }; removed: { xorbs: { bytes: number } } };
    assert.deepEqual(report.evicted, { objects: 3, bytes: big.length + other.length + live.length });
    assert.ok(report.removed.xorbs.bytes >= (big.length + other.length + live.length) * 0.99, `their bytes freed (${report.removed.xorbs.bytes})`);
    const from = upstream.casBytes();
    assert.ok(Buffer.from(await (await resolve(nodes[1], "other.bin")).arrayBuffer()).equals(other));
    assert.ok(upstream.casBytes() - from >= other.length * 0.99, "fetched again after the eviction");
  });
});
