/**
 * The presigned-URL signer of CASTOR_TRANSFER_MODE=presigned, without a store: every URL must
 * equal, byte for byte, what the AWS SDK's own presigner makes for the same object, range and
 * instant (presigning is local computation, so no endpoint is contacted). What RGW does with the
 * URLs is tested in test/scaleout/presigned.test.ts. Also: V2 rendering with one range per entry.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it } from "node:test";
import { GetObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { MAX_PRESIGNED_TTL_SECONDS, PresignedTransferUrls, rangeHeader, type PresignableStore } from "../../src/cas/presigned-transfer.js";
import {
  planReconstruction,
  prepareFile,
  prepareXorb,
  renderV1,
  renderV2,
  SINGLE_RANGE_V2_LIMITS,
  type RangeUrlSigner,
} from "../../src/cas/reconstruction.js";
import { byteRange, halfOpenByteRange, type ByteRange } from "../../src/format/ranges.js";
import type { QueryReconstructionResponseV2 } from "../../src/format/reconstruction.js";
import { ConfigError } from "../../src/config.js";
import { hashToHex, type Hash } from "../../src/format/hash.js";
import type { FileRecord, XorbRecord } from "../../src/metadata/cas.js";
import { blobKey, type BlobKey } from "../../src/storage/blob-store.js";

const BUCKET = "castor-bucket";
/** 2025-10-09T08:53:20Z, a fixed instant so the SDK and castor sign at the same second. */
const T0 = 1_760_000_000_000;

function hashOf(label: string): Hash {
  return new Uint8Array(createHash("sha256").update(label).digest());
}

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

/** The SDK's presigned GET of `range` of the xorb at the instant `atMs`. */
function sdkUrl(store: PresignableStore, xorb: Hash, range: ByteRange, ttlSeconds: number, atMs: number): Promise<string> {
  const command = new GetObjectCommand({ Bucket: store.bucket, Key: store.objectKeyOf(blobKey("xorbs", xorb)), Range: rangeHeader(range) });
  return getSignedUrl(store.client, command, { expiresIn: ttlSeconds, signingDate: new Date(atMs) });
}

