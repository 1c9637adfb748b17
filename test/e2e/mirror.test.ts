/** castor as a pull-through mirror on the embedded stores (the suite is mirror-suite.ts). */
import { runMirrorSuite } from "./mirror-suite.js";

runMirrorSuite("SQLite and files");
