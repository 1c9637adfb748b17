/**
 * `castor backup DEST`: a consistent copy of the embedded data dir while the server runs, made by
 * `backupDataDir` (src/ops/backup.ts); progress on stderr, a summary on stdout.
 */
import { formatBytes } from "../client/progress.js";
import { loadAdminConfig } from "./stores.js";
import { KEY_FILES, backupDataDir, requireEmbedded, type BackupManifest } from "../ops/backup.js";
import type { FsCopyCounts } from "../storage/fs-copy.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, expectPositionals, formatTable, interruptSignal, parseCommandLine, parseCount, runCommand } from "./args.js";
import { VERSION } from "./version.js";

const USAGE = `Usage: castor backup DEST [--copy] [--progress-every N]

Makes a consistent copy of the embedded data dir (CASTOR_DATA_DIR) in DEST, a new or empty
folder, while the server keeps running: first a snapshot of metadata.sqlite (SQLite's online
backup), then every blob (xorbs, shards, inline files), the generated keys (keys/: without them
a restored server refuses the tokens and URLs handed out before) and a manifest
(castor-backup.json). Blobs stored after the snapshot are copied too; a blob the snapshot needs
that is gone (deleted meanwhile, or damage) fails the backup. Everything is written into
DEST.partial-… beside DEST and renamed to DEST at the very end, so an interrupted backup never
looks complete (SIGINT and SIGTERM remove the partial folder; after a crash, delete it).

Blobs never change once stored, so they are hard-linked when DEST is on the data dir's
filesystem (instant, no extra space; but the backup then shares that disk: it guards against
deletion and bad upgrades, not against losing the disk) and copied otherwise. The summary says
which was used.

  --copy               copy every blob, even where a hard link would do
  --progress-every N   a progress line every N blobs (default 1000), and at least one per GiB

Restore with 'castor restore DEST'. Embedded setup only: with CASTOR_DATABASE_URL or
CASTOR_S3_BUCKET set, use pg_dump and bucket versioning or replication (README.md, "Backup and
restore").

${CONFIG_FLAGS_HELP}

Exit codes: 0 backed up, 1 refused or failed (DEST left as it was), 2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("backup", async () => {
    const args = parseCommandLine(argv, { copy: { type: "boolean" }, "progress-every": { type: "string" } });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    const [dest] = expectPositionals(args.positionals, ["DEST"]);
    const progressEveryBlobs = parseCount("progress-every", args.values["progress-every"], "blobs");
    const config = loadAdminConfig(args.configFlags);
    requireEmbedded(config, "backup");

    const say = (line: string) => process.stderr.write(`castor backup: ${line}\n`);
    say(`backing up ${config.dataDir} into ${dest}`);
    const interrupt = interruptSignal();
    try {
      const result = await backupDataDir(config.dataDir, dest, {
        castorVersion: VERSION,
        method: args.values.copy ? "copy" : "link",
        progress: say,
        progressEveryBlobs,
        signal: interrupt.signal,
      });
      process.stdout.write(`Backed up ${config.dataDir} to ${result.dest} in ${(result.elapsedMs / 1000).toFixed(1)} s; blobs ${howCopied(result.blobs)}.\n`);
      process.stdout.write(contentsTable(result.manifest, result.blobs, `${result.referencedObjects} referenced by the snapshot`));
      const missingKeys = KEY_FILES.filter((key) => !result.manifest.keyFiles.includes(key.file));
      if (missingKeys.length > 0) {
        process.stdout.write(
          `Note: the data dir has no ${missingKeys.map((key) => `keys/${key.file}`).join(", ")}: its server takes ${missingKeys.length === 1 ? "it" : "them"} from ${missingKeys.map((key) => key.setting).join(", ")} (or generates ${missingKeys.length === 1 ? "it" : "them"} at its first start); keep such settings with the backup, or ${missingKeys.map((key) => key.keepsValid).join(", ")} stop working after a restore.\n`,
        );
      }
      return EXIT_OK;
    } catch (err) {
      if (interrupt.signal.aborted) throw new Error(`${(interrupt.signal.reason as Error).message}: no backup was written to ${dest}`);
      throw err;
    } finally {
      interrupt.dispose();
    }
  });
}

/** How the blobs got into the backup, for the summary's first line. */
export function howCopied(blobs: FsCopyCounts): string {
  if (blobs.objects === 0) return "none to copy";
  if (blobs.copied === 0 && blobs.linked > 0) return "hard-linked (one filesystem, so both sides share its disk; --copy makes an independent copy)";
  if (blobs.linked === 0) return "copied";
  return `hard-linked where the filesystem allowed (${blobs.linked}), copied elsewhere (${blobs.copied})`;
}

/** One row per part of a backup: database, blobs, keys. */
export function contentsTable(manifest: BackupManifest, blobs: FsCopyCounts, blobNote: string): string {
  const { records } = manifest;
  const kinds = `${blobs.kinds.xorbs.objects} xorbs, ${blobs.kinds.shards.objects} shards, ${blobs.kinds.inline.objects} inline files`;
  return formatTable(
    ["PART", "SIZE", "CONTENTS"],
    [
      [
        manifest.database.file,
        formatBytes(manifest.database.bytes),
        `schema version ${manifest.schemaVersion}: ${records.repositories} repositories, ${records.commits} commits, ${records.xorbs} xorbs, ${records.files} files, ${records.shards} shards`,
      ],
      ["blobs", formatBytes(blobs.bytes), `${blobs.objects} objects (${kinds}; ${blobNote}), ${blobs.bytes} bytes`],
      ["keys", "", manifest.keyFiles.length > 0 ? manifest.keyFiles.join(", ") : "none"],
    ],
  );
}
