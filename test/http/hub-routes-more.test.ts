/**
 * The hub routes beyond upload and download (hub-routes-more.ts) on the embedded backend:
 * `castor serve` on SQLite and the fs blob store. test/scaleout/hub-routes-postgres.test.ts runs
 * the same suite on PostgreSQL + S3.
 */
import { runHubRoutesMoreSuite } from "./hub-routes-more.js";

runHubRoutesMoreSuite("SQLite", false);
