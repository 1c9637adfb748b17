/**
 * A full data disk, for real: a small tmpfs is mounted as the data dir of a real `castor serve`
 * process and filled with junk. Uploads must then answer 507 naming the cause (never a 500
 * "bug"), leave no temp file and no record, the server must keep serving downloads and report
 * the condition at /readyz, and once the junk is gone uploads must work again without a
 * restart. Mounting needs root, as the test suite runs in CI.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, open, readdir, rm, stat, statfs, truncate } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { CompressionScheme } from "../../src/format/compression.js";
import { hashToHex } from "../../src/format/hash.js";
import { shardSha256FromDigest, type ShardFile } from "../../src/format/shard.js";
import { serializeUploadShard } from "../../src/format/shard-writer.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { downloadAnswer, fileOfChunks, type Answer } from "../helpers/reconstruction-answer.js";
import { RESERVE_FILE_NAME } from "../../src/storage/reserve.js";
import { runCastor, TEST_RESERVED_SPACE } from "../helpers/cli.js";
import type { CastorFixture } from "../interop/harness.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { splitmix64Bytes } from "../helpers/vectors.js";

const run = promisify(execFile);
const MiB = 1024 * 1024;
const TMPFS_BYTES = 16 * MiB;
/** CASTOR_MIN_FREE_BYTES of the server: /readyz fails at this much available space or less. */
const MIN_FREE_BYTES = 64 * 1024;
const DATA_DISK_FULL =
  "castor's data disk (CASTOR_DATA_DIR) is full: free space or grow the volume; nothing was stored, send the upload again once there is room";

let mountPoint: string;
let mounted = false;
let server: ServerProcess;
let fixture: CastorFixture;
let writeToken: string;
let readToken: string;

const junkPath = () => join(mountPoint, "junk");
const tempDir = () => join(server.dataDir, "blobs", "tmp");

const post = (path: string, body: Uint8Array) => fetch(`${server.url}${path}`, { method: "POST", body, headers: { authorization: `Bearer ${writeToken}` } });
const get = (path: string, token: string | null = readToken) =>
  fetch(`${server.url}${path}`, { headers: token === null ? {} : { authorization: `Bearer ${token}` } });
const commit = (operation: unknown) =>
  fetch(`${server.url}/api/models/alice/bert/commit/main`, {
    method: "POST",
    headers: { authorization: `Bearer ${fixture.hubTokens.write}`, "content-type": "application/x-ndjson" },
    body: `${JSON.stringify({ key: "header", value: { summary: "a commit", description: "" } })}\n${JSON.stringify(operation)}\n`,
  });
