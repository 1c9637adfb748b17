/**
 * What the primary of `castor serve --workers N` and its workers tell each other over the
 * cluster's IPC channel. Each message is an object with a `castor` field naming its kind, so
 * messages of anything else on the channel are ignored.
 */
import type { MetricsExposition } from "../metrics.js";

/** The environment variable that tells a forked worker its number (1…N); set by the primary only. */
export const WORKER_ID_ENV = "CASTOR_WORKER_ID";

/** A worker to the primary. */
export type WorkerMessage =
  /** Listening: requests may come. */
  | { castor: "ready"; listenUrl: string; publicUrl: string }
  /** Could not start; the primary prints `message` (once, though every worker usually fails alike). */
  | { castor: "failed"; message: string; usage: boolean }
  /** `GET /metrics` reached this worker: the primary answers with `exposition` (every worker's metrics). */
  | { castor: "scrape"; id: number }
  /** Answer to `collect`: this worker's metrics, `Registry.getMetricsAsJSON()`. */
  | { castor: "metrics"; id: number; metrics: unknown[] };

/** The primary to a worker. */
export type PrimaryMessage =
  /** Stop accepting, finish the requests in progress, exit 0 (the server's graceful shutdown). */
  | { castor: "shutdown" }
  /** Every worker serves and the terminal banner is printed: log lines held back may go out. */
  | { castor: "serving" }
  /** Send this process's metrics (`metrics`), for a scrape another worker received. */
  | { castor: "collect"; id: number }
  /** Answer to `scrape`: every worker's metrics put together, or why they could not be. */
  | ({ castor: "exposition"; id: number } & ({ exposition: MetricsExposition } | { error: string }));

export function isWorkerMessage(message: unknown): message is WorkerMessage {
  return isCastorMessage(message, ["ready", "failed", "scrape", "metrics"]);
}

export function isPrimaryMessage(message: unknown): message is PrimaryMessage {
  return isCastorMessage(message, ["shutdown", "serving", "collect", "exposition"]);
}

function isCastorMessage(message: unknown, kinds: readonly string[]): boolean {
  return typeof message === "object" && message !== null && kinds.includes((message as { castor?: unknown }).castor as string);
}
