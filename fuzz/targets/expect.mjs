// Shared by the fuzz targets (not a target itself: scripts/fuzz.mjs runs only the files listed
// in its TARGETS). A target calls the real parser and passes what it throws through `expected`:
// the parser's documented error types are the normal answer to bad input, anything else is a
// finding and is rethrown for Jazzer to report (with the input that caused it).

/** Rethrows `error` unless it is an instance of one of `types` (and, when given, `accept` says yes). */
export function expected(error, types, accept = () => true) {
  for (const type of types) if (error instanceof type && accept(error)) return;
  throw error;
}

/** The input as text: UTF-8 with replacement characters, as Node decodes a request's bytes. */
export function text(data) {
  return Buffer.from(data).toString("utf8");
}
