/**
 * HTTP for castor's client: `fetch` with the retry rules of the reference client (xet-core):
 * network errors, 5xx (except 501), 408 and 429 are transient and retried with exponential
 * backoff and jitter (a `Retry-After` is honoured up to a cap); every other 4xx is final and
 * becomes an `HttpStatusError` carrying the server's own `{"error": …}` message.
 *
 * Request bodies are whole `Uint8Array`s, so a retry simply sends them again. Bodies are read
 * with explicit byte limits, because every length here comes from the network.
 * URLs in messages lose their query string: transfer URLs carry signatures.
 *
 * The bytes of a transfer avoid fetch (unless the client was given its own): xorb uploads go
 * through `node:http` (`bulk`, node-transport.ts) and xorb ranges are read by `getInto`
 * straight from the socket into their buffer (raw-range.ts), with the same retry rules.
 */
import { STATUS_CODES } from "node:http";
import { CastorClientError, HttpStatusError } from "./errors.js";
import { NodeTransportError, nodeSend, readMessageInto, takeNodeBody } from "./node-transport.js";
import { RawConnectionError, RawLengthMismatch, RawProtocolError, RawRangeClient, type RawRangeResult } from "./raw-range.js";

export type FetchFunction = typeof globalThis.fetch;

export interface RetryPolicy {
  /** Attempts in total, the first included (≥ 1). */
  maxAttempts: number;
  /** Delay before the first retry; doubled for each further one. */
  baseDelayMs: number;
  /** Upper bound of one delay, `Retry-After` included. */
  maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({ maxAttempts: 5, baseDelayMs: 200, maxDelayMs: 10_000 });

export interface HttpRequest {
  /** What the request is for, starting lowercase, for messages: "uploading xorb 1a2b…". */
  what: string;
  url: string;
  method?: "GET" | "POST" | "HEAD";
  headers?: Record<string, string>;
  body?: Uint8Array;
  /**
   * Statuses handed back as a Response instead of failing — e.g. 404 for a dedup miss, 416 at
   * the end of a file. A listed retryable status is handed back at once, not retried.
   */
  passStatuses?: readonly number[];
  /** Extra advice appended to the message of a final error with this status. */
  hints?: Readonly<Partial<Record<number, string>>>;
  /** Override of the client's retry policy; `false` makes one attempt. */
  retry?: Partial<RetryPolicy> | false;
  /**
   * The request moves many bytes (a xorb upload, a xorb range): it goes through `node:http`
   * (node-transport.ts), which costs a fraction of fetch's CPU per byte — unless the client
   * was given its own `fetch`, which then carries every request.
   */
  bulk?: boolean;
  /**
   * `manual`: a redirect is handed back as the 3xx response itself (its headers may be what the
   * caller wants, as on the Hub's HEAD of an LFS file). Default: followed. Not for `bulk`.
   */
  redirect?: "follow" | "manual";
  /**
   * Milliseconds one attempt may take, body included, before it is abandoned as a network
   * failure (then retried like one); default: no limit beyond the transport's idle timeout.
   * Not for `bulk`.
   */
  timeoutMs?: number;
}

export interface HttpClientOptions {
  fetch?: FetchFunction;
  retry?: Partial<RetryPolicy>;
  /** For tests: how to wait between attempts. */
  sleep?: (ms: number) => Promise<void>;
  /** For tests: the jitter source, a number in [0, 1). */
  random?: () => number;
  userAgent?: string;
}

/** Longest server error text quoted in a message. */
const MAX_QUOTED_ERROR_CHARS = 500;
/** Error bodies are read only this far: the message is in the first bytes if anywhere. */
const MAX_ERROR_BODY_BYTES = 16 * 1024;

export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || (status >= 500 && status !== 501);
}

/** `scheme://host/path` of a URL, without its query (transfer URLs carry signatures there). */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return url.replace(/[?#].*$/s, "");
  }
}

const defaultSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What `getInto` found: the status, after filling the buffer (2xx) or discarding the body (a pass status). */
export interface GetIntoResult {
  status: number;
}

/** One keep-alive pool for the process, as node:http's agents are: clients come and go, sockets stay few. */
const sharedRawRanges = new RawRangeClient();

type BulkSend = (url: string, init: { method: string; headers: Record<string, string>; body?: Uint8Array }) => Promise<Response>;

export class HttpClient {
  readonly fetch: FetchFunction;
  private readonly bulkSend: BulkSend | null;
  private readonly rawRanges: RawRangeClient | null;
  private readonly policy: RetryPolicy;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly random: () => number;
  private readonly userAgent: string;

