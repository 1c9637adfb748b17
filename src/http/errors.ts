/**
 * Every error castor answers is JSON `{"error": "<one sentence a user can act on>"}`, whether
 * a route threw it or fastify itself refused the request (unknown route, bad JSON, body too
 * large, unsupported content type, malformed URL). A 5xx never carries a stack or an internal
 * message: the log has those, under the request id the response also carries.
 *
 * The status of every error is decided here, in one place: an `HttpError` carries the one its
 * route chose (a malformed path, a missing object); the errors of the services, stores and
 * transfer URLs are mapped by their codes (`domainErrorAnswer`), so routes just throw or
 * forward them; fastify's own errors and a full storage (507) are recognised in `describeError`.
 *
 * A store that cannot be reached right now — the metadata database or the object store
 * restarting, down, cut off — is answered 503 with Retry-After: nothing is wrong with the
 * request, no bug in castor, and the clients (hf_xet, huggingface_hub, castor's) retry a 503.
 */
import type { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { TransferUrlError } from "../auth/transfer-url.js";
import { ReconstructionError, type ReconstructionErrorCode } from "../cas/reconstruction.js";
import { ShardRejectedError, type ShardRejectionCode } from "../cas/shard-registration.js";
import { XorbRejectedError } from "../cas/xorb-ingest.js";
import { BeingCollectedError, MetadataBusyError, MetadataUnavailableError } from "../metadata/errors.js";
import { HubError } from "../hub/errors.js";
import { BlobStoreError, isBlobStoreError, type BlobStoreErrorCode } from "../storage/blob-store.js";
import { storageFullMessage, storageFullOf, type StorageFull } from "../storage/full.js";

/** An error a route means to send as is: status, message and optional extra headers. */
export class HttpError extends Error {
  override readonly name = "HttpError";
  constructor(
    readonly statusCode: number,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }
}

export interface ErrorBody {
  error: string;
}

/** Response schema of every error, for routes that declare their responses. */
export const ERROR_BODY_SCHEMA = {
  type: "object",
  required: ["error"],
  additionalProperties: false,
  properties: { error: { type: "string" } },
} as const;

export const REQUEST_ID_HEADER = "x-request-id";

/** The request path without its query: queries may carry signatures and must stay out of logs and error bodies. */
export function pathOf(url: string): string {
  const q = url.indexOf("?");
  return q === -1 ? url : url.slice(0, q);
}

/** Echoes client-supplied text into a message without echoing an arbitrarily long string. */
function clip(text: string, max = 200): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/** Installs the error and not-found handlers on the root instance (children inherit them). */
export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError | HttpError | Error, request, reply) => {
    const { statusCode, message, headers } = describeError(error, request);
    const full = statusCode === INSUFFICIENT_STORAGE ? storageFullOf(error) : null;
    const unavailable = unavailableStoreOf(error);
    if (full !== null) {
      logStorageFull(request.log, error, full);
    } else if (unavailable !== null) {
      logStoreUnavailable(request.log, error, unavailable);
    } else if (statusCode >= 500 && !(error instanceof HttpError)) {
      // A 5xx a route chose to send (503 from /readyz, 501) is an answer, not an internal error.
      request.log.error({ err: error }, "request failed with an internal error");
    }
    if (headers) reply.headers(headers);
    // Hugging Face clients show this header's text to the user (and break on non-ASCII in it).
    reply.header("x-error-message", asciiHeaderText(message));
    return reply
      .code(statusCode)
      .type("application/json; charset=utf-8")
      .send({ error: message } satisfies ErrorBody);
  });

  app.setNotFoundHandler((request, reply) => {
    return reply.code(404).send({
      error: `No endpoint answers ${request.method} ${clip(pathOf(request.url))}: check the method and the path (castor serves /v1/…, /v2/… and /api/{type}s/{namespace}/{name}/cas-{read|write}-token/{revision})`,
    } satisfies ErrorBody);
  });
}

/**
 * Answers errors fastify raises before a request reaches routing (malformed percent-encoding,
 * an over-long path parameter). Such requests skip the `onRequest` hooks, so the request id
 * header is set here too. Passed as fastify's `frameworkErrors` option.
 */
export function answerFrameworkError(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const { statusCode, message } = describeError(error, request);
  void reply
    .header(REQUEST_ID_HEADER, request.id)
    .code(statusCode)
    .type("application/json; charset=utf-8")
    .send({ error: message } satisfies ErrorBody);
}

/** HTTP 507 Insufficient Storage (RFC 4918): the request was fine, the server has no room to store it. */
export const INSUFFICIENT_STORAGE = 507;

/**
 * The answer to a storage-full failure, for routes that answer errors themselves (the
 * `/v2/shards` error frame): its message, or null when `error` is not a storage-full failure.
 * Logs it, as the error handler logs the 507s it sends.
 */
