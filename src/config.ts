/**
 * castor's one typed configuration object, read once from `CASTOR_*` environment variables
 * and matching command-line flags (`CASTOR_TOKEN_TTL` ⇔ `--token-ttl`; a flag wins over the
 * environment). Every value is validated here, at start-up, by the readers of src/settings.ts,
 * each with a message naming the setting.
 */
import { isIP } from "node:net";
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import { getHeapStatistics } from "node:v8";
import { DEFAULT_MAX_XORB_BODY_BYTES } from "./format/xorb.js";
import {
  ConfigError,
  duration,
  flagNameOf,
  nonNegativeInt,
  oneOf,
  parseBool,
  parseListen,
  parsePublicUrl,
  perMinuteOrOff,
  positiveInt,
  secret,
  seconds,
  trustedProxies,
  type Env,
  type SettingName,
} from "./settings.js";

export { ConfigError, flagNameOf, SETTINGS, type Env, type SettingName } from "./settings.js";

export interface S3Config {
  endpoint: string | null;
  bucket: string;
  region: string;
  accessKeyId: string | null;
  secretAccessKey: string | null;
  prefix: string;
  forcePathStyle: boolean;
}

export interface CastorConfig {
  /** Embedded data folder (blobs, SQLite, generated keys). Absolute. */
  dataDir: string;
  listenHost: string;
  listenPort: number;
  /**
   * Base URL written into `casUrl` and transfer URLs; no trailing slash. null only when
   * `CASTOR_LISTEN` asks for port 0 and `CASTOR_PUBLIC_URL` is unset: the URL then depends on
   * the port the OS picks, so the server derives it after binding (`publicUrlForBoundPort`).
   */
  publicUrl: string | null;
  /**
   * Whether `CASTOR_PUBLIC_URL` was set. One derived from the listen address gives way, on a
   * loopback address, to the loopback name a client used (`localhost`; src/http/public-url.ts).
   */
  publicUrlSet: boolean;
  /** `postgres://…` selects PostgreSQL metadata; null = SQLite in the data dir. */
  databaseUrl: string | null;
  /** null = filesystem blobs in the data dir. */
  s3: S3Config | null;
  tokenTtlSeconds: number;
  transferUrlTtlSeconds: number;
  /** PEM file with the Ed25519 JWT signing key; null = generated into the data dir. */
  signingKeyFile: string | null;
  /** Transfer-URL HMAC key; null = generated into the data dir. */
  urlKey: string | null;
  /** Seed the dedup-response HMAC keys derive from; null = generated into the data dir. */
  dedupKeySeed: string | null;
  v2Reconstruction: "on" | "501";
  maxXorbBytes: number;
  maxShardBytes: number;
  /** Chunk references a shard's files may make in all (CASTOR_MAX_SHARD_CHUNK_REFS). */
  maxShardChunkRefs: number;
  /**
   * Bytes of memory the shard registrations in progress in this process may hold in all
   * (CASTOR_SHARD_MEMORY_BUDGET; src/cas/shard-admission.ts); one more waits its turn or is
   * answered 503. Per process: each worker of `--workers N` has its own heap and its own budget.
   */
  shardMemoryBudget: number;
  /** How long a shard registration waits for room in that budget before it is answered 503 (CASTOR_SHARD_ADMISSION_WAIT). */
  shardAdmissionWaitMs: number;
  /**
   * Hub uploads: files of at least this many bytes (or binary ones) go through Xet, smaller
   * text files travel inside the commit (CASTOR_HUB_INLINE_MAX_BYTES); also the largest file a
   * commit may carry inline.
   */
  hubInlineMaxBytes: number;
  /**
   * `/readyz` fails while the data dir's filesystem has this many bytes available or fewer: a
   * disk that full cannot take uploads (and the SQLite file and upload staging live there).
   */
  minFreeBytes: number;
  /**
   * Bytes kept in a file in the data dir for maintenance to run in once the disk is full
   * (CASTOR_RESERVED_SPACE; 0 = none): see src/storage/reserve.ts.
   */
  reservedSpaceBytes: number;
  transferMode: "proxy" | "presigned";
  /** Connection timeouts and bounds (src/http/connection-limits.ts), all in milliseconds or bytes. */
  limits: ConnectionLimits;
  /** Most xorb and shard uploads received at once (src/http/upload-limit.ts); beyond it 503. */
  maxConcurrentUploads: number;
  /** Per-client limits of the hub routes (src/http/hub-limits.ts); null: that limit is off. */
  hubLimits: HubLimits;
  /** Bounds of git's work per request (src/git/, src/http/git-routes.ts). */
  gitLimits: GitLimits;
  /**
   * Addresses and CIDR ranges (or `loopback`, `linklocal`, `uniquelocal`) of the proxies whose
   * `X-Forwarded-For` names the client (CASTOR_TRUSTED_PROXIES); empty: the header is ignored
   * and the client is the TCP peer.
   */
  trustedProxies: string[];
  /** How long a shutdown waits for requests in progress before it closes their connections. */
  shutdownGraceMs: number;
  /**
   * Processes `castor serve` answers requests in (CASTOR_WORKERS): 1 is one process, as castor
   * always ran; more start a primary that forks that many workers sharing the port (src/cluster/).
   */
  workers: number;
  /** `GET /metrics` served (CASTOR_METRICS=on) or not (off). */
  metrics: boolean;
  /** Bearer token a metrics scrape must present (CASTOR_METRICS_TOKEN); null = none needed. */
  metricsToken: string | null;
  /** Garbage collection inside `castor serve`: every `intervalMs` (null: never, the default), keeping `graceMs`. */
  gc: { intervalMs: number | null; graceMs: number };
  /** The upstream hub castor mirrors (CASTOR_UPSTREAM_*); null: castor mirrors none. */
  upstream: UpstreamConfig | null;
  logLevel: "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";
  /**
   * How `castor serve` writes its log (CASTOR_LOG_FORMAT): JSON lines, or lines for a person to
   * read; null: readable on a terminal, JSON otherwise (src/http/logging.ts `logFormatFor`).
   */
  logFormat: "json" | "pretty" | null;
}

