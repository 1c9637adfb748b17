/**
 * Checkpoints of the embedded store's WAL on a thread of their own, for `castor serve`.
 *
 * By default SQLite checkpoints inside the commit that grows the WAL past 1,000 pages: that
 * commit copies every page of the log back into the database file and waits for two fsyncs, on
 * the thread that runs the event loop. On a small store a commit dirties a few pages and this
 * costs little; on a large one every registration inserts into B-trees keyed by random hashes
 * (a 1,000-file shard dirties ~5,000 pages, ~20 MB), and the checkpoint it triggers was more
 * than half of the registration's time at a million files (`npm run bench -- scale`).
 *
 * With the checkpointer, the serving connections only append to the log; a worker thread with a
 * connection of its own runs a PASSIVE checkpoint (which never blocks readers or the writer) a
 * few times a second, so the copying and the fsyncs happen on another core while requests are
 * served. The connections keep an automatic checkpoint at a larger size as a backstop: should the
 * thread fall behind or die, the log still cannot grow without bound. Commands that run briefly
 * (admin commands) keep SQLite's default, since a thread would cost them more than it saves.
 *
 * The worker is a few lines of plain JavaScript evaluated from a string, given the driver's
 * resolved path: it needs none of castor's modules, so it starts the same whether castor runs
 * compiled or from TypeScript under a loader.
 */
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** Pages (of 4 KiB) the log may hold before a commit checkpoints it itself: the backstop. */
export const BACKSTOP_CHECKPOINT_PAGES = 16_384;

/** How often the thread checkpoints; a check of an empty log costs microseconds. */
const INTERVAL_MS = 100;

const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
const db = new Database(workerData.path, { fileMustExist: true, timeout: 0 });
const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)");
let last = "";
const timer = setInterval(() => {
  try {
    const { log, checkpointed } = checkpoint.get();
    // Told only when something changed: an idle server's log stays as it is between writes.
    if (log > 0 && \`\${log}/\${checkpointed}\` !== last) parentPort.postMessage({ log, checkpointed });
    last = \`\${log}/\${checkpointed}\`;
  } catch {
    // Another connection is checkpointing (another worker's thread, a backstop): it does the work.
  }
}, workerData.intervalMs);
parentPort.once("message", () => {
  clearInterval(timer);
  try {
    checkpoint.get();
  } catch {}
  db.close();
  parentPort.close();
});
`;

/** A checkpoint that found the log changed since the last: its frames, and how many are copied back. */
export interface CheckpointOutcome {
  log: number;
  checkpointed: number;
}

export class WalCheckpointer {
  private readonly worker: Worker;
  private readonly exited: Promise<void>;
  private readonly waiting = new Set<(outcome: CheckpointOutcome) => void>();
  private stopping = false;

  /** Starts checkpointing the database at `path` (which must exist, in WAL mode). */
  constructor(path: string) {
    const driver = createRequire(import.meta.url).resolve("better-sqlite3");
    this.worker = new Worker(WORKER_SOURCE, { eval: true, execArgv: [], workerData: { path, driver, intervalMs: INTERVAL_MS } });
    // A thread that failed leaves the checkpoints to the backstop; the server goes on.
    this.worker.on("error", () => undefined);
    this.worker.on("message", (outcome: CheckpointOutcome) => {
      for (const resolve of this.waiting) resolve(outcome);
      this.waiting.clear();
      if (!this.stopping) this.worker.unref();
    });
    this.exited = new Promise((resolve) => this.worker.once("exit", () => resolve()));
    // It must not keep a process alive that is otherwise done (but it does while awaited).
    this.worker.unref();
  }

  /** The next checkpoint that finds the log changed. */
  nextCheckpoint(): Promise<CheckpointOutcome> {
    this.worker.ref();
    return new Promise((resolve) => this.waiting.add(resolve));
  }

  /** Runs a last checkpoint and stops the thread. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.worker.ref();
    this.worker.postMessage("stop");
    await this.exited;
  }
}
