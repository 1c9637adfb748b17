/**
 * Two small concurrency tools, for castor's client (uploads, downloads) and the server (a
 * commit's inline writes, hub/inline-contents.ts) alike: it imports nothing, so either may
 * import it. Hand-written: each is a dozen lines, and the npm packages that do this — p-limit,
 * p-queue — would be the client's only dependencies.
 *
 * - `Limiter`: at most N promises of some kind running at once;
 * - `TaskPool`: a bounded background pool whose `submit` waits for a free slot, so a
 *   producer is held back (and memory bounded) while N tasks are in flight; the first
 *   failure stops the pool and is rethrown to the producer.
 */
export class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly concurrency: number) {
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError("concurrency must be an integer ≥ 1");
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active >= this.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.active++;
    try {
      return await task();
    } finally {
      this.active--;
      this.waiting.shift()?.();
    }
  }
}

export class TaskPool {
  private readonly running = new Set<Promise<void>>();
  private failure: { error: unknown } | null = null;

  constructor(readonly concurrency: number) {
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError("concurrency must be an integer ≥ 1");
  }

  /** Starts `task` once a slot is free; throws the pool's first failure instead, if any. */
  async submit(task: () => Promise<void>): Promise<void> {
    while (this.running.size >= this.concurrency) {
      await Promise.race(this.running);
    }
    this.throwIfFailed();
    const run: Promise<void> = task()
      .catch((error: unknown) => {
        this.failure ??= { error };
      })
      .finally(() => this.running.delete(run));
    this.running.add(run);
  }

  /** Waits for every task; throws the first failure. */
  async drain(): Promise<void> {
    while (this.running.size > 0) await Promise.race(this.running);
    this.throwIfFailed();
  }

  /** Waits for running tasks without throwing (cleanup after another error). */
  async settle(): Promise<void> {
    while (this.running.size > 0) await Promise.race(this.running);
  }

  private throwIfFailed(): void {
    if (this.failure !== null) throw this.failure.error;
  }
}
