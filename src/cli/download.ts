/** `castor download`: a thin shell over `CastorClient.downloadFile` and `CastorClient.download` (src/client). */
import { stat } from "node:fs/promises";
import { basename } from "node:path";
import { DEFAULT_ENDPOINT, ProgressRenderer, formatBytes, removePartialOutputsSync, type ByteRangeRequest, type FileDownloadResult } from "../client/index.js";
import { EXIT_OK, UsageError, parseCommandLine, runCommand } from "./args.js";
import { asUsageError, createClient, parsePositiveInt, TRANSFER_FLAGS } from "./client.js";

const USAGE = `Usage: castor download --repo TYPE:NS/NAME [--revision R] PATH [-o OUT] [--range A-B]
       castor download --repo TYPE:NS/NAME [--revision R] --hash HASH -o OUT [--range A-B]

Downloads the file at PATH in the repository (as 'castor repo files' lists it) into OUT, by
default PATH's base name in the current folder. A file stored through Xet is reconstructed
from its chunks and checked against its file hash; an inline file is fetched whole and
checked against its git blob id (the ETag). OUT appears only once the content checked out: a
failed or interrupted (Ctrl-C, SIGTERM) download leaves no OUT behind, and no partial file. An
existing OUT is refused unless --force. A download killed outright (SIGKILL, a crash) leaves
OUT.castor-partial-…; running the same download again resumes from it (its whole chunks are
kept, and the result is still checked against the file hash). Prints
  <path>  <OUT>  (<size>, xet|inline, <what was verified>, commit <id>)

With --hash, downloads the file with that file hash (as 'castor upload' printed it) instead,
committed or not. A PATH of exactly 64 hexadecimal characters is taken as a file hash too, as
castor always did; write ./PATH for a file whose path looks like a hash.

  --repo TYPE:NS/NAME   the repository, e.g. model:alice/bert
  --revision R          branch, tag or commit (default: main)
  --hash HASH           download by file hash instead of by path
  -o, --output OUT      the file to write, or - for stdout (required with a hash)
  --range A-B           only bytes A to B, counted from 0, B included ("A-" runs to the
                        end; a B past the end stops at the end, and says so); a part of a
                        Xet-stored file cannot be checked against the file hash, but every
                        chunk is decoded and checked for its length (an inline file is still
                        read whole and checked)
  -f, --force           overwrite OUT if it exists
  --endpoint URL        the castor server, its public URL (default: $CASTOR_ENDPOINT, else
                        ${DEFAULT_ENDPOINT})
  --hub-token TOKEN     a hub token with read access (default: $CASTOR_HUB_TOKEN)
  --concurrency N       xorb ranges fetched at once (default: 4)

A missing repository, revision or file is reported with the server's message.
Progress goes to stderr. Exit codes: 0 success, 1 failure, 2 bad command line.
`;

const HASH = /^[0-9a-f]{64}$/;

export function run(argv: string[]): Promise<number> {
  return runCommand("download", async () => {
    const args = parseCommandLine(argv, {
      ...TRANSFER_FLAGS,
      hash: { type: "string" },
      output: { type: "string", short: "o" },
      range: { type: "string" },
      force: { type: "boolean", short: "f" },
    });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    const { values, positionals } = args;
    if (positionals.length > 1) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[1])}: give one PATH (or --hash HASH)`);
    if (values.hash !== undefined && positionals.length > 0) throw new UsageError("give either PATH or --hash HASH, not both");
    const [target] = positionals;
    if (values.hash === undefined && target === undefined) throw new UsageError("missing PATH (or --hash HASH)");
    const hash = values.hash ?? (HASH.test(target) ? target : undefined);
    if (values.output === "") throw new UsageError("-o OUT is empty (- writes to stdout)");
    if (hash !== undefined && values.output === undefined) throw new UsageError("-o OUT is required (- writes to stdout)");
    const range = values.range === undefined ? undefined : parseRange(values.range);
    const concurrency = values.concurrency === undefined ? undefined : parsePositiveInt("--concurrency", values.concurrency);
    const client = createClient(values);

    const path = hash === undefined ? target.replace(/^(\.\/)+/, "") : undefined;
    const outputName = values.output ?? basename(path!);
    if (outputName === "" || outputName === "." || outputName === "..")
      throw new UsageError(`cannot name the output after ${JSON.stringify(target)}: give -o OUT`);
    const toStdout = outputName === "-";
    const output = toStdout ? process.stdout : outputName;
    const shown = toStdout ? "(stdout)" : outputName;
    if (!toStdout && values.force !== true) {
      const existing = await stat(outputName).catch(() => null);
      if (existing !== null && !existing.isDirectory()) throw new UsageError(`${outputName} exists: pass --force to overwrite it, or give another -o OUT`);
    }

    const progress = new ProgressRenderer(process.stderr);
    // Interrupted: no partial file stays behind (the process exits at once, so synchronously).
    const interrupted = (signal: NodeJS.Signals) => {
      progress.clear();
      removePartialOutputsSync();
      process.stderr.write(`castor download: interrupted (${signal}); nothing written\n`);
      process.exit(signal === "SIGINT" ? 130 : 143);
    };
    process.once("SIGINT", interrupted);
    process.once("SIGTERM", interrupted);
    let line: string;
    let written: number;
    let resumed = 0;
    try {
      if (hash !== undefined) {
        const result = await client.download({ fileHash: hash, output, endOutput: !toStdout, range, concurrency, onProgress: progress.update });
        const checked = result.verified === "file-hash" ? "file hash verified" : "chunks verified";
        line = `${result.fileHash}  ${shown}  (${formatBytes(result.bytesWritten)}, ${checked})\n`;
        written = result.bytesWritten;
        resumed = result.resumedBytes;
      } else {
        const result = await client.downloadFile({ path: path!, output, endOutput: !toStdout, range, concurrency, onProgress: progress.update });
        line = `${result.path}  ${shown}  (${formatBytes(result.bytesWritten)}, ${result.storage}, ${describeCheck(result)}, commit ${result.commit})\n`;
        written = result.bytesWritten;
        resumed = result.resumedBytes;
      }
      progress.finish();
    } catch (error) {
      progress.clear();
      throw asUsageError(error);
    } finally {
      process.removeListener("SIGINT", interrupted);
      process.removeListener("SIGTERM", interrupted);
    }
    if (resumed > 0) process.stderr.write(`Resumed from the partial file an interrupted run left: kept ${formatBytes(resumed)}.\n`);
    if (range !== undefined && range.end !== Number.MAX_SAFE_INTEGER && written < range.end - range.start + 1) {
      const size = range.start + written;
      process.stderr.write(
        `The file has ${size} bytes: wrote bytes ${range.start}-${size - 1}, not ${range.start}-${range.end} (the range was clamped at the end of the file).\n`,
      );
    }
    (toStdout ? process.stderr : process.stdout).write(line);
    return EXIT_OK;
  });
}

function describeCheck(result: FileDownloadResult): string {
  switch (result.verified) {
    case "file-hash":
      return "file hash verified";
    case "git-blob-id":
      return "git blob id verified";
    case "chunks":
      return "chunks verified";
    case "size":
      return "size checked";
  }
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
