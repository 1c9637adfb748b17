/**
 * A repository's files: what an upload should send where (preupload, the LFS batch), committing
 * (an NDJSON payload, or operations already parsed), squashing a branch, and reading a file's
 * bytes — inline ones from the blob store, Xet-stored ones rebuilt from their xorbs — or its git
 * blob (a Xet file's is its LFS pointer). Every transport that reads or writes file contents goes
 * through here. A mirrored repository's file castor does not hold yet streams from the mirror
 * while it is fetched (mirrored.ts); once held, a Xet file reads as any.
 *
 * A commit payload arrives as pieces of a body (the transport reads and times it), is split into
 * bounded lines and parsed by commit-payload.ts. Inline file contents are kept aside as their
 * lines arrive (inline-contents.ts: in memory, past a few MiB in a spool file) and reach the blob
 * store only once every operation applied, just before the branch moves (history.ts
 * `storeContents`): a refused commit leaves no blob behind. Only the operations' small
 * descriptions are kept in memory meanwhile.
 */
import type { Readable } from "node:stream";
import type { FileBody, FileReader } from "../cas/file-reader.js";
import { isGitOid, lfsPointer } from "../format/git.js";
import { hashFromHex } from "../format/hash.js";
import { halfOpenByteRange, type HalfOpenByteRange } from "../format/ranges.js";
import type { CommitRecord, MetadataStore, Repo, TreeFileEntry } from "../metadata/store.js";
import { blobKeyFromHex, type BlobStore } from "../storage/blob-store.js";
import { authorOf, type Caller } from "./access.js";
import { type CommitHeader, CommitPayloadParser, maxCommitLineBytes } from "./commit-payload.js";
import { HubError } from "./errors.js";
import { HistoryWriter, type CommitOperation } from "./history.js";
import { DEFAULT_INLINE_MEMORY_BYTES, InlineContents } from "./inline-contents.js";
import { InlineBlobs } from "./inline-blobs.js";
import { LfsBatch, type FileIngester, type LfsBatchAnswer } from "./lfs-batch.js";
import type { MirroredRepositories } from "./mirrored.js";
import { readLines } from "./ndjson.js";
import { requireNewPath, TreeReader } from "./paths.js";
import type { RepoAddress, RepositoryService } from "./repositories.js";
import { isStoredWhole } from "./stored-files.js";

export interface PreuploadFile {
  path: string;
  size: number;
  /** The first (up to) 512 bytes. */
  sample: Uint8Array;
}

export interface PreuploadAnswer {
  path: string;
  uploadMode: "regular" | "lfs";
  /** The current file's id when it is stored the way this upload would store it (the client then skips it). */
  oid?: string;
}

/** A git blob as `raw` serves it: its id, its size and a reader of a byte range of it. */
export interface GitBlob {
  oid: string;
  size: number;
  read(offset: number, length: number): Promise<Buffer | Readable>;
}

export type FileStore = Pick<
  MetadataStore,
  "getTree" | "getCommit" | "getRevision" | "advanceBranch" | "findFileBySha256" | "getFile" | "leaseObjects" | "xorbFootprints"
>;

export interface FileServiceDeps {
  store: FileStore;
  blobs: BlobStore;
  /** Xet-stored files, rebuilt from their xorbs and verified as they stream (cas/file-reader.ts). */
  xetFiles: Pick<FileReader, "open">;
  repos: RepositoryService;
  /** Files of at least this many bytes are uploaded through Xet (`lfs`); smaller ones inline, unless binary (`config.hubInlineMaxBytes`). */
  inlineMaxBytes: number;
  /** Where a commit's inline contents wait on disk, past the first few MiB, until it has validated (the data dir's spool). */
  spoolDir: string;
  /** Takes Git LFS basic uploads (plain bytes) into the CAS (cas/file-ingest.ts); without it they are refused. */
  lfsFiles?: FileIngester;
  now?: () => Date;
  /** The upstream hub castor mirrors, when it mirrors one. */
  mirror?: MirroredRepositories;
}

export class FileService {
  private readonly writer: HistoryWriter;
  private readonly lfs: LfsBatch;

  constructor(private readonly deps: FileServiceDeps) {
    this.writer = new HistoryWriter(deps.store, deps.now, new InlineBlobs(deps.blobs, deps.store));
    this.lfs = new LfsBatch(deps.repos, deps.store, deps.lfsFiles);
  }

