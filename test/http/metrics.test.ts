/**
 * `GET /metrics` on a real app: requests are counted under their route pattern (`unmatched` for
 * unknown paths) and never under a raw path, hash or repository name; uploads, dedup queries and
 * token requests have their own counters; the answer is the Prometheus text format;
 * CASTOR_METRICS_TOKEN gates it and CASTOR_METRICS=off removes it.
 */
import assert from "node:assert/strict";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import parsePrometheusTextFormat, { type PrometheusFamily } from "parse-prometheus-text-format";
import { ConfigError, loadConfig } from "../../src/config.js";
import { hashToHex } from "../../src/format/hash.js";
import { REFUSAL_REASONS } from "../../src/metrics.js";
import { startTestApp, type TestApp } from "../helpers/app.js";
import { casTokenSignedWith } from "../helpers/fixtures.js";
import { counterValue, families } from "../helpers/metrics.js";
import { fromHex, loadVector } from "../helpers/vectors.js";
import { until } from "../helpers/wait.js";

const HASH_64_HEX = /[0-9a-f]{64}/i;
const XORB_ROUTE = "/v1/xorbs/:prefix/:hash";
const PROMETHEUS_TEXT = /^text\/plain; version=0\.0\.4; charset=utf-8$/;

async function scrape(url: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${url}/metrics`, { headers });
}

/** The value of the exposition line `name{labels…}` whose labels include `labels`. */
function rawValue(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split("\n")) {
    const match = /^([a-z_]+)\{(.*)\} (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries([...match[2].matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) return Number(match[3]);
  }
  return undefined;
}

describe("GET /metrics, open (the default)", () => {
  let castor: TestApp;
  const keys = generateKeyPairSync("ed25519");
  const vector = loadVector("xorb-small.json");
  const xorbHex: string = vector.expected.xorb_hash;
  const xorbBody = fromHex(vector.body_hex);
  const shardVector = loadVector("shard-upload-small.json");
  let parsed: Map<string, PrometheusFamily>;
  /** Terms of the file whose reconstruction is asked for. */
  let terms = 0;
  let scrapeResponse: Response;
  let scrapeText: string;

  before(async () => {
    castor = await startTestApp({ name: "metrics", keys });
    const { url } = castor;
    for (let i = 0; i < 2; i++) assert.equal((await fetch(`${url}/healthz`)).status, 200);
    assert.equal((await fetch(`${url}/no/such/${xorbHex}`)).status, 404);
    // No CAS token: refused by the CAS scope, counted under the route's pattern.
    assert.equal((await fetch(`${url}/v1/xorbs/default/${xorbHex}`, { method: "POST", body: xorbBody })).status, 401);
    const write = await casTokenSignedWith(keys.privateKey, "write");
    const stored = await fetch(`${url}/v1/xorbs/default/${xorbHex}`, { method: "POST", body: xorbBody, headers: { authorization: `Bearer ${write}` } });
    assert.equal(stored.status, 200, await stored.text());
    const miss = await fetch(`${url}/v1/chunks/default-merkledb/${"ab".repeat(32)}`, { headers: { authorization: `Bearer ${write}` } });
    assert.equal(miss.status, 404);
    // A shard over the stored xorb, then a dedup query for one of the chunks it indexed.
    await castor.store.createRepo("model", "alice/bert");
    const shard = await fetch(`${url}/v1/shards`, {
      method: "POST",
      body: fromHex(shardVector.xet_core_style_hex),
      headers: { authorization: `Bearer ${write}` },
    });
    assert.equal(shard.status, 200, await shard.text());
    const [indexed] = (await castor.store.scanDedupEntries(null, 1)).rows;
    const hit = await fetch(`${url}/v1/chunks/default-merkledb/${hashToHex(indexed.chunkHash)}`, { headers: { authorization: `Bearer ${write}` } });
    assert.equal(hit.status, 200);
    const [file] = (await castor.store.scanFiles(null, 1)).rows;
    terms = file.terms.length;
    const read = await casTokenSignedWith(keys.privateKey, "read");
    const reconstruction = await fetch(`${url}/v2/reconstructions/${hashToHex(file.hash)}`, { headers: { authorization: `Bearer ${read}` } });
    assert.equal(reconstruction.status, 200, await reconstruction.text());
    // The last gc and fsck, as their commands record them.
    const at = new Date("2026-11-26T12:00:00Z");
    await castor.store.recordMaintenanceRun({
      kind: "gc",
      startedAt: at,
      finishedAt: new Date(at.getTime() + 5000),
      totals: { xorbs: 3, reclaimed_bytes: 1234 },
    });
    await castor.store.recordMaintenanceRun({ kind: "fsck", startedAt: at, finishedAt: at, totals: { problems: 0 } });
    // An unknown hub token: the token operation denies it.
    const denied = await fetch(`${url}/api/models/alice/bert/xet-read-token/main`, { headers: { authorization: "Bearer hf_nope" } });
    assert.equal(denied.status, 401);

    scrapeResponse = await scrape(url);
    assert.equal(scrapeResponse.status, 200);
    scrapeText = await scrapeResponse.text();
    parsed = new Map(parsePrometheusTextFormat(scrapeText).map((family) => [family.name, family]));
  });

  after(async () => {
    await castor?.close();
  });

  it("answers in the Prometheus text format, uncached", () => {
    assert.match(scrapeResponse.headers.get("content-type") ?? "", PROMETHEUS_TEXT);
    assert.equal(scrapeResponse.headers.get("cache-control"), "no-store");
  });

  it("counts requests by method, route pattern and status", () => {
    const requests = parsed.get("castor_http_requests_total");
    assert.equal(requests?.type, "COUNTER");
    assert.equal(counterValue(requests, { method: "GET", route: "/healthz", status: "200" }), 2);
    assert.equal(counterValue(requests, { method: "GET", route: "unmatched", status: "404" }), 1);
    assert.equal(counterValue(requests, { method: "POST", route: XORB_ROUTE, status: "401" }), 1);
    assert.equal(counterValue(requests, { method: "POST", route: XORB_ROUTE, status: "200" }), 1);
    assert.equal(counterValue(requests, { method: "GET", route: "/v1/chunks/:prefix/:hash", status: "404" }), 1);
  });

  it("times requests in a histogram by status class", () => {
    assert.equal(parsed.get("castor_http_request_duration_seconds")?.type, "HISTOGRAM");
    // The parser folds a histogram's label sets into one, so its lines are read here.
    const healthz = { method: "GET", route: "/healthz", status_class: "2xx" };
    assert.equal(rawValue(scrapeText, "castor_http_request_duration_seconds_count", healthz), 2);
    assert.equal(rawValue(scrapeText, "castor_http_request_duration_seconds_bucket", { ...healthz, le: "+Inf" }), 2);
    assert.equal(rawValue(scrapeText, "castor_http_request_duration_seconds_count", { method: "POST", route: XORB_ROUTE, status_class: "4xx" }), 1);
  });

  it("counts request bytes announced by Content-Length", () => {
    // The refused upload and the stored one each announced the whole body.
    assert.equal(counterValue(parsed.get("castor_http_request_bytes_total"), { method: "POST", route: XORB_ROUTE }), 2 * xorbBody.length);
    assert.ok(counterValue(parsed.get("castor_http_response_bytes_total"), { method: "GET", route: "/healthz" }) > 0);
  });

  it("counts xorb ingests, dedup queries and token requests by outcome", () => {
    assert.equal(counterValue(parsed.get("castor_xorb_ingests_total"), { outcome: "stored" }), 1);
    assert.equal(counterValue(parsed.get("castor_dedup_queries_total"), { result: "miss" }), 1);
    assert.equal(counterValue(parsed.get("castor_dedup_queries_total"), { result: "hit" }), 1);
    assert.equal(counterValue(parsed.get("castor_token_requests_total"), { outcome: "denied" }), 1);
    assert.equal(counterValue(parsed.get("castor_shard_registrations_total"), { outcome: "registered" }), 1);
  });

  it("times xorb ingests and shard registrations, and counts terms per reconstruction answer", () => {
    // From the text: the parser keeps no labels of histogram samples.
    const histogram = (name: string, labels: Record<string, string>) => ({
      count: rawValue(scrapeText, `${name}_count`, labels),
      sum: rawValue(scrapeText, `${name}_sum`, labels),
    });
    assert.equal(histogram("castor_xorb_ingest_seconds", { outcome: "stored" }).count, 1);
    assert.ok(histogram("castor_xorb_ingest_seconds", { outcome: "stored" }).sum! > 0);
    assert.equal(histogram("castor_shard_registration_seconds", { outcome: "registered" }).count, 1);
    assert.deepEqual(histogram("castor_reconstruction_terms", { version: "v2" }), { count: 1, sum: terms });
  });

  it("shows the last gc and fsck runs recorded in the store", () => {
    const times = parsed.get("castor_maintenance_last_run_timestamp_seconds");
    assert.equal(counterValue(times, { command: "gc" }), Date.parse("2026-11-26T12:00:05Z") / 1000);
    assert.equal(counterValue(times, { command: "fsck" }), Date.parse("2026-11-26T12:00:00Z") / 1000);
    const totals = parsed.get("castor_maintenance_last_run_total");
    assert.equal(counterValue(totals, { command: "gc", total: "xorbs" }), 3);
    assert.equal(counterValue(totals, { command: "gc", total: "reclaimed_bytes" }), 1234);
    assert.equal(counterValue(totals, { command: "fsck", total: "problems" }), 0);
  });

  it("puts no hash, raw path or repository name in any label", () => {
    for (const family of parsed.values()) {
      for (const metric of family.metrics) {
        for (const value of Object.values(metric.labels ?? {})) {
          assert.doesNotMatch(value, HASH_64_HEX, `${family.name} label ${value}`);
          assert.ok(!value.includes("alice") && !value.includes("/no/such"), `${family.name} label ${value}`);
        }
      }
    }
  });

  it("shows every refusal reason from the start, at 0 while nothing was refused", () => {
    const refusals = parsed.get("castor_refusals_total");
    assert.equal(refusals?.type, "COUNTER");
    assert.deepEqual(refusals.metrics.map((m) => m.labels?.reason).sort(), [...REFUSAL_REASONS].sort());
    for (const reason of REFUSAL_REASONS) assert.equal(counterValue(refusals, { reason }), 0, reason);
  });

  it("includes the process metrics (memory, event-loop lag)", () => {
    assert.ok(parsed.has("process_resident_memory_bytes"));
    assert.ok(parsed.has("nodejs_eventloop_lag_seconds"));
  });

  it("counts its own scrapes, and each app counts only its own requests", async () => {
    const other = await startTestApp({ name: "metrics-other" });
    try {
      const otherRequests = (await families(other.url)).get("castor_http_requests_total");
      assert.equal(counterValue(otherRequests, { method: "GET", route: "/healthz", status: "200" }), 0);
      const again = (await families(castor.url)).get("castor_http_requests_total");
      assert.ok(counterValue(again, { method: "GET", route: "/metrics", status: "200" }) >= 1);
      assert.equal(counterValue(again, { method: "GET", route: "/healthz", status: "200" }), 2);
    } finally {
      await other.close();
    }
  });
});

/**
 * Response bytes are the body bytes written, not the Content-Length announced: HEAD answers of a
 * file announce its size and send nothing; a range sends the range; a download the client
 * abandons sends less than it announced.
 */
describe("castor_http_response_bytes_total", () => {
  const RESOLVE = "/:namespace/:name/resolve/*";
  const WEIGHTS = randomBytes(24 * 1024 * 1024);
  const NOTES = Buffer.from("an inline file\n");
  let castor: TestApp;
  let work: string;
  let token: string;

  const responseBytes = async (method: string) =>
    counterValue((await families(castor.url)).get("castor_http_response_bytes_total"), { method, route: RESOLVE });

  before(async () => {
    castor = await startTestApp({ name: "metrics-bytes", inlineMaxBytes: 1024 });
    work = await mkdtemp(join(tmpdir(), "castor-metrics-bytes-"));
    token = (await castor.hub.createToken({ repos: "all", access: "write", expiresAt: null, owner: "root" })).secret;
    await castor.hub.createRepo("model", "alice/bert", { private: false });
    const weights = join(work, "weights.bin");
    await writeFile(weights, WEIGHTS);
    const client = new CastorClient({ endpoint: castor.url, hubToken: token, repo: "model:alice/bert" });
    await client.uploadToRepo([weights], { message: "Add the weights" });
    await client.commit({ summary: "Add notes", operations: [{ kind: "file", path: "notes.txt", content: NOTES }] });
  });

  after(async () => {
    await castor?.close();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("counts nothing for HEAD answers, whatever Content-Length they announce", async () => {
    for (const path of ["weights.bin", "notes.txt"]) {
      const head = await fetch(`${castor.url}/alice/bert/resolve/main/${path}`, { method: "HEAD" });
      assert.equal(head.status, 200);
      assert.ok(Number(head.headers.get("content-length")) > 0);
    }
    assert.equal(await responseBytes("HEAD"), 0);
  });

  it("counts the bytes of whole files, of ranges, of Xet and inline files as sent", async () => {
    const before = await responseBytes("GET");
    const whole = await fetch(`${castor.url}/alice/bert/resolve/main/weights.bin`);
    assert.ok(Buffer.from(await whole.arrayBuffer()).equals(WEIGHTS));
    const range = await fetch(`${castor.url}/alice/bert/resolve/main/weights.bin`, { headers: { range: "bytes=1000-1999" } });
    assert.equal(range.status, 206);
    assert.equal((await range.arrayBuffer()).byteLength, 1000);
    const notes = await fetch(`${castor.url}/alice/bert/resolve/main/notes.txt`);
    assert.equal(await notes.text(), NOTES.toString());
    assert.equal((await responseBytes("GET")) - before, WEIGHTS.length + 1000 + NOTES.length);
  });

  it("counts what was written before a client abandoned a download, not its Content-Length", async () => {
    const before = await responseBytes("GET");
    // Read the first bytes, then close the connection: castor stops writing.
    await new Promise<void>((resolve, reject) => {
      const request = httpRequest(`${castor.url}/alice/bert/resolve/main/weights.bin`, (response) => {
        response.once("data", () => {
          request.destroy();
          resolve();
        });
      });
      request.on("error", (error) => (request.destroyed ? undefined : reject(error)));
      request.end();
    });
    // The request is counted once castor has seen the connection close.
    await until(async () => (await responseBytes("GET")) > before, "the abandoned download to be counted");
    const sent = (await responseBytes("GET")) - before;
    assert.ok(sent > 0 && sent < WEIGHTS.length, `${sent} bytes counted of a ${WEIGHTS.length}-byte file abandoned after its first bytes`);
  });
});

describe("GET /metrics with CASTOR_METRICS_TOKEN", () => {
  const token = "scrape-secret-0123456789";
  let castor: TestApp;
  const logLines: string[] = [];

  before(async () => {
    castor = await startTestApp({ name: "metrics-token", metrics: { enabled: true, token }, logLines: (line) => logLines.push(line) });
  });

  after(async () => {
    await castor?.close();
  });

  it("refuses a scrape without the token or with another one (401), serves one with it", async () => {
    const missing = await scrape(castor.url);
    assert.equal(missing.status, 401);
    assert.match(missing.headers.get("www-authenticate") ?? "", /^Bearer /);
    assert.equal((await scrape(castor.url, { authorization: "Bearer not-the-token" })).status, 401);
    const granted = await scrape(castor.url, { authorization: `Bearer ${token}` });
    assert.equal(granted.status, 200);
    assert.match(granted.headers.get("content-type") ?? "", PROMETHEUS_TEXT);
    const requests = new Map(parsePrometheusTextFormat(await granted.text()).map((family) => [family.name, family])).get("castor_http_requests_total");
    assert.equal(counterValue(requests, { method: "GET", route: "/metrics", status: "401" }), 2);
  });

  it("never logs the token", () => {
    assert.ok(logLines.length > 0);
    for (const line of logLines) assert.ok(!line.includes(token), line);
  });
});

describe("CASTOR_METRICS=off", () => {
  let castor: TestApp;

  before(async () => {
    castor = await startTestApp({ name: "metrics-off", metrics: { enabled: false, token: null } });
  });

  after(async () => {
    await castor?.close();
  });

  it("serves no /metrics (404)", async () => {
    assert.equal((await scrape(castor.url)).status, 404);
  });
});

describe("CASTOR_METRICS and CASTOR_METRICS_TOKEN", () => {
  it("serve /metrics without a token by default", () => {
    const config = loadConfig({});
    assert.equal(config.metrics, true);
    assert.equal(config.metricsToken, null);
  });

  it("read on/off and the token from the environment, the flags winning", () => {
    assert.equal(loadConfig({ CASTOR_METRICS: "off" }).metrics, false);
    assert.equal(loadConfig({ CASTOR_METRICS: "off" }, { metrics: "on" }).metrics, true);
    assert.equal(loadConfig({ CASTOR_METRICS_TOKEN: "from-env" }, { "metrics-token": "from-flag" }).metricsToken, "from-flag");
  });

  it("refuse anything but on or off", () => {
    assert.throws(() => loadConfig({ CASTOR_METRICS: "yes" }), ConfigError);
  });
});
