/**
 * What Linux's /proc says about a server process the benchmarks started: CPU time, memory,
 * open descriptors. The benches read the server from outside, as an operator's monitoring
 * would, so the numbers include everything the process holds (heap, buffers, native memory).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";

/** User + system CPU seconds of a process, from /proc (Linux); null elsewhere or once it is gone. */
export function processCpuSeconds(pid: number | undefined): number | null {
  if (pid === undefined || !existsSync(`/proc/${pid}/stat`)) return null;
  // Fields after the parenthesised command name; utime and stime are the 12th and 13th, in clock ticks (100 per second on Linux).
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/**
 * CPU seconds of a process's threads that are alive, from Linux's per-thread
 * /proc/<pid>/task/<tid>/schedstat (nanoseconds on CPU); null where that is not there or the
 * process is gone. `processCpuSeconds` counts 10 ms ticks, ±20 % on a 256 MiB download that
 * costs castor 0.05–0.1 s; this is exact to the nanosecond. A thread that has ended no longer
 * counts, so compare readings only across spans in which the process ends no thread (a Node
 * server's threads — libuv's pool, V8's helpers — live as long as it does).
 */
export function processThreadsCpuSeconds(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  let nanoseconds = 0;
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      // The first field is the time spent on the CPU, in ns. A thread may end between the listing and the read.
      const fields = readFileSyncOrNull(`/proc/${pid}/task/${tid}/schedstat`)?.split(" ");
      if (fields !== undefined) nanoseconds += Number(fields[0]);
    }
  } catch {
    return null;
  }
  return nanoseconds / 1e9;
}

function readFileSyncOrNull(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** A `kB` field of /proc/<pid>/status (VmRSS: resident now, VmHWM: the peak) in KiB; NaN when the process is gone. */
export async function processStatusKiB(pid: number | undefined, field: "VmRSS" | "VmHWM"): Promise<number> {
  let status: string;
  try {
    status = await readFile(`/proc/${pid}/status`, "utf8");
  } catch {
    return Number.NaN;
  }
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status);
  if (!match) throw new Error(`no ${field} line in /proc/${pid}/status`);
  return Number(match[1]);
}

/** Descriptors the process holds open (sockets, files, SQLite's); NaN when it is gone. */
export async function openDescriptorCount(pid: number | undefined): Promise<number> {
  try {
    return (await readdir(`/proc/${pid}/fd`)).length;
  } catch {
    return Number.NaN;
  }
}

/**
 * User + system CPU seconds of a process and all its descendants alive now (a cluster
 * primary's workers), from /proc (Linux); null when the process is gone. Children are found
 * through /proc/<pid>/task/<tid>/children, every thread's, since any thread may have forked.
 */
export function processTreeCpuSeconds(pid: number | undefined): number | null {
  const own = processCpuSeconds(pid);
  if (own === null) return null;
  let total = own;
  for (const child of childProcessIds(pid!)) total += processTreeCpuSeconds(child) ?? 0;
  return total;
}

function childProcessIds(pid: number): number[] {
  const children: number[] = [];
  let threads: string[];
  try {
    threads = readdirSync(`/proc/${pid}/task`);
  } catch {
    return children;
  }
  for (const thread of threads) {
    try {
      const listed = readFileSync(`/proc/${pid}/task/${thread}/children`, "utf8").trim();
      if (listed !== "") children.push(...listed.split(" ").map(Number));
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return children;
}

/**
 * The whole machine's CPU time from the first line of /proc/stat, in CPU seconds: `busy` is
 * everything but idle and I/O wait, `ioWait` the idle time with a disk read or write pending,
 * `total` everything. Differences over a span, with the processes one knows about subtracted,
 * tell how much the rest of the machine took; I/O wait tells whether the disk held work back.
 */
export function machineCpuSeconds(): { busy: number; ioWait: number; total: number } {
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks.
  const fields = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, idle, iowait, irq, softirq, steal] = fields;
  const busy = user + nice + system + irq + softirq + steal;
  return { busy: busy / 100, ioWait: iowait / 100, total: (busy + idle + iowait) / 100 };
}
