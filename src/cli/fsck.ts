/**
 * `castor fsck [--repair]`: checks the configured stores with `fsckStores` (src/ops/fsck.ts),
 * and with `--repair` removes what is corrupt or dangling: progress on stderr, a summary and
 * every problem on stdout, exit code 1 when damage was found (or, after repairs, remains).
 */
import { fsckStores, type FsckReport } from "../ops/fsck.js";
import { CONFIG_FLAGS_HELP, EXIT_FAILURE, EXIT_OK, expectPositionals, formatTable, parseCommandLine, parseCount, runCommand } from "./args.js";
import { withStores, loadAdminConfig } from "./stores.js";
import { reserveOf, withReserveReleased } from "../storage/reserve.js";

const USAGE = `Usage: castor fsck [--repair] [--progress-every N]

Checks the configured stores: every recorded xorb's blob exists and re-validates against its
hash (streamed, in bounded memory) and matches its chunk table; every file's terms name
recorded xorbs with chunk ranges inside them; every commit of every branch and tag (with its
ancestors) and every tree they reach is stored, every Xet file those trees name is recorded
and every inline file's blob holds its bytes; every dedup index entry names a recorded xorb.
Blobs nothing needs (xorb blobs without a record, inline blobs no reachable tree names, shard
blobs without a shard record) are listed as orphans: not damage, castor gc removes the xorb
and inline ones. Without --repair nothing is changed (safe while castor serves).

  --repair             also remove what is corrupt or dangling, so clients upload it anew:
                       xorbs whose blob is missing or corrupt (record, dedup entries and
                       blob), dedup entries naming unrecorded xorbs, corrupt inline blobs, and
                       damaged file records that no branch or tag reaches. A damaged file a
                       ref names is kept and listed with its paths: its content is lost until
                       it is uploaded again. Safe while castor serves.
  --progress-every N   a progress line every N xorbs (default 1000), and at least one
                       per GiB validated

${CONFIG_FLAGS_HELP}

Progress goes to stderr; the counts and every problem found (its kind, the xorb, file, chunk,
commit, tree or blob, and with --repair what was done) to stdout.

Exit codes: 0 the stores are intact (orphan blobs aside) or --repair fixed all the damage,
1 damage found or left after --repair (or the check could not run), 2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("fsck", async () => {
    const args = parseCommandLine(argv, { repair: { type: "boolean" }, "progress-every": { type: "string" } });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    expectPositionals(args.positionals, []);
    const progressEveryXorbs = parseCount("progress-every", args.values["progress-every"], "xorbs");
    const repair = args.values.repair ?? false;
    const config = loadAdminConfig(args.configFlags);
    const say = (line: string) => process.stderr.write(`castor fsck: ${line}\n`);
    // Repairs write, and may be wanted on a full disk; a check only reads.
    const report = await withReserveReleased(repair ? reserveOf(config) : null, say, () =>
      withStores(config, (metadata, blobs) => fsckStores(metadata, blobs, { repair, progress: say, progressEveryXorbs })),
    );
    process.stdout.write(summary(report));
    return report.remaining === 0 ? EXIT_OK : EXIT_FAILURE;
  });
}

function summary(report: FsckReport): string {
  const { counts, problems, problemCount } = report;
  const lines = [
    `Checked ${counts.xorbs} xorbs (${counts.xorbBytes} bytes validated), ${counts.files} files (${counts.fileTerms} terms), ${counts.dedupEntries} dedup entries, ` +
      `${counts.repositories} repositories (${counts.commits} commits, ${counts.trees} trees, ${counts.reachableFiles} files named).`,
    problemCount === 0 ? "No damage found." : `Damage found: ${plural(problemCount, "problem")}.`,
  ];
  if (problems.length > 0) {
    const headers = ["KIND", "WHAT", "PROBLEM", ...(report.repaired ? ["REPAIR"] : [])];
    const rows = problems.map((problem) => [problem.kind, problem.subject, problem.message, ...(report.repaired ? [problem.repair ?? ""] : [])]);
    lines.push(formatTable(headers, rows).trimEnd());
    if (report.unlisted > 0) lines.push(`(${report.unlisted} more not listed.)`);
  }
  const { xorbs, inline, shards } = report.orphans;
  const collectable = xorbs.blobs + inline.blobs;
  if (collectable > 0) lines.push(`${plural(collectable, "orphan blob")} (${xorbs.bytes + inline.bytes} bytes): castor gc removes them.`);
  if (shards.blobs > 0) {
    lines.push(
      `${plural(shards.blobs, "shard blob")} (${shards.bytes} bytes) without a shard record: harmless, castor gc keeps them; delete them by hand if you like.`,
    );
  }
  if (!report.historyComplete) lines.push("Part of the history is missing: restore the metadata database from a backup to recover it.");
  if (report.liveDamagedFiles.length > 0) {
    lines.push(
      report.repaired
        ? "Damaged files that refs name (kept): downloads of these paths fail until the files are uploaded again:"
        : "Damaged files that refs name: downloads of these paths fail until the files are uploaded again (after castor fsck --repair):",
    );
    for (const file of report.liveDamagedFiles) {
      const more = file.morePaths > 0 ? `, and ${file.morePaths} more` : "";
      lines.push(`  file ${file.file} (${file.size} bytes): ${file.paths.join(", ") || "no path found"}${more}`);
    }
  }
  if (report.repaired && problemCount > 0) {
    const fixed = problemCount - report.remaining;
    lines.push(
      report.remaining === 0
        ? `Repaired all ${plural(problemCount, "problem")}.`
        : `Repaired ${fixed} of ${plural(problemCount, "problem")}; ${report.remaining} left.`,
    );
  }
  return `${lines.join("\n")}\n`;
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}
