/**
 * The upload-pack engine in-process, over a repository held in memory: the answers' framing
 * (ls-refs, acknowledgements, sections), what a fetch sends after a negotiation, and the
 * refusals of requests it does not serve.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { encodeTreeObject, gitBlobId } from "../../src/format/git.js";
import { packObjectId, readPack, type PackObject } from "../../src/format/git-pack.js";
import { DELIM_PKT, FLUSH_PKT, PktLineDecoder, pktLine, pktText, type PktLine } from "../../src/format/pkt-line.js";
import type { GitCommit, GitObjectSource, GitRef, GitTree, GitTreeEntry } from "../../src/git/source.js";
import { advertiseV0, GitProtocolError, serveV0, serveV2 } from "../../src/git/upload-pack.js";

class MemorySource {
  readonly head = "refs/heads/main";
  readonly commits = new Map<string, GitCommit>();
  readonly trees = new Map<string, GitTree>();
  readonly blobs = new Map<string, Buffer>();
  readonly branches = new Map<string, string>();

  blob(content: string): GitTreeEntry & { content: string } {
    const oid = gitBlobId(content);
    this.blobs.set(oid, Buffer.from(content));
    return { mode: "100644", name: "", oid, size: content.length, content };
  }

  tree(files: Record<string, string>): string {
    const entries = Object.keys(files)
      .sort()
      .map((name) => ({ ...this.blob(files[name]), name }));
    const oid = packObjectId("tree", encodeTreeObject(entries));
    this.trees.set(oid, { oid, entries });
    return oid;
  }

  commitOf(tree: string, parents: string[], time: number): string {
    const body = Buffer.from(
      `tree ${tree}\n${parents.map((p) => `parent ${p}\n`).join("")}author a <a@b> ${time} +0000\ncommitter a <a@b> ${time} +0000\n\nc${time}\n`,
    );
    const oid = packObjectId("commit", body);
    this.commits.set(oid, { oid, tree, parents, time, body });
    return oid;
  }

  async refs(): Promise<GitRef[]> {
    return [...this.branches].map(([name, oid]) => ({ name: `refs/heads/${name}`, oid }));
  }
  async commit(oid: string): Promise<GitCommit | null> {
    return this.commits.get(oid) ?? null;
  }
  async blobBytes(oid: string): Promise<Buffer | null> {
    return this.blobs.get(oid) ?? null;
  }
}

/** A source whose `blob` is the stored bytes (the class keeps `blob` for building). */
function sourceOf(memory: MemorySource): GitObjectSource {
  return {
    head: memory.head,
    refs: () => memory.refs(),
    commit: (oid) => memory.commit(oid),
    tree: async (oid) => memory.trees.get(oid) ?? null,
    blob: (oid) => memory.blobBytes(oid),
  };
}

const OPTIONS = { agent: "castor-test", maxObjects: 10_000 };

/** Three commits on main: each changes one of two files. */
function history() {
  const memory = new MemorySource();
  const c1 = memory.commitOf(memory.tree({ "a.txt": "a1", "b.txt": "b1" }), [], 100);
  const c2 = memory.commitOf(memory.tree({ "a.txt": "a2", "b.txt": "b1" }), [c1], 200);
  const c3 = memory.commitOf(memory.tree({ "a.txt": "a2", "b.txt": "b3" }), [c2], 300);
  memory.branches.set("main", c3);
  return { memory, source: sourceOf(memory), c1, c2, c3 };
}

async function collect(answer: Iterable<Buffer> | AsyncIterable<Buffer>): Promise<Buffer> {
  const pieces: Buffer[] = [];
  for await (const piece of answer) pieces.push(piece);
  return Buffer.concat(pieces);
}

function packetsOf(bytes: Buffer): PktLine[] {
  const decoder = new PktLineDecoder();
  decoder.push(bytes);
  const out: PktLine[] = [];
  for (let line = decoder.read(); line !== null; line = decoder.read()) out.push(line);
  assert.equal(decoder.pending, 0);
  return out;
}

