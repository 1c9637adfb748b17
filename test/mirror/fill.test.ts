/**
 * The mirror's fill pipeline against a test upstream (a real castor answering as the Hub does):
 * a Xet file fetched through the upstream's Xet protocol, stored in castor's CAS and registered
 * under the upstream's file hash; a second revision sharing most chunks fetching only the rest;
 * bytes the upstream corrupts refused with nothing published; a git file through resolve; the
 * bytes streamed to readers while the fill runs (whole once verified, before they are stored),
 * late readers from the store; two callers of one file sharing one fetch.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { after, before, beforeEach, describe, it } from "node:test";
import { FileReader } from "../../src/cas/file-reader.js";
import { XorbIngestService } from "../../src/cas/xorb-ingest.js";
import { gitBlobId } from "../../src/format/git.js";
import { hashFromHex, hashToHex } from "../../src/format/hash.js";
import type { Repo } from "../../src/metadata/store.js";
import { FillBroadcast } from "../../src/mirror/broadcast.js";
import { MirrorFillError, type FillOutput } from "../../src/mirror/fill-common.js";
import { MirrorFills } from "../../src/mirror/fills.js";
import { fillInlineFile, sha256Bytes } from "../../src/mirror/inline-fill.js";
import { fillXetFile, type XetFillDeps, type XetFillTarget } from "../../src/mirror/xet-fill.js";
import { blobKeyFromHex } from "../../src/storage/blob-store.js";
import { UpstreamHub, type UpstreamFileEntry } from "../../src/upstream/hub.js";
import { useFreshStores } from "../helpers/stores.js";
import { startTestUpstream, type TestUpstream } from "../helpers/upstream-hub.js";

const MiB = 1024 * 1024;
const REPO = "model:org/weights";
const repoRef = { type: "model" as const, name: "org/weights" };

let upstream: TestUpstream;
let hub: UpstreamHub;
const base = randomBytes(24 * MiB);
/** `base` with 1 MiB in its middle changed: a fine-tune of it. */
const tuned = Buffer.concat([base.subarray(0, 12 * MiB), randomBytes(MiB), base.subarray(13 * MiB)]);
const other = randomBytes(5 * MiB);
const notes = Buffer.from("some notes\nin a git file\n");
const commits = { base: "", tuned: "" };

const stores = useFreshStores("mirror-fill");
let repo: Repo;
let deps: XetFillDeps;

before(async () => {
  upstream = await startTestUpstream();
  await upstream.createRepo(REPO);
  commits.base = await upstream.commit(REPO, [
    { path: "model.bin", bytes: base },
    { path: "other.bin", bytes: other },
    { path: "notes.txt", bytes: notes, storage: "inline" },
  ]);
  commits.tuned = await upstream.commit(REPO, [{ path: "model.bin", bytes: tuned }]);
  hub = new UpstreamHub({ url: upstream.hubUrl, token: upstream.adminToken });
});

after(async () => {
  await upstream?.stop();
});

beforeEach(async () => {
  const { metadata, blobs } = stores();
  repo = await metadata.mirror.createMirroredRepo("model", "org/weights", false, new Date());
  const xorbs = new XorbIngestService({ blobs, metadata });
  const reader = new FileReader({ metadata, blobs });
  deps = {
    upstream: hub,
    store: metadata,
    storeXorb: (record, bytes) => xorbs.storeValidated(record, bytes),
    readTerms: (terms) => reader.openTerms(terms).read(),
  };
});

async function entryAt(commit: string, path: string): Promise<UpstreamFileEntry> {
  const [entry] = await hub.pathsInfo(repoRef, commit, [path], false);
  assert.ok(entry?.type === "file");
  return entry;
}

async function xetTarget(commit: string, path: string): Promise<XetFillTarget> {
  const entry = await entryAt(commit, path);
  assert.ok(entry.xetHash !== null && entry.lfs !== null);
  return { repo: repoRef, commit, path, repoId: repo.id, xetHash: entry.xetHash, size: entry.size, sha256: entry.lfs.oid };
}

/** Collects what a fill writes. */
function collector(): FillOutput & { bytes(): Buffer } {
  const parts: Uint8Array[] = [];
  return {
    async write(bytes) {
      parts.push(Buffer.from(bytes));
    },
    bytes: () => Buffer.concat(parts),
  };
}

async function readAll(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const piece of stream) parts.push(Buffer.from(piece));
  return Buffer.concat(parts);
}

async function storedBytes(xetHash: string): Promise<Buffer> {
  const file = await new FileReader({ metadata: stores().metadata, blobs: stores().blobs }).open(hashFromHex(xetHash));
  assert.ok(file !== null, "the file is registered");
  return readAll(file.read());
}

