/**
 * `castor serve` on a terminal: the banner a person reads first, then log lines written to be
 * read (pino-pretty), or JSON lines when CASTOR_LOG_FORMAT=json says so; secrets in neither.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, it } from "node:test";
import { banner } from "../../src/cli/serve.js";
import { loadConfig } from "../../src/config.js";
import { logFormatFor } from "../../src/http/logging.js";
import { CASTOR_COMMAND, TEST_RESERVED_SPACE } from "../helpers/cli.js";
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

  it("says how the log follows", () => {
    assert.match(banner("http://127.0.0.1:8080", null, "pretty"), /CASTOR_LOG_FORMAT=json for JSON lines/);
    assert.match(banner("http://127.0.0.1:8080", null, "json"), /as JSON lines/);
  });
});

describe("CASTOR_LOG_FORMAT", () => {
  it("is readable on a terminal and JSON elsewhere unless set; json or pretty when set", () => {
    assert.equal(loadConfig({}).logFormat, null);
    assert.equal(logFormatFor(null, { isTTY: true }), "pretty");
    assert.equal(logFormatFor(null, { isTTY: false }), "json");
    assert.equal(logFormatFor(null, {}), "json");
    assert.equal(logFormatFor(loadConfig({ CASTOR_LOG_FORMAT: "json" }).logFormat, { isTTY: true }), "json");
    assert.equal(logFormatFor(loadConfig({ CASTOR_LOG_FORMAT: "pretty" }).logFormat, { isTTY: false }), "pretty");
    assert.equal(loadConfig({ CASTOR_LOG_FORMAT: "json" }, { "log-format": "pretty" }).logFormat, "pretty", "the flag wins");
    assert.throws(() => loadConfig({ CASTOR_LOG_FORMAT: "text" }), /CASTOR_LOG_FORMAT must be one of json, pretty/);
  });
});

/** A token and a signature that requests carry: neither may appear in the output. */
const SECRET_TOKEN = "hf_neverInTheLogXXXXXXXXXXXXXXXXXXXXXXXX";
const SECRET_SIGNATURE = "neverInTheLogSignatureXXXXXXXXXXXXXXXXXXXX";

/**
 * Runs `castor serve` on a pseudo-terminal (`script` gives it one), waits for its banner, sends
 * requests that carry a token and a signature, waits for their log lines and stops it; returns
 * everything it printed, lines without the terminal's carriage returns.
 */
async function serveOnTerminal(dataDir: string, env: Record<string, string>): Promise<string[]> {
  const command = `'${CASTOR_COMMAND}' serve`;
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("CASTOR_")));
  const child = spawn("script", ["-qefc", command, "/dev/null"], {
    env: { ...inherited, CASTOR_DATA_DIR: dataDir, CASTOR_LISTEN: "127.0.0.1:0", CASTOR_RESERVED_SPACE: TEST_RESERVED_SPACE, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let output = "";
  const waitFor = (what: string, test: (text: string) => boolean) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${what} within 30 s; output: ${output}`)), 30_000);
      const check = () => {
        if (!test(output)) return;
        clearTimeout(timer);
        child.stdout.off("data", check);
        child.off("exit", exited);
        resolve();
      };
      const exited = () => reject(new Error(`castor serve exited before ${what}; output: ${output}`));
      child.stdout.on("data", check);
      child.on("exit", exited);
      check();
    });
  child.stdout.setEncoding("utf8").on("data", (text: string) => (output += text));
  try {
    await waitFor("banner", (text) => text.includes("Logs follow"));
    const url = /castor is serving (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1];
    assert.ok(url, output);
    assert.equal((await fetch(`${url}/api/whoami-v2`, { headers: { authorization: `Bearer ${SECRET_TOKEN}` } })).status, 401);
    assert.equal((await fetch(`${url}/v1/transfer/${"ab".repeat(32)}?x=1&r=0.1&s=${SECRET_SIGNATURE}`)).status, 403);
    await waitFor("the requests' log lines", (text) => text.includes("/api/whoami-v2") && text.includes("/v1/transfer/"));
  } finally {
    child.kill("SIGTERM");
    await new Promise((resolve) => child.once("close", resolve));
  }
  return output.replaceAll("\r", "").split("\n");
}

/** Lines without the terminal's color codes. */
function plain(lines: string[]): string[] {
  return lines.map((line) => line.replace(/\u001b\[[0-9;]*m/g, "")).filter((line) => line.trim() !== "");
}

/**
 * The real command on a real terminal, with one process and with a primary and two workers (the
 * default on a machine of several cores).
 */
describe("castor serve on a terminal", () => {
  for (const workers of ["1", "2"]) {
    it(`prints the banner first, then readable log lines with no secret (CASTOR_WORKERS=${workers})`, () =>
      withTempDir("castor-banner-", async (dataDir) => {
        const lines = plain(await serveOnTerminal(dataDir, { CASTOR_WORKERS: workers }));
        assert.match(lines[0], /^castor is serving http:\/\/127\.0\.0\.1:\d+ \(data dir /, `the banner comes first:\n${lines.join("\n")}`);
        const bannerEnd = lines.findIndex((line) => line.startsWith("Logs follow"));
        assert.ok(bannerEnd > 0 && bannerEnd < 6, lines.join("\n"));
        const logLines = lines.slice(bannerEnd + 1);
        assert.ok(logLines.length > 3, lines.join("\n"));
        for (const line of logLines) {
          assert.match(line, /^\[\d\d:\d\d:\d\d\] (INFO|WARN|ERROR): /, `a readable line, not JSON: ${line}`);
          if (workers !== "1") assert.match(line, /: \[(primary|worker \d)\] /, `the line says which process wrote it: ${line}`);
        }
        assert.ok(logLines.some((line) => /castor listening on http:\/\/127\.0\.0\.1:\d+/.test(line)));
        assert.ok(
          logLines.some((line) => /GET \/api\/whoami-v2 401 [\d.]+ ms$/.test(line)),
          `a request line reads as one:\n${logLines.join("\n")}`,
        );
        assert.ok(logLines.some((line) => new RegExp(`GET /v1/transfer/${"ab".repeat(32)} 403 [\\d.]+ ms$`).test(line)));
        for (const line of lines) assert.ok(!line.includes(SECRET_TOKEN) && !line.includes(SECRET_SIGNATURE), `a secret in: ${line}`);
      }));
  }

  it("writes JSON lines after the banner with CASTOR_LOG_FORMAT=json", () =>
    withTempDir("castor-banner-", async (dataDir) => {
      const lines = plain(await serveOnTerminal(dataDir, { CASTOR_WORKERS: "1", CASTOR_LOG_FORMAT: "json" }));
      assert.match(lines[0], /^castor is serving /);
      const bannerEnd = lines.findIndex((line) => line.startsWith("Logs follow"));
      const logLines = lines.slice(bannerEnd + 1);
      assert.ok(logLines.length > 3);
      for (const line of logLines) assert.equal(typeof JSON.parse(line).level, "number", line);
      assert.ok(logLines.some((line) => JSON.parse(line).path === "/api/whoami-v2"));
      for (const line of lines) assert.ok(!line.includes(SECRET_TOKEN) && !line.includes(SECRET_SIGNATURE), `a secret in: ${line}`);
    }));
});
