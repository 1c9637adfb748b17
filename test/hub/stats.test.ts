/**
 * Storage statistics (src/hub/stats.ts) on content uploaded through a real app: two
 * repositories sharing a Xet file and an inline file, tags and branches, a second version of a
 * file, a deletion; expected numbers come from the xorb objects in the blob store (parsed) and
 * the bytes uploaded. Then `GET /api/stats` (401 / 403 / 400 / 200), `castor stats`, and the
 * samples on a clock the tests turn: one per UTC day (its last measurement), the server's
 * sampler at start-up, after changes and after midnight, its gauges.
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
  msUntilNextUtcDay,
  sampleOf,
  StorageStatsService,
  storageStatsJson,
  utcDay,
  type LiveContent,
  type RepoStorage,
  type StatsStore,
} from "../../src/hub/stats.js";
import { StatsSampler } from "../../src/hub/stats-sampler.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import type { Repo, StatsSample, StorageTotals } from "../../src/metadata/store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { startTestApp, type TestApp } from "../helpers/app.js";
import { runCastor } from "../helpers/cli.js";
import { withTempDir } from "../helpers/temp-dir.js";
import { settlesWithin, until, within } from "../helpers/wait.js";

const SHARED = randomBytes(300_000);
const ONLY_A = randomBytes(200_000);
const NOTES = Buffer.from("notes both repositories hold\n");
const NOTES_V2 = Buffer.from("notes, a second version, on the dev branch only\n");
/** The .gitattributes the hub keeps covering each repository's Xet files, as it writes them. */
const attributes = (...paths: string[]) => Buffer.from(paths.map((path) => `${path} filter=lfs diff=lfs merge=lfs -text\n`).join(""));
const A_ATTRIBUTES = attributes("shared.bin", "only-a.bin");
const B_ATTRIBUTES = attributes("shared.bin");

/** What some xorb objects take in the blob store: how many, their bytes, their chunks' bytes before compression, their chunks. */
interface Objects {
  count: number;
  bytes: number;
  uncompressed: number;
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
    uniqueBytes: objects.reduce((sum, o) => sum + o.uncompressed, 0) + inlineBytes,
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
  async function xorbObjects(): Promise<Map<string, { bytes: number; uncompressed: number; chunks: number }>> {
    const found = new Map<string, { bytes: number; uncompressed: number; chunks: number }>();
    for await (const key of blobs.list("xorbs/")) {
      const body = await buffer(await blobs.read(key));
      const xorb = validateXorb(body);
      found.set(key, { bytes: body.length, uncompressed: xorb.uncompressedLength, chunks: xorb.chunks.length });
    }
    return found;
  }