export interface UpstreamConfig {
  /** CASTOR_UPSTREAM_URL, without a trailing slash. */
  url: string;
  /** CASTOR_UPSTREAM_TOKEN: castor's identity upstream; null: anonymous. */
  token: string | null;
  /** CASTOR_UPSTREAM_REPOS: `TYPE:NAMESPACE/NAME` globs; empty: every repository. */
  repos: string[];
  /** CASTOR_UPSTREAM_REFRESH: how long an answer about a branch, tag or missing name is trusted. */
  refreshMs: number;
  /** CASTOR_UPSTREAM_ANONYMOUS=1: clients without a token may pull public upstream repositories. */
  anonymous: boolean;
  /** CASTOR_UPSTREAM_MAX_BYTES: mirrored bytes the scheduled gc keeps at most; null: no bound. */
  maxBytes: number | null;
}

/** How long mirrored refs and "not found" answers are trusted by default. */
export const DEFAULT_UPSTREAM_REFRESH = "10m";

const MiB = 1024 * 1024;

/** Connection timeouts and bounds, all in milliseconds or bytes: what src/http/connection-limits.ts enforces. */
export interface ConnectionLimits {
  /** Longest time from a request's first byte to the end of its headers. */
  headerTimeoutMs: number;
  /** Longest pause within a request body; also the window `bodyMinBytesPerSecond` is averaged over. */
  bodyTimeoutMs: number;
  /** Slowest average rate a request body may arrive at, over each `bodyTimeoutMs` window. */
  bodyMinBytesPerSecond: number;
  /** Longest time an answer may make no progress because the client does not read it. */
  sendTimeoutMs: number;
  /** After an answer sent before the request body was read: longest time its rest is read and dropped. */
  lingerTimeoutMs: number;
  /** … and the most bytes of it that are read and dropped. */
  lingerBytes: number;
  /** Most connections open at once; one more is closed on arrival. */
  maxConnections: number;
}

