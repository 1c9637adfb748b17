/** castor's version, from its package.json: what `castor --version` prints and backups record. */
import { readFileSync } from "node:fs";

export const VERSION: string = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")).version;