describe("filling a Xet file from the upstream", () => {
  it("fetches it through the upstream's Xet protocol, verifies it and registers it under the same file hash", async () => {
    const target = await xetTarget(commits.base, "model.bin");
    const from = upstream.requests().length;
    const output = collector();
    const result = await fillXetFile(deps, target, output);
    assert.ok(output.bytes().equals(base), "the bytes written in order");
    assert.ok(result.fetchedBytes >= base.length * 0.99 && result.fetchedBytes <= base.length * 1.01, `fetched ${result.fetchedBytes}`);
    assert.equal(result.heldBytes, 0);
    assert.ok((await storedBytes(target.xetHash)).equals(base), "castor serves the file from its own CAS");
    const { metadata } = stores();
    assert.equal(await metadata.isFileInRepo(hashFromHex(target.xetHash), repo.id), true, "linked to the mirrored repository");
    const record = await metadata.getFile(hashFromHex(target.xetHash));
    assert.equal(Buffer.from(record!.sha256!).toString("hex"), target.sha256);
    assert.equal(Buffer.from((await metadata.findFileBySha256(repo.id, sha256Bytes(target.sha256!)))!).equals(Buffer.from(hashFromHex(target.xetHash))), true);
    const mirrored = await metadata.mirror.getMirroredFile("xet", hashFromHex(target.xetHash));
    assert.equal(mirrored?.fetchedBytes, result.fetchedBytes);
    // Upstream xorbs fetched whole are stored as themselves: the same hashes as upstream's.
    const casPaths = upstream.requests(from).filter((r) => r.host === "cas" && r.path.startsWith("/v1/transfer/"));
    const upstreamXorbs = new Set(casPaths.map((r) => r.path.slice("/v1/transfer/".length)));
    const held = await metadata.getXorbs([...upstreamXorbs].map(hashFromHex));
    assert.ok(held.size >= 1, "an upstream xorb fetched whole is now castor's under its hash");
    const repacked = [...upstreamXorbs].filter((hex) => !held.has(hex));
    const runs = await metadata.mirror.findChunkRuns(repacked.map(hashFromHex));
    assert.deepEqual(
      new Set(runs.map((run) => hashToHex(run.upstreamXorb))),
      new Set(repacked),
      "the chunks of the others were repacked and their runs recorded",
    );
    assert.ok(
      casPaths.every((r) => !r.hubToken),
      "castor's hub token never goes to the CAS host",
    );
  });

  it("fetches only the chunks castor does not hold for a second revision sharing most of them", async () => {
    await fillXetFile(deps, await xetTarget(commits.base, "model.bin"), collector());
    const target = await xetTarget(commits.tuned, "model.bin");
    const before = upstream.casBytes();
    const output = collector();
    const result = await fillXetFile(deps, target, output);
    assert.ok(output.bytes().equals(tuned));
    const fetchedUpstream = upstream.casBytes() - before;
    assert.equal(fetchedUpstream, result.fetchedBytes);
    assert.ok(result.fetchedBytes / tuned.length <= 0.15, `fetched ${result.fetchedBytes} of ${tuned.length} bytes`);
    assert.ok(result.heldBytes >= tuned.length * 0.85);
    assert.ok((await storedBytes(target.xetHash)).equals(tuned));
  });

  it("refuses bytes the upstream corrupted: nothing registered, nothing recorded", async () => {
    const target = await xetTarget(commits.base, "other.bin");
    upstream.corrupt(true);
    try {
      await assert.rejects(fillXetFile(deps, target, collector()), (error: unknown) => {
        assert.ok(error instanceof MirrorFillError || (error as Error).name === "UpstreamError", String(error));
        assert.match((error as Error).message, new RegExp(upstream.hubUrl.replace(/[.:/]/g, "\\$&")));
        return true;
      });
    } finally {
      upstream.corrupt(false);
    }
    const { metadata } = stores();
    assert.equal(await metadata.getFile(hashFromHex(target.xetHash)), null);
    assert.equal(await metadata.mirror.getMirroredFile("xet", hashFromHex(target.xetHash)), null);
    assert.deepEqual(await metadata.mirror.findChunkRuns([]), []);
    // Fetched again with good bytes, it is filled.
    await fillXetFile(deps, target, collector());
    assert.ok((await storedBytes(target.xetHash)).equals(other));
  });

  it("fills a git file through resolve, verified against its blob id", async () => {
    const entry = await entryAt(commits.base, "notes.txt");
    assert.equal(entry.oid, gitBlobId(notes));
    const output = collector();
    const { metadata, blobs } = stores();
    const target = { repo: repoRef, commit: commits.base, path: "notes.txt", gitOid: entry.oid, size: entry.size, sha256: null };
    await fillInlineFile({ upstream: hub, blobs, store: metadata }, target, output);
    assert.ok(output.bytes().equals(notes));
    const sha256 = createHash("sha256").update(notes).digest("hex");
    assert.ok((await readAll(await blobs.read(blobKeyFromHex("inline", sha256)))).equals(notes));
    assert.equal((await metadata.mirror.findMirroredInline(entry.oid))?.size, notes.length);

    upstream.corrupt(true);
    try {
      const lie = { ...target, gitOid: gitBlobId("something else"), path: "notes.txt" };
      await assert.rejects(fillInlineFile({ upstream: hub, blobs, store: metadata }, lie, collector()), /do not match its tree/);
      assert.equal(await metadata.mirror.findMirroredInline(lie.gitOid), null);
    } finally {
      upstream.corrupt(false);
    }
  });
});

