/** `castor download`: a thin shell over `CastorClient.download` (src/client). */
import { DEFAULT_ENDPOINT, ProgressRenderer, formatBytes, type ByteRangeRequest, type DownloadResult } from "../client/index.js";
import { EXIT_OK, UsageError, expectPositionals, parseCommandLine, runCommand } from "./args.js";
import { asUsageError, createClient, parsePositiveInt } from "./upload.js";

const USAGE = `Usage: castor download --repo TYPE:NS/NAME [--revision R] HASH -o OUT [--range A-B]

Downloads the file with hash HASH (as 'castor upload' printed it) into OUT. The content is
checked against the hash before OUT appears; a failed download leaves no OUT behind.

  --repo TYPE:NS/NAME   the repository the file was uploaded to, e.g. model:alice/bert
  --revision R          branch, tag or commit (default: main)
  -o, --output OUT      the file to write, or - for stdout
  --range A-B           only bytes A to B, counted from 0, B included ("A-" runs to the
                        end); a part of a file cannot be checked against the file hash, but
                        every chunk is decoded and checked for its length
  --endpoint URL        the castor server (default: $CASTOR_ENDPOINT, else ${DEFAULT_ENDPOINT})
  --hub-token TOKEN     a hub token with read access (default: $CASTOR_HUB_TOKEN)
  --concurrency N       xorb ranges fetched at once (default: 4)

Progress goes to stderr. Exit codes: 0 success, 1 failure, 2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("download", async () => {
    const args = parseCommandLine(argv, {
      repo: { type: "string" },
      revision: { type: "string" },
      output: { type: "string", short: "o" },
      range: { type: "string" },
      endpoint: { type: "string" },
      "hub-token": { type: "string" },
      concurrency: { type: "string" },
    });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    const { values } = args;
    const [hash] = expectPositionals(args.positionals, ["HASH"]);
    if (values.output === undefined || values.output === "") throw new UsageError("-o OUT is required (- writes to stdout)");
    const range = values.range === undefined ? undefined : parseRange(values.range);
    const concurrency = values.concurrency === undefined ? undefined : parsePositiveInt("--concurrency", values.concurrency);
    const client = createClient(values);
    const toStdout = values.output === "-";

    const progress = new ProgressRenderer(process.stderr);
    let result: DownloadResult;
    try {
      result = await client.download({
        fileHash: hash,
        output: toStdout ? process.stdout : values.output,
        endOutput: !toStdout,
        range,
        concurrency,
        onProgress: progress.update,
      });
      progress.finish();
    } catch (error) {
      progress.clear();
      throw asUsageError(error);
    }
    const checked = result.verified === "file-hash" ? "file hash verified" : "chunks verified";
    const line = `${result.fileHash}  ${toStdout ? "(stdout)" : values.output}  (${formatBytes(result.bytesWritten)}, ${checked})\n`;
    (toStdout ? process.stderr : process.stdout).write(line);
    return EXIT_OK;
  });
}

/** `A-B` (inclusive) or `A-` (to the end of the file). */
export function parseRange(text: string): ByteRangeRequest {
  const match = /^(\d+)-(\d*)$/.exec(text.trim());
  const start = match ? Number(match[1]) : NaN;
  const end = match ? (match[2] === "" ? Number.MAX_SAFE_INTEGER : Number(match[2])) : NaN;
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || end < start) {
    throw new UsageError(`--range must be A-B with whole numbers A ≤ B (bytes from 0, B included) or A-, got ${JSON.stringify(text)}`);
  }
  return { start, end };
}
