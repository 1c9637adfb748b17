/** `castor serve` on a terminal: the banner a person reads before the JSON log lines. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { banner } from "../../src/cli/serve.js";
import { TEST_RESERVED_SPACE } from "../helpers/cli.js";
import { withTempDir } from "../helpers/temp-dir.js";

describe("castor serve banner", () => {
  it("names the URL, the data dir and the next commands, with the data dir spelled out for admin commands", () => {
    const text = banner("http://127.0.0.1:8080", "/srv/castor-data");
    assert.match(text, /^castor is serving http:\/\/127\.0\.0\.1:8080 \(data dir \/srv\/castor-data\)\. Stop it with Ctrl-C\.\n/);
    assert.match(text, /npx castor token create --data-dir \/srv\/castor-data --user alice/);
    assert.match(text, /export HF_ENDPOINT=http:\/\/127\.0\.0\.1:8080 /);
    assert.ok(text.endsWith("\n"));
    assert.ok(!text.split("\n").some((line) => line.startsWith("{")), "no JSON in the banner");
  });

  it("says where the metadata is when there is no data dir", () => {
    const text = banner("https://cas.example", null);
    assert.match(text, /\(metadata in PostgreSQL\)/);
    assert.doesNotMatch(text, /--data-dir/);
  });
});

/**
 * The real command on a real terminal: `script` gives `castor serve` a pseudo-terminal, with one
 * process and with a primary and two workers (the default on a machine of several cores).
 */
describe("castor serve on a terminal", () => {
  for (const workers of ["1", "2"]) {
    it(`prints the banner once it serves (CASTOR_WORKERS=${workers})`, () =>
      withTempDir("castor-banner-", async (dataDir) => {
        const command = [process.execPath, "--import", import.meta.resolve("tsx"), fileURLToPath(new URL("../helpers/castor-cli.ts", import.meta.url)), "serve"]
          .map((word) => `'${word}'`)
          .join(" ");
        const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("CASTOR_")));
        const child = spawn("script", ["-qefc", command, "/dev/null"], {
          env: { ...inherited, CASTOR_DATA_DIR: dataDir, CASTOR_LISTEN: "127.0.0.1:0", CASTOR_WORKERS: workers, CASTOR_RESERVED_SPACE: TEST_RESERVED_SPACE },
          stdio: ["pipe", "pipe", "pipe"],
        });
        let output = "";
        try {
          await new Promise<void>((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`no banner within 30 s; output: ${output}`)), 30_000);
            child.stdout.setEncoding("utf8").on("data", (text: string) => {
              output += text;
              if (output.includes("Request logs follow as JSON lines.")) {
                clearTimeout(timer);
                resolve();
              }
            });
            child.on("exit", () => reject(new Error(`castor serve exited; output: ${output}`)));
          });
          assert.match(output, /castor is serving http:\/\/127\.0\.0\.1:\d+ \(data dir /);
        } finally {
          child.kill("SIGTERM");
          await new Promise((resolve) => child.once("close", resolve));
        }
      }));
  }
});
