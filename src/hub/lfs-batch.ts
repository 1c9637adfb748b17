/**
 * The Git LFS batch call (`POST /{prefix}{ns}/{name}.git/info/lfs/objects/batch`) as
 * `@huggingface/hub` makes it before uploading large files: castor stores large files through
 * Xet only, so it answers an upload offering the `xet` transfer with `transfer: "xet"` and, per
 * object, an `upload` action whose `href` is the repository's Xet write-token route; the client
 * then fetches a CAS write token there, uploads xorbs and a shard, and commits the file as an
 * `lfsFile` by its SHA-256. Objects whose content this repository already holds (a shard
 * uploaded with its write token registered that SHA-256, with that size) get no action: the
 * client skips their upload and the commit finds them.
 *
 * Refused: a request not offering `xet` (plain `basic`/`multipart` LFS uploads castor does not
 * offer), `operation: "download"` (downloads go through `resolve` and Xet), more than
 * MAX_BATCH_OBJECTS objects (413), malformed objects (422); a SHA-256 already stored with another
 * size is that object's own 422 error.
 */
import type { MetadataStore } from "../metadata/store.js";
import { isStoredWhole } from "./stored-files.js";
import type { Caller } from "./access.js";
import { HubError } from "./errors.js";
import type { RepoAddress, RepositoryService } from "./repositories.js";

/** Objects per batch request at most (the library sends at most 100 at a time). */
export const MAX_BATCH_OBJECTS = 1000;

export interface LfsBatchObject {
  oid: string;
  size: number;
}

export interface LfsBatchRequest {
  /** The branch the upload is for (`ref.name`, `refs/heads/` stripped); `main` when absent. */
  branch: string;
  objects: LfsBatchObject[];
}

export type LfsBatchObjectAnswer =
  | (LfsBatchObject & { upload: true })
  | (LfsBatchObject & { upload: false })
  | (LfsBatchObject & { error: { code: 422; message: string } });

export interface LfsBatchAnswer {
  /** The branch, as resolved (the write-token route is asked for it). */
  branch: string;
  objects: LfsBatchObjectAnswer[];
}

const SHA256_HEX = /^[0-9a-f]{64}$/;

/** The advice every refusal of a plain LFS transfer gives. */
export const XET_ONLY_ADVICE =
  "castor stores large files through Xet only: install hf_xet (pip install hf_xet) and unset HF_HUB_DISABLE_XET, or use @huggingface/hub with Xet (useXet not false)";

/** Reads and checks a batch request body (already parsed JSON). HubError 400/413/422 for what castor does not take. */
export function parseLfsBatchRequest(body: unknown): LfsBatchRequest {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new HubError(400, "the LFS batch request must be a JSON object with operation, transfers and objects");
  }
  const { operation, transfers, objects, ref, hash_algo: hashAlgo } = body as Record<string, unknown>;
  if (operation === "download") {
    throw new HubError(400, "castor does not serve LFS downloads: download files through resolve (and Xet, which @huggingface/hub and hf_xet use)");
  }
  if (operation !== "upload") throw new HubError(400, 'the LFS batch "operation" must be "upload"');
  if (!Array.isArray(transfers) || !transfers.includes("xet")) {
    throw new HubError(400, `the LFS batch request does not offer the "xet" transfer: ${XET_ONLY_ADVICE}`);
  }
  if (hashAlgo !== undefined && hashAlgo !== "sha256" && hashAlgo !== "sha_256") {
    throw new HubError(400, 'the LFS batch "hash_algo" must be sha256');
  }
  if (!Array.isArray(objects)) throw new HubError(400, 'the LFS batch request needs "objects": a list of {oid, size}');
  if (objects.length > MAX_BATCH_OBJECTS) {
    throw new HubError(413, `an LFS batch request takes at most ${MAX_BATCH_OBJECTS} objects; this one has ${objects.length}: split it`);
  }
  return { branch: branchOf(ref), objects: objects.map(objectOf) };
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

export class LfsBatch {
  constructor(
    private readonly repos: Pick<RepositoryService, "find" | "resolve">,
    private readonly store: StoredFileLookup,
  ) {}

  /**
   * Answers an upload batch for a repository the caller may write (401/403/404 otherwise, as
   * every write route, checked before the body is looked at) on an existing revision (404
   * RevisionNotFound). `body` is the request's JSON (parseLfsBatchRequest).
   */
  async upload(caller: Caller, address: RepoAddress, body: unknown): Promise<LfsBatchAnswer> {
    const repo = await this.repos.find(caller, address, "write");
    const request = parseLfsBatchRequest(body);
    await this.repos.resolve(repo, request.branch);
    const objects: LfsBatchObjectAnswer[] = [];
    for (const object of request.objects) {
      const fileHash = await this.store.findFileBySha256(repo.id, Buffer.from(object.oid, "hex"));
      const stored = fileHash === null ? null : await this.store.getFile(fileHash);
      if (stored === null || !(await isStoredWhole(this.store, stored))) objects.push({ ...object, upload: true });
      else if (stored.size === object.size) objects.push({ ...object, upload: false });
      else {
        objects.push({
          ...object,
          error: { code: 422, message: `content with SHA-256 ${object.oid} is stored with ${stored.size} bytes, not ${object.size}` },
        });
      }
    }
    return { branch: request.branch, objects };
  }
}
