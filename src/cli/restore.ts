/**
 * `castor restore SRC`: puts a backup made by `castor backup` into the configured data dir with
 * `restoreDataDir` (src/ops/backup.ts); progress on stderr, a summary on stdout.
 */
import { loadConfig } from "../config.js";
import { restoreDataDir, requireEmbedded } from "../ops/backup.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, expectPositionals, interruptSignal, parseCommandLine, parseCount, runCommand } from "./args.js";
import { contentsTable, howCopied } from "./backup.js";

const USAGE = `Usage: castor restore SRC [--force] [--copy] [--progress-every N]

Restores SRC, a folder 'castor backup' wrote, into the data dir (CASTOR_DATA_DIR or --data-dir,
default ./castor-data), which must be empty or not exist yet. Nothing is moved into the data
dir before everything was staged beside it and checked: the manifest, the database (its SHA-256
as recorded, then SQLite's PRAGMA integrity_check), the blob counts, and every object the
database references. The database moves in last. Start the server afterwards.

  --force              restore into a data dir that is not empty: what it holds is deleted,
                       once the backup is staged and checked. Refused while another process
                       (a running castor server, an admin command) has its metadata.sqlite open
  --copy               copy every blob, even where a hard link to the backup's would do (by
                       default the restored data dir shares the backup's blob files when both
                       are on one filesystem; blobs never change, so either serves)
  --progress-every N   a progress line every N blobs (default 1000), and at least one per GiB

Stop the server before restoring over its data dir. Embedded setup only: with
CASTOR_DATABASE_URL or CASTOR_S3_BUCKET set, use pg_restore and the bucket's versions or replica
(README.md, "Backup and restore").

${CONFIG_FLAGS_HELP}

Exit codes: 0 restored, 1 refused or failed (the data dir left as it was), 2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("restore", async () => {
    const args = parseCommandLine(argv, { force: { type: "boolean" }, copy: { type: "boolean" }, "progress-every": { type: "string" } });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    const [source] = expectPositionals(args.positionals, ["SRC"]);
    const progressEveryBlobs = parseCount("progress-every", args.values["progress-every"], "blobs");
    const config = loadConfig(process.env, args.configFlags);
    requireEmbedded(config, "restore");

    const say = (line: string) => process.stderr.write(`castor restore: ${line}\n`);
    say(`restoring ${source} into ${config.dataDir}`);
    const interrupt = interruptSignal();
    try {
      const result = await restoreDataDir(source, config.dataDir, {
        force: args.values.force === true,
        method: args.values.copy ? "copy" : "link",
        progress: say,
        progressEveryBlobs,
        signal: interrupt.signal,
      });
      const { manifest } = result;
      process.stdout.write(
        `Restored the backup of ${manifest.createdAt} (castor ${manifest.castorVersion}) into ${result.dataDir}${result.replaced ? ", replacing what it held," : ""} in ${(result.elapsedMs / 1000).toFixed(1)} s; blobs ${howCopied(result.blobs)}.\n`,
      );
      process.stdout.write(contentsTable(manifest, result.blobs, "all the database references"));
      process.stdout.write(`Database integrity check: ok. Start the server with: castor serve --data-dir ${result.dataDir}\n`);
      return EXIT_OK;
    } catch (err) {
      if (interrupt.signal.aborted) throw new Error(`${(interrupt.signal.reason as Error).message}: ${config.dataDir} was left as it was`);
      throw err;
    } finally {
      interrupt.dispose();
    }
  });
}
