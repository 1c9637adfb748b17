/**
 * The S3 store's range presigner (CASTOR_TRANSFER_MODE=presigned), without a store: every URL
 * must equal, byte for byte, what the AWS SDK's own presigner makes for the same object, range
 * and instant (presigning is local computation, so no endpoint is contacted). What RGW does with
 * the URLs is tested in test/scaleout (the S3 contract suite and presigned.test.ts).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { GetObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { hashToHex } from "../../src/format/hash.js";
import { MAX_PRESIGNED_URL_TTL_SECONDS } from "../../src/config.js";
import { blobKey, isBlobStoreError, rangeHeaderOf, type BlobKey, type ByteSpan } from "../../src/storage/blob-store.js";
import { S3RangePresigner, type PresignableStore } from "../../src/storage/s3/range-presigner.js";
import { hashOf } from "../helpers/fixtures.js";

const BUCKET = "castor-bucket";
/** 2025-10-09T08:53:20Z, a fixed instant so the SDK and castor sign at the same second. */
const T0 = 1_760_000_000_000;

interface StaticCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  expiration?: Date;
}

interface ClientSetup {
  endpoint?: string;
  region?: string;
  forcePathStyle?: boolean;
  credentials?: StaticCredentials | (() => Promise<StaticCredentials>);
}