export function storageFullAnswer(log: FastifyBaseLogger, error: unknown): string | null {
  const full = storageFullOf(error);
  if (full === null) return null;
  logStorageFull(log, error, full);
  return storageFullMessage(full.storage);
}

/**
 * Error level, since an operator must act, but not the "internal error" of a bug. Written once
 * per failed request, by whoever answers it.
 */
function logStorageFull(log: FastifyBaseLogger, error: unknown, full: StorageFull): void {
  log.error(
    { err: error, storage: full.storage, code: full.code },
    `storage full (${full.storage}, ${full.code}): request refused with ${INSUFFICIENT_STORAGE}`,
  );
}

/** Which store a request found unreachable. */
export type UnavailableStore = "metadata" | "objects";

/** Seconds a client is asked to wait before sending a request again that met a store restarting. */
export const STORE_UNAVAILABLE_RETRY_AFTER_SECONDS = 2;

const STORE_NAMES: Readonly<Record<UnavailableStore, string>> = {
  metadata: "metadata database",
  objects: "object store",
};

/** The store `error` says cannot be reached right now, or null when it is no such failure. */
export function unavailableStoreOf(error: unknown): UnavailableStore | null {
  if (error instanceof MetadataUnavailableError) return "metadata";
  if (isBlobStoreError(error, "unavailable")) return "objects";
  return null;
}

/** The sentence a client gets (the store's address and the driver's words stay in the log). */
export function storeUnavailableMessage(store: UnavailableStore): string {
  return `castor's ${STORE_NAMES[store]} is unavailable (restarting or unreachable): send the request again in a few seconds, and tell the server's operator if this lasts`;
}

/**
 * The answer to a store that cannot be reached, for routes that answer errors themselves (the
 * `/v2/shards` error frame): its message, or null when `error` is no such failure. Logs it, as
 * the error handler logs the 503s it sends.
 */
export function storeUnavailableAnswer(log: FastifyBaseLogger, error: unknown): string | null {
  const store = unavailableStoreOf(error);
  if (store === null) return null;
  logStoreUnavailable(log, error, store);
  return storeUnavailableMessage(store);
}

/** Error level, since an operator must act if it lasts, but not the "internal error" of a bug. */
function logStoreUnavailable(log: FastifyBaseLogger, error: unknown, store: UnavailableStore): void {
  log.error({ err: error, store }, `${STORE_NAMES[store]} unavailable: request refused with 503`);
}

/** How an error is answered. */
export interface ErrorAnswer {
  statusCode: number;
  message: string;
  headers?: Readonly<Record<string, string>>;
}

/** Not the client's doing (a bug, damaged records): the generic 500 sentence, and a log line. */
const INTERNAL = 500;

/** HTTP 416 (RFC 9110 §15.5.17): the answer names the current length, so the client can correct its range. */
const RANGE_NOT_SATISFIABLE = 416;

const RECONSTRUCTION_STATUS: Readonly<Record<ReconstructionErrorCode, number>> = {
  malformed_range: 400,
  unsatisfiable_range: RANGE_NOT_SATISFIABLE,
  file_not_found: 404,
  inconsistent_records: INTERNAL,
};

const SHARD_REJECTION_STATUS: Readonly<Record<ShardRejectionCode, number>> = {
  shard_too_large: 413,
  too_many_chunk_references: 413,
  chunk_references_exceed_file_size: 400,
  invalid_shard: 400,
  missing_verification: 400,
  missing_xorb: 400,
  term_out_of_range: 400,
  term_length_mismatch: 400,
  verification_mismatch: 400,
  file_hash_mismatch: 400,
  xorb_block_mismatch: 400,
};

const BLOB_STORE_STATUS: Readonly<Record<BlobStoreErrorCode, number>> = {
  not_found: 404,
  range_not_satisfiable: RANGE_NOT_SATISFIABLE,
  // Keys and ranges are built by castor itself, and staged puts used in order: bugs.
  invalid_key: INTERNAL,
  bad_range: INTERNAL,
  invalid_state: INTERNAL,
  // Answered by `unavailableStoreOf` before this table, with a sentence of its own.
  unavailable: 503,
};

/**
 * The one map from domain errors to HTTP answers: an uploaded xorb or shard refused (400, or
 * 413 for a shard too large), a reconstruction's range or file (400, 404, 416), a stored object
 * missing or shorter than a range (404, 416), a transfer URL refused (403: clients fetch fresh
 * URLs), a hub refusal (its own status, with the Hub's `X-Error-Code`), a store that cannot be
 * reached (503). Null when `error` is none of these, or stands for a server-side failure (→ 500).
 */