describe("readers of a file being filled", () => {
  it("stream it while it is fetched; one that comes late reads it from the store; all get the same bytes", async () => {
    const target = await xetTarget(commits.base, "model.bin");
    const fills = new MirrorFills({ claims: stores().metadata.mirror });
    const reader = new FileReader({ metadata: stores().metadata, blobs: stores().blobs });
    const job = {
      key: `xet:${target.xetHash}`,
      fill: (output: FillOutput) => fillXetFile(deps, target, output),
      isStored: async () => (await stores().metadata.getFile(hashFromHex(target.xetHash))) !== null,
      stored: async (start: number, end: number) => (await reader.open(hashFromHex(target.xetHash)))!.read({ start, end }),
    };
    const from = upstream.casBytes();
    const whole = fills.read(job, 0, base.length - 1);
    const range = fills.read(job, 5 * MiB, 6 * MiB - 1);
    const first = await new Promise<Buffer>((resolve) => whole.once("data", resolve));
    const late = fills.read(job, 0, base.length - 1);
    const [rest, ranged, lateBytes] = await Promise.all([readAll(whole), readAll(range), readAll(late)]);
    assert.ok(Buffer.concat([first, rest]).equals(base));
    assert.ok(ranged.equals(base.subarray(5 * MiB, 6 * MiB)));
    assert.ok(lateBytes.equals(base));
    assert.ok(upstream.casBytes() - from <= base.length * 1.01, "one upstream fetch for the three readers");
    await fills.ensure(job);
    assert.equal(fills.inProgress, 0);
  });

  it("have the whole file once it is verified, while castor still stores it", async () => {
    const target = await xetTarget(commits.base, "other.bin");
    let storing!: () => void;
    const disk = new Promise<void>((resolve) => (storing = resolve));
    // A slow disk: nothing the fill stores is written until the reader has the file.
    const slowDisk: XetFillDeps = { ...deps, storeXorb: async (record, bytes) => disk.then(() => deps.storeXorb(record, bytes)) };
    const fills = new MirrorFills({ claims: stores().metadata.mirror });
    const reader = new FileReader({ metadata: stores().metadata, blobs: stores().blobs });
    const job = {
      key: `xet:${target.xetHash}`,
      fill: (output: FillOutput) => fillXetFile(slowDisk, target, output),
      isStored: async () => (await stores().metadata.getFile(hashFromHex(target.xetHash))) !== null,
      stored: async (start: number, end: number) => (await reader.open(hashFromHex(target.xetHash)))!.read({ start, end }),
    };
    const read = await readAll(fills.read(job, 0, other.length - 1));
    assert.ok(read.equals(other), "the reader has every byte, verified");
    assert.equal(await job.isStored(), false, "before the file is stored");
    storing();
    await fills.ensure(job);
    assert.ok((await storedBytes(target.xetHash)).equals(other));
  });

  it("all see the failure of a fill, and nobody a complete file", async () => {
    const broadcast = new FillBroadcast(async () => {
      throw new Error("unused");
    });
    const reader = broadcast.join(0, 99);
    const seen: Buffer[] = [];
    reader.on("data", (piece: Buffer) => seen.push(piece));
    const ended = new Promise<Error>((resolve) => reader.once("error", resolve));
    await broadcast.write(new Uint8Array(60));
    await broadcast.write(new Uint8Array(40));
    broadcast.fail(new Error("upstream went away"));
    assert.match((await ended).message, /upstream went away/);
    assert.equal(Buffer.concat(seen).length, 60, "the last piece was held back");
  });
});
