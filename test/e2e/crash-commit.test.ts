// SIGKILL during a hub commit on SQLite + files; the cases are in crash-commit-suite.ts.
import { runCommitCrashSuite } from "./crash-commit-suite.js";

runCommitCrashSuite("SQLite + files", { scaleOut: false, filesPerCommit: 2000 });
