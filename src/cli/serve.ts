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
import { startServer } from "../server.js";
import { CONFIG_FLAGS_HELP, EXIT_FAILURE, EXIT_OK, expectPositionals, parseCommandLine, runCommand } from "./args.js";

const USAGE = `Usage: castor serve [--listen HOST:PORT] [--data-dir DIR] [--public-url URL] […]

Starts the CAS server and the hub token operation; stops gracefully on SIGINT or SIGTERM.
Logs go to stdout as JSON lines, one per request; on a terminal a short banner (URL, data
dir, the next commands) comes first.

  --listen HOST:PORT     address to bind (CASTOR_LISTEN, default 127.0.0.1:8080; port 0 = any free port)
  --data-dir DIR         embedded data folder (CASTOR_DATA_DIR, default ./castor-data)
  --public-url URL       base URL handed to clients as casUrl (CASTOR_PUBLIC_URL)
  --token-ttl SECONDS    lifetime of CAS access tokens (CASTOR_TOKEN_TTL, default 3600)
  --log-level LEVEL      fatal, error, warn, info, debug, trace or silent (CASTOR_LOG_LEVEL)
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
    const printBanner = (publicUrl: string) => {
      if (process.stdout.isTTY) process.stdout.write(banner(publicUrl, config.databaseUrl === null ? config.dataDir : null));
    };
    if (config.workers > 1) return (await import("../cluster/primary.js")).runPrimary(config, printBanner);

    const server = await startServer(config);
    printBanner(server.publicUrl);

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

/** What a person starting the server on a terminal needs next; logs (JSON lines) follow it. */
export function banner(publicUrl: string, dataDir: string | null): string {
  const where = dataDir === null ? "metadata in PostgreSQL" : `data dir ${dataDir}`;
  const dirFlag = dataDir === null ? "" : ` --data-dir ${dataDir}`;
  return [
    `castor is serving ${publicUrl} (${where}). Stop it with Ctrl-C.`,
    "Next, in another terminal:",
    `  npx castor token create${dirFlag} --user alice --namespace alice --access write   # a hub token`,
    `  export HF_ENDPOINT=${publicUrl} HF_TOKEN=<that token>   # for hf / huggingface_hub; CASTOR_ENDPOINT, CASTOR_HUB_TOKEN for castor upload`,
    "Request logs follow as JSON lines.",
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
