/**
 * Files of repositories, between local files and the hub (hub.ts):
 *
 * - where uploaded files go in the repository (`repoPathsFor`) and the commit that puts them
 *   there (`commitOperationsFor`): Xet-uploaded content as `lfsFile` operations named by its
 *   SHA-256 and size, the empty file as an inline `file` (it has no Xet content to name);
 * - downloading an inline file (`downloadInlineFile`): a plain GET of its URL at the commit its
 *   HEAD named, streamed to the output and checked against the ETag, the git blob id
 *   (SHA-1 of `blob <size>\0<bytes>`). A file output is written through a temporary file
 *   renamed into place only once the content checked out.
 */
import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { basename, join, relative } from "node:path";
import type { Writable } from "node:stream";
import { repoPathProblem } from "../format/repo.js";
import { fileSink, partialPathOf, streamSink } from "./download-output.js";
import { CastorClientError } from "./errors.js";
import type { CommitOperation, HubClient, RepoFileInfo } from "./hub.js";
import type { ProgressListener } from "./progress.js";

const GIT_BLOB_ID = /^[0-9a-f]{40}$/;

/**
 * The files to upload for command-line arguments that may name directories: a file as it is
 * (named by its base name), a directory as every regular file below it, recursively and in
 * name order, named `<directory's base name>/<path inside it>` — as `cp -r DIR DEST/` would.
 * `names` is null when no argument was a directory. Symbolic links to files are followed,
 * to directories are not (a link cycle would never end).
 */
export async function expandDirectories(paths: readonly string[]): Promise<{ files: string[]; names: string[] | null }> {
  const files: string[] = [];
  const names: string[] = [];
  let sawDirectory = false;
  for (const path of paths) {
    const info = await stat(path).catch(() => null);
    if (info?.isDirectory()) {
      sawDirectory = true;
      const top = basename(path.replace(/\/+$/, "")) || ".";
      const entries = (await readdir(path, { recursive: true, withFileTypes: true }))
        .filter((entry) => entry.isFile() || entry.isSymbolicLink())
        .map((entry) => join(entry.parentPath ?? entry.path, entry.name))
        .sort();
      for (const file of entries) {
        if (!(await stat(file).catch(() => null))?.isFile()) continue;
        files.push(file);
        names.push(top === "." ? relative(path, file) : `${top}/${relative(path, file)}`);
      }
      if (entries.length === 0) throw new CastorClientError("usage", `${path} is an empty directory: nothing to upload from it`);
    } else {
      // Missing files and other non-files are reported by the upload, with its wording.
      files.push(path);
      names.push(basename(path));
    }
  }
  return { files, names: sawDirectory ? names.map((name) => name.split("\\").join("/")) : null };
}

function requireRepoPath(path: string): string {
  const problem = repoPathProblem(path);
  if (problem !== null) throw new CastorClientError("usage", `${JSON.stringify(path)} cannot be a path in a repository: ${problem}`);
  return path;
}

/**
 * Where each local file goes in the repository:
 * - no `pathInRepo`: its base name, at the root;
 * - one file: `pathInRepo` is its path, unless it ends with `/` (a folder: `pathInRepo/<base name>`);
 * - several files: `pathInRepo` is a folder, `pathInRepo/<base name>` each.
 * A leading `./` or `/` is dropped; `.` or `/` alone is the root. Two files may not land on one path.
 * `names` replaces the base names (`expandDirectories` gives a directory's files as
 * `DIR/sub/file`); `pathInRepo` is then always a folder.
 */
export function repoPathsFor(localPaths: readonly string[], pathInRepo?: string, names?: readonly string[]): string[] {
  let folder = "";
  let single: string | null = null;
  if (pathInRepo !== undefined) {
    const trimmed = pathInRepo.replace(/^(\.\/)+/, "").replace(/^\/+/, "");
    const isFolder = trimmed === "" || trimmed === "." || trimmed.endsWith("/") || localPaths.length > 1 || names !== undefined;
    const cleaned = trimmed === "." ? "" : trimmed.replace(/\/+$/, "");
    if (isFolder) folder = cleaned === "" ? "" : `${requireRepoPath(cleaned)}/`;
    else single = requireRepoPath(cleaned);
  }
  const paths = localPaths.map((local, i) => (single !== null ? single : requireRepoPath(`${folder}${names?.[i] ?? basename(local)}`)));
  const seen = new Map<string, string>();
  paths.forEach((path, i) => {
    const earlier = seen.get(path);
    if (earlier !== undefined) {
      throw new CastorClientError(
        "usage",
        `${localPaths[i]} and ${earlier} would both be ${JSON.stringify(path)} in the repository: upload them separately with --path`,
      );
    }
    seen.set(path, localPaths[i]);
  });
  return paths;
}