const mainHead = async () => ((await (await get("/api/models/alice/bert/revision/main", fixture.hubTokens.read)).json()) as { sha: string }).sha;
const uploadXorb = (xorb: SerializedXorb) => post(`/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, xorb.bytes);
const headXorb = async (xorb: SerializedXorb) =>
  (await fetch(`${server.url}/v1/xorbs/default/${hashToHex(xorb.info.hash)}`, { method: "HEAD", headers: { authorization: `Bearer ${readToken}` } })).status;
const shardOf = (files: ShardFile[]) => serializeUploadShard({ files, xorbs: [] }, { kind: "xet-core" });

async function expectError(response: Response, status: number, message: string | RegExp): Promise<void> {
  const text = await response.text();
  assert.equal(response.status, status, text);
  assert.match(response.headers.get("content-type") ?? "", /^application\/json/);
  const body = JSON.parse(text) as { error: string };
  assert.deepEqual(Object.keys(body), ["error"]);
  if (typeof message === "string") assert.equal(body.error, message);
  else assert.match(body.error, message);
}

/** The `\n`-terminated JSON frames of a /v2/shards answer. */
async function framesOf(response: Response): Promise<Record<string, unknown>[]> {
  assert.equal(response.status, 200);
  const text = await response.text();
  assert.ok(text.endsWith("\n"), text);
  return text
    .slice(0, -1)
    .split("\n")
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** Fills the tmpfs to the last page: big writes, then page-sized ones, each until ENOSPC. */
async function fillDisk(): Promise<void> {
  const junk = await open(junkPath(), "a");
  try {
    for (const size of [MiB, 4096]) {
      const piece = Buffer.alloc(size, 0x5a);
      for (;;) {
        try {
          await junk.write(piece);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === "ENOSPC") break;
          throw error;
        }
      }
    }
  } finally {
    await junk.close();
  }
  assert.equal(await availableBytes(), 0);
}

/** Shrinks the junk so that about `bytes` become available. */
async function leaveAvailable(bytes: number): Promise<void> {
  await truncate(junkPath(), (await stat(junkPath())).size - bytes);
}

async function availableBytes(): Promise<number> {
  const stats = await statfs(mountPoint);
  return stats.bavail * stats.bsize;
}

async function readiness(): Promise<{ status: number; body: Record<string, string> }> {
  const response = await fetch(`${server.url}/readyz`);
  return { status: response.status, body: (await response.json()) as Record<string, string> };
}

/** Log lines from `from` on that report a refusal for lack of storage / an internal error. */
function logsSince(from: number): { full: Record<string, unknown>[]; internal: Record<string, unknown>[] } {
  const lines = server.logLines().slice(from);
  return {
    full: lines.filter((line) => line.level === 50 && /^storage full/.test(String(line.msg))),
    internal: lines.filter((line) => /internal error|bug/.test(String(line.msg))),
  };
}

let seed = 7000n;
/** `count` chunks of `bytes` random bytes each, different from every other call's. */
function freshChunks(count: number, bytes: number): Uint8Array[] {
  seed += 10_000n;
  return Array.from({ length: count }, (_, i) => splitmix64Bytes(seed + BigInt(i), bytes));
}

/** A xorb of `chunks`, stored uncompressed. */
const xorbOf = (chunks: Uint8Array[]) => serializeXorb(chunks.map((data) => ({ data, scheme: CompressionScheme.None })));
const freshXorb = (count: number, bytes: number) => xorbOf(freshChunks(count, bytes));

/** Stored before the disk fills: what downloads are served from while it is full. */
const storedChunks = freshChunks(4, 20_000);
const stored = xorbOf(storedChunks);
const storedFileBytes = Buffer.concat(storedChunks);
const storedFileSha256 = createHash("sha256").update(storedFileBytes).digest();
/** With its SHA-256, so a commit can name it: committed, it is no garbage for `castor gc`. */
const storedFile = { ...fileOfChunks(stored.info, [0, 1, 2, 3]), sha256: shardSha256FromDigest(storedFileSha256) };

/** Stored before the disk fills and named by no file: garbage for `castor gc` to remove while the disk is full. */
const garbage = freshXorb(8, 20_000);
/** Refused while the disk is full, accepted once it is not. */
const refusedXorb = freshXorb(6, 20_000);
/** Chunk metadata (40 bytes each) far larger than its blob (16 bytes each): its record cannot fit where the blob did. */
const manyChunks = freshXorb(8192, 8);
const refusedShard = shardOf([fileOfChunks(stored.info, [1, 2]), fileOfChunks(stored.info, [3])]);

before(async () => {
  mountPoint = await mkdtemp(join(tmpdir(), "castor-full-disk-"));
  // Fails loudly when not root: this test exists to run on a real full filesystem.
  await run("mount", ["-t", "tmpfs", "-o", `size=${TMPFS_BYTES}`, "castor-full-disk", mountPoint]);
  mounted = true;
  server = await startCastorServer({ dataDir: join(mountPoint, "data"), env: { CASTOR_MIN_FREE_BYTES: String(MIN_FREE_BYTES) } });
  fixture = await hubFixture(server, { repoType: "model", repoName: "alice/bert" });
  writeToken = (await fixture.casToken("write")).accessToken;
  readToken = (await fixture.casToken("read")).accessToken;
  assert.equal((await uploadXorb(stored)).status, 200);
  const registered = await post("/v1/shards", shardOf([storedFile]));
  assert.equal(await registered.text(), '{"result":1}');
  const committed = await commit({
    key: "lfsFile",
    value: { path: "stored.bin", algo: "sha256", oid: storedFileSha256.toString("hex"), size: storedFileBytes.length },
  });
  assert.equal(committed.status, 200, await committed.text());
  assert.equal((await uploadXorb(garbage)).status, 200);
});

after(async () => {
  try {
    await server?.stop();
  } finally {
    if (mounted) await run("umount", [mountPoint]);
    if (mountPoint) await rm(mountPoint, { recursive: true, force: true });
  }
});

describe("a full data disk (a real tmpfs filled to the last page)", () => {
  it("answers a xorb upload 507 naming the full disk, leaves no temp file, and /readyz says why", async () => {
    await fillDisk();
    const logFrom = server.logLines().length;
    await expectError(await uploadXorb(refusedXorb), 507, DATA_DISK_FULL);
    assert.deepEqual(await readdir(tempDir()), [], "no temp file");
    assert.equal(await headXorb(refusedXorb), 404, "nothing recorded");

    const ready = await readiness();
    assert.equal(ready.status, 503);
    assert.match(
      ready.body.error,
      /^castor's data disk \(CASTOR_DATA_DIR\) is full \(0 bytes available, not more than CASTOR_MIN_FREE_BYTES=65536\): free space or grow the volume/,
    );

    const logs = logsSince(logFrom);
    assert.equal(logs.full.length, 1, "logged once, at error level");
    // The upload's first write is its lease (a metadata row, src/metadata/gc.ts), so SQLite may
    // meet the full disk before the blob does.
    assert.match(String(logs.full[0].code), /^(ENOSPC|SQLITE_FULL)$/);
    assert.deepEqual(logs.internal, [], "not called a bug");
  });

  it("keeps serving health, reads and downloads while full", async () => {
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
    assert.equal(await headXorb(stored), 200);
    const answer = await get(`/v1/reconstructions/${hashToHex(storedFile.fileHash)}`);
    assert.equal(answer.status, 200, await answer.clone().text());
    const body = (await answer.json()) as Answer;
    assert.deepEqual(await downloadAnswer(body, storedFileBytes.length), storedFileBytes);
  });

  it("answers a shard upload 507 on /v1/shards and a terminal error frame on /v2/shards", async () => {
    const logFrom = server.logLines().length;
    await expectError(await post("/v1/shards", refusedShard), 507, DATA_DISK_FULL);
    const frames = await framesOf(await post("/v2/shards", refusedShard));
    assert.deepEqual(frames.at(-1), { type: "error", message: DATA_DISK_FULL, retryable: false });
    assert.deepEqual(await readdir(tempDir()), [], "no temp file");
    const logs = logsSince(logFrom);
    assert.equal(logs.full.length, 2, "each refusal logged once");
    assert.deepEqual(logs.internal, []);
  });

  it("answers a hub commit 507 naming the full disk, and the branch stays as it was", async () => {
    const head = await mainHead();
    const inline = { key: "file", value: { path: "notes.txt", encoding: "base64", content: Buffer.from(splitmix64Bytes(99n, 4096)).toString("base64") } };
    const answer = await commit(inline);
    assert.equal(answer.status, 507, await answer.clone().text());
    assert.equal(answer.headers.get("x-error-message"), DATA_DISK_FULL);
    assert.equal(await mainHead(), head);
    assert.deepEqual(await readdir(tempDir()), [], "no temp file");
  });

  it("lets `castor gc` free space on the full disk, in the space reserved for it", async () => {
    assert.equal(await availableBytes(), 0);
    assert.equal((await stat(join(server.dataDir, RESERVE_FILE_NAME))).size, Number(TEST_RESERVED_SPACE), "castor serve made the reserve");
    const result = await runCastor(["gc", "--grace", "0", "--json"], { env: server.settings });
    assert.equal(result.code, 0, `gc: ${result.stdout}${result.stderr}`);
    assert.match(result.stderr, new RegExp(`released the ${TEST_RESERVED_SPACE} bytes reserved for maintenance`));
    assert.match(result.stderr, /reserved \d+ bytes for maintenance again/, "made again once gc freed space");
    const removed = (JSON.parse(result.stdout) as { removed: { xorbs: { objects: number } } }).removed;
    assert.equal(removed.xorbs.objects, 1, "the garbage xorb");
    assert.equal(await headXorb(garbage), 404);
    assert.ok((await availableBytes()) > 0, "its blob's space is free again");
    await fillDisk();
  });

  it("answers 507 when SQLite cannot grow, recording nothing", async () => {
    // Room for the blob (128 KiB) but not for its 320 KiB chunk table in the database.
    await leaveAvailable(192 * 1024);
    const logFrom = server.logLines().length;
    await expectError(await uploadXorb(manyChunks), 507, DATA_DISK_FULL);
    const logs = logsSince(logFrom);
    assert.equal(logs.full.length, 1);
    assert.match(String(logs.full[0].code), /^SQLITE_(FULL|IOERR_SHMSIZE)$/, "SQLite, not the blob store, ran out of space");
    assert.deepEqual(logs.internal, []);
    assert.equal(await headXorb(manyChunks), 404, "nothing recorded");
    assert.deepEqual(await readdir(tempDir()), [], "no temp file");

    // SQLite's log grew into the space left. With a little more freed, the filesystem shows room
    // above the reserve, but no upload has shown there is enough: /readyz still says why not.
    await leaveAvailable(128 * 1024);
    assert.ok((await availableBytes()) > MIN_FREE_BYTES);
    const ready = await readiness();
    assert.equal(ready.status, 503);
    assert.match(
      ready.body.error,
      /^castor's data disk \(CASTOR_DATA_DIR\) is full: free space or grow the volume; an upload failed for lack of space and none has stored anything since/,
    );
  });

  it("takes uploads again once space is freed, without a restart, and /readyz turns 200", async () => {
    await rm(junkPath());
    // The last upload failed; until one succeeds (or the failure is old) readiness still says so.
    assert.equal((await readiness()).status, 503);

    const xorb = await uploadXorb(refusedXorb);
    assert.equal(await xorb.text(), '{"was_inserted":true}');
    assert.equal((await readiness()).status, 200);
    const big = await uploadXorb(manyChunks);
    assert.equal(await big.text(), '{"was_inserted":true}', "the blob left without a record is recorded now");
    const shard = await post("/v1/shards", refusedShard);
    assert.equal(await shard.text(), '{"result":1}');
    assert.equal(await headXorb(manyChunks), 200);
    assert.deepEqual(await readdir(tempDir()), []);
    assert.equal(server.child.exitCode, null, "the same process served it all");
    assert.deepEqual(await readiness(), { status: 200, body: { status: "ok" } });
    const fsck = await runCastor(["fsck"], { env: server.settings });
    assert.equal(fsck.code, 0, `nothing half-written anywhere: ${fsck.stdout}${fsck.stderr}`);
  });
});
