/**
 * git's pack format, both ways and against the real `git`: packs castor writes are accepted by
 * `git index-pack`, packs `git pack-objects` writes (ofs-deltas, ref-deltas, thin packs) are read
 * with every id right, and every malformed or oversized pack is refused with a FormatError.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { deflateSync } from "node:zlib";
import { after, describe, it } from "node:test";
import { FormatError, type FormatErrorCode } from "../../src/format/errors.js";
import { encodeTreeObject, gitBlobId } from "../../src/format/git.js";
import {
  applyDelta,
  encodeDelta,
  packObjectId,
  PackWriter,
  readPack,
  type DeltaBase,
  type PackLimits,
  type PackObject,
  type PackObjectType,
} from "../../src/format/git-pack.js";

const work = mkdtempSync(join(tmpdir(), "castor-git-pack-"));
after(() => rmSync(work, { recursive: true, force: true }));
const gitEnv = {
  ...process.env,
  GIT_CONFIG_NOSYSTEM: "1",
  HOME: work,
  GIT_AUTHOR_NAME: "t",
  GIT_AUTHOR_EMAIL: "t@example.com",
  GIT_COMMITTER_NAME: "t",
  GIT_COMMITTER_EMAIL: "t@example.com",
};

function git(cwd: string, args: string[], input?: Uint8Array | string): Buffer {
  return execFileSync("git", args, { cwd, input, env: gitEnv, maxBuffer: 256 * 1024 * 1024 });
}

const LIMITS: PackLimits = { maxPackBytes: 1 << 30, maxObjects: 100_000, maxObjectBytes: 64 << 20, maxDeltaDepth: 4095 };

/** Reads a pack with an in-memory store of what it yielded (and of `known`, for thin packs). */
async function readAll(pack: Uint8Array, limits: PackLimits = LIMITS, known = new Map<string, DeltaBase>(), pieceSize = 4096): Promise<PackObject[]> {
  const byOffset = new Map<number, DeltaBase>();
  const byOid = new Map(known);
  async function* pieces() {
    for (let at = 0; at < pack.length; at += pieceSize) yield pack.subarray(at, at + pieceSize);
  }
  const out: PackObject[] = [];
  for await (const object of readPack(pieces(), limits, { atOffset: (offset) => byOffset.get(offset), byOid: (oid) => byOid.get(oid) })) {
    byOffset.set(object.offset, object);
    byOid.set(object.oid, object);
    out.push(object);
  }
  return out;
}

async function assertRefused(pack: Uint8Array, code: FormatErrorCode, message: RegExp, limits: PackLimits = LIMITS): Promise<void> {
  await assert.rejects(readAll(pack, limits), (error: unknown) => {
    assert.ok(error instanceof FormatError, String(error));
    assert.equal(error.code, code, error.message);
    assert.match(error.message, message);
    return true;
  });
}

function writePack(objects: { type: PackObjectType; body: Buffer }[]): Buffer {
  const writer = new PackWriter();
  return Buffer.concat([writer.header(objects.length), ...objects.map((object) => writer.object(object.type, object.body)), writer.trailer()]);
}

/** A pack by hand: header, raw entries (already encoded), checksum. */
function rawPack(count: number, entries: Buffer[]): Buffer {
  const header = Buffer.alloc(12);
  header.write("PACK", 0, "latin1");
  header.writeUInt32BE(2, 4);
  header.writeUInt32BE(count, 8);
  const body = Buffer.concat([header, ...entries]);
  return Buffer.concat([body, createHash("sha1").update(body).digest()]);
}

describe("PackWriter", () => {
  it("writes packs that git index-pack accepts, with the ids git computes", () => {
    const blob = Buffer.from("hello pack\n");
    const big = randomBytes(200_000);
    const tree = encodeTreeObject([
      { mode: "100644", name: "a.txt", oid: gitBlobId(blob) },
      { mode: "100644", name: "big.bin", oid: gitBlobId(big) },
    ]);
    const commit = Buffer.from(`tree ${packObjectId("tree", tree)}\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n\nm\n`);
    const writer = new PackWriter();
    const pieces = [writer.header(5), writer.object("commit", commit), writer.object("tree", tree), writer.object("blob", blob)];
    const bigOffset = writer.offset;
    pieces.push(writer.object("blob", big));
    // An ofs-delta of a second version of big.bin: its first half, then new bytes.
    const edited = Buffer.concat([big.subarray(0, 100_000), Buffer.from("changed tail")]);
    pieces.push(
      writer.ofsDelta(bigOffset, encodeDelta(big.length, edited.length, [{ copy: { offset: 0, length: 100_000 } }, { insert: Buffer.from("changed tail") }])),
    );
    pieces.push(writer.trailer());
    const pack = Buffer.concat(pieces);

    const repo = join(work, "index-pack");
    git(work, ["init", "-q", "--bare", repo]);
    writeFileSync(join(work, "ours.pack"), pack);
    git(repo, ["index-pack", "-o", join(work, "ours.idx"), join(work, "ours.pack")]);
    const listed = git(repo, ["verify-pack", "-v", join(work, "ours.idx")]).toString();
    for (const oid of [packObjectId("commit", commit), packObjectId("tree", tree), gitBlobId(blob), gitBlobId(big), gitBlobId(edited)]) {
      assert.match(listed, new RegExp(`^${oid} `, "m"));
    }
    assert.match(listed, /chain length = 1: 1 object/);
  });

  it("refuses more or fewer objects than its header announced", () => {
    const writer = new PackWriter();
    writer.header(1);
    assert.throws(() => writer.trailer(), /announced 1 more/);
    writer.object("blob", Buffer.from("x"));
    assert.throws(() => writer.object("blob", Buffer.from("y")), /more objects than/);
  });
});