function clientOf(setup: ClientSetup = {}): S3Client {
  return new S3Client({
    region: setup.region ?? "us-east-1",
    ...(setup.endpoint !== undefined ? { endpoint: setup.endpoint } : {}),
    forcePathStyle: setup.forcePathStyle ?? true,
    credentials: setup.credentials ?? { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" },
  });
}

function storeOf(client: S3Client, prefix = ""): PresignableStore {
  return { client, bucket: BUCKET, objectKeyOf: (key: BlobKey) => prefix + key };
}

/** The SDK's presigned GET of `span` of the object at `key` at the instant `atMs`. */
function sdkUrl(store: PresignableStore, key: BlobKey, span: ByteSpan, ttlSeconds: number, atMs: number): Promise<string> {
  const command = new GetObjectCommand({ Bucket: store.bucket, Key: store.objectKeyOf(key), Range: rangeHeaderOf(span) });
  return getSignedUrl(store.client, command, { expiresIn: ttlSeconds, signingDate: new Date(atMs) });
}

describe("S3RangePresigner", () => {
  const setups: { name: string; setup: ClientSetup; prefix: string }[] = [
    { name: "path style on a custom endpoint with a port (Ceph RGW, MinIO)", setup: { endpoint: "http://127.0.0.1:7480" }, prefix: "" },
    { name: "a prefix with spaces, punctuation and non-ASCII characters", setup: { endpoint: "http://s3.internal:9000" }, prefix: "team a/(cas)!*'~ü/" },
    { name: "an endpoint under a path, with its scheme's default port spelled out", setup: { endpoint: "https://gateway.example.com:443/s3" }, prefix: "" },
    { name: "virtual-hosted style on AWS in another region", setup: { region: "eu-west-1", forcePathStyle: false }, prefix: "castor/" },
    {
      name: "temporary credentials (a session token, as from an instance role)",
      setup: {
        endpoint: "https://s3.example.com",
        credentials: { accessKeyId: "ASIATEMP", secretAccessKey: "temp/secret+key", sessionToken: "FwoGZXIvYXdzE//token+with/slashes==" },
      },
      prefix: "p/",
    },
  ];

  for (const { name, setup, prefix } of setups) {
    it(`signs exactly the URL the AWS SDK signs: ${name}`, async () => {
      let now = T0;
      const store = storeOf(clientOf(setup), prefix);
      const signer = await S3RangePresigner.create(store, { ttlSeconds: 3600, now: () => now });
      // Across seconds and a change of day (the signing key is per day), several objects of both kinds and ranges.
      const instants = [T0, T0 + 999, T0 + 1000, T0 + 86_400_000 * 3 + 123];
      const cases: [BlobKey, ByteSpan][] = [
        [blobKey("xorbs", hashOf("a")), { offset: 0, length: 1 }],
        [blobKey("xorbs", hashOf("b")), { offset: 1397, length: 67_108_864 - 1397 }],
        [blobKey("shards", hashOf("c")), { offset: 8, length: 1 }],
      ];
      for (const instant of instants) {
        now = instant;
        for (const [key, span] of cases) {
          assert.equal(signer.presign(key, span), await sdkUrl(store, key, span, 3600, instant));
        }
      }
      store.client.destroy();
    });
  }

  it("puts the TTL into X-Amz-Expires, the Range into the signed headers and the xorb's object into the path", async () => {
    const store = storeOf(clientOf({ endpoint: "http://127.0.0.1:7480" }), "castor/");
    const signer = await S3RangePresigner.create(store, { ttlSeconds: MAX_PRESIGNED_URL_TTL_SECONDS, now: () => T0 });
    const xorb = hashOf("x");
    const url = new URL(signer.presign(blobKey("xorbs", xorb), { offset: 10, length: 11 }));
    assert.equal(url.pathname, `/${BUCKET}/castor/xorbs/${hashToHex(xorb)}`);
    assert.equal(url.searchParams.get("X-Amz-Expires"), String(MAX_PRESIGNED_URL_TTL_SECONDS));
    assert.equal(url.searchParams.get("X-Amz-SignedHeaders"), "host;range");
    assert.equal(url.searchParams.get("X-Amz-Date"), "20251009T085320Z");
    assert.match(url.searchParams.get("X-Amz-Signature")!, /^[0-9a-f]{64}$/);
    assert.doesNotMatch(url.href, /wJalrXUtnFEMI/, "the secret key never appears in a URL");
    store.client.destroy();
  });

  it("refuses a lifetime beyond SigV4's 7 days before signing anything", async () => {
    // loadConfig refuses such a CASTOR_TRANSFER_URL_TTL first; the SDK's template refuses it too.
    const store = storeOf(clientOf({ endpoint: "http://127.0.0.1:7480" }));
    await assert.rejects(S3RangePresigner.create(store, { ttlSeconds: MAX_PRESIGNED_URL_TTL_SECONDS + 1 }), /less than one week/);
    store.client.destroy();
  });

  it("refuses malformed spans and keys without signing", async () => {
    const store = storeOf(clientOf({ endpoint: "http://127.0.0.1:7480" }));
    const signer = await S3RangePresigner.create(store, { ttlSeconds: 60 });
    const key = blobKey("xorbs", hashOf("x"));
    for (const span of [
      { offset: 0, length: 0 },
      { offset: -1, length: 5 },
      { offset: 1.5, length: 2 },
    ]) {
      assert.throws(
        () => signer.presign(key, span),
        (err: unknown) => isBlobStoreError(err, "bad_range"),
      );
    }
    for (const bad of ["xorbs/../x", `XORBS/${"0".repeat(64)}`, `xorbs/${"0".repeat(64)}?x=1`]) {
      assert.throws(
        () => signer.presign(bad as BlobKey, { offset: 0, length: 1 }),
        (err: unknown) => isBlobStoreError(err, "invalid_key"),
      );
    }
    store.client.destroy();
  });

  it("follows rotated credentials after refresh()", async () => {
    // The SDK memoizes credentials until shortly before their expiration; these are always near it.
    const expiring = () => new Date(Date.now() + 60_000);
    let current: StaticCredentials = { accessKeyId: "ASIAFIRST", secretAccessKey: "first-secret", sessionToken: "first-token", expiration: expiring() };
    const client = clientOf({ endpoint: "http://127.0.0.1:7480", credentials: async () => current });
    const store = storeOf(client);
    const signer = await S3RangePresigner.create(store, { ttlSeconds: 600, now: () => T0 });
    const key = blobKey("xorbs", hashOf("rotating"));
    const span = { offset: 100, length: 100 };
    const before = signer.presign(key, span);
    assert.equal(before, await sdkUrl(store, key, span, 600, T0));

    current = { accessKeyId: "ASIASECOND", secretAccessKey: "second-secret", sessionToken: "second-token", expiration: expiring() };
    assert.equal(signer.presign(key, span), before, "without refresh() the held credentials are used");
    await signer.refresh();
    const after = signer.presign(key, span);
    assert.notEqual(after, before);
    assert.match(after, /X-Amz-Credential=ASIASECOND%2F/);
    assert.equal(after, await sdkUrl(store, key, span, 600, T0));
    client.destroy();
  });
});