/** The commit operations that put uploaded files at their paths: `lfsFile` each, the empty file inline. */
export function commitOperationsFor(files: readonly { pathInRepo: string; sha256: string; size: number }[]): CommitOperation[] {
  return files.map(({ pathInRepo, sha256, size }) =>
    size === 0 ? { kind: "file", path: pathInRepo, content: new Uint8Array(0) } : { kind: "lfsFile", path: pathInRepo, sha256, size },
  );
}

/** The commit title and body of a message (its first line, the rest); the default names the file count. */
export function commitMessageOf(message: string | undefined, fileCount: number): { summary: string; description: string } {
  const text = message?.trim() ?? "";
  if (text === "") return { summary: `Upload ${fileCount} file${fileCount === 1 ? "" : "s"} with castor`, description: "" };
  const newline = text.indexOf("\n");
  return newline === -1 ? { summary: text, description: "" } : { summary: text.slice(0, newline).trim(), description: text.slice(newline + 1).trim() };
}

// ---------------------------------------------------------------------------------------------
// Inline files

export interface InlineDownloadOptions {
  output: string | Writable;
  /** Bytes `start`..`end` (inclusive) only; the whole file is still read and checked. */
  range?: { start: number; end: number };
  /** End a stream output when done (default true; false for stdout). */
  endOutput?: boolean;
  onProgress?: ProgressListener;
}

export interface InlineDownloadResult {
  bytesWritten: number;
  /** `git-blob-id`: the bytes hash to the ETag; `size`: the ETag is not a git blob id, only the size was checked. */
  verified: "git-blob-id" | "size";
}

/** Downloads an inline file `info` describes (from `HubClient.fileInfo`) by a plain GET at its commit. */
export async function downloadInlineFile(hub: HubClient, info: RepoFileInfo, options: InlineDownloadOptions): Promise<InlineDownloadResult> {
  const { size } = info;
  const first = options.range?.start ?? 0;
  const endExclusive = options.range === undefined ? size : Math.min(size, options.range.end + 1);
  if (options.range !== undefined) {
    const { start, end } = options.range;
    if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || end < start) {
      throw new CastorClientError("usage", `a byte range needs whole numbers 0 ≤ start ≤ end (end inclusive), got ${start}-${end}`);
    }
    if (start >= size && !(start === 0 && size === 0))
      throw new CastorClientError("usage", `the range starts at byte ${start}, past the end of the file (${size} bytes)`);
  }
  const checkable = GIT_BLOB_ID.test(info.etag);
  const sink =
    typeof options.output === "string"
      ? await fileSink(options.output, partialPathOf(options.output, info.etag))
      : streamSink(options.output, options.endOutput ?? true);
  const what = `downloading ${JSON.stringify(info.path)} at ${info.commit}`;
  try {
    // Pinned to the commit the HEAD named: the branch may move in between.
    const response = await hub.openFile(info.commit, info.path);
    const hash = createHash("sha1").update(`blob ${size}\0`);
    let received = 0;
    let written = 0;
    if (response.body !== null) {
      const reader = response.body.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          if (received + value.length > size)
            throw new CastorClientError("protocol", `${what}: the server sent more than the ${size} bytes its HEAD announced`);
          hash.update(value);
          const from = Math.max(first, received) - received;
          const to = Math.min(endExclusive, received + value.length) - received;
          received += value.length;
          if (to > from) {
            await sink.write([value.subarray(from, to)]);
            written += to - from;
          }
          options.onProgress?.({
            operation: "download",
            phase: "downloading",
            bytesDone: written,
            bytesTotal: endExclusive - first,
            transferredBytes: received,
          });
        }
      } catch (error) {
        await reader.cancel().catch(() => undefined);
        throw error;
      }
    }
    if (received !== size) throw new CastorClientError("protocol", `${what}: the body ended after ${received} of ${size} bytes`);
    if (checkable) {
      const actual = hash.digest("hex");
      if (actual !== info.etag) {
        const output = typeof options.output === "string" ? "the output file was not kept" : "discard what was written to the output stream";
        throw new CastorClientError(
          "integrity",
          `${what}: the content's git blob id is ${actual}, not the ETag ${info.etag}: the server sent wrong data; ${output}`,
        );
      }
    }
    await sink.commit();
    return { bytesWritten: written, verified: checkable ? "git-blob-id" : "size" };
  } catch (error) {
    await sink.abandon();
    throw error;
  }
}
