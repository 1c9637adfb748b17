// `castor gc` on PostgreSQL + S3 (Ceph RGW); the cases are in test/ops/gc-suite.ts.
import { runGcSuite } from "../ops/gc-suite.js";
import { scaleOutUnavailable } from "../helpers/server.js";

const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the scale-out gc tests need PostgreSQL and S3: ${unavailable}`);

runGcSuite("PostgreSQL + S3", { scaleOut: true });
