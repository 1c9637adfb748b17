/**
 * castor's client re-uploading against a real server: the whole-file check
 * (`HEAD /v1/files/{id}`), the local shard cache (a near-duplicate, a re-run after an upload
 * cut before its shard), and the fallback when the cache names xorbs the server does not have.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient, type FetchFunction } from "../../src/client/index.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";

const MiB = 1024 * 1024;
const REPO = "model:alice/bert";

let server: ServerProcess;
let other: ServerProcess;
let hubToken: string;
let otherToken: string;
let work: string;

async function prepare(target: ServerProcess): Promise<string> {
  const env = { CASTOR_DATA_DIR: target.dataDir };
  assert.equal((await runCastor(["repo", "create", "model", "alice/bert"], { env })).code, 0);
  const token = await runCastor(["token", "create", "--repo", REPO, "--access", "write"], { env });
  assert.equal(token.code, 0, token.stderr);
  return token.stdout.trim();
}

function client(target: ServerProcess, token: string, fetch?: FetchFunction): CastorClient {
  return new CastorClient({ endpoint: target.url, hubToken: token, repo: REPO, fetch });
}

before(async () => {
  [server, other] = await Promise.all([startCastorServer(), startCastorServer()]);
  [hubToken, otherToken] = await Promise.all([prepare(server), prepare(other)]);
  work = await mkdtemp(join(tmpdir(), "castor-client-cache-"));
});

after(async () => {
  await Promise.all([server?.stop(), other?.stop()]);
  if (work) await rm(work, { recursive: true, force: true });
});

async function download(target: ServerProcess, token: string, fileHash: string): Promise<Buffer> {
  const out = join(work, `out-${randomBytes(4).toString("hex")}`);
  await client(target, token).download({ fileHash, output: out });
  const data = await readFile(out);
  await rm(out);
  return data;
}

describe("re-uploads with the local shard cache", () => {
  const size = 40 * MiB;
  const original = randomBytes(size);
  let cacheDir: string;

  before(async () => {
    cacheDir = join(work, "cache");
    await writeFile(join(work, "original.bin"), original);
  });

  it("sends nothing for a file the repository has, with or without the cache, asking HEAD /v1/files first", async () => {
    const first = await client(server, hubToken).upload([join(work, "original.bin")], { cacheDir });
    assert.equal(first.files[0].newBytes, size);
    assert.equal(first.cache.enabled, true);
    assert.ok((await readdir(join(cacheDir, "shards-v1"))).length === 1, "one server folder");

    // The server logs a request just after answering it: wait for the shard's line before counting from here.
    await server.waitForRequests(0, (list) => list.some((r) => r.method === "POST" && r.path === "/v1/shards"));
    const from = server.logLines().length;
    for (const dir of [cacheDir, null]) {
      const again = await client(server, hubToken).upload([join(work, "original.bin")], { cacheDir: dir });
      assert.equal(again.files[0].alreadyStored, true);
      assert.equal(again.files[0].fileHash, first.files[0].fileHash);
      assert.equal(again.files[0].sha256, first.files[0].sha256);
      assert.equal(again.xorbs.bytesSent, 0);
      assert.equal(again.shards.sent, 0);
    }
    const requests = await server.waitForRequests(from, (list) => list.filter((r) => r.method === "HEAD").length >= 2);
    const heads = requests.filter((r) => r.method === "HEAD" && r.path.startsWith("/v1/files/"));
    assert.deepEqual(
      heads.map((r) => r.statusCode),
      [200, 200],
    );
    assert.ok(!requests.some((r) => r.method === "POST"), "no xorb, no shard");
  });

  it("sends little more than the changed MiB of a copy edited in the middle; without the cache, global dedup finds far less", async () => {
    const edited = Buffer.from(original);
    randomBytes(MiB).copy(edited, 20 * MiB);
    await writeFile(join(work, "edited.bin"), edited);
    const withCache = await client(server, hubToken).upload([join(work, "edited.bin")], { cacheDir });
    assert.equal(withCache.files[0].alreadyStored, false);
    assert.ok(withCache.cache.hits >= 1);
    assert.ok(withCache.xorbs.bytesSent < 0.05 * size, `sent ${withCache.xorbs.bytesSent} of ${size}`);
    assert.ok(withCache.files[0].newBytes < 0.05 * size);
    assert.ok((await download(server, hubToken, withCache.files[0].fileHash)).equals(edited));

    const otherEdit = Buffer.from(original);
    randomBytes(MiB).copy(otherEdit, 20 * MiB);
    await writeFile(join(work, "edited-2.bin"), otherEdit);
    const withoutCache = await client(server, hubToken).upload([join(work, "edited-2.bin")], { cacheDir: null });
    assert.ok(
      withoutCache.xorbs.bytesSent > 4 * withCache.xorbs.bytesSent,
      `global dedup alone: ${withoutCache.xorbs.bytesSent} sent, with the cache ${withCache.xorbs.bytesSent}`,
    );
  });

  it("re-runs an upload cut before its shard without sending a xorb again", async () => {
    const data = randomBytes(30 * MiB);
    await writeFile(join(work, "cut.bin"), data);
    // The first run dies when it registers (as a Ctrl-C after the xorbs would): its xorbs are stored, the file is not.
    const cutting: FetchFunction = async (input, init) => {
      if (String(input).endsWith("/v1/shards")) throw new TypeError("fetch failed: connection reset by the test");
      return fetch(input, init);
    };
    await assert.rejects(client(server, hubToken, cutting).upload([join(work, "cut.bin")], { cacheDir }), /connection reset by the test/);
    const rerun = await client(server, hubToken).upload([join(work, "cut.bin")], { cacheDir });
    assert.equal(rerun.xorbs.bytesSent, 0, "every xorb came from the cache");
    assert.equal(rerun.files[0].newBytes, 0);
    assert.equal(rerun.shards.registered, 1);
    assert.ok((await download(server, hubToken, rerun.files[0].fileHash)).equals(data));
  });

  it("clears a stale cache and uploads again when the server refuses a shard naming xorbs it does not have", async () => {
    // The other server never saw these xorbs: give it this server's cache, as if it had lost them (castor gc).
    const casId = (url: string) => createHash("sha256").update(url).digest("hex").slice(0, 16);
    const stale = join(work, "stale-cache");
    await cp(join(cacheDir, "shards-v1", casId(server.publicUrl)), join(stale, "shards-v1", casId(other.publicUrl)), { recursive: true });
    const result = await client(other, otherToken).upload([join(work, "original.bin")], { cacheDir: stale });
    assert.equal(result.cache.retriedAfterStale, true);
    assert.equal(result.files[0].newBytes, size);
    assert.equal(result.shards.registered, 1);
    assert.ok((await download(other, otherToken, result.files[0].fileHash)).equals(original));
    // The cache now describes what the other server holds: a repeat sends nothing.
    const again = await client(other, otherToken).upload([join(work, "original.bin")], { cacheDir: stale });
    assert.equal(again.cache.retriedAfterStale, false);
    assert.equal(again.xorbs.bytesSent, 0);
  });

  it("stays within its size bound, least recently used shards first", async () => {
    const bounded = join(work, "bounded");
    const data = randomBytes(8 * MiB);
    await writeFile(join(work, "small.bin"), data);
    await client(server, hubToken).upload([join(work, "small.bin")], { cacheDir: bounded, cacheMaxBytes: 1 });
    const shards = await readdir(join(bounded, "shards-v1", (await readdir(join(bounded, "shards-v1")))[0], "shards"));
    assert.deepEqual(shards, [], "everything over the 1-byte bound was evicted");
  });
});
