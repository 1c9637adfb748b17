/**
 * A server killed (SIGKILL, no chance to clean up) in the middle of a large xorb upload: after
 * a restart on the same data dir nothing partial is visible, the start-up sweep has emptied
 * the staging folder, and the client's retry succeeds.
 */
import assert from "node:assert/strict";
import { request as httpRequest, type ClientRequest } from "node:http";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, it } from "node:test";
import { loadOrCreateKeys } from "../../src/auth/keys.js";
import { CompressionScheme } from "../../src/format/compression.js";
import { hashToHex } from "../../src/format/hash.js";
import { serializeXorb } from "../../src/format/xorb.js";
import { casTokenSignedWith } from "../helpers/fixtures.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";
import { tempDirForFile } from "../helpers/temp-dir.js";
import { splitmix64Bytes } from "../helpers/vectors.js";
import { until } from "../helpers/wait.js";

/** 8 MiB of incompressible chunks: large enough to still be arriving when the server dies. */
const CHUNKS = 64;
const CHUNK_BYTES = 128 * 1024;
const SENT_BEFORE_CRASH = 3 * 1024 * 1024;

let server: ServerProcess | undefined;
// Registered before the data dir's removal, so the server is dead before its folder goes.
after(() => server?.stop("SIGKILL"));
const dataDir = tempDirForFile("castor-crash-xorb-");

/**
 * A write token signed with the data dir's key, as the hub would issue it. Minted here rather
 * than through the CLI and the hub (xorb uploads do not look at the repository) to keep this
 * test, which already starts two servers, short; xorb-upload.test.ts covers the hub path.
 */
async function writeToken(): Promise<string> {
  const keys = await loadOrCreateKeys({ dataDir: dataDir.path, signingKeyFile: null, urlKey: null, dedupKeySeed: null });
  return casTokenSignedWith(keys.jwtSigningKey, "write");
}

const tempDir = () => join(dataDir.path, "blobs", "tmp");
const blobPath = (hex: string) => join(dataDir.path, "blobs", "xorbs", hex.slice(0, 2), hex);

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** Bytes staged in the temp folder so far (the upload in progress). */
async function stagedBytes(): Promise<number> {
  let total = 0;
  for (const name of await readdir(tempDir()).catch(() => [])) total += (await stat(join(tempDir(), name)).catch(() => ({ size: 0 }))).size;
  return total;
}

function write(request: ClientRequest, bytes: Uint8Array): Promise<void> {
  return new Promise((resolve, reject) => request.write(bytes, (error) => (error ? reject(error) : resolve())));
}

it("leaves nothing partial after a SIGKILL mid-upload, and the retried upload succeeds", async () => {
  const token = await writeToken();
  server = await startCastorServer({ dataDir: dataDir.path });

  const xorb = serializeXorb(
    Array.from({ length: CHUNKS }, (_, i) => ({ data: splitmix64Bytes(BigInt(i) + 77n, CHUNK_BYTES), scheme: CompressionScheme.None })),
  );
  const hex = hashToHex(xorb.info.hash);
  const path = `/v1/xorbs/default/${hex}`;

  // Send part of the body, announcing all of it.
  const request = httpRequest(`${server.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-length": String(xorb.bytes.length) },
  });
  const outcome = new Promise<string>((resolve) => {
    request.on("response", (response) => resolve(`answered ${response.statusCode}`));
    request.on("error", (error) => resolve(`failed: ${(error as NodeJS.ErrnoException).code ?? error.message}`));
  });
  for (let at = 0; at < SENT_BEFORE_CRASH; at += 256 * 1024) await write(request, xorb.bytes.subarray(at, at + 256 * 1024));
  // Kill only once the server is demonstrably staging this upload.
  await until(async () => (await stagedBytes()) > 0, "the upload to be staged before the server dies", 5000, 20);

  const status = await server.stop("SIGKILL");
  assert.equal(status.signal, "SIGKILL");
  assert.match(await outcome, /^failed: /, "the client sees the connection die, never an answer");
  assert.ok((await readdir(tempDir())).length > 0, "the crash left a partial temp file behind");
  assert.equal(await exists(blobPath(hex)), false, "nothing was published");

  server = await startCastorServer({ dataDir: dataDir.path });
  assert.deepEqual(await readdir(tempDir()), [], "the start-up sweep removed the partial upload");
  const headers = { authorization: `Bearer ${token}` };

  const before = await fetch(`${server.url}${path}`, { method: "HEAD", headers });
  assert.equal(before.status, 404, "no metadata for the interrupted xorb");
  assert.equal(await exists(blobPath(hex)), false);

  const retry = await fetch(`${server.url}${path}`, { method: "POST", headers, body: xorb.bytes });
  assert.equal(retry.status, 200);
  assert.equal(await retry.text(), '{"was_inserted":true}');
  const afterRetry = await fetch(`${server.url}${path}`, { method: "HEAD", headers });
  assert.equal(afterRetry.status, 200);
  assert.equal(afterRetry.headers.get("content-length"), String(xorb.bytes.length));
  assert.equal((await stat(blobPath(hex))).size, xorb.bytes.length);
  assert.deepEqual(await readdir(tempDir()), []);
});