describe("readPack, on packs git writes", () => {
  const repo = join(work, "source");
  git(work, ["init", "-q", repo]);
  // Versions of one large text file, so that pack-objects makes deltas of them.
  const base = Array.from({ length: 4000 }, (_, i) => `line ${i} ${randomBytes(8).toString("hex")}`);
  for (let version = 0; version < 6; version++) {
    base[version * 100] = `edited in version ${version}`;
    writeFileSync(join(repo, "data.txt"), `${base.join("\n")}\n`);
    writeFileSync(join(repo, `file${version}.bin`), randomBytes(1000));
    git(repo, ["add", "."]);
    git(repo, ["commit", "-q", "-m", `version ${version}`]);
  }
  const expected = new Set(
    git(repo, ["rev-list", "--objects", "--all"])
      .toString()
      .trim()
      .split("\n")
      .map((line) => line.slice(0, 40)),
  );

  for (const [name, args] of [
    ["ofs-deltas", ["--delta-base-offset"]],
    ["ref-deltas", []],
  ] as const) {
    it(`reads every object of a pack with ${name}, whatever the pieces`, async () => {
      const pack = git(repo, ["pack-objects", "--stdout", "--all", "--revs", "-q", ...args], "");
      for (const pieceSize of [7, 4096, pack.length]) {
        const objects = await readAll(pack, LIMITS, new Map(), pieceSize);
        assert.deepEqual(new Set(objects.map((object) => object.oid)), expected);
        assert.ok(
          objects.some((object) => object.depth > 0),
          "the pack has deltas",
        );
        for (const object of objects) assert.equal(packObjectId(object.type, object.data), object.oid);
      }
    });
  }

  it("reads a thin pack against objects the receiver already has", async () => {
    const head = git(repo, ["rev-parse", "HEAD"]).toString().trim();
    const thin = git(repo, ["pack-objects", "--stdout", "--revs", "--thin", "-q"], `${head}\n^${head}~1\n`);
    // What the receiver has: every object of the commits before HEAD.
    const known = new Map<string, DeltaBase>();
    for (const line of git(repo, ["rev-list", "--objects", `${head}~1`])
      .toString()
      .trim()
      .split("\n")) {
      const oid = line.slice(0, 40);
      const type = git(repo, ["cat-file", "-t", oid]).toString().trim() as PackObjectType;
      known.set(oid, { type, data: git(repo, ["cat-file", type, oid]), depth: 0 });
    }
    const objects = await readAll(thin, LIMITS, known);
    assert.ok(objects.some((object) => object.oid === gitBlobId(git(repo, ["show", "HEAD:data.txt"]))));
    await assertRefused(thin, "bad_pack", /delta against object [0-9a-f]{40}, which is neither earlier in the pack nor in the repository/);
  });

  it("refuses a chain of deltas deeper than the limit", async () => {
    const pack = git(repo, ["pack-objects", "--stdout", "--all", "--revs", "-q", "--delta-base-offset", "--depth=10"], "");
    const deepest = Math.max(...(await readAll(pack)).map((object) => object.depth));
    assert.ok(deepest >= 2);
    await assertRefused(pack, "bad_pack", new RegExp(`chain of ${deepest} deltas, above the limit of ${deepest - 1}`), {
      ...LIMITS,
      maxDeltaDepth: deepest - 1,
    });
  });
});

