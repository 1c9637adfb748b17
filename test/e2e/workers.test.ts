// `castor serve --workers N` on the embedded stores (SQLite + files); the cases are in workers-suite.ts.
import { join } from "node:path";
import Database from "better-sqlite3";
import { BUSY_TIMEOUT_MS, METADATA_FILE_NAME, MIGRATIONS } from "../../src/metadata/sqlite.js";
import { runWorkersSuite } from "./workers-suite.js";

runWorkersSuite({
  scaleOut: false,
  async holdWriteLocks(server) {
    const db = new Database(join(server.dataDir, METADATA_FILE_NAME));
    db.exec("BEGIN IMMEDIATE");
    return async () => {
      db.exec("COMMIT");
      db.close();
    };
  },
  // Past SQLite's own busy timeout, after which a write that let SQLite wait would fail with SQLITE_BUSY.
  holdMs: BUSY_TIMEOUT_MS + 1000,
  async markSchemaNewer(server) {
    const db = new Database(join(server.dataDir, METADATA_FILE_NAME));
    db.pragma(`user_version = ${MIGRATIONS.length + 1}`);
    db.close();
  },
});
