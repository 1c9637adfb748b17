/**
 * `castor fsck`: the checks of `fsckStores` on real stores (a xorb ingested and a shard
 * registered as uploads do, files committed as the hub does, then damaged by hand), the
 * repairs of `--repair`, and the command's output and exit codes.
 */
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";
import { ShardRegistrationService } from "../../src/cas/shard-registration.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { gitBlobId } from "../../src/format/git.js";
import { hashFromHex, hashToHex as hex } from "../../src/format/hash.js";
import { HistoryWriter, sha256Hex } from "../../src/hub/history.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import type { MetadataStore, Repo } from "../../src/metadata/store.js";
import { fsckStores, type FsckProblem } from "../../src/ops/fsck.js";
import { collectGarbage } from "../../src/ops/gc.js";
import { DamagedHistoryError } from "../../src/ops/reachability.js";
import { blobKey, blobKeyFromHex, blobKeyParts, type BlobKey, type BlobStore } from "../../src/storage/blob-store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { runCastor, type CliResult } from "../helpers/cli.js";
import { hashOf } from "../helpers/fixtures.js";
import { ingestWhole, useFreshCasServices } from "../helpers/stores.js";
import { fromHex, loadVector } from "../helpers/vectors.js";

const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const XORB_HEX: string = xorbVector.expected.xorb_hash;
const XORB = hashFromHex(XORB_HEX);

/** The file of `key` in an fs blob store rooted at `blobsDir` (FsBlobStore's layout). */
function blobPath(blobsDir: string, key: BlobKey): string {
  const { kind, hex } = blobKeyParts(key);
  return join(blobsDir, kind, hex.slice(0, 2), hex);
}

/** The vector xorb's blob file. */
function xorbBlobPath(blobsDir: string): string {
  return blobPath(blobsDir, blobKey("xorbs", XORB));
}

const README = "a small inline file\n";
const NOTES = "another inline file\n";
const inlineKey = (text: string) => blobKeyFromHex("inline", sha256Hex(Buffer.from(text)));

/**
 * Commits to main of `repo`, as the hub does: `weights/model.bin`, the vector shard's first
 * file (stored through Xet), and two inline files, `README.md` and `docs/notes.txt`.
 */
async function commitFiles(metadata: MetadataStore, blobs: BlobStore, repo: Repo): Promise<void> {
  const file = shardVector.expected.file_info_section.files[0];
  const inline = [
    { path: "README.md", text: README },
    { path: "docs/notes.txt", text: NOTES },
  ];
  for (const { text } of inline) await blobs.putIfAbsent(inlineKey(text), Buffer.from(text));
  await new HistoryWriter(metadata).commit({
    repo,
    branch: "main",
    summary: "add files",
    description: "",
    author: "alice",
    operations: [
      { kind: "lfsFile", path: "weights/model.bin", sha256: file.sha256_standard_hex, size: file.file_size },
      ...inline.map(({ path, text }) => ({ kind: "file" as const, path, size: text.length, sha256: sha256Hex(Buffer.from(text)), oid: gitBlobId(text) })),
    ],
  });
}

async function flipByte(path: string, at: number): Promise<void> {
  const bytes = await readFile(path);
  bytes[at] ^= 0x40;
  await chmod(path, 0o644);
  await writeFile(path, bytes);
}

const kinds = (problems: FsckProblem[]) => problems.map((problem) => `${problem.kind} ${problem.subject}`).sort();