function request(...lines: (string | Buffer)[]): Buffer {
  return Buffer.concat(lines.map((line) => (typeof line === "string" ? pktLine(`${line}\n`) : line)));
}

const fetchV2 = (...args: string[]) => request("command=fetch", "object-format=sha1", DELIM_PKT, ...args, FLUSH_PKT);

/** The objects of the pack in a v2 fetch answer (its packfile section's band 1). */
async function packOf(lines: PktLine[]): Promise<PackObject[]> {
  const start = lines.findIndex((line) => pktText(line) === "packfile");
  assert.ok(start >= 0, "the answer has a packfile section");
  const data = lines
    .slice(start + 1)
    .filter((line): line is { kind: "data"; data: Buffer } => line.kind === "data" && line.data[0] === 1)
    .map((line) => line.data.subarray(1));
  const known = new Map<number, PackObject>();
  const out: PackObject[] = [];
  const limits = { maxPackBytes: 1 << 30, maxObjects: 1000, maxObjectBytes: 1 << 20, maxDeltaDepth: 10 };
  const pack = (async function* () {
    yield Buffer.concat(data);
  })();
  for await (const object of readPack(pack, limits, { atOffset: (o) => known.get(o), byOid: () => undefined })) {
    known.set(object.offset, object);
    out.push(object);
  }
  return out;
}

describe("upload-pack v2", () => {
  it("lists refs with HEAD's target, filtered by prefix", async () => {
    const { source, c3 } = history();
    const all = packetsOf(await collect(await serveV2(source, request("command=ls-refs", DELIM_PKT, "symrefs", FLUSH_PKT), OPTIONS)));
    assert.deepEqual(all.map(pktText), [`${c3} HEAD symref-target:refs/heads/main`, `${c3} refs/heads/main`, null]);
    const tags = packetsOf(await collect(await serveV2(source, request("command=ls-refs", DELIM_PKT, "ref-prefix refs/tags/", FLUSH_PKT), OPTIONS)));
    assert.deepEqual(
      tags.map((line) => line.kind),
      ["flush"],
    );
  });

  it("clones: every object of the history, in one pack", async () => {
    const { source, memory, c3 } = history();
    const lines = packetsOf(await collect(await serveV2(source, fetchV2(`want ${c3}`, "done"), OPTIONS)));
    assert.equal(pktText(lines[0]), "packfile");
    const oids = new Set((await packOf(lines)).map((object) => object.oid));
    assert.deepEqual(oids, new Set([...memory.commits.keys(), ...memory.trees.keys(), ...memory.blobs.keys()]));
  });

  it("negotiates: NAK without a common commit, then ready and only what the client lacks", async () => {
    const { source, memory, c1, c2, c3 } = history();
    const unknown = "f".repeat(40);
    const nak = packetsOf(await collect(await serveV2(source, fetchV2(`want ${c3}`, `have ${unknown}`), OPTIONS)));
    assert.deepEqual(nak.map(pktText), ["acknowledgments", "NAK", null]);
    const ready = packetsOf(await collect(await serveV2(source, fetchV2(`want ${c3}`, `have ${c2}`, `have ${unknown}`), OPTIONS)));
    assert.deepEqual(ready.slice(0, 4).map(pktText), ["acknowledgments", `ACK ${c2}`, "ready", null]);
    assert.equal(ready[3].kind, "delim");
    const sent = (await packOf(ready)).map((object) => object.oid);
    const c3tree = memory.commits.get(c3)!.tree;
    assert.deepEqual(new Set(sent), new Set([c3, c3tree, gitBlobId("b3")]));
    assert.ok(!sent.includes(c1));
  });

  it("sends a shallow boundary for a depth, and only the commits within it", async () => {
    const { source, c2, c3 } = history();
    const lines = packetsOf(await collect(await serveV2(source, fetchV2(`want ${c3}`, "deepen 2", "done"), OPTIONS)));
    assert.deepEqual(lines.slice(0, 3).map(pktText), ["shallow-info", `shallow ${c2}`, null]);
    const commits = (await packOf(lines)).filter((object) => object.type === "commit").map((object) => object.oid);
    assert.deepEqual(commits.sort(), [c2, c3].sort());
  });

  it("leaves blobs out for blob:none, and sends a blob asked for by id", async () => {
    const { source, c3 } = history();
    const noBlobs = await packOf(packetsOf(await collect(await serveV2(source, fetchV2(`want ${c3}`, "filter blob:none", "done"), OPTIONS))));
    assert.ok(noBlobs.every((object) => object.type !== "blob"));
    const blob = await packOf(packetsOf(await collect(await serveV2(source, fetchV2(`want ${gitBlobId("a1")}`, "done"), OPTIONS))));
    assert.deepEqual(
      blob.map((object) => object.oid),
      [gitBlobId("a1")],
    );
  });

  it("refuses what it does not serve, as protocol errors", async () => {
    const { source, c3 } = history();
    const refuses = async (body: Buffer, message: RegExp, options = OPTIONS) =>
      assert.rejects(
        async () => collect(await serveV2(source, body, options)),
        (error: unknown) => error instanceof GitProtocolError && message.test(error.message),
      );
    await refuses(fetchV2("done"), /at least one want/);
    await refuses(fetchV2("want 1234", "done"), /expected "want <object id>"/);
    await refuses(fetchV2(`want ${"e".repeat(40)}`, "done"), /not our ref e{40}/);
    await refuses(fetchV2(`want ${c3}`, "deepen-since 1000", "done"), /--shallow-since/);
    await refuses(fetchV2(`want ${c3}`, "filter sparse:oid=abc", "done"), /filter "sparse:oid=abc" is not supported/);
    await refuses(request("command=frobnicate", DELIM_PKT, FLUSH_PKT), /unknown command "frobnicate"/);
    await refuses(request("command=fetch", "object-format=sha256", DELIM_PKT, `want ${c3}`, FLUSH_PKT), /SHA-1/);
    await refuses(Buffer.from("00zzjunk"), /not in pkt-line format/);
    await refuses(fetchV2(`want ${c3}`, "done"), /more than 3 objects/, { ...OPTIONS, maxObjects: 3 });
  });
});

