/**
 * The S3 blob store against a real S3 implementation (Ceph RGW, started by
 * `scripts/services.sh start`): the shared contract suite, then what only S3 has — prefixes,
 * multipart, presigned URLs, retries through a fault-injecting proxy, bounded-memory staging.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readdir, rm, stat, utimes, writeFile } from "node:fs/promises";
import http, { type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import v8 from "node:v8";
import { runInNewContext } from "node:vm";
import { CreateMultipartUploadCommand, HeadObjectCommand, ListMultipartUploadsCommand, ListObjectsV2Command, PutObjectCommand } from "@aws-sdk/client-s3";
import { blobKey, blobKeyFromHex, rangeHeaderOf, type BlobKey } from "../../src/storage/blob-store.js";
import { FsBlobStore } from "../../src/storage/fs.js";
import { openBlobStore } from "../../src/storage/open.js";
import { openS3BlobStore, S3BlobStore } from "../../src/storage/s3.js";
import { collect, readAll, runBlobStoreContract } from "../contract/blob-store.js";
import { deleteS3Prefix, freshS3Prefix, openS3TestStore, s3TestClient, s3TestConfig, s3TestEnv, type S3TestStore } from "../helpers/scaleout-s3.js";

// Fails the whole file, with the way to start the services, when they are not running.
const env = s3TestEnv();

const MiB = 1024 * 1024;

runBlobStoreContract(
  "S3 (Ceph RGW)",
  async () => {
    const { store, cleanup } = await openS3TestStore();
    return { store, cleanup };
  },
  { rangePresigning: true },
);

async function withS3Store(body: (opened: S3TestStore) => Promise<void>, overrides: Parameters<typeof openS3TestStore>[0] = {}): Promise<void> {
  const opened = await openS3TestStore(overrides);
  try {
    await body(opened);
  } finally {
    await opened.cleanup();
  }
}

const randomKey = (): BlobKey => blobKey("xorbs", randomBytes(32));
const keyStartingWith = (hexStart: string): BlobKey => blobKeyFromHex("xorbs", hexStart + randomBytes(32).toString("hex").slice(hexStart.length));

async function etagOf(opened: S3TestStore, key: BlobKey): Promise<string> {
  const client = s3TestClient(opened.env);
  try {
    const head = await client.send(new HeadObjectCommand({ Bucket: opened.env.bucket, Key: opened.store.objectKeyOf(key) }));
    return head.ETag ?? "";
  } finally {
    client.destroy();
  }
}

/** A multipart object's ETag is `"<md5 of the part md5s>-<part count>"`; a single PUT's has no dash. */
function partCountOf(etag: string): number {
  const match = /-(\d+)"?$/.exec(etag);
  return match ? Number(match[1]) : 1;
}

// ---------------------------------------------------------------------------------------------
// A proxy between the store and RGW that injects one kind of failure into chosen requests.

type FaultAction =
  /** Pass the request and answer through untouched. */
  | "forward"
  /** Read the request, answer 503 SlowDown-style without telling RGW. */
  | "fail503"
  /** Drop the connection once part of the request body has arrived. */
  | "resetMidUpload"
  /** Forward the request, let RGW act on it, but tell the client 503 (the answer got lost). */
  | "loseAnswer"
  /** Forward the answer's headers and at least its first 64 KiB, then drop the connection. */
  | "cutResponse";

interface SeenRequest {
  method: string;
  path: string;
  range: string | undefined;
  action: FaultAction;
}

interface FaultyProxy {
  url: string;
  seen: SeenRequest[];
  close(): Promise<void>;
}

const INJECTED_503 = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected by the test proxy</Message></Error>';

