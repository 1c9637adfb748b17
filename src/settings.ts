/**
 * Every setting castor reads (its environment name, and the flag derived from it) and how one
 * setting's text reads as a value: each reader names the setting in its message, so that a typo
 * stops the start-up saying which setting and what it takes. src/config.ts puts them together
 * into the one configuration object.
 */
import { isIP } from "node:net";
import { durationMs } from "./duration.js";

export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

/** Every setting castor reads, by environment name; the flag is derived from it. */
export const SETTINGS = [
  "CASTOR_DATA_DIR",
  "CASTOR_LISTEN",
  "CASTOR_PUBLIC_URL",
  "CASTOR_DATABASE_URL",
  "CASTOR_S3_ENDPOINT",
  "CASTOR_S3_BUCKET",
  "CASTOR_S3_REGION",
  "CASTOR_S3_ACCESS_KEY_ID",
  "CASTOR_S3_SECRET_ACCESS_KEY",
  "CASTOR_S3_PREFIX",
  "CASTOR_S3_FORCE_PATH_STYLE",
  "CASTOR_TOKEN_TTL",
  "CASTOR_TRANSFER_URL_TTL",
  "CASTOR_SIGNING_KEY_FILE",
  "CASTOR_URL_KEY",
  "CASTOR_DEDUP_KEY_SEED",
  "CASTOR_V2_RECONSTRUCTION",
  "CASTOR_MAX_XORB_BYTES",
  "CASTOR_MAX_SHARD_BYTES",
  "CASTOR_MAX_SHARD_CHUNK_REFS",
  "CASTOR_SHARD_MEMORY_BUDGET",
  "CASTOR_SHARD_ADMISSION_WAIT",
  "CASTOR_HUB_INLINE_MAX_BYTES",
  "CASTOR_MIN_FREE_BYTES",
  "CASTOR_RESERVED_SPACE",
  "CASTOR_TRANSFER_MODE",
  "CASTOR_HEADER_TIMEOUT",
  "CASTOR_BODY_TIMEOUT",
  "CASTOR_BODY_MIN_RATE",
  "CASTOR_SEND_TIMEOUT",
  "CASTOR_LINGER_TIMEOUT",
  "CASTOR_LINGER_BYTES",
  "CASTOR_MAX_CONNECTIONS",
  "CASTOR_MAX_CONCURRENT_UPLOADS",
  "CASTOR_GIT_MAX_OBJECTS",
  "CASTOR_GIT_MAX_PACK_BYTES",
  "CASTOR_GIT_MAX_DELTA_DEPTH",
  "CASTOR_HUB_RATE_LIMIT",
  "CASTOR_AUTH_FAILURE_LIMIT",
  "CASTOR_TRUSTED_PROXIES",
  "CASTOR_SHUTDOWN_GRACE",
  "CASTOR_WORKERS",
  "CASTOR_LOG_LEVEL",
  "CASTOR_LOG_FORMAT",
  "CASTOR_METRICS",
  "CASTOR_METRICS_TOKEN",
  "CASTOR_GC_INTERVAL",
  "CASTOR_GC_GRACE",
  "CASTOR_UPSTREAM_URL",
  "CASTOR_UPSTREAM_TOKEN",
  "CASTOR_UPSTREAM_REPOS",
  "CASTOR_UPSTREAM_REFRESH",
  "CASTOR_UPSTREAM_ANONYMOUS",
  "CASTOR_UPSTREAM_MAX_BYTES",
] as const;
export type SettingName = (typeof SETTINGS)[number];

/** `CASTOR_TOKEN_TTL` → `token-ttl`. */
export function flagNameOf(setting: SettingName): string {
  return setting.slice("CASTOR_".length).toLowerCase().replaceAll("_", "-");
}

export type Env = Record<string, string | undefined>;

export function parseListen(value: string, source: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[3]) : NaN;
  const bracketedIsNotIPv6 = m !== null && m[1] !== undefined && isIP(m[1]) !== 6;
  if (!m || port > 65535 || bracketedIsNotIPv6) {
    throw new ConfigError(
      `${source} must be host:port with a port from 0 to 65535 (e.g. 127.0.0.1:8080, [::1]:8080, or 127.0.0.1:0 for any free port), got ${JSON.stringify(value)}`,
    );
  }
  return { host: m[1] ?? m[2], port };
}

