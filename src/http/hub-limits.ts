/**
 * Limits per client on the hub routes: the Hugging Face API (`/api/…`), the file URLs
 * (`…/resolve/…`, `…/raw/…`) and the token operation. The CAS routes get none: they are the hot
 * path, authenticated by tokens this operation hands out.
 *
 * - Requests (CASTOR_HUB_RATE_LIMIT a minute): per hub token, by a hash of the bearer, or per
 *   address for requests without one; @fastify/rate-limit, fixed one-minute windows, so a
 *   client may spend its whole minute in a burst (a `snapshot_download` of a 1,000-file
 *   repository makes ~1,000 HEADs at once). Beyond it: 429 with `Retry-After`.
 * - Failed authentications (CASTOR_AUTH_FAILURE_LIMIT a minute per address): a request with
 *   an `Authorization` header answered 401 is one (an unknown, revoked or expired token, or a
 *   malformed header: a valid token never gets a 401). Once an address has had that many, the
 *   hub tokens it sends are no longer looked up: 429 with `Retry-After` for a block that doubles
 *   at each new one (1, 2, 4 … at most 60 minutes). Only tokens seen to authenticate before
 *   still go through: checking unknown tokens during a block would let a brute force go on at
 *   full speed, learning of a hit by the answer; this way it gets at most the limit of guesses
 *   per block, while a client already working with a valid token is not slowed, and requests
 *   without a token are not affected at all. Rotating invented tokens to escape the per-token
 *   request limit runs into this one.
 *
 * Both count by `request.ip`: the TCP peer's address, or, from a peer listed in
 * CASTOR_TRUSTED_PROXIES, the client its `X-Forwarded-For` names. Behind a load balancer that is
 * not listed, every client shares its address (see the README's "Limits").
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import rateLimit from "@fastify/rate-limit";
import { LRUCache } from "lru-cache";
import type { HubLimits } from "../config.js";
import { hashHubTokenSecret } from "../hub/tokens.js";
import type { OnRefusal } from "../metrics.js";
import { hubTokenOf } from "./cas-auth.js";
import { HttpError } from "./errors.js";

const WINDOW_MS = 60_000;
/** The longest block; also how long an address must stay clean before its blocks start at one window again. */
const MAX_BLOCK_MS = 60 * WINDOW_MS;
/** Addresses and tokens remembered: an LRU, so a flood of addresses cannot grow the memory without bound. */
const MAX_TRACKED = 100_000;
/** How long a token that authenticated counts as known during a block. */
const KNOWN_TOKEN_TTL_MS = 24 * 60 * WINDOW_MS;

/** Requests whose hub token was authenticated (`hubTokenAccepted`), for the known-token memory. */
const acceptedRequests = new WeakSet<FastifyRequest>();

/** Called where a hub token was found valid for `request`: it may go through an address's block later. */
export function hubTokenAccepted(request: FastifyRequest): void {
  acceptedRequests.add(request);
}

/** What identifies a token in memory: its hash (the form the store keeps too), never the token itself. */
function tokenKey(request: FastifyRequest): string | null {
  const token = hubTokenOf(request.headers.authorization);
  return typeof token === "string" ? hashHubTokenSecret(token) : null;
}

/**
 * Installs both limits on `scope`, before the hub routes are registered in it (the request
 * limit attaches to the routes registered afterwards).
 */
export async function installHubLimits(scope: FastifyInstance, limits: HubLimits, onRefusal: OnRefusal = () => {}): Promise<void> {
  if (limits.authFailuresPerMinute !== null) installAuthFailureLimit(scope, limits.authFailuresPerMinute, onRefusal);
  const perMinute = limits.requestsPerMinute;
  if (perMinute === null) return;
  await scope.register(rateLimit, {
    max: perMinute,
    timeWindow: WINDOW_MS,
    cache: MAX_TRACKED,
    keyGenerator: (request) => {
      const key = tokenKey(request);
      return key === null ? `address:${request.ip}` : `token:${key}`;
    },
    // Called once per refused request, right before `errorResponseBuilder`.
    onExceeded: () => onRefusal("hub_rate_limit"),
    errorResponseBuilder: (request, context) => {
      const who = tokenKey(request) === null ? "this address" : "this hub token";
      const seconds = Math.max(1, Math.ceil(context.ttl / 1000));
      return new HttpError(
        429,
        `Too many hub requests from ${who}: at most ${perMinute} a minute; retry after ${seconds} s (huggingface_hub and hf retry 429 answers on their own)`,
        { "retry-after": String(seconds) },
      );
    },
  });
}