  constructor(options: HttpClientOptions = {}) {
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.bulkSend = options.fetch === undefined ? nodeSend : null;
    this.rawRanges = options.fetch === undefined ? sharedRawRanges : null;
    this.policy = resolvePolicy(DEFAULT_RETRY_POLICY, options.retry);
    this.sleep = options.sleep ?? defaultSleep;
    this.random = options.random ?? Math.random;
    this.userAgent = options.userAgent ?? "castor-client";
  }

  /**
   * Sends the request, retrying transient failures. Resolves with a 2xx response or one whose
   * status is in `passStatuses`; the caller must consume or cancel its body.
   */
  async request(request: HttpRequest): Promise<Response> {
    const policy = request.retry === false ? { ...this.policy, maxAttempts: 1 } : resolvePolicy(this.policy, request.retry);
    const pass = request.passStatuses ?? [];
    const target = redactUrl(request.url);
    for (let attempt = 1; ; attempt++) {
      const last = attempt >= policy.maxAttempts;
      let response: Response;
      try {
        const init = { method: request.method ?? "GET", headers: { "user-agent": this.userAgent, ...request.headers }, body: request.body };
        response =
          request.bulk && this.bulkSend !== null
            ? await this.bulkSend(request.url, init)
            : await this.fetch(request.url, {
                ...init,
                redirect: request.redirect ?? "follow",
                signal: request.timeoutMs === undefined ? undefined : AbortSignal.timeout(request.timeoutMs),
              });
      } catch (error) {
        if (last) throw networkError(request.what, target, error, attempt);
        await this.sleep(this.backoff(policy, attempt, null));
        continue;
      }
      if (response.ok || pass.includes(response.status)) return response;
      if (!isRetryableStatus(response.status) || last) {
        const serverMessage = await readErrorMessage(response);
        throw statusError(request, target, response, serverMessage, attempt);
      }
      const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
      await discardBody(response);
      await this.sleep(this.backoff(policy, attempt, retryAfter));
    }
  }

  /**
   * A GET whose 2xx body is exactly `into.length` bytes, read into `into` (each new fill level
   * reported to `onProgress`, whose throw aborts the read). A status in `passStatuses` is
   * returned with its body discarded; anything else fails as `request` does.
   *
   * A body whose connection fails mid-way is asked for again, whole, within the retry policy
   * (a range cannot be resumed: transfer URLs sign whole ranges only). That is for immutable
   * bytes, such as a xorb range: the new body overwrites the front of `into` with the bytes it
   * already holds, and `onProgress` sees the fill level start over from 0. A restarting object
   * store behind castor ends the transfers it was serving this way.
   *
   * Plain-HTTP URLs are read by `RawRangeClient` straight from the socket into `into`; its
   * connection failures are retried like any other. Every other case — a custom fetch, https,
   * a status or framing it does not read — goes through `request`.
   */
  async getInto(request: HttpRequest, into: Uint8Array, onProgress?: (filled: number) => void): Promise<GetIntoResult> {
    const policy = request.retry === false ? { ...this.policy, maxAttempts: 1 } : resolvePolicy(this.policy, request.retry);
    if (this.rawRanges !== null) {
      const url = new URL(request.url);
      const headers = { "user-agent": this.userAgent, ...request.headers };
      for (let attempt = 1, staleRetried = false; ; attempt++) {
        let result: RawRangeResult;
        try {
          result = await this.rawRanges.get(url, headers, into, onProgress);
        } catch (error) {
          if (error instanceof RawLengthMismatch) {
            throw new CastorClientError("protocol", `${request.what}: expected ${into.length} bytes, the server announced ${error.announced}`);
          }
          if (error instanceof RawProtocolError) throw new CastorClientError("protocol", `${request.what}: ${error.message}`, { cause: error });
          if (!(error instanceof RawConnectionError)) throw error;
          if (!error.beforeBody) {
            if (attempt >= policy.maxAttempts) throw midBodyError(request.what, error, attempt);
            await this.sleep(this.backoff(policy, attempt, null));
            continue;
          }
          // A keep-alive socket the server had just closed: try once more at once, on a new one.
          if (error.reused && !staleRetried) {
            staleRetried = true;
            attempt--;
            continue;
          }
          if (attempt >= policy.maxAttempts) throw networkError(request.what, redactUrl(request.url), error, attempt);
          await this.sleep(this.backoff(policy, attempt, null));
          continue;
        }
        if (result.kind === "complete") return { status: result.status };
        break;
      }
    }
    for (let attempt = 1; ; attempt++) {
      const response = await this.request({ ...request, bulk: true });
      if (!response.ok) {
        await discardBody(response);
        return { status: response.status };
      }
      try {
        await readBodyInto(response, into, request.what, onProgress);
        return { status: response.status };
      } catch (error) {
        if (!(error instanceof CastorClientError && error.kind === "network")) throw error;
        if (attempt >= policy.maxAttempts) throw midBodyError(request.what, error.cause ?? error, attempt);
        await this.sleep(this.backoff(policy, attempt, null));
      }
    }
  }

