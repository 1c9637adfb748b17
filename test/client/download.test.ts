/**
 * The download path against a scripted CAS built from the protocol vectors: the small xorb
 * (xorb-small.json) and the reconstruction answers of reconstruction.json for its two files
 * (A = chunks 0 1 2, B = chunks 2 0 1). The fake serves exactly the vectors' answers, so these
 * tests pin the client's reading of real-shaped V1/V2 bodies, offsets, truncation, shared
 * ranges, expired URLs and corrupted data; the e2e suite runs the same code against castor.
 */
import assert from "node:assert/strict";
import { readFile, readdir } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { describe, it } from "node:test";
import { decodeChunkStream } from "../../src/client/chunk-stream.js";
import { parseReconstruction } from "../../src/client/reconstruction-query.js";
import { CastorClientError, HttpStatusError, type FetchFunction, type ProgressEvent } from "../../src/client/index.js";
import { hashToHex } from "../../src/format/index.js";
import { fromHex, loadVector } from "../helpers/vectors.js";
import { tempDirForFile } from "../helpers/temp-dir.js";
import { CAS, HUB, casTokenAnswer, fakeHubClient, jsonResponse } from "../helpers/fake-hub.js";

const REPO = "model:alice/bert";
const HUB_TOKEN = "hf_test";

const xorbVector = loadVector("xorb-small.json");
const reconVector = loadVector("reconstruction.json");
const BODY = fromHex(xorbVector.body_hex);
const XORB_HEX: string = xorbVector.expected.xorb_hash;
const CHUNKS: Uint8Array[] = xorbVector.chunk_data_hex.map((hex: string) => fromHex(hex));
const FILES: Record<"A" | "B", { hash: string; data: Buffer }> = {
  A: { hash: reconVector.file_hashes.A, data: Buffer.concat([CHUNKS[0], CHUNKS[1], CHUNKS[2]]) },
  B: { hash: reconVector.file_hashes.B, data: Buffer.concat([CHUNKS[2], CHUNKS[0], CHUNKS[1]]) },
};

interface Case {
  file: "A" | "B";
  range_header: string | null;
  status: number;
  v1?: Record<string, unknown>;
  v2?: Record<string, unknown>;
}
const CASES: Case[] = reconVector.cases;

/** [start, end] of a Range header clamped to the file, as the server reads it. */
function normalized(header: string | null, size: number): string {
  if (header === null) return `0-${size - 1}`;
  const [, a, b] = /^bytes=(\d+)-(\d+)$/.exec(header)!;
  return `${Number(a)}-${Math.min(Number(b), size - 1)}`;
}

interface FakeOptions {
  v2?: "on" | "501";
  /** Transfer URLs handed out before the Nth reconstruction answer are refused with 403. */
  expireUrlsOnce?: boolean;
  corruptByteAt?: number;
  /** Every transfer URL is refused with 403. */
  refuseTransfers?: boolean;
}

