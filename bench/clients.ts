/**
 * Client throughput on 256 MiB files, upload and download, in one run, for two kinds of file:
 * random bytes (stored raw: nothing compresses) and word salad that LZ4 halves (as text and
 * much of a model's weights compress; support/random-file.ts), so the client's decompression is
 * measured too.
 *
 * - hf_xet 1.6.0 against castor (`castor serve`, its own process);
 * - hf_xet against the do-nothing CAS (support/do-nothing-cas.ts: accepts everything,
 *   validates nothing, serves from RAM) — the ceiling the client itself imposes, so castor /
 *   do-nothing is what castor's server costs hf_xet (throughput target ≥ 0.8; server CPU per
 *   download target ≤ 1.2×, issue 15);
 * - hf_xet against the do-nothing CAS serving from files (`keepXorbsIn: "files"`): the price of
 *   keeping bytes in files at all (the kernel copies them out of the page cache), which splits
 *   castor's extra server CPU into that price and castor's own overhead;
 * - castor's own client (src/client): uploads to a castor of its own, downloads from the castor
 *   hf_xet uploaded to, so both clients download the very same stored xorbs; compared with
 *   hf_xet (targets: upload ≥ 0.8, download ≥ 0.9).
 *
 * Every round uploads files of its own (fresh random content per round), so no upload can
 * deduplicate against an earlier one, and every hf_xet run has a fresh HF_XET_CACHE, so nothing
 * is served from the client's cache. The two castor servers (one for hf_xet, one for castor's
 * client, so each client uploads to a server that has not seen the file) live for the whole
 * run, as a server does: starting one per round made every transfer pay for warming up its JIT,
 * which the do-nothing CAS, running in this long-lived process, never paid. The do-nothing CASes
 * are fresh per file (they keep what they receive). hf_xet is timed inside Python
 * around its one call (interpreter start-up excluded); castor's client around its `upload` /
 * `download` call. Downloads are checked byte-exact (SHA-256) outside the timed sections.
 *
 * A round runs, for each kind of file, the uploads back to back, then the downloads (in reverse
 * order every other round); rounds repeat while the time budget allows.
 * Ratios are taken within a round, between transfers that ran one right after the other, so a
 * burst of load from other processes on the 2 shared cores tends to hit both sides alike.
 * All clients must report the same file hash. A first round runs uncounted: it warms
 * the servers' JIT, and on this VM memory the guest touches for the first time costs several
 * times what reused memory costs (in repeated runs the first round's transfers were the
 * slowest of the run for whichever server they hit).
 *
 * Next to MB/s, each transfer records the CPU seconds its server spent on it: castor's process
 * (its threads' /proc schedstat, in nanoseconds: a download costs castor only a few of
 * /proc/<pid>/stat's 10 ms ticks), and this process for the do-nothing CASes, which run in it.
 * On 2 cores every server CPU second is taken from the client, so this is the cost the ratio
 * measures, without the client's own noise. CPU seconds are less sensitive to other processes'
 * load than MB/s, so the server target is set on them.
 *
 * castor runs compiled (bin/castor.js, as users run it); `npm run bench` builds dist/ first.
 *
 * The clients' side — the source file, hf_xet's homes and caches, the downloaded copies — lives
 * in RAM (/dev/shm) where there is one: the disk's write-back of each 256 MiB copy (and of
 * hf_xet's chunk cache) otherwise lands on whichever transfer comes next and swamps the
 * difference between servers. castor's data dir and the do-nothing CAS's files stay on disk:
 * that is the server's real work.
 */
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { castorClientDownload, castorClientUpload, interopPython, startCastorFixture, type CastorFixture } from "../test/interop/harness.js";
import { benchRow, megabytesPerSecond, median, sized, type BenchRow } from "./lib.js";
import { startDoNothingCas, type DoNothingCas } from "./support/do-nothing-cas.js";
import { processCpuSeconds, processThreadsCpuSeconds } from "./support/proc-stats.js";
import { verifyDownload, writeCompressibleFile, writeRandomFile, type RandomFile } from "./support/random-file.js";
import { TimedHfXet, type XetTokenSource } from "./support/hf-xet.js";

const GROUP = "clients";
const FILE_BYTES = sized(256, 8) * 1024 * 1024;
const FILE_SEED = 256;
/** The uncounted warm-up round and at most 5 counted ones (a smoke run: one). */
const MAX_ROUNDS = sized(6, 2);
/** No new round starts after this much time, so the group stays around 3 minutes. */
const ROUND_BUDGET_SECONDS = 140;

