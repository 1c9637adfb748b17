// A node:test reporter that scripts/run-tests.mjs adds beside the visible one: at the end of a
// test file's run it writes one JSON line with the file's counts (the figures the spec reporter
// prints as `ℹ tests …`) and the CPU time the file used: its process's own, and with that of the
// child processes it started and waited for (servers, CLI commands, Python clients), read from
// /proc/self/stat (null where there is no /proc).
import { readFileSync } from "node:fs";

const COUNTS = ["tests", "pass", "fail", "cancelled", "skipped", "todo"];

export default async function* tally(source) {
  const counts = Object.fromEntries(COUNTS.map((name) => [name, 0]));
  for await (const event of source) {
    if (event.type !== "test:diagnostic" || event.data.nesting !== 0) continue;
    const [name, value] = event.data.message.split(" ");
    if (COUNTS.includes(name)) counts[name] = Number(value);
  }
  yield `${JSON.stringify({ ...counts, ...cpuSeconds() })}\n`;
}

/** CPU seconds of this process, and of it with its children; nulls where there is no /proc. */
function cpuSeconds() {
  try {
    // Fields after the command name (which may hold spaces): state is the 3rd field, utime,
    // stime, cutime and cstime the 14th to 17th, in clock ticks (100 a second on Linux).
    const stat = readFileSync("/proc/self/stat", "utf8");
    const ticks = stat
      .slice(stat.lastIndexOf(")") + 2)
      .split(" ")
      .slice(11, 15)
      .map((field) => Number(field) / 100);
    return { ownCpuSeconds: ticks[0] + ticks[1], cpuSeconds: ticks[0] + ticks[1] + ticks[2] + ticks[3] };
  } catch {
    return { ownCpuSeconds: null, cpuSeconds: null };
  }
}
