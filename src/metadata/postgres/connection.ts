/**
 * The pool every record family of the scale-out store (repos.ts, tokens.ts, history.ts, cas.ts,
 * migration.ts) queries through: opened and migrated once, statements run by name (so every
 * pooled connection parses and plans each once; names are unique across the families),
 * transactions on one pooled connection.
 *
 * `pg` returns bigint columns as strings; the pool parses them into numbers and refuses any
 * stored value beyond Number.MAX_SAFE_INTEGER with CorruptRecordError instead of rounding it.
 *
 * A server that restarts or goes away fails the statements in flight and the connections that
 * open meanwhile; those failures become MetadataUnavailableError (HTTP 503, clients retry). The
 * pool drops the broken connections and opens new ones once the server answers again: nothing
 * needs a restart of castor.
 */
import pg from "pg";
import type { PoolClient, QueryResultRow } from "pg";
import { CorruptRecordError, MetadataUnavailableError } from "../errors.js";
import { inTransaction, migrate, PostgresSchemaError } from "./schema.js";

const { Pool, DatabaseError, TypeOverrides, types } = pg;

/** Connections per node when the caller does not say; pg's own default, ample for one process. */
export const DEFAULT_POOL_SIZE = 10;

/** How long opening a connection may take before the call fails (a wrong host must not hang). */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** The database could not be reached or refused the connection (castor cannot start). */
export class PostgresConnectionError extends Error {
  override readonly name = "PostgresConnectionError";
}

export interface PostgresStoreOptions {
  /** Most connections this store holds at once; default DEFAULT_POOL_SIZE. */
  poolSize?: number;
  /** Default DEFAULT_CONNECT_TIMEOUT_MS. */
  connectTimeoutMs?: number;
}

export const PG_UNIQUE_VIOLATION = "23505";
export const PG_FOREIGN_KEY_VIOLATION = "23503";
/** bigint[]; pg's builtins table names scalar types only. */
const INT8_ARRAY_OID = 1016;

/**
 * Type parsers of this store's pool (the process-wide `pg.types` stay untouched): bigint values
 * become numbers, and a value a number cannot hold exactly is a damaged row, not a rounding.
 */
function storeTypeParsers(): pg.CustomTypesConfig {
  const overrides = new TypeOverrides();
  const parseInt8 = (text: string): number => {
    const value = Number(text);
    if (!Number.isSafeInteger(value)) {
      throw new CorruptRecordError(
        `a stored integer ${text} is beyond ${Number.MAX_SAFE_INTEGER}, the largest castor handles: the metadata database is damaged (restore it from a backup)`,
      );
    }
    return value;
  };
  // @types/pg types getTypeParser's oid as the scalar builtins enum, which lacks array types.
  const builtinParser = types.getTypeParser as (oid: number) => (text: string) => unknown;
  const parseInt8Array = builtinParser(INT8_ARRAY_OID) as (text: string) => string[];
  overrides.setTypeParser(types.builtins.INT8, parseInt8);
  overrides.setTypeParser(INT8_ARRAY_OID, (text: string) => parseInt8Array(text).map(parseInt8));
  return overrides;
}

export class PostgresConnection {
  /**
   * Connects to `databaseUrl` (a `postgres://` URL), brings the schema up to date and returns
   * the store. PostgresConnectionError when the server cannot be reached or refuses the login;
   * PostgresSchemaError when a newer castor migrated the database.
   */
  static async open(databaseUrl: string, options: PostgresStoreOptions = {}): Promise<PostgresConnection> {
    const poolSize = options.poolSize ?? DEFAULT_POOL_SIZE;
    if (!Number.isSafeInteger(poolSize) || poolSize < 1) {
      throw new RangeError(`the PostgreSQL pool size must be a positive integer, got ${poolSize}`);
    }
    const pool = new Pool({
      connectionString: databaseUrl,
      max: poolSize,
      connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      application_name: "castor",
      types: storeTypeParsers(),
    });
    // An idle connection that breaks (server restart, network cut) is discarded by the pool and
    // the next query opens a new one; without a listener the 'error' event would kill the process.
    pool.on("error", () => undefined);
    try {
      await migrate(pool, describeDatabase(databaseUrl));
    } catch (err) {
      await pool.end().catch(() => undefined);
      throw isConnectionFailure(err)
        ? new PostgresConnectionError(
            `cannot use the PostgreSQL database ${describeDatabase(databaseUrl)}: ${(err as Error).message}; check CASTOR_DATABASE_URL and that the server is running`,
            { cause: err },
          )
        : err;
    }
    return new PostgresConnection(pool, poolSize, describeDatabase(databaseUrl));
  }

  private closed = false;

  private constructor(
    private readonly pool: pg.Pool,
    /** Most connections this store holds at once. */
    readonly poolSize: number,
    /** host:port/database, for messages. */
    private readonly database: string,
  ) {}

