/**
 * Read buffers taken and given back, so that serving stored bytes allocates nothing per read.
 *
 * Why: a fresh 1 MiB Buffer per read is fresh memory. The kernel has to fault in and zero its
 * pages before `pread` can fill them (on a VM that is dearer still), and V8 counts it as
 * external memory. In `npm run bench -- clients`, streaming hf_xet's downloads through fresh
 * read buffers cost castor about twice the CPU of reading into reused ones.
 *
 * The one rule: a buffer is given back only when nothing will read it any more. For a socket
 * write that is the write's callback (src/http/transfer-routes.ts). A buffer never given back is
 * simply not reused, so forgetting is safe; giving back too early corrupts a response.
 */
export class BufferPool {
  private readonly idle: Buffer[] = [];

  /**
   * @param bufferBytes size of every buffer
   * @param maxIdle buffers kept for reuse; beyond that, given-back buffers are left to the GC
   */
  constructor(
    readonly bufferBytes: number,
    private readonly maxIdle: number,
  ) {
    if (!Number.isSafeInteger(bufferBytes) || bufferBytes <= 0) throw new RangeError(`bufferBytes must be a positive integer, got ${bufferBytes}`);
    if (!Number.isSafeInteger(maxIdle) || maxIdle < 0) throw new RangeError(`maxIdle must be a non-negative integer, got ${maxIdle}`);
  }

  /** A buffer of `bufferBytes`, reused when one is idle. It holds whatever it held before. */
  take(): Buffer {
    // allocUnsafeSlow: memory of its own, never a slice of Node's shared small-buffer pool.
    return this.idle.pop() ?? Buffer.allocUnsafeSlow(this.bufferBytes);
  }

  /** Gives back a buffer from `take()` that nothing reads any more. */
  give(buffer: Buffer): void {
    if (buffer.length !== this.bufferBytes || this.idle.length >= this.maxIdle) return;
    this.idle.push(buffer);
  }

  /** Buffers idle right now. */
  get idleCount(): number {
    return this.idle.length;
  }
}
