/**
 * One worker of `castor serve --workers N`: a whole castor server (server.ts) on the port the
 * cluster shares, with its share of the node's limits (limits.ts), its number on every log line,
 * the scheduled work only in worker 1, and `/metrics` answered with every worker's metrics
 * through the primary.
 *
 * The primary decides when workers stop. SIGINT (Ctrl-C reaches the whole process group) is
 * ignored here, since the primary forwards it as `shutdown`; SIGTERM to this worker alone
 * (`kill PID`, or systemd signalling every process of the unit) drains it like `shutdown`. A
 * worker whose primary vanished (killed) exits at once, as node:cluster makes it: no
 * connection can reach it any more, the primary having held the listening socket.
 */
import cluster from "node:cluster";
import type { Registry } from "prom-client";
import { ConfigError, type CastorConfig } from "../config.js";
import { HttpError } from "../http/errors.js";
import { HeldBackLines, logDestination, logFormatFor } from "../http/logging.js";
import type { CastorMetrics, MetricsExposition, SharedMetrics } from "../metrics.js";
import { startServer, type CastorServer } from "../server.js";
import { perWorkerConfig } from "./limits.js";
import { isPrimaryMessage, type PrimaryMessage, type WorkerMessage } from "./messages.js";

/** Exit statuses, as `castor serve` alone uses them (src/cli/args.ts). */
const EXIT_OK = 0;
const EXIT_FAILURE = 1;
const EXIT_USAGE = 2;

/** How long a scrape waits for the primary to gather every worker's metrics. */
const SCRAPE_TIMEOUT_MS = 10_000;

/** Sends `message` to the primary; resolves once it is written (or at once without a primary). */
function send(message: WorkerMessage): Promise<void> {
  return new Promise((resolve) => {
    if (!process.connected || process.send === undefined) resolve();
    else process.send(message, undefined, undefined, () => resolve());
  });
}

/**
 * Closes the IPC channel, which would keep this process alive, and returns `status` to exit with.
 * Through the cluster's own `disconnect`, which marks the exit as intended: a bare
 * `process.disconnect()` makes node:cluster exit the worker at once, with 0 whatever happened.
 */
function leave(status: number): number {
  if (process.connected) cluster.worker?.disconnect();
  return status;
}

/** Runs worker `id` until the primary (or a SIGTERM) stops it; returns the exit status. */
export async function runWorker(config: CastorConfig, id: number): Promise<number> {
  process.on("SIGINT", () => undefined);
  const metrics = new WorkerMetrics();
  // The log goes to the stdout the primary shares with the workers. On a terminal the primary
  // prints its banner once every worker serves, and says so: lines wait until then.
  const lines = new HeldBackLines(logDestination(logFormatFor(config.logFormat)));
  if (process.stdout.isTTY !== true) lines.release();
  // Listened for from the start: a shutdown may come while the server is still starting.
  const stopRequested = new Promise<string>((resolve) => {
    process.on("message", (message: unknown) => {
      if (!isPrimaryMessage(message)) return;
      if (message.castor === "shutdown") resolve("the primary asked");
      else if (message.castor === "serving") lines.release();
      else metrics.onMessage(message);
    });
    process.once("SIGTERM", () => resolve("SIGTERM"));
  });

  let server: CastorServer;
  try {
    server = await startServer(perWorkerConfig(config), { worker: { id, runsSchedules: id === 1, metrics }, logDestination: lines });
  } catch (error) {
    lines.release();
    const message = error instanceof Error ? error.message : String(error);
    const usage = error instanceof ConfigError;
    // The primary prints it once for all workers; without a primary, this worker does.
    if (process.connected) await send({ castor: "failed", message, usage });
    else process.stderr.write(`castor serve: worker ${id}: ${message}\n`);
    return leave(usage ? EXIT_USAGE : EXIT_FAILURE);
  }
  void send({ castor: "ready", listenUrl: server.listenUrl, publicUrl: server.publicUrl });

  const reason = await stopRequested;
  // Stopped before the primary said it serves (Ctrl-C during the start-up): nothing to wait for.
  lines.release();
  process.once("SIGTERM", () => {
    server.logger.warn("second SIGTERM during shutdown: exiting without waiting for requests in progress");
    process.exit(EXIT_FAILURE);
  });
  server.logger.info({ reason }, `worker ${id} stopping: ${reason}`);
  await server.close();
  return leave(EXIT_OK);
}

/**
 * `/metrics` across workers: a scrape asks the primary, which collects every worker's
 * `getMetricsAsJSON()` (this one's included, through `onMessage`) and puts them together.
 */
class WorkerMetrics implements SharedMetrics {
  private registry: Registry | null = null;
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (exposition: MetricsExposition) => void; reject: (error: Error) => void }>();

  attach(metrics: CastorMetrics): void {
    this.registry = metrics.registry;
  }

  expose(): Promise<MetricsExposition> {
    if (!process.connected) return Promise.reject(scrapeFailed("this worker has lost its primary"));
    const id = this.nextId++;
    return new Promise<MetricsExposition>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(scrapeFailed(`the workers' metrics did not arrive within ${SCRAPE_TIMEOUT_MS / 1000} s`));
      }, SCRAPE_TIMEOUT_MS);
      const settle = () => {
        clearTimeout(timer);
        this.pending.delete(id);
      };
      this.pending.set(id, {
        resolve: (exposition) => {
          settle();
          resolve(exposition);
        },
        reject: (error) => {
          settle();
          reject(error);
        },
      });
      void send({ castor: "scrape", id });
    });
  }

  onMessage(message: Exclude<PrimaryMessage, { castor: "shutdown" | "serving" }>): void {
    if (message.castor === "collect") {
      void this.collect(message.id);
      return;
    }
    const waiting = this.pending.get(message.id);
    if (waiting === undefined) return;
    if ("error" in message) waiting.reject(scrapeFailed(message.error));
    else waiting.resolve(message.exposition);
  }

  private async collect(id: number): Promise<void> {
    await send({ castor: "metrics", id, metrics: this.registry === null ? [] : await this.registry.getMetricsAsJSON() });
  }
}

function scrapeFailed(reason: string): HttpError {
  return new HttpError(503, `The metrics of this castor node's workers could not be gathered (${reason}): retry the scrape`);
}