  /** Runs the statement `text` under `name` on any pooled connection. */
  query<R extends QueryResultRow>(name: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    return this.pool.query<R>({ name, text, values }).catch((err: unknown) => this.failed(err));
  }

  /** Runs the statement `text` under `name` on `client` (inside `inTransaction`). */
  queryOn<R extends QueryResultRow>(client: PoolClient, name: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    return client.query<R>({ name, text, values }).catch((err: unknown) => this.failed(err));
  }

  /** A record family's table of named statements, run on this connection. */
  statements<Sql extends Readonly<Record<string, string>>>(sql: Sql): NamedStatements<Sql> {
    return new NamedStatements(this, sql);
  }

  /** Runs `work` in a transaction on one pooled connection; any error rolls everything back. */
  inTransaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    // Also covers opening the connection, BEGIN and COMMIT, which `work` does not run.
    return inTransaction(this.pool, work).catch((err: unknown) => this.failed(err));
  }

  /** Rethrows `err`, as MetadataUnavailableError when it says the server cannot be reached. */
  private failed(err: unknown): never {
    if (err instanceof MetadataUnavailableError || !isUnavailable(err)) throw err;
    throw new MetadataUnavailableError(`the PostgreSQL database ${this.database} is unavailable: ${(err as Error).message}`, { cause: err });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }
}

/** host:port/database of a connection URL, never its password (for error messages). */
function describeDatabase(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    return `${url.hostname || "localhost"}:${url.port || "5432"}${url.pathname || "/"}`;
  } catch {
    return "named by CASTOR_DATABASE_URL";
  }
}

/**
 * Errors that mean "no usable connection" rather than a bug in a statement: network failures,
 * timeouts, refused logins, a missing database.
 */
function isConnectionFailure(err: unknown): boolean {
  if (err instanceof DatabaseError) {
    // Class 08: connection exception; 28: invalid authorization; 3D000: no such database;
    // 57P03: the server is starting up or shutting down; 42501: the role may not create the
    // schema (a setup problem the operator fixes, like the others).
    const code = err.code ?? "";
    return code.startsWith("08") || code.startsWith("28") || ["3D000", "57P03", "42501"].includes(code);
  }
  return err instanceof Error && !(err instanceof PostgresSchemaError);
}

/**
 * SQLSTATEs of a server that cannot serve the session now: class 08 (connection exception),
 * 53300 (too many connections), 57P01/57P02 (the session ended by a fast or crash shutdown),
 * 57P03 (starting up or shutting down).
 */
const UNAVAILABLE_STATES = new Set(["53300", "57P01", "57P02", "57P03"]);
/** Socket errors on the way to the server. */
const UNAVAILABLE_SOCKET_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "EAI_AGAIN",
  "ENOTFOUND",
]);
/**
 * pg's own errors for a connection that broke or never opened, which carry no code: "Connection
 * terminated unexpectedly" (and "… due to connection timeout"), the pool's "timeout exceeded when
 * trying to connect", a client "not queryable" after its connection failed.
 */
const UNAVAILABLE_MESSAGE = /^Connection terminated\b|^timeout exceeded when trying to connect$|is not queryable$/;

/** Whether `err` says the database cannot be reached right now, rather than that a statement failed. */
export function isUnavailable(err: unknown): boolean {
  if (err instanceof MetadataUnavailableError) return true;
  if (err instanceof DatabaseError) {
    const code = err.code ?? "";
    return code.startsWith("08") || UNAVAILABLE_STATES.has(code);
  }
  if (!(err instanceof Error)) return false;
  const code = (err as NodeJS.ErrnoException).code;
  if (code !== undefined && UNAVAILABLE_SOCKET_CODES.has(code)) return true;
  // Several addresses tried (localhost as ::1 and 127.0.0.1): every one failed.
  if (err instanceof AggregateError) return err.errors.length > 0 && err.errors.every(isUnavailable);
  return UNAVAILABLE_MESSAGE.test(err.message);
}

export function isViolation(err: unknown, code: string): boolean {
  return err instanceof DatabaseError && err.code === code;
}

/**
 * A record family's statements, each run under its key as the statement name (pg prepares a
 * named statement once per connection): `run` on any pooled connection, `runOn` on a
 * transaction's.
 */
export class NamedStatements<Sql extends Readonly<Record<string, string>>> {
  constructor(
    private readonly connection: PostgresConnection,
    private readonly sql: Sql,
  ) {}

  run<R extends QueryResultRow>(name: keyof Sql & string, values: unknown[]): Promise<pg.QueryResult<R>> {
    return this.connection.query<R>(name, this.sql[name], values);
  }

  runOn<R extends QueryResultRow>(client: PoolClient, name: keyof Sql & string, values: unknown[]): Promise<pg.QueryResult<R>> {
    return this.connection.queryOn<R>(client, name, this.sql[name], values);
  }
}
