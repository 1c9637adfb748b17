/**
 * The budget of shard registrations (CASTOR_SHARD_MEMORY_BUDGET, CASTOR_SHARD_ADMISSION_WAIT)
 * against a real `castor serve`: concurrent uploads of a large shard get 200, or 503 with
 * Retry-After and a JSON reason when they found no room in time — never a crash — and the
 * refused ones register when sent again. Before the budget, any number of large shards were
 * registered at once; eight of 340,000 files exhausted the heap and killed the process.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { oneChunkFilesShard, storeSyntheticXorbs } from "../helpers/synthetic-xorbs.js";
import { refusals } from "../helpers/metrics.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../helpers/server.js";

/** Long enough to take a few tenths of a second to register on any machine (~3 MB). */
const FILES = 20_000;
const UPLOADS = 4;

let dataDir: string;
let shard: Uint8Array;
let server: ServerProcess;
let token: string;

before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "castor-shard-budget-"));
  shard = oneChunkFilesShard(await storeSyntheticXorbs(dataDir, FILES / 1000, 1000, 65_536), FILES);
  server = await startCastorServer({
    dataDir,
    // A budget of one byte: every registration is larger than it, so they run one at a time,
    // and one waiting more than 0.1 s is refused.
    env: { CASTOR_SHARD_MEMORY_BUDGET: "1", CASTOR_SHARD_ADMISSION_WAIT: "0.1" },
  });
  const fixture = await hubFixture(server, { repoType: "model", repoName: "alice/budget" });
  token = (await fixture.casToken("write")).accessToken;
});

after(async () => {
  await server?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

interface Answer {
  path: string;
  status: number;
  retryAfter: string | null;
  /** The error of a refusal, or the terminal frame / JSON of a 200. */
  body: Record<string, unknown>;
}

async function upload(path: string): Promise<Answer> {
  const response = await fetch(`${server.url}${path}`, { method: "POST", body: shard, headers: { authorization: `Bearer ${token}` } });
  const text = await response.text();
  const lines = text.trim().split("\n");
  // /v2/shards answers NDJSON: its last line is the terminal frame.
  const body = JSON.parse(response.status === 200 && path === "/v2/shards" ? lines[lines.length - 1] : text) as Record<string, unknown>;
  return { path, status: response.status, retryAfter: response.headers.get("retry-after"), body };
}

describe("the budget of shard registrations (real server)", () => {
  it("answers concurrent large shards 200, or 503 with Retry-After when they find no room in time, and stays up", async () => {
    const refusedBefore = await refusals(server.url, "shard_budget");
    const answers = await Promise.all(Array.from({ length: UPLOADS }, (_, i) => upload(i % 2 === 0 ? "/v1/shards" : "/v2/shards")));

    const accepted = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 503);
    assert.equal(accepted.length + refused.length, UPLOADS, `every answer is 200 or 503: ${JSON.stringify(answers)}`);
    assert.ok(accepted.length >= 1, "the first registration runs");
    assert.ok(refused.length >= 1, `the others waited 0.1 s at most, behind a registration of ${FILES} files: ${JSON.stringify(answers.map((a) => a.status))}`);
    for (const answer of accepted) {
      assert.ok(answer.body.result === 0 || answer.body.result === 1, JSON.stringify(answer));
      if (answer.path === "/v2/shards") assert.equal(answer.body.type, "result");
    }
    for (const answer of refused) {
      assert.equal(answer.retryAfter, "10");
      assert.match(String(answer.body.error), /registering as many shards as its budget allows .* did not get its turn in time: upload it again in 10 s/);
    }
    assert.equal(server.child.exitCode, null, "the server is alive");
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
    assert.equal((await refusals(server.url, "shard_budget")) - refusedBefore, refused.length, "castor_refusals_total counts each 503");

    // Sent again one at a time, the refused uploads register (the shard is known by now: 0).
    for (const answer of refused) {
      const again = await upload(answer.path);
      assert.equal(again.status, 200, JSON.stringify(again));
      assert.equal(again.body.result, 0);
    }
  });
});
