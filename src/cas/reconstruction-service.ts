/**
 * The service behind the reconstruction routes (docs/design.md §4.1; docs/protocol.md §8):
 * given the token's repository, a file and a parsed `Range`, the encoded V1 or V2 answer.
 *
 * 1. The file ↔ repository check, on every request and never cached (an indexed lookup):
 *    access can change, content cannot. A file not registered in the repository is
 *    `file_not_found`, exactly as a file that does not exist at all, and the range is judged
 *    only after it (a 416 would reveal the file's size).
 * 2. The prepared file from the shared RecordCache; its range (`unsatisfiable_range`, with the
 *    file size, at or past the end).
 * 3. An encoded answer for the same file, range and version from the AnswerCache, or a plan
 *    (reconstruction.ts) rendered (reconstruction-render.ts) with URLs from the
 *    ReusingUrlSigner (xorb-cache.ts), which reuses a signature for a twentieth of the URL
 *    lifetime; answers are reused for as long.
 *
 * Errors are ReconstructionErrors; the HTTP layer decides their statuses.
 */
import { promisify } from "node:util";
import { gzip } from "node:zlib";
import type { Hash } from "../format/hash.js";
import type { MetadataStore, RepoType } from "../metadata/store.js";
import { planReconstruction, ReconstructionError, resolveFileRange, type RangeSpec } from "./reconstruction.js";
import { renderV1, renderV2, SINGLE_RANGE_V2_LIMITS, type RangeUrlSigner, type V2Limits } from "./reconstruction-render.js";
import { AnswerCache, DEFAULT_ANSWER_CACHE_BYTES, RecordCache, ReusingUrlSigner, urlReuseMsFor, type ReconstructionAnswer } from "./xorb-cache.js";

export interface ReconstructionServiceDeps {
  /** Resolves the token's repository, answers the file ↔ repository question, and loads records. */
  store: Pick<MetadataStore, "isFileInNamedRepo" | "getFile" | "getXorbs">;
  /**
   * Signs transfer URLs: castor's own (`HmacTransferUrls` of src/auth/transfer-url.ts), or
   * presigned S3 GETs (`PresignedTransferUrls`, CASTOR_TRANSFER_MODE=presigned).
   */
  signer: RangeUrlSigner;
  /** V2 entries carry one range each: for a signer whose URLs serve one range (presigned S3 GETs). */
  singleRangeEntries?: boolean;
  /**
   * `config.transferUrlTtlSeconds`, the lifetime of the signer's URLs. It sets how long a signed
   * URL, and then an encoded answer holding it, may be handed out again (`urlReuseMsFor`).
   */
  transferUrlTtlSeconds: number;
  /** The read path's shared record cache; a private one over `store` when absent. */
  records?: RecordCache;
  /** Byte budget of encoded answers kept for reuse (default DEFAULT_ANSWER_CACHE_BYTES; 0 turns it off). */
  answerCacheBytes?: number;
  /** Clock in ms since the epoch; tests pin it. */
  now?: () => number;
  /**
   * Asked about a file the token's repository does not have (yet): true once it has it. A mirror
   * fetches a file of a mirrored repository here, when a commit of it at `rev` names the file.
   */
  fetchMissing?: (repo: ReconstructionQuery["repo"], rev: string, fileHex: string) => Promise<boolean>;
  /**
   * Asked before `fetchMissing` for a V2 answer about such a file: an answer made at once (a
   * mirror's file being fetched, whose ranges castor's transfer route serves as they arrive —
   * its URLs are that route's, whatever `signer` is); null to go on with `fetchMissing`. Never
   * cached.
   */
  answerMissing?: (repo: ReconstructionQuery["repo"], rev: string, fileHex: string, range: RangeSpec) => Promise<{ body: string; terms: number } | null>;
}

export interface ReconstructionQuery {
  /** The repository of the request's token. */
  repo: { type: RepoType; id: string };
  fileHash: Hash;
  /** `hashToHex(fileHash)`, as the request spelled it. */
  fileHex: string;
  /** The parsed `Range` header (`parseRangeHeader`). */
  range: RangeSpec;
  /** The answer's format: V1 (`fetch_info`) or V2 (`xorbs`). */
  version: 1 | 2;
  /** The token's revision (for `fetchMissing`). */
  rev?: string;
}

/**
 * Level 1: reconstruction JSON is mostly hex digits and URL signatures; measured on a 10 GiB
 * file's answer (73 KiB), levels 1, 4, 6 and 9 all give ~18 KiB, within 0.1% of each other, and
 * level 1 costs the least CPU.
 */
const GZIP_LEVEL = 1;
const gzipAsync = promisify(gzip);