describe("readPack refusals", () => {
  const good = writePack([
    { type: "blob", body: Buffer.from("one") },
    { type: "blob", body: Buffer.from("two") },
  ]);

  it("reads what it wrote", async () => {
    const objects = await readAll(good);
    assert.deepEqual(
      objects.map((object) => object.oid),
      [gitBlobId("one"), gitBlobId("two")],
    );
  });

  it("refuses data that is not a pack, or another version", async () => {
    await assertRefused(Buffer.from("HTTP/1.1 200 OK\r\n\r\n"), "bad_pack", /not a git pack/);
    const v4 = Buffer.from(good);
    v4.writeUInt32BE(4, 4);
    await assertRefused(v4, "bad_pack", /version 4/);
  });

  it("refuses a pack cut short anywhere", async () => {
    for (const length of [5, 12, 14, good.length - 25, good.length - 1]) {
      await assertRefused(good.subarray(0, length), "truncated", /the pack ends inside/);
    }
  });

  it("refuses a wrong checksum, and bytes after the checksum", async () => {
    const wrong = Buffer.from(good);
    wrong[wrong.length - 1] ^= 1;
    await assertRefused(wrong, "bad_pack", /checksum/);
    await assertRefused(Buffer.concat([good, Buffer.from("x")]), "bad_pack", /data follows/);
  });

  it("refuses more objects, more bytes or larger objects than its limits, before reading them", async () => {
    await assertRefused(good, "pack_too_large", /holds 2 objects, above the limit of 1/, { ...LIMITS, maxObjects: 1 });
    await assertRefused(good, "pack_too_large", /exceeds the limit of 20 bytes/, { ...LIMITS, maxPackBytes: 20 });
    await assertRefused(good, "git_object_too_large", /at least 3 bytes, above the limit of 2/, { ...LIMITS, maxObjectBytes: 2 });
    // A header announcing an object of 2^60 bytes: refused on its size alone.
    await assertRefused(rawPack(1, [Buffer.from([0xbf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f])]), "git_object_too_large", /above the limit/);
  });

  it("refuses a body that inflates to another size than its header says", async () => {
    const body = deflateSync(Buffer.from("four"));
    await assertRefused(rawPack(1, [Buffer.from([0x35]), body]), "bad_pack", /inflates to 4 bytes, not the 5/);
    await assertRefused(rawPack(1, [Buffer.from([0x33]), body]), "bad_pack", /inflates to more than the 3 bytes/);
  });

  it("refuses a body that is not zlib data, and one padded with empty blocks", async () => {
    await assertRefused(rawPack(1, [Buffer.from([0x33]), Buffer.from("not zlib at all")]), "bad_pack", /not valid zlib data/);
    // Empty stored blocks inflate to nothing: a stream of them could be endless for a 1-byte object.
    const emptyBlock = Buffer.from([0x00, 0x00, 0x00, 0xff, 0xff]);
    const padded = Buffer.concat([Buffer.from([0x78, 0x01]), ...Array.from({ length: 2000 }, () => emptyBlock)]);
    await assertRefused(rawPack(1, [Buffer.from([0x31]), padded]), "bad_pack", /more compressed bytes than any zlib stream/);
  });

  it("refuses unknown types and deltas whose base is not there", async () => {
    await assertRefused(rawPack(1, [Buffer.from([0x51]), deflateSync(Buffer.from("x"))]), "bad_pack", /unknown type 5/);
    await assertRefused(rawPack(1, [Buffer.from([0x61, 0x7f]), deflateSync(Buffer.from("x"))]), "bad_pack", /base would start outside the pack/);
    const refDelta = Buffer.concat([Buffer.from([0x71]), Buffer.alloc(20, 0xab), deflateSync(Buffer.from("x"))]);
    await assertRefused(rawPack(1, [refDelta]), "bad_pack", /delta against object abab/);
  });
});

describe("deltas", () => {
  const base = randomBytes(300_000);

  it("round-trips copies of every size, including 64 KiB written as size 0 and long ones split", () => {
    const target = Buffer.concat([base.subarray(70_000, 70_000 + 0x10000), Buffer.from("x".repeat(300)), base.subarray(1, 299_000)]);
    const delta = encodeDelta(base.length, target.length, [
      { copy: { offset: 70_000, length: 0x10000 } },
      { insert: Buffer.from("x".repeat(300)) },
      { copy: { offset: 1, length: 298_999 } },
    ]);
    assert.deepEqual(applyDelta(base, delta, 1 << 20), target);
    // The copy instruction git writes for 0x10000 bytes at offset 0: command 0x80, no fields.
    const bare = Buffer.concat([encodeDelta(0x10000, 0x10000, []), Buffer.from([0x80])]);
    assert.deepEqual(applyDelta(base.subarray(0, 0x10000), bare, 1 << 20), base.subarray(0, 0x10000));
  });

  it("refuses deltas that do not fit their base or their announced size", () => {
    const refuse = (delta: Buffer, source: Buffer, message: RegExp, max = 1 << 20) =>
      assert.throws(
        () => applyDelta(source, delta, max),
        (error: unknown) => error instanceof FormatError && message.test(error.message),
      );
    refuse(encodeDelta(10, 0, []), base, /base of 10 bytes/);
    refuse(encodeDelta(base.length, 10, [{ copy: { offset: base.length - 5, length: 10 } }]), base, /reaches past its base/);
    refuse(encodeDelta(base.length, 5, [{ insert: Buffer.from("toolong") }]), base, /more than the 5 bytes/);
    refuse(encodeDelta(base.length, 10, [{ insert: Buffer.from("short") }]), base, /makes 5 bytes, not the 10/);
    refuse(Buffer.concat([encodeDelta(base.length, 1, []), Buffer.from([0x00])]), base, /reserved instruction/);
    refuse(Buffer.concat([encodeDelta(base.length, 1, []), Buffer.from([0x91])]), base, /ends inside a copy/);
    refuse(encodeDelta(base.length, 2 << 20, []), base, /above the limit/);
  });
});