async function startFaultyProxy(target: string, choose: (req: IncomingMessage, seenBefore: SeenRequest[]) => FaultAction): Promise<FaultyProxy> {
  const seen: SeenRequest[] = [];
  const answer503 = (res: http.ServerResponse) => {
    res.writeHead(503, { "content-type": "application/xml", "content-length": Buffer.byteLength(INJECTED_503) });
    res.end(INJECTED_503);
  };
  const server = http.createServer((req, res) => {
    const action = choose(req, seen);
    seen.push({ method: req.method!, path: req.url!, range: req.headers.range, action });
    if (action === "fail503") {
      req.resume();
      req.on("end", () => answer503(res));
      return;
    }
    if (action === "resetMidUpload") {
      let received = 0;
      req.on("data", (piece: Buffer) => {
        received += piece.length;
        if (received >= 32 * 1024) req.socket.destroy();
      });
      req.on("end", () => req.socket.destroy());
      return;
    }
    // The Host header is forwarded unchanged, so RGW checks the signature the client made for the proxy's address.
    const upstream = http.request(`${target}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
      if (action === "loseAnswer") {
        answer.resume();
        answer.on("end", () => answer503(res));
        return;
      }
      res.writeHead(answer.statusCode!, answer.headers);
      if (action === "cutResponse") {
        let sent = 0;
        answer.on("data", (piece: Buffer) => {
          if (sent >= 64 * 1024) return;
          sent += piece.length;
          if (sent < 64 * 1024) {
            res.write(piece);
            return;
          }
          answer.destroy();
          // Closed only once the bytes are out, so the client surely gets a part of the body first.
          res.write(piece, () => res.socket?.destroy());
        });
        return;
      }
      answer.pipe(res);
    });
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Requests for the object of `key` (not the probe, HEAD-before-PUT and cleanup traffic around it). */
function requestsFor(proxy: FaultyProxy, store: S3BlobStore, key: BlobKey, method: string): SeenRequest[] {
  const path = `/${env.bucket}/${store.objectKeyOf(key)}`;
  return proxy.seen.filter((request) => request.method === method && request.path.split("?")[0] === path);
}

async function withProxiedStore(
  choose: (req: IncomingMessage, seenBefore: SeenRequest[]) => FaultAction,
  body: (opened: S3TestStore, proxy: FaultyProxy) => Promise<void>,
  overrides: Parameters<typeof openS3TestStore>[0] = {},
): Promise<void> {
  const proxy = await startFaultyProxy(env.endpoint, choose);
  try {
    await withS3Store((opened) => body(opened, proxy), { endpoint: proxy.url, ...overrides });
  } finally {
    await proxy.close();
  }
}

/** Chooses `action` for the first `count` requests matching `matches`, "forward" for the rest. */
function firstMatching(count: number, action: FaultAction, matches: (req: IncomingMessage) => boolean) {
  let left = count;
  return (req: IncomingMessage): FaultAction => {
    if (left > 0 && matches(req)) {
      left--;
      return action;
    }
    return "forward";
  };
}

const isObjectPut = (req: IncomingMessage) => req.method === "PUT" && /\/xorbs\//.test(req.url ?? "");
const isObjectGet = (req: IncomingMessage) => req.method === "GET" && /\/xorbs\//.test(req.url ?? "");

// ---------------------------------------------------------------------------------------------

describe("S3BlobStore", () => {
  describe("layout and listing", () => {
    it("keeps objects under its prefix, invisible to a store on another prefix", () =>
      withS3Store(async (opened) =>
        withS3Store(async (neighbour) => {
          const key = randomKey();
          const body = randomBytes(100);
          await opened.store.putIfAbsent(key, body);
          assert.equal(opened.store.objectKeyOf(key), `${opened.prefix}${key}`);
          const client = s3TestClient(env);
          try {
            const listing = await client.send(new ListObjectsV2Command({ Bucket: env.bucket, Prefix: opened.prefix }));
            assert.deepEqual(
              listing.Contents?.map((entry) => entry.Key),
              [`${opened.prefix}${key}`],
            );
          } finally {
            client.destroy();
          }
          assert.equal(await neighbour.store.exists(key), false);
          assert.deepEqual(await collect(neighbour.store.list()), []);
          assert.deepEqual(await neighbour.store.putIfAbsent(key, randomBytes(5)), { inserted: true });
          assert.equal(await opened.store.size(key), 100, "the neighbour's put must not touch this prefix");
        }),
      ));

    it("lists across many pages, skipping stray objects under the prefix", () =>
      withS3Store(
        async (opened) => {
          const keys = ["00", "3a", "3b", "7f", "80", "c4", "ff"].map(keyStartingWith);
          for (const key of keys) await opened.store.putIfAbsent(key, randomBytes(3));
          const client = s3TestClient(env);
          try {
            for (const stray of ["xorbs/notes.txt", `xorbs/${"A".repeat(64)}`, "castor-probe/left-over", "tmp/x.part"]) {
              await client.send(new PutObjectCommand({ Bucket: env.bucket, Key: opened.prefix + stray, Body: "stray" }));
            }
          } finally {
            client.destroy();
          }
          assert.deepEqual(await collect(opened.store.list()), [...keys].sort());
          assert.deepEqual(await collect(opened.store.list("xorbs/3")), keys.slice(1, 3));
        },
        { listPageSize: 2 },
      ));

    it("normalizes the prefix to end in one slash and refuses unsafe ones", async () => {
      const stagingDir = await mkdtemp(join(tmpdir(), "castor-s3-prefix-"));
      try {
        const bare = freshS3Prefix().slice(0, -1);
        const store = await openS3BlobStore({ ...s3TestConfig(bare), stagingDir });
        try {
          assert.equal(store.prefix, `${bare}/`);
        } finally {
          store.close();
          await deleteS3Prefix(`${bare}/`);
        }
        for (const prefix of ["/leading", "tab\there", "back\\slash", "x".repeat(600)]) {
          await assert.rejects(openS3BlobStore({ ...s3TestConfig(prefix), stagingDir }), RangeError, JSON.stringify(prefix));
        }
      } finally {
        await rm(stagingDir, { recursive: true, force: true });
      }
    });
  });

  describe("opening", () => {
    it("names the setting to fix when the bucket is missing or the credentials are wrong", async () => {
      const stagingDir = await mkdtemp(join(tmpdir(), "castor-s3-open-"));
      try {
        const config = s3TestConfig();
        await assert.rejects(
          openS3BlobStore({ ...config, bucket: `castor-missing-${randomBytes(4).toString("hex")}`, stagingDir }),
          /does not exist: create it, or set CASTOR_S3_BUCKET/,
        );
        await assert.rejects(
          openS3BlobStore({ ...config, secretAccessKey: "not-the-secret-key-0000000000000000000000", stagingDir }),
          /refused access: check CASTOR_S3_ACCESS_KEY_ID/,
        );
        await assert.rejects(openS3BlobStore({ ...config, secretAccessKey: null, stagingDir }), /both an access key id and a secret/);
      } finally {
        await rm(stagingDir, { recursive: true, force: true });
      }
    });

    it("opens the store the configuration names", async () => {
      const dataDir = await mkdtemp(join(tmpdir(), "castor-open-blobs-"));
      const prefix = freshS3Prefix();
      try {
        const s3 = await openBlobStore({ dataDir, s3: s3TestConfig(prefix) });
        assert.ok(s3 instanceof S3BlobStore);
        const key = randomKey();
        const staged = await s3.beginPut(key);
        assert.equal((await readdir(join(dataDir, "s3-staging"))).length, 1, "bodies are staged under the data dir");
        staged.writable.end(randomBytes(10));
        assert.deepEqual(await staged.commit(), { inserted: true });
        assert.equal(await s3.size(key), 10);
        s3.close();

        const fs = await openBlobStore({ dataDir, s3: null });
        assert.ok(fs instanceof FsBlobStore);
        assert.equal(fs.root, join(dataDir, "blobs"));
      } finally {
        await deleteS3Prefix(prefix);
        await rm(dataDir, { recursive: true, force: true });
      }
    });
  });

  describe("large bodies", () => {
    const size = 16 * MiB + 3 * MiB + 123;

    it("uploads a body over 16 MiB in parts where multipart is enabled, and reads it back whole and across a part boundary", () =>
      withS3Store(
        async (opened) => {
          assert.equal(opened.store.usesMultipart, true);
          const body = randomBytes(size);
          const streamed = randomKey();
          assert.deepEqual(await opened.store.putIfAbsent(streamed, Readable.from([body.subarray(0, 7 * MiB), body.subarray(7 * MiB)])), {
            inserted: true,
          });
          assert.equal(partCountOf(await etagOf(opened, streamed)), 4, "5 + 5 + 5 + 4 MiB parts");
          assert.ok((await readAll(await opened.store.read(streamed))).equals(body));
          const across = { offset: 5 * MiB - 10, length: 20 };
          assert.ok((await readAll(await opened.store.read(streamed, across))).equals(body.subarray(across.offset, across.offset + 20)));

          const staged = await opened.store.beginPut(randomKey());
          await pipeline(Readable.from([body]), staged.writable);
          assert.deepEqual(await staged.commit(), { inserted: true });
          assert.equal(partCountOf(await etagOf(opened, staged.key)), 4);
          assert.equal(await opened.store.size(staged.key), size);

          const client = s3TestClient(env);
          try {
            const uploads = await client.send(new ListMultipartUploadsCommand({ Bucket: env.bucket, Prefix: opened.prefix }));
            assert.deepEqual(uploads.Uploads ?? [], [], "no multipart upload is left open");
          } finally {
            client.destroy();
          }
        },
        { conditionalMultipart: true, partSizeBytes: 5 * MiB },
      ));

    it("with the probed default, keeps exactly one of three concurrent large puts", () =>
      withS3Store(async (opened) => {
        const key = randomKey();
        const bodies = [randomBytes(size), randomBytes(size), randomBytes(size)];
        const outcomes = await Promise.all(bodies.map((body) => opened.store.putIfAbsent(key, Readable.from([body]))));
        const winners = outcomes.flatMap((outcome, index) => (outcome.inserted ? [index] : []));
        assert.equal(winners.length, 1, `exactly one put inserts, got ${JSON.stringify(outcomes)}`);
        assert.ok((await readAll(await opened.store.read(key))).equals(bodies[winners[0]]), "the winner's bytes are stored");
        // Whichever way the probe decided, the upload path matches it.
        assert.equal(partCountOf(await etagOf(opened, key)) > 1, opened.store.usesMultipart);
      }));
  });

  describe("presigned GET", () => {
    it("refuses tampered URLs: a forged signature, another object, a longer life", () =>
      withS3Store(async (opened) => {
        const key = randomKey();
        const other = randomKey();
        await opened.store.putIfAbsent(key, randomBytes(10_000));
        await opened.store.putIfAbsent(other, randomBytes(10_000));
        const span = { offset: 1000, length: 2345 };
        const url = (await opened.store.createRangePresigner({ ttlSeconds: 60 })).presign(key, span);
        assert.match(url, /X-Amz-SignedHeaders=host%3Brange/);
        const granted = await fetch(url, { headers: { Range: rangeHeaderOf(span) } });
        assert.equal(granted.status, 206, "the untampered URL works");
        await granted.arrayBuffer();

        const signature = /X-Amz-Signature=([0-9a-f]+)/.exec(url)![1];
        const forgedSignature = url.replace(signature, (signature[0] === "0" ? "1" : "0") + signature.slice(1));
        const otherObject = url.replace(opened.store.objectKeyOf(key), opened.store.objectKeyOf(other));
        const longerLife = url.replace("X-Amz-Expires=60", "X-Amz-Expires=600");
        for (const forged of [forgedSignature, otherObject, longerLife]) {
          assert.notEqual(forged, url);
          const refused = await fetch(forged, { headers: { Range: rangeHeaderOf(span) } });
          assert.equal(refused.status, 403, "a tampered URL must be refused");
          await refused.arrayBuffer();
        }
      }));
  });

  describe("retries", () => {
    it("re-sends a streamed upload that the store answered with 503", () =>
      withProxiedStore(firstMatching(1, "fail503", isObjectPut), async ({ store }, proxy) => {
        const key = randomKey();
        const body = randomBytes(300_000);
        assert.deepEqual(await store.putIfAbsent(key, Readable.from([body])), { inserted: true });
        assert.deepEqual(
          requestsFor(proxy, store, key, "PUT").map((request) => request.action),
          ["fail503", "forward"],
        );
        assert.ok((await readAll(await store.read(key))).equals(body));
      }));

    it("re-sends an upload whose connection dropped mid-body", () =>
      withProxiedStore(firstMatching(1, "resetMidUpload", isObjectPut), async ({ store }, proxy) => {
        const key = randomKey();
        const body = randomBytes(2 * MiB);
        const staged = await store.beginPut(key);
        await pipeline(Readable.from([body]), staged.writable);
        assert.deepEqual(await staged.commit(), { inserted: true });
        assert.deepEqual(
          requestsFor(proxy, store, key, "PUT").map((request) => request.action),
          ["resetMidUpload", "forward"],
        );
        assert.ok((await readAll(await store.read(key))).equals(body));
      }));

    it("reports a put as inserted when its success was lost and the retry met its own object", () =>
      withProxiedStore(firstMatching(1, "loseAnswer", isObjectPut), async ({ store }, proxy) => {
        const key = randomKey();
        const body = randomBytes(50_000);
        assert.deepEqual(await store.putIfAbsent(key, Readable.from([body])), { inserted: true });
        assert.equal(requestsFor(proxy, store, key, "PUT").length, 2, "the retry met 412 from the first attempt's object");
        assert.deepEqual(await store.putIfAbsent(key, randomBytes(10)), { inserted: false }, "a genuinely second put is still refused");
        assert.ok((await readAll(await store.read(key))).equals(body));
      }));

    it("gives up after maxAttempts and stores nothing", () =>
      withProxiedStore(
        (req) => (isObjectPut(req) ? "fail503" : "forward"),
        async ({ store }, proxy) => {
          const key = randomKey();
          await assert.rejects(store.putIfAbsent(key, Readable.from([randomBytes(1000)])), /HTTP 503/);
          assert.equal(requestsFor(proxy, store, key, "PUT").length, 3);
          assert.equal(await store.exists(key), false);
        },
        { maxAttempts: 3 },
      ));

    it("retries a GET the store answered with 503, and resumes one whose body broke off", () =>
      withProxiedStore(
        (req, seenBefore) => {
          if (!isObjectGet(req)) return "forward";
          const earlier = seenBefore.filter((request) => request.method === "GET" && /\/xorbs\//.test(request.path)).length;
          return earlier === 0 ? "fail503" : earlier === 2 ? "cutResponse" : "forward";
        },
        async ({ store }, proxy) => {
          const key = randomKey();
          const body = randomBytes(3 * MiB);
          await store.putIfAbsent(key, body);
          const span = { offset: 12_345, length: 2 * MiB };
          // GET 1: 503, retried by the SDK as GET 2.
          assert.ok((await readAll(await store.read(key, { offset: 0, length: 100 }))).equals(body.subarray(0, 100)));
          // GET 3 breaks off after 64 KiB; GET 4 asks for the rest.
          assert.ok((await readAll(await store.read(key, span))).equals(body.subarray(span.offset, span.offset + span.length)));
          const gets = requestsFor(proxy, store, key, "GET");
          assert.deepEqual(
            gets.map((request) => request.action),
            ["fail503", "forward", "cutResponse", "forward"],
          );
          const resumedFrom = Number(/^bytes=(\d+)-/.exec(gets[3].range ?? "")?.[1]);
          assert.ok(resumedFrom >= span.offset + 64 * 1024 && resumedFrom < span.offset + span.length, `resumed at ${resumedFrom}`);
          assert.equal(gets[3].range, `bytes=${resumedFrom}-${span.offset + span.length - 1}`);
        },
      ));
  });

  describe("staging", () => {
    it("stages concurrent bodies on disk, keeping memory flat", () =>
      withS3Store(async (opened) => {
        v8.setFlagsFromString("--expose-gc");
        const gc = runInNewContext("gc") as () => void;
        /** Buffer memory held by live objects. V8 frees dead buffers' memory after a GC, not in it: give it a turn. */
        const liveBufferBytes = async () => {
          gc();
          await new Promise((resolve) => setImmediate(resolve));
          gc();
          return process.memoryUsage().arrayBuffers;
        };
        const writers = 8;
        const bodySize = 16 * MiB;
        const totalMiB = (writers * bodySize) / MiB;
        const pieceSize = 64 * 1024;
        // Bodies made piece by piece, so only the store can hold them whole.
        const digests: string[] = [];
        const source = (index: number) =>
          Readable.from(
            (async function* () {
              const hash = createHash("sha256");
              for (let at = 0; at < bodySize; at += pieceSize) {
                const piece = randomBytes(pieceSize);
                hash.update(piece);
                yield piece;
                await new Promise((resolve) => setImmediate(resolve));
              }
              digests[index] = hash.digest("hex");
            })(),
          );

        const baseline = await liveBufferBytes();
        const staged = await Promise.all(Array.from({ length: writers }, () => opened.store.beginPut(randomKey())));
        await Promise.all(staged.map((put, index) => pipeline(source(index), put.writable)));
        // Every body has been received and none uploaded: a store holding them in memory holds all of them now.
        const heldWhileStaged = ((await liveBufferBytes()) - baseline) / MiB;
        assert.ok(heldWhileStaged < 8, `${heldWhileStaged.toFixed(1)} MiB of buffers held with ${totalMiB} MiB of bodies staged`);
        const files = await readdir(opened.stagingDir);
        assert.equal(files.length, writers);
        for (const file of files) assert.equal((await stat(join(opened.stagingDir, file))).size, bodySize, "each body sits whole on disk");

        // While uploading, sampled (dead buffers awaiting release make this noisy): reading
        // whole files to upload them would hold the 128 MiB at once.
        let peak = baseline;
        const sampler = setInterval(() => {
          gc();
          peak = Math.max(peak, process.memoryUsage().arrayBuffers);
        }, 50);
        try {
          assert.deepEqual(
            (await Promise.all(staged.map((put) => put.commit()))).map((outcome) => outcome.inserted),
            Array(writers).fill(true),
          );
        } finally {
          clearInterval(sampler);
        }
        const peakWhileUploading = (peak - baseline) / MiB;
        assert.ok(
          peakWhileUploading < totalMiB / 2,
          `buffer memory peaked ${peakWhileUploading.toFixed(1)} MiB above baseline while uploading ${totalMiB} MiB`,
        );
        assert.deepEqual(await readdir(opened.stagingDir), [], "staging files are removed after commit");

        for (const [index, put] of staged.entries()) {
          const hash = createHash("sha256");
          for await (const piece of await opened.store.read(put.key)) hash.update(piece as Buffer);
          assert.equal(hash.digest("hex"), digests[index]);
        }
      }));

    it("sweeps staging leftovers and multipart uploads, sparing young ones when asked", () =>
      withS3Store(async (opened) => {
        const published = randomKey();
        const body = randomBytes(100);
        await opened.store.putIfAbsent(published, body);
        const old = join(opened.stagingDir, "crashed-old.part");
        await writeFile(old, randomBytes(50));
        const anHourAgo = new Date(Date.now() - 60 * 60 * 1000);
        await utimes(old, anHourAgo, anHourAgo);
        await writeFile(join(opened.stagingDir, "crashed-young.part"), randomBytes(50));
        await writeFile(join(opened.stagingDir, "not-ours.txt"), "castor only removes its own .part files");
        const client = s3TestClient(env);
        try {
          await client.send(new CreateMultipartUploadCommand({ Bucket: env.bucket, Key: opened.store.objectKeyOf(randomKey()) }));
          await client.send(new PutObjectCommand({ Bucket: env.bucket, Key: `${opened.prefix}castor-probe/crashed`, Body: "probe" }));

          assert.equal(await opened.store.sweepTemp({ olderThanMs: 10 * 60 * 1000 }), 1);
          assert.deepEqual((await readdir(opened.stagingDir)).sort(), ["crashed-young.part", "not-ours.txt"]);
          assert.equal(await opened.store.sweepTemp(), 3, "the young staging file, the multipart upload and the probe object");
          assert.deepEqual(await readdir(opened.stagingDir), ["not-ours.txt"]);
          const uploads = await client.send(new ListMultipartUploadsCommand({ Bucket: env.bucket, Prefix: opened.prefix }));
          assert.deepEqual(uploads.Uploads ?? [], []);
          const listing = await client.send(new ListObjectsV2Command({ Bucket: env.bucket, Prefix: opened.prefix }));
          assert.deepEqual(
            listing.Contents?.map((entry) => entry.Key),
            [opened.store.objectKeyOf(published)],
          );
        } finally {
          client.destroy();
        }
        assert.ok((await readAll(await opened.store.read(published))).equals(body));
        await assert.rejects(opened.store.sweepTemp({ olderThanMs: -1 }), RangeError);
      }));
  });
});
