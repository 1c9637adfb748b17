/** `castor upload`: a thin shell over `CastorClient.upload` and `CastorClient.commit` (src/client). */
import {
  DEFAULT_ENDPOINT,
  ProgressRenderer,
  defaultCacheDir,
  commitMessageOf,
  commitOperationsFor,
  expandDirectories,
  formatBytes,
  formatRepoRef,
  repoPathsFor,
  type CommitResult,
  type UploadResult,
} from "../client/index.js";
import { EXIT_OK, UsageError, parseCommandLine, runCommand } from "./args.js";
import { asUsageError, createClient, parsePositiveInt, TRANSFER_FLAGS } from "./client.js";

const USAGE = `Usage: castor upload --repo TYPE:NS/NAME [--path IN_REPO] [--revision BRANCH] [-m MESSAGE] FILE|DIR…

Uploads files through Xet, sending only chunks the server does not have yet, then commits them
to a branch of the repository in one commit. Prints one line per file on stdout (and nothing
else there, so it pipes),
  <file hash>  <path in the repository>  (<size>, <sent> sent / <deduplicated> deduplicated)
("sent": bytes of its chunks that went over the network; "already stored, nothing sent" for a
file the repository had whole), then the commit,
  commit <commit id>  <commit URL>
or, when the branch holds every file at its path already, no commit (as 'hf upload' makes
none) and the commit that holds them,
  unchanged <commit id>  <commit URL>
and a summary on stderr. 'castor download --repo … PATH' takes the path ('--hash' the file
hash); 'castor repo files' lists the branch. Non-empty files are stored through Xet (listed as
"xet"); an empty file travels inside the commit ("inline"). A DIR is uploaded recursively, its
files at DIR/<path inside it> (as 'cp -r DIR DEST/' names them; --path is then the folder DEST).

  --repo TYPE:NS/NAME   the repository, e.g. model:alice/bert
  --path IN_REPO        where the files go in the repository: for one FILE its path (a folder
                        when it ends with '/'), for several FILEs a folder; default: each
                        file's base name, at the root
  --revision BRANCH     the branch to commit to (default: main)
  -m, --message TEXT    the commit message; its first line is the title (default: "Upload N
                        files with castor")
  --no-commit           only upload the content and print the file hashes, as castor did
                        before repositories had histories (then --revision may be any
                        revision, and the lines name the local files)
  --endpoint URL        the castor server, its public URL (default: $CASTOR_ENDPOINT, else
                        ${DEFAULT_ENDPOINT})
  --hub-token TOKEN     a hub token with write access (default: $CASTOR_HUB_TOKEN; the
                        variable is safer: other users can see command lines)
  --concurrency N       xorbs (up to 64 MiB each) uploaded at once (default: 4)
  --no-cache            do not read or write the local shard cache

What was uploaded to or learnt from a server is kept in a local shard cache (CASTOR_CACHE_DIR,
default ~/.cache/castor; at most 256 MiB, least recently used first out; CASTOR_CACHE_DIR=off
turns it off), so uploading the same or a slightly changed file again, or re-running an
interrupted upload, sends only what the server lacks.

If the commit fails after the upload, the content stays stored (the file hashes are printed)
but the branch is unchanged. Progress goes to stderr: a bar on a terminal, a line every few
seconds otherwise.
Exit codes: 0 success, 1 failure (server, network, files), 2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("upload", async () => {
    const args = parseCommandLine(argv, {
      ...TRANSFER_FLAGS,
      path: { type: "string" },
      message: { type: "string", short: "m" },
      "no-commit": { type: "boolean" },
      "no-cache": { type: "boolean" },
    });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    const { values, positionals } = args;
    if (positionals.length === 0) throw new UsageError("give at least one FILE to upload");
    const commit = values["no-commit"] !== true;
    if (!commit && (values.path !== undefined || values.message !== undefined)) {
      throw new UsageError("--path and --message describe the commit: drop them with --no-commit");
    }
    const concurrency = values.concurrency === undefined ? undefined : parsePositiveInt("--concurrency", values.concurrency);
    const client = createClient(values);
    // Checked before anything is read: a bad --path should not wait for 10 GB of chunking.
    let paths: string[];
    let message: { summary: string; description: string };
    let files: string[];
    try {
      const expanded = await expandDirectories(positionals);
      files = expanded.files;
      paths = commit ? repoPathsFor(files, values.path, expanded.names ?? undefined) : files;
      message = commitMessageOf(values.message, files.length);
    } catch (error) {
      throw asUsageError(error);
    }

    const progress = new ProgressRenderer(process.stderr);
    let result: UploadResult;
    try {
      const cacheDir = values["no-cache"] === true ? null : defaultCacheDir();
      result = await client.upload(files, { onProgress: progress.update, concurrency, cacheDir });
      progress.finish();
    } catch (error) {
      progress.clear();
      throw asUsageError(error);
    }
    result.files.forEach((file, i) => {
      const what = file.alreadyStored ? "already stored, nothing sent" : `${formatBytes(file.newBytes)} sent / ${formatBytes(file.dedupedBytes)} deduplicated`;
      process.stdout.write(`${file.fileHash}  ${paths[i]}  (${formatBytes(file.size)}, ${what})\n`);
    });
    process.stderr.write(`${summarize(result)}\n`);
    if (!commit) return EXIT_OK;

    let outcome: { commit: CommitResult; committed: boolean };
    try {
      outcome = await client.commitChanges({
        ...message,
        operations: commitOperationsFor(result.files.map((file, i) => ({ ...file, pathInRepo: paths[i] }))),
      });
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new Error(`${reason} — the content is stored (file hashes above) but not committed to ${client.revision}`);
    }
    const { commit: head, committed } = outcome;
    process.stdout.write(`${committed ? "commit" : "unchanged"} ${head.commitOid}${head.commitUrl === "" ? "" : `  ${head.commitUrl}`}\n`);
    const count = result.files.length === 1 ? "1 file" : `${result.files.length} files`;
    const where = `branch ${client.revision} of ${formatRepoRef(client.repo)}`;
    process.stderr.write(
      committed
        ? `Committed ${count} to ${where}.\n`
        : `No files have changed: ${where} holds ${result.files.length === 1 ? "it" : "them"} as uploaded already (commit ${head.commitOid}); nothing committed.\n`,
    );
    return EXIT_OK;
  });
}

/** The summary line: what went over the network, and — honestly — what of it the server had already. */
export function summarize(result: UploadResult): string {
  const count = result.files.length === 1 ? "1 file" : `${result.files.length} files`;
  const saved = result.totalBytes === 0 ? 0 : (100 * result.dedupedBytes) / result.totalBytes;
  const xorbs = result.xorbs.inserted + result.xorbs.alreadyStored;
  const stored = result.files.filter((file) => file.alreadyStored).length;
  const parts = [
    `Uploaded ${count}, ${formatBytes(result.totalBytes)}: ${formatBytes(result.newBytes)} sent, ` +
      `${formatBytes(result.dedupedBytes)} deduplicated (${saved.toFixed(1)}% not sent)`,
    `${xorbs} xorb${xorbs === 1 ? "" : "s"} (${formatBytes(result.xorbs.bytesSent)}) sent` +
      (result.xorbs.alreadyStored > 0 ? `, ${result.xorbs.alreadyStored} of them already on the server` : ""),
    `${result.shards.sent} shard${result.shards.sent === 1 ? "" : "s"} registered`,
  ];
  if (stored > 0) parts.push(`${stored === 1 ? "1 file" : `${stored} files`} already in the repository`);
  if (result.cache.retriedAfterStale) parts.push("the local shard cache was stale (the server lost xorbs it named): cleared, uploaded again");
  return `${parts.join("; ")}.`;
}
