/** `castor serve` on a terminal: the banner a person reads before the JSON log lines. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { banner } from "../../src/cli/serve.js";

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