function fakeCas(options: FakeOptions = {}) {
  const log: { kind: string; path: string; range: string | null; auth: string | null }[] = [];
  let generation = 0;
  let expired = false;
  const withUrls = (body: Record<string, unknown>): Record<string, unknown> => {
    const url = `${CAS}/transfer/${XORB_HEX}?gen=${generation}`;
    // The vectors hold placeholders such as "<signed url covering all ranges below>".
    return JSON.parse(JSON.stringify(body).replace(/"<[^"]*url[^"]*>"/g, JSON.stringify(url)));
  };

  const fetch: FetchFunction = async (input, init) => {
    const url = new URL(String(input));
    const headers = new Headers(init?.headers);
    const range = headers.get("range");
    const auth = headers.get("authorization");
    if (url.origin === HUB) {
      log.push({ kind: "token", path: url.pathname, range, auth });
      assert.equal(auth, "Bearer hf_test");
      return casTokenAnswer("cas-token");
    }
    const recon = /^\/v([12])\/reconstructions\/([0-9a-f]{64})$/.exec(url.pathname);
    if (recon) {
      const version = Number(recon[1]) as 1 | 2;
      log.push({ kind: `v${version}`, path: url.pathname, range, auth });
      assert.equal(auth, "Bearer cas-token");
      if (version === 2 && options.v2 === "501") return jsonResponse(501, { error: "V2 is off" });
      const file = (Object.keys(FILES) as ("A" | "B")[]).find((name) => FILES[name].hash === recon[2]);
      if (file === undefined) return jsonResponse(404, { error: `No file ${recon[2]} here` });
      const size = FILES[file].data.length;
      const start = range === null ? 0 : Number(/^bytes=(\d+)-/.exec(range)![1]);
      if (start >= size) return jsonResponse(416, { error: "range past the end" }, { "content-range": `bytes */${size}` });
      const wanted = normalized(range, size);
      const match = CASES.find((c) => c.file === file && c.status === 200 && normalized(c.range_header, size) === wanted);
      if (match === undefined) return jsonResponse(400, { error: `the fake has no vector case for ${file} ${wanted}` });
      if (options.expireUrlsOnce && generation === 0) expired = true;
      else expired = false;
      const body = withUrls((version === 2 ? match.v2 : match.v1)!);
      generation++;
      return jsonResponse(200, body);
    }
    if (url.pathname === `/transfer/${XORB_HEX}`) {
      log.push({ kind: "transfer", path: url.pathname, range, auth });
      assert.equal(auth, null, "transfer URLs never see the CAS token");
      if (options.refuseTransfers || (expired && url.searchParams.get("gen") === "0")) return jsonResponse(403, { error: "URL expired" });
      const [, s, e] = /^bytes=(\d+)-(\d+)$/.exec(range ?? "") ?? [];
      assert.ok(s !== undefined, `single-range request expected, got ${range}`);
      const bytes = Buffer.from(BODY.subarray(Number(s), Number(e) + 1));
      if (options.corruptByteAt !== undefined && options.corruptByteAt >= Number(s) && options.corruptByteAt <= Number(e)) {
        bytes[options.corruptByteAt - Number(s)] ^= 0xff;
      }
      return new Response(bytes, { status: 206, headers: { "content-range": `bytes ${s}-${e}/${BODY.length}`, "content-length": String(bytes.length) } });
    }
    return jsonResponse(404, { error: `unexpected ${url.pathname}` });
  };
  return { fetch, log };
}

const dir = tempDirForFile("castor-client-download-");

