/** Assertions on the FormatErrors of src/format: the code says what is wrong, the message where. */
import assert from "node:assert/strict";
import { FormatError, type FormatErrorCode } from "../../src/format/errors.js";

/** Asserts that `fn` throws a FormatError with `code` (and a message matching `message`); returns it. */
export function expectFormatError(fn: () => unknown, code: FormatErrorCode, message?: RegExp): FormatError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof FormatError, `expected a FormatError ${code}, got ${String(caught)}`);
  assert.equal(caught.code, code, caught.message);
  if (message) assert.match(caught.message, message);
  return caught;
}
