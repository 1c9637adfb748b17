/**
 * Which PostgreSQL failures mean "the database cannot be reached right now" (castor answers 503
 * and the client retries) and which are a statement's own failure (a violation the store turns
 * into its own error, or a bug). The failures are built as `pg` raises them, so no server is
 * needed; test/scaleout/faults.test.ts restarts a real one under load.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import pg from "pg";
import { isUnavailable } from "../../src/metadata/postgres/connection.js";
import { CorruptRecordError, MetadataUnavailableError } from "../../src/metadata/errors.js";

/** An error the server sent, with its SQLSTATE. */
function serverError(code: string, message: string): pg.DatabaseError {
  const error = new pg.DatabaseError(message, message.length, "error");
  error.code = code;
  return error;
}

function socketError(code: string): Error {
  return Object.assign(new Error(`connect ${code} 127.0.0.1:5432`), { code, syscall: "connect" });
}

describe("isUnavailable: PostgreSQL failures that a retry may get past", () => {
  it("a server restarting or shutting down, or refusing more connections", () => {
    for (const [code, message] of [
      ["57P01", "terminating connection due to administrator command"],
      ["57P02", "terminating connection due to crash of another server process"],
      ["57P03", "the database system is starting up"],
      ["57P03", "the database system is shutting down"],
      ["53300", "sorry, too many clients already"],
      ["08006", "connection failure"],
      ["08001", "could not establish connection"],
    ]) {
      assert.equal(isUnavailable(serverError(code, message)), true, `${code} ${message}`);
    }
  });

  it("a connection refused, reset or timed out on the way, for every address tried", () => {
    for (const code of ["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN"]) {
      assert.equal(isUnavailable(socketError(code)), true, code);
    }
    assert.equal(isUnavailable(new AggregateError([socketError("ECONNREFUSED"), socketError("ECONNREFUSED")])), true, "::1 and 127.0.0.1 both refused");
    assert.equal(isUnavailable(new AggregateError([socketError("ECONNREFUSED"), new TypeError("bad")])), false);
    assert.equal(isUnavailable(new AggregateError([])), false);
  });

  it("pg's own words for a connection that broke or never opened", () => {
    for (const message of [
      "Connection terminated unexpectedly",
      "Connection terminated",
      "Connection terminated due to connection timeout",
      "timeout exceeded when trying to connect",
      "Client has encountered a connection error and is not queryable",
    ]) {
      assert.equal(isUnavailable(new Error(message)), true, message);
    }
    assert.equal(isUnavailable(new MetadataUnavailableError("already classified")), true);
  });

  it("not a statement's own failure, a damaged row or anything else", () => {
    for (const [code, message] of [
      ["23505", "duplicate key value violates unique constraint"],
      ["23503", "insert or update violates foreign key constraint"],
      ["42601", "syntax error at or near"],
      ["40001", "could not serialize access due to concurrent update"],
      ["53100", "could not extend file: No space left on device"],
    ]) {
      assert.equal(isUnavailable(serverError(code, message)), false, `${code} ${message}`);
    }
    assert.equal(isUnavailable(new CorruptRecordError("a stored integer … is beyond …")), false);
    assert.equal(isUnavailable(new Error("the connection to the bug tracker terminated")), false);
    assert.equal(isUnavailable(socketError("ENOENT")), false);
    assert.equal(isUnavailable("Connection terminated"), false, "not an Error");
    assert.equal(isUnavailable(undefined), false);
  });
});
