/**
 * Storage statistics (src/hub/stats.ts) on content uploaded through a real app: two
 * repositories sharing a Xet file and an inline file, tags and branches, a second version of a
 * file, a deletion; expected numbers come from the xorb objects in the blob store (parsed) and
 * the bytes uploaded. Then `GET /api/stats` (401 / 403 / 400 / 200), `castor stats`, and the
 * daily samples on a clock the tests turn: one per UTC day, the server's timer, its gauges.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { buffer } from "node:stream/consumers";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { validateXorb } from "../../src/format/xorb.js";
import {
  computeStorageStats,
  DailyStatsSampler,
  msUntilNextUtcDay,
  StorageStatsService,
  storageStatsJson,
  utcDay,
  type LiveContent,
  type RepoStorage,
  type StatsStore,
} from "../../src/hub/stats.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import type { Repo, StatsSample, StorageTotals } from "../../src/metadata/store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { startTestApp, type TestApp } from "../helpers/app.js";
import { runCastor } from "../helpers/cli.js";
import { withTempDir } from "../helpers/temp-dir.js";
import { until, within } from "../helpers/wait.js";

const SHARED = randomBytes(300_000);
const ONLY_A = randomBytes(200_000);
const NOTES = Buffer.from("notes both repositories hold\n");
const NOTES_V2 = Buffer.from("notes, a second version, on the dev branch only\n");

/** What some xorb objects take in the blob store: how many, their bytes, their chunks. */
interface Objects {
  count: number;
  bytes: number;
  chunks: number;
}

/** Live content as the expectations build it: files with their sizes, xorb objects, inline blobs. */
function content(files: readonly Buffer[], objects: readonly Objects[], inline: readonly Buffer[]): LiveContent {
  const inlineBytes = inline.reduce((sum, blob) => sum + blob.length, 0);
  const xorbBytes = objects.reduce((sum, o) => sum + o.bytes, 0);
  return {
    files: files.length,
    logicalBytes: files.reduce((sum, file) => sum + file.length, 0),
    storedBytes: xorbBytes + inlineBytes,
    xorbs: objects.reduce((sum, o) => sum + o.count, 0),
    chunks: objects.reduce((sum, o) => sum + o.chunks, 0),
    inlineBlobs: inline.length,
    inlineBytes,
  };
}

