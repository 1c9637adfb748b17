/**
 * Waiting out backpressure on an output stream, shared by the file reader (downloads) and the
 * transfer routes (xorb ranges), which both write spans as fast as their output takes them.
 */
import type { Writable } from "node:stream";

/**
 * Resolves once `out` has drained, or has closed: a client that went away never drains, and
 * the writer must not wait on it forever (its next write then fails, or it sees the close).
 */
export function drainedOrClosed(out: Writable): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      out.off("drain", done).off("close", done);
      resolve();
    };
    out.on("drain", done).on("close", done);
  });
}