describe("fsckStores", () => {
  const cas = useFreshCasServices("fsck");

  /** The vector xorb and the vector shard (two files on it, dedup entries for its chunks). */
  async function populate(): Promise<Repo> {
    const { metadata, ingest, registration } = cas();
    const repo = await metadata.createRepo("model", "alice/bert");
    await ingestWhole(ingest, XORB, fromHex(xorbVector.body_hex));
    await registration.register(fromHex(shardVector.xet_core_style_hex), { repoId: repo.id });
    return repo;
  }

  /** `populate`, and the vector shard's first file and two inline files committed to main. */
  async function populateWithHistory(): Promise<Repo> {
    const repo = await populate();
    await commitFiles(cas().metadata, cas().blobs, repo);
    return repo;
  }

  // The run starts a minute after what the test wrote: --repair keeps records used since its
  // start, and a wall clock can step back between a write and the run (seen in CI on a VM).
  const fsck = (options: Parameters<typeof fsckStores>[2] = {}) =>
    fsckStores(cas().metadata, cas().blobs, { now: () => new Date(Date.now() + 60_000), ...options });

  it("finds nothing wrong in an intact store, paging through every family", async () => {
    await populate();
    const { metadata, blobs } = cas();
    const lines: string[] = [];
    const report = await fsckStores(metadata, blobs, { progress: (line) => lines.push(line), progressEveryXorbs: 1, maxPageRows: 1 });
    assert.equal(report.problemCount, 0, JSON.stringify(report.problems));
    assert.deepEqual(report.problems, []);
    assert.equal(report.counts.xorbs, 1);
    assert.equal(report.counts.xorbBytes, xorbVector.body_hex.length / 2);
    assert.equal(report.counts.files, 2);
    assert.equal(report.counts.fileTerms >= 2, true);
    assert.equal(report.counts.dedupEntries >= 1, true);
    const [run] = await metadata.lastMaintenanceRuns();
    assert.equal(run.kind, "fsck", "the run is recorded for /metrics");
    assert.deepEqual([run.totals.problems, run.totals.xorbs_checked, run.totals.files_checked], [0, 1, 2]);
    assert.ok(
      lines.some((line) => /^xorbs: 1 checked .*so far…$/.test(line)),
      lines.join("\n"),
    );
  });

  it("reports a flipped byte in a xorb blob, and the files that use it", async () => {
    await populate();
    const { metadata, blobs, dir } = cas();
    await flipByte(xorbBlobPath(join(dir, "blobs")), 20);
    const report = await fsckStores(metadata, blobs);
    assert.equal(report.problemCount, 3);
    assert.deepEqual(
      kinds(report.problems),
      [`file_damaged_xorb file ${shardFileHex(0)}`, `file_damaged_xorb file ${shardFileHex(1)}`, `xorb_corrupt xorb ${XORB_HEX}`].sort(),
    );
    assert.match(report.problems[0].message, /does not validate/);
  });

  it("reports a missing xorb blob", async () => {
    await populate();
    const { metadata, blobs, dir } = cas();
    await unlink(xorbBlobPath(join(dir, "blobs")));
    const report = await fsckStores(metadata, blobs);
    assert.equal(report.problems[0].kind, "xorb_missing");
    assert.equal(report.problems[0].subject, `xorb ${XORB_HEX}`);
    assert.match(report.problems[0].message, /missing/);
    assert.equal(report.counts.xorbBytes, 0);
  });

  it("reports dedup entries and file terms that name no recorded xorb, and terms outside their xorb", async () => {
    await populate();
    const { metadata, blobs } = cas();
    const nowhere = hashOf("nowhere");
    await metadata.importDedupEntries([{ chunkHash: hashOf("a chunk"), xorbHash: nowhere }]);
    const createdAt = new Date();
    await metadata.importFiles([
      { hash: hashOf("file on nothing"), size: 10, sha256: null, createdAt, terms: [{ xorbHash: nowhere, chunkStart: 0, chunkEnd: 1, unpackedLength: 10 }] },
      { hash: hashOf("file past the end"), size: 10, sha256: null, createdAt, terms: [{ xorbHash: XORB, chunkStart: 2, chunkEnd: 4, unpackedLength: 10 }] },
      { hash: hashOf("file of wrong length"), size: 1, sha256: null, createdAt, terms: [{ xorbHash: XORB, chunkStart: 0, chunkEnd: 1, unpackedLength: 1 }] },
    ]);
    const report = await fsckStores(metadata, blobs);
    assert.deepEqual(
      kinds(report.problems),
      [
        `dedup_missing_xorb chunk ${hex(hashOf("a chunk"))}`,
        `file_missing_xorb file ${hex(hashOf("file on nothing"))}`,
        `file_bad_term file ${hex(hashOf("file past the end"))}`,
        `file_bad_term file ${hex(hashOf("file of wrong length"))}`,
      ].sort(),
    );
    for (const problem of report.problems) if (problem.kind !== "file_bad_term") assert.equal(problem.xorb, hex(nowhere));
  });

  it("walks every ref's history and checks the files its trees name", async () => {
    await populateWithHistory();
    const lines: string[] = [];
    const report = await fsck({ progress: (line) => lines.push(line) });
    assert.deepEqual(report.problems, []);
    assert.equal(report.problemCount, 0);
    assert.equal(report.historyComplete, true);
    assert.deepEqual(
      [report.counts.repositories, report.counts.commits, report.counts.trees, report.counts.reachableFiles],
      [1, 1, 3, 3],
      "one commit; the root, weights/ and docs/ trees; one Xet and two inline files",
    );
    assert.ok(
      lines.some((line) => /^history: 1 repositories walked \(1 commits, 3 trees\), 3 distinct files/.test(line)),
      lines.join("\n"),
    );
  });

  it("reports missing commits and trees, walks on past them, and gc refuses to sweep", async () => {
    const repo = await populateWithHistory();
    const { metadata, blobs } = cas();
    await commitFiles(metadata, blobs, repo); // nothing new: a second commit on the first
    const refs = (await metadata.listRevisions(repo.id)).map((revision) => ({ name: revision.name, commitOid: revision.commitOid }));
    const head = (await metadata.getCommit(repo.id, refs[0].commitOid!))!;
    const parent = head.parentOids[0];
    const weights = (await metadata.getTree(repo.id, head.treeOid))!.entries.find((entry) => entry.name === "weights")!;
    assert.deepEqual(await metadata.deleteHistory(repo.id, refs, [parent], [weights.oid]), { commits: 1, trees: 1 });

    const report = await fsck();
    assert.deepEqual(kinds(report.problems), [`commit_missing commit ${parent}`, `tree_missing tree ${weights.oid}`]);
    assert.match(report.problems.find((problem) => problem.kind === "commit_missing")!.message, new RegExp(`named by commit ${head.oid}`));
    assert.match(report.problems.find((problem) => problem.kind === "tree_missing")!.message, /^tree of weights\/ [0-9a-f]{40} of model:alice\/bert/);
    assert.equal(report.historyComplete, false);
    assert.equal(report.counts.reachableFiles, 2, "the inline files of the trees that are there were still checked");
    await assert.rejects(collectGarbage(metadata, blobs, { graceMs: 0 }), DamagedHistoryError);
  });

  it("reports a tree entry whose file record is gone, with its path", async () => {
    await populateWithHistory();
    const { metadata } = cas();
    const fileHash = hashFromHex(shardFileHex(0));
    assert.equal((await metadata.deleteFiles([fileHash], new Date(Date.now() + 60_000))).length, 1);
    const report = await fsck();
    assert.deepEqual(kinds(report.problems), [`file_missing file ${shardFileHex(0)}`]);
    assert.match(report.problems[0].message, /^weights\/model\.bin in model:alice\/bert names Xet file [0-9a-f]{64}, which is not recorded/);
  });

  it("reports a missing and a corrupt inline blob", async () => {
    await populateWithHistory();
    const { metadata, blobs, dir } = cas();
    await unlink(blobPath(join(dir, "blobs"), inlineKey(README)));
    await flipByte(blobPath(join(dir, "blobs"), inlineKey(NOTES)), 3);
    const report = await fsck();
    assert.deepEqual(kinds(report.problems), [
      `inline_corrupt inline ${sha256Hex(Buffer.from(NOTES))}`,
      `inline_missing inline ${sha256Hex(Buffer.from(README))}`,
    ]);
    assert.match(report.problems.find((problem) => problem.kind === "inline_corrupt")!.message, /docs\/notes\.txt in model:alice\/bert .*hashes to SHA-256/);

    // The corrupt blob goes, so a commit of the same content stores it anew; the path stays damaged until then.
    const repaired = await fsck({ repair: true });
    assert.equal(repaired.remaining, 2);
    assert.equal(await blobs.size(inlineKey(NOTES)), null);
    assert.deepEqual(
      kinds((await fsckStores(metadata, blobs)).problems),
      [`inline_missing inline ${sha256Hex(Buffer.from(NOTES))}`, `inline_missing inline ${sha256Hex(Buffer.from(README))}`].sort(),
    );
  });

  it("lists blobs nothing needs as orphans, which are not damage", async () => {
    await populateWithHistory();
    const { blobs } = cas();
    const strayXorb = blobKey("xorbs", hashOf("stray xorb"));
    const strayInline = inlineKey("never committed");
    const strayShard = blobKey("shards", hashOf("stray shard"));
    await blobs.putIfAbsent(strayXorb, Buffer.alloc(100));
    await blobs.putIfAbsent(strayInline, Buffer.from("never committed"));
    await blobs.putIfAbsent(strayShard, Buffer.alloc(10));
    const report = await fsck({ repair: true });
    assert.equal(report.problemCount, 0);
    assert.equal(report.remaining, 0);
    assert.deepEqual(kinds(report.problems), [`orphan_blob blob ${strayInline}`, `orphan_blob blob ${strayShard}`, `orphan_blob blob ${strayXorb}`].sort());
    assert.deepEqual(report.orphans, { xorbs: { blobs: 1, bytes: 100 }, inline: { blobs: 1, bytes: 15 }, shards: { blobs: 1, bytes: 10 } });
    assert.notEqual(await blobs.size(strayXorb), null, "repairs leave orphans to castor gc");
  });

  it("--repair removes a corrupt xorb and the files no ref names; fsck is clean after, and the xorb can be uploaded again", async () => {
    await populate();
    const { metadata, blobs, dir, ingest } = cas();
    await flipByte(xorbBlobPath(join(dir, "blobs")), 20);
    const report = await fsck({ repair: true });
    assert.equal(report.problemCount, 3);
    assert.equal(report.remaining, 0, JSON.stringify(report.problems));
    assert.match(report.problems.find((problem) => problem.kind === "xorb_corrupt")!.repair!, /^xorb removed/);
    assert.equal(await metadata.getXorbSize(XORB), null);
    assert.equal(await blobs.size(blobKey("xorbs", XORB)), null);
    assert.equal(await metadata.getFile(hashFromHex(shardFileHex(0))), null, "no ref named the files");

    const after = await fsck();
    assert.deepEqual(after.problems, [], "clean after the repair");
    const upload = await ingest.ingest(
      XORB,
      (async function* () {
        yield fromHex(xorbVector.body_hex);
      })(),
    );
    assert.equal(upload.outcome, "stored", "the next upload stores the xorb anew");
    assert.equal(await metadata.getXorbSize(XORB), xorbVector.body_hex.length / 2);
    assert.deepEqual((await fsck()).problems, []);
  });

  it("--repair removes dedup entries naming unrecorded xorbs", async () => {
    await populate();
    const { metadata } = cas();
    const dangling = { chunkHash: hashOf("a chunk"), xorbHash: hashOf("nowhere") };
    await metadata.importDedupEntries([dangling]);
    const report = await fsck({ repair: true, maxPageRows: 1 });
    assert.deepEqual(kinds(report.problems), [`dedup_missing_xorb chunk ${hex(dangling.chunkHash)}`]);
    assert.equal(report.remaining, 0);
    assert.deepEqual(await metadata.findDedupXorbs(dangling.chunkHash, 5), []);
    assert.equal((await fsck()).problemCount, 0);
  });

  it("--repair keeps a damaged file a ref names and lists it with its path; an upload of the xorb makes it whole", async () => {
    await populateWithHistory();
    const { metadata, dir, ingest } = cas();
    await flipByte(xorbBlobPath(join(dir, "blobs")), 20);
    const report = await fsck({ repair: true });
    assert.equal(report.remaining, 1, JSON.stringify(report.problems, null, 2));
    const live = report.problems.find((problem) => problem.subject === `file ${shardFileHex(0)}`)!;
    assert.match(live.repair!, /^file kept: a ref names it \(weights\/model\.bin in model:alice\/bert\); its content is lost until it is uploaded again$/);
    assert.deepEqual(report.liveDamagedFiles, [{ file: shardFileHex(0), size: 3565, paths: ["weights/model.bin in model:alice/bert"], morePaths: 0 }]);
    assert.notEqual(await metadata.getFile(hashFromHex(shardFileHex(0))), null, "kept");
    assert.equal(await metadata.getFile(hashFromHex(shardFileHex(1))), null, "no ref names the other file: removed");

    assert.deepEqual(kinds((await fsck()).problems), [`file_missing_xorb file ${shardFileHex(0)}`]);
    await ingestWhole(ingest, XORB, fromHex(xorbVector.body_hex));
    assert.deepEqual((await fsck()).problems, [], "whole again once the xorb is uploaded");
  });

  it("--repair keeps damaged files while part of the history is missing", async () => {
    const repo = await populateWithHistory();
    const { metadata, dir } = cas();
    const refs = (await metadata.listRevisions(repo.id)).map((revision) => ({ name: revision.name, commitOid: revision.commitOid }));
    assert.deepEqual(await metadata.deleteHistory(repo.id, refs, [refs[0].commitOid!], []), { commits: 1, trees: 0 });
    await flipByte(xorbBlobPath(join(dir, "blobs")), 20);
    const report = await fsck({ repair: true });
    assert.equal(report.historyComplete, false);
    assert.equal(report.problems.find((found) => found.kind === "commit_missing")!.repair, "left: restore the metadata database from a backup");
    for (const problem of report.problems.filter((found) => found.kind === "file_damaged_xorb")) {
      assert.match(problem.repair!, /^file kept: with part of the history missing/);
    }
    assert.notEqual(await metadata.getFile(hashFromHex(shardFileHex(1))), null);
  });
});

