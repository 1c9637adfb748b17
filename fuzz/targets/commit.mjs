// The hub's NDJSON commit payload (POST /api/{type}s/{ns}/{name}/commit/{rev}): the body cut into
// bounded lines as it arrives (src/hub/ndjson.ts), each line parsed into the header and the
// operations (src/hub/commit-payload.ts). Input: byte 0 picks the piece size the body arrives in
// (1..255 bytes, or the whole body when 0), the rest is the body. Expected: HubError only.
// Besides crashes, a finding is: lines that differ from the body's own split at "\n" (or a 413
// that does not match a line over the bound), and a parse result that breaks what the commit
// code relies on (an invalid path, an inline file's SHA-256 and size not its content's, a
// malformed lfsFile).
// Bounds are small so that the 413s are reachable within libFuzzer's input sizes; memory stays
// within a line's worth (its base64 decoded) plus the operations' descriptions.
import { createHash } from "node:crypto";
import { repoPathProblem } from "../../dist/format/repo.js";
import { LineSplitter } from "../../dist/hub/ndjson.js";
import { CommitPayloadParser, MAX_COMMIT_OPERATIONS } from "../../dist/hub/commit-payload.js";
import { HubError } from "../../dist/hub/errors.js";
import { expected } from "./expect.mjs";

const INLINE_MAX_BYTES = 4096;
const MAX_LINE_BYTES = 8192;
const HEX64 = /^[0-9a-f]{64}$/;
const KINDS = new Set(["file", "lfsFile", "deletedFile", "deletedFolder"]);

function fail(message) {
  throw new Error(`commit payload: ${message}`);
}

/** The body's lines as the splitter gives them for `pieceSize`-byte pieces; null when it refused with 413. */
function splitInPieces(body, pieceSize) {
  const splitter = new LineSplitter(MAX_LINE_BYTES);
  const lines = [];
  try {
    for (let at = 0; at < body.length; at += pieceSize) lines.push(...splitter.push(body.subarray(at, at + pieceSize)));
    lines.push(...splitter.end());
  } catch (error) {
    expected(error, [HubError], (e) => e.status === 413);
    return null;
  }
  return lines;
}

function checkLines(body, lines) {
  const whole = [];
  for (let start = 0; start <= body.length; ) {
    const newline = body.indexOf(10, start);
    const end = newline === -1 ? body.length : newline;
    if (newline !== -1 || end > start) whole.push(body.subarray(start, end));
    start = end + 1;
  }
  const tooLong = whole.some((line) => line.length > MAX_LINE_BYTES);
  if (lines === null) {
    if (!tooLong) fail("413 without a line over the bound");
    return;
  }
  if (tooLong) fail("a line over the bound went through");
  if (lines.length !== whole.length) fail(`${lines.length} lines, the body has ${whole.length}`);
  for (let i = 0; i < lines.length; i++) if (lines[i] !== whole[i].toString("utf8")) fail(`line ${i + 1} differs from the body's`);
}

function checkInline(inline) {
  if (inline === null) return;
  if (createHash("sha256").update(inline.content).digest("hex") !== inline.sha256) fail("an inline file's sha256 is not its content's");
  if (inline.content.length >= INLINE_MAX_BYTES && inline.content.length > 0) fail(`an inline file of ${inline.content.length} bytes went through`);
}

function checkPayload({ header, operations }) {
  if (typeof header.summary !== "string" || typeof header.description !== "string") fail("a header without its strings");
  if (header.parentCommit !== undefined && !/^[0-9a-f]{40}$/.test(header.parentCommit)) fail("a parentCommit that is not 40 hex");
  if (operations.length > MAX_COMMIT_OPERATIONS) fail(`${operations.length} operations`);
  for (const op of operations) {
    if (!KINDS.has(op.kind) || typeof op.path !== "string") fail(`operation ${JSON.stringify(op)}`);
    if (repoPathProblem(op.path) !== null) fail(`an operation at the invalid path ${JSON.stringify(op.path)}`);
    if (op.kind === "file" && (!HEX64.test(op.sha256) || !Number.isSafeInteger(op.size) || op.size >= INLINE_MAX_BYTES)) fail("a file operation");
    if (op.kind === "lfsFile" && (!HEX64.test(op.sha256) || (op.size !== undefined && !(Number.isSafeInteger(op.size) && op.size >= 0)))) {
      fail("an lfsFile operation");
    }
  }
}

export function fuzz(data) {
  if (data.length === 0) return;
  const bytes = Buffer.from(data);
  const pieceSize = bytes[0] === 0 ? bytes.length : bytes[0];
  const body = bytes.subarray(1);
  const lines = splitInPieces(body, pieceSize);
  checkLines(body, lines);
  if (lines === null) return;
  const payload = new CommitPayloadParser(INLINE_MAX_BYTES);
  try {
    for (const line of lines) checkInline(payload.line(line));
    checkPayload(payload.finish());
  } catch (error) {
    expected(error, [HubError], (e) => e.status === 400 || e.status === 413);
  }
}
