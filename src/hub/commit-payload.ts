/**
 * The Hub's NDJSON commit payload (HUB-API §6; the lines' shapes: src/wire/hub.ts `CommitLine`),
 * one line at a time: a header line first, then one operation per line. Pure: the file service
 * (files.ts) splits the body into bounded lines (ndjson.ts), keeps each inline file's content
 * aside as its line is parsed (inline-contents.ts), and applies the operations once the body
 * ended, so only their small descriptions are kept in memory meanwhile; the contents are stored
 * only once the commit applies (history.ts).
 *
 *     const payload = new CommitPayloadParser(inlineMaxBytes);
 *     for await (const line of readLines(pieces, maxCommitLineBytes(inlineMaxBytes))) {
 *       const inline = payload.line(line);
 *       if (inline !== null) await keep(inline.sha256, inline.content);
 *     }
 *     const { header, operations } = payload.finish();
 *
 * Every refusal is a HubError (400, or 413 for a payload over a bound).
 */
import { gitBlobId } from "../format/git.js";
import { trimSlashes } from "../format/repo.js";
import { HubError } from "./errors.js";
import { type CommitOperation, sha256Hex } from "./history.js";
import { requireNewPath, requirePath } from "./paths.js";

export interface CommitHeader {
  summary: string;
  description: string;
  parentCommit?: string;
}

/** An inline file's content, for the caller to store under its SHA-256 before the commit is applied. */
export interface InlineContent {
  sha256: string;
  content: Buffer;
}

/** Operations per commit at most (the hf CLI's folder uploader commits at most 1,000 files at once). */
export const MAX_COMMIT_OPERATIONS = 100_000;

/**
 * Lines per commit body at most, blank ones included: blank lines carry no operation, so without
 * this bound a client could keep a commit open with them for as long as the body timeouts allow.
 * Room for the header and a blank line beside every operation.
 */
export const MAX_COMMIT_LINES = 2 * MAX_COMMIT_OPERATIONS + 2;

/** The longest line a commit may have: a base64 line of the largest inline file, plus room for the JSON around it. */
export function maxCommitLineBytes(inlineMaxBytes: number): number {
  return Math.ceil(inlineMaxBytes / 3) * 4 + 64 * 1024;
}

export class CommitPayloadParser {
  private header: CommitHeader | undefined;
  private readonly operations: CommitOperation[] = [];
  private lineNumber = 0;

  /** `inlineMaxBytes`: files of this size or more must go through Xet (`config.hubInlineMaxBytes`). */
  constructor(private readonly inlineMaxBytes: number) {}

  /** Parses the next line; returns the content of an inline file to store, otherwise null. */
  line(text: string): InlineContent | null {
    const lineNumber = ++this.lineNumber;
    if (lineNumber > MAX_COMMIT_LINES) throw new HubError(413, `a commit body has at most ${MAX_COMMIT_LINES} lines, blank ones included: split it`);
    if (text.trim() === "") return null;
    let item: unknown;
    try {
      item = JSON.parse(text);
    } catch {
      throw new HubError(400, `commit line ${lineNumber} is not JSON: send one JSON object per line`);
    }
    // `null`, a number or a list parse too: there is no key to read from them.
    if (typeof item !== "object" || item === null || Array.isArray(item)) {
      throw new HubError(400, `commit line ${lineNumber} is not a JSON object: send {"key": …, "value": {…}} per line`);
    }
    const { key, value: given } = item as { key?: unknown; value?: unknown };
    const value = (typeof given === "object" && given !== null ? given : {}) as Record<string, unknown>;
    if (key === "header") {
      if (this.header !== undefined) throw new HubError(400, `commit line ${lineNumber}: a second header`);
      this.header = commitHeaderOf(value);
      return null;
    }
    if (this.header === undefined) throw new HubError(400, 'the commit must start with a {"key": "header"} line');
    if (this.operations.length >= MAX_COMMIT_OPERATIONS) throw new HubError(413, `a commit takes at most ${MAX_COMMIT_OPERATIONS} operations: split it`);
    const { operation, inline } = this.operationOf(key, value, lineNumber);
    this.operations.push(operation);
    return inline;
  }