describe("castor fsck", () => {
  let root: string;
  let dataDir: string;
  const castor = (...args: string[]): Promise<CliResult> => runCastor(args, { env: { CASTOR_DATA_DIR: dataDir } });

  /** Runs `work` on the data dir's stores (closed afterwards, before castor opens them). */
  async function withDataDir<T>(work: (metadata: SqliteMetadataStore, blobs: FsBlobStore, repo: Repo) => Promise<T>): Promise<T> {
    const metadata = await SqliteMetadataStore.open(dataDir);
    try {
      const blobs = await FsBlobStore.open(join(dataDir, "blobs"));
      const repo = (await metadata.getRepo("model", "alice/bert")) ?? (await metadata.createRepo("model", "alice/bert"));
      return await work(metadata, blobs, repo);
    } finally {
      await metadata.close();
    }
  }

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), "castor-fsck-cli-"));
    dataDir = join(root, "data");
    await withDataDir(async (metadata, blobs, repo) => {
      await ingestWhole(new XorbIngestService({ blobs, metadata }), XORB, fromHex(xorbVector.body_hex));
      await new ShardRegistrationService({ metadata, blobs, maxShardBytes: 1024 * 1024 }).register(fromHex(shardVector.xet_core_style_hex), {
        repoId: repo.id,
      });
    });
  });
  afterEach(() => rm(root, { recursive: true, force: true }));

  it("exits 0 on an intact store, with the counts on stdout", async () => {
    await withDataDir((metadata, blobs, repo) => commitFiles(metadata, blobs, repo));
    const result = await castor("fsck");
    assert.equal(result.code, 0, `stderr: ${result.stderr}`);
    assert.match(
      result.stdout,
      /^Checked 1 xorbs \(\d+ bytes validated\), 2 files \(\d+ terms\), \d+ dedup entries, 1 repositories \(1 commits, 3 trees, 3 files named\)\.\nNo damage found\.\n$/,
    );
    assert.match(result.stderr, /^castor fsck: xorbs: 1 checked/m);
    assert.match(result.stderr, /^castor fsck: history: 1 repositories walked/m);
  });

  it("exits 0 when only orphan blobs are found, and says castor gc removes them", async () => {
    await withDataDir((_metadata, blobs) => blobs.putIfAbsent(blobKey("xorbs", hashOf("stray xorb")), Buffer.alloc(100)));
    const result = await castor("fsck");
    assert.equal(result.code, 0, `stdout: ${result.stdout}\nstderr: ${result.stderr}`);
    assert.match(result.stdout, /^No damage found\.$/m);
    assert.match(result.stdout, /^orphan_blob +blob xorbs\/[0-9a-f]{64} +100 bytes; has no xorb record/m);
    assert.match(result.stdout, /^1 orphan blob \(100 bytes\): castor gc removes them\.$/m);
  });

  it("--repair fixes a corrupt xorb no ref needs: exit 0, and the next check is clean", async () => {
    await flipByte(xorbBlobPath(join(dataDir, "blobs")), 20);
    const result = await castor("fsck", "--repair");
    assert.equal(result.code, 0, `stdout: ${result.stdout}\nstderr: ${result.stderr}`);
    assert.match(result.stdout, /^KIND +WHAT +PROBLEM +REPAIR$/m);
    assert.match(result.stdout, new RegExp(`^xorb_corrupt +xorb ${XORB_HEX} .* xorb removed \\(record, dedup entries, blob\\)`, "m"));
    assert.match(result.stdout, /^Repaired all 3 problems\.$/m);
    const again = await castor("fsck");
    assert.equal(again.code, 0, again.stdout);
    assert.match(again.stdout, /^No damage found\.\n$/m);
  });

  it("--repair exits 1 and lists a damaged file a ref names, which it keeps", async () => {
    await withDataDir((metadata, blobs, repo) => commitFiles(metadata, blobs, repo));
    await flipByte(xorbBlobPath(join(dataDir, "blobs")), 20);
    const result = await castor("fsck", "--repair");
    assert.equal(result.code, 1, `stdout: ${result.stdout}\nstderr: ${result.stderr}`);
    assert.match(result.stdout, /^Damaged files that refs name \(kept\): downloads of these paths fail until the files are uploaded again:$/m);
    assert.match(result.stdout, new RegExp(`^  file ${shardFileHex(0)} \\(3565 bytes\\): weights/model\\.bin in model:alice/bert$`, "m"));
    assert.match(result.stdout, /^Repaired 2 of 3 problems; 1 left\.$/m);
    assert.notEqual(await withDataDir((metadata) => metadata.getFile(hashFromHex(shardFileHex(0)))), null);
  });

  it("exits 1 naming the xorb whose blob has a flipped byte", async () => {
    await flipByte(xorbBlobPath(join(dataDir, "blobs")), 20);
    const result = await castor("fsck", "--data-dir", dataDir);
    assert.equal(result.code, 1, `stdout: ${result.stdout}\nstderr: ${result.stderr}`);
    assert.match(result.stdout, /Damage found: 3 problems\./);
    assert.match(result.stdout, new RegExp(`^xorb_corrupt +xorb ${XORB_HEX} +the blob of xorb ${XORB_HEX} does not validate`, "m"));
    assert.match(result.stdout, /^file_damaged_xorb +file [0-9a-f]{64} /m);
  });

  it("exits 1 on a missing blob", async () => {
    await unlink(xorbBlobPath(join(dataDir, "blobs")));
    const result = await castor("fsck");
    assert.equal(result.code, 1);
    assert.match(result.stdout, new RegExp(`^xorb_missing +xorb ${XORB_HEX} +.*missing`, "m"));
  });

  it("exits 2 on a bad command line, and prints its usage with --help", async () => {
    for (const args of [["--progress-every", "0"], ["extra"], ["--no-such-flag"]]) {
      const result = await castor("fsck", ...args);
      assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
      assert.match(result.stderr, /^castor fsck: .*\nRun 'castor fsck --help' for usage\.\n$/);
    }
    const help = await castor("fsck", "--help");
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^Usage: castor fsck \[--repair\]/);
  });
});

/** File hashes of the vector shard, in its order. */
function shardFileHex(index: number): string {
  return shardVector.expected.file_info_section.files[index].file_hash;
}