export function domainErrorAnswer(error: unknown): ErrorAnswer | null {
  if (error instanceof XorbRejectedError) return { statusCode: 400, message: `Xorb rejected: ${error.message}` };
  if (error instanceof ShardRejectedError) return { statusCode: SHARD_REJECTION_STATUS[error.code], message: `Shard rejected: ${error.message}` };
  const store = unavailableStoreOf(error);
  if (store !== null) {
    return { statusCode: 503, message: storeUnavailableMessage(store), headers: { "retry-after": String(STORE_UNAVAILABLE_RETRY_AFTER_SECONDS) } };
  }
  if (error instanceof ReconstructionError) return answerOf(RECONSTRUCTION_STATUS[error.code], error.message, error.fileSize);
  if (error instanceof BlobStoreError) return answerOf(BLOB_STORE_STATUS[error.code], error.message, error.objectSize);
  if (error instanceof TransferUrlError) return { statusCode: 403, message: error.message };
  if (error instanceof HubError) return { statusCode: error.status, message: error.message, headers: hubErrorHeaders(error) };
  // A garbage collection is deleting the object just written: clients retry 503s.
  if (error instanceof BeingCollectedError) return { statusCode: 503, message: error.message, headers: { "retry-after": "5" } };
  // Another process held the embedded database's write lock for a minute: nothing was written.
  if (error instanceof MetadataBusyError) return { statusCode: 503, message: error.message, headers: { "retry-after": "5" } };
  return null;
}

/** What Hugging Face clients read besides the status: which thing is missing, and at which commit. */
function hubErrorHeaders(error: HubError): Record<string, string> {
  const headers: Record<string, string> = {};
  if (error.code !== undefined) headers["x-error-code"] = error.code;
  if (error.commitOid !== undefined) headers["x-repo-commit"] = error.commitOid;
  if (error.status === 401) headers["www-authenticate"] = 'Bearer realm="castor"';
  if (error.retryAfterSeconds !== undefined) headers["retry-after"] = String(error.retryAfterSeconds);
  return headers;
}

/** Printable ASCII only, at most 500 characters: what every client accepts in a header value. */
export function asciiHeaderText(text: string): string {
  const ascii = text
    .replace(/…/g, "...")
    .replace(/[–—]/g, "-")
    .replace(/[^\x20-\x7e]/g, "?");
  return ascii.length > 500 ? `${ascii.slice(0, 497)}...` : ascii;
}

function answerOf(statusCode: number, message: string, size: number | undefined): ErrorAnswer | null {
  if (statusCode === INTERNAL) return null;
  if (statusCode === RANGE_NOT_SATISFIABLE && size !== undefined) return { statusCode, message, headers: { "content-range": `bytes */${size}` } };
  return { statusCode, message };
}

function describeError(error: FastifyError | HttpError | Error, request: FastifyRequest): ErrorAnswer {
  if (error instanceof HttpError) return { statusCode: error.statusCode, message: error.message, headers: error.headers };
  const domain = domainErrorAnswer(error);
  if (domain !== null) return domain;

  const fastifyError = error as FastifyError;
  const path = clip(pathOf(request.url));
  switch (fastifyError.code) {
    case "FST_ERR_VALIDATION":
      return { statusCode: 400, message: `Invalid request: ${fastifyError.message}` };
    case "FST_ERR_CTP_BODY_TOO_LARGE": {
      const limit = request.routeOptions.bodyLimit;
      return { statusCode: 413, message: `The request body is larger than the ${limit}-byte limit of ${request.method} ${path}: send a smaller body` };
    }
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
    case "FST_ERR_CTP_EMPTY_TYPE":
      return {
        statusCode: 415,
        message: `${request.method} ${path} does not accept a body of Content-Type ${JSON.stringify(clip(request.headers["content-type"] ?? "", 100))}: send the content type the endpoint documents`,
      };
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return { statusCode: 400, message: "The body is empty but Content-Type says application/json: send a JSON document or drop the header" };
    case "FST_ERR_CTP_INVALID_JSON_BODY":
      return { statusCode: 400, message: `The body is not valid JSON (${fastifyError.message}): fix the JSON document` };
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return { statusCode: 400, message: "The Content-Length header does not match the body sent: resend the request with a correct length" };
    case "FST_ERR_BAD_URL":
      return { statusCode: 400, message: "The URL path is not validly percent-encoded: encode reserved characters (e.g. / in a revision as %2F)" };
    case "FST_ERR_MAX_PARAM_LENGTH":
      return { statusCode: 414, message: "A segment of the URL path is too long: check the names in the path" };
  }
  if (error instanceof SyntaxError && fastifyError.statusCode === 400) {
    // fastify's JSON parser rethrows the parser's SyntaxError with a 400 status.
    return { statusCode: 400, message: `The body is not valid JSON (${error.message}): fix the JSON document` };
  }
  const status = fastifyError.statusCode;
  if (typeof status === "number" && status >= 400 && status < 500) {
    return { statusCode: status, message: fastifyError.message };
  }
  const full = storageFullOf(error);
  // The same sentence as the /v2/shards error frame gives.
  if (full !== null) return { statusCode: INSUFFICIENT_STORAGE, message: storageFullMessage(full.storage) };
  return {
    statusCode: 500,
    message: `Internal server error (request id ${request.id}): this is a bug in castor; the server log has the details`,
  };
}