  /** Exponential backoff with "equal jitter": half fixed, half random, so retries spread out. */
  private backoff(policy: RetryPolicy, attempt: number, retryAfterMs: number | null): number {
    const exponential = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
    const jittered = exponential / 2 + (exponential / 2) * this.random();
    return Math.min(policy.maxDelayMs, Math.max(jittered, retryAfterMs ?? 0));
  }
}

function resolvePolicy(base: RetryPolicy, override: Partial<RetryPolicy> | undefined): RetryPolicy {
  const policy = { ...base, ...override };
  if (!Number.isInteger(policy.maxAttempts) || policy.maxAttempts < 1) throw new RangeError("retry.maxAttempts must be an integer ≥ 1");
  if (!(policy.baseDelayMs >= 0) || !(policy.maxDelayMs >= 0)) throw new RangeError("retry delays must be ≥ 0");
  return policy;
}

/** `Retry-After` in milliseconds: delta-seconds or an HTTP date; null when absent or unreadable. */
export function parseRetryAfter(value: string | null): number | null {
  if (value === null) return null;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? null : Math.max(0, date - Date.now());
}

function networkError(what: string, target: string, error: unknown, attempts: number): CastorClientError {
  const cause = (error as { cause?: { code?: unknown; message?: unknown } } | null)?.cause;
  // An attempt abandoned after `timeoutMs` (AbortSignal.timeout) is reported as ETIMEDOUT.
  const code = typeof cause?.code === "string" ? cause.code : isTimeout(error) ? "ETIMEDOUT" : null;
  // fetch reports every failure as "fetch failed" (the node transport as "request failed");
  // the cause says what happened.
  const detail = code ?? (typeof cause?.message === "string" ? cause.message : error instanceof Error ? error.message : String(error));
  const origin = (() => {
    try {
      return new URL(target).origin;
    } catch {
      return target;
    }
  })();
  const advice =
    code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN"
      ? ` — is castor running there? Set the server address with --endpoint or CASTOR_ENDPOINT`
      : "";
  const tries = attempts > 1 ? ` (${attempts} attempts)` : "";
  return new CastorClientError("network", `${what}: cannot reach ${origin}: ${detail}${tries}${advice}`, { cause: error });
}

/** Whether `error` (or its cause) is an attempt abandoned by a timeout. */
export function isTimeout(error: unknown): boolean {
  for (let cause: unknown = error, depth = 0; cause !== null && typeof cause === "object" && depth < 6; depth++) {
    const { name, code } = cause as { name?: unknown; code?: unknown };
    if (name === "TimeoutError" || code === "ETIMEDOUT") return true;
    cause = (cause as { cause?: unknown }).cause;
  }
  return false;
}

function midBodyError(what: string, cause: unknown, attempts: number): CastorClientError {
  const tries = attempts > 1 ? ` (${attempts} attempts)` : "";
  return new CastorClientError("network", `${what}: the connection failed mid-body: ${describeNetworkFailure(cause)}${tries}`, { cause });
}

function statusError(request: HttpRequest, target: string, response: Response, serverMessage: string | null, attempts: number): HttpStatusError {
  // The standard phrase rather than the server's: HTTP/2 and some proxies send none.
  const phrase = STATUS_CODES[response.status];
  const statusText = phrase === undefined ? "" : ` ${phrase}`;
  const said = serverMessage === null ? "" : `: ${serverMessage}`;
  const tries = attempts > 1 ? ` after ${attempts} attempts` : "";
  const hint = request.hints?.[response.status];
  const message = `${request.what}: ${target} answered ${response.status}${statusText}${tries}${said}${hint ? ` (${hint})` : ""}`;
  return new HttpStatusError(response.status, serverMessage, message);
}

/** The server's `{"error": "…"}` text, or the start of any other body; null when empty. */
export async function readErrorMessage(response: Response): Promise<string | null> {
  let text: string;
  try {
    text = new TextDecoder().decode(await readBodyUpTo(response, MAX_ERROR_BODY_BYTES));
  } catch {
    return null;
  }
  text = text.trim();
  if (text === "") return null;
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed !== null && typeof parsed === "object" && typeof (parsed as { error?: unknown }).error === "string") {
      return clip((parsed as { error: string }).error);
    }
  } catch {
    // Not JSON: quote the text itself.
  }
  return clip(text.replace(/\s+/g, " "));
}

