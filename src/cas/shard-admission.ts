/**
 * The admission of shard registrations against a budget of this process (CASTOR_SHARD_MEMORY_BUDGET).
 *
 * The upload cap (CASTOR_MAX_CONCURRENT_UPLOADS) counts requests, not what they cost, and a
 * shard's cost varies by orders of magnitude: a 49 MB shard of 340,000 files held ~1 GB while it
 * was registered, and eight at once exhausted the heap and killed the process. So each
 * registration is charged what it will hold before it does the expensive work — the memory its
 * body and the packed structures built from it take (`ShardRegistrationService` estimates it
 * from the body's length) and the chunk references its terms make (its CPU: every reference is
 * a merkle leaf to visit) — and runs only while the charges of all registrations in progress
 * fit. Over budget, a registration waits its turn, first come first served, for a bounded time;
 * past it the client gets 503 with Retry-After, which hf_xet and huggingface.js retry on their
 * own. A registration whose charge alone exceeds the budget runs when nothing else does, since
 * the body cap (CASTOR_MAX_SHARD_BYTES) already bounds what one upload can be.
 *
 * The budget is per process: with `castor serve --workers N` every worker has its own heap and
 * its own budget, so the default (derived from the heap limit) fits each of them.
 *
 * Hand-written: the weighted semaphores on npm (async-mutex's, for one) leave a request larger
 * than the whole capacity waiting forever and take no abort signal per waiter; the two gates
 * here are ~60 lines.
 */

/** What one registration is charged, and what all of them in progress may hold in all. */
export interface ShardCharge {
  /** Bytes of memory (the body and what is built from it). */
  memoryBytes: number;
  /** Chunk references its files make (the validation's work). */
  chunkReferences: number;
}

/** What a refused client is told to wait: about a large registration's run. */
const ADMISSION_RETRY_AFTER_SECONDS = 10;

/** A registration that did not get its turn in time: answered 503 with Retry-After. */
export class ShardAdmissionError extends Error {
  override readonly name = "ShardAdmissionError";
  readonly retryAfterSeconds = ADMISSION_RETRY_AFTER_SECONDS;
}

/** Gives back what an admission took; calling it again does nothing. */
export type Release = () => void;

export interface ShardAdmissionOptions {
  /** The budget of this process. */
  budget: ShardCharge;
  /** The longest a registration waits for its turn (CASTOR_SHARD_ADMISSION_WAIT). */
  maxWaitMs: number;
}

/**
 * Two first-come-first-served gates, one per part of the charge. A registration takes its
 * memory before its body is read (the charge is known from the body's length) and its chunk
 * references once the body is parsed; both waits together are bounded by one deadline. A
 * registration holding memory and waiting for references cannot deadlock: references are only
 * held by registrations that have everything they need and will finish.
 */
export class ShardAdmission {
  readonly maxWaitMs: number;
  private readonly memory: WeightedGate;
  private readonly work: WeightedGate;

  constructor(options: ShardAdmissionOptions) {
    this.memory = new WeightedGate("memory", positive("budget.memoryBytes", options.budget.memoryBytes));
    this.work = new WeightedGate("chunk references", positive("budget.chunkReferences", options.budget.chunkReferences));
    this.maxWaitMs = options.maxWaitMs;
    if (!(this.maxWaitMs >= 0)) throw new RangeError(`maxWaitMs must be ≥ 0, got ${this.maxWaitMs}`);
  }

  /** What is held now and what is queued, by part (for tests and metrics). */
  get usage(): { memoryBytes: number; chunkReferences: number; waiting: number } {
    return { memoryBytes: this.memory.inUse, chunkReferences: this.work.inUse, waiting: this.memory.queued + this.work.queued };
  }

  /** A deadline for the waits of one registration, starting now. */
  deadline(): number {
    return performance.now() + this.maxWaitMs;
  }

  /** Takes `bytes` of memory, waiting until `deadline` at most. Throws ShardAdmissionError, or the signal's reason. */
  admitMemory(bytes: number, deadline: number, signal?: AbortSignal): Promise<Release> {
    return this.memory.acquire(bytes, deadline, signal);
  }

  /** Takes `references` chunk references of work, waiting until `deadline` at most. */
  admitWork(references: number, deadline: number, signal?: AbortSignal): Promise<Release> {
    return this.work.acquire(references, deadline, signal);
  }
}

function positive(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

interface Waiter {
  amount: number;
  grant: () => void;
  refuse: (error: unknown) => void;
}

/**
 * A weighted semaphore served in arrival order: the first waiter runs as soon as its amount
 * fits (or nothing is held, for an amount larger than the capacity), and nobody overtakes it,
 * so a large registration is not starved by a stream of small ones.
 */
class WeightedGate {
  inUse = 0;
  private readonly queue: Waiter[] = [];

  constructor(
    private readonly what: string,
    private readonly capacity: number,
  ) {}

  get queued(): number {
    return this.queue.length;
  }

  acquire(amount: number, deadline: number, signal?: AbortSignal): Promise<Release> {
    if (!Number.isSafeInteger(amount) || amount < 0) return Promise.reject(new RangeError(`an admission takes a non-negative integer amount, got ${amount}`));
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.queue.length === 0 && this.fits(amount)) return Promise.resolve(this.take(amount));
    return new Promise<Release>((resolve, reject) => {
      const leave = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        const at = this.queue.indexOf(waiter);
        if (at !== -1) this.queue.splice(at, 1);
      };
      const waiter: Waiter = {
        amount,
        grant: () => {
          leave();
          resolve(this.take(amount));
        },
        refuse: (error) => {
          leave();
          reject(error);
          // It may have been first in line: those behind it may fit now.
          this.serve();
        },
      };
      const timer = setTimeout(
        () =>
          waiter.refuse(
            new ShardAdmissionError(
              `this castor process is registering as many shards as its budget allows (${this.what}: ${this.inUse} of ${this.capacity} in use, ${this.queue.length} waiting) and this one did not get its turn in time: upload it again in ${ADMISSION_RETRY_AFTER_SECONDS} s (hf_xet and huggingface.js retry on their own)`,
            ),
          ),
        Math.max(0, deadline - performance.now()),
      );
      const onAbort = () => waiter.refuse(signal!.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.queue.push(waiter);
    });
  }

  private fits(amount: number): boolean {
    return this.inUse + amount <= this.capacity || this.inUse === 0;
  }

  private take(amount: number): Release {
    this.inUse += amount;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inUse -= amount;
      this.serve();
    };
  }

  /** Grants waiters in order while the first one fits. */
  private serve(): void {
    while (this.queue.length > 0 && this.fits(this.queue[0].amount)) this.queue[0].grant();
  }
}