describe("PresignedTransferUrls", () => {
  const setups: { name: string; setup: ClientSetup; prefix: string }[] = [
    { name: "path style on a custom endpoint with a port (Ceph RGW, MinIO)", setup: { endpoint: "http://127.0.0.1:7480" }, prefix: "" },
    { name: "a prefix with spaces, punctuation and non-ASCII characters", setup: { endpoint: "http://s3.internal:9000" }, prefix: "team a/(cas)!*'~ü/" },
    { name: "an endpoint under a path, with its scheme's default port spelled out", setup: { endpoint: "https://gateway.example.com:443/s3" }, prefix: "" },
    { name: "virtual-hosted style on AWS in another region", setup: { region: "eu-west-1", forcePathStyle: false }, prefix: "castor/" },
    {
      name: "temporary credentials (a session token, as from an instance role)",
      setup: { endpoint: "https://s3.example.com", credentials: { accessKeyId: "ASIATEMP", secretAccessKey: "temp/secret+key", sessionToken: "FwoGZXIvYXdzE//token+with/slashes==" } },
      prefix: "p/",
    },
  ];

  for (const { name, setup, prefix } of setups) {
    it(`signs exactly the URL the AWS SDK signs: ${name}`, async () => {
      let now = T0;
      const store = storeOf(clientOf(setup), prefix);
      const signer = await PresignedTransferUrls.create(store, { ttlSeconds: 3600, now: () => now });
      // Across seconds and a change of day (the signing key is per day), several xorbs and ranges.
      const instants = [T0, T0 + 999, T0 + 1000, T0 + 86_400_000 * 3 + 123];
      const cases: [Hash, ByteRange][] = [
        [hashOf("a"), byteRange(0, 0)],
        [hashOf("b"), byteRange(1397, 67_108_863)],
        [hashOf("c"), byteRange(8, 8)],
      ];
      for (const instant of instants) {
        now = instant;
        for (const [xorb, range] of cases) {
          assert.equal(signer.sign(xorb, [range]), await sdkUrl(store, xorb, range, 3600, instant));
        }
      }
      store.client.destroy();
    });
  }

  it("puts the TTL into X-Amz-Expires, the Range into the signed headers and the xorb's object into the path", async () => {
    const store = storeOf(clientOf({ endpoint: "http://127.0.0.1:7480" }), "castor/");
    const signer = await PresignedTransferUrls.create(store, { ttlSeconds: MAX_PRESIGNED_TTL_SECONDS, now: () => T0 });
    const xorb = hashOf("x");
    const url = new URL(signer.sign(xorb, [byteRange(10, 20)]));
    assert.equal(url.pathname, `/${BUCKET}/castor/xorbs/${hashToHex(xorb)}`);
    assert.equal(url.searchParams.get("X-Amz-Expires"), String(MAX_PRESIGNED_TTL_SECONDS));
    assert.equal(url.searchParams.get("X-Amz-SignedHeaders"), "host;range");
    assert.equal(url.searchParams.get("X-Amz-Date"), "20251009T085320Z");
    assert.match(url.searchParams.get("X-Amz-Signature")!, /^[0-9a-f]{64}$/);
    assert.doesNotMatch(url.href, /wJalrXUtnFEMI/, "the secret key never appears in a URL");
    store.client.destroy();
  });

  it("refuses lifetimes SigV4 cannot express, naming the setting", async () => {
    const store = storeOf(clientOf({ endpoint: "http://127.0.0.1:7480" }));
    for (const ttlSeconds of [0, MAX_PRESIGNED_TTL_SECONDS + 1, 1.5]) {
      await assert.rejects(PresignedTransferUrls.create(store, { ttlSeconds }), (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /CASTOR_TRANSFER_URL_TTL/);
        return true;
      });
    }
    store.client.destroy();
  });

  it("signs one range per URL and refuses a range list", async () => {
    const store = storeOf(clientOf({ endpoint: "http://127.0.0.1:7480" }));
    const signer = await PresignedTransferUrls.create(store, { ttlSeconds: 60 });
    assert.throws(() => signer.sign(hashOf("x"), [byteRange(0, 9), byteRange(20, 29)]), /exactly one byte range/);
    assert.throws(() => signer.sign(hashOf("x"), []), /exactly one byte range/);
    store.client.destroy();
  });

  it("follows rotated credentials after refresh()", async () => {
    // The SDK memoizes credentials until shortly before their expiration; these are always near it.
    const expiring = () => new Date(Date.now() + 60_000);
    let current: StaticCredentials = { accessKeyId: "ASIAFIRST", secretAccessKey: "first-secret", sessionToken: "first-token", expiration: expiring() };
    const client = clientOf({ endpoint: "http://127.0.0.1:7480", credentials: async () => current });
    const store = storeOf(client);
    const signer = await PresignedTransferUrls.create(store, { ttlSeconds: 600, now: () => T0 });
    const xorb = hashOf("rotating");
    const range = byteRange(100, 199);
    const before = signer.sign(xorb, [range]);
    assert.equal(before, await sdkUrl(store, xorb, range, 600, T0));

    current = { accessKeyId: "ASIASECOND", secretAccessKey: "second-secret", sessionToken: "second-token", expiration: expiring() };
    assert.equal(signer.sign(xorb, [range]), before, "without refresh() the held credentials are used");
    await signer.refresh();
    const after = signer.sign(xorb, [range]);
    assert.notEqual(after, before);
    assert.match(after, /X-Amz-Credential=ASIASECOND%2F/);
    assert.equal(after, await sdkUrl(store, xorb, range, 600, T0));
    client.destroy();
  });
});

// ---------------------------------------------------------------------------------------------
// V2 with one range per entry

/** A xorb of `count` chunks, 100 serialized bytes and 150 unpacked bytes each. */
function xorbRecord(label: string, count: number): XorbRecord {
  return {
    hash: hashOf(label),
    serializedLength: count * 100,
    uncompressedLength: count * 150,
    chunks: Array.from({ length: count }, (_, i) => ({ hash: hashOf(`${label}/${i}`), uncompressedLength: 150, serializedEnd: (i + 1) * 100 })),
  };
}

class RecordingSigner implements RangeUrlSigner {
  readonly calls: ByteRange[][] = [];
  sign(xorbHash: Hash, ranges: readonly ByteRange[]): string {
    this.calls.push(ranges.map((r) => byteRange(r.start, r.end)));
    return `https://s3.test/${hashToHex(xorbHash)}?r=${ranges.map((r) => `${r.start}-${r.end}`).join(",")}`;
  }
}

