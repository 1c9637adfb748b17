// SIGKILL during a hub commit on PostgreSQL + S3 (Ceph RGW); the cases are in test/e2e/crash-commit-suite.ts.
import { runCommitCrashSuite } from "../e2e/crash-commit-suite.js";
import { scaleOutUnavailable } from "../helpers/server.js";

const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the scale-out commit-crash tests need PostgreSQL and S3: ${unavailable}`);

runCommitCrashSuite("PostgreSQL + S3", { scaleOut: true, filesPerCommit: 400 });