describe("download against the vector answers", () => {
  it("downloads whole files byte-exact and verifies them against the file hash", async () => {
    for (const name of ["A", "B"] as const) {
      const { fetch, log } = fakeCas();
      const out = join(dir.path, `whole-${name}`);
      const events: ProgressEvent[] = [];
      const result = await fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILES[name].hash, output: out, onProgress: (e) => events.push(e) });
      // The first window reaches the end of the file, so the total is known from the start.
      assert.deepEqual(
        events.map((e) => [e.bytesDone, e.bytesTotal]),
        name === "A"
          ? [[3565, 3565]]
          : [
              [2048, 3565],
              [3565, 3565],
            ],
      );
      assert.deepEqual(await readFile(out), FILES[name].data);
      assert.equal(result.verified, "file-hash");
      assert.equal(result.bytesWritten, FILES[name].data.length);
      assert.equal(result.reconstructionVersion, 2);
      // B's two terms share one fetch range, fetched once.
      assert.equal(result.rangesFetched, 1);
      assert.equal(log.filter((l) => l.kind === "transfer").length, 1);
    }
  });

  it("honours offset_into_first_range and cuts the end for every range case of the vectors", async () => {
    for (const c of CASES.filter((c) => c.status === 200 && c.range_header !== null)) {
      const data = FILES[c.file].data;
      const [, a, b] = /^bytes=(\d+)-(\d+)$/.exec(c.range_header!)!;
      const start = Number(a);
      const end = Number(b);
      const { fetch } = fakeCas();
      const sink = new PassThrough();
      const parts: Buffer[] = [];
      sink.on("data", (part: Buffer) => parts.push(part));
      const result = await fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILES[c.file].hash, output: sink, range: { start, end } });
      const expected = data.subarray(start, Math.min(end, data.length - 1) + 1);
      assert.deepEqual(Buffer.concat(parts), expected, `${c.file} ${c.range_header}`);
      assert.equal(result.bytesWritten, expected.length);
      // A range is never tied to the file hash (even 0-3564: the client cannot know it is the whole file).
      assert.equal(result.verified, "chunks");
    }
  });

  it("reports a range that starts past the end as a usage error naming the file size", async () => {
    const { fetch } = fakeCas();
    await assert.rejects(
      fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILES.A.hash, output: new PassThrough(), range: { start: 3565, end: 4000 } }),
      (error: unknown) => error instanceof CastorClientError && error.kind === "usage" && /past the end of the file \(3565 bytes\)/.test(error.message),
    );
  });

  it("falls back to V1 when V2 answers 501, and stays there", async () => {
    const { fetch, log } = fakeCas({ v2: "501" });
    const client = fakeHubClient(fetch, REPO, HUB_TOKEN);
    const out = join(dir.path, "v1-A");
    const result = await client.download({ fileHash: FILES.A.hash, output: out });
    assert.deepEqual(await readFile(out), FILES.A.data);
    assert.equal(result.reconstructionVersion, 1);
    assert.equal(result.verified, "file-hash");
    assert.deepEqual(
      log.filter((l) => l.kind.startsWith("v")).map((l) => l.kind),
      ["v2", "v1"],
    );
  });

  it("re-queries the reconstruction when a transfer URL has expired (403) and retries with the new URL", async () => {
    const { fetch, log } = fakeCas({ expireUrlsOnce: true });
    const out = join(dir.path, "expired-B");
    const result = await fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILES.B.hash, output: out });
    assert.deepEqual(await readFile(out), FILES.B.data);
    assert.equal(result.verified, "file-hash");
    assert.deepEqual(
      log.filter((l) => l.kind !== "token").map((l) => l.kind),
      ["v2", "transfer", "v2", "transfer"],
    );
  });

  it("gives up with a 403 error when fresh URLs are refused too, after two re-queries", async () => {
    const { fetch, log } = fakeCas({ refuseTransfers: true });
    await assert.rejects(
      fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILES.A.hash, output: new PassThrough() }),
      (error: unknown) => error instanceof HttpStatusError && error.status === 403 && /even after 2 fresh reconstructions/.test(error.message),
    );
    assert.equal(log.filter((l) => l.kind === "v2").length, 3);
  });

  it("refuses a directory as output before fetching anything", async () => {
    const { fetch, log } = fakeCas();
    await assert.rejects(
      fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILES.A.hash, output: dir.path }),
      (error: unknown) => error instanceof CastorClientError && error.kind === "usage" && /is a directory/.test(error.message),
    );
    assert.deepEqual(
      log.filter((l) => l.kind !== "token"),
      [],
    );
  });

  it("refuses data that does not hash to the file hash and leaves no output file behind", async () => {
    const { fetch } = fakeCas({ corruptByteAt: 500 }); // inside chunk 1, stored uncompressed
    const out = join(dir.path, "corrupt-A");
    await assert.rejects(
      fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: FILES.A.hash, output: out }),
      (error: unknown) => error instanceof CastorClientError && error.kind === "integrity" && error.message.includes(FILES.A.hash),
    );
    assert.deepEqual(
      (await readdir(dir.path)).filter((name) => name.startsWith("corrupt-A")),
      [],
    );
  });

  it("passes the server's 404 message on for an unknown file, after trying V2 then V1", async () => {
    const { fetch, log } = fakeCas();
    const unknown = "ab".repeat(32);
    await assert.rejects(
      fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: unknown, output: new PassThrough() }),
      (error: unknown) => error instanceof CastorClientError && error.kind === "http" && error.message.includes(`No file ${unknown} here`),
    );
    assert.deepEqual(
      log.filter((l) => l.kind.startsWith("v")).map((l) => l.kind),
      ["v2", "v1"],
    );
  });

  it("writes the empty file for the zero hash without asking the server", async () => {
    const { fetch, log } = fakeCas();
    const out = join(dir.path, "empty");
    const result = await fakeHubClient(fetch, REPO, HUB_TOKEN).download({ fileHash: "0".repeat(64), output: out });
    assert.equal((await readFile(out)).length, 0);
    assert.equal(result.verified, "file-hash");
    assert.deepEqual(log, []);
  });

  it("rejects a malformed hash or range before any request", async () => {
    const { fetch, log } = fakeCas();
    const client = fakeHubClient(fetch, REPO, HUB_TOKEN);
    for (const request of [
      { fileHash: "XYZ", output: new PassThrough() },
      { fileHash: FILES.A.hash, output: new PassThrough(), range: { start: 5, end: 4 } },
      { fileHash: FILES.A.hash, output: new PassThrough(), range: { start: -1, end: 4 } },
    ]) {
      await assert.rejects(client.download(request), (error: unknown) => error instanceof CastorClientError && error.kind === "usage");
    }
    assert.deepEqual(log, []);
  });
});

