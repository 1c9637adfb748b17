/**
 * The data disk's maintenance reserve (src/storage/reserve.ts) on a roomy disk; its use on a
 * full one is shown by test/e2e/disk-full.test.ts on a real, filled tmpfs.
 */
import assert from "node:assert/strict";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { ensureReserve, RESERVE_FILE_NAME, reserveOf, withReserveReleased } from "../../src/storage/reserve.js";
import { loadConfig } from "../../src/config.js";
import { withTempDir } from "../helpers/temp-dir.js";

const BYTES = 3 * 1024 * 1024 + 5;

describe("the maintenance reserve", () => {
  it("is written out whole once, kept, resized when the setting changes, and removed when set to 0", () =>
    withTempDir("castor-reserve-", async (dataDir) => {
      const reserve = { dataDir, bytes: BYTES, keepFreeBytes: 0 };
      assert.equal(await ensureReserve(reserve), "created");
      const file = await stat(join(dataDir, RESERVE_FILE_NAME));
      assert.equal(file.size, BYTES);
      assert.ok(file.blocks * 512 >= BYTES, "allocated, not sparse");
      assert.equal(await ensureReserve(reserve), "present");
      assert.equal(await ensureReserve({ ...reserve, bytes: 1024 }), "created");
      assert.equal((await stat(join(dataDir, RESERVE_FILE_NAME))).size, 1024);
      assert.equal(await ensureReserve({ ...reserve, bytes: 0 }), "off");
      assert.deepEqual(await readdir(dataDir), []);
    }));

  it("is not made where it would leave less than the minimum free space, and leaves nothing partial", () =>
    withTempDir("castor-reserve-", async (dataDir) => {
      assert.equal(await ensureReserve({ dataDir, bytes: BYTES, keepFreeBytes: Number.MAX_SAFE_INTEGER }), "no room");
      assert.deepEqual(await readdir(dataDir), []);
    }));

  it("stays in place around maintenance on a disk with room, and is made if it was missing", () =>
    withTempDir("castor-reserve-", async (dataDir) => {
      const reserve = { dataDir, bytes: BYTES, keepFreeBytes: 0 };
      const said: string[] = [];
      assert.equal(
        await withReserveReleased(
          reserve,
          (line) => said.push(line),
          async () => "done",
        ),
        "done",
      );
      assert.deepEqual(said, [`reserved ${BYTES} bytes for maintenance again (CASTOR_RESERVED_SPACE)`]);
      const before = await stat(join(dataDir, RESERVE_FILE_NAME));
      await withReserveReleased(
        reserve,
        (line) => said.push(line),
        async () => {
          assert.equal((await stat(join(dataDir, RESERVE_FILE_NAME))).ino, before.ino, "not released while the disk has room");
        },
      );
      assert.equal(said.length, 1);
    }));

  it("is kept only where the data dir stores data: not when PostgreSQL and S3 hold everything", () => {
    assert.deepEqual(reserveOf(loadConfig({ CASTOR_DATA_DIR: "/srv/castor" })), {
      dataDir: "/srv/castor",
      bytes: 64 * 1024 * 1024,
      keepFreeBytes: 16 * 1024 * 1024,
    });
    const scaledOut = loadConfig({ CASTOR_DATA_DIR: "/srv/castor", CASTOR_DATABASE_URL: "postgres://db/castor", CASTOR_S3_BUCKET: "castor" });
    assert.equal(reserveOf(scaledOut), null);
  });
});