describe("storage statistics of uploaded content", () => {
  let castor: TestApp;
  let blobs: FsBlobStore;
  let work: string;
  const tokens = { admin: "", repoA: "", readAll: "" };
  let repoA: Repo;
  /** The xorb objects each upload added to the blob store. */
  let sharedObjects: Objects;
  let onlyAObjects: Objects;

  /** Every xorb object in the blob store, read back and parsed: key → bytes and chunks. */
  async function xorbObjects(): Promise<Map<string, { bytes: number; chunks: number }>> {
    const found = new Map<string, { bytes: number; chunks: number }>();
    for await (const key of blobs.list("xorbs/")) {
      const body = await buffer(await blobs.read(key));
      found.set(key, { bytes: body.length, chunks: validateXorb(body).chunks.length });
    }
    return found;
  }

  /** Runs `upload` and sums the xorb objects it added. */
  async function objectsAddedBy(upload: () => Promise<unknown>): Promise<Objects> {
    const before = await xorbObjects();
    await upload();
    const added = [...(await xorbObjects())].filter(([key]) => !before.has(key)).map(([, object]) => object);
    return { count: added.length, bytes: added.reduce((sum, o) => sum + o.bytes, 0), chunks: added.reduce((sum, o) => sum + o.chunks, 0) };
  }

  function client(repo: string, revision?: string): CastorClient {
    return new CastorClient({ endpoint: castor.url, hubToken: tokens.admin, repo, revision });
  }

  async function uploadFile(repo: string, name: string, data: Buffer): Promise<void> {
    const path = join(work, name);
    await writeFile(path, data);
    await client(repo).uploadToRepo([path], { message: `Add ${name}` });
  }

  async function commitInline(repo: string, path: string, data: Buffer, revision?: string): Promise<void> {
    await client(repo, revision).commit({ summary: `Write ${path}`, operations: [{ kind: "file", path, content: data }] });
  }

  /**
   * The statistics now, checked against the expected content of each repository and in total;
   * every xorb object stored stays recorded whatever happens to the files.
   */
  async function assertStats(a: LiveContent, b: LiveContent, total: LiveContent): Promise<void> {
    const recorded = [sharedObjects, onlyAObjects];
    const stats = await computeStorageStats(castor.store);
    const expected: RepoStorage[] = [
      { type: "model", name: "alice/a", ...a },
      { type: "dataset", name: "bob/b", ...b },
    ];
    assert.deepEqual(stats.repositories, expected);
    const totals: StorageTotals = {
      repositories: 2,
      ...total,
      recordedXorbs: recorded.reduce((sum, o) => sum + o.count, 0),
      recordedXorbBytes: recorded.reduce((sum, o) => sum + o.bytes, 0),
      recordedChunks: recorded.reduce((sum, o) => sum + o.chunks, 0),
    };
    assert.deepEqual(stats.totals, totals);
  }

  before(async () => {
    castor = await startTestApp({ name: "stats" });
    blobs = await FsBlobStore.open(join(castor.dataDir, "blobs"));
    work = join(castor.dataDir, "work");
    await mkdir(work);
    repoA = await castor.hub.createRepo("model", "alice/a");
    await castor.hub.createRepo("dataset", "bob/b");
    tokens.admin = (await castor.hub.createToken({ repos: "all", access: "write", expiresAt: null })).secret;
    tokens.repoA = (await castor.hub.createToken({ repos: ["model:alice/a"], access: "write", expiresAt: null })).secret;
    tokens.readAll = (await castor.hub.createToken({ repos: "all", access: "read", expiresAt: null })).secret;

    sharedObjects = await objectsAddedBy(() => uploadFile("model:alice/a", "shared.bin", SHARED));
    onlyAObjects = await objectsAddedBy(() => uploadFile("model:alice/a", "only-a.bin", ONLY_A));
    const sharedAgain = await objectsAddedBy(() => uploadFile("dataset:bob/b", "shared.bin", SHARED));
    assert.equal(sharedAgain.count, 0, "the second upload of the shared file stored no xorb");
    assert.ok(sharedObjects.count >= 1 && onlyAObjects.count >= 1);
    await commitInline("model:alice/a", "notes.txt", NOTES);
    await commitInline("dataset:bob/b", "docs/notes.txt", NOTES);
    // Refs at the same heads: their files are the ones main has, counted once.
    await castor.hub.createRevision("model:alice/a", "v1", "tag");
    await castor.hub.createRevision("dataset:bob/b", "dev", "branch");
  });

  after(async () => {
    await castor?.close();
  });

  it("counts shared content in each repository's logical bytes and once in the stored total", async () => {
    await assertStats(
      content([SHARED, ONLY_A, NOTES], [sharedObjects, onlyAObjects], [NOTES]),
      content([SHARED, NOTES], [sharedObjects], [NOTES]),
      content([SHARED, ONLY_A, NOTES, SHARED, NOTES], [sharedObjects, onlyAObjects], [NOTES]),
    );
    const json = storageStatsJson(await computeStorageStats(castor.store), []);
    assert.equal(json.totals.dedupRatio, (2 * SHARED.length + ONLY_A.length + 2 * NOTES.length) / (sharedObjects.bytes + onlyAObjects.bytes + NOTES.length));
    assert.equal(json.repositories[1].dedupRatio, (SHARED.length + NOTES.length) / (sharedObjects.bytes + NOTES.length));
    assert.equal(json.totals.unreferencedXorbBytes, 0, "every recorded xorb is live");
  });

  it("counts another version of a file separately, on any branch", async () => {
    await commitInline("dataset:bob/b", "docs/notes.txt", NOTES_V2, "dev");
    await assertStats(
      content([SHARED, ONLY_A, NOTES], [sharedObjects, onlyAObjects], [NOTES]),
      content([SHARED, NOTES, NOTES_V2], [sharedObjects], [NOTES, NOTES_V2]),
      content([SHARED, ONLY_A, NOTES, SHARED, NOTES, NOTES_V2], [sharedObjects, onlyAObjects], [NOTES, NOTES_V2]),
    );
  });

  it("stops counting a deleted file once no branch or tag holds it; its xorbs stay recorded, unreferenced", async () => {
    await client("model:alice/a").commit({ summary: "Drop only-a.bin", operations: [{ kind: "deletedFile", path: "only-a.bin" }] });
    const b = content([SHARED, NOTES, NOTES_V2], [sharedObjects], [NOTES, NOTES_V2]);
    // The tag v1 still holds it.
    await assertStats(
      content([SHARED, ONLY_A, NOTES], [sharedObjects, onlyAObjects], [NOTES]),
      b,
      content([SHARED, ONLY_A, NOTES, SHARED, NOTES, NOTES_V2], [sharedObjects, onlyAObjects], [NOTES, NOTES_V2]),
    );

    assert.equal(await castor.store.deleteRevision(repoA.id, "v1"), true);
    await assertStats(
      content([SHARED, NOTES], [sharedObjects], [NOTES]),
      b,
      content([SHARED, NOTES, SHARED, NOTES, NOTES_V2], [sharedObjects], [NOTES, NOTES_V2]),
    );
    const json = storageStatsJson(await computeStorageStats(castor.store), []).totals;
    assert.equal(json.unreferencedXorbBytes, onlyAObjects.bytes, "the deleted file's xorbs are what a collection could reclaim");
  });

  describe("GET /api/stats", () => {
    const get = (query = "", token?: string) =>
      fetch(`${castor.url}/api/stats${query}`, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });

    it("answers 401 without a token or with an unknown one, 403 for tokens that are not admin tokens", async () => {
      for (const [token, status] of [
        [undefined, 401],
        ["hf_unknown", 401],
        [tokens.repoA, 403],
        [tokens.readAll, 403],
      ] as const) {
        const response = await get("", token);
        assert.equal(response.status, status, `token ${token}`);
        const body = (await response.json()) as { error: string };
        assert.match(body.error, status === 403 ? /--all-repos --access write/ : /token/);
      }
    });

    it("answers 400 for a malformed ?history=", async () => {
      for (const query of ["?history=abc", "?history=-1", "?history=1.5", "?history=99999999", "?history=1&history=2"]) {
        const response = await get(query, tokens.admin);
        assert.equal(response.status, 400, query);
        assert.match(((await response.json()) as { error: string }).error, /history/);
      }
    });

    it("answers an admin token with the statistics and the daily samples, the day's first computation kept", async () => {
      const response = await get("", tokens.admin);
      assert.equal(response.status, 200);
      assert.equal(response.headers.get("cache-control"), "no-store");
      const body = (await response.json()) as ReturnType<typeof storageStatsJson>;
      const expected = storageStatsJson(await computeStorageStats(castor.store), []);
      assert.deepEqual(body.totals, expected.totals);
      assert.deepEqual(body.repositories, expected.repositories);
      assert.deepEqual(
        body.history.map((sample) => sample.day),
        [utcDay(new Date(body.takenAt))],
      );
      const { day: _day, takenAt: _takenAt, ...sampled } = body.history[0];
      assert.deepEqual(sampled, expected.totals);

      const none = (await (await get("?history=0", tokens.admin)).json()) as ReturnType<typeof storageStatsJson>;
      assert.deepEqual(none.history, []);
    });
  });

  describe("castor stats", () => {
    const castorStats = (...args: string[]) => runCastor(["stats", ...args], { env: { CASTOR_DATA_DIR: castor.dataDir } });

    it("prints the statistics as JSON, as the API answers them", async () => {
      const result = await castorStats("--json");
      assert.equal(result.code, 0, result.stderr);
      const body = JSON.parse(result.stdout) as ReturnType<typeof storageStatsJson>;
      const expected = storageStatsJson(await computeStorageStats(castor.store), await castor.store.listStatsSamples());
      assert.deepEqual(body.totals, expected.totals);
      assert.deepEqual(body.repositories, expected.repositories);
      assert.deepEqual(body.history, expected.history, "the API took today's sample: kept");
    });

    it("prints a table per repository with a total, and the daily samples with --history", async () => {
      const { totals } = await computeStorageStats(castor.store);
      const table = await castorStats();
      assert.equal(table.code, 0, table.stderr);
      assert.match(table.stdout, /^REPOSITORY +FILES +LOGICAL +STORED +DEDUP +XORBS +CHUNKS +INLINE$/m);
      assert.match(table.stdout, /^model:alice\/a +2 +\S+ \S+ +\S+ \S+ +\d+\.\d\d +\d+ +\d+ +1$/m);
      assert.match(table.stdout, new RegExp(`^total +${totals.files} .* ${totals.inlineBlobs}$`, "m"));
      assert.match(table.stdout, new RegExp(`^All recorded xorbs: ${totals.recordedXorbs} `, "m"));

      const history = await castorStats("--history");
      assert.equal(history.code, 0, history.stderr);
      assert.match(history.stdout, /^DAY +REPOS +FILES +LOGICAL +STORED +DEDUP +XORBS +CHUNKS +RECORDED +UNREFERENCED\n\d{4}-\d\d-\d\d +2 +5 +/);
      assert.equal(history.stdout.trimEnd().split("\n").length, 2, "one sample: today's");
    });

    it("exits 2 on a bad command line", async () => {
      for (const args of [["--bogus"], ["extra"], ["--history=yes"]]) {
        const result = await castorStats(...args);
        assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
        assert.match(result.stderr, /^castor stats: .*\nRun 'castor stats --help' for usage\.\n$/);
      }
    });
  });
});