export const DEFAULT_CONNECTION_LIMITS: Readonly<ConnectionLimits> = {
  // Real clients send their headers in one packet; nginx's client_header_timeout is 60 s.
  headerTimeoutMs: 30_000,
  // nginx's client_body_timeout. hf_xet and hf.js stream a body without pauses; castor's own
  // backpressure (a slow disk or bucket) is not counted against the client.
  bodyTimeoutMs: 60_000,
  // 1 KiB/s: a 64 MiB xorb at this rate takes 18 hours; hf_xet's 8 parallel uploads on a
  // 256 kbit/s uplink still send 4 KiB/s each. A body of one byte every 10 s is far below.
  bodyMinBytesPerSecond: 1024,
  // nginx's send_timeout. A client reading a 64 MiB range on a slow link still makes progress.
  sendTimeoutMs: 60_000,
  // Measured with nginx configured as the README shows (test/e2e/early-answers.test.ts, 70 MiB
  // uploads refused with 401): closing after 1 byte gave 502s and took the nodes out of
  // rotation; from 64 KiB on, every answer got through, and nginx stopped sending within 1 ms
  // on loopback. Over a network the bytes in flight while the answer travels are bandwidth ×
  // round trip: 4 MiB covers 1 Gbit/s × 30 ms, 2 s a loaded peer. A refused client costs at
  // most that much reading, and no memory.
  lingerTimeoutMs: 2_000,
  lingerBytes: 4 * 1024 * 1024,
  // Far above what real clients open (hf_xet: ~8–16 per upload or download session; nginx's
  // keep-alive pool per node), and well inside a process's usual 4,096+ descriptors (`ulimit -n`)
  // with room for the stores' own (SQLite, staging files, S3 sockets). Raise both together.
  maxConnections: 1024,
};

/** Per-client limits of the hub routes: what src/http/hub-limits.ts enforces. */
export interface HubLimits {
  /** Requests a minute per hub token (per address without one); null: no limit. */
  requestsPerMinute: number | null;
  /** Failed hub authentications a minute per address before its unknown tokens are refused; null: no limit. */
  authFailuresPerMinute: number | null;
}

export const DEFAULT_HUB_LIMITS: Readonly<HubLimits> = {
  // Six times the ~1,000-request burst of a snapshot_download of a large repository; a person
  // or a script on one token rarely gets near it, a tight loop does within seconds.
  requestsPerMinute: 6000,
  // A person mistyping a token a few times, or a script with a stale HF_TOKEN retrying, stays
  // under it; a guesser gets ten tries, then fewer and fewer.
  authFailuresPerMinute: 10,
};

/** Most xorb and shard uploads one node receives at once (src/http/upload-limit.ts). */
export const DEFAULT_MAX_CONCURRENT_UPLOADS = 64;

/**
 * The longest a presigned URL may live: 7 days, AWS Signature V4's limit. `loadConfig` checks
 * CASTOR_TRANSFER_URL_TTL against it in presigned mode, the one place a lifetime enters castor.
 */
export const MAX_PRESIGNED_URL_TTL_SECONDS = 7 * 24 * 60 * 60;

/** Bounds of git's work per request (CASTOR_GIT_MAX_OBJECTS, CASTOR_GIT_MAX_PACK_BYTES, CASTOR_GIT_MAX_DELTA_DEPTH). */
export interface GitLimits {
  /** Most objects a fetch walks or sends, or a push brings (commits, trees and files). */
  maxObjects: number;
  /** Most bytes of a pushed pack. */
  maxPackBytes: number;
  /** Longest chain of deltas in a pushed pack. */
  maxDeltaDepth: number;
}

export const DEFAULT_GIT_LIMITS: Readonly<GitLimits> = {
  // A clone of a repository of a million files with a long history stays under it; the walk
  // holds about 100 bytes per object.
  maxObjects: 2_000_000,
  // Files above CASTOR_HUB_INLINE_MAX_BYTES travel through Git LFS, so a pack is text and code.
  maxPackBytes: 2 * 1024 * MiB,
  // git writes chains of at most 50 (pack.depth) unless repacked aggressively; 4095 is its own cap.
  maxDeltaDepth: 4095,
};
/** What `castor gc` and scheduled collections keep by default: a day of uploads not committed yet. */
export const DEFAULT_GC_GRACE = "24h";
export const DEFAULT_MAX_SHARD_BYTES = 65 * MiB;
/**
 * Chunk references (chunks of terms) a shard's files may make in all. Validation costs ~0.6 µs
 * per reference to a chunk named once (its merkle leaf), a few tens of nanoseconds when its
 * range repeats (docs/design.md §8.13), so this caps one upload at about ten seconds of CPU,
 * spread over event-loop slices. It is ~1 TiB of file data at the 64 KiB average chunk, far
 * more than one client session puts in one shard.
 */