/** hf_xet's throughput against castor ÷ against the do-nothing CAS. */
const SERVER_RATIO_TARGET = 0.8;
/** castor's server CPU per hf_xet download ÷ the do-nothing CAS's (issue 15). */
const SERVER_CPU_RATIO_TARGET = 1.2;
/** castor's client ÷ hf_xet, per transfer (issue 15 for downloads). */
const CLIENT_RATIO_TARGETS = { upload: 0.8, download: 0.9 } as const;

const KINDS = ["random", "compressible"] as const;
type Kind = (typeof KINDS)[number];
type Transfer = "upload" | "download";
const SETUPS = ["hf_xet → castor", "hf_xet → do-nothing", "hf_xet → do-nothing (files)", "castor client → castor"] as const;
type Setup = (typeof SETUPS)[number];

/** One figure per round, per kind of file, setup and transfer. */
type PerRound = Record<Kind, Record<Setup, Record<Transfer, number[]>>>;

function perRound(): PerRound {
  const setups = () => Object.fromEntries(SETUPS.map((setup) => [setup, { upload: [], download: [] }])) as unknown as Record<Setup, Record<Transfer, number[]>>;
  return { random: setups(), compressible: setups() };
}

export async function run(): Promise<BenchRow[]> {
  const groupStarted = performance.now();
  const scratch = await mkdtemp(join(clientScratchParent(), "castor-bench-clients-"));
  const castors: CastorFixture[] = [];
  try {
    const hfXet = new TimedHfXet(await interopPython(), scratch);
    const castorForHfXet = await startCastorFixture({}, { compiled: true });
    castors.push(castorForHfXet);
    const castorForClient = await startCastorFixture({}, { compiled: true });
    castors.push(castorForClient);
    /** MB/s. */
    const rates = perRound();
    /** CPU seconds the server spent on the transfer; castor's client's uploads have none (see castorClientContender). */
    const serverCpu = perRound();

    // Round 0 is the uncounted warm-up (see the file comment).
    let rounds = 0;
    while (rounds < MAX_ROUNDS && (rounds <= 1 || (performance.now() - groupStarted) / 1000 < ROUND_BUDGET_SECONDS)) {
      for (const kind of KINDS) {
        const source = join(scratch, `${kind}-${rounds}.bin`);
        const seed = FILE_SEED + rounds;
        const file = kind === "random" ? await writeRandomFile(source, FILE_BYTES, seed) : await writeCompressibleFile(source, FILE_BYTES, seed);
        const inMemory = await startDoNothingCas();
        const inFiles = await startDoNothingCas({ keepXorbsIn: "files" });
        try {
          const contenders = [
            hfXetContender("hf_xet → castor", hfXet, source, castorTokens(castorForHfXet), () => castorCpuSeconds(castorForHfXet)),
            hfXetContender("hf_xet → do-nothing", hfXet, source, doNothingTokens(inMemory), ownCpuSeconds),
            hfXetContender("hf_xet → do-nothing (files)", hfXet, source, doNothingTokens(inFiles), ownCpuSeconds),
            castorClientContender(castorForClient, castorForHfXet, source),
          ];
          const record = (setup: Setup, transfer: Transfer, seconds: number, cpuSeconds: number | null) => {
            if (rounds === 0) return;
            rates[kind][setup][transfer].push(megabytesPerSecond(FILE_BYTES, seconds));
            if (cpuSeconds !== null) serverCpu[kind][setup][transfer].push(cpuSeconds);
          };
          await runRound(contenders, file, rounds % 2 === 1, join(scratch, `download-${rounds}.bin`), record);
        } finally {
          await inMemory.close();
          await inFiles.close();
          await rm(source, { force: true });
        }
      }
      rounds++;
    }

    return report(rates, serverCpu, rounds - 1);
  } finally {
    for (const castor of castors) await castor.stop();
    await rm(scratch, { recursive: true, force: true });
  }
}

