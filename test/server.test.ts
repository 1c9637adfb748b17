/**
 * `startServer` refusals that `loadConfig` cannot see, because they depend on what the opened
 * stores can do: presigned transfer URLs need a blob store with the range-presigning capability.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { ConfigError, loadConfig } from "../src/config.js";
import { startServer } from "../src/server.js";

describe("startServer", () => {
  it("refuses presigned transfer URLs with a blob store that cannot presign, before listening", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "castor-server-"));
    try {
      const embedded = loadConfig({ CASTOR_DATA_DIR: dataDir, CASTOR_LISTEN: "127.0.0.1:0", CASTOR_LOG_LEVEL: "silent" });
      // loadConfig refuses presigned mode without S3; a config built another way reaches the server's own check.
      const config = { ...embedded, transferMode: "presigned" as const };
      await assert.rejects(startServer(config), (err: unknown) => {
        assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
        assert.match(err.message, /CASTOR_TRANSFER_MODE=presigned needs a blob store that presigns URLs.*CASTOR_S3_BUCKET/);
        return true;
      });
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
