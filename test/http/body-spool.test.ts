import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { receiveSpooled, sweepSpool } from "../../src/http/body-spool.js";
import { tempDirForFile } from "../helpers/temp-dir.js";

const root = tempDirForFile("castor-spool-");

async function* piecesOf(body: Buffer, size: number, failAfter?: number): AsyncGenerator<Buffer> {
  for (let at = 0; at < body.length; at += size) {
    if (failAfter !== undefined && at >= failAfter) throw new Error("client went away");
    yield body.subarray(at, at + size);
  }
}

describe("receiveSpooled", () => {
  it("returns a small body from memory without touching the disk", async () => {
    const dir = join(root.path, "small");
    const body = randomBytes(100_000);
    const received = await receiveSpooled(piecesOf(body, 65_536), { dir, memoryBytes: 1 << 20 });
    assert.equal(received.length, body.length);
    assert.ok(Buffer.from(await received.read()).equals(body));
    await received.dispose();
    await assert.rejects(readdir(dir), { code: "ENOENT" }, "no spool folder was made");
  });

  it("spools a body past the memory bound to disk, keeps it there until it is read, reads it back exactly and removes the file", async () => {
    const dir = join(root.path, "large");
    const body = randomBytes(5 * 1024 * 1024 + 123);
    const received = await receiveSpooled(piecesOf(body, 65_536), { dir, memoryBytes: 1 << 20 });
    assert.equal(received.length, body.length);
    assert.equal((await readdir(dir)).length, 1, "the body waits on disk");
    assert.ok(Buffer.from(await received.read()).equals(body));
    assert.deepEqual(await readdir(dir), []);
    await received.dispose();
    await assert.rejects(received.read(), /read or disposed of already/);
  });

  it("removes the file of a body disposed of unread", async () => {
    const dir = join(root.path, "unread");
    const received = await receiveSpooled(piecesOf(randomBytes(3 << 20), 65_536), { dir, memoryBytes: 1 << 20 });
    assert.equal((await readdir(dir)).length, 1);
    await received.dispose();
    await received.dispose();
    assert.deepEqual(await readdir(dir), []);
  });

  it("removes the file when the body fails midway, and passes the error on", async () => {
    const dir = join(root.path, "failed");
    await assert.rejects(receiveSpooled(piecesOf(randomBytes(3 << 20), 65_536, 2 << 20), { dir, memoryBytes: 1 << 20 }), /client went away/);
    assert.deepEqual(await readdir(dir), []);
  });
});

describe("sweepSpool", () => {
  it("removes spool files older than the age given, and nothing else", async () => {
    const dir = join(root.path, "sweep");
    await (await receiveSpooled(piecesOf(Buffer.alloc(10), 10), { dir, memoryBytes: 1 })).dispose(); // creates the folder
    await writeFile(join(dir, "body-1-old"), "x");
    await writeFile(join(dir, "body-1-young"), "x");
    await writeFile(join(dir, "unrelated"), "x");
    const hourAgo = new Date(Date.now() - 2 * 3600_000);
    await utimes(join(dir, "body-1-old"), hourAgo, hourAgo);
    assert.equal(await sweepSpool(dir, 3600_000), 1);
    assert.deepEqual((await readdir(dir)).sort(), ["body-1-young", "unrelated"]);
  });
});
