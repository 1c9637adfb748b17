// `castor serve --workers N` on PostgreSQL + S3 (Ceph RGW); the cases are in test/e2e/workers-suite.ts.
import pg from "pg";
import { runWorkersSuite } from "../e2e/workers-suite.js";
import { scaleOutUnavailable, type ServerProcess } from "../helpers/server.js";

const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the scale-out worker tests need PostgreSQL and S3: ${unavailable}`);

/** A client of the server's own database (each server started with `scaleOut: true` has a fresh one). */
async function databaseOf(server: ServerProcess): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: server.settings.CASTOR_DATABASE_URL });
  await client.connect();
  return client;
}

runWorkersSuite({
  scaleOut: true,
  async holdWriteLocks(server) {
    const client = await databaseOf(server);
    await client.query("BEGIN");
    // EXCLUSIVE lets readers through and stops every writer of these tables: xorb records,
    // shard registrations, branch moves (commits).
    await client.query("LOCK TABLE xorbs, shards, revisions IN EXCLUSIVE MODE");
    return async () => {
      await client.query("COMMIT");
      await client.end();
    };
  },
  holdMs: 3000,
  async markSchemaNewer(server) {
    const client = await databaseOf(server);
    try {
      await client.query("UPDATE castor_schema SET version = version + 1000");
    } finally {
      await client.end();
    }
  },
});