function clip(text: string): string {
  return text.length > MAX_QUOTED_ERROR_CHARS ? `${text.slice(0, MAX_QUOTED_ERROR_CHARS)}…` : text;
}

/** Releases a response's connection without reading what is left of its body. */
export async function discardBody(response: Response): Promise<void> {
  try {
    await response.body?.cancel();
  } catch {
    // Already consumed or errored: nothing to release.
  }
}

/** Reads at most `limit` bytes of the body and drops the rest. */
async function readBodyUpTo(response: Response, limit: number): Promise<Uint8Array> {
  if (response.body === null) return new Uint8Array(0);
  const reader = response.body.getReader();
  const parts: Uint8Array[] = [];
  let length = 0;
  try {
    while (length < limit) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      length += value.length;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(parts).subarray(0, limit);
}

/**
 * The whole body, refused with a `protocol` error once it passes `maxBytes` (checked against
 * Content-Length before anything is read, and again while reading).
 */
export async function readBodyBounded(response: Response, maxBytes: number, what: string): Promise<Uint8Array> {
  const declared = contentLengthOf(response);
  if (declared !== null && declared > maxBytes) {
    await discardBody(response);
    throw new CastorClientError("protocol", `${what}: the server announced ${declared} bytes, more than the ${maxBytes} this answer may have`);
  }
  if (response.body === null) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let length = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    length += value.length;
    if (length > maxBytes) {
      await reader.cancel().catch(() => undefined);
      throw new CastorClientError("protocol", `${what}: the answer exceeds the ${maxBytes} bytes it may have`);
    }
    parts.push(value);
  }
  return parts.length === 1 ? parts[0] : Buffer.concat(parts, length);
}

/**
 * Exactly `length` bytes into one buffer allocated up front (the caller has bounded `length`);
 * a body of any other length is a `protocol` error.
 */
export async function readBodyExactly(response: Response, length: number, what: string): Promise<Uint8Array> {
  const out = new Uint8Array(length);
  await readBodyInto(response, out, what);
  return out;
}

/**
 * Exactly `into.length` bytes into `into`, reporting each new fill level to `onProgress` (a
 * throw there aborts the read and is rethrown); a body of any other length is a `protocol`
 * error, a connection lost mid-body a `network` one.
 */
export async function readBodyInto(response: Response, into: Uint8Array, what: string, onProgress?: (filled: number) => void): Promise<void> {
  const length = into.length;
  const declared = contentLengthOf(response);
  if (declared !== null && declared !== length) {
    await discardBody(response);
    throw new CastorClientError("protocol", `${what}: expected ${length} bytes, the server announced ${declared}`);
  }
  const tooLong = () => new CastorClientError("protocol", `${what}: the server sent more than the ${length} bytes requested`);
  let filled = 0;
  const message = takeNodeBody(response);
  if (message !== null) {
    // The node transport's message, copied piece by piece with no stream or promise per piece.
    try {
      filled = await readMessageInto(message, into, tooLong, onProgress);
    } catch (error) {
      if (error instanceof NodeTransportError) {
        throw new CastorClientError("network", `${what}: the connection failed mid-body: ${describeNetworkFailure(error)}`, { cause: error });
      }
      throw error;
    }
  } else if (response.body !== null) {
    const reader = response.body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (filled + value.length > length) throw tooLong();
        into.set(value, filled);
        filled += value.length;
        onProgress?.(filled);
      }
    } catch (error) {
      await reader.cancel().catch(() => undefined);
      throw error;
    }
  }
  if (filled !== length) {
    throw new CastorClientError("protocol", `${what}: the body ended after ${filled} of ${length} bytes`);
  }
}

/** Parses a JSON body of at most `maxBytes`; a `protocol` error when it is not JSON. */
export async function readJson(response: Response, maxBytes: number, what: string): Promise<unknown> {
  const bytes = await readBodyBounded(response, maxBytes, what);
  try {
    return JSON.parse(new TextDecoder().decode(bytes)) as unknown;
  } catch {
    throw new CastorClientError("protocol", `${what}: the answer is not JSON`);
  }
}

function describeNetworkFailure(error: unknown): string {
  const cause = (error as { cause?: { code?: unknown; message?: unknown } } | null)?.cause;
  if (typeof cause?.code === "string") return cause.code;
  if (typeof cause?.message === "string") return cause.message;
  return error instanceof Error ? error.message : String(error);
}

function contentLengthOf(response: Response): number | null {
  const header = response.headers.get("content-length");
  if (header === null || !/^\d+$/.test(header.trim())) return null;
  return Number(header.trim());
}