export const DEFAULT_MAX_SHARD_CHUNK_REFS = 1 << 24;

/**
 * The default CASTOR_SHARD_MEMORY_BUDGET: a quarter of this process's V8 heap limit, about
 * 1 GiB with Node's default limit on a 64-bit machine with 16 GiB or more (less on smaller
 * machines, more with `--max-old-space-size`). What a registration holds is mostly its body
 * and typed arrays outside the heap; the heap limit stands for what the process may use.
 */
export function defaultShardMemoryBudget(): number {
  return Math.floor(getHeapStatistics().heap_size_limit / 4);
}
/**
 * The default CASTOR_SHARD_ADMISSION_WAIT: long enough for a large registration ahead to
 * finish, short enough that a client waiting for its first byte (`/v2/shards` sends nothing
 * before admission) stays well within the 30 s read timeouts clients keep.
 */
export const DEFAULT_SHARD_ADMISSION_WAIT_MS = 10_000;
/** 10 MiB, the Hub's own threshold for files that go to large-file storage. */
export const DEFAULT_HUB_INLINE_MAX_BYTES = 10 * 1024 * 1024;

/** Room for a few uploads' staging writes and SQLite's WAL; far below any real volume's size. */
export const DEFAULT_MIN_FREE_BYTES = 16 * MiB;
/** Enough for gc's first batches (a few MiB of WAL each) until the blobs they delete free more. */
export const DEFAULT_RESERVED_SPACE_BYTES = 64 * MiB;
/** Long enough for an upload or download in progress to finish; short enough for a rolling restart. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 30_000;
/**
 * More workers than this is a typo, not a deployment: each is a whole Node process (~60 MB
 * before its first request) with its own database connections.
 */
export const MAX_WORKERS = 256;

/**
 * Builds the config from the environment and flags (`{ "token-ttl": "60" }`). Unknown flags
 * are the caller's business; unknown CASTOR_* variables are ignored.
 */
