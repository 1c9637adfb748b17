/**
 * Storage that is full somewhere castor cannot statfs (the PostgreSQL server's disk, the S3
 * bucket's quota), through the whole app in-process: uploads answer 507 naming that storage,
 * /readyz fails with the reason until an upload stores something again. The real full
 * filesystem is test/e2e/disk-full.test.ts.
 */
import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { S3ServiceException } from "@aws-sdk/client-s3";
import type { FastifyInstance } from "fastify";
import pg from "pg";
import { CasTokenIssuer, CasTokenVerifier } from "../../src/auth/cas-token.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { loadConfig } from "../../src/config.js";
import { CompressionScheme } from "../../src/format/compression.js";
import { hashToHex } from "../../src/format/hash.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { buildCastorApp } from "../../src/http/app.js";
import { createLogger } from "../../src/http/logging.js";
import { OperatorHub } from "../helpers/operator.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import type { MetadataStore } from "../../src/metadata/store.js";
import type { BlobStore } from "../../src/storage/blob-store.js";
import { casDepsForTest } from "../helpers/app.js";
import { casTokenSignedWith } from "../helpers/fixtures.js";
import { splitmix64Bytes } from "../helpers/vectors.js";

const PUBLIC_URL = "https://cas.example.test";
const { privateKey, publicKey } = generateKeyPairSync("ed25519");

let dataDir: string;
let store: MetadataStore;
let app: FastifyInstance;
let writeToken: string;
/** What the next xorb upload fails with, as the backend would throw it; null = it works. */
let failure: { where: "metadata" | "blobs"; error: Error } | null = null;

function postgresDiskFull(): Error {
  const error = new pg.DatabaseError('could not extend file "base/16384/16390": No space left on device', 120, "error");
  error.severity = "ERROR";
  error.code = "53100";
  return error;
}

function s3QuotaExceeded(): Error {
  const sdkError = new S3ServiceException({ name: "QuotaExceeded", $fault: "client", $metadata: { httpStatusCode: 403 }, message: "QuotaExceeded" });
  // As the S3 store rethrows it: its own message, the SDK's error as the cause.
  return new Error("S3 PutObject of xorbs/… failed (HTTP 403): QuotaExceeded", { cause: sdkError });
}

before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "castor-storage-full-"));
  store = await openMetadataStore(loadConfig({ CASTOR_DATA_DIR: dataDir }));
  const hub = new OperatorHub(store);
  await hub.createRepo("model", "alice/bert");
  const deps = await casDepsForTest(store, dataDir, () => PUBLIC_URL);
  const metadata: MetadataStore = Object.create(store, {
    putXorb: {
      value: (...args: Parameters<MetadataStore["putXorb"]>) => (failure?.where === "metadata" ? Promise.reject(failure.error) : store.putXorb(...args)),
    },
  });
  const blobs: BlobStore = Object.create(deps.blobs, {
    beginPut: {
      value: async (...args: Parameters<BlobStore["beginPut"]>) => {
        const staged = await deps.blobs.beginPut(...args);
        if (failure?.where !== "blobs") return staged;
        const { error } = failure;
        // The staging worked; publishing is refused, as a bucket over quota refuses the PutObject.
        return Object.create(staged, { commit: { value: () => staged.abort().then(() => Promise.reject(error)) } });
      },
    },
  });
  app = await buildCastorApp({
    logger: createLogger("silent"),
    store,
    issuer: new CasTokenIssuer(privateKey, 900),
    verifier: new CasTokenVerifier(publicKey),
    publicUrl: () => PUBLIC_URL,
    ...deps,
    xorbs: new XorbIngestService({ blobs, metadata }),
  });
  await app.ready();
  writeToken = await casTokenSignedWith(privateKey, "write");
});

after(async () => {
  await app?.close();
  await store?.close();
  await rm(dataDir, { recursive: true, force: true });
});

let seed = 1n;
function freshXorb(): SerializedXorb {
  seed += 100n;
  return serializeXorb([{ data: splitmix64Bytes(seed, 5000), scheme: CompressionScheme.None }]);
}

const upload = (xorb: SerializedXorb) =>
  app.inject({
    method: "POST",
    url: `/v1/xorbs/default/${hashToHex(xorb.info.hash)}`,
    payload: Buffer.from(xorb.bytes),
    headers: { authorization: `Bearer ${writeToken}` },
  });

async function readiness(): Promise<{ status: number; error?: string }> {
  const response = await app.inject({ method: "GET", url: "/readyz" });
  return { status: response.statusCode, error: response.json().error };
}

describe("storage full beyond the data dir", () => {
  for (const { name, where, error, message, reason } of [
    {
      name: "PostgreSQL's disk (53100)",
      where: "metadata" as const,
      error: postgresDiskFull,
      message: /^The disk of castor's PostgreSQL database \(CASTOR_DATABASE_URL\) is full: free space or grow its volume; nothing was stored/,
      reason:
        /^The disk of castor's PostgreSQL database \(CASTOR_DATABASE_URL\) is full: .*; an upload failed for lack of space and none has stored anything since/,
    },
    {
      name: "the S3 bucket's quota (QuotaExceeded)",
      where: "blobs" as const,
      error: s3QuotaExceeded,
      message: /^castor's S3 bucket \(CASTOR_S3_BUCKET\) is full or over its quota: free space or raise the quota; nothing was stored/,
      reason: /^castor's S3 bucket \(CASTOR_S3_BUCKET\) is full or over its quota: .*; an upload failed for lack of space/,
    },
  ]) {
    it(`answers 507 for ${name}, fails /readyz until an upload stores something`, async () => {
      assert.equal((await readiness()).status, 200);
      failure = { where, error: error() };
      const refused = freshXorb();
      const answer = await upload(refused);
      assert.equal(answer.statusCode, 507, answer.body);
      assert.match(answer.json().error, message);
      assert.deepEqual(await readdir(join(dataDir, "blobs", "tmp")), [], "no temp file");
      const notReady = await readiness();
      assert.equal(notReady.status, 503);
      assert.match(notReady.error!, reason);

      failure = null;
      const stored = await upload(refused);
      assert.equal(stored.statusCode, 200, stored.body);
      assert.deepEqual(stored.json(), { was_inserted: true });
      assert.deepEqual(await readiness(), { status: 200, error: undefined });
    });
  }

  it("does not count an upload of an already recorded xorb as proof of room", async () => {
    const known = freshXorb();
    assert.equal((await upload(known)).statusCode, 200);
    failure = { where: "metadata", error: postgresDiskFull() };
    assert.equal((await upload(freshXorb())).statusCode, 507);
    assert.deepEqual((await upload(known)).json(), { was_inserted: false }, "answered from the records");
    assert.equal((await readiness()).status, 503);
    failure = null;
  });
});