describe("parseReconstruction", () => {
  const caseB = CASES.find((c) => c.file === "B" && c.range_header === "bytes=100-2500")!;
  const withUrl = (body: unknown) => JSON.parse(JSON.stringify(body).replace(/"<[^"]*url[^"]*>"/g, '"http://x/t"'));

  it("reads a V2 answer: terms in order, each with the fetch range that covers it", () => {
    const parsed = parseReconstruction(withUrl(caseB.v2), 2, "test");
    assert.equal(parsed.offsetIntoFirstRange, 100);
    assert.deepEqual(
      parsed.terms.map((t) => [t.chunkStart, t.chunkEnd, t.unpackedLength, t.span.chunks.start, t.span.chunks.end, t.span.bytes.start, t.span.bytes.end]),
      [
        [2, 3, 2048, 2, 3, 819, 1397],
        [0, 1, 1000, 0, 1, 0, 293],
      ],
    );
    assert.equal(hashToHex(parsed.terms[0].xorbHash), XORB_HEX);
  });

  it("reads the V1 form of the same answer identically", () => {
    const v1 = parseReconstruction(withUrl(caseB.v1), 1, "test");
    const v2 = parseReconstruction(withUrl(caseB.v2), 2, "test");
    assert.deepEqual(
      v1.terms.map((t) => [t.chunkStart, t.chunkEnd, t.span.bytes.start, t.span.bytes.end]),
      v2.terms.map((t) => [t.chunkStart, t.chunkEnd, t.span.bytes.start, t.span.bytes.end]),
    );
  });

  it("refuses answers that break the protocol, with a protocol error", () => {
    const good = withUrl(caseB.v2);
    const broken: [string, (body: any) => void][] = [
      ["a term no range covers", (b) => (b.terms[0].range = { start: 1, end: 3 })],
      ["a missing offset", (b) => delete b.offset_into_first_range],
      ["a chunk range past 8192", (b) => (b.terms[0].range = { start: 0, end: 9000 })],
      ["an empty term", (b) => (b.terms[0].range = { start: 2, end: 2 })],
      ["a byte range too short for its chunks", (b) => (b.xorbs[XORB_HEX][0].ranges[0].bytes = { start: 0, end: 3 })],
      ["a byte range over a xorb's size", (b) => (b.xorbs[XORB_HEX][0].ranges[0].bytes = { start: 0, end: 2 ** 40 })],
      ["a non-http url", (b) => (b.xorbs[XORB_HEX][0].url = "file:///etc/passwd")],
      ["a bad xorb key", (b) => (b.xorbs = { nothex: b.xorbs[XORB_HEX] })],
      ["an unpacked length over 64 MiB", (b) => (b.terms[0].unpacked_length = 2 ** 27)],
    ];
    for (const [what, mutate] of broken) {
      const body = structuredClone(good);
      mutate(body);
      assert.throws(
        () => parseReconstruction(body, 2, "test"),
        (error: unknown) => error instanceof CastorClientError && error.kind === "protocol",
        what,
      );
    }
  });
});

describe("decodeChunkStream", () => {
  it("decodes every byte range of the vector xorb into its chunks and hashes", () => {
    for (const range of xorbVector.expected.chunk_ranges_to_physical_bytes) {
      const [first, last] = range.chunks as [number, number];
      const [start, end] = range.http_range_inclusive as [number, number];
      const decoded = decodeChunkStream(BODY.subarray(start, end + 1), last - first, "test");
      assert.deepEqual(
        decoded.chunks.map((c) => Buffer.from(c)),
        CHUNKS.slice(first, last).map((c) => Buffer.from(c)),
      );
      assert.deepEqual(
        decoded.hashes.map(hashToHex),
        xorbVector.expected.chunks.slice(first, last).map((c: { chunk_hash: string }) => c.chunk_hash),
      );
    }
  });

  it("refuses truncated, padded, miscounted or malformed ranges", () => {
    const bad = (bytes: Uint8Array, count: number, pattern: RegExp) =>
      assert.throws(
        () => decodeChunkStream(bytes, count, "range"),
        (error: unknown) => error instanceof CastorClientError && error.kind === "protocol" && pattern.test(error.message),
      );
    bad(BODY.subarray(0, BODY.length - 1), 3, /declares 571 payload bytes, only 570 remain/);
    bad(BODY.subarray(0, 4), 1, /header is cut off/);
    bad(Buffer.concat([BODY, Buffer.alloc(3)]), 3, /3 bytes follow the 3 chunks/);
    bad(BODY, 2, /follow the 2 chunks/);
    bad(BODY.subarray(0, 294), 2, /holds 1 chunks, expected 2/);
    const badVersion = Buffer.from(BODY);
    badVersion[294] = 1;
    bad(badVersion, 3, /header version 1/);
    const badScheme = Buffer.from(BODY);
    badScheme[294 + 4] = 7;
    bad(badScheme, 3, /chunk 1 at byte 294: .*scheme 7/);
  });
});