  get inlineMaxBytes(): number {
    return this.deps.inlineMaxBytes;
  }

  // --- uploading ----------------------------------------------------------------------------

  /**
   * Which files travel inline and which through Xet: Xet for non-empty files of at least
   * `inlineMaxBytes` or with a NUL byte in their first 512 bytes (binary), inline otherwise.
   */
  async preupload(repo: Repo, commit: CommitRecord, files: PreuploadFile[]): Promise<PreuploadAnswer[]> {
    const reader = new TreeReader(this.deps.store, repo.id);
    const answers: PreuploadAnswer[] = [];
    for (const file of files) {
      const lfs = file.size > 0 && (file.size >= this.deps.inlineMaxBytes || file.sample.includes(0));
      requireNewPath(file.path);
      const current = await reader.fileAt(commit.treeOid, file.path);
      const answer: PreuploadAnswer = { path: file.path, uploadMode: lfs ? "lfs" : "regular" };
      // The client skips a file whose oid matches its own: only say it when it is exactly that id.
      if (current !== null && (current.xetHash !== null) === lfs && (await this.isWhole(current))) answer.oid = lfs ? current.sha256 : current.oid;
      answers.push(answer);
    }
    return answers;
  }

  /**
   * The Git LFS batch call (lfs-batch.ts): for an upload, which objects to send (through Xet, or
   * git-lfs's basic transfer); for a download, which objects the repository holds.
   */
  lfsBatch(caller: Caller, address: RepoAddress, body: unknown): Promise<LfsBatchAnswer> {
    return this.lfs.batch(caller, address, body);
  }

  /**
   * An LFS object of `repo` (one the caller may read, or that a signed action URL names) for a
   * basic download: its size, and its bytes `span` rebuilt from Xet. 404 when it holds none.
   */
  async lfsObject(repo: Repo, oid: string): Promise<{ size: number; open(span: HalfOpenByteRange): Promise<FileBody> }> {
    const object = await this.lfs.object(repo, oid);
    return { size: object.size, open: (span) => this.openXetFile(object.xetHash, object.size, span) };
  }

  /** A basic upload of LFS object `oid` to `repo` (one the caller may write, or that a signed action URL names): see LfsBatch.upload. */
  lfsUpload(repo: Repo, oid: string, size: number, body: AsyncIterable<Uint8Array>): Promise<void> {
    return this.lfs.upload(repo, oid, size, body);
  }

  /** Whether a tree entry's content can still be served (a Xet file whose xorbs are all recorded). */
  private async isWhole(entry: TreeFileEntry): Promise<boolean> {
    if (entry.xetHash === null) return true;
    const file = await this.deps.store.getFile(hashFromHex(entry.xetHash));
    return file !== null && (await isStoredWhole(this.deps.store, file));
  }

  // --- committing ---------------------------------------------------------------------------

  /**
   * Applies the NDJSON commit in `body` (HUB-API §6; pieces of a request body, read as they come)
   * to `branch`. HubError 400/413 for bad input, at the line that breaks a rule (the rest of the
   * body is left unread), and every refusal of `commit`; nothing is stored then.
   */
  async commitPayload(caller: Caller, address: RepoAddress, branch: string, body: AsyncIterable<Buffer>): Promise<CommitRecord> {
    const contents = new InlineContents({ dir: this.deps.spoolDir, memoryBytes: DEFAULT_INLINE_MEMORY_BYTES });
    try {
      const { header, operations } = await this.readPayload(body, contents);
      return await this.commit(caller, address, branch, header, operations, {
        store: () => contents.store(this.deps.blobs, this.deps.store),
        get: (sha256) => contents.get(sha256),
      });
    } finally {
      await contents.close();
    }
  }

  /**
   * Applies a commit to `branch` of a repository the caller may write (history.ts says how: every
   * path and operation is checked, and the branch moves by compare-and-set). `contents` holds the
   * inline files' bytes: `store` writes them, once, only when the commit is known to apply; `get`
   * reads one before that (a `.gitattributes` the commit writes, which lfs-attributes.ts extends).
   */
  async commit(
    caller: Caller,
    address: RepoAddress,
    branch: string,
    header: CommitHeader,
    operations: CommitOperation[],
    contents?: { store: () => Promise<void>; get: (sha256: string) => Promise<Buffer | null> },
  ): Promise<CommitRecord> {
    const repo = await this.deps.repos.find(caller, address, "write");
    if (isGitOid(branch) && (await this.deps.store.getRevision(repo.id, branch)) === null) {
      throw new HubError(400, `commits go to a branch, not to the commit id ${branch}`);
    }
    if (header.summary.trim() === "") throw new HubError(400, "the commit summary is empty");
    return this.writer.commit({ repo, branch, ...header, author: authorOf(caller), operations, storeContents: contents?.store, contentOf: contents?.get });
  }

