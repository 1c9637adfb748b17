/**
 * `castor gc`: garbage collection on the configured stores (src/ops/gc.ts), safe while servers
 * run and clients upload. Progress on stderr, the report on stdout (a table, or JSON).
 */
import { durationMs } from "../duration.js";
import { collectGarbage, DEFAULT_GC_BATCH, type GcReport } from "../ops/gc.js";
import { DEFAULT_GC_GRACE } from "../config.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, expectPositionals, formatTable, parseCommandLine, parseCount, runCommand, UsageError } from "./args.js";
import { withStores, loadAdminConfig } from "./stores.js";
import { reserveOf, withReserveReleased } from "../storage/reserve.js";

const USAGE = `Usage: castor gc [--dry-run] [--grace D] [--mirror-unused D] [--batch N] [--json]

Removes what no branch or tag of any repository reaches any more — file records, the xorbs
only they used (records, dedup index entries and blobs), inline file blobs, and commits and
trees left behind by deleted branches, squashed histories and deleted repositories — unless it
was created or used by a client within the grace window. Safe while castor serves uploads: an
object an upload, a shard registration, a dedup answer or a commit uses during the run is kept.
Interrupted runs are finished by the next one.

  --dry-run    report what would be removed, remove nothing
  --grace D    keep everything created or used within D before the start (default
               CASTOR_GC_GRACE, ${DEFAULT_GC_GRACE}; 30d, 12h, 45m, 90s or 0). It must exceed your
               longest upload: an upload older than D whose file is not committed yet is garbage.
  --mirror-unused D
               first evict the files castor mirrors from its upstream hub that no client used
               for D (e.g. 30d): their content is removed unless a local repository's file
               uses it; they are fetched again when asked for. CASTOR_UPSTREAM_MAX_BYTES also
               bounds what the mirror keeps, evicting the least recently used files first.
  --batch N    objects per step (one metadata transaction each; default ${DEFAULT_GC_BATCH})
  --json       print the report as JSON

${CONFIG_FLAGS_HELP}

Exit codes: 0 done, 1 the collection failed (nothing half-done is left: run it again),
2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("gc", async () => {
    const args = parseCommandLine(argv, {
      "dry-run": { type: "boolean" },
      grace: { type: "string" },
      "mirror-unused": { type: "string" },
      batch: { type: "string" },
      json: { type: "boolean" },
    });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    expectPositionals(args.positionals, []);
    const graceText = args.values.grace;
    const graceFlag = graceText === undefined ? undefined : durationMs(graceText);
    if (graceFlag === null) throw new UsageError(`--grace must be a duration such as 24h, 30d, 45m, 90s or 0, got ${JSON.stringify(graceText)}`);
    const batchSize = parseCount("batch", args.values.batch, "objects") ?? DEFAULT_GC_BATCH;
    const unusedText = args.values["mirror-unused"];
    const mirrorUnusedMs = unusedText === undefined ? undefined : durationMs(unusedText);
    if (mirrorUnusedMs === null) throw new UsageError(`--mirror-unused must be a duration such as 30d, 12h or 0, got ${JSON.stringify(unusedText)}`);

    const config = loadAdminConfig(args.configFlags);
    const graceMs = graceFlag ?? config.gc.graceMs;
    const say = (line: string) => process.stderr.write(`castor gc: ${line}\n`);
    const dryRun = args.values["dry-run"] ?? false;
    // A dry run writes nothing, so it needs no room; a real one may be run because the disk is full.
    const report = await withReserveReleased(dryRun ? null : reserveOf(config), say, () =>
      withStores(config, (metadata, blobs) =>
        collectGarbage(metadata, blobs, { graceMs, dryRun, batchSize, progress: say, mirrorUnusedMs, mirrorMaxBytes: config.upstream?.maxBytes ?? undefined }),
      ),
    );
    process.stdout.write(args.values.json ? `${JSON.stringify(report, null, 2)}\n` : summary(report));
    return EXIT_OK;
  });
}

function summary(report: GcReport): string {
  const { removed, reachable } = report;
  const seconds = ((report.finishedAt.getTime() - report.startedAt.getTime()) / 1000).toFixed(1);
  const rows: string[][] = [
    ["xorbs", String(removed.xorbs.objects), String(removed.xorbs.bytes)],
    ["xorb blobs without a record", String(removed.orphanXorbBlobs.objects), String(removed.orphanXorbBlobs.bytes)],
    ["inline blobs", String(removed.inlineBlobs.objects), String(removed.inlineBlobs.bytes)],
    ["file records", String(removed.files.objects), `(${removed.files.bytes} of content)`],
    ["chunks of those xorbs", String(removed.chunks), ""],
    ["mirrored files evicted", String(report.evicted.objects), `(${report.evicted.bytes} of content)`],
    ["commits", String(removed.commits), ""],
    ["trees", String(removed.trees), ""],
  ];
  const lines = [
    `${report.dryRun ? "Dry run: would remove" : "Removed"} what no ref reaches and nothing used since ${report.cutoff.toISOString()} (${seconds} s).`,
    `Reachable: ${reachable.repositories} repositories, ${reachable.commits} commits, ${reachable.trees} trees, ${reachable.files} Xet files, ${reachable.inlineBlobs} inline files.`,
    formatTable(["KIND", report.dryRun ? "WOULD REMOVE" : "REMOVED", "BYTES"], rows).trimEnd(),
    `Stored bytes reclaimed: ${removed.xorbs.bytes + removed.orphanXorbBlobs.bytes + removed.inlineBlobs.bytes}.`,
  ];
  if (report.finishedFromEarlierRun > 0) lines.push(`Finished ${report.finishedFromEarlierRun} blob deletions an interrupted run had left.`);
  if (report.historiesSkipped > 0) lines.push(`${report.historiesSkipped} repositories changed during the run; their old history is collected next time.`);
  return `${lines.join("\n")}\n`;
}