function installAuthFailureLimit(scope: FastifyInstance, perMinute: number, onRefusal: OnRefusal): void {
  const failures = new AuthFailures(perMinute);
  const knownTokens = new LRUCache<string, true>({ max: MAX_TRACKED, ttl: KNOWN_TOKEN_TTL_MS });

  scope.addHook("onRequest", async (request) => {
    if (request.headers.authorization === undefined) return;
    const blockedMs = failures.blockedMs(request.ip);
    if (blockedMs === 0) return;
    const key = tokenKey(request);
    if (key !== null && knownTokens.has(key)) return;
    const seconds = Math.ceil(blockedMs / 1000);
    onRefusal("auth_failure_limit");
    throw new HttpError(
      429,
      `Too many failed hub authentications from this address: hub tokens from it are not checked for ${seconds} s more. Check HF_TOKEN: it may be mistyped, revoked or expired (castor token create makes a new one)`,
      { "retry-after": String(seconds) },
    );
  });

  scope.addHook("onResponse", async (request, reply) => {
    if (request.headers.authorization === undefined) return;
    if (reply.statusCode === 401) {
      const blockMs = failures.failed(request.ip);
      if (blockMs !== null) {
        request.log.warn(
          { address: request.ip, blockSeconds: blockMs / 1000 },
          "too many failed hub authentications: the address's unknown tokens are refused for a while",
        );
      }
      return;
    }
    const key = tokenKey(request);
    if (key !== null && acceptedRequests.has(request)) knownTokens.set(key, true);
  });
}

interface FailureRecord {
  /** Failures in the window that started at `windowStart`. */
  failures: number;
  windowStart: number;
  /** Refused until then (ms since the epoch); 0: not blocked. */
  blockedUntil: number;
  /** Blocks so far; the next one lasts WINDOW_MS × 2^blocks, at most MAX_BLOCK_MS. */
  blocks: number;
}

/**
 * Failures per address, with a block that doubles. Not @fastify/rate-limit: it counts every
 * request it is shown, while here only failures may count (a client whose token works must
 * never use the budget up), and its exponential backoff lengthens the Retry-After it reports,
 * not the time it refuses.
 */
export class AuthFailures {
  private readonly records = new LRUCache<string, FailureRecord>({ max: MAX_TRACKED });

  constructor(
    private readonly perWindow: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** How long `address` stays blocked, in ms; 0 when it is not. */
  blockedMs(address: string): number {
    const record = this.records.get(address);
    return record === undefined ? 0 : Math.max(0, record.blockedUntil - this.now());
  }

  /** Counts a failure; returns the length of the block it started, or null. */
  failed(address: string): number | null {
    const now = this.now();
    let record = this.records.get(address);
    // Clean for as long as the longest block: start over.
    if (record === undefined || now - Math.max(record.windowStart, record.blockedUntil) > MAX_BLOCK_MS) {
      record = { failures: 0, windowStart: now, blockedUntil: 0, blocks: 0 };
      this.records.set(address, record);
    }
    // A known token's failure during a block (revoked meanwhile) changes nothing.
    if (record.blockedUntil > now) return null;
    if (now - record.windowStart >= WINDOW_MS) {
      record.failures = 0;
      record.windowStart = now;
    }
    record.failures++;
    if (record.failures < this.perWindow) return null;
    const blockMs = Math.min(WINDOW_MS * 2 ** record.blocks, MAX_BLOCK_MS);
    record.blocks++;
    record.blockedUntil = now + blockMs;
    record.failures = 0;
    record.windowStart = record.blockedUntil;
    return blockMs;
  }
}
