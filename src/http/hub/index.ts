/**
 * The repository hub's HTTP surface, one encapsulated fastify plugin: the routes Hugging Face
 * clients (`hf`, `huggingface_hub`, `@huggingface/hub`) call through `HF_ENDPOINT`. The token
 * operation (`…/xet-read-token/…`) lives in ../hub-token.ts next to the CAS it hands out
 * access to.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { DownloadLinks } from "../../auth/download-link.js";
import type { GcRecords } from "../../metadata/gc.js";
import type { BlobStore } from "../../storage/blob-store.js";
import type { HubRepositories } from "../../hub/repositories.js";
import type { StoredFileLookup } from "../../hub/lfs-batch.js";
import type { StorageStatsService } from "../../hub/stats.js";
import { parseTextBodies } from "../raw-body.js";
import { fileRoutes } from "./file-routes.js";
import { lfsRoutes } from "./lfs-routes.js";
import { moveRoutes } from "./move-routes.js";
import { rawRoutes } from "./raw-routes.js";
import { repoRoutes } from "./repo-routes.js";
import { resolveRoutes, type XetFileSource } from "./resolve-routes.js";
import { statsRoutes } from "./stats-routes.js";
import { unsupportedRoutes } from "./unsupported-routes.js";

export type { XetFileSource } from "./resolve-routes.js";

export interface HubHttpDeps {
  repos: HubRepositories;
  blobs: BlobStore;
  xetFiles: XetFileSource;
  /** The repositories' SHA-256 index, for the LFS batch call. */
  store: StoredFileLookup & Pick<GcRecords, "leaseObjects">;
  publicUrl: (request: FastifyRequest) => string;
  /** The web interface's signed download links (auth/download-link.ts), which `resolve` accepts. */
  downloadLinks: DownloadLinks;
  /** `config.hubInlineMaxBytes`. */
  inlineMaxBytes: number;
  /** Where commits' inline contents wait on disk until the commit has validated (the data dir's spool). */
  spoolDir: string;
  /** Storage statistics, for `GET /api/stats`. */
  stats: StorageStatsService;
}

export async function hubRoutes(app: FastifyInstance, deps: HubHttpDeps): Promise<void> {
  await repoRoutes(app, deps);
  await fileRoutes(app, deps);
  await resolveRoutes(app, deps);
  await lfsRoutes(app, deps);
  await rawRoutes(app, deps);
  await moveRoutes(app, deps);
  await statsRoutes(app, deps);
  await unsupportedRoutes(app);
}

/**
 * JSON and text bodies of every hub route in `scope` (the hub's, the token operation's and the
 * admin routes' scope) read by castor rather than by fastify, so the body timeouts answer 408 on
 * them as on uploads (see `parseTextBodies`); JSON is still parsed by fastify's parser (which
 * refuses `__proto__` and `constructor` keys). Call before the routes are registered.
 */
export function acceptHubBodies(scope: FastifyInstance): void {
  const parseJson = scope.getDefaultJsonParser("error", "error");
  scope.removeContentTypeParser(["application/json", "text/plain"]);
  parseTextBodies(
    scope,
    "application/json",
    (text, request: FastifyRequest) => new Promise((resolve, reject) => parseJson(request, text, (error, value) => (error ? reject(error) : resolve(value)))),
  );
  parseTextBodies(scope, "text/plain", (text) => text);
}
