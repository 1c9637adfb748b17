/**
 * The Git LFS batch call (`POST /{prefix}{ns}/{name}.git/info/lfs/objects/batch`), for its two
 * kinds of clients:
 *
 * - `@huggingface/hub` uploading large files offers the `xet` transfer: castor answers
 *   `transfer: "xet"` and, per object, an `upload` action whose `href` is the repository's Xet
 *   write-token route; the client then uploads xorbs and a shard and commits the file as an
 *   `lfsFile` by its SHA-256.
 * - git-lfs (`git lfs pull`, `git push` of LFS files) speaks the `basic` transfer: a download
 *   is a GET of the object, which castor rebuilds from its Xet chunks (Range honoured, so
 *   interrupted downloads resume); an upload is a PUT of the object's bytes, which castor
 *   chunks into its CAS itself (lfs-upload.ts), deduplicated like any upload.
 *
 * An object is content this repository holds: a shard uploaded with one of its write tokens
 * registered that SHA-256 (the repository's SHA-256 index, which also lets a commit name it).
 * An upload of content already held whole with that size gets no action; a download of content
 * not held is that object's 404, another size its 422.
 *
 * Refused: an upload offering neither `xet` nor `basic`, more than MAX_BATCH_OBJECTS objects
 * (413), malformed objects (422); uploads need a write token, downloads read access.
 */
import { hashToHex } from "../format/hash.js";
import type { MetadataStore, Repo } from "../metadata/store.js";
import type { Caller } from "./access.js";
import { HubError } from "./errors.js";
import type { RepoAddress, RepositoryService } from "./repositories.js";
import { isStoredWhole } from "./stored-files.js";

/** Objects per batch request at most (the library sends at most 100 at a time, git-lfs 100). */
export const MAX_BATCH_OBJECTS = 1000;

export interface LfsBatchObject {
  oid: string;
  size: number;
}

export type LfsOperation = "upload" | "download";
export type LfsTransfer = "xet" | "basic";

export interface LfsBatchRequest {
  operation: LfsOperation;
  /** The transfer castor answers with: `xet` when offered for an upload, otherwise `basic`. */
  transfer: LfsTransfer;
  /** The branch (`ref.name`, `refs/heads/` stripped); `main` when absent. */
  branch: string;
  objects: LfsBatchObject[];
}

export type LfsBatchObjectAnswer =
  /** Upload: send it (xet: through the write-token route; basic: PUT). Download: GET it. */
  | (LfsBatchObject & { action: true })
  /** Upload of content already held: nothing to do. */
  | (LfsBatchObject & { action: false })
  | (LfsBatchObject & { error: { code: 404 | 422; message: string } });

export interface LfsBatchAnswer {
  operation: LfsOperation;
  transfer: LfsTransfer;
  /** The branch, as resolved (the xet write-token route is asked for it). */
  branch: string;
  objects: LfsBatchObjectAnswer[];
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/** Reads and checks a batch request body (already parsed JSON). HubError 400/413/422 for what castor does not take. */
export function parseLfsBatchRequest(body: unknown): LfsBatchRequest {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new HubError(400, "the LFS batch request must be a JSON object with operation, transfers and objects");
  }
  const { operation, transfers, objects, ref, hash_algo: hashAlgo } = body as Record<string, unknown>;
  if (operation !== "upload" && operation !== "download") throw new HubError(400, 'the LFS batch "operation" must be "upload" or "download"');
  // No `transfers`: the basic transfer (the batch API's default).
  const offered = transfers === undefined ? ["basic"] : transfers;
  if (!Array.isArray(offered)) throw new HubError(400, 'the LFS batch "transfers" must be a list of transfer names');
  const transfer: LfsTransfer | null = operation === "upload" && offered.includes("xet") ? "xet" : offered.includes("basic") ? "basic" : null;
  if (transfer === null) {
    throw new HubError(400, `castor serves the LFS transfers "basic" and (for uploads) "xet"; this request offers ${JSON.stringify(offered).slice(0, 100)}`);
  }
  if (hashAlgo !== undefined && hashAlgo !== "sha256" && hashAlgo !== "sha_256") {
    throw new HubError(400, 'the LFS batch "hash_algo" must be sha256');
  }
  if (!Array.isArray(objects)) throw new HubError(400, 'the LFS batch request needs "objects": a list of {oid, size}');
  if (objects.length > MAX_BATCH_OBJECTS) {
    throw new HubError(413, `an LFS batch request takes at most ${MAX_BATCH_OBJECTS} objects; this one has ${objects.length}: split it`);
  }
  return { operation, transfer, branch: branchOf(ref), objects: objects.map(objectOf) };
}

function branchOf(ref: unknown): string {
  if (ref === undefined || ref === null) return "main";
  const name = (ref as { name?: unknown }).name;
  if (typeof ref !== "object" || typeof name !== "string" || name === "") throw new HubError(400, 'the LFS batch "ref" must be {"name": "<branch>"}');
  return name.startsWith("refs/heads/") ? name.slice("refs/heads/".length) : name;
}

