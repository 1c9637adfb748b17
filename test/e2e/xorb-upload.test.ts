/**
 * Xorb upload end to end: a real `castor serve` process, tokens from the hub operation, bodies
 * sent the way real clients send them (no Content-Type), and every refusal of
 * docs/protocol.md §11 that concerns xorbs, each checked to leave no trace (no blob file, no
 * metadata row, no temp file).
 */
import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { readFile, readdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { loadOrCreateKeys } from "../../src/auth/keys.js";
import { CompressionScheme } from "../../src/format/compression.js";
import { hashFromHex, hashToHex } from "../../src/format/hash.js";
import { serializeXorb, type SerializedXorb } from "../../src/format/xorb.js";
import { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import { casTokenSignedWith } from "../helpers/fixtures.js";
import { hubFixture, startCastorServer, type ServerProcess } from "../helpers/server.js";
import { fromHex, loadVector, makeData, splitmix64Bytes } from "../helpers/vectors.js";

const MAX_XORB_BYTES = 1024 * 1024;
const vector = loadVector("xorb-small.json");
const VECTOR_HEX: string = vector.expected.xorb_hash;
const VECTOR_BODY = fromHex(vector.body_hex);
const VECTOR_WITH_FOOTER = fromHex(vector.with_footer_hex);

let server: ServerProcess;
let writeToken: string;
let readToken: string;
let expiredToken: string;
/** Every hash a refused upload named: none may ever show up in the metadata. */
const refusedHashes = new Set<string>();

before(async () => {
  server = await startCastorServer({ env: { CASTOR_MAX_XORB_BYTES: String(MAX_XORB_BYTES) } });
  const fixture = await hubFixture(server, { repoType: "model", repoName: "alice/bert" });
  writeToken = (await fixture.casToken("write")).accessToken;
  readToken = (await fixture.casToken("read")).accessToken;
  // Signed with the server's own key, but an hour in the past: valid except for its expiry.
  const keys = await loadOrCreateKeys({ dataDir: server.dataDir, signingKeyFile: null, urlKey: null, dedupKeySeed: null });
  expiredToken = await casTokenSignedWith(keys.jwtSigningKey, "write", { ttlSeconds: 60, now: () => new Date(Date.now() - 3_600_000) });
});

after(async () => {
  await server?.stop();
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/**
 * One request through node:http, so the headers are exactly these: in particular no
 * Content-Type, as hf_xet sends its xorbs.
 */
function send(method: string, path: string, body: Uint8Array | null, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      `${server.url}${path}`,
      { method, headers: body === null ? headers : { "content-length": String(body.length), ...headers } },
      (response) => {
        const parts: Buffer[] = [];
        response.on("data", (part: Buffer) => parts.push(part));
        response.on("end", () => resolve({ status: response.statusCode!, headers: response.headers, text: Buffer.concat(parts).toString("utf8") }));
        response.on("error", reject);
      },
    );
    request.on("error", reject);
    request.end(body ?? undefined);
  });
}

const upload = (hex: string, body: Uint8Array, token: string | null = writeToken, prefix = "default") =>
  send("POST", `/v1/xorbs/${prefix}/${hex}`, body, token === null ? {} : { authorization: `Bearer ${token}` });

const head = (hex: string, token = readToken) => send("HEAD", `/v1/xorbs/default/${hex}`, null, { authorization: `Bearer ${token}` });

/** Sends the headers and `pieces` but never ends the request; resolves with the answer. */
function unfinishedUpload(hex: string, headers: Record<string, string>, pieces: Uint8Array[]): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      `${server.url}/v1/xorbs/default/${hex}`,
      { method: "POST", headers: { authorization: `Bearer ${writeToken}`, ...headers } },
      (response) => {
        const parts: Buffer[] = [];
        response.on("data", (part: Buffer) => parts.push(part));
        response.on("end", () => {
          request.destroy();
          resolve({ status: response.statusCode!, headers: response.headers, text: Buffer.concat(parts).toString("utf8") });
        });
      },
    );
    request.on("error", reject);
    request.flushHeaders();
    for (const piece of pieces) request.write(piece);
  });
}

function assertError(answer: Answer, status: number, message: RegExp): void {
  assert.equal(answer.status, status, answer.text);
  assert.match(String(answer.headers["content-type"]), /^application\/json/);
  const body = JSON.parse(answer.text) as { error: string };
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.match(body.error, message);
}

const blobRoot = () => join(server.dataDir, "blobs");
const blobPath = (hex: string) => join(blobRoot(), "xorbs", hex.slice(0, 2), hex);

