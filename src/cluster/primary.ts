/**
 * The primary of `castor serve --workers N`: the process that owns the listening port, forks N
 * workers (worker.ts) that serve it, replaces a worker that dies, and on SIGTERM or SIGINT
 * drains them all.
 *
 * - Start-up work that must happen once (the data dir, migrations, generated keys, the sweep of
 *   staging leftovers) runs here, before any worker exists (`openStores`); the workers then find
 *   the schema current and the keys in place.
 * - The port: node:cluster in its round-robin mode. The primary accepts each connection and
 *   hands it to the next worker, so connections spread evenly (the kernel's own spreading over
 *   processes sharing a socket is known to be lopsided), and a dead worker's share goes to the
 *   others at once: the socket stays open as long as one worker lives. `SO_REUSEPORT` would need
 *   Node 22.
 * - A worker that dies is replaced under the same number (so worker 1 keeps running the
 *   scheduled work). A worker that dies soon after it started is replaced after a pause that
 *   doubles each time, so a crash at start-up does not loop hot; one that cannot start
 *   `START_FAILURES_BEFORE_GIVING_UP` times in a row stops castor with its error. At the very
 *   first start any worker's failure stops castor at once, as a lone server's would (a taken
 *   port, an unreadable data dir): every worker would fail alike.
 * - Shutdown: every worker is told to stop, and each runs the server's graceful shutdown
 *   (CASTOR_SHUTDOWN_GRACE); the primary exits once all have, 0 when all drained cleanly. A second
 *   signal kills the workers at once and exits 1.
 * - `/metrics`: a scrape reaches one worker, which asks the primary; the primary collects every
 *   worker's metrics and puts them together (prom-client's `AggregatorRegistry.aggregate`:
 *   counters and histograms summed, gauges as each declares), adding its own: how many workers
 *   serve, and how many were replaced.
 */
import cluster, { type Worker } from "node:cluster";
import { AggregatorRegistry, Counter, Gauge, Registry } from "prom-client";
import type { DestinationStream, Logger } from "pino";
import type { CastorConfig } from "../config.js";
import { createLogger } from "../http/logging.js";
import type { MetricsExposition } from "../metrics.js";
import { loneServerSweep, openStores } from "../server.js";
import { workerShares } from "./limits.js";
import { isWorkerMessage, WORKER_ID_ENV, type PrimaryMessage, type WorkerMessage } from "./messages.js";

/** The `worker` field of the primary's own log lines (workers are 1…N). */
export const PRIMARY_LOG_ID = 0;

const EXIT_OK = 0;
const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;

/** Replacements in a row that may die before they are ready; then castor stops with the error. */
export const START_FAILURES_BEFORE_GIVING_UP = 5;
/** The pause before replacing a worker that died early; doubled for each early death in a row. */
export const FIRST_RESTART_PAUSE_MS = 250;
const MAX_RESTART_PAUSE_MS = 30_000;
/** A worker that served this long before it died is replaced at once, and its early deaths forgotten. */
const STABLE_AFTER_MS = 10_000;
/** How long a scrape waits for one worker's metrics. */
const COLLECT_TIMEOUT_MS = 5_000;
/** After the shutdown grace, how long workers still get to exit before they are killed. */
const STOP_MARGIN_MS = 10_000;

interface Slot {
  /** 1…N: the worker's number, kept by its replacements. */
  readonly id: number;
  worker: Worker | null;
  readyAt: number | null;
  /** What the current worker said when it could not start. */
  failure: { message: string; usage: boolean } | null;
  /** Workers of this slot in a row that died before they were ready. */
  startFailures: number;
  /** Workers of this slot in a row that died before `STABLE_AFTER_MS` of serving. */
  earlyDeaths: number;
  restartTimer: NodeJS.Timeout | null;
}

/**
 * Runs the primary until its workers have stopped; returns the exit status. Its log lines go to
 * `logDestination` (stdout by default). `onServing` hears the public URL once every worker
 * serves (`castor serve` prints its terminal banner then); the workers, told so, then let their
 * log lines out, which on a terminal they hold back until the banner is printed.
 */
export async function runPrimary(
  config: CastorConfig,
  logDestination?: DestinationStream,
  onServing: (publicUrl: string) => void = () => undefined,
): Promise<number> {
  const logger = createLogger(config.logLevel, logDestination, PRIMARY_LOG_ID);
  // Once, before any worker: folder, schema, keys, staging leftovers. Closed again, since
  // the primary serves nothing itself.
  const opened = await openStores(config, logger, loneServerSweep(config));
  opened.blobs.close?.();
  await opened.store.close();
  logger.info({ workers: config.workers, perWorker: workerShares(config) }, `starting ${config.workers} workers; each takes its share of the node's limits`);
  return new Primary(config, logger, onServing).run();
}

class Primary {
  private readonly slots: Slot[];
  private phase: "starting" | "serving" | "stopping" = "starting";
  private status = EXIT_OK;
  private finish: (status: number) => void = () => undefined;
  private killTimer: NodeJS.Timeout | null = null;
  private nextCollect = 0;
  private readonly collecting = new Map<number, { worker: Worker; done: (metrics: unknown[] | null) => void }>();
  private readonly registry = new Registry();
  private readonly restarts: Counter;

