/**
 * A commit's inline contents kept aside until the commit validated (src/hub/inline-contents.ts):
 * past the memory bound they wait in one temp file, every content reaches the blob store intact
 * and once, and the temp file is gone after `close` whether they were stored or not.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { InlineContents } from "../../src/hub/inline-contents.js";
import { blobKeyFromHex } from "../../src/storage/blob-store.js";
import { useFreshStores } from "../helpers/stores.js";

const stores = useFreshStores("inline-contents");
const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

describe("a commit's inline contents", () => {
  it("keep the first bytes in memory and the rest in one temp file, then store every content once, intact", async () => {
    const { dir, blobs, metadata } = stores();
    const spool = join(dir, "spool");
    const contents = new InlineContents({ dir: spool, memoryBytes: 100_000 });
    const files = Array.from({ length: 40 }, (_, i) => randomBytes(10_000 + i));
    for (const file of files) await contents.add(sha256(file), file);
    // The same content again (two paths, one blob): kept once.
    await contents.add(sha256(files[0]), files[0]);
    assert.equal((await readdir(spool)).length, 1, "past 100,000 bytes the contents wait in one file");
    assert.deepEqual(await readdir(join(dir, "blobs", "inline")).catch(() => []), [], "nothing stored before `store`");

    await contents.store(blobs, metadata);
    for (const file of files) {
      const stored = await blobs.read(blobKeyFromHex("inline", sha256(file)));
      const chunks: Buffer[] = [];
      for await (const chunk of stored) chunks.push(chunk as Buffer);
      assert.ok(Buffer.concat(chunks).equals(file));
    }
    await contents.close();
    assert.deepEqual(await readdir(spool), [], "the temp file is removed");
  });

  it("leave nothing behind when closed without being stored (a refused commit)", async () => {
    const { dir } = stores();
    const spool = join(dir, "spool");
    const contents = new InlineContents({ dir: spool, memoryBytes: 1000 });
    for (let i = 0; i < 5; i++) {
      const file = randomBytes(2000);
      await contents.add(sha256(file), file);
    }
    assert.equal((await readdir(spool)).length, 1);
    await contents.close();
    assert.deepEqual(await readdir(spool), []);
    assert.deepEqual(await readdir(join(dir, "blobs", "inline")).catch(() => []), []);
  });
});