async function storedFile(hex: string): Promise<Uint8Array | null> {
  try {
    return new Uint8Array(await readFile(blobPath(hex)));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
}

async function assertNoTrace(hex: string): Promise<void> {
  if (/^[0-9a-f]{64}$/.test(hex)) {
    refusedHashes.add(hex);
    assert.equal((await head(hex)).status, 404, "HEAD finds nothing");
    assert.equal(await storedFile(hex), null, "no blob file");
  }
  assert.deepEqual(await readdir(join(blobRoot(), "tmp")), [], "no temp file");
}

let seed = 1000n;
function freshXorb(options: { footer?: boolean; rawBytes?: number } = {}): SerializedXorb {
  seed++;
  return serializeXorb(
    [
      { data: splitmix64Bytes(seed, options.rawBytes ?? 50_000), scheme: CompressionScheme.None },
      { data: makeData(70_000, 13, Number(seed % 256n)), scheme: CompressionScheme.LZ4 },
      { data: makeData(9_999, 4, 3), scheme: CompressionScheme.ByteGrouping4LZ4 },
    ],
    options,
  );
}

describe("xorb upload against a real server", () => {
  it('stores a xorb sent without Content-Type, answers {"was_inserted":true} once and false afterwards', async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    assert.equal((await head(hex)).status, 404);

    const first = await upload(hex, xorb.bytes);
    assert.equal(first.status, 200, first.text);
    assert.match(String(first.headers["content-type"]), /^application\/json/);
    assert.equal(first.text, '{"was_inserted":true}');
    assert.deepEqual(await storedFile(hex), xorb.bytes);

    const stored = await head(hex);
    assert.equal(stored.status, 200);
    assert.equal(stored.headers["content-length"], String(xorb.bytes.length));

    const again = await upload(hex, xorb.bytes);
    assert.equal(again.status, 200);
    assert.equal(again.text, '{"was_inserted":false}');
    assert.deepEqual(await readdir(join(blobRoot(), "tmp")), []);
  });

  it("accepts the protocol vector with its footer, stores it without, and knows it afterwards", async () => {
    const withFooter = await upload(VECTOR_HEX, VECTOR_WITH_FOOTER);
    assert.equal(withFooter.text, '{"was_inserted":true}');
    assert.deepEqual(await storedFile(VECTOR_HEX), VECTOR_BODY, "the stored bytes are exactly the chunk stream");
    assert.equal((await head(VECTOR_HEX)).headers["content-length"], String(vector.expected.body_length));

    const withoutFooter = await upload(VECTOR_HEX, VECTOR_BODY);
    assert.equal(withoutFooter.text, '{"was_inserted":false}');
  });

  it("never stores a footer of a freshly built xorb", async () => {
    const xorb = freshXorb({ footer: true });
    const hex = hashToHex(xorb.info.hash);
    assert.equal((await upload(hex, xorb.bytes)).text, '{"was_inserted":true}');
    assert.deepEqual(await storedFile(hex), xorb.bytes.subarray(0, xorb.info.serializedLength));
    assert.equal((await head(hex)).headers["content-length"], String(xorb.info.serializedLength));
  });

  it("serves the legacy path /xorbs/default/{hash}", async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    const answer = await send("POST", `/xorbs/default/${hex}`, xorb.bytes, { authorization: `Bearer ${writeToken}` });
    assert.equal(answer.text, '{"was_inserted":true}');
  });

  it("lets exactly one of 16 concurrent identical uploads insert", async () => {
    const xorb = freshXorb({ rawBytes: 120_000 });
    const hex = hashToHex(xorb.info.hash);
    const answers = await Promise.all(Array.from({ length: 16 }, () => upload(hex, xorb.bytes)));
    for (const answer of answers) assert.equal(answer.status, 200, answer.text);
    const inserted = answers.map((answer) => JSON.parse(answer.text).was_inserted as boolean);
    assert.equal(inserted.filter(Boolean).length, 1, JSON.stringify(inserted));
    assert.deepEqual(await storedFile(hex), xorb.bytes);
    assert.deepEqual(await readdir(join(blobRoot(), "tmp")), []);
  });

  it("answers telemetry with 200 and drops it", async () => {
    const answer = await send("POST", "/v1/telemetry", new TextEncoder().encode('{"event":"upload"}'), {
      authorization: `Bearer ${readToken}`,
      "content-type": "application/json",
    });
    assert.equal(answer.status, 200, answer.text);
  });
});