  constructor(
    private readonly config: CastorConfig,
    private readonly logger: Logger,
    private readonly onServing: (publicUrl: string) => void,
  ) {
    this.slots = Array.from({ length: config.workers }, (_, i) => ({
      id: i + 1,
      worker: null,
      readyAt: null,
      failure: null,
      startFailures: 0,
      earlyDeaths: 0,
      restartTimer: null,
    }));
    const slots = this.slots;
    new Gauge({
      name: "castor_workers",
      help: "Workers of castor serve --workers N that are serving",
      registers: [this.registry],
      collect() {
        this.set(slots.filter((slot) => slot.worker !== null && slot.readyAt !== null).length);
      },
    });
    this.restarts = new Counter({
      name: "castor_worker_restarts_total",
      help: "Workers that died and were replaced since castor started",
      registers: [this.registry],
    });
  }

  run(): Promise<number> {
    const done = new Promise<number>((resolve) => (this.finish = resolve));
    const onSignal = (signal: NodeJS.Signals) => {
      if (this.phase !== "stopping") {
        this.stop(`received ${signal}`, EXIT_OK);
        return;
      }
      this.logger.warn({ signal }, "second signal during shutdown: killing the workers without waiting for requests in progress");
      for (const slot of this.slots) slot.worker?.process.kill("SIGKILL");
      this.finish(EXIT_FAILURE);
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    // Explicit, though the default on Linux: the primary accepts and deals connections out in turn.
    cluster.schedulingPolicy = cluster.SCHED_RR;
    for (const slot of this.slots) this.fork(slot);
    return done.finally(() => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      if (this.killTimer !== null) clearTimeout(this.killTimer);
    });
  }

  private fork(slot: Slot): void {
    const worker = cluster.fork({ [WORKER_ID_ENV]: String(slot.id) });
    slot.worker = worker;
    slot.readyAt = null;
    slot.failure = null;
    worker.on("message", (message: unknown) => {
      if (isWorkerMessage(message)) this.onMessage(slot, worker, message);
    });
    // Handled once the worker has both exited and left the cluster's rotation (its IPC channel
    // closed; the two come in either order): from then on no connection is handed to it.
    let exit: { code: number | null; signal: string | null } | null = null;
    const gone = () => {
      if (exit !== null && !worker.isConnected()) this.onExit(slot, worker, exit.code, exit.signal);
    };
    worker.on("exit", (code, signal) => {
      exit = { code, signal };
      gone();
    });
    worker.on("disconnect", gone);
    // A message to a worker that is dying fails with EPIPE; its exit follows and is handled there.
    worker.on("error", () => undefined);
  }

  private onMessage(slot: Slot, worker: Worker, message: WorkerMessage): void {
    switch (message.castor) {
      case "ready":
        slot.readyAt = Date.now();
        slot.startFailures = 0;
        if (this.phase === "stopping") {
          // Told to stop while it was starting, maybe before it listened for the message.
          this.tell(worker, { castor: "shutdown" });
        } else if (this.phase === "starting") {
          if (this.slots.every((each) => each.readyAt !== null)) {
            this.phase = "serving";
            const { listenUrl, publicUrl } = message;
            this.logger.info(
              { listenUrl, publicUrl, dataDir: this.config.dataDir, workers: this.slots.length },
              `castor listening on ${listenUrl} with ${this.slots.length} workers`,
            );
            this.onServing(publicUrl);
            for (const each of this.slots) if (each.worker !== null) this.tell(each.worker, { castor: "serving" });
          }
        } else {
          this.logger.info({ replacedWorker: slot.id, workerPid: worker.process.pid }, `worker ${slot.id} replaced and serving (pid ${worker.process.pid})`);
          this.tell(worker, { castor: "serving" });
        }
        return;
      case "failed":
        slot.failure = { message: message.message, usage: message.usage };
        return;
      case "scrape":
        void this.answerScrape(worker, message.id);
        return;
      case "metrics":
        this.collecting.get(message.id)?.done(message.metrics);
        return;
    }
  }