export function loadConfig(env: Env = process.env, flags: Record<string, string | undefined> = {}): CastorConfig {
  const get = (name: SettingName): string | undefined => {
    const value = flags[flagNameOf(name)] ?? env[name];
    return value === undefined || value === "" ? undefined : value;
  };

  const dataDir = resolve(get("CASTOR_DATA_DIR") ?? "./castor-data");
  /** How the user spelled a setting, for messages: the flag when one was given, else the variable. */
  const sourceOf = (name: SettingName): string => (flags[flagNameOf(name)] !== undefined ? `--${flagNameOf(name)}` : name);
  const { host: listenHost, port: listenPort } = parseListen(get("CASTOR_LISTEN") ?? "127.0.0.1:8080", sourceOf("CASTOR_LISTEN"));

  const explicitPublicUrl = get("CASTOR_PUBLIC_URL");
  let publicUrl: string | null;
  if (explicitPublicUrl !== undefined) {
    publicUrl = parsePublicUrl(explicitPublicUrl);
  } else {
    if (isWildcardHost(listenHost)) {
      throw new ConfigError(
        `CASTOR_PUBLIC_URL is required when listening on the wildcard address ${listenHost}: set it to the URL clients reach castor at (e.g. https://cas.example.com)`,
      );
    }
    publicUrl = listenPort === 0 ? null : listenUrl(listenHost, listenPort);
  }

  const databaseUrl = get("CASTOR_DATABASE_URL") ?? null;
  if (databaseUrl !== null && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new ConfigError("CASTOR_DATABASE_URL must be a postgres:// or postgresql:// URL (leave it unset for the embedded SQLite)");
  }

  const bucket = get("CASTOR_S3_BUCKET");
  const s3: S3Config | null =
    bucket === undefined
      ? null
      : {
          endpoint: get("CASTOR_S3_ENDPOINT") ?? null,
          bucket,
          region: get("CASTOR_S3_REGION") ?? "us-east-1",
          accessKeyId: get("CASTOR_S3_ACCESS_KEY_ID") ?? null,
          secretAccessKey: get("CASTOR_S3_SECRET_ACCESS_KEY") ?? null,
          prefix: (get("CASTOR_S3_PREFIX") ?? "").replace(/^\/+/, ""),
          forcePathStyle: parseBool("CASTOR_S3_FORCE_PATH_STYLE", get("CASTOR_S3_FORCE_PATH_STYLE") ?? "true"),
        };
  if (s3 === null && get("CASTOR_S3_ENDPOINT") !== undefined) {
    throw new ConfigError("CASTOR_S3_ENDPOINT is set but CASTOR_S3_BUCKET is not: name the bucket castor stores xorbs and shards in");
  }

  const transferMode = oneOf("CASTOR_TRANSFER_MODE", get("CASTOR_TRANSFER_MODE") ?? "proxy", ["proxy", "presigned"] as const);
  if (transferMode === "presigned" && s3 === null) {
    throw new ConfigError("CASTOR_TRANSFER_MODE=presigned needs the S3 blob store (set CASTOR_S3_BUCKET)");
  }
  const transferUrlTtlSeconds = positiveInt("CASTOR_TRANSFER_URL_TTL", get("CASTOR_TRANSFER_URL_TTL") ?? "3600");
  if (transferMode === "presigned" && transferUrlTtlSeconds > MAX_PRESIGNED_URL_TTL_SECONDS) {
    throw new ConfigError(
      `CASTOR_TRANSFER_URL_TTL must be at most ${MAX_PRESIGNED_URL_TTL_SECONDS} seconds (7 days, the longest a presigned S3 URL can live) with CASTOR_TRANSFER_MODE=presigned, got ${transferUrlTtlSeconds}`,
    );
  }

  return {
    dataDir,
    listenHost,
    listenPort,
    publicUrl,
    publicUrlSet: explicitPublicUrl !== undefined,
    databaseUrl,
    s3,
    tokenTtlSeconds: positiveInt("CASTOR_TOKEN_TTL", get("CASTOR_TOKEN_TTL") ?? "3600"),
    transferUrlTtlSeconds,
    signingKeyFile: get("CASTOR_SIGNING_KEY_FILE") ? resolve(get("CASTOR_SIGNING_KEY_FILE")!) : null,
    urlKey: secret("CASTOR_URL_KEY", get("CASTOR_URL_KEY")),
    dedupKeySeed: secret("CASTOR_DEDUP_KEY_SEED", get("CASTOR_DEDUP_KEY_SEED")),
    v2Reconstruction: oneOf("CASTOR_V2_RECONSTRUCTION", get("CASTOR_V2_RECONSTRUCTION") ?? "on", ["on", "501"] as const),
    maxXorbBytes: positiveInt("CASTOR_MAX_XORB_BYTES", get("CASTOR_MAX_XORB_BYTES") ?? String(DEFAULT_MAX_XORB_BODY_BYTES)),
    maxShardBytes: positiveInt("CASTOR_MAX_SHARD_BYTES", get("CASTOR_MAX_SHARD_BYTES") ?? String(DEFAULT_MAX_SHARD_BYTES)),
    maxShardChunkRefs: positiveInt("CASTOR_MAX_SHARD_CHUNK_REFS", get("CASTOR_MAX_SHARD_CHUNK_REFS") ?? String(DEFAULT_MAX_SHARD_CHUNK_REFS)),
    shardMemoryBudget: positiveInt("CASTOR_SHARD_MEMORY_BUDGET", get("CASTOR_SHARD_MEMORY_BUDGET") ?? String(defaultShardMemoryBudget())),
    shardAdmissionWaitMs: seconds("CASTOR_SHARD_ADMISSION_WAIT", get("CASTOR_SHARD_ADMISSION_WAIT"), DEFAULT_SHARD_ADMISSION_WAIT_MS),
    hubInlineMaxBytes: positiveInt("CASTOR_HUB_INLINE_MAX_BYTES", get("CASTOR_HUB_INLINE_MAX_BYTES") ?? String(DEFAULT_HUB_INLINE_MAX_BYTES)),
    minFreeBytes: nonNegativeInt("CASTOR_MIN_FREE_BYTES", get("CASTOR_MIN_FREE_BYTES") ?? String(DEFAULT_MIN_FREE_BYTES)),
    reservedSpaceBytes: nonNegativeInt("CASTOR_RESERVED_SPACE", get("CASTOR_RESERVED_SPACE") ?? String(DEFAULT_RESERVED_SPACE_BYTES)),
    transferMode,
    limits: {
      headerTimeoutMs: seconds("CASTOR_HEADER_TIMEOUT", get("CASTOR_HEADER_TIMEOUT"), DEFAULT_CONNECTION_LIMITS.headerTimeoutMs),
      bodyTimeoutMs: seconds("CASTOR_BODY_TIMEOUT", get("CASTOR_BODY_TIMEOUT"), DEFAULT_CONNECTION_LIMITS.bodyTimeoutMs),
      bodyMinBytesPerSecond: positiveInt("CASTOR_BODY_MIN_RATE", get("CASTOR_BODY_MIN_RATE") ?? String(DEFAULT_CONNECTION_LIMITS.bodyMinBytesPerSecond)),
      sendTimeoutMs: seconds("CASTOR_SEND_TIMEOUT", get("CASTOR_SEND_TIMEOUT"), DEFAULT_CONNECTION_LIMITS.sendTimeoutMs),
      lingerTimeoutMs: seconds("CASTOR_LINGER_TIMEOUT", get("CASTOR_LINGER_TIMEOUT"), DEFAULT_CONNECTION_LIMITS.lingerTimeoutMs),
      lingerBytes: positiveInt("CASTOR_LINGER_BYTES", get("CASTOR_LINGER_BYTES") ?? String(DEFAULT_CONNECTION_LIMITS.lingerBytes)),
      maxConnections: positiveInt("CASTOR_MAX_CONNECTIONS", get("CASTOR_MAX_CONNECTIONS") ?? String(DEFAULT_CONNECTION_LIMITS.maxConnections)),
    },
    maxConcurrentUploads: positiveInt("CASTOR_MAX_CONCURRENT_UPLOADS", get("CASTOR_MAX_CONCURRENT_UPLOADS") ?? String(DEFAULT_MAX_CONCURRENT_UPLOADS)),
    hubLimits: {
      requestsPerMinute: perMinuteOrOff("CASTOR_HUB_RATE_LIMIT", get("CASTOR_HUB_RATE_LIMIT"), DEFAULT_HUB_LIMITS.requestsPerMinute),
      authFailuresPerMinute: perMinuteOrOff("CASTOR_AUTH_FAILURE_LIMIT", get("CASTOR_AUTH_FAILURE_LIMIT"), DEFAULT_HUB_LIMITS.authFailuresPerMinute),
    },
    gitLimits: {
      maxObjects: positiveInt("CASTOR_GIT_MAX_OBJECTS", get("CASTOR_GIT_MAX_OBJECTS") ?? String(DEFAULT_GIT_LIMITS.maxObjects)),
      maxPackBytes: positiveInt("CASTOR_GIT_MAX_PACK_BYTES", get("CASTOR_GIT_MAX_PACK_BYTES") ?? String(DEFAULT_GIT_LIMITS.maxPackBytes)),
      maxDeltaDepth: positiveInt("CASTOR_GIT_MAX_DELTA_DEPTH", get("CASTOR_GIT_MAX_DELTA_DEPTH") ?? String(DEFAULT_GIT_LIMITS.maxDeltaDepth)),
    },
    trustedProxies: trustedProxies("CASTOR_TRUSTED_PROXIES", get("CASTOR_TRUSTED_PROXIES")),
    shutdownGraceMs: seconds("CASTOR_SHUTDOWN_GRACE", get("CASTOR_SHUTDOWN_GRACE"), DEFAULT_SHUTDOWN_GRACE_MS),
    workers: workerCount(get("CASTOR_WORKERS")),
    metrics: oneOf("CASTOR_METRICS", get("CASTOR_METRICS") ?? "on", ["on", "off"] as const) === "on",
    metricsToken: get("CASTOR_METRICS_TOKEN") ?? null,
    gc: {
      intervalMs: (get("CASTOR_GC_INTERVAL") ?? "off") === "off" ? null : duration("CASTOR_GC_INTERVAL", get("CASTOR_GC_INTERVAL")!, 60_000),
      graceMs: duration("CASTOR_GC_GRACE", get("CASTOR_GC_GRACE") ?? DEFAULT_GC_GRACE, 0),
    },
    logLevel: oneOf("CASTOR_LOG_LEVEL", get("CASTOR_LOG_LEVEL") ?? "info", ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const),
    logFormat: get("CASTOR_LOG_FORMAT") === undefined ? null : oneOf("CASTOR_LOG_FORMAT", get("CASTOR_LOG_FORMAT")!, ["json", "pretty"] as const),
    upstream: upstreamConfig(get),
  };
}

