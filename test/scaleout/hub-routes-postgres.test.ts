/**
 * The hub routes beyond upload and download (test/http/hub-routes-more.ts) on the scale-out
 * backend: `castor serve` on PostgreSQL and S3 (a fresh database and key prefix, dropped when the
 * server stops). Needs `scripts/services.sh start`; test/http/hub-routes-more.test.ts runs the
 * same suite on SQLite.
 */
import { runHubRoutesMoreSuite } from "../http/hub-routes-more.js";
import { scaleOutUnavailable } from "../helpers/server.js";

const unavailable = scaleOutUnavailable();
if (unavailable !== null) throw new Error(`the scale-out hub route tests need PostgreSQL and S3: ${unavailable}`);

runHubRoutesMoreSuite("PostgreSQL + S3", true);
