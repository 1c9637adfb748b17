// Preloaded into a benchmarked child process (`NODE_OPTIONS=--import=<this file>`): on exit,
// writes the process's peak resident set size to stderr as `castor-bench max-rss-kib N`.
// A preload, so the child can be the real compiled `castor` command, unchanged: the parent cannot
// read a child's peak RSS itself (Node gives no rusage of children, and /proc is gone at exit).
import { writeSync } from "node:fs";

process.on("exit", () => {
  writeSync(2, `\ncastor-bench max-rss-kib ${process.resourceUsage().maxRSS}\n`);
});
