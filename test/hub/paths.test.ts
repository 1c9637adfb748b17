/**
 * The rule for paths a commit may add a file at (src/hub/paths.ts): names that are dangerous or
 * ambiguous on the disks of the clients that download them are refused with the rule they break;
 * everything else a person names a file, in any script, is accepted.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { HubError } from "../../src/hub/errors.js";
import { nameCollisionKey, newPathProblem, requireNewPath, requirePath } from "../../src/hub/paths.js";

describe("paths a commit may add a file at", () => {
  it("accepts names in any script, spaces and dots inside, joiners, and percent signs that encode nothing dangerous", () => {
    for (const ok of [
      "README.md",
      "weights/model-00001-of-00002.safetensors",
      "café.txt",
      "cafe\u0301.txt",
      "données/été 2024/rapport final.csv",
      "日本語/ファイル.json",
      "فارسی/می\u200cخواهم.txt",
      "emoji/👩\u200d💻.png",
      "my%20file.txt",
      "50%_off.png",
      ".gitattributes",
      ".github/workflows/ci.yml",
      "a.b.c",
      "2024-01-01T00:00:00.json",
      "notes:v2.txt",
    ]) {
      assert.equal(newPathProblem(ok), null, JSON.stringify(ok));
      assert.deepEqual(requireNewPath(ok), ok.split("/"));
    }
  });

  it("refuses each dangerous name with a 400 that names the rule", () => {
    const cases: [string, RegExp][] = [
      ["..\\evil", /contains a backslash, which Windows reads as a folder separator/],
      ["a\\..\\..\\b", /backslash/],
      ["a\nb.txt", /control character U\+000A/],
      ["tab\there", /control character U\+0009/],
      ["bell\x07", /control character U\+0007/],
      ["del\x7f", /control character U\+007F/],
      ["c1\u0085", /control character U\+0085/],
      [" ", /the part " " starts or ends with white space/],
      ["  /x", /starts or ends with white space/],
      ["dir/ name.txt", /the part " name.txt" starts or ends with white space/],
      ["name.txt ", /starts or ends with white space/],
      ["nbsp\u00a0", /starts or ends with white space/],
      ["evil\u202etxt.exe", /U\+202E, an invisible character that reorders or hides/],
      ["a\u200bb", /U\+200B/],
      ["bom\ufeff.txt", /U\+FEFF/],
      ["isolate\u2066x", /U\+2066/],
      ["cafe\u0301\ud800", /not valid Unicode/],
      ["x\udc00", /not valid Unicode/],
      ["%2e%2e/x", /percent-encoded '\.', '\/', '\\' or '%'/],
      ["a%2Fb", /percent-encoded/],
      ["a%5cb", /percent-encoded/],
      ["100%25", /percent-encoded/],
      ["file.", /the part "file\." ends with '\.', which Windows drops/],
      ["dir./x", /ends with '\.'/],
      ["C:evil", /starts with a drive letter and ':', which Windows reads as another drive/],
      ["sub/d:x", /drive letter/],
      [".GIT/config", /names git's own folder on Windows or macOS disks/],
      [".Git", /git's own folder/],
      ["GIT~1/config", /git's own folder/],
      ["x/.g\u200cit/hooks", /git's own folder/],
    ];
    for (const [path, message] of cases) {
      assert.throws(
        () => requireNewPath(path),
        (error: unknown) => error instanceof HubError && error.status === 400 && message.test(error.message) && error.message.startsWith("invalid path "),
        JSON.stringify(path),
      );
    }
  });

  it("shows invisible characters of a refused path as code points, never as themselves", () => {
    assert.throws(
      () => requireNewPath("evil\u202etxt.exe"),
      (error: unknown) => error instanceof HubError && error.message.includes('"evil\\u{202E}txt.exe"') && !error.message.includes("\u202e"),
    );
  });

  it("still reads, lists and deletes at such paths: only adding a file is refused", () => {
    for (const path of ["..\\evil", "a\nb", " ", "evil\u202etxt", "%2e%2e/x", "file."]) assert.deepEqual(requirePath(path), path.split("/"));
  });

  it("gives names that differ only in case or Unicode normalization one collision key", () => {
    assert.equal(nameCollisionKey("café"), nameCollisionKey("cafe\u0301"));
    assert.equal(nameCollisionKey("README.md"), nameCollisionKey("readme.MD"));
    assert.equal(nameCollisionKey("CAFÉ"), nameCollisionKey("cafe\u0301"));
    assert.notEqual(nameCollisionKey("cafe"), nameCollisionKey("café"));
    assert.notEqual(nameCollisionKey("a.txt"), nameCollisionKey("a.txt "));
  });
});
