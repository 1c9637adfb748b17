/**
 * Work written as a generator that pauses (yields) between bounded steps, so a caller on an
 * event loop can let other work run in between. `runToEnd` is the caller that does not pause.
 */

/** Drives `steps` to its end in one go and returns its result. */
export function runToEnd<T>(steps: Generator<void, T, void>): T {
  for (;;) {
    const next = steps.next();
    if (next.done) return next.value;
  }
}
