/**
 * hf_xet 1.6.0 behaviours beyond a plain round trip, against a real `castor serve`: dedup of a
 * repeated upload (from the client's own cache and, on a fresh machine, through castor's global
 * dedup answer), token refresh through castor's token operation, and the V2 → V1 reconstruction
 * fallback against a server whose V2 answers 501 (castor's client falls back too; hf.js, V2-only
 * by design, must fail).
 *
 * A failing hf_xet run reports its stderr, the tail of its own log and castor's last requests;
 * RUST_LOG=debug makes hf_xet's log more detailed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import {
  assertSameBytes,
  castorClientDownload,
  interopSuite,
  hfJsDownload,
  MIB,
  pseudoRandomBytes,
  readBytes,
  writeTemp,
  type RecordedRequest,
} from "./harness.js";
import type { LoggedRequest } from "../helpers/server.js";

function describeRequests(lines: LoggedRequest[]): string {
  return lines.map((line) => `${line.method} ${line.path} → ${line.statusCode}`).join("\n");
}

describe("hf_xet against castor serve", () => {
  const suite = interopSuite("castor-interop-hfxet-files-");

  it("uploading the same 10 MiB again stores no new xorb, from the client's cache or through castor's global dedup", async () => {
    const bytes = pseudoRandomBytes("dedup: the same 10 MiB twice", 10 * MIB);
    const path = await writeTemp(suite.workDir, "twice.bin", bytes);
    const before = await suite.castor.countStoredXorbs();

    const first = await suite.hfxet.upload([path]);
    const afterFirst = await suite.castor.countStoredXorbs();
    assert.ok(afterFirst > before, "the first upload stores xorbs");

    const logFrom = suite.castor.server.logLines().length;
    const again = await suite.hfxet.upload([path]);
    assert.equal(again.files[0].hash, first.files[0].hash);
    assert.equal(await suite.castor.countStoredXorbs(), afterFirst, "a second upload from the same machine stores no new xorb");

    // A second machine knows nothing locally: hf_xet asks castor's global dedup for the file's
    // first chunk, gets the registering shard back and recognises every chunk.
    const elsewhere = await suite.hfxet.upload([path], { freshCache: true });
    assert.equal(elsewhere.files[0].hash, first.files[0].hash);
    assert.equal(await suite.castor.countStoredXorbs(), afterFirst, "an upload from a fresh cache stores no new xorb either");

    const requests = suite.castor.server.requestLog(logFrom);
    assert.ok(
      requests.some((line) => line.method === "GET" && line.path.startsWith("/v1/chunks/default/") && line.statusCode === 200),
      `the fresh client got a global dedup answer from castor; castor saw:\n${describeRequests(requests)}`,
    );
    assert.ok(
      !requests.some((line) => line.method === "POST" && line.path.startsWith("/v1/xorbs/")),
      `no xorb was even sent again; castor saw:\n${describeRequests(requests)}`,
    );

    const out = join(suite.workDir, "twice.out");
    await suite.hfxet.download([{ hash: first.files[0].hash, size: bytes.length, path: out }]);
    assertSameBytes(await readBytes(out), bytes, "download after the repeated uploads");
  });

  it("refreshes a token about to expire through castor's token operation, for uploads and downloads", async () => {
    const bytes = pseudoRandomBytes("token refresh", 300_000);
    const path = await writeTemp(suite.workDir, "refresh.bin", bytes);
    // hf_xet refreshes when exp ≤ now + 30 s: declaring the token as expiring now forces a
    // refresh before its first CAS request.
    const expiringNow = Math.floor(Date.now() / 1000);

    const logFrom = suite.castor.server.logLines().length;
    const uploaded = await suite.hfxet.upload([path], { declaredExp: expiringNow });
    assert.ok(uploaded.refreshes >= 1, `hf_xet called the refresher (${uploaded.refreshes} times)`);
    const out = join(suite.workDir, "refresh.out");
    const downloaded = await suite.hfxet.download([{ hash: uploaded.files[0].hash, size: bytes.length, path: out }], { declaredExp: expiringNow });
    assert.ok(downloaded.refreshes >= 1, `hf_xet called the refresher (${downloaded.refreshes} times)`);
    assertSameBytes(await readBytes(out), bytes, "download with a refreshed token");

    const tokenCalls = suite.castor.server.requestLog(logFrom).filter((line) => /^\/api\/models\/.+\/xet-(read|write)-token\/main$/.test(line.path));
    // One call per run is the harness fetching the initial token; the rest are the refresher's.
    assert.equal(tokenCalls.length, 2 + uploaded.refreshes + downloaded.refreshes);
    assert.ok(tokenCalls.every((line) => line.statusCode === 200));
  });
});

describe("castor serve with CASTOR_V2_RECONSTRUCTION=501", () => {
  const suite = interopSuite("castor-interop-v1-", { CASTOR_V2_RECONSTRUCTION: "501" });
  const bytes = pseudoRandomBytes("V1 fallback", MIB + 4321);
  let hash: string;

  before(async () => {
    const { files } = await suite.hfxet.upload([await writeTemp(suite.workDir, "v1.bin", bytes)]);
    hash = files[0].hash;
  });

  it("hf_xet falls back to V1 reconstruction and downloads byte-exact", async () => {
    const logFrom = suite.castor.server.logLines().length;
    const out = join(suite.workDir, "v1.out");
    await suite.hfxet.download([{ hash, size: bytes.length, path: out }]);
    assertSameBytes(await readBytes(out), bytes, "V1 download");

    const usedV1 = (line: LoggedRequest) => line.path === `/v1/reconstructions/${hash}` && line.statusCode === 200;
    const fetchedRange = (line: LoggedRequest) => line.method === "GET" && line.statusCode === 206;
    const requests = await suite.castor.server.waitForRequests(logFrom, (logged) => logged.some(usedV1) && logged.some(fetchedRange));
    const seen = describeRequests(requests);
    assert.ok(
      requests.some((line) => line.path === `/v2/reconstructions/${hash}` && line.statusCode === 501),
      `hf_xet tried V2 first:\n${seen}`,
    );
    assert.ok(requests.some(usedV1), `then used V1:\n${seen}`);
    assert.ok(requests.some(fetchedRange), `and fetched the transfer URLs it got:\n${seen}`);
  });

  it("castor's client falls back to V1 as well", async () => {
    const out = join(suite.workDir, "v1-castor.out");
    const result = await castorClientDownload(suite.castor, hash, out);
    assert.equal(result.reconstructionVersion, 1);
    assertSameBytes(await readBytes(out), bytes, "castor's client V1 download");
  });

  it("@huggingface/hub's XetBlob, which speaks V2 only, fails with castor's 501", async () => {
    const requests: RecordedRequest[] = [];
    await assert.rejects(hfJsDownload(suite.castor, { hash, size: bytes.length }, { requests }), (error: Error) => {
      assert.match(error.message, /V2 reconstruction is turned off/, "hf.js surfaces castor's error message");
      return true;
    });
    // Besides fetching its token: one V2 question, and nothing more — no V1 fallback, no transfer.
    assert.deepEqual(
      requests.filter((request) => request.url !== suite.castor.tokenUrl("read")).map((request) => [new URL(request.url).pathname, request.status]),
      [[`/v2/reconstructions/${hash}`, 501]],
    );
  });
});