/** Uploads with every contender, then downloads with every one; `reversed` flips the order. */
async function runRound(
  contenders: Contender[],
  file: RandomFile,
  reversed: boolean,
  output: string,
  record: (setup: Setup, transfer: Transfer, seconds: number, cpuSeconds: number | null) => void,
): Promise<void> {
  // Every other round runs the setups in reverse order, so none always goes first (or last).
  const ordered = reversed ? [...contenders].reverse() : contenders;
  const fileHashes = new Set<string>();
  for (const contender of ordered) {
    const cpuBefore = contender.serverCpuSeconds("upload");
    const { seconds, fileHash } = await contender.upload();
    fileHashes.add(fileHash);
    record(contender.setup, "upload", seconds, cpuSince(contender, "upload", cpuBefore));
  }
  // Every client must name the same file, or the comparison compares different work.
  if (fileHashes.size !== 1) throw new Error(`the clients disagree on the file hash: ${[...fileHashes].join(", ")}`);
  const [fileHash] = fileHashes;
  for (const contender of ordered) {
    // Each copy is checked and removed before the next download.
    const cpuBefore = contender.serverCpuSeconds("download");
    const seconds = await contender.download(fileHash, output);
    const cpuSeconds = cpuSince(contender, "download", cpuBefore);
    await verifyDownload(output, file, contender.setup);
    record(contender.setup, "download", seconds, cpuSeconds);
  }
}

function report(rates: PerRound, serverCpu: PerRound, rounds: number): BenchRow[] {
  const rows: BenchRow[] = [];
  const roundsNote = (kind: Kind) =>
    `${FILE_BYTES / 1024 / 1024} MiB ${kind} file, best and median of ${rounds} round${rounds === 1 ? "" : "s"} after a warm-up round`;
  // best ÷ best compares each side's least disturbed run; a best per-round ratio would favour
  // rounds where load happened to hit the denominator. For CPU seconds the least is the best.
  const ratioRow = (
    metric: string,
    numerators: readonly number[],
    denominators: readonly number[],
    best: "max" | "min",
    target: { atLeast?: number; atMost?: number } | undefined,
    note: string,
  ) =>
    benchRow(GROUP, metric, pick(best, numerators) / pick(best, denominators), "ratio", {
      median: median(numerators.map((value, i) => value / denominators[i])),
      target,
      note: `${note}; ${best === "max" ? "best ÷ best" : "least ÷ least"}, median of per-round ratios`,
    });

  for (const kind of KINDS) {
    for (const setup of SETUPS) {
      for (const transfer of ["upload", "download"] as const) {
        const values = rates[kind][setup][transfer];
        // The files variant only matters for downloads; its upload is the in-memory one's.
        if (setup === "hf_xet → do-nothing (files)" && transfer === "upload") continue;
        rows.push(benchRow(GROUP, `${kind}: ${setup} ${transfer}`, Math.max(...values), "MB/s", { median: median(values), note: roundsNote(kind) }));
      }
    }
    for (const setup of SETUPS) {
      for (const transfer of ["upload", "download"] as const) {
        const values = serverCpu[kind][setup][transfer];
        if (values.length === 0 || (setup === "hf_xet → do-nothing (files)" && transfer === "upload")) continue;
        rows.push(
          benchRow(GROUP, `${kind}: ${setup} ${transfer}: server CPU`, Math.min(...values), "s", {
            median: median(values),
            note: `CPU seconds the server spent on one ${FILE_BYTES / 1024 / 1024} MiB transfer (least and median)`,
          }),
        );
      }
    }
    const cpu = serverCpu[kind];
    const downloadCpu = (setup: Setup) => cpu[setup].download;
    rows.push(
      ratioRow(
        `${kind}: hf_xet download server CPU: castor ÷ do-nothing CAS`,
        downloadCpu("hf_xet → castor"),
        downloadCpu("hf_xet → do-nothing"),
        "min",
        { atMost: SERVER_CPU_RATIO_TARGET },
        "what castor's server spends per download over a server that serves from RAM",
      ),
      ratioRow(
        `${kind}: hf_xet download server CPU: do-nothing from files ÷ from RAM`,
        downloadCpu("hf_xet → do-nothing (files)"),
        downloadCpu("hf_xet → do-nothing"),
        "min",
        undefined,
        "the price of serving from files at all (the page-cache copy)",
      ),
      ratioRow(
        `${kind}: hf_xet download server CPU: castor ÷ do-nothing from files`,
        downloadCpu("hf_xet → castor"),
        downloadCpu("hf_xet → do-nothing (files)"),
        "min",
        undefined,
        "castor's own overhead over the least a server serving from files does",
      ),
    );
    for (const transfer of ["upload", "download"] as const) {
      rows.push(
        ratioRow(
          `${kind}: hf_xet ${transfer}: castor / do-nothing CAS`,
          rates[kind]["hf_xet → castor"][transfer],
          rates[kind]["hf_xet → do-nothing"][transfer],
          "max",
          { atLeast: SERVER_RATIO_TARGET },
          "what castor's server costs hf_xet",
        ),
      );
    }
    for (const transfer of ["upload", "download"] as const) {
      rows.push(
        ratioRow(
          `${kind}: ${transfer} against castor: castor client / hf_xet`,
          rates[kind]["castor client → castor"][transfer],
          rates[kind]["hf_xet → castor"][transfer],
          "max",
          { atLeast: CLIENT_RATIO_TARGETS[transfer] },
          transfer === "download" ? "both download the same stored xorbs" : "each uploads to a castor that has not seen the file",
        ),
      );
    }
  }
  return rows;
}

