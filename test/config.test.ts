import assert from "node:assert/strict";
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import { getHeapStatistics } from "node:v8";
import { describe, it } from "node:test";
import {
  ConfigError,
  DEFAULT_MAX_SHARD_BYTES,
  DEFAULT_MIN_FREE_BYTES,
  flagNameOf,
  listenUrl,
  loadConfig,
  MAX_WORKERS,
  publicUrlForBoundPort,
  SETTINGS,
} from "../src/config.js";
import { DEFAULT_MAX_XORB_BODY_BYTES } from "../src/format/xorb.js";
import { createHttpApp } from "../src/http/app.js";
import { createLogger } from "../src/http/logging.js";

const SECRET = "s".repeat(32);

function rejects(env: Record<string, string>, pattern: RegExp, flags: Record<string, string> = {}): void {
  assert.throws(
    () => loadConfig(env, flags),
    (error: unknown) => error instanceof ConfigError && pattern.test(error.message),
  );
}

describe("loadConfig", () => {
  it("has the documented defaults", () => {
    const config = loadConfig({});
    assert.equal(config.dataDir, resolve("./castor-data"));
    assert.equal(config.listenHost, "127.0.0.1");
    assert.equal(config.listenPort, 8080);
    assert.equal(config.publicUrl, "http://127.0.0.1:8080");
    assert.equal(config.databaseUrl, null);
    assert.equal(config.s3, null);
    assert.equal(config.tokenTtlSeconds, 3600);
    assert.equal(config.transferUrlTtlSeconds, 3600);
    assert.equal(config.signingKeyFile, null);
    assert.equal(config.urlKey, null);
    assert.equal(config.dedupKeySeed, null);
    assert.equal(config.v2Reconstruction, "on");
    assert.equal(config.maxXorbBytes, DEFAULT_MAX_XORB_BODY_BYTES);
    assert.equal(config.maxXorbBytes, 67_698_688, "64 MiB + 8 B × 8,192 chunk headers + 512 KiB, as the README documents");
    assert.equal(config.maxShardBytes, DEFAULT_MAX_SHARD_BYTES);
    assert.equal(config.maxShardChunkRefs, 16_777_216);
    assert.equal(config.minFreeBytes, DEFAULT_MIN_FREE_BYTES);
    assert.equal(config.transferMode, "proxy");
    assert.equal(config.logLevel, "info");
    assert.equal(config.workers, Math.min(availableParallelism(), MAX_WORKERS), "one worker per core");
  });

  it("lets a flag win over the environment and treats empty values as unset", () => {
    const config = loadConfig({ CASTOR_TOKEN_TTL: "60", CASTOR_DATA_DIR: "" }, { "token-ttl": "5" });
    assert.equal(config.tokenTtlSeconds, 5);
    assert.equal(config.dataDir, resolve("./castor-data"));
    assert.equal(flagNameOf("CASTOR_TOKEN_TTL"), "token-ttl");
    assert.equal(flagNameOf("CASTOR_S3_FORCE_PATH_STYLE"), "s3-force-path-style");
    assert.ok(SETTINGS.includes("CASTOR_LOG_LEVEL"));
  });

  it("makes paths absolute", () => {
    const config = loadConfig({ CASTOR_DATA_DIR: "rel/data", CASTOR_SIGNING_KEY_FILE: "keys/k.pem" });
    assert.equal(config.dataDir, resolve("rel/data"));
    assert.equal(config.signingKeyFile, resolve("keys/k.pem"));
  });

  describe("listen address and public URL", () => {
    it("derives the public URL from the listen address, bracketing IPv6", () => {
      assert.equal(loadConfig({ CASTOR_LISTEN: "localhost:9000" }).publicUrl, "http://localhost:9000");
      const v6 = loadConfig({ CASTOR_LISTEN: "[::1]:9000" });
      assert.equal(v6.listenHost, "::1");
      assert.equal(v6.publicUrl, "http://[::1]:9000");
    });

    it("leaves the public URL to the bound port when listening on port 0", () => {
      const config = loadConfig({ CASTOR_LISTEN: "127.0.0.1:0" });
      assert.equal(config.listenPort, 0);
      assert.equal(config.publicUrl, null);
      assert.equal(config.publicUrlSet, false, "derived, so a loopback name a client uses may replace it");
      assert.equal(publicUrlForBoundPort(config, 43210), "http://127.0.0.1:43210");
      assert.equal(listenUrl("::1", 5), "http://[::1]:5");
    });

    it("prefers an explicit public URL over the bound port", () => {
      const config = loadConfig({ CASTOR_LISTEN: "127.0.0.1:0", CASTOR_PUBLIC_URL: "https://cas.example.com/" });
      assert.equal(config.publicUrl, "https://cas.example.com");
      assert.equal(config.publicUrlSet, true);
      assert.equal(publicUrlForBoundPort(config, 43210), "https://cas.example.com");
    });

    it("keeps a path in the public URL and strips trailing slashes", () => {
      assert.equal(loadConfig({ CASTOR_PUBLIC_URL: "https://example.com/cas//" }).publicUrl, "https://example.com/cas");
    });

    it("requires a public URL on a wildcard address", () => {
      rejects({ CASTOR_LISTEN: "0.0.0.0:8080" }, /CASTOR_PUBLIC_URL is required .*0\.0\.0\.0/);
      rejects({ CASTOR_LISTEN: "[::]:8080" }, /CASTOR_PUBLIC_URL is required/);
      assert.equal(loadConfig({ CASTOR_LISTEN: "0.0.0.0:8080", CASTOR_PUBLIC_URL: "http://cas.local:8080" }).publicUrl, "http://cas.local:8080");
    });

    for (const bad of ["8080", "host:", ":8080", "host:65536", "host:123456", "[1.2.3.4]:80", "a b:80", "host:-1", "http://host:80"]) {
      it(`rejects CASTOR_LISTEN=${JSON.stringify(bad)}`, () => rejects({ CASTOR_LISTEN: bad }, /^CASTOR_LISTEN must be host:port/));
    }

    it("names the flag, not the variable, when --listen was given", () => {
      rejects({}, /^--listen must be host:port/, { listen: "nonsense" });
      rejects({ CASTOR_LISTEN: "127.0.0.1:1" }, /^--listen must be host:port/, { listen: "nonsense" });
    });

    for (const [bad, pattern] of [
      ["not a url", /absolute http\(s\) URL/],
      ["ftp://example.com", /http or https/],
      ["https://example.com/?a=1", /query string or fragment/],
      ["https://example.com/#x", /query string or fragment/],
      ["https://user:pw@example.com", /credentials/],
    ] as const) {
      it(`rejects CASTOR_PUBLIC_URL=${JSON.stringify(bad)}`, () => rejects({ CASTOR_PUBLIC_URL: bad }, pattern));
    }
  });

  describe("numbers", () => {
    it("accepts any TTL of at least one second", () => {
      assert.equal(loadConfig({ CASTOR_TOKEN_TTL: "1" }).tokenTtlSeconds, 1);
      assert.equal(loadConfig({ CASTOR_TRANSFER_URL_TTL: "86400" }).transferUrlTtlSeconds, 86400);
    });

    for (const bad of ["0", "-1", "1.5", "abc", "1e3", " 5", "99999999999999999999"]) {
      it(`rejects CASTOR_TOKEN_TTL=${JSON.stringify(bad)}`, () => rejects({ CASTOR_TOKEN_TTL: bad }, /^CASTOR_TOKEN_TTL must be a whole number ≥ 1/));
    }

    it("reads git's bounds, 2,000,000 objects, 2 GiB packs and chains of 4095 deltas by default", () => {
      assert.deepEqual(loadConfig({}).gitLimits, { maxObjects: 2_000_000, maxPackBytes: 2 * 1024 ** 3, maxDeltaDepth: 4095 });
      assert.deepEqual(loadConfig({ CASTOR_GIT_MAX_OBJECTS: "5000", CASTOR_GIT_MAX_PACK_BYTES: "1048576" }, { "git-max-delta-depth": "50" }).gitLimits, {
        maxObjects: 5000,
        maxPackBytes: 1_048_576,
        maxDeltaDepth: 50,
      });
      rejects({ CASTOR_GIT_MAX_OBJECTS: "0" }, /^CASTOR_GIT_MAX_OBJECTS must be a whole number ≥ 1/);
      rejects({ CASTOR_GIT_MAX_PACK_BYTES: "2GiB" }, /^CASTOR_GIT_MAX_PACK_BYTES must be a whole number ≥ 1/);
    });

    it("names the setting of a bad body cap", () => {
      rejects({ CASTOR_MAX_XORB_BYTES: "0" }, /^CASTOR_MAX_XORB_BYTES/);
      rejects({}, /^CASTOR_MAX_SHARD_BYTES/, { "max-shard-bytes": "big" });
      rejects({ CASTOR_MAX_SHARD_CHUNK_REFS: "0" }, /^CASTOR_MAX_SHARD_CHUNK_REFS/);
      assert.equal(loadConfig({}, { "max-shard-chunk-refs": "1000" }).maxShardChunkRefs, 1000);
    });

    it("budgets shard registrations at a quarter of the heap limit by default, or as set, and waits 10 s for room by default", () => {
      assert.equal(loadConfig({}).shardMemoryBudget, Math.floor(getHeapStatistics().heap_size_limit / 4));
      assert.equal(loadConfig({ CASTOR_SHARD_MEMORY_BUDGET: "268435456" }).shardMemoryBudget, 268_435_456);
      rejects({ CASTOR_SHARD_MEMORY_BUDGET: "0" }, /^CASTOR_SHARD_MEMORY_BUDGET must be a whole number ≥ 1/);
      rejects({ CASTOR_SHARD_MEMORY_BUDGET: "1GiB" }, /^CASTOR_SHARD_MEMORY_BUDGET/);
      assert.equal(loadConfig({}).shardAdmissionWaitMs, 10_000);
      assert.equal(loadConfig({}, { "shard-admission-wait": "0.5" }).shardAdmissionWaitMs, 500);
      rejects({ CASTOR_SHARD_ADMISSION_WAIT: "0" }, /^CASTOR_SHARD_ADMISSION_WAIT must be a number of seconds > 0/);
    });

    it("accepts any free-space reserve of 0 bytes or more", () => {
      assert.equal(loadConfig({ CASTOR_MIN_FREE_BYTES: "0" }).minFreeBytes, 0);
      assert.equal(loadConfig({}, { "min-free-bytes": "1048576" }).minFreeBytes, 1048576);
    });

    it("reserves 64 MiB for maintenance by default, any size of 0 bytes or more when set", () => {
      assert.equal(loadConfig({}).reservedSpaceBytes, 64 * 1024 * 1024);
      assert.equal(loadConfig({ CASTOR_RESERVED_SPACE: "0" }).reservedSpaceBytes, 0);
      assert.equal(loadConfig({}, { "reserved-space": "1048576" }).reservedSpaceBytes, 1048576);
      assert.throws(() => loadConfig({ CASTOR_RESERVED_SPACE: "64MiB" }), /CASTOR_RESERVED_SPACE/);
    });

    for (const bad of ["-1", "1.5", "16MiB", " 5", "99999999999999999999"]) {
      it(`rejects CASTOR_MIN_FREE_BYTES=${JSON.stringify(bad)}`, () =>
        rejects({ CASTOR_MIN_FREE_BYTES: bad }, /^CASTOR_MIN_FREE_BYTES must be a whole number of bytes ≥ 0, got /));
    }
  });

  describe("secrets and backends", () => {
    it("requires secrets of at least 32 characters", () => {
      rejects({ CASTOR_URL_KEY: "short" }, /^CASTOR_URL_KEY must be at least 32 characters/);
      rejects({ CASTOR_DEDUP_KEY_SEED: "s".repeat(31) }, /^CASTOR_DEDUP_KEY_SEED/);
      const config = loadConfig({ CASTOR_URL_KEY: SECRET, CASTOR_DEDUP_KEY_SEED: SECRET });
      assert.equal(config.urlKey, SECRET);
      assert.equal(config.dedupKeySeed, SECRET);
    });

    it("accepts only PostgreSQL database URLs", () => {
      assert.equal(loadConfig({ CASTOR_DATABASE_URL: "postgres://u@h/db" }).databaseUrl, "postgres://u@h/db");
      rejects({ CASTOR_DATABASE_URL: "mysql://u@h/db" }, /postgres:\/\//);
    });

    it("builds the S3 settings from the bucket and checks their combinations", () => {
      const config = loadConfig({ CASTOR_S3_BUCKET: "b", CASTOR_S3_ENDPOINT: "http://127.0.0.1:7480", CASTOR_S3_PREFIX: "/x/" });
      assert.deepEqual(config.s3, {
        endpoint: "http://127.0.0.1:7480",
        bucket: "b",
        region: "us-east-1",
        accessKeyId: null,
        secretAccessKey: null,
        prefix: "x/",
        forcePathStyle: true,
      });
      rejects({ CASTOR_S3_ENDPOINT: "http://127.0.0.1:7480" }, /CASTOR_S3_BUCKET is not/);
      rejects({ CASTOR_TRANSFER_MODE: "presigned" }, /needs the S3 blob store/);
      const presigned = { CASTOR_S3_BUCKET: "b", CASTOR_TRANSFER_MODE: "presigned" };
      assert.equal(loadConfig({ ...presigned, CASTOR_TRANSFER_URL_TTL: "604800" }).transferUrlTtlSeconds, 604800);
      rejects({ ...presigned, CASTOR_TRANSFER_URL_TTL: "604801" }, /at most 604800 seconds .* presigned/);
      // The one check of a presigned URL's lifetime: the signer takes what passed here.
      rejects({ ...presigned, CASTOR_TRANSFER_URL_TTL: "0" }, /^CASTOR_TRANSFER_URL_TTL/);
      rejects({ ...presigned, CASTOR_TRANSFER_URL_TTL: "1.5" }, /^CASTOR_TRANSFER_URL_TTL/);
      rejects({ CASTOR_S3_BUCKET: "b", CASTOR_S3_FORCE_PATH_STYLE: "maybe" }, /true or false/);
    });

    it("takes a worker count from 1 to MAX_WORKERS, as CASTOR_WORKERS or --workers", () => {
      assert.equal(loadConfig({ CASTOR_WORKERS: "1" }).workers, 1);
      assert.equal(loadConfig({ CASTOR_WORKERS: "3" }, { workers: "2" }).workers, 2);
      assert.equal(loadConfig({ CASTOR_WORKERS: String(MAX_WORKERS) }).workers, MAX_WORKERS);
      rejects({ CASTOR_WORKERS: "0" }, /^CASTOR_WORKERS must be a whole number ≥ 1/);
      rejects({ CASTOR_WORKERS: "auto" }, /^CASTOR_WORKERS must be a whole number ≥ 1/);
      rejects({ CASTOR_WORKERS: String(MAX_WORKERS + 1) }, /^CASTOR_WORKERS must be at most 256/);
    });

    it("checks enumerated settings", () => {
      assert.equal(loadConfig({ CASTOR_V2_RECONSTRUCTION: "501" }).v2Reconstruction, "501");
      rejects({ CASTOR_V2_RECONSTRUCTION: "off" }, /^CASTOR_V2_RECONSTRUCTION must be one of on, 501/);
      rejects({ CASTOR_LOG_LEVEL: "loud" }, /^CASTOR_LOG_LEVEL/);
      rejects({ CASTOR_TRANSFER_MODE: "direct" }, /^CASTOR_TRANSFER_MODE/);
    });
  });

  describe("trusted proxies", () => {
    const accepted = "127.0.0.1, 10.0.0.0/8,192.168.1.0/24 , ::1, fd00::/8, ::ffff:10.1.2.3, 2001:db8::/128, loopback, linklocal, uniquelocal";

    it("trusts no proxy by default, reads a comma-separated list, the flag winning", () => {
      assert.deepEqual(loadConfig({}).trustedProxies, []);
      assert.deepEqual(loadConfig({ CASTOR_TRUSTED_PROXIES: "10.0.0.1" }, { "trusted-proxies": "10.0.0.2,,10.0.0.3," }).trustedProxies, [
        "10.0.0.2",
        "10.0.0.3",
      ]);
      assert.deepEqual(
        loadConfig({ CASTOR_TRUSTED_PROXIES: accepted }).trustedProxies,
        accepted.split(",").map((entry) => entry.trim()),
      );
    });

    it("is what fastify takes: every list the setting accepts builds an app", async () => {
      for (const entry of accepted.split(",")) {
        const app = createHttpApp({ logger: createLogger("silent"), trustedProxies: loadConfig({ CASTOR_TRUSTED_PROXIES: entry }).trustedProxies });
        await app.close();
      }
    });

    for (const bad of [
      "10.0.0.0/33",
      "::/0",
      "0.0.0.0/0",
      "fd00::/129",
      "10.0.0.0/8/8",
      "10.0.0.0/",
      "10.0.0.0/x",
      "10.0.0.0/255.0.0.0",
      "proxy.example",
      "10.0.0.256",
      "*",
    ]) {
      it(`rejects CASTOR_TRUSTED_PROXIES=${JSON.stringify(bad)}, naming the entry`, () => {
        assert.throws(
          () => loadConfig({ CASTOR_TRUSTED_PROXIES: `127.0.0.1,${bad}` }),
          (error: unknown) =>
            error instanceof ConfigError &&
            /^CASTOR_TRUSTED_PROXIES must be a comma-separated list of IP addresses or CIDR ranges/.test(error.message) &&
            error.message.endsWith(`; ${JSON.stringify(bad)} is not one`),
        );
      });
    }
  });

  describe("the upstream hub (CASTOR_UPSTREAM_*)", () => {
    it("mirrors nothing by default", () => {
      assert.equal(loadConfig({}).upstream, null);
    });

    it("reads the upstream, castor's token there, the allow list, the refresh time, anonymous pulls and the byte bound", () => {
      assert.deepEqual(
        loadConfig({
          CASTOR_UPSTREAM_URL: "https://huggingface.co/",
          CASTOR_UPSTREAM_TOKEN: "hf_upstream",
          CASTOR_UPSTREAM_REPOS: " model:*/* , dataset:org/* ",
          CASTOR_UPSTREAM_REFRESH: "1h",
          CASTOR_UPSTREAM_ANONYMOUS: "1",
          CASTOR_UPSTREAM_MAX_BYTES: "1000000",
        }).upstream,
        {
          url: "https://huggingface.co",
          token: "hf_upstream",
          repos: ["model:*/*", "dataset:org/*"],
          refreshMs: 3_600_000,
          anonymous: true,
          maxBytes: 1_000_000,
        },
      );
      assert.deepEqual(loadConfig({ CASTOR_UPSTREAM_URL: "http://hub.internal:8080" }).upstream, {
        url: "http://hub.internal:8080",
        token: null,
        repos: [],
        refreshMs: 600_000,
        anonymous: false,
        maxBytes: null,
      });
    });

    it("refuses mirror settings without CASTOR_UPSTREAM_URL, and bad values, naming the setting", () => {
      rejects({ CASTOR_UPSTREAM_TOKEN: "hf_x" }, /^CASTOR_UPSTREAM_TOKEN is set but CASTOR_UPSTREAM_URL is not/);
      rejects({ CASTOR_UPSTREAM_URL: "huggingface.co" }, /^CASTOR_UPSTREAM_URL must be an absolute http\(s\) URL/);
      rejects(
        { CASTOR_UPSTREAM_URL: "https://user:pass@huggingface.co" },
        /^CASTOR_UPSTREAM_URL must be an http\(s\) URL without a query, fragment or credentials/,
      );
      rejects(
        { CASTOR_UPSTREAM_URL: "https://huggingface.co", CASTOR_UPSTREAM_REPOS: "models/*" },
        /^CASTOR_UPSTREAM_REPOS must be comma-separated TYPE:NAMESPACE\/NAME patterns.*"models\/\*" is not one$/,
      );
      rejects({ CASTOR_UPSTREAM_URL: "https://huggingface.co", CASTOR_UPSTREAM_REFRESH: "soon" }, /^CASTOR_UPSTREAM_REFRESH must be a duration/);
      rejects({ CASTOR_UPSTREAM_URL: "https://huggingface.co", CASTOR_UPSTREAM_ANONYMOUS: "maybe" }, /^CASTOR_UPSTREAM_ANONYMOUS must be true or false/);
      rejects({ CASTOR_UPSTREAM_URL: "https://huggingface.co", CASTOR_UPSTREAM_MAX_BYTES: "-1" }, /^CASTOR_UPSTREAM_MAX_BYTES must be a whole number of bytes/);
    });
  });
});
