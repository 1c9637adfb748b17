/** `castor upload`: a thin shell over `CastorClient.upload` (src/client). */
import { CastorClient, CastorClientError, DEFAULT_ENDPOINT, ProgressRenderer, formatBytes, type UploadResult } from "../client/index.js";
import { EXIT_OK, UsageError, parseCommandLine, runCommand } from "./args.js";

const USAGE = `Usage: castor upload --repo TYPE:NS/NAME [--revision R] FILE…

Uploads files, storing only chunks the server does not have yet, and registers them in the
repository. Prints one line per file on stdout (and nothing else there, so it pipes),
  <file hash>  <path>  (<size>, <new> new / <deduplicated> deduplicated)
then a summary on stderr. The file hash is what 'castor download' takes.

  --repo TYPE:NS/NAME   the repository, e.g. model:alice/bert
  --revision R          branch, tag or commit (default: main)
  --endpoint URL        the castor server (default: $CASTOR_ENDPOINT, else ${DEFAULT_ENDPOINT})
  --hub-token TOKEN     a hub token with write access (default: $CASTOR_HUB_TOKEN; the
                        variable is safer: other users can see command lines)
  --concurrency N       xorbs (up to 64 MiB each) uploaded at once (default: 4)

Progress goes to stderr: a bar on a terminal, a line every few seconds otherwise.
Exit codes: 0 success, 1 failure (server, network, files), 2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("upload", async () => {
    const args = parseCommandLine(argv, {
      repo: { type: "string" },
      revision: { type: "string" },
      endpoint: { type: "string" },
      "hub-token": { type: "string" },
      concurrency: { type: "string" },
    });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    const { values, positionals } = args;
    if (positionals.length === 0) throw new UsageError("give at least one FILE to upload");
    const concurrency = values.concurrency === undefined ? undefined : parsePositiveInt("--concurrency", values.concurrency);
    const client = createClient(values);

    const progress = new ProgressRenderer(process.stderr);
    let result: UploadResult;
    try {
      result = await client.upload(positionals, { onProgress: progress.update, concurrency });
      progress.finish();
    } catch (error) {
      progress.clear();
      throw asUsageError(error);
    }
    for (const file of result.files) {
      process.stdout.write(`${file.fileHash}  ${file.path}  (${formatBytes(file.size)}, ${formatBytes(file.newBytes)} new / ${formatBytes(file.dedupedBytes)} deduplicated)\n`);
    }
    process.stderr.write(`${summarize(result)}\n`);
    return EXIT_OK;
  });
}

function summarize(result: UploadResult): string {
  const count = result.files.length === 1 ? "1 file" : `${result.files.length} files`;
  const saved = result.totalBytes === 0 ? 0 : (100 * result.dedupedBytes) / result.totalBytes;
  const xorbs = result.xorbs.inserted + result.xorbs.alreadyStored;
  return (
    `Uploaded ${count}, ${formatBytes(result.totalBytes)}: ${formatBytes(result.newBytes)} new, ` +
    `${formatBytes(result.dedupedBytes)} deduplicated (${saved.toFixed(1)}% saved); ` +
    `${xorbs} xorb${xorbs === 1 ? "" : "s"} (${formatBytes(result.xorbs.bytesSent)}) sent, ${result.shards.sent} shard${result.shards.sent === 1 ? "" : "s"} registered.`
  );
}

/** The client from the shared flags, with the environment as fallback. Exported for `download`. */
export function createClient(values: { repo?: string; revision?: string; endpoint?: string; "hub-token"?: string }): CastorClient {
  if (values.repo === undefined) throw new UsageError("--repo TYPE:NS/NAME is required, e.g. --repo model:alice/bert");
  const hubToken = values["hub-token"] ?? nonEmpty(process.env.CASTOR_HUB_TOKEN);
  if (hubToken === undefined) {
    throw new UsageError("a hub token is required: set CASTOR_HUB_TOKEN (or pass --hub-token); 'castor token create' makes one");
  }
  const endpoint = values.endpoint ?? nonEmpty(process.env.CASTOR_ENDPOINT) ?? DEFAULT_ENDPOINT;
  try {
    return new CastorClient({ endpoint, hubToken, repo: values.repo, revision: values.revision });
  } catch (error) {
    throw asUsageError(error);
  }
}

/** A client error caused by the command line becomes a UsageError (exit code 2). */
export function asUsageError(error: unknown): unknown {
  return error instanceof CastorClientError && error.kind === "usage" ? new UsageError(error.message) : error;
}

export function parsePositiveInt(flag: string, text: string): number {
  if (!/^\d+$/.test(text) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(`${flag} must be a whole number ≥ 1, got ${JSON.stringify(text)}`);
  }
  return Number(text);
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}
