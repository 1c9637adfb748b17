/**
 * The upstream client (src/upstream/hub.ts) against a test upstream: a real castor behind a proxy
 * that answers as huggingface.co does (test/helpers/upstream-hub.ts). Repository info, tree pages
 * followed through `Link`, paths-info, refs, commits, the HEAD of a Xet file read off its
 * cross-host redirect, ranged GETs, the Xet read token, the Hub's refusals as error kinds, 429s
 * waited out or given up on, an upstream that does not answer, and castor's token going to the
 * upstream's hub only, never into a message.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { isUpstreamError, type UpstreamError } from "../../src/upstream/errors.js";
import { UpstreamHub } from "../../src/upstream/hub.js";
import { startTestUpstream, type TestUpstream } from "../helpers/upstream-hub.js";

const MiB = 1024 * 1024;
const PUBLIC = "model:org/public";
const PRIVATE = "model:org/private";
const repoOf = (ref: string) => ({ type: ref.split(":")[0] as "model", name: ref.split(":")[1] });

let upstream: TestUpstream;
let hub: UpstreamHub;
const weights = randomBytes(3 * MiB);
const readme = Buffer.from("# a model\n");
let first = "";
let second = "";

async function rejectsWith(promise: Promise<unknown>, kind: UpstreamError["kind"], code?: string | null): Promise<UpstreamError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(isUpstreamError(error), `expected an UpstreamError, got ${error}`);
    assert.equal(error.kind, kind, error.message);
    if (code !== undefined) assert.equal(error.code, code, error.message);
    assert.ok(!error.message.includes(upstream.adminToken), "the token never appears in a message");
    return error;
  }
  assert.fail("expected a rejection");
}

before(async () => {
  upstream = await startTestUpstream();
  await upstream.createRepo(PUBLIC);
  await upstream.createRepo(PRIVATE, { private: true });
  first = await upstream.commit(PUBLIC, [
    { path: "model.safetensors", bytes: weights },
    { path: "README.md", bytes: readme, storage: "inline" },
  ]);
  // A second commit with 1,050 small files: more than one tree page.
  second = await upstream.commit(
    PUBLIC,
    Array.from({ length: 1050 }, (_, i) => ({
      path: `many/f${String(i).padStart(4, "0")}.txt`,
      bytes: Buffer.from(`file ${i}\n`),
      storage: "inline" as const,
    })),
  );
  await upstream.createRevision(PUBLIC, "v1", first, "tag");
  hub = new UpstreamHub({ url: upstream.hubUrl, token: upstream.adminToken, retry: { baseDelayMs: 10 } });
});

after(async () => {
  await upstream?.stop();
});

describe("the upstream client", () => {
  it("reads repository info at the default branch and at a revision", async () => {
    const info = await hub.repoInfo(repoOf(PUBLIC));
    assert.equal(info.sha, second);
    assert.equal(info.private, false);
    assert.equal(info.gated, false);
    assert.ok(info.lastModified instanceof Date);
    assert.equal((await hub.repoInfo(repoOf(PUBLIC), "v1")).sha, first);
    assert.equal((await hub.repoInfo(repoOf(PRIVATE))).private, true, "castor's identity sees the private repository");
  });

  it("lists trees page after page through Link, folders included, and answers paths-info", async () => {
    const entries = [];
    for await (const entry of hub.listTree(repoOf(PUBLIC), second, { recursive: true })) entries.push(entry);
    const files = entries.filter((entry) => entry.type === "file");
    // 1,052 files committed, and the .gitattributes the upstream keeps covering its Xet file.
    assert.equal(files.length, 1053);
    assert.ok(files.some((entry) => entry.path === ".gitattributes"));
    assert.ok(entries.some((entry) => entry.type === "directory" && entry.path === "many"));
    const model = files.find((entry) => entry.path === "model.safetensors");
    assert.ok(model?.type === "file" && model.xetHash !== null && model.lfs?.size === weights.length);
    assert.equal(upstream.requests().filter((r) => r.path.includes("/tree/")).length >= 2, true, "more than one page was asked");

    const info = await hub.pathsInfo(repoOf(PUBLIC), second, ["README.md", "nope.txt", "many"], false);
    assert.deepEqual(
      info.map((entry) => [entry.type, entry.path]),
      [
        ["file", "README.md"],
        ["directory", "many"],
      ],
    );
  });

  it("lists refs and commits", async () => {
    const refs = await hub.refs(repoOf(PUBLIC));
    assert.deepEqual(refs.branches, [{ name: "main", commit: second }]);
    assert.deepEqual(refs.tags, [{ name: "v1", commit: first }]);
    const { commits } = await hub.commits(repoOf(PUBLIC), "main");
    assert.deepEqual(
      commits.slice(0, 2).map((commit) => commit.id),
      [second, first],
    );
  });

  it("reads a Xet file's metadata off the Hub's cross-host redirect, and an inline file's off a 200", async () => {
    const from = upstream.requests().length;
    const xet = await hub.fileMetadata(repoOf(PUBLIC), "main", "model.safetensors");
    assert.equal(xet.commit, second);
    assert.equal(xet.size, weights.length);
    assert.match(xet.xetHash ?? "", /^[0-9a-f]{64}$/);
    assert.equal(xet.etag.length, 64, "the SHA-256 of the X-Linked-Etag");
    assert.equal(xet.xetAuthUrl, `${upstream.hubUrl}/api/models/org/public/xet-read-token/${second}`);
    assert.deepEqual(
      upstream.requests(from).map((r) => [r.host, r.method, r.status]),
      [["hub", "HEAD", 302]],
      "the redirect is not followed",
    );
    const inline = await hub.fileMetadata(repoOf(PUBLIC), first, "README.md");
    assert.deepEqual(inline, {
      commit: first,
      etag: (await hub.pathsInfo(repoOf(PUBLIC), first, ["README.md"], false))[0].oid,
      size: readme.length,
      xetHash: null,
      xetAuthUrl: null,
    });
  });

  it("streams a file with Range, following the redirect without castor's token on the other host", async () => {
    const from = upstream.requests().length;
    const response = await hub.openFile(repoOf(PUBLIC), "main", "model.safetensors", { start: 1000, end: 1999 });
    assert.equal(response.status, 206);
    assert.deepEqual(Buffer.from(await response.arrayBuffer()), weights.subarray(1000, 2000));
    const requests = upstream.requests(from);
    assert.deepEqual(
      requests.map((r) => [r.host, r.hubToken]),
      [
        ["hub", true],
        ["cas", false],
      ],
    );
  });

  it("gets Xet read tokens for a commit, the CAS URL naming the other host", async () => {
    const cas = hub.cas(repoOf(PUBLIC), second);
    const credentials = await cas.tokens.get();
    assert.equal(credentials.casUrl, upstream.casUrl);
  });

  it("turns the Hub's refusals into error kinds with their codes", async () => {
    await rejectsWith(hub.repoInfo(repoOf("model:org/missing")), "not_found", "RepoNotFound");
    await rejectsWith(hub.repoInfo(repoOf(PUBLIC), "no-such-branch"), "not_found", "RevisionNotFound");
    await rejectsWith(hub.fileMetadata(repoOf(PUBLIC), "main", "nope.bin"), "not_found", "EntryNotFound");
    const anonymous = new UpstreamHub({ url: upstream.hubUrl, token: null });
    await rejectsWith(anonymous.repoInfo(repoOf(PRIVATE)), "not_found", "RepoNotFound");
    upstream.gate(PUBLIC, []);
    try {
      await rejectsWith(hub.fileMetadata(repoOf(PUBLIC), "main", "README.md"), "gated", "GatedRepo");
      await rejectsWith(anonymous.fileMetadata(repoOf(PUBLIC), "main", "README.md"), "gated", "GatedRepo");
      assert.equal((await hub.repoInfo(repoOf(PUBLIC))).gated, true);
    } finally {
      upstream.gate(PUBLIC, [upstream.adminToken]);
    }
    assert.equal((await hub.fileMetadata(repoOf(PUBLIC), "main", "README.md")).size, readme.length, "an approved token passes");
  });

  it("waits out a short Retry-After and gives up on a long one", async () => {
    const waits: number[] = [];
    const patient = new UpstreamHub({ url: upstream.hubUrl, token: upstream.adminToken, sleep: async (ms) => void waits.push(ms) });
    upstream.rateLimit(2, 1);
    assert.equal((await patient.repoInfo(repoOf(PUBLIC))).sha, second);
    assert.deepEqual(waits, [1000, 1000]);
    upstream.rateLimit(1, 3600);
    const error = await rejectsWith(patient.repoInfo(repoOf(PUBLIC)), "rate_limited");
    assert.equal(error.details.retryAfterMs, 3_600_000);
    assert.ok(error.isOutage);
  });

  it("answers promptly when the upstream does not answer or is stopped", async () => {
    const silent = http.createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const hung = new UpstreamHub({
        url: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`,
        token: "hf_secret",
        timeoutMs: 300,
        retry: { maxAttempts: 2, baseDelayMs: 10 },
      });
      const started = Date.now();
      const error = await rejectsWith(hung.repoInfo(repoOf(PUBLIC)), "timeout");
      assert.ok(Date.now() - started < 10_000, "well before any transport's own timeout");
      assert.ok(!error.message.includes("hf_secret"));
    } finally {
      silent.closeAllConnections();
      silent.close();
    }
    upstream.stopUpstream();
    try {
      const error = await rejectsWith(hub.repoInfo(repoOf(PUBLIC)), "unreachable");
      assert.ok(error.isOutage);
    } finally {
      upstream.startUpstream();
    }
  });
});
