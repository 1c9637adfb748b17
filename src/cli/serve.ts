/**
 * `castor serve`: runs the CAS server and the hub token operation until SIGINT or SIGTERM,
 * then shuts down gracefully (stop accepting, finish requests in progress, close the stores)
 * and exits 0. A second signal during shutdown exits at once with 1. With `--workers N` (N > 1)
 * this process becomes the primary of N worker processes that share the port, and each worker
 * runs this same command (src/cluster/).
 */
import cluster from "node:cluster";
import { WORKER_ID_ENV } from "../cluster/messages.js";
import { loadConfig } from "../config.js";
import { HeldBackLines, logDestination, logFormatFor, type LogFormat } from "../http/logging.js";
import { startServer, type CastorServer } from "../server.js";
import { CONFIG_FLAGS_HELP, EXIT_FAILURE, EXIT_OK, expectPositionals, parseCommandLine, runCommand } from "./args.js";

const USAGE = `Usage: castor serve [--listen HOST:PORT] [--data-dir DIR] [--public-url URL] […]

Starts the CAS server and the hub token operation; stops gracefully on SIGINT or SIGTERM.
Logs go to stdout, a line per request: on a terminal a short banner (URL, data dir, the next
commands) comes first and the lines are written to be read; elsewhere they are JSON lines.

  --listen HOST:PORT     address to bind (CASTOR_LISTEN, default 127.0.0.1:8080; port 0 = any free port)
  --data-dir DIR         embedded data folder (CASTOR_DATA_DIR, default ./castor-data)
  --public-url URL       base URL handed to clients as casUrl (CASTOR_PUBLIC_URL)
  --token-ttl SECONDS    lifetime of CAS access tokens (CASTOR_TOKEN_TTL, default 3600)
  --log-level LEVEL      fatal, error, warn, info, debug, trace or silent (CASTOR_LOG_LEVEL)
  --log-format FORMAT    json or pretty (CASTOR_LOG_FORMAT; default: pretty on a terminal)
  --workers N            processes serving the port (CASTOR_WORKERS, default: one per core);
                         1 runs a single process, more a primary that forks N workers

${CONFIG_FLAGS_HELP}
`;

const SHUTDOWN_SIGNALS = ["SIGINT", "SIGTERM"] as const;

export async function run(argv: string[]): Promise<number> {
  return runCommand("serve", async () => {
    const { positionals, configFlags, help } = parseCommandLine(argv, {});
    if (help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    expectPositionals(positionals, []);
    const config = loadConfig(process.env, configFlags);
    // `--workers N`: this process is either the primary, or one of the workers it forked.
    const workerId = cluster.isWorker ? Number(process.env[WORKER_ID_ENV]) : null;
    if (workerId !== null && Number.isSafeInteger(workerId) && workerId >= 1) {
      return (await import("../cluster/worker.js")).runWorker(config, workerId);
    }
    const format = logFormatFor(config.logFormat);
    // On a terminal the banner comes first: the start-up's log lines wait for it.
    const lines = new HeldBackLines(logDestination(format));
    const terminal = process.stdout.isTTY === true;
    if (!terminal) lines.release();
    const serving = (publicUrl: string) => {
      if (terminal) process.stdout.write(banner(publicUrl, config.databaseUrl === null ? config.dataDir : null, format));
      lines.release();
    };
    if (config.workers > 1) {
      const status = await (await import("../cluster/primary.js")).runPrimary(config, lines, serving);
      // Stopped before every worker served: the lines held back say why.
      lines.release();
      return status;
    }

    let server: CastorServer;
    try {
      server = await startServer(config, { logDestination: lines });
    } catch (error) {
      // No banner when the start failed: the lines tell why.
      lines.release();
      throw error;
    }
    serving(server.publicUrl);

    const signal = await nextShutdownSignal();
    for (const name of SHUTDOWN_SIGNALS) {
      process.once(name, () => {
        server.logger.warn({ signal: name }, "second signal during shutdown: exiting without waiting for requests in progress");
        process.exit(EXIT_FAILURE);
      });
    }
    server.logger.info({ signal }, `received ${signal}`);
    await server.close();
    return EXIT_OK;
  });
}

/** What a person starting the server on a terminal needs next; the log follows it. */
export function banner(publicUrl: string, dataDir: string | null, format: LogFormat = "pretty"): string {
  const where = dataDir === null ? "metadata in PostgreSQL" : `data dir ${dataDir}`;
  const dirFlag = dataDir === null ? "" : ` --data-dir ${dataDir}`;
  return [
    `castor is serving ${publicUrl} (${where}). Stop it with Ctrl-C.`,
    "Next, in another terminal:",
    `  npx castor token create${dirFlag} --user alice --namespace alice --access write   # a hub token`,
    `  export HF_ENDPOINT=${publicUrl} HF_TOKEN=<that token>   # for hf / huggingface_hub; CASTOR_ENDPOINT, CASTOR_HUB_TOKEN for castor upload`,
    format === "json" ? "Logs follow, as JSON lines (CASTOR_LOG_FORMAT=json)." : "Logs follow, a line per request (CASTOR_LOG_FORMAT=json for JSON lines).",
    "",
  ].join("\n");
}

function nextShutdownSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      for (const name of SHUTDOWN_SIGNALS) process.off(name, onSignal);
      resolve(signal);
    };
    for (const name of SHUTDOWN_SIGNALS) process.on(name, onSignal);
  });
}