function pick(best: "max" | "min", values: readonly number[]): number {
  return best === "max" ? Math.max(...values) : Math.min(...values);
}

/** A RAM-backed directory for the clients' files where the machine has one, else the temp dir. */
function clientScratchParent(): string {
  return existsSync("/dev/shm") ? "/dev/shm" : tmpdir();
}

/** One client against one server that has not seen the round's file. */
interface Contender {
  readonly setup: Setup;
  /** Uploads the source file; `seconds` is the timed part. */
  upload(): Promise<{ seconds: number; fileHash: string }>;
  /** Downloads the file into `output`; returns the timed seconds. */
  download(fileHash: string, output: string): Promise<number>;
  /** CPU seconds the server of this transfer has used so far; null where they cannot be told apart. */
  serverCpuSeconds(transfer: Transfer): number | null;
}

function cpuSince(contender: Contender, transfer: Transfer, before: number | null): number | null {
  const now = contender.serverCpuSeconds(transfer);
  return before === null || now === null ? null : now - before;
}

/** CPU seconds of a castor server's process: per thread in nanoseconds where Linux offers it, else in ticks. */
function castorCpuSeconds(castor: CastorFixture): number | null {
  const pid = castor.server.child.pid;
  return processThreadsCpuSeconds(pid) ?? processCpuSeconds(pid);
}

/** User + system CPU seconds of this process, which hosts the do-nothing CAS. */
function ownCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

function hfXetContender(setup: Setup, hfXet: TimedHfXet, source: string, tokens: XetTokenSource, serverCpuSeconds: () => number | null): Contender {
  return {
    setup,
    serverCpuSeconds,
    async upload() {
      const { seconds, files } = await hfXet.upload(tokens, [source]);
      if (files[0].size !== FILE_BYTES) throw new Error(`${setup}: hf_xet reported ${files[0].size} bytes for the ${FILE_BYTES}-byte file`);
      return { seconds, fileHash: files[0].hash };
    },
    async download(fileHash, output) {
      const { seconds } = await hfXet.download(tokens, [{ hash: fileHash, size: FILE_BYTES, path: output }]);
      return seconds;
    },
  };
}

/** Uploads to `uploadTo`; downloads from `downloadFrom`, the castor hf_xet uploaded the same file to. */
function castorClientContender(uploadTo: CastorFixture, downloadFrom: CastorFixture, source: string): Contender {
  return {
    setup: "castor client → castor",
    async upload() {
      const started = performance.now();
      const uploaded = await castorClientUpload(uploadTo, source);
      const seconds = (performance.now() - started) / 1000;
      // Everything must have been sent: a dedup hit would flatter the client.
      if (uploaded.newBytes !== FILE_BYTES) throw new Error(`castor's client stored ${uploaded.newBytes} of the ${FILE_BYTES} bytes as new`);
      return { seconds, fileHash: uploaded.fileHash };
    },
    async download(fileHash, output) {
      const started = performance.now();
      await castorClientDownload(downloadFrom, fileHash, output);
      return (performance.now() - started) / 1000;
    },
    // The client runs in this process, so only a server in a process of its own can be measured:
    // the download's castor, not the upload's (whose process the same contender could read, but
    // castor's client's uploads are not compared on server CPU).
    serverCpuSeconds: (transfer) => (transfer === "download" ? castorCpuSeconds(downloadFrom) : null),
  };
}

function castorTokens(castor: CastorFixture): XetTokenSource {
  return { tokenUrl: (access) => castor.tokenUrl(access), hubToken: (access) => castor.hubTokens[access] };
}

function doNothingTokens(doNothing: DoNothingCas): XetTokenSource {
  return { tokenUrl: doNothing.tokenUrl, hubToken: () => doNothing.hubToken };
}
