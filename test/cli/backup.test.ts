/**
 * `castor backup` and `castor restore` as users run them (child processes):
 *
 * - a backup of a real `castor serve`'s data dir taken while uploads keep arriving, restored
 *   into a new data dir: `castor fsck` finds it intact, and a server started on it serves every
 *   file committed before the backup byte-exact, with the old hub tokens, and accepts the CAS
 *   access token and transfer URL the old server handed out (its keys came along);
 * - blobs copied with --copy and across filesystems (hard-linked otherwise);
 * - the refusals: a non-empty DEST, a DEST inside the data dir, a non-empty data dir (and one a
 *   server holds, even with --force), the scale-out configuration, a folder that is no backup, a
 *   damaged backup, a blob the snapshot needs that is missing;
 * - an interrupted backup never leaves DEST: SIGTERM removes its partial folder, SIGKILL leaves
 *   only that partial folder.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, statSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ShardRegistrationService } from "../../src/cas/shard-registration.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { CastorClient } from "../../src/client/index.js";
import { hashFromHex } from "../../src/format/hash.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { MANIFEST_FILE_NAME } from "../../src/ops/backup.js";
import { blobKeyFromHex } from "../../src/storage/blob-store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { runCastor, type CliOptions, type CliResult } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";
import { ingestWhole } from "../helpers/stores.js";
import { fromHex, loadVector } from "../helpers/vectors.js";

const REPO = "model:alice/bert";
const KiB = 1024;
const TIMEOUT_MS = 60_000;

let root: string;
before(async () => {
  root = await mkdtemp(join(tmpdir(), "castor-backup-"));
});
after(() => rm(root, { recursive: true, force: true }));

function castor(args: string[], env: Record<string, string>, options: Omit<CliOptions, "env"> = {}): Promise<CliResult> {
  return runCastor(args, { env, timeoutMs: TIMEOUT_MS, ...options });
}

function assertOk(result: CliResult, what: string): CliResult {
  assert.equal(result.code, 0, `${what}: exit ${result.code}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`);
  return result;
}

/** Exit 1 with one `castor COMMAND: …` sentence on stderr matching `message`, no stack trace. */
function assertRefused(result: CliResult, command: string, message: RegExp): void {
  assert.equal(result.code, 1, `expected exit 1, got ${result.code}; stderr: ${result.stderr}`);
  assert.match(result.stderr, new RegExp(`^castor ${command}: .*\\n$`, "m"));
  assert.match(result.stderr, message);
  assert.doesNotMatch(result.stderr, /\n\s+at /, "no stack trace");
}

/** Folders beside `dest` that an unfinished backup of it left (`DEST.partial-…`). */
async function partialsOf(dest: string): Promise<string[]> {
  return (await readdir(dirname(dest))).filter((name) => name.startsWith(`${basename(dest)}.partial-`));
}