type V2Body = QueryReconstructionResponseV2;

describe("renderV2 with SINGLE_RANGE_V2_LIMITS", () => {
  // Terms use chunks [0,2), [5,7), [9,10) of one xorb and [0,1) of another: three separate
  // ranges of the first xorb (gaps between them), which default rendering packs into one entry.
  const a = prepareXorb(xorbRecord("xorb a", 10));
  const b = prepareXorb(xorbRecord("xorb b", 3));
  const terms = [
    { xorbHash: a.hash, chunkStart: 0, chunkEnd: 2, unpackedLength: 300 },
    { xorbHash: b.hash, chunkStart: 0, chunkEnd: 1, unpackedLength: 150 },
    { xorbHash: a.hash, chunkStart: 5, chunkEnd: 7, unpackedLength: 300 },
    { xorbHash: a.hash, chunkStart: 9, chunkEnd: 10, unpackedLength: 150 },
  ];
  const record: FileRecord = { hash: hashOf("file"), size: 900, terms, sha256: null };
  const file = prepareFile(record, new Map([[a.hex, a], [b.hex, b]]));

  it("gives every range its own entry, signed for that range alone, and keeps terms and ranges unchanged", () => {
    const plan = planReconstruction(file, halfOpenByteRange(0, file.size));
    const packedSigner = new RecordingSigner();
    const packed = JSON.parse(renderV2(plan, packedSigner)) as V2Body;
    const singleSigner = new RecordingSigner();
    const single = JSON.parse(renderV2(plan, singleSigner, SINGLE_RANGE_V2_LIMITS)) as V2Body;

    assert.equal(packed.xorbs[a.hex].length, 1, "by default the three ranges of xorb a share one entry");
    assert.equal(packed.xorbs[a.hex][0].ranges.length, 3);
    assert.deepEqual(
      single.xorbs[a.hex].map((entry) => entry.ranges.length),
      [1, 1, 1],
    );
    assert.deepEqual(single.terms, packed.terms);
    assert.equal(single.offset_into_first_range, packed.offset_into_first_range);
    for (const hex of [a.hex, b.hex]) {
      assert.deepEqual(
        single.xorbs[hex].flatMap((entry) => entry.ranges),
        packed.xorbs[hex].flatMap((entry) => entry.ranges),
      );
      for (const entry of single.xorbs[hex]) {
        const [range] = entry.ranges;
        assert.equal(entry.url, `https://s3.test/${hex}?r=${range.bytes.start}-${range.bytes.end}`);
      }
    }
    assert.ok(singleSigner.calls.every((call) => call.length === 1), "only single ranges are ever signed");
    assert.deepEqual(single.xorbs[a.hex].map((entry) => entry.ranges[0].bytes), [
      { start: 0, end: 199 },
      { start: 500, end: 699 },
      { start: 900, end: 999 },
    ]);
  });

  it("renders a presigned signer's URLs into V2 and V1 answers", async () => {
    const store = storeOf(clientOf({ endpoint: "http://127.0.0.1:7480" }), "castor/");
    const signer = await PresignedTransferUrls.create(store, { ttlSeconds: 300, now: () => T0 });
    const plan = planReconstruction(file, halfOpenByteRange(160, 700));
    const v2 = JSON.parse(renderV2(plan, signer, SINGLE_RANGE_V2_LIMITS)) as V2Body;
    for (const [hex, entries] of Object.entries(v2.xorbs)) {
      for (const entry of entries) {
        const xorb = hex === a.hex ? a.hash : b.hash;
        assert.equal(entry.url, await sdkUrl(store, xorb, entry.ranges[0].bytes, 300, T0));
      }
    }
    const v1 = JSON.parse(renderV1(plan, signer)) as { fetch_info: Record<string, { url: string; url_range: ByteRange }[]> };
    for (const [hex, entries] of Object.entries(v1.fetch_info)) {
      for (const entry of entries) assert.equal(entry.url, await sdkUrl(store, hex === a.hex ? a.hash : b.hash, entry.url_range, 300, T0));
    }
    assert.throws(() => renderV2(plan, signer), /exactly one byte range/, "packed entries cannot be presigned");
    store.client.destroy();
  });
});