  /** The header and the operations, once every line was given. */
  finish(): { header: CommitHeader; operations: CommitOperation[] } {
    if (this.header === undefined) throw new HubError(400, 'the commit is empty: it needs a {"key": "header"} line');
    return { header: this.header, operations: this.operations };
  }

  private operationOf(key: unknown, value: Record<string, unknown>, lineNumber: number): { operation: CommitOperation; inline: InlineContent | null } {
    const given = value.path;
    if (typeof given !== "string") throw new HubError(400, `commit line ${lineNumber}: the operation needs a "path"`);
    // Checked here as well as where the commit is applied (history.ts), so that a file refused
    // for its path is refused at its line, before the rest of the body is read. A file is
    // added only at a path safe on clients' disks; a deletion takes any path (a name refused
    // now may be in a repository from before).
    const path = key === "deletedFolder" ? trimSlashes(given) : given;
    if (key === "file" || key === "lfsFile") requireNewPath(path);
    else requirePath(path);
    switch (key) {
      case "file": {
        if (typeof value.content !== "string" || (value.encoding !== undefined && value.encoding !== "base64")) {
          throw new HubError(400, `commit line ${lineNumber}: a file needs base64 "content"`);
        }
        const content = Buffer.from(value.content, "base64");
        if (content.length >= this.inlineMaxBytes && content.length > 0) {
          throw new HubError(
            413,
            `${JSON.stringify(path)} is ${content.length} bytes: files of ${this.inlineMaxBytes} bytes or more must be uploaded through Xet (install hf_xet)`,
          );
        }
        const sha256 = sha256Hex(content);
        return { operation: { kind: "file", path, size: content.length, sha256, oid: gitBlobId(content) }, inline: { sha256, content } };
      }
      case "lfsFile": {
        const { oid, algo, size } = value;
        if (typeof oid !== "string" || !/^[0-9a-f]{64}$/.test(oid) || (algo !== undefined && algo !== "sha256")) {
          throw new HubError(400, `commit line ${lineNumber}: an lfsFile needs "oid", a 64-hex SHA-256`);
        }
        if (size !== undefined && !(Number.isSafeInteger(size) && (size as number) >= 0)) {
          throw new HubError(400, `commit line ${lineNumber}: "size" must be a whole number of bytes`);
        }
        return { operation: { kind: "lfsFile", path, sha256: oid, ...(size === undefined ? {} : { size: size as number }) }, inline: null };
      }
      case "deletedFile":
        return { operation: { kind: "deletedFile", path }, inline: null };
      case "deletedFolder":
        return { operation: { kind: "deletedFolder", path }, inline: null };
      default: {
        // Not String(key): a parsed object whose own "toString" is not a function makes String() throw.
        const named = typeof key === "string" ? JSON.stringify(key.slice(0, 40)) : `with a "key" that is not a string`;
        throw new HubError(400, `commit line ${lineNumber}: unknown operation ${named} (castor takes file, lfsFile, deletedFile, deletedFolder)`);
      }
    }
  }
}

function commitHeaderOf(value: Record<string, unknown>): CommitHeader {
  const { summary, description, parentCommit } = value;
  if (typeof summary !== "string") throw new HubError(400, 'the commit header needs a "summary"');
  if (description !== undefined && description !== null && typeof description !== "string") throw new HubError(400, '"description" must be a string');
  if (parentCommit !== undefined && parentCommit !== null && (typeof parentCommit !== "string" || !/^[0-9a-f]{40}$/.test(parentCommit))) {
    throw new HubError(400, '"parentCommit" must be a 40-hex commit id');
  }
  return { summary, description: (description as string | undefined) ?? "", ...(typeof parentCommit === "string" ? { parentCommit } : {}) };
}