describe("castor backup of a running server, then castor restore", () => {
  let server: ServerProcess;
  let restoredServer: ServerProcess | undefined;
  after(async () => {
    await restoredServer?.stop();
    await server?.stop();
  });

  it("restores every file committed before the backup, byte-exact, with the old tokens and keys, while uploads went on during it", async (t) => {
    server = await startCastorServer();
    const admin = async (...args: string[]) => assertOk(await castor(args, server.settings), `castor ${args.join(" ")}`).stdout;
    await admin("repo", "create", "model", "alice/bert");
    const tokenLine = async (access: string) => (await admin("token", "create", "--repo", REPO, "--access", access)).trimEnd().split("\n").at(-1)!;
    const writeToken = await tokenLine("write");
    const readToken = await tokenLine("read");
    const client = new CastorClient({ endpoint: server.url, hubToken: writeToken, repo: REPO });
    const work = join(root, "work");
    await mkdir(work);

    /** Every file committed, by path in the repository. */
    const committed = new Map<string, Buffer>();
    const uploadXet = async (path: string, bytes: Buffer) => {
      const local = join(work, path.replaceAll("/", "_"));
      await writeFile(local, bytes);
      await client.uploadToRepo([local], { pathInRepo: path });
      committed.set(path, bytes);
    };
    const commitInline = async (path: string, text: string) => {
      const content = Buffer.from(text);
      await client.commit({ summary: `Add ${path}`, operations: [{ kind: "file", path, content }] });
      committed.set(path, content);
    };

    // Before the backup: Xet files (two sharing most of their bytes, so they share xorbs) and an inline one.
    const shared = randomBytes(1536 * KiB);
    await uploadXet("weights/a.bin", shared);
    await uploadXet("weights/b.bin", Buffer.concat([shared, randomBytes(300 * KiB)]));
    await uploadXet("weights/small.bin", randomBytes(5000));
    await commitInline("README.md", "# bert\n\nBacked up while it ran.\n");
    const before = new Map(committed);

    // What the old server handed out, which only its keys make valid: a CAS token and a transfer URL.
    const small = await client.fileInfo("weights/small.bin");
    const tokenResponse = await fetch(`${server.url}/api/models/alice/bert/xet-read-token/main`, { headers: { authorization: `Bearer ${readToken}` } });
    assert.equal(tokenResponse.status, 200);
    const casReadToken = ((await tokenResponse.json()) as { accessToken: string }).accessToken;
    const reconstruction = await fetch(`${server.url}/v2/reconstructions/${small.xetHash}`, { headers: { authorization: `Bearer ${casReadToken}` } });
    assert.equal(reconstruction.status, 200);
    const entry = Object.values(
      ((await reconstruction.json()) as { xorbs: Record<string, { url: string; ranges: { bytes: { start: number; end: number } }[] }[]> }).xorbs,
    )[0][0];
    const range = `bytes=${entry.ranges[0].bytes.start}-${entry.ranges[0].bytes.end}`;
    const transferUrl = new URL(entry.url);
    const transferBytes = Buffer.from(await (await fetch(entry.url, { headers: { range } })).arrayBuffer());

    // Uploads keep arriving, Xet and inline, before, during and after the backup.
    let writing = true;
    let uploadsDuringBackup = 0;
    let backupRunning = false;
    const writer = (async () => {
      for (let i = 0; writing; i++) {
        await uploadXet(`during/${i}.bin`, randomBytes(256 * KiB + i));
        await commitInline(`during/${i}.txt`, `note ${i}\n`);
        if (backupRunning) uploadsDuringBackup++;
      }
    })();

    const dest = join(root, "backups", "first");
    backupRunning = true;
    const backup = await castor(["backup", dest, "--progress-every", "1"], { CASTOR_DATA_DIR: server.dataDir });
    backupRunning = false;
    writing = false;
    await writer;
    assertOk(backup, "castor backup");
    assert.ok(uploadsDuringBackup >= 1, "uploads were committed while the backup ran");
    assert.match(backup.stdout, /^Backed up .+ to .+first in \d+\.\d s; blobs hard-linked \(one filesystem/m);
    assert.match(backup.stdout, /^blobs +\S+ \S+ +\d+ objects \(\d+ xorbs, \d+ shards, \d+ inline files; \d+ referenced by the snapshot\), \d+ bytes$/m);
    assert.match(backup.stdout, /^keys +jwt-signing-key\.pem, url-key, dedup-key-seed$/m);
    assert.match(backup.stderr, /^castor backup: metadata snapshot taken \(schema version \d+: 1 repositories, \d+ xorbs/m);
    assert.match(backup.stderr, /^castor backup: blobs: 1 \(\d+ bytes\) so far…$/m);
    assert.match(backup.stderr, /^castor backup: checked: the \d+ objects the snapshot references are all in the backup$/m);
    assert.deepEqual(await partialsOf(dest), []);
    const manifest = JSON.parse(await readFile(join(dest, MANIFEST_FILE_NAME), "utf8"));
    assert.equal(manifest.format, "castor-backup");
    assert.equal(manifest.castorVersion, JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8")).version);
    assert.ok(manifest.records.xorbs >= 1 && manifest.blobs.xorbs.objects >= manifest.records.xorbs, JSON.stringify(manifest));

    // Restoring over the data dir the server holds is refused, --force or not.
    assertRefused(await castor(["restore", dest, "--force"], { CASTOR_DATA_DIR: server.dataDir }), "restore", /metadata\.sqlite is open in another process/);
    assert.ok((await client.listFiles()).length >= before.size, "the server's data dir is untouched");

    const restored = join(root, "restored");
    const restore = assertOk(await castor(["restore", dest, "--progress-every", "1000"], { CASTOR_DATA_DIR: restored }), "castor restore");
    assert.match(restore.stdout, /^Restored the backup of \S+ \(castor \S+\) into .+restored in \d+\.\d s; blobs hard-linked/m);
    assert.match(restore.stdout, /^Database integrity check: ok\. Start the server with: castor serve --data-dir .+restored$/m);
    assert.match(restore.stderr, /^castor restore: metadata: copied, SHA-256 as recorded, integrity check ok$/m);
    assert.deepEqual((await readdir(restored)).sort(), ["blobs", "keys", "metadata.sqlite"]);

    const fsck = await castor(["fsck"], { CASTOR_DATA_DIR: restored });
    assertOk(fsck, "castor fsck of the restored data dir");
    assert.match(fsck.stdout, /No damage found\./);
    await server.stop();

    restoredServer = await startCastorServer({ dataDir: restored });
    const reader = new CastorClient({ endpoint: restoredServer.url, hubToken: readToken, repo: REPO });
    const listed = await reader.listFiles();
    const paths = new Set(listed.map((file) => file.path));
    for (const path of before.keys()) assert.ok(paths.has(path), `${path}, committed before the backup, is in the restored repository`);
    const out = join(root, "out");
    await mkdir(out);
    // Every file the restored repository lists (those of uploads during the backup too) downloads as uploaded.
    for (const [i, file] of listed.entries()) {
      const output = join(out, String(i));
      await reader.downloadFile({ path: file.path, output });
      if (file.path === ".gitattributes") {
        // The hub's own file: a line for each Xet-stored file the restored repository holds.
        const lines = new Set((await readFile(output, "utf8")).trimEnd().split("\n"));
        for (const xet of listed.filter((other) => other.path.endsWith(".bin"))) {
          assert.ok(lines.has(`${xet.path} filter=lfs diff=lfs merge=lfs -text`), `.gitattributes covers ${xet.path}`);
        }
        continue;
      }
      assert.ok((await readFile(output)).equals(committed.get(file.path)!), `${file.path} downloads byte-exact from the restored data dir`);
    }

    t.diagnostic(
      `${uploadsDuringBackup} uploads committed during the backup; ${listed.length} files restored (${before.size} from before it); backup: ${backup.stdout.split("\n")[0]}; restore: ${restore.stdout.split("\n")[0]}`,
    );

    const oldToken = await fetch(`${restoredServer.url}/v2/reconstructions/${small.xetHash}`, { headers: { authorization: `Bearer ${casReadToken}` } });
    assert.equal(oldToken.status, 200, "the old server's CAS access token is accepted: the signing key was restored");
    await oldToken.arrayBuffer();
    const oldUrl = await fetch(`${restoredServer.url}${transferUrl.pathname}${transferUrl.search}`, { headers: { range } });
    assert.equal(oldUrl.status, 206, "the old server's transfer URL is accepted: the URL key was restored");
    assert.ok(Buffer.from(await oldUrl.arrayBuffer()).equals(transferBytes));
  });
});

describe("castor backup / restore on a small data dir: how blobs are copied, and the refusals", () => {
  const xorbVector = loadVector("xorb-small.json");
  const shardVector = loadVector("shard-upload-small.json");
  const XORB_HEX: string = xorbVector.expected.xorb_hash;
  let dataDir: string;
  let backupDir: string;

  before(async () => {
    // A data dir as a server leaves it: a repository, a xorb and a shard registered on it.
    dataDir = join(root, "refusals-data");
    const metadata = await SqliteMetadataStore.open(dataDir);
    try {
      const blobs = await FsBlobStore.open(join(dataDir, "blobs"));
      const repoId = (await metadata.createRepo("model", "alice/bert")).id;
      await ingestWhole(new XorbIngestService({ blobs, metadata }), hashFromHex(XORB_HEX), fromHex(xorbVector.body_hex));
      await new ShardRegistrationService({ metadata, blobs, maxShardBytes: 1024 * 1024 }).register(fromHex(shardVector.xet_core_style_hex), { repoId });
    } finally {
      await metadata.close();
    }
    backupDir = join(root, "refusals-backup");
    assertOk(await castor(["backup", backupDir, "--copy"], { CASTOR_DATA_DIR: dataDir }), "castor backup --copy");
  });

  it("copies blobs with --copy and says so", async () => {
    const dest = join(root, "copied");
    const result = assertOk(await castor(["backup", dest, "--copy"], { CASTOR_DATA_DIR: dataDir }), "castor backup --copy");
    assert.match(result.stdout, /; blobs copied\.$/m);
    assert.match(result.stdout, /^blobs +.* 2 objects \(1 xorbs, 1 shards, 0 inline files; 2 referenced by the snapshot\)/m);
    assert.match(result.stdout, /^Note: the data dir has no keys\/jwt-signing-key\.pem, keys\/url-key, keys\/dedup-key-seed: /m);
  });

  // The RAM-backed /dev/shm is another filesystem than a temp dir on disk on most Linux
  // machines, and the other way round (npm test puts TMPDIR in /dev/shm where it can).
  const otherFilesystem = ["/dev/shm", "/var/tmp", "/tmp"].find((folder) => existsSync(folder) && statSync(folder).dev !== statSync(tmpdir()).dev) ?? null;
  it("copies the blobs a hard link cannot reach (DEST on another filesystem)", { skip: otherFilesystem === null && "no second filesystem here" }, async () => {
    const elsewhere = await mkdtemp(join(otherFilesystem!, "castor-backup-"));
    try {
      const result = assertOk(await castor(["backup", join(elsewhere, "b")], { CASTOR_DATA_DIR: dataDir }), "castor backup to another filesystem");
      assert.match(result.stdout, /; blobs copied\.$/m);
    } finally {
      await rm(elsewhere, { recursive: true, force: true });
    }
  });

  it("refuses a DEST that is not empty, and leaves it as it was", async () => {
    const dest = join(root, "full");
    await mkdir(dest);
    await writeFile(join(dest, "precious"), "keep me");
    assertRefused(await castor(["backup", dest], { CASTOR_DATA_DIR: dataDir }), "backup", /full already exists and is not empty: give a new or empty folder/);
    assert.deepEqual(await readdir(dest), ["precious"]);
    assert.deepEqual(await partialsOf(dest), []);
    assertRefused(
      await castor(["backup", join(dataDir, "backup")], { CASTOR_DATA_DIR: dataDir }),
      "backup",
      /is inside the data dir .*: put the backup outside it/,
    );
  });

  it("backs up into an empty DEST", async () => {
    const dest = join(root, "empty-dest");
    await mkdir(dest);
    assertOk(await castor(["backup", dest], { CASTOR_DATA_DIR: dataDir }), "castor backup into an empty folder");
    assert.ok(existsSync(join(dest, MANIFEST_FILE_NAME)));
  });

  it("refuses to restore into a data dir that is not empty, and replaces it with --force", async () => {
    const target = join(root, "occupied");
    await mkdir(target);
    await writeFile(join(target, "old"), "old data");
    assertRefused(await castor(["restore", backupDir], { CASTOR_DATA_DIR: target }), "restore", /occupied is not empty: .*add --force/);
    assert.deepEqual(await readdir(target), ["old"]);

    const forced = assertOk(await castor(["restore", backupDir, "--force"], { CASTOR_DATA_DIR: target }), "castor restore --force");
    assert.match(forced.stdout, /, replacing what it held,/);
    assert.deepEqual((await readdir(target)).sort(), ["blobs", "metadata.sqlite"]);
    assertOk(await castor(["fsck"], { CASTOR_DATA_DIR: target }), "castor fsck after restore --force");
  });

  it("refuses the scale-out configuration, pointing at pg_dump and bucket versioning", async () => {
    const target = join(root, "never");
    for (const [command, env] of [
      ["backup", { CASTOR_DATA_DIR: dataDir, CASTOR_DATABASE_URL: "postgres://castor@127.0.0.1:1/castor" }],
      ["restore", { CASTOR_DATA_DIR: target, CASTOR_S3_BUCKET: "castor" }],
    ] as const) {
      const result = await castor([command, command === "backup" ? join(root, "never-backup") : backupDir], env);
      assertRefused(
        result,
        command,
        /handles the embedded data dir only, but CASTOR_(DATABASE_URL|S3_BUCKET) selects the scale-out stores: .*pg_dump.*bucket versioning/,
      );
      assert.match(result.stderr, /README\.md's "Backup and restore"/);
    }
    assert.equal(existsSync(join(root, "never-backup")), false);
    assert.equal(existsSync(target), false);
  });

  it("refuses a folder that is no backup, and a backup whose database was changed", async () => {
    const target = join(root, "unrestored");
    assertRefused(await castor(["restore", dataDir], { CASTOR_DATA_DIR: target }), "restore", /is not a castor backup \(it has no castor-backup\.json\)/);
    const damaged = join(root, "damaged");
    assertOk(await castor(["backup", damaged], { CASTOR_DATA_DIR: dataDir }), "castor backup");
    const database = join(damaged, "metadata.sqlite");
    const bytes = await readFile(database);
    bytes[bytes.length - 1] ^= 1;
    await writeFile(database, bytes);
    assertRefused(await castor(["restore", damaged], { CASTOR_DATA_DIR: target }), "restore", /differs from what the backup's manifest recorded/);
    assert.equal(existsSync(target), false, "a data dir the restore created is removed when it fails");
  });

  it("fails, writing no DEST, when a blob the snapshot references is missing", async () => {
    const broken = join(root, "broken-data");
    const source = join(backupDir, "blobs", "xorbs", XORB_HEX.slice(0, 2), XORB_HEX);
    assertOk(await castor(["restore", backupDir], { CASTOR_DATA_DIR: broken }), "castor restore");
    await unlink(join(broken, "blobs", "xorbs", XORB_HEX.slice(0, 2), XORB_HEX));
    assert.ok(existsSync(source), "the backup's copy is another file");
    const dest = join(root, "never-complete");
    assertRefused(
      await castor(["backup", dest], { CASTOR_DATA_DIR: broken }),
      "backup",
      new RegExp(`xorb ${XORB_HEX} that the metadata snapshot references is missing from .*run castor fsck`),
    );
    assert.equal(existsSync(dest), false);
    assert.deepEqual(await partialsOf(dest), []);
  });

  it("answers a bad command line with exit 2, and --help with the usage", async () => {
    for (const args of [["backup"], ["backup", "a", "b"], ["restore"], ["backup", "x", "--progress-every", "0"]]) {
      const result = await castor(args, { CASTOR_DATA_DIR: dataDir });
      assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
      assert.match(result.stderr, /Run 'castor (backup|restore) --help' for usage\.\n$/);
    }
    for (const command of ["backup", "restore"]) {
      const help = await castor([command, "--help"], {});
      assert.equal(help.code, 0);
      assert.match(help.stdout, new RegExp(`^Usage: castor ${command} `));
    }
  });
});

describe("an interrupted castor backup", () => {
  let dataDir: string;

  before(async () => {
    // Thousands of small blobs (unreferenced, which a backup copies like any other) make a backup
    // with --copy long enough to interrupt in the middle.
    dataDir = join(root, "many-blobs");
    await (await SqliteMetadataStore.open(dataDir)).close();
    const blobs = await FsBlobStore.open(join(dataDir, "blobs"));
    for (let i = 0; i < 3000; i += 100) {
      await Promise.all(
        Array.from({ length: 100 }, async (_, j) => {
          const content = `blob ${i + j}\n`;
          const hex = createHash("sha256").update(content).digest("hex");
          const path = blobs.objectPath(blobKeyFromHex("inline", hex));
          await mkdir(dirname(path), { recursive: true });
          await writeFile(path, content);
        }),
      );
    }
  });

  /** Runs `castor backup DEST --copy` and sends `signal` once it has copied its first blob. */
  function interruptedBackup(dest: string, signal: NodeJS.Signals): Promise<CliResult> {
    let sent = false;
    let seen = "";
    return castor(
      ["backup", dest, "--copy", "--progress-every", "1"],
      { CASTOR_DATA_DIR: dataDir },
      {
        onStderr: (text, child) => {
          seen += text;
          if (!sent && /^castor backup: blobs: 1 /m.test(seen)) {
            sent = true;
            child.kill(signal);
          }
        },
      },
    );
  }

  it("removes its partial folder on SIGTERM and never creates DEST", async () => {
    const dest = join(root, "interrupted-term");
    const result = await interruptedBackup(dest, "SIGTERM");
    assertRefused(result, "backup", /interrupted by SIGTERM: no backup was written to /);
    assert.equal(existsSync(dest), false);
    assert.deepEqual(await partialsOf(dest), []);
  });

  it("leaves only a partial folder on SIGKILL; DEST stays free for the next backup", async () => {
    const dest = join(root, "interrupted-kill");
    const result = await interruptedBackup(dest, "SIGKILL");
    assert.equal(result.signal, "SIGKILL");
    assert.equal(existsSync(dest), false);
    assert.equal((await partialsOf(dest)).length, 1);
    const again = assertOk(await castor(["backup", dest], { CASTOR_DATA_DIR: dataDir }), "castor backup after a killed one");
    assert.match(again.stdout, /^blobs +.* 3000 objects \(0 xorbs, 0 shards, 3000 inline files; 0 referenced by the snapshot\)/m);
  });
});