describe("daily storage statistics samples", () => {
  /** Runs `body` on a fresh SQLite store, closed and removed afterwards. */
  const withStore = (body: (store: SqliteMetadataStore) => Promise<void>) =>
    withTempDir("castor-stats-samples-", async (dir) => {
      const store = await SqliteMetadataStore.open(dir);
      try {
        await body(store);
      } finally {
        await store.close();
      }
    });

  it("keeps one sample per UTC day: the first computation of the day", async () => {
    await withStore(async (store) => {
      let now = new Date("2030-01-01T10:00:00Z");
      const service = new StorageStatsService(store, { now: () => now });
      const first = await service.sampleToday();
      assert.deepEqual([first.day, first.takenAt, first.repositories], ["2030-01-01", now, 0]);

      await store.createRepo("model", "alice/later");
      now = new Date("2030-01-01T23:59:59.999Z");
      assert.deepEqual(await service.sampleToday(), first, "the day has its sample");
      assert.equal((await service.measure()).totals.repositories, 1, "a later computation counts the new repository…");
      assert.deepEqual(await service.history(), [first], "…but does not replace the day's sample");

      now = new Date("2030-01-02T00:00:00Z");
      const second = await service.sampleToday();
      assert.deepEqual([second.day, second.repositories], ["2030-01-02", 1]);
      assert.deepEqual(await service.history(), [first, second]);
      assert.deepEqual(await service.history(1), [second]);
    });
  });

  it("waits until the next UTC midnight", () => {
    assert.equal(msUntilNextUtcDay(new Date("2030-01-01T00:00:00Z")), 24 * 3600 * 1000);
    assert.equal(msUntilNextUtcDay(new Date("2030-01-01T23:59:59.999Z")), 1);
    assert.equal(msUntilNextUtcDay(new Date("2030-12-31T12:00:00Z")), 12 * 3600 * 1000);
  });

  it("the daily sampler samples at its start and after midnight, until stopped", async () => {
    await withStore(async (store) => {
      // A clock 300 ms before midnight that runs as fast as the real one.
      const start = Date.now();
      const base = Date.parse("2030-01-01T23:59:59.700Z");
      const now = () => new Date(base + Date.now() - start);
      const samples: StatsSample[] = [];
      let secondSample: () => void = () => undefined;
      const twoSamples = new Promise<void>((resolve) => (secondSample = resolve));
      const sampler = new DailyStatsSampler(new StorageStatsService(store, { now }), {
        now,
        onSample: (sample) => {
          samples.push(sample);
          if (samples.length === 2) secondSample();
        },
        onError: (error) => assert.fail(String(error)),
      });
      sampler.start();
      await within(twoSamples, "the samples of two days", 10_000);
      await sampler.stop();
      await sampler.stop();
      assert.deepEqual(
        samples.map((sample) => sample.day),
        ["2030-01-01", "2030-01-02"],
      );
      assert.deepEqual(await store.listStatsSamples(), samples);
    });
  });

  it("stop() abandons a sample in progress: nothing is recorded, no error is reported", async () => {
    await withStore(async (store) => {
      let release: () => void = () => undefined;
      const released = new Promise<void>((resolve) => (release = resolve));
      let listed: () => void = () => undefined;
      const walking = new Promise<void>((resolve) => (listed = resolve));
      // The walk's first query waits until the test lets it go, after stop() was called.
      const slow: StatsStore = Object.assign(Object.create(store) as SqliteMetadataStore, {
        listRepos: async () => {
          listed();
          await released;
          return store.listRepos();
        },
      });
      const errors: unknown[] = [];
      const sampler = new DailyStatsSampler(new StorageStatsService(slow), { onError: (error) => errors.push(error) });
      sampler.start();
      await within(walking, "the walk to start");
      const stopped = sampler.stop();
      release();
      await within(stopped, "stop()");
      assert.deepEqual(await store.listStatsSamples(), []);
      assert.deepEqual(errors, []);
    });
  });

  it("does not keep a process alive", async () => {
    await withTempDir("castor-stats-alive-", async (dir) => {
      const child = spawn(
        process.execPath,
        ["--import", import.meta.resolve("tsx"), fileURLToPath(new URL("./stats-sampler-child.ts", import.meta.url)), dir],
        {
          stdio: ["ignore", "pipe", "pipe"],
          timeout: 20_000,
        },
      );
      const output: Buffer[] = [];
      child.stdout.on("data", (chunk: Buffer) => output.push(chunk));
      child.stderr.on("data", (chunk: Buffer) => output.push(chunk));
      const code = await new Promise((resolve) => child.once("close", resolve));
      assert.equal(code, 0, Buffer.concat(output).toString());
      assert.match(Buffer.concat(output).toString(), /^sampled \d{4}-\d\d-\d\d\n$/);
    });
  });

  it("sets the server's Prometheus gauges from the day's sample", async () => {
    const castor = await startTestApp({ name: "stats-gauges", storageStats: { dailySamples: true } });
    try {
      const gauge = async (name: string): Promise<number> => {
        const text = await (await fetch(`${castor.url}/metrics`)).text();
        const line = text.split("\n").find((l) => l.startsWith(`${name} `));
        return Number(line?.split(" ")[1] ?? Number.NaN);
      };
      await until(async () => (await gauge("castor_storage_sample_timestamp_seconds")) > 0, "the start-up sample", 10_000, 50);
      const [sample] = await castor.store.listStatsSamples();
      assert.equal(await gauge("castor_storage_sample_timestamp_seconds"), sample.takenAt.getTime() / 1000);
      assert.equal(await gauge("castor_storage_logical_bytes"), sample.logicalBytes);
      assert.equal(await gauge("castor_storage_stored_bytes"), sample.storedBytes);
      assert.equal(await gauge("castor_storage_recorded_xorb_bytes"), sample.recordedXorbBytes);
    } finally {
      await castor.close();
    }
  });
});
