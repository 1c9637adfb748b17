/**
 * Fresh PostgreSQL databases for the scale-out tests. `CASTOR_TEST_DATABASE_URL` names a role
 * allowed to CREATE DATABASE (scripts/services/postgres.sh prints it); every fixture or server
 * gets its own database `castor_test_<hex>` and drops it on cleanup, so tests never see each
 * other's rows and can run in parallel.
 *
 * For a server: `const db = await createTestDatabase();
 * startCastorServer({ env: { CASTOR_DATABASE_URL: db.url } })`, then `db.drop()` after stopping it.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";

export const TEST_DATABASE_URL_VARIABLE = "CASTOR_TEST_DATABASE_URL";

/** How to get a database, for the failure message of a scale-out test run without one. */
export const START_SERVICES_HINT =
  'start the services with `eval "$(scripts/services.sh start)"` (or `eval "$(scripts/services/postgres.sh start)"` for PostgreSQL alone), then run `npm test -- test/scaleout`';

export interface TestDatabase {
  /** Database name, `castor_test_<hex>`. */
  name: string;
  /** URL of the new database, for CASTOR_DATABASE_URL or PostgresMetadataStore.open. */
  url: string;
  /** Drops the database, ending any connection still open to it. Idempotent. */
  drop(): Promise<void>;
}

/** The admin URL from the environment; throws with instructions when it is not set. */
export function requireTestDatabaseUrl(env: NodeJS.ProcessEnv = process.env): string {
  const url = env[TEST_DATABASE_URL_VARIABLE];
  if (url === undefined || url === "") {
    throw new Error(`${TEST_DATABASE_URL_VARIABLE} is not set: the scale-out tests need a PostgreSQL role allowed to CREATE DATABASE; ${START_SERVICES_HINT}`);
  }
  if (!/^postgres(ql)?:\/\//.test(url)) {
    throw new Error(`${TEST_DATABASE_URL_VARIABLE} must be a postgres:// URL, got ${JSON.stringify(url.replace(/:[^:@/]*@/, ":***@"))}`);
  }
  return url;
}

async function withAdminClient<T>(adminUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** Creates an empty database on the server of `adminUrl` (default: CASTOR_TEST_DATABASE_URL). */
export async function createTestDatabase(adminUrl: string = requireTestDatabaseUrl()): Promise<TestDatabase> {
  const name = `castor_test_${randomBytes(8).toString("hex")}`;
  // The name is ours (hex only), so quoting it as an identifier is all the escaping it needs.
  await withAdminClient(adminUrl, (client) => client.query(`CREATE DATABASE "${name}"`));
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  let dropped: Promise<void> | undefined;
  return {
    name,
    url: url.toString(),
    drop() {
      dropped ??= withAdminClient(adminUrl, async (client) => {
        await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      });
      return dropped;
    },
  };
}