  /** Squashes `branch` of a repository the caller may write to one commit (see HistoryWriter.squash). */
  async squash(caller: Caller, address: RepoAddress, branch: string, message: string | undefined): Promise<CommitRecord> {
    const repo = await this.deps.repos.find(caller, address, "write");
    const text = message?.trim() || `Super-squash branch '${branch}'`;
    return this.writer.squash(repo, branch, text, authorOf(caller));
  }

  /** Parses the NDJSON commit (commit-payload.ts), keeping inline contents in `contents`. */
  private async readPayload(body: AsyncIterable<Buffer>, contents: InlineContents): Promise<{ header: CommitHeader; operations: CommitOperation[] }> {
    const payload = new CommitPayloadParser(this.deps.inlineMaxBytes);
    for await (const line of readLines(body, maxCommitLineBytes(this.deps.inlineMaxBytes))) {
      const inline = payload.line(line);
      if (inline !== null) await contents.add(inline.sha256, inline.content);
    }
    return payload.finish();
  }

  // --- reading ------------------------------------------------------------------------------

  /**
   * Bytes `span` of a mirrored repository's file as the mirror serves them — streamed while it is
   * fetched (cut short, never completed, if that fails), or a git file it holds; null for a file
   * that reads as any (castor's own repositories', and a mirrored Xet file castor holds).
   */
  async mirrored(repo: Repo, commit: CommitRecord, path: string, file: TreeFileEntry, span: HalfOpenByteRange): Promise<Readable | null> {
    if (!repo.mirror || this.deps.mirror === undefined) return null;
    const read = await this.deps.mirror.read(repo, commit, path, file, span.start, span.end - 1);
    return read === "held" ? null : read;
  }

  /** `length` bytes from `offset` of an inline file's content. */
  readInline(file: TreeFileEntry, offset: number, length: number): Promise<Buffer | Readable> {
    if (file.xetHash !== null) throw new Error(`${file.name} is stored through Xet, not inline`);
    return this.deps.blobs.read(blobKeyFromHex("inline", file.sha256), { offset, length });
  }

  /** The bytes `span` of a Xet-stored file, its first chunk read and verified. */
  async openXet(file: TreeFileEntry, span: HalfOpenByteRange): Promise<FileBody> {
    if (file.xetHash === null) throw new Error(`${file.name} is stored inline, not through Xet`);
    return this.openXetFile(file.xetHash, file.size, span);
  }

  private async openXetFile(xetHash: string, size: number, span: HalfOpenByteRange): Promise<FileBody> {
    const stored = await this.deps.xetFiles.open(hashFromHex(xetHash));
    // A commit names only registered files, and files are never deleted: this is damage, not a client error.
    if (stored === null) throw new Error(`Xet file ${xetHash} of a committed path is not registered`);
    if (stored.size !== size) throw new Error(`Xet file ${xetHash} has ${stored.size} bytes; the commit recorded ${size}`);
    return stored.body({ start: span.start, end: span.end - 1 });
  }

  /**
   * The file's git blob: an inline file's bytes, a Xet-stored file's LFS pointer. Given where the
   * file is (`at`), a mirrored repository's git file castor does not hold yet streams from the mirror.
   */
  gitBlob(file: TreeFileEntry, at?: { repo: Repo; commit: CommitRecord; path: string }): GitBlob {
    if (file.xetHash !== null) {
      const pointer = Buffer.from(lfsPointer(file.sha256, file.size));
      return { oid: file.oid, size: pointer.length, read: async (offset, length) => pointer.subarray(offset, offset + length) };
    }
    return {
      oid: file.oid,
      size: file.size,
      read: async (offset, length) =>
        (at && (await this.mirrored(at.repo, at.commit, at.path, file, halfOpenByteRange(offset, offset + length)))) ?? this.readInline(file, offset, length),
    };
  }
}