export class ReconstructionService {
  private readonly store: ReconstructionServiceDeps["store"];
  private readonly records: RecordCache;
  private readonly signer: RangeUrlSigner;
  /** The signer's `refresh`, awaited before rendering, when it has one. */
  private readonly refreshSigner: (() => Promise<void>) | undefined;
  /** Limits of V2 entries; the renderer's defaults when undefined. */
  private readonly v2Limits: V2Limits | undefined;
  private readonly answers: AnswerCache;
  private readonly fetchMissing: ReconstructionServiceDeps["fetchMissing"];
  private readonly answerMissing: ReconstructionServiceDeps["answerMissing"];

  constructor(deps: ReconstructionServiceDeps) {
    this.fetchMissing = deps.fetchMissing;
    this.answerMissing = deps.answerMissing;
    const now = deps.now ?? Date.now;
    const reuseMs = urlReuseMsFor(deps.transferUrlTtlSeconds);
    this.store = deps.store;
    this.records = deps.records ?? new RecordCache(deps.store);
    this.signer = new ReusingUrlSigner(deps.signer, reuseMs, now);
    this.refreshSigner = deps.signer.refresh?.bind(deps.signer);
    this.v2Limits = deps.singleRangeEntries ? SINGLE_RANGE_V2_LIMITS : undefined;
    this.answers = new AnswerCache(deps.answerCacheBytes ?? DEFAULT_ANSWER_CACHE_BYTES, reuseMs, now);
  }

  /**
   * The encoded answer. ReconstructionError `file_not_found` when the file is not in the
   * repository, `unsatisfiable_range` when the range starts at or past its end, and
   * `inconsistent_records` when its stored records contradict each other (a damaged database).
   */
  async reconstruct(query: ReconstructionQuery): Promise<ReconstructionAnswer> {
    const { repo, fileHash, fileHex, version } = query;
    // Every request, before any cache: access can change, content cannot.
    const notFound = () =>
      new ReconstructionError(
        "file_not_found",
        `No file ${fileHex} in the repository ${repo.type}:${repo.id} this token is for: check the file id, or use a token of the repository the file was uploaded to`,
      );
    let file = await this.fileInRepo(repo, fileHash, fileHex);
    if (file === null && query.rev !== undefined && version === 2 && this.answerMissing !== undefined) {
      const live = await this.answerMissing(repo, query.rev, fileHex, query.range);
      if (live !== null) return { key: "", body: latin1Bytes(live.body), terms: live.terms, gzipped: undefined };
    }
    if (file === null && query.rev !== undefined && this.fetchMissing !== undefined && (await this.fetchMissing(repo, query.rev, fileHex))) {
      file = await this.fileInRepo(repo, fileHash, fileHex);
    }
    if (file === null) throw notFound();
    const range = resolveFileRange(query.range, file.size);
    const key = `${version}${fileHex}${range.start}-${range.end}`;
    const cached = this.answers.get(key);
    if (cached !== undefined) return cached;
    const plan = planReconstruction(file, range);
    if (this.refreshSigner !== undefined) await this.refreshSigner();
    const body = version === 2 ? renderV2(plan, this.signer, this.v2Limits) : renderV1(plan, this.signer);
    // Encoded once here (sent as a string, it would be measured for Content-Length and then
    // encoded again by the socket); the renderers produce pure ASCII, so Latin-1 is exact.
    return this.answers.put(key, latin1Bytes(body), plan.terms.length);
  }

  /**
   * The size of a file registered in the repository (`HEAD /v1/files/{file_id}`: clients ask
   * before uploading it again); null when it is not, exactly as for a file that does not exist.
   */
  async fileSize(repo: ReconstructionQuery["repo"], fileHash: Hash, fileHex: string): Promise<number | null> {
    return (await this.fileInRepo(repo, fileHash, fileHex))?.size ?? null;
  }

  /** The file's prepared record if the repository has it; checked on every call, never cached. */
  private async fileInRepo(repo: ReconstructionQuery["repo"], fileHash: Hash, fileHex: string) {
    if (!(await this.store.isFileInNamedRepo(fileHash, repo.type, repo.id))) return null;
    return this.records.file(fileHash, fileHex);
  }

  /** The answer's body gzipped, compressed once and kept with the answer. */
  async gzipped(answer: ReconstructionAnswer): Promise<Buffer> {
    // zlib runs on the thread pool, so the event loop keeps serving while a large body compresses.
    return answer.gzipped ?? this.answers.addGzipped(answer, await gzipAsync(answer.body, { level: GZIP_LEVEL }));
  }
}

/**
 * `text`'s Latin-1 bytes in memory of their own. `Buffer.from` cuts a short string's bytes (under
 * 4 KiB, most answers) out of a shared 8 KiB pool slab, and an answer kept in the AnswerCache then
 * keeps its whole slab alive, with whatever else was cut from it: under `npm run bench -- soak`
 * the cache's Buffers held about three times its byte budget.
 */
export function latin1Bytes(text: string): Buffer {
  const bytes = Buffer.allocUnsafeSlow(text.length);
  bytes.write(text, "latin1");
  return bytes;
}