describe("upload-pack v0", () => {
  it("advertises HEAD first with the capabilities, then the refs", async () => {
    const { source, c3 } = history();
    const lines = packetsOf(await advertiseV0(source, OPTIONS)).map(pktText);
    assert.match(lines[0]!, new RegExp(`^${c3} HEAD\\0multi_ack_detailed side-band-64k .*symref=HEAD:refs/heads/main .*agent=castor-test$`));
    assert.deepEqual(lines.slice(1), [`${c3} refs/heads/main`, null]);
  });

  it("acknowledges common commits in a round, then sends the pack after done", async () => {
    const { source, c2, c3 } = history();
    const want = `want ${c3} multi_ack_detailed side-band-64k ofs-delta`;
    const round = packetsOf(await collect(await serveV0(source, request(want, FLUSH_PKT, `have ${c2}`, FLUSH_PKT), OPTIONS)));
    assert.deepEqual(round.map(pktText), [`ACK ${c2} common`, `ACK ${c2} ready`, "NAK"]);
    const done = packetsOf(await collect(await serveV0(source, request(want, FLUSH_PKT, `have ${c2}`, "done"), OPTIONS)));
    assert.equal(pktText(done[0]), `ACK ${c2}`);
    assert.equal(done[done.length - 1].kind, "flush");
    assert.ok(
      done.slice(1, -1).every((line) => line.kind === "data" && [1, 2].includes(line.data[0])),
      "the pack travels on side-band",
    );
  });
});