  /** Runs `upload` and sums the xorb objects it added. */
  async function objectsAddedBy(upload: () => Promise<unknown>): Promise<Objects> {
    const before = await xorbObjects();
    await upload();
    const added = [...(await xorbObjects())].filter(([key]) => !before.has(key)).map(([, object]) => object);
    const sum = (field: "bytes" | "uncompressed" | "chunks") => added.reduce((total, object) => total + object[field], 0);
    return { count: added.length, bytes: sum("bytes"), uncompressed: sum("uncompressed"), chunks: sum("chunks") };
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
      content([SHARED, ONLY_A, NOTES, A_ATTRIBUTES], [sharedObjects, onlyAObjects], [NOTES, A_ATTRIBUTES]),
      content([SHARED, NOTES, B_ATTRIBUTES], [sharedObjects], [NOTES, B_ATTRIBUTES]),
      content([SHARED, ONLY_A, NOTES, A_ATTRIBUTES, SHARED, NOTES, B_ATTRIBUTES], [sharedObjects, onlyAObjects], [NOTES, A_ATTRIBUTES, B_ATTRIBUTES]),
    );
    const json = storageStatsJson(await computeStorageStats(castor.store), []);
    const attributeBytes = A_ATTRIBUTES.length + B_ATTRIBUTES.length;
    const unique = sharedObjects.uncompressed + onlyAObjects.uncompressed + NOTES.length + attributeBytes;
    assert.equal(json.totals.dedupRatio, (2 * SHARED.length + ONLY_A.length + 2 * NOTES.length + attributeBytes) / unique);
    assert.equal(json.totals.compressionRatio, unique / (sharedObjects.bytes + onlyAObjects.bytes + NOTES.length + attributeBytes));
    const uniqueB = sharedObjects.uncompressed + NOTES.length + B_ATTRIBUTES.length;
    assert.equal(json.repositories[1].dedupRatio, (SHARED.length + NOTES.length + B_ATTRIBUTES.length) / uniqueB);
    assert.equal(json.repositories[1].compressionRatio, uniqueB / (sharedObjects.bytes + NOTES.length + B_ATTRIBUTES.length));
    // Random bytes do not compress: deduplication alone makes the difference (DEDUP × COMPRESSION = LOGICAL / STORED).
    assert.ok(json.totals.dedupRatio! > 1.4 && Math.abs(json.totals.compressionRatio! - 1) < 0.01, JSON.stringify(json.totals));
    assert.equal(json.totals.unreferencedXorbBytes, 0, "every recorded xorb is live");
  });

  it("counts another version of a file separately, on any branch", async () => {
    await commitInline("dataset:bob/b", "docs/notes.txt", NOTES_V2, "dev");
    await assertStats(
      content([SHARED, ONLY_A, NOTES, A_ATTRIBUTES], [sharedObjects, onlyAObjects], [NOTES, A_ATTRIBUTES]),
      content([SHARED, NOTES, NOTES_V2, B_ATTRIBUTES], [sharedObjects], [NOTES, NOTES_V2, B_ATTRIBUTES]),
      content(
        [SHARED, ONLY_A, NOTES, A_ATTRIBUTES, SHARED, NOTES, NOTES_V2, B_ATTRIBUTES],
        [sharedObjects, onlyAObjects],
        [NOTES, A_ATTRIBUTES, NOTES_V2, B_ATTRIBUTES],
      ),
    );
  });

  it("stops counting a deleted file once no branch or tag holds it; its xorbs stay recorded, unreferenced", async () => {
    await client("model:alice/a").commit({ summary: "Drop only-a.bin", operations: [{ kind: "deletedFile", path: "only-a.bin" }] });
    const b = content([SHARED, NOTES, NOTES_V2, B_ATTRIBUTES], [sharedObjects], [NOTES, NOTES_V2, B_ATTRIBUTES]);
    // The tag v1 still holds it.
    await assertStats(
      content([SHARED, ONLY_A, NOTES, A_ATTRIBUTES], [sharedObjects, onlyAObjects], [NOTES, A_ATTRIBUTES]),
      b,
      content(
        [SHARED, ONLY_A, NOTES, A_ATTRIBUTES, SHARED, NOTES, NOTES_V2, B_ATTRIBUTES],
        [sharedObjects, onlyAObjects],
        [NOTES, A_ATTRIBUTES, NOTES_V2, B_ATTRIBUTES],
      ),
    );

    assert.equal(await castor.store.deleteRevision(repoA.id, "v1"), true);
    await assertStats(
      content([SHARED, NOTES, A_ATTRIBUTES], [sharedObjects], [NOTES, A_ATTRIBUTES]),
      b,
      content([SHARED, NOTES, A_ATTRIBUTES, SHARED, NOTES, NOTES_V2, B_ATTRIBUTES], [sharedObjects], [NOTES, A_ATTRIBUTES, NOTES_V2, B_ATTRIBUTES]),
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

    it("answers an admin token with the statistics and the daily samples, today's being this measurement", async () => {
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
      assert.deepEqual(body.history, expected.history, "today's sample is this command's measurement");
    });

    it("prints a table per repository with a total, and the daily samples with --history", async () => {
      const { totals } = await computeStorageStats(castor.store);
      const table = await castorStats();
      assert.equal(table.code, 0, table.stderr);
      assert.match(table.stdout, /^REPOSITORY +FILES +LOGICAL +UNIQUE +STORED +DEDUP +COMPRESSION +XORBS +CHUNKS +INLINE$/m);
      assert.match(table.stdout, /^model:alice\/a +3 +\S+ \S+ +\S+ \S+ +\S+ \S+ +\d+\.\d\d +\d+\.\d\d +\d+ +\d+ +2$/m);
      assert.match(table.stdout, new RegExp(`^total +${totals.files} .* ${totals.inlineBlobs}$`, "m"));
      assert.match(table.stdout, new RegExp(`^All recorded xorbs: ${totals.recordedXorbs} `, "m"));

      const history = await castorStats("--history");
      assert.equal(history.code, 0, history.stderr);
      assert.match(
        history.stdout,
        /^DAY +REPOS +FILES +LOGICAL +UNIQUE +STORED +DEDUP +COMPRESSION +XORBS +CHUNKS +RECORDED +UNREFERENCED\n\d{4}-\d\d-\d\d +2 +7 +/,
      );
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

describe("deduplication and compression, apart", () => {
  it("shows a text file stored in two repositories as deduplicated 2× and compressed, the two multiplying to logical ÷ stored", async () => {
    const castor = await startTestApp({ name: "stats-ratios" });
    try {
      // Words drawn at random from a short list, like text: no chunk repeats, yet LZ4 finds the words again.
      const words = ["castor", "stores", "chunks", "once", "in", "xorbs", "and", "compresses", "each", "of", "them", "with", "lz4"];
      const text = Buffer.from(Array.from(randomBytes(100_000), (byte) => words[byte % words.length]).join(" "));
      const token = (await castor.hub.createToken({ repos: "all", access: "write", expiresAt: null })).secret;
      const path = join(castor.dataDir, "letters.txt");
      await writeFile(path, text);
      for (const repo of ["model:alice/one", "dataset:alice/two"]) {
        const [type, name] = repo.split(":");
        await castor.hub.createRepo(type, name);
        await new CastorClient({ endpoint: castor.url, hubToken: token, repo }).uploadToRepo([path], { message: "Add letters" });
      }
      const { totals } = storageStatsJson(await computeStorageStats(castor.store), []);
      // Each repository also holds the .gitattributes line the hub wrote for letters.txt, the same bytes in both.
      const logical = 2 * (text.length + attributes("letters.txt").length);
      assert.equal(totals.logicalBytes, logical);
      assert.equal(totals.dedupRatio, logical / totals.uniqueBytes!, "logical ÷ unique");
      assert.ok(Math.abs(totals.dedupRatio! - 2) < 0.01, `stored once for two repositories: ${totals.dedupRatio}`);
      assert.ok(totals.compressionRatio! > 1.1, `the letters compress: ${totals.compressionRatio}`);
      assert.ok(Math.abs(totals.dedupRatio! * totals.compressionRatio! - totals.logicalBytes / totals.storedBytes) < 1e-9);
    } finally {
      await castor.close();
    }
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

  it("keeps one sample per UTC day: the last measurement of the day", async () => {
    await withStore(async (store) => {
      let now = new Date("2030-01-01T10:00:00Z");
      const service = new StorageStatsService(store, { now: () => now });
      const first = await service.sampleToday();
      assert.deepEqual([first.day, first.takenAt, first.repositories], ["2030-01-01", now, 0]);

      await store.createRepo("model", "alice/later");
      now = new Date("2030-01-01T23:59:59.999Z");
      assert.deepEqual(await service.sampleToday(), first, "the day has its sample: nothing measured");
      const last = sampleOf(await service.measure());
      assert.equal(last.repositories, 1, "a later measurement counts the new repository…");
      assert.deepEqual(await service.history(), [last], "…and becomes the day's sample");

      now = new Date("2030-01-02T00:00:00Z");
      const second = await service.sampleToday();
      assert.deepEqual([second.day, second.repositories], ["2030-01-02", 1]);
      assert.deepEqual(await service.history(), [last, second]);
      assert.deepEqual(await service.history(1), [second]);
    });
  });

  it("waits until the next UTC midnight", () => {
    assert.equal(msUntilNextUtcDay(new Date("2030-01-01T00:00:00Z")), 24 * 3600 * 1000);
    assert.equal(msUntilNextUtcDay(new Date("2030-01-01T23:59:59.999Z")), 1);
    assert.equal(msUntilNextUtcDay(new Date("2030-12-31T12:00:00Z")), 12 * 3600 * 1000);
  });

  it("the sampler samples at its start and after midnight, until stopped", async () => {
    await withStore(async (store) => {
      // A clock 300 ms before midnight that runs as fast as the real one.
      const start = Date.now();
      const base = Date.parse("2030-01-01T23:59:59.700Z");
      const now = () => new Date(base + Date.now() - start);
      const samples: StatsSample[] = [];
      let nextDaySampled: () => void = () => undefined;
      const nextDay = new Promise<void>((resolve) => (nextDaySampled = resolve));
      const sampler = new StatsSampler(new StorageStatsService(store, { now }), {
        now,
        onSample: (sample) => {
          samples.push(sample);
          if (sample.day === "2030-01-02") nextDaySampled();
        },
        onError: (error) => assert.fail(String(error)),
      });
      sampler.start();
      await within(nextDay, "the samples of two days", 10_000);
      await sampler.stop();
      await sampler.stop();
      // A timer can fire a little before midnight by this clock (Node's timers and Date.now()
      // read different clocks): the sampler then finds the day's sample kept, hands it on
      // again, and comes back at midnight.
      const [first, ...rest] = samples;
      const second = rest.at(-1)!;
      assert.deepEqual([first.day, second.day], ["2030-01-01", "2030-01-02"]);
      for (const again of rest.slice(0, -1)) assert.deepEqual(again, first, "before midnight, the day's kept sample");
      assert.deepEqual(await store.listStatsSamples(), [first, second]);
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
      const sampler = new StatsSampler(new StorageStatsService(slow), { onError: (error) => errors.push(error) });
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

  it("measures again after changes: one measurement for a burst of them, another for a change during one", async () => {
    await withStore(async (store) => {
      let release: () => void = () => undefined;
      let walks = 0;
      let walking: () => void = () => undefined;
      const firstWalk = new Promise<void>((resolve) => (walking = resolve));
      // The first walk, having listed the repositories, waits until the test lets it go.
      const held = new Promise<void>((resolve) => (release = resolve));
      const slow: StatsStore = Object.assign(Object.create(store) as SqliteMetadataStore, {
        listRepos: async () => {
          walks++;
          const repos = await store.listRepos();
          walking();
          if (walks === 1) await held;
          return repos;
        },
      });
      const samples: StatsSample[] = [];
      let sampled: () => void = () => undefined;
      const sampler = new StatsSampler(new StorageStatsService(slow), {
        daily: false,
        delayMs: 20,
        onSample: (sample) => {
          samples.push(sample);
          sampled();
        },
        onError: (error) => assert.fail(String(error)),
      });
      try {
        sampler.start();
        assert.equal(await settlesWithin(firstWalk, 200), false, "not daily: nothing measured at start");
        for (let i = 0; i < 5; i++) sampler.changed();
        await within(firstWalk, "the measurement after the changes");
        await store.createRepo("model", "alice/during");
        sampler.changed();
        let second = new Promise<void>((resolve) => (sampled = resolve));
        release();
        await within(second, "the first sample");
        second = new Promise<void>((resolve) => (sampled = resolve));
        await within(second, "the measurement after the change made during the first");
        assert.equal(walks, 2, "five changes, one measurement; one change during it, one more");
        assert.deepEqual(
          samples.map((sample) => sample.repositories),
          [0, 1],
        );
        assert.deepEqual(await store.listStatsSamples(), [samples[1]], "the day's sample is its last measurement");
      } finally {
        await sampler.stop();
      }
    });
  });

  it("keeps today's sample, the gauges and castor stats --history current with the server's uploads", async () => {
    const castor = await startTestApp({ name: "stats-gauges", storageStats: { dailySamples: true, afterChanges: true, changeDelayMs: 20 } });
    try {
      const gauge = async (name: string): Promise<number> => {
        const text = await (await fetch(`${castor.url}/metrics`)).text();
        const line = text.split("\n").find((l) => l.startsWith(`${name} `));
        return Number(line?.split(" ")[1] ?? Number.NaN);
      };
      await until(async () => (await gauge("castor_storage_sample_timestamp_seconds")) > 0, "the start-up sample", 10_000, 50);
      assert.equal(await gauge("castor_storage_logical_bytes"), 0, "an empty store at start-up");

      const token = (await castor.hub.createToken({ repos: "all", access: "write", expiresAt: null })).secret;
      await castor.hub.createRepo("model", "alice/today");
      const weights = join(castor.dataDir, "weights.bin");
      await writeFile(weights, SHARED);
      await new CastorClient({ endpoint: castor.url, hubToken: token, repo: "model:alice/today" }).uploadToRepo([weights], { message: "Add weights" });
      // The file, and the .gitattributes line the hub wrote for it.
      const logical = SHARED.length + attributes("weights.bin").length;
      await until(async () => (await gauge("castor_storage_logical_bytes")) === logical, "the sample after the upload", 10_000, 20);

      const [sample] = await castor.store.listStatsSamples();
      assert.equal(sample.day, utcDay(new Date()));
      assert.equal(await gauge("castor_storage_sample_timestamp_seconds"), sample.takenAt.getTime() / 1000);
      assert.equal(await gauge("castor_storage_stored_bytes"), sample.storedBytes);
      assert.equal(await gauge("castor_storage_unique_bytes"), sample.uniqueBytes);
      assert.equal(await gauge("castor_storage_recorded_xorb_bytes"), sample.recordedXorbBytes);
      assert.ok(sample.storedBytes > 0 && sample.recordedXorbBytes > 0);
      const history = await runCastor(["stats", "--history", "--json"], { env: { CASTOR_DATA_DIR: castor.dataDir } });
      assert.equal(history.code, 0, history.stderr);
      const days = JSON.parse(history.stdout).history;
      assert.deepEqual(
        days.map((day: { day: string; logicalBytes: number }) => [day.day, day.logicalBytes]),
        [[sample.day, logical]],
      );
    } finally {
      await castor.close();
    }
  });
});