/** The CASTOR_UPSTREAM_* settings, checked; null when CASTOR_UPSTREAM_URL is unset (and then none of the others may be set). */
function upstreamConfig(get: (name: SettingName) => string | undefined): UpstreamConfig | null {
  const url = get("CASTOR_UPSTREAM_URL");
  if (url === undefined) {
    const stray = (
      ["CASTOR_UPSTREAM_TOKEN", "CASTOR_UPSTREAM_REPOS", "CASTOR_UPSTREAM_REFRESH", "CASTOR_UPSTREAM_ANONYMOUS", "CASTOR_UPSTREAM_MAX_BYTES"] as const
    ).find((name) => get(name) !== undefined);
    if (stray !== undefined) throw new ConfigError(`${stray} is set but CASTOR_UPSTREAM_URL is not: name the hub castor mirrors (e.g. https://huggingface.co)`);
    return null;
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`CASTOR_UPSTREAM_URL must be an absolute http(s) URL such as https://huggingface.co, got ${JSON.stringify(url)}`);
  }
  if ((parsed.protocol !== "http:" && parsed.protocol !== "https:") || parsed.search || parsed.hash || parsed.username || parsed.password) {
    throw new ConfigError("CASTOR_UPSTREAM_URL must be an http(s) URL without a query, fragment or credentials (give castor's token as CASTOR_UPSTREAM_TOKEN)");
  }
  const repos = (get("CASTOR_UPSTREAM_REPOS") ?? "")
    .split(",")
    .map((glob) => glob.trim())
    .filter((glob) => glob !== "");
  for (const glob of repos) {
    if (!/^(\*|model|dataset|space):[A-Za-z0-9._*-]+\/[A-Za-z0-9._*-]+$/.test(glob)) {
      throw new ConfigError(
        `CASTOR_UPSTREAM_REPOS must be comma-separated TYPE:NAMESPACE/NAME patterns (TYPE model, dataset, space or *; * matches within a part), e.g. model:*/*,dataset:org/*; ${JSON.stringify(glob)} is not one`,
      );
    }
  }
  const maxBytes = get("CASTOR_UPSTREAM_MAX_BYTES");
  return {
    url: parsed.toString().replace(/\/+$/, ""),
    token: get("CASTOR_UPSTREAM_TOKEN") ?? null,
    repos,
    refreshMs: duration("CASTOR_UPSTREAM_REFRESH", get("CASTOR_UPSTREAM_REFRESH") ?? DEFAULT_UPSTREAM_REFRESH, 0),
    anonymous: parseBool("CASTOR_UPSTREAM_ANONYMOUS", get("CASTOR_UPSTREAM_ANONYMOUS") ?? "0"),
    maxBytes: maxBytes === undefined ? null : nonNegativeInt("CASTOR_UPSTREAM_MAX_BYTES", maxBytes),
  };
}

/**
 * The public URL once the listening port is known: the configured one, or `http://host:port`
 * built from the listen host and the port actually bound (which differs from the configured
 * port only when that was 0).
 */
export function publicUrlForBoundPort(config: Pick<CastorConfig, "publicUrl" | "listenHost">, boundPort: number): string {
  return config.publicUrl ?? listenUrl(config.listenHost, boundPort);
}

/** `http://host:port`, bracketing IPv6 literals. */
export function listenUrl(host: string, port: number): string {
  return `http://${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
}

function isWildcardHost(host: string): boolean {
  return host === "0.0.0.0" || host === "::" || host === "[::]" || host === "::0";
}

/** CASTOR_WORKERS, by default one per core the process may run on. */
function workerCount(value: string | undefined): number {
  if (value === undefined) return Math.min(availableParallelism(), MAX_WORKERS);
  const count = positiveInt("CASTOR_WORKERS", value);
  if (count > MAX_WORKERS) throw new ConfigError(`CASTOR_WORKERS must be at most ${MAX_WORKERS}, got ${count}`);
  return count;
}
