/**
 * CastorClient across CAS token expiry, against the whole castor app in-process on a clock the
 * test turns: the server's tokens expire for the server (it refuses them) and for the client
 * at the same moment, without waiting for them to run out. (test/e2e/client.test.ts drives a
 * real `castor serve` process, whose clock the test cannot turn.)
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { startTestApp, type TestApp } from "../helpers/app.js";

const TOKEN_TTL_SECONDS = 60;
const REPO = "model:alice/bert";

/** How far the server's and the client's clocks are ahead of the real one. */
const skew = { server: 0, client: 0 };
const serverNow = () => new Date(Date.now() + skew.server);
const clientNow = () => Date.now() + skew.client;

let castor: TestApp;
let dataDir: string;
let endpoint: string;
let hubToken: string;
/** The status of every request the app answered, in order (its one log line per request). */
const answered: number[] = [];

before(async () => {
  castor = await startTestApp({
    name: "token-expiry",
    logLines: (line) => {
      const entry = JSON.parse(line) as { msg?: string; statusCode?: number };
      if (entry.msg === "request" && entry.statusCode !== undefined) answered.push(entry.statusCode);
    },
    tokenTtlSeconds: TOKEN_TTL_SECONDS,
    now: serverNow,
  });
  ({ dataDir, url: endpoint } = castor);
  await castor.hub.createRepo("model", "alice/bert");
  hubToken = (await castor.hub.createToken({ repos: [REPO], access: "write", expiresAt: null })).secret;
});

after(async () => {
  await castor?.close();
});

/** A CAS token straight from the hub's token operation. */
async function casToken(access: "read" | "write"): Promise<string> {
  const response = await fetch(`${endpoint}/api/models/alice/bert/xet-${access}-token/main`, { headers: { authorization: `Bearer ${hubToken}` } });
  assert.equal(response.status, 200);
  return ((await response.json()) as { accessToken: string }).accessToken;
}

/** The status the CAS answers `token` with, on a route that needs a read token. */
async function casStatusFor(token: string): Promise<number> {
  const response = await fetch(`${endpoint}/v1/reconstructions/${"00".repeat(32)}`, { headers: { authorization: `Bearer ${token}` } });
  await response.arrayBuffer();
  return response.status;
}

async function roundTrip(session: CastorClient, name: string): Promise<void> {
  const path = join(dataDir, name);
  const data = randomBytes(200_000);
  await writeFile(path, data);
  const uploaded = await session.upload([path]);
  const out = `${path}.out`;
  const result = await session.download({ fileHash: uploaded.files[0].fileHash, output: out });
  assert.ok((await readFile(out)).equals(data));
  assert.equal(result.verified, "file-hash");
}

describe("CastorClient when its CAS tokens expire", () => {
  it("keeps working after its tokens really expired: the CAS refuses them, the client fetches new ones", async () => {
    skew.server = skew.client = 0;
    const session = new CastorClient({ endpoint, hubToken, repo: REPO, now: clientNow });
    await roundTrip(session, "before-expiry");
    assert.deepEqual([session.tokenRequests("write"), session.tokenRequests("read")], [1, 1]);
    const earlier = await casToken("read");
    assert.equal(await casStatusFor(earlier), 404, "a fresh token is accepted (the file does not exist)");

    // Both clocks move past every token's exp.
    skew.server = skew.client = (TOKEN_TTL_SECONDS + 1) * 1000;
    assert.equal(await casStatusFor(earlier), 401, "the tokens of before are expired for the server");
    const from = answered.length;
    await roundTrip(session, "after-expiry");
    assert.deepEqual([session.tokenRequests("write"), session.tokenRequests("read")], [2, 2], "one new token per access");
    assert.ok(!answered.slice(from).includes(401), "the client renewed them before use: the CAS refused none of its requests");
  });

  it("recovers when the CAS refuses a token the client's clock still deems valid (clock skew)", async () => {
    skew.server = skew.client = 0;
    const session = new CastorClient({ endpoint, hubToken, repo: REPO, now: clientNow });
    await roundTrip(session, "before-skew");
    assert.deepEqual([session.tokenRequests("write"), session.tokenRequests("read")], [1, 1]);

    // Only the server's clock moves past exp: the client learns of the expiry from a 401.
    skew.server = (TOKEN_TTL_SECONDS + 1) * 1000;
    const from = answered.length;
    await roundTrip(session, "after-skew");
    assert.deepEqual([session.tokenRequests("write"), session.tokenRequests("read")], [2, 2], "one new token per access");
    assert.ok(answered.slice(from).includes(401), "the client learnt of the expiry from the CAS");
  });
});