  private onExit(slot: Slot, worker: Worker, code: number | null, signal: string | null): void {
    if (slot.worker !== worker) return;
    slot.worker = null;
    for (const waiting of this.collecting.values()) if (waiting.worker === worker) waiting.done(null);
    const how = signal !== null ? `signal ${signal}` : `exit code ${code}`;
    const pid = worker.process.pid;
    if (this.phase === "stopping") {
      if (code !== 0) {
        this.logger.warn({ stoppedWorker: slot.id, workerPid: pid, code, signal }, `worker ${slot.id} ended with ${how} during the shutdown`);
        this.status = EXIT_FAILURE;
      }
      this.finishIfAllStopped();
      return;
    }
    const wasReady = slot.readyAt !== null;
    const reason = slot.failure?.message ?? `worker ${slot.id} (pid ${pid}) ended with ${how} before it was ready`;
    if (this.phase === "starting" && !wasReady) {
      process.stderr.write(`castor serve: ${reason}\n`);
      this.logger.error({ failedWorker: slot.id, workerPid: pid, code, signal }, `worker ${slot.id} could not start: ${reason}`);
      this.stop(`worker ${slot.id} could not start`, slot.failure?.usage ? EXIT_USAGE : EXIT_FAILURE);
      return;
    }
    this.restarts.inc();
    if (!wasReady) slot.startFailures++;
    if (slot.startFailures >= START_FAILURES_BEFORE_GIVING_UP) {
      const message = `worker ${slot.id} could not start ${slot.startFailures} times in a row, the last time: ${reason}`;
      process.stderr.write(`castor serve: ${message}\n`);
      this.logger.fatal({ failedWorker: slot.id, workerPid: pid, code, signal }, `${message}; stopping castor`);
      this.stop(`worker ${slot.id} keeps failing to start`, EXIT_FAILURE);
      return;
    }
    const early = !wasReady || Date.now() - (slot.readyAt ?? 0) < STABLE_AFTER_MS;
    slot.earlyDeaths = early ? slot.earlyDeaths + 1 : 0;
    const pause = slot.earlyDeaths === 0 ? 0 : Math.min(FIRST_RESTART_PAUSE_MS * 2 ** (slot.earlyDeaths - 1), MAX_RESTART_PAUSE_MS);
    this.logger.warn(
      { diedWorker: slot.id, workerPid: pid, code, signal, restartInMs: pause },
      `worker ${slot.id} (pid ${pid}) ${wasReady ? "died" : "could not start"} (${how}): starting a replacement${pause > 0 ? ` in ${pause} ms` : ""}`,
    );
    slot.restartTimer = setTimeout(() => {
      slot.restartTimer = null;
      this.fork(slot);
    }, pause);
  }

  private stop(reason: string, status: number): void {
    if (this.phase === "stopping") return;
    this.phase = "stopping";
    this.status = status;
    for (const slot of this.slots) {
      if (slot.restartTimer !== null) clearTimeout(slot.restartTimer);
      slot.restartTimer = null;
    }
    const running = this.slots.filter((slot) => slot.worker !== null);
    this.logger.info({ reason, graceSeconds: this.config.shutdownGraceMs / 1000 }, `castor shutting down (${reason}): stopping ${running.length} worker(s)`);
    for (const slot of running) this.tell(slot.worker!, { castor: "shutdown" });
    // A worker that neither drains within the grace nor exits is not waited for forever.
    this.killTimer = setTimeout(() => {
      for (const slot of this.slots) {
        if (slot.worker === null) continue;
        this.logger.warn({ stoppedWorker: slot.id }, `worker ${slot.id} did not stop in time: killing it`);
        slot.worker.process.kill("SIGKILL");
      }
    }, this.config.shutdownGraceMs + STOP_MARGIN_MS).unref();
    this.finishIfAllStopped();
  }

  private finishIfAllStopped(): void {
    if (this.slots.some((slot) => slot.worker !== null)) return;
    this.logger.info({ status: this.status }, "castor stopped: every worker has stopped");
    this.finish(this.status);
  }

  private tell(worker: Worker, message: PrimaryMessage): void {
    if (worker.isConnected()) worker.send(message);
    else if (message.castor === "shutdown") worker.process.kill("SIGTERM");
  }

  private async answerScrape(worker: Worker, id: number): Promise<void> {
    let answer: PrimaryMessage;
    try {
      answer = { castor: "exposition", id, exposition: await this.gatherMetrics() };
    } catch (error) {
      answer = { castor: "exposition", id, error: error instanceof Error ? error.message : String(error) };
    }
    this.tell(worker, answer);
  }

  /** Every serving worker's metrics and the primary's own, put together. */
  private async gatherMetrics(): Promise<MetricsExposition> {
    const serving = this.slots.filter((slot) => slot.worker !== null && slot.readyAt !== null);
    const collected = await Promise.all(serving.map((slot) => this.collect(slot)));
    const all = [...collected.filter((metrics) => metrics !== null), await this.registry.getMetricsAsJSON()];
    const aggregated = AggregatorRegistry.aggregate(all);
    return { contentType: aggregated.contentType, body: await aggregated.metrics() };
  }

  /** One worker's metrics; null when it exited meanwhile (its counts are gone with it). */
  private collect(slot: Slot): Promise<unknown[] | null> {
    const worker = slot.worker!;
    const id = this.nextCollect++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.collecting.delete(id);
        reject(new Error(`worker ${slot.id} did not send its metrics within ${COLLECT_TIMEOUT_MS / 1000} s`));
      }, COLLECT_TIMEOUT_MS);
      this.collecting.set(id, {
        worker,
        done: (metrics) => {
          clearTimeout(timer);
          this.collecting.delete(id);
          resolve(metrics);
        },
      });
      this.tell(worker, { castor: "collect", id });
    });
  }
}
