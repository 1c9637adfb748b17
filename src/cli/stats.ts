/**
 * `castor stats`: storage statistics of the configured stores (src/hub/stats.ts defines every
 * number) as tables on stdout, or as the JSON of `GET /api/stats` with `--json`; the
 * computation is kept as its UTC day's sample. `--history` lists the samples instead.
 */
import { formatBytes } from "../client/progress.js";
import { loadAdminConfig } from "./stores.js";
import { compressionRatio, dedupRatio, historyJson, StorageStatsService, storageStatsJson, unreferencedXorbBytes } from "../hub/stats.js";
import { formatRepoRef } from "../hub/names.js";
import { openMetadataStore } from "../metadata/open.js";
import type { StatsSample, StorageTotals } from "../metadata/store.js";
import { CONFIG_FLAGS_HELP, EXIT_OK, expectPositionals, formatTable, formatTime, parseCommandLine, runCommand } from "./args.js";

const USAGE = `Usage: castor stats [--history] [--json]

Computes storage statistics of the configured stores (read-only, apart from the day's sample),
per repository and in total:
  FILES     live files: those at the heads of the repository's branches and tags, each path
            and version once
  LOGICAL   the sum of their sizes (the total adds up the repositories)
  UNIQUE    their distinct content before compression: the uncompressed sizes of the distinct
            xorbs their content is in, plus their inline blobs
  STORED    bytes stored for them: those xorbs as stored (compressed), plus the inline blobs
            (the total counts each once; repositories sharing content both count it)
  DEDUP     LOGICAL / UNIQUE: what storing each chunk once saves
  COMPRESSION   UNIQUE / STORED: what compressing the chunks saves (DEDUP x COMPRESSION is
            LOGICAL / STORED)
  XORBS, CHUNKS, INLINE   distinct xorbs and their chunks, distinct inline blobs
and what every recorded xorb takes, including xorbs no live file references any more (what a
garbage collection could reclaim). The computation is kept as the sample of its UTC day: a
day's sample is its last computation (by this command, GET /api/stats or the server, which
measures again after uploads and after each UTC midnight).

  --history   list the daily samples instead, oldest first (computes nothing; today's is the
              last computation, which a running server keeps current)
  --json      print JSON instead of tables: the answer of GET /api/stats (with --history:
              {"history": [...]}); byte counts are exact

${CONFIG_FLAGS_HELP}

Exit codes: 0 success, 1 failure, 2 bad command line.
`;

export function run(argv: string[]): Promise<number> {
  return runCommand("stats", async () => {
    const args = parseCommandLine(argv, { history: { type: "boolean" }, json: { type: "boolean" } });
    if (args.help) {
      process.stdout.write(USAGE);
      return EXIT_OK;
    }
    expectPositionals(args.positionals, []);
    const json = args.values.json === true;
    const store = await openMetadataStore(loadAdminConfig(args.configFlags));
    try {
      const service = new StorageStatsService(store);
      if (args.values.history === true) {
        const history = await service.history();
        process.stdout.write(json ? `${JSON.stringify({ history: historyJson(history) }, null, 2)}\n` : historyTable(history));
        return EXIT_OK;
      }
      const stats = await service.measure();
      if (json) {
        process.stdout.write(`${JSON.stringify(storageStatsJson(stats, await service.history()), null, 2)}\n`);
        return EXIT_OK;
      }
      const rows = stats.repositories.map((repo) => [formatRepoRef(repo), ...contentCells(repo)]);
      rows.push(["total", ...contentCells(stats.totals)]);
      const { totals } = stats;
      process.stdout.write(
        `Storage statistics at ${formatTime(stats.takenAt)}\n\n` +
          formatTable(["REPOSITORY", "FILES", "LOGICAL", "UNIQUE", "STORED", "DEDUP", "COMPRESSION", "XORBS", "CHUNKS", "INLINE"], rows) +
          "\nA repository's STORED counts the xorbs its own files need: repositories sharing content overlap; the total counts each xorb once.\n" +
          `All recorded xorbs: ${totals.recordedXorbs} (${formatBytes(totals.recordedXorbBytes)}, ${totals.recordedChunks} chunks); ` +
          `${formatBytes(unreferencedXorbBytes(totals))} of them referenced by no live file (what a garbage collection could reclaim).\n`,
      );
      return EXIT_OK;
    } finally {
      await store.close();
    }
  });
}

type Content = Pick<StorageTotals, "files" | "logicalBytes" | "storedBytes" | "xorbs" | "chunks" | "inlineBlobs"> & { uniqueBytes: number | null };

function contentCells(content: Content): string[] {
  return [
    String(content.files),
    formatBytes(content.logicalBytes),
    ...sizeCells(content),
    String(content.xorbs),
    String(content.chunks),
    String(content.inlineBlobs),
  ];
}

/** UNIQUE, STORED, DEDUP, COMPRESSION; "-" for what a sample from an older castor lacks. */
function sizeCells(content: Content): string[] {
  const ratio = (value: number | null) => (value === null ? "-" : value.toFixed(2));
  return [
    content.uniqueBytes === null ? "-" : formatBytes(content.uniqueBytes),
    formatBytes(content.storedBytes),
    ratio(dedupRatio(content)),
    ratio(compressionRatio(content)),
  ];
}

function historyTable(history: readonly StatsSample[]): string {
  if (history.length === 0) return "No daily samples yet: 'castor stats' (or a running server) takes the first.\n";
  return formatTable(
    ["DAY", "REPOS", "FILES", "LOGICAL", "UNIQUE", "STORED", "DEDUP", "COMPRESSION", "XORBS", "CHUNKS", "RECORDED", "UNREFERENCED"],
    history.map((sample) => [
      sample.day,
      String(sample.repositories),
      String(sample.files),
      formatBytes(sample.logicalBytes),
      ...sizeCells(sample),
      String(sample.xorbs),
      String(sample.chunks),
      formatBytes(sample.recordedXorbBytes),
      formatBytes(unreferencedXorbBytes(sample)),
    ]),
  );
}