export function parsePublicUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`CASTOR_PUBLIC_URL must be an absolute http(s) URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(`CASTOR_PUBLIC_URL must use http or https, got ${url.protocol}`);
  }
  if (url.search || url.hash) throw new ConfigError("CASTOR_PUBLIC_URL must not carry a query string or fragment");
  if (url.username || url.password) throw new ConfigError("CASTOR_PUBLIC_URL must not carry credentials (user:password@): clients receive it in casUrl");
  return url.toString().replace(/\/+$/, "");
}

export function positiveInt(name: SettingName, value: string): number {
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value)) || Number(value) < 1) {
    throw new ConfigError(`${name} must be a whole number ≥ 1, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** A count per minute, or null for `off` (or `0`, which could only ever mean "no limit" here). */
export function perMinuteOrOff(name: SettingName, value: string | undefined, defaultValue: number | null): number | null {
  if (value === undefined) return defaultValue;
  if (value === "off" || value === "0") return null;
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value))) {
    throw new ConfigError(`${name} must be a whole number per minute ≥ 1, or off (or 0) for no limit, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** The names @fastify/proxy-addr expands into ranges (loopback: 127.0.0.1/8 and ::1). */
const NAMED_PROXY_RANGES: ReadonlySet<string> = new Set(["loopback", "linklocal", "uniquelocal"]);

/**
 * A comma-separated list of addresses and CIDR ranges, checked here so that a typo stops the
 * start-up with the setting's name instead of failing inside fastify (which takes the list as
 * its `trustProxy`). Stricter than fastify: prefixes only (no IPv4 netmasks), written as
 * `isIP` reads addresses. A prefix of 0 is refused as fastify refuses it: trusting every
 * address would let any client choose the address it is limited as.
 */
export function trustedProxies(name: SettingName, value: string | undefined): string[] {
  if (value === undefined) return [];
  const entries = value
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  for (const entry of entries) {
    if (NAMED_PROXY_RANGES.has(entry)) continue;
    const slash = entry.lastIndexOf("/");
    const address = slash === -1 ? entry : entry.slice(0, slash);
    const version = isIP(address);
    const maxPrefix = version === 6 ? 128 : 32;
    const prefix = slash === -1 ? maxPrefix : /^\d{1,3}$/.test(entry.slice(slash + 1)) ? Number(entry.slice(slash + 1)) : NaN;
    if (version === 0 || !(prefix >= 1 && prefix <= maxPrefix)) {
      throw new ConfigError(
        `${name} must be a comma-separated list of IP addresses or CIDR ranges (prefix 1–32 for IPv4, 1–128 for IPv6), or loopback, linklocal, uniquelocal; ${JSON.stringify(entry)} is not one`,
      );
    }
  }
  return entries;
}

export function nonNegativeInt(name: SettingName, value: string): number {
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value))) {
    throw new ConfigError(`${name} must be a whole number of bytes ≥ 0, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/**
 * A duration in seconds (decimals allowed, e.g. 0.5), as milliseconds; `defaultMs` when unset.
 * At least a millisecond: 0 would mean "no limit" to Node and is never what a limit should say.
 */
export function seconds(name: SettingName, value: string | undefined, defaultMs: number): number {
  if (value === undefined) return defaultMs;
  const ms = /^\d+(\.\d+)?$/.test(value) ? Math.round(Number(value) * 1000) : NaN;
  if (!(ms >= 1) || !Number.isSafeInteger(ms)) {
    throw new ConfigError(`${name} must be a number of seconds > 0 (e.g. 30 or 0.5), got ${JSON.stringify(value)}`);
  }
  return ms;
}

/** A duration written `30d`, `12h`, `45m` or `90s` (src/duration.ts), of at least `minMs`. */
export function duration(name: SettingName, value: string, minMs: number): number {
  const ms = durationMs(value);
  if (ms === null || ms < minMs) {
    throw new ConfigError(
      `${name} must be a duration such as 24h, 7d, 30m${minMs === 0 ? " or 0" : ""} (at least ${minMs / 1000} s), got ${JSON.stringify(value)}`,
    );
  }
  return ms;
}

export function parseBool(name: SettingName, value: string): boolean {
  if (/^(true|1|yes|on)$/i.test(value)) return true;
  if (/^(false|0|no|off)$/i.test(value)) return false;
  throw new ConfigError(`${name} must be true or false, got ${JSON.stringify(value)}`);
}

export function oneOf<T extends string>(name: SettingName, value: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(value)) {
    throw new ConfigError(`${name} must be one of ${allowed.join(", ")}; got ${JSON.stringify(value)}`);
  }
  return value as T;
}

export function secret(name: SettingName, value: string | undefined): string | null {
  if (value === undefined) return null;
  if (value.length < 32) throw new ConfigError(`${name} must be at least 32 characters of secret material`);
  return value;
}
