/**
 * What Linux's /proc says about a server process the benchmarks started: CPU time, memory,
 * open descriptors. The benches read the server from outside, as an operator's monitoring
 * would, so the numbers include everything the process holds (heap, buffers, native memory).
 */
import { existsSync, readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";

/** User + system CPU seconds of a process, from /proc (Linux); null elsewhere or once it is gone. */
export function processCpuSeconds(pid: number | undefined): number | null {
  if (pid === undefined || !existsSync(`/proc/${pid}/stat`)) return null;
  // Fields after the parenthesised command name; utime and stime are the 12th and 13th, in clock ticks (100 per second on Linux).
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
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
