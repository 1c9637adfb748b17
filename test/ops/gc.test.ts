// `castor gc` on the embedded stores (SQLite + files); the cases are in gc-suite.ts.
import { runGcSuite } from "./gc-suite.js";

runGcSuite("SQLite + files", {});
