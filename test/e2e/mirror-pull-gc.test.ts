/**
 * The mirror's admin commands against a real server and a test upstream: `castor mirror pull`
 * fetches a snapshot ahead of time (with --include), which is then served with the upstream
 * gone; `castor mirror list` shows it; `castor gc --mirror-unused` evicts mirrored files,
 * freeing the bytes only they used and never content a local repository's file uses.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";
import { startTestUpstream, type TestUpstream } from "../helpers/upstream-hub.js";

const MiB = 1024 * 1024;
const REPO = "model:org/pulled";

let upstream: TestUpstream;
let mirror: ServerProcess;
let work: string;
let reader = "";
let writer = "";
const a = randomBytes(4 * MiB);
const b = randomBytes(3 * MiB);
const readme = Buffer.from("# pulled\n");

async function castor(...args: string[]) {
  return runCastor(args, { env: mirror.settings, timeoutMs: 120_000 });
}

async function resolve(repo: string, path: string): Promise<Response> {
  const [, name] = repo.split(":");
  return fetch(`${mirror.url}/${name}/resolve/main/${path}`, { headers: { authorization: `Bearer ${reader}` } });
}

before(async () => {
  upstream = await startTestUpstream();
  await upstream.createRepo(REPO);
  await upstream.commit(REPO, [
    { path: "weights/a.bin", bytes: a },
    { path: "weights/b.bin", bytes: b },
    { path: "README.md", bytes: readme, storage: "inline" },
  ]);
  mirror = await startCastorServer({
    env: { CASTOR_UPSTREAM_URL: upstream.hubUrl, CASTOR_UPSTREAM_TOKEN: upstream.adminToken, CASTOR_UPSTREAM_REFRESH: "1s" },
  });
  const token = async (...args: string[]) => (await castor("token", "create", ...args)).stdout.trimEnd().split("\n").at(-1)!;
  reader = await token("--user", "alice", "--namespace", "alice", "--access", "read");
  writer = await token("--user", "alice", "--namespace", "alice", "--access", "write");
  work = await mkdtemp(join(tmpdir(), "castor-mirror-pull-"));
});

after(async () => {
  await mirror?.stop();
  await upstream?.stop();
  if (work !== undefined) await rm(work, { recursive: true, force: true });
});

describe("castor mirror pull, list, and gc's eviction", () => {
  it("pulls the files --include names, skipping what castor holds on a second run", async () => {
    const from = upstream.casBytes();
    const pulled = await castor("mirror", "pull", `${REPO}@main`, "--include", "weights/*", "--json");
    assert.equal(pulled.code, 0, pulled.stderr);
    const summary = JSON.parse(pulled.stdout) as { files: number; pulled: number; bytes: number; fetchedBytes: number };
    assert.deepEqual([summary.files, summary.pulled, summary.bytes], [2, 2, a.length + b.length]);
    const fetched = upstream.casBytes() - from;
    assert.ok(fetched >= (a.length + b.length) * 0.99 && fetched === summary.fetchedBytes, `fetched ${fetched}`);
    const again = await castor("mirror", "pull", REPO, "--include", "weights/*");
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /0 fetched .* 2 held already/);
    const fsck = await castor("fsck");
    assert.equal(fsck.code, 0, `castor fsck finds nothing wrong with mirrored content:\n${fsck.stdout}${fsck.stderr}`);
  });

  it("lists mirrored repositories with their revisions, the bytes held and their last use", async () => {
    const listed = await castor("mirror", "list", "--json");
    assert.equal(listed.code, 0, listed.stderr);
    const { repositories, totals } = JSON.parse(listed.stdout) as {
      repositories: { repo: string; revisions: { name: string }[]; files: number; bytes: number; lastUsed: string }[];
      totals: { files: number; bytes: number; fetchedBytes: number };
    };
    assert.equal(repositories.length, 1);
    assert.equal(repositories[0].repo, REPO);
    assert.deepEqual(
      repositories[0].revisions.map((r) => r.name),
      ["main"],
    );
    assert.deepEqual([repositories[0].files, repositories[0].bytes], [2, a.length + b.length]);
    assert.deepEqual(totals, { files: 2, bytes: a.length + b.length, fetchedBytes: totals.fetchedBytes });
    const table = await castor("mirror", "list");
    assert.match(table.stdout, /^REPOSITORY +REVISIONS +FILES +BYTES +LAST USED\nmodel:org\/pulled +main@[0-9a-f]{8} +2 +7\.0 MiB +\d{4}-/);
  });

  it("serves what was pulled once the upstream is gone, and answers 502 for the rest", async () => {
    upstream.stopUpstream();
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const served = await resolve(REPO, "weights/a.bin");
    assert.equal(served.status, 200);
    assert.ok(Buffer.from(await served.arrayBuffer()).equals(a));
    const notPulled = await resolve(REPO, "README.md");
    assert.equal(notPulled.status, 502);
  });

  it("evicts mirrored files with gc, freeing only what no local repository's file uses", async () => {
    // A local repository commits a.bin's very bytes: the file castor registered for the mirror.
    await castor("repo", "create", "model", "alice/local");
    const path = join(work, "a.bin");
    await writeFile(path, a);
    await new CastorClient({ endpoint: mirror.url, hubToken: writer, repo: "model:alice/local" }).uploadToRepo([path]);

    const gc = await castor("gc", "--grace", "0", "--mirror-unused", "0", "--json");
    assert.equal(gc.code, 0, gc.stderr);
    const report = JSON.parse(gc.stdout) as { evicted: { objects: number; bytes: number }; removed: { files: { objects: number }; xorbs: { bytes: number } } };
    assert.deepEqual(report.evicted, { objects: 2, bytes: a.length + b.length });
    assert.equal(report.removed.files.objects, 1, "b.bin's record; a.bin's stays, a local tree names it");
    assert.ok(report.removed.xorbs.bytes >= b.length * 0.99, `b.bin's bytes freed (${report.removed.xorbs.bytes})`);
    assert.ok(report.removed.xorbs.bytes < a.length, "a.bin's chunks stay");

    const local = await fetch(`${mirror.url}/alice/local/resolve/main/a.bin`, { headers: { authorization: `Bearer ${reader}` } });
    assert.ok(Buffer.from(await local.arrayBuffer()).equals(a), "the local file is whole");
    const stillMirrored = await resolve(REPO, "weights/a.bin");
    assert.ok(Buffer.from(await stillMirrored.arrayBuffer()).equals(a), "and the mirror still serves it from the local content");
    const evicted = await resolve(REPO, "weights/b.bin");
    assert.equal(evicted.status, 502, "evicted, and the upstream is away");

    upstream.startUpstream();
    const refetched = await resolve(REPO, "weights/b.bin");
    assert.ok(Buffer.from(await refetched.arrayBuffer()).equals(b), "fetched again once the upstream is back");
  });
});