function objectOf(object: unknown, index: number): LfsBatchObject {
  const { oid, size } = (typeof object === "object" && object !== null ? object : {}) as Record<string, unknown>;
  if (typeof oid !== "string" || !SHA256_HEX.test(oid)) {
    throw new HubError(422, `LFS batch object #${index} needs "oid": the file's SHA-256 as 64 lowercase hex digits`);
  }
  if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0) {
    throw new HubError(422, `LFS batch object #${index} (oid ${oid}) needs "size": a whole number of bytes`);
  }
  return { oid, size };
}

/** What the batch call needs of the metadata store: this repository's SHA-256 index, file sizes, and whether files are whole. */
export type StoredFileLookup = Pick<MetadataStore, "findFileBySha256" | "getFile" | "xorbFootprints">;

/** An LFS object of a repository: the Xet file holding its content. */
export interface LfsObject {
  size: number;
  xetHash: string;
}

/** Takes a file's plain bytes into the CAS (src/cas/file-ingest.ts). */
export interface FileIngester {
  ingest(body: AsyncIterable<Uint8Array>, expected: { sha256: string; size: number; repoId: number }): Promise<unknown>;
}

/** The bytes of a basic upload are not the object its id names: 422, nothing registered. */
export function isFileMismatch(error: unknown): error is Error {
  return error instanceof Error && error.name === "FileMismatchError";
}

export class LfsBatch {
  constructor(
    private readonly repos: Pick<RepositoryService, "find" | "resolve">,
    private readonly store: StoredFileLookup,
    private readonly files?: FileIngester,
  ) {}

  /**
   * Answers a batch: an upload for a repository the caller may write (401/403/404 otherwise, as
   * every write route, checked before the body is looked at) on an existing branch (404
   * RevisionNotFound); a download from one it may read. `body` is the request's JSON.
   */
  async batch(caller: Caller, address: RepoAddress, body: unknown): Promise<LfsBatchAnswer> {
    const isUpload = typeof body === "object" && body !== null && (body as { operation?: unknown }).operation === "upload";
    const repo = await this.repos.find(caller, address, isUpload ? "write" : "read");
    const request = parseLfsBatchRequest(body);
    if (request.operation === "upload") await this.repos.resolve(repo, request.branch);
    const objects: LfsBatchObjectAnswer[] = [];
    for (const object of request.objects) {
      const held = await this.held(repo, object.oid);
      if (held !== null && held.size !== object.size) {
        objects.push({ ...object, error: { code: 422, message: `content with SHA-256 ${object.oid} is stored with ${held.size} bytes, not ${object.size}` } });
      } else if (request.operation === "upload") {
        objects.push({ ...object, action: held === null });
      } else if (held === null) {
        objects.push({ ...object, error: { code: 404, message: `${address.type}:${address.name} holds no LFS object ${object.oid}` } });
      } else {
        objects.push({ ...object, action: true });
      }
    }
    return { operation: request.operation, transfer: request.transfer, branch: request.branch, objects };
  }

  /**
   * The object `oid` of `repo` for a basic download: a repository the caller may read, or the one
   * a signed action URL names (auth/lfs-object-url.ts; the transport verified it and found the
   * repository with `RepositoryService.linked`). 404 when it holds none.
   */
  async object(repo: Repo, oid: string): Promise<LfsObject> {
    if (!SHA256_HEX.test(oid)) throw new HubError(404, `${JSON.stringify(oid.slice(0, 80))} is not an LFS object id (a SHA-256 as 64 lowercase hex digits)`);
    const held = await this.held(repo, oid);
    if (held === null) throw new HubError(404, `${repo.type}:${repo.name} holds no LFS object ${oid}`);
    return held;
  }

  /**
   * A basic upload: the object's `size` bytes (`body`) for `repo` (one the caller may write, or
   * that a signed action URL names), taken into the CAS and registered in the repository's
   * SHA-256 index, so that a push naming its pointer finds it. An object the repository holds
   * already is not stored again (the body is read to its end all the same). HubError 422 when
   * the bytes are not the object.
   */
  async upload(repo: Repo, oid: string, size: number, body: AsyncIterable<Uint8Array>): Promise<void> {
    if (!SHA256_HEX.test(oid)) throw new HubError(422, `${JSON.stringify(oid.slice(0, 80))} is not an LFS object id (a SHA-256 as 64 lowercase hex digits)`);
    if (this.files === undefined) throw new HubError(501, "this server takes LFS objects through Xet only");
    const held = await this.held(repo, oid);
    if (held !== null && held.size === size) {
      for await (const _ of body);
      return;
    }
    try {
      await this.files.ingest(body, { sha256: oid, size, repoId: repo.id });
    } catch (error) {
      if (isFileMismatch(error)) throw new HubError(422, `LFS object ${oid}: ${error.message}`);
      throw error;
    }
  }

  /** The Xet file holding content `oid` in the repository, if it holds all of it. */
  private async held(repo: Repo, oid: string): Promise<{ size: number; xetHash: string } | null> {
    const fileHash = await this.store.findFileBySha256(repo.id, Buffer.from(oid, "hex"));
    const file = fileHash === null ? null : await this.store.getFile(fileHash);
    if (fileHash === null || file === null || !(await isStoredWhole(this.store, file))) return null;
    return { size: file.size, xetHash: hashToHex(fileHash) };
  }
}
