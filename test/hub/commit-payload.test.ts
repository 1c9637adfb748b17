/**
 * The NDJSON commit payload (src/hub/commit-payload.ts) and its line splitter
 * (src/hub/ndjson.ts) without HTTP: each operation kind, the refusals (HubError 400/413,
 * never another exception), the regressions the commit fuzz target and its review found, and
 * trimSlashes (src/format/repo.ts) on long runs of slashes.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { describe, it } from "node:test";
import { gitBlobId } from "../../src/format/git.js";
import { trimSlashes } from "../../src/format/repo.js";
import { LineSplitter } from "../../src/hub/ndjson.js";
import { CommitPayloadParser, MAX_COMMIT_LINES, maxCommitLineBytes } from "../../src/hub/commit-payload.js";
import { HubError } from "../../src/hub/errors.js";

const INLINE_MAX = 1024;
const HEADER = JSON.stringify({ key: "header", value: { summary: "add", description: "more" } });
const line = (key: unknown, value: unknown) => JSON.stringify({ key, value });
const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex");

function parse(...lines: string[]) {
  const parser = new CommitPayloadParser(INLINE_MAX);
  const inline = lines.map((text) => parser.line(text)).filter((found) => found !== null);
  return { ...parser.finish(), inline };
}

function refused(lines: string[], status: number, message: RegExp): void {
  assert.throws(
    () => parse(...lines),
    (error: unknown) => error instanceof HubError && error.status === status && message.test(error.message),
  );
}

describe("CommitPayloadParser", () => {
  it("reads the header and every operation kind, handing out inline contents to store", () => {
    const content = Buffer.from("# hello\n");
    const oid = sha256("weights");
    const { header, operations, inline } = parse(
      HEADER,
      "",
      line("file", { path: "README.md", content: content.toString("base64"), encoding: "base64" }),
      line("lfsFile", { path: "w/model.bin", algo: "sha256", oid, size: 10 }),
      line("lfsFile", { path: "copy.bin", oid }),
      line("deletedFile", { path: "old.txt" }),
      line("deletedFolder", { path: "old-dir///" }),
    );
    assert.deepEqual(header, { summary: "add", description: "more" });
    assert.deepEqual(operations, [
      { kind: "file", path: "README.md", size: content.length, sha256: sha256(content), oid: gitBlobId(content) },
      { kind: "lfsFile", path: "w/model.bin", sha256: oid, size: 10 },
      { kind: "lfsFile", path: "copy.bin", sha256: oid },
      { kind: "deletedFile", path: "old.txt" },
      { kind: "deletedFolder", path: "old-dir" },
    ]);
    assert.deepEqual(inline, [{ sha256: sha256(content), content }]);
  });

  it("refuses malformed payloads with HubError 400 or 413", () => {
    refused([], 400, /the commit is empty/);
    refused([line("deletedFile", { path: "a" })], 400, /must start with a \{"key": "header"\} line/);
    refused([HEADER, HEADER], 400, /line 2: a second header/);
    refused([HEADER, "{not json"], 400, /line 2 is not JSON/);
    refused([HEADER, line("copyFile", { path: "b", srcPath: "a" })], 400, /unknown operation "copyFile"/);
    refused([HEADER, line("file", { path: "a/../b", content: "" })], 400, /invalid path/);
    refused([HEADER, line("file", { path: "big", content: Buffer.alloc(INLINE_MAX).toString("base64") })], 413, /must be uploaded through Xet/);
    refused([HEADER, line("lfsFile", { path: "w", oid: "AB", size: 1 })], 400, /64-hex SHA-256/);
  });

  it("refuses a file at an invalid path before handing out its content", () => {
    const parser = new CommitPayloadParser(INLINE_MAX);
    parser.line(HEADER);
    assert.throws(() => parser.line(line("file", { path: ".git/config", content: "eA==" })), HubError);
  });

  // Found by `npm run fuzz -- commit` (input: blank lines, then `null`): a TypeError, so a 500.
  for (const text of ["null", "12", '"file"', "[1, 2]", "true"]) {
    it(`refuses the line ${text}, valid JSON but not an object, with 400`, () => {
      refused([HEADER, text], 400, /line 2 is not a JSON object/);
      refused([text], 400, /line 1 is not a JSON object/);
    });
  }

  // Found reviewing the fuzz target: String(key) throws for an object whose own toString is not a function.
  it("refuses an operation whose key is an object, whatever its properties, with 400", () => {
    for (const key of [{ toString: 1 }, { valueOf: null, toString: "x" }, [], null, 7]) {
      refused([HEADER, line(key, { path: "a" })], 400, /line 2: unknown operation with a "key" that is not a string/);
    }
  });

  // Found reviewing the fuzz target: /\/+$/ is quadratic on a run of slashes that does not end
  // the string, and took minutes here. Linear, it takes milliseconds: `npm run bench -- hub`
  // times it (a test asserts no duration).
  it("refuses a body of more lines than MAX_COMMIT_LINES, blank lines counted: they cannot keep a commit open", () => {
    const parser = new CommitPayloadParser(INLINE_MAX);
    parser.line(HEADER);
    for (let blank = 1; blank < MAX_COMMIT_LINES; blank++) parser.line("");
    assert.throws(
      () => parser.line(""),
      (error: unknown) => error instanceof HubError && error.status === 413 && /at most \d+ lines, blank ones included/.test(error.message),
    );
  });

  it("refuses a deletedFolder path of 200,000 slashes between two letters", () => {
    refused([HEADER, line("deletedFolder", { path: `a${"/".repeat(200_000)}b` })], 400, /invalid path/);
  });
});

describe("LineSplitter", () => {
  const body = Buffer.from(`${HEADER}\n\r\n{"key":"deletedFile","value":{"path":"é🤗"}}\nlast`);

  it("gives the same lines whatever the pieces the body arrives in", () => {
    const whole = body.toString("utf8").split("\n");
    for (const pieceSize of [1, 2, 3, 7, 64, body.length]) {
      const splitter = new LineSplitter(1024);
      const lines: string[] = [];
      for (let at = 0; at < body.length; at += pieceSize) lines.push(...splitter.push(body.subarray(at, at + pieceSize)));
      lines.push(...splitter.end());
      assert.deepEqual(lines, whole, `pieces of ${pieceSize}`);
    }
  });

  it("refuses a line longer than its bound with 413 as soon as it has seen that many bytes", () => {
    const splitter = new LineSplitter(10);
    assert.deepEqual(splitter.push(Buffer.from("0123456789\n0123")), ["0123456789"]);
    assert.throws(
      () => splitter.push(Buffer.from("4567890")),
      (error: unknown) => error instanceof HubError && error.status === 413,
    );
  });

  it("takes a base64 line of the largest inline file", () => {
    const content = Buffer.alloc(INLINE_MAX - 1, 1);
    const text = line("file", { path: `${"d/".repeat(1000)}f`, content: content.toString("base64") });
    assert.deepEqual(new LineSplitter(maxCommitLineBytes(INLINE_MAX)).push(Buffer.from(`${text}\n`)), [text]);
  });
});

describe("trimSlashes", () => {
  it("drops the slashes at the end, and at the start when asked", () => {
    assert.equal(trimSlashes("a/b//"), "a/b");
    assert.equal(trimSlashes("//a/b//", { leading: true }), "a/b");
    assert.equal(trimSlashes("//a"), "//a");
    assert.equal(trimSlashes("///", { leading: true }), "");
    assert.equal(trimSlashes(""), "");
  });

  // Linear, a million slashes take milliseconds (a quadratic scan, hours): `npm run bench -- hub`
  // times it (a test asserts no duration).
  it("handles long runs of slashes that do not end the string", () => {
    const path = `a${"/".repeat(1_000_000)}b`;
    assert.equal(trimSlashes(path, { leading: true }), path);
    assert.equal(trimSlashes(`${path}/`), path);
  });
});