describe("refused xorb uploads (docs/protocol.md §11) leave no trace", () => {
  it("400 for a malformed hash and for another prefix", async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    assertError(await upload(hex.slice(0, 63), xorb.bytes), 400, /Malformed xorb hash.*64 lowercase hexadecimal/);
    assertError(await upload(hex.toUpperCase(), xorb.bytes), 400, /Malformed xorb hash/);
    assertError(await upload(hex, xorb.bytes, writeToken, "default-merkledb"), 400, /Unknown xorb prefix "default-merkledb"/);
    await assertNoTrace(hex);
  });

  it("400 when the body's hash is not the path's", async () => {
    const xorb = freshXorb();
    const claimed = hashToHex(freshXorb().info.hash);
    assertError(
      await upload(claimed, xorb.bytes),
      400,
      new RegExp(`xorb hash of the uploaded chunks is ${hashToHex(xorb.info.hash)}, but the upload names ${claimed}`),
    );
    await assertNoTrace(claimed);
    await assertNoTrace(hashToHex(xorb.info.hash));
  });

  it("400 for bad chunks: header version, unknown scheme, broken LZ4, wrong decoded length, truncation, junk", async () => {
    const cases: [string, (body: Uint8Array, chunk1At: number) => Uint8Array, RegExp][] = [
      ["bad version", (b, chunk1At) => withByte(b, chunk1At, 3), /chunk 1 .*header version is 3/],
      ["unknown scheme", (b) => withByte(b, 4, 99), /unknown compression scheme 99/],
      ["broken LZ4 frame", (b) => b.fill(0, 8, 12), /chunk 0 /],
      ["wrong decoded length", (b) => withByte(b, 5, b[5] - 1), /chunk 0 /],
      ["truncated", (b) => b.subarray(0, b.length - 3), /truncated/],
      ["junk after the chunks", (b) => new Uint8Array([...b, ...new TextEncoder().encode("XETBLOB?")]), /footer/],
    ];
    for (const [what, corrupt, message] of cases) {
      // A fresh xorb each time (chunk 0 LZ4 of 1,000 bytes), so none is already recorded.
      seed++;
      const xorb = serializeXorb([
        { data: makeData(1000, 7, Number(seed % 256n)), scheme: CompressionScheme.LZ4 },
        { data: splitmix64Bytes(seed, 3000), scheme: CompressionScheme.None },
      ]);
      const hex = hashToHex(xorb.info.hash);
      const answer = await upload(hex, corrupt(xorb.bytes.slice(), xorb.info.chunks[0].serializedEnd));
      assert.equal(answer.status, 400, `${what}: ${answer.text}`);
      assertError(answer, 400, new RegExp(`^Xorb rejected: .*${message.source}`));
      await assertNoTrace(hex);
    }
  });

  it("400 for an empty body and for more than 8,192 chunks", async () => {
    const hex = hashToHex(freshXorb().info.hash);
    assertError(await upload(hex, new Uint8Array(0)), 400, /no chunks/);
    const chunkCount = 8193;
    const body = new Uint8Array(chunkCount * 9);
    for (let i = 0; i < chunkCount; i++) body.set([0, 1, 0, 0, 0, 1, 0, 0, i & 0xff], i * 9);
    assertError(await upload(hex, body), 400, /at most 8192 chunks/);
    await assertNoTrace(hex);
  });

  it("413 for a Content-Length over CASTOR_MAX_XORB_BYTES, and for a chunked body as soon as it crosses it", async () => {
    const hex = hashToHex(freshXorb().info.hash);
    // Only the headers are sent: the answer must not wait for a body.
    const refused = await unfinishedUpload(hex, { "content-length": String(MAX_XORB_BYTES + 1) }, []);
    assertError(refused, 413, new RegExp(`Content-Length ${MAX_XORB_BYTES + 1}.* ${MAX_XORB_BYTES}-byte limit`));
    assert.equal(refused.headers.connection, "close");

    // Well-formed raw chunks, sent chunked and never ended: only the cap can stop them. Eight
    // of them cross 1 MiB by 64 bytes, so the server has read everything when it answers.
    const chunks = Array.from({ length: 8 }, (_, i) => serializeXorb([{ data: splitmix64Bytes(BigInt(i), 131_072), scheme: CompressionScheme.None }]).bytes);
    const crossed = await unfinishedUpload(hex, { "transfer-encoding": "chunked" }, chunks);
    assertError(crossed, 413, new RegExp(`exceeds the ${MAX_XORB_BYTES}-byte limit`));
    await assertNoTrace(hex);
  });

  it("401 without a token or with an expired one, 403 with a read token", async () => {
    const xorb = freshXorb();
    const hex = hashToHex(xorb.info.hash);
    assertError(await upload(hex, xorb.bytes, null), 401, /Missing access token/);
    assertError(await upload(hex, xorb.bytes, expiredToken), 401, /expired/);
    assertError(await upload(hex, xorb.bytes, readToken), 403, /needs a write token/);
    await assertNoTrace(hex);
  });

  it("records no metadata row for any refused hash", async () => {
    assert.ok(refusedHashes.size >= 6);
    const store = await SqliteMetadataStore.open(server.dataDir);
    try {
      for (const hex of refusedHashes) assert.equal(await store.getXorbSize(hashFromHex(hex)), null, hex);
    } finally {
      await store.close();
    }
  });
});

/** `bytes` with the byte at `at` set to `value` (changed in place, returned for chaining). */
function withByte(bytes: Uint8Array, at: number, value: number): Uint8Array {
  bytes[at] = value;
  return bytes;
}
