/**
 * `castor fsck`: the checks of `fsckStores` on real stores (a xorb ingested and a shard
 * registered as uploads do, then damaged by hand), and the command's output and exit codes.
 */
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";
import { fsckStores, type FsckProblem } from "../../src/ops/fsck.js";
import { ShardRegistrationService } from "../../src/cas/shard-registration.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { hashFromHex, hashToHex as hex } from "../../src/format/hash.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { runCastor, type CliResult } from "../helpers/cli.js";
import { hashOf } from "../helpers/fixtures.js";
import { ingestWhole, useFreshCasServices } from "../helpers/stores.js";
import { fromHex, loadVector } from "../helpers/vectors.js";

const xorbVector = loadVector("xorb-small.json");
const shardVector = loadVector("shard-upload-small.json");
const XORB_HEX: string = xorbVector.expected.xorb_hash;
const XORB = hashFromHex(XORB_HEX);

/** The vector xorb's blob file in an fs blob store rooted at `blobsDir` (FsBlobStore's layout). */
function xorbBlobPath(blobsDir: string): string {
  return join(blobsDir, "xorbs", XORB_HEX.slice(0, 2), XORB_HEX);
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
  async function populate(): Promise<void> {
    const { metadata, ingest, registration } = cas();
    const repoId = (await metadata.createRepo("model", "alice/bert")).id;
    await ingestWhole(ingest, XORB, fromHex(xorbVector.body_hex));
    await registration.register(fromHex(shardVector.xet_core_style_hex), { repoId });
  }

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
});

describe("castor fsck", () => {
  let root: string;
  let dataDir: string;
  const castor = (...args: string[]): Promise<CliResult> => runCastor(args, { env: { CASTOR_DATA_DIR: dataDir } });

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), "castor-fsck-cli-"));
    dataDir = join(root, "data");
    const metadata = await SqliteMetadataStore.open(dataDir);
    try {
      const blobs = await FsBlobStore.open(join(dataDir, "blobs"));
      const repoId = (await metadata.createRepo("model", "alice/bert")).id;
      await ingestWhole(new XorbIngestService({ blobs, metadata }), XORB, fromHex(xorbVector.body_hex));
      await new ShardRegistrationService({ metadata, blobs, maxShardBytes: 1024 * 1024 }).register(fromHex(shardVector.xet_core_style_hex), { repoId });
    } finally {
      await metadata.close();
    }
  });
  afterEach(() => rm(root, { recursive: true, force: true }));

  it("exits 0 on an intact store, with the counts on stdout", async () => {
    const result = await castor("fsck");
    assert.equal(result.code, 0, `stderr: ${result.stderr}`);
    assert.match(result.stdout, /^Checked 1 xorbs \(\d+ bytes validated\), 2 files \(\d+ terms\), \d+ dedup entries\.\nNo damage found\.\n$/);
    assert.match(result.stderr, /^castor fsck: xorbs: 1 checked/m);
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
    assert.match(help.stdout, /^Usage: castor fsck/);
  });
});

/** File hashes of the vector shard, in its order. */
function shardFileHex(index: number): string {
  return shardVector.expected.file_info_section.files[index].file_hash;
}
