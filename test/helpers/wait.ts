/**
 * Waiting in tests, by what happened rather than by how long: `within` bounds a wait for an
 * event (a promise), `until` polls a condition that no event announces, and `settlesWithin` is
 * for the few checks that something did NOT happen, where letting a bounded time pass is the
 * point. node:test has no default timeout here, so every wait carries its own bound.
 */

/** `promise`'s value, or a rejection naming `what` when it takes longer than `ms`. */
export async function within<T>(promise: Promise<T>, what: string, ms = 5000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Resolves once `condition` holds, checked every `everyMs`; rejects naming `what` after `ms`.
 * Only for state that no event announces (a listener closing, bytes a socket has read, files
 * on disk): where there is an event, wait for it with `within`.
 */
export async function until(condition: () => boolean | Promise<boolean>, what: string, ms = 5000, everyMs = 5): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/**
 * Whether `promise` settles within `ms`. For asserting that something does not happen: a
 * `false` means only "not within `ms`", so use it where `ms` is far longer than the thing
 * would take if it did happen.
 */
export function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
  ]).finally(() => clearTimeout(timer));
}
