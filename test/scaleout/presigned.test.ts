/**
 * CASTOR_TRANSFER_MODE=presigned on PostgreSQL + Ceph RGW: reconstruction answers hand out
 * presigned S3 GETs (one range per V2 entry, one per V1 range) that RGW serves directly; what
 * such a URL grants on RGW (exactly its signed range, nothing else, until its expiry); stored
 * xorb objects hold chunk bytes only; and the real clients — castor's own, hf_xet and
 * @huggingface/hub — download byte-exact in this mode.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { upload } from "../../src/client/index.js";
import { hashFromHex, hashToHex } from "../../src/format/hash.js";
import { PostgresMetadataStore } from "../../src/metadata/postgres.js";
import { blobKeyFromHex } from "../../src/storage/blob-store.js";
import { openS3BlobStore, type S3BlobStore } from "../../src/storage/s3.js";
import { requireTestDatabaseUrl } from "../helpers/scaleout-postgres.js";
import { s3TestConfig, s3TestEnv } from "../helpers/scaleout-s3.js";
import { hubFixture, serveExpectingFailure, startCastorServer, type ServerProcess } from "../helpers/server.js";
import {
  assertSameBytes,
  castorClientDownload,
  concatBytes,
  HfXetClient,
  hfJsDownload,
  MIB,
  pseudoRandomBytes,
  readBytes,
  REPO,
  REPO_NAME,
  REPO_TYPE,
  writeTemp,
  type CastorFixture,
} from "../interop/harness.js";

// Fail the whole file, with the way to start the services, when they are not running.
requireTestDatabaseUrl();
const s3Env = s3TestEnv();

const TTL_SECONDS = 600;

interface V2Answer {
  offset_into_first_range: number;
  terms: { hash: string; unpacked_length: number; range: { start: number; end: number } }[];
  xorbs: Record<string, { url: string; ranges: { chunks: { start: number; end: number }; bytes: { start: number; end: number } }[] }[]>;
}

interface V1Answer {
  fetch_info: Record<string, { range: { start: number; end: number }; url: string; url_range: { start: number; end: number } }[]>;
}

describe("CASTOR_TRANSFER_MODE=presigned against Ceph RGW", () => {
  let server: ServerProcess;
  let castor: CastorFixture;
  let objects: S3BlobStore;
  let metadata: PostgresMetadataStore;
  let workDir: string;
  /** `whole` is one block of pseudo-random data; `gapped` reuses its beginning and end around new bytes. */
  const files: Record<"whole" | "gapped" | "small", { bytes: Uint8Array; hash: string }> = {} as never;

  before(async () => {
    workDir = await mkdtemp(join(tmpdir(), "castor-presigned-"));
    server = await startCastorServer({ scaleOut: true, env: { CASTOR_TRANSFER_MODE: "presigned", CASTOR_TRANSFER_URL_TTL: String(TTL_SECONDS) } });
    castor = await hubFixture(server, { repoType: REPO_TYPE, repoName: REPO_NAME });
    objects = await openS3BlobStore({ ...s3TestConfig(server.scaleOut!.s3Prefix, s3Env), stagingDir: join(workDir, "staging") });
    metadata = await PostgresMetadataStore.open(server.settings.CASTOR_DATABASE_URL);

    const block = pseudoRandomBytes("presigned whole", 3 * MIB);
    const contents = {
      whole: block,
      // Its terms use the start and the end of `whole`'s xorb with other chunks between: a
      // xorb read in separate ranges, each of which gets its own V2 entry.
      gapped: concatBytes(block.subarray(0, MIB), pseudoRandomBytes("presigned middle", MIB / 2), block.subarray(2 * MIB)),
      small: pseudoRandomBytes("presigned small", 20_000),
    };
    // One upload: the gapped file deduplicates against the whole one's xorb as it is built.
    const names = Object.keys(contents) as (keyof typeof files)[];
    const paths = await Promise.all(names.map((name) => writeTemp(workDir, `${name}.bin`, contents[name])));
    const uploaded = await upload({ endpoint: server.url, hubToken: castor.hubTokens.write, repo: REPO, files: paths });
    names.forEach((name, i) => {
      files[name] = { bytes: contents[name], hash: uploaded.files[i].fileHash };
    });
  });

  after(async () => {
    objects?.close();
    await metadata?.close();
    // Drops the server's database and deletes its objects too.
    await server?.stop();
    if (workDir) await rm(workDir, { recursive: true, force: true });
  });

  async function reconstruction<T>(version: 1 | 2, hash: string, range?: string): Promise<T> {
    const token = await castor.casToken("read");
    const response = await fetch(`${server.url}/v${version}/reconstructions/${hash}`, {
      headers: { authorization: `Bearer ${token.accessToken}`, ...(range ? { range } : {}) },
    });
    assert.equal(response.status, 200, await response.clone().text());
    return (await response.json()) as T;
  }

  /** The stored object's bytes `[start, end]`, read with castor's own S3 client. */
  async function storedBytes(xorbHex: string, start: number, end: number): Promise<Buffer> {
    const pieces: Buffer[] = [];
    for await (const piece of await objects.read(blobKeyFromHex("xorbs", xorbHex), { offset: start, length: end - start + 1 })) pieces.push(piece as Buffer);
    return Buffer.concat(pieces);
  }

  it("V2 answers hold one presigned RGW GET per range, valid for CASTOR_TRANSFER_URL_TTL, serving exactly that range", async () => {
    const answer = await reconstruction<V2Answer>(2, files.gapped.hash);
    const endpoint = new URL(s3Env.endpoint);
    let entries = 0;
    let xorbsReadInSeveralRanges = 0;
    for (const [xorbHex, xorbEntries] of Object.entries(answer.xorbs)) {
      if (xorbEntries.length > 1) xorbsReadInSeveralRanges++;
      for (const entry of xorbEntries) {
        entries++;
        assert.equal(entry.ranges.length, 1, "one range per entry");
        const url = new URL(entry.url);
        assert.equal(url.host, endpoint.host, "the URL points at the object store, not at castor");
        assert.equal(url.pathname, `/${s3Env.bucket}/${server.scaleOut!.s3Prefix}xorbs/${xorbHex}`);
        assert.equal(url.searchParams.get("X-Amz-Expires"), String(TTL_SECONDS));
        assert.equal(url.searchParams.get("X-Amz-SignedHeaders"), "host;range");
        const { start, end } = entry.ranges[0].bytes;
        const response = await fetch(entry.url, { headers: { range: `bytes=${start}-${end}` } });
        assert.equal(response.status, 206);
        assert.equal(response.headers.get("content-range")?.split("/")[0], `bytes ${start}-${end}`);
        assert.ok(Buffer.from(await response.arrayBuffer()).equals(await storedBytes(xorbHex, start, end)));
      }
    }
    assert.ok(xorbsReadInSeveralRanges > 0, `the gapped file reads some xorb in separate ranges: ${JSON.stringify(answer.xorbs)}`);
    assert.ok(entries >= 2);
  });

  it("V1 answers hold one presigned GET per range", async () => {
    const answer = await reconstruction<V1Answer>(1, files.gapped.hash);
    for (const [xorbHex, entries] of Object.entries(answer.fetch_info)) {
      for (const entry of entries) {
        const { start, end } = entry.url_range;
        const response = await fetch(entry.url, { headers: { range: `bytes=${start}-${end}` } });
        assert.equal(response.status, 206);
        assert.ok(Buffer.from(await response.arrayBuffer()).equals(await storedBytes(xorbHex, start, end)));
      }
    }
  });

  it("a presigned URL is range-restricted on RGW: no Range, another one or a wider one is refused, as is an altered URL", async () => {
    const answer = await reconstruction<V2Answer>(2, files.whole.hash, "bytes=1000-1500000");
    const [xorbHex, entries] = Object.entries(answer.xorbs)[0];
    const { url, ranges } = entries[0];
    const { start, end } = ranges[0].bytes;
    const size = await objects.size(blobKeyFromHex("xorbs", xorbHex));
    assert.ok(size !== null && end < size - 1, "the signed range is a strict part of the object");
    const refusals: (Record<string, string> | undefined)[] = [
      undefined,
      { range: `bytes=0-${size - 1}` },
      { range: `bytes=${start}-${end + 1}` },
      { range: `bytes=${start + 1}-${end}` },
      { range: `bytes=${start}-` },
      { range: `bytes=${start}-${end},${end + 10}-${end + 20}` },
    ];
    for (const headers of refusals) {
      const response = await fetch(url, { headers });
      assert.equal(response.status, 403, `Range ${JSON.stringify(headers?.range ?? null)} must be refused`);
      await response.arrayBuffer();
    }
    // Another object that exists: a shard the upload stored.
    let shardKey: string | undefined;
    for await (const key of objects.list("shards/")) shardKey ??= key;
    assert.ok(shardKey !== undefined);
    const otherObject = url.replace(`/xorbs/${xorbHex}`, `/${shardKey}`);
    const longerLife = url.replace(`X-Amz-Expires=${TTL_SECONDS}`, `X-Amz-Expires=${TTL_SECONDS * 10}`);
    for (const altered of [otherObject, longerLife]) {
      assert.notEqual(altered, url);
      const response = await fetch(altered, { headers: { range: `bytes=${start}-${end}` } });
      assert.equal(response.status, 403, "an altered URL is refused");
      await response.arrayBuffer();
    }
  });

  it("stores xorb objects as chunk bytes only: no footer, no raw chunk hashes", async () => {
    let checked = 0;
    for await (const key of objects.list("xorbs/")) {
      const hex = key.slice("xorbs/".length);
      const record = (await metadata.getXorbs([hashFromHex(hex)])).get(hex);
      assert.ok(record, `xorb ${hex} is recorded`);
      const size = await objects.size(key);
      assert.equal(size, record.serializedLength, "the object is exactly the recorded serialized length");
      assert.equal(size, record.chunks[record.chunks.length - 1].serializedEnd, "it ends where the last chunk ends");
      const bytes = await storedBytes(hex, 0, size - 1);
      for (const chunk of record.chunks) {
        assert.equal(bytes.indexOf(Buffer.from(chunk.hash)), -1, `chunk hash ${hashToHex(chunk.hash)} does not appear in the object`);
      }
      assert.equal(bytes.indexOf(Buffer.from(record.hash)), -1, "the xorb hash does not appear in the object");
      checked++;
    }
    assert.ok(checked > 0);
  });

  /** Requests castor served from log line `from` on that were transfers: none in this mode. */
  const transfersSince = (from: number) => castor.server.requestLog(from).filter((line) => line.path.startsWith("/v1/transfer/"));

  it("castor's client downloads byte-exact, whole files and ranges", async () => {
    const from = castor.server.logLines().length;
    for (const file of Object.values(files)) {
      const output = join(workDir, `castor-${file.hash}.bin`);
      await castorClientDownload(castor, file.hash, output);
      assertSameBytes(await readBytes(output), file.bytes, "castor client download");
    }
    const output = join(workDir, "castor-range.bin");
    await castorClientDownload(castor, files.gapped.hash, output, { start: MIB - 12_345, end: 2 * MIB + 777 });
    assertSameBytes(await readBytes(output), files.gapped.bytes.subarray(MIB - 12_345, 2 * MIB + 778), "castor client range download");
    assert.deepEqual(transfersSince(from), [], "every byte came from the object store");
  });

  it("@huggingface/hub (XetBlob) downloads byte-exact with single-range GETs straight from RGW", async () => {
    for (const file of Object.values(files)) {
      const { bytes, requests } = await hfJsDownload(castor, { hash: file.hash, size: file.bytes.length });
      assertSameBytes(bytes, file.bytes, "hf.js download");
      const fromStore = requests.filter((request) => new URL(request.url).host === new URL(s3Env.endpoint).host);
      assert.ok(fromStore.length > 0, "hf.js fetched from the object store");
      for (const request of fromStore) {
        assert.equal(request.status, 206);
        assert.match(request.range ?? "", /^bytes=\d+-\d+$/, "one range per request");
      }
    }
    const slice: [number, number] = [MIB + 3, 2 * MIB + 11];
    const { bytes } = await hfJsDownload(castor, { hash: files.gapped.hash, size: files.gapped.bytes.length }, { slice });
    assertSameBytes(bytes, files.gapped.bytes.subarray(...slice), "hf.js slice");
  });

  it("hf_xet downloads byte-exact", async () => {
    const client = await HfXetClient.create(castor);
    try {
      const wanted = Object.entries(files).map(([name, file]) => ({ hash: file.hash, size: file.bytes.length, path: join(workDir, `hfxet-${name}.bin`) }));
      const from = castor.server.logLines().length;
      await client.download(wanted);
      for (const [i, file] of Object.values(files).entries()) assertSameBytes(await readBytes(wanted[i].path), file.bytes, "hf_xet download");
      assert.ok(
        castor.server.requestLog(from).some((line) => line.path.includes("/reconstructions/")),
        "hf_xet asked castor for reconstructions",
      );
      assert.deepEqual(transfersSince(from), [], "and fetched every byte from the object store");
    } finally {
      await client.dispose();
    }
  });

  it("refuses to start with a URL lifetime beyond SigV4's 7 days, naming the setting", async () => {
    const { status, output } = await serveExpectingFailure({
      scaleOut: true,
      env: { CASTOR_TRANSFER_MODE: "presigned", CASTOR_TRANSFER_URL_TTL: String(7 * 24 * 3600 + 1) },
    });
    assert.equal(status.code, 2);
    assert.match(output, /CASTOR_TRANSFER_URL_TTL must be at most 604800 seconds .* with CASTOR_TRANSFER_MODE=presigned/);
  });
});
