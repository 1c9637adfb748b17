/**
 * `castor fsck`: checks the configured stores (read-only) with `fsckStores` (src/ops/fsck.ts):
 * progress on stderr, a summary and every problem on stdout, exit code 1 when damage was found.
 */
import { fsckStores, type FsckReport } from "../ops/fsck.js";
import { loadConfig } from "../config.js";
import { CONFIG_FLAGS_HELP, EXIT_FAILURE, EXIT_OK, expectPositionals, formatTable, parseCommandLine, parseProgressEvery, runCommand } from "./args.js";
import { withStores } from "./stores.js";

const USAGE = `Usage: castor fsck [--progress-every N]

Checks the configured stores without changing anything: every recorded xorb's blob exists and
re-validates against its hash (streamed, in bounded memory) and matches its chunk table;
every file's terms name recorded xorbs with chunk ranges inside them; every dedup index entry
names a recorded xorb. Progress goes to stderr; the counts and every problem found (its kind and
the xorb, file or chunk hash) to stdout.

  --progress-every N   a progress line every N xorbs (default 1000), and at least one
                       per GiB validated

${CONFIG_FLAGS_HELP}

Exit codes: 0 the stores are intact, 1 damage found (or the check could not run), 2 bad
command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("fsck", async () => {
    const args = parseCommandLine(argv, { "progress-every": { type: "string" } });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    expectPositionals(args.positionals, []);
    const progressEveryXorbs = parseProgressEvery(args.values["progress-every"], "xorbs");
    const config = loadConfig(process.env, args.configFlags);
    const say = (line: string) => process.stderr.write(`castor fsck: ${line}\n`);
    const report = await withStores(config, (metadata, blobs) => fsckStores(metadata, blobs, { progress: say, progressEveryXorbs }));
    process.stdout.write(summary(report));
    return report.problemCount === 0 ? EXIT_OK : EXIT_FAILURE;
  });
}

function summary(report: FsckReport): string {
  const { counts, problems, problemCount } = report;
  const lines = [
    `Checked ${counts.xorbs} xorbs (${counts.xorbBytes} bytes validated), ${counts.files} files (${counts.fileTerms} terms), ${counts.dedupEntries} dedup entries.`,
  ];
  if (problemCount === 0) return `${lines.join("\n")}\nNo damage found.\n`;
  lines.push(
    `Damage found: ${problemCount} problem${problemCount === 1 ? "" : "s"}${problemCount > problems.length ? ` (the first ${problems.length} listed)` : ""}.`,
  );
  return `${lines.join("\n")}\n${formatTable(
    ["KIND", "WHAT", "PROBLEM"],
    problems.map((problem) => [problem.kind, problem.subject, problem.message]),
  )}`;
}
