/**
 * The per-client limits of the hub routes (src/http/hub-limits.ts) on in-process apps with
 * small limits: requests per token and per address (429 with Retry-After), failed
 * authentications per address (unknown tokens refused, known ones still served), each refusal
 * counted in castor_refusals_total, the CAS routes left unlimited, the client's address behind a
 * trusted proxy (X-Forwarded-For, believed only from CASTOR_TRUSTED_PROXIES), and the block's
 * growth on a fake clock.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import type { HubLimits } from "../../src/config.js";
import { AuthFailures } from "../../src/http/hub-limits.js";
import { startTestApp, type TestApp } from "../helpers/app.js";
import { refusals } from "../helpers/metrics.js";

interface Answer {
  status: number;
  headers: Headers;
  body: { error?: string };
}

async function get(castor: TestApp, path: string, token?: string, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await fetch(`${castor.url}${path}`, { headers: token === undefined ? headers : { ...headers, authorization: `Bearer ${token}` } });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text.startsWith("{") ? JSON.parse(text) : {} };
}

/** A 429 as the limits send it: JSON error, X-Error-Message, Retry-After in whole seconds within `maxSeconds`. */
function assertTooMany(answer: Answer, message: RegExp, maxSeconds: number): number {
  assert.equal(answer.status, 429, JSON.stringify(answer.body));
  assert.match(answer.body.error ?? "", message);
  assert.ok(answer.headers.get("x-error-message"));
  const seconds = Number(answer.headers.get("retry-after"));
  assert.ok(Number.isInteger(seconds) && seconds >= 1 && seconds <= maxSeconds, `Retry-After ${answer.headers.get("retry-after")}`);
  return seconds;
}

const WHOAMI = "/api/whoami-v2";
const TOKEN_OP = "/api/models/alice/limits/xet-read-token/main";
/** Shaped like a hub token, so it is looked up, but not one. */
const inventedToken = () => `hf_${randomBytes(20).toString("hex")}`;

async function tokenFor(castor: TestApp, owner: string): Promise<string> {
  return (await castor.hub.createToken({ repos: [], namespaces: [owner], owner, access: "write", expiresAt: null })).secret;
}

/** An app with `hubLimits` and the repository alice/limits for the suite; its log lines collect in `logText`. */
function appPerSuite(name: string, hubLimits: HubLimits, trustedProxies?: string[]): { castor: () => TestApp; logText: string[] } {
  let castor: TestApp;
  const logText: string[] = [];
  before(async () => {
    castor = await startTestApp({ name, logLines: (line) => void logText.push(line), hubLimits, trustedProxies });
    await castor.hub.createRepo("model", "alice/limits");
  });
  after(async () => castor?.close());
  return { castor: () => castor, logText };
}

describe("requests per token and per address", () => {
  const PER_MINUTE = 20;
  const suite = appPerSuite("hub-rate", { requestsPerMinute: PER_MINUTE, authFailuresPerMinute: null });
  const { logText } = suite;

  it("answers 429 with Retry-After once a token has used its minute, on every hub route, and counts each token apart", async () => {
    const castor = suite.castor();
    const alice = await tokenFor(castor, "alice");
    const bob = await tokenFor(castor, "alice");
    const refusedBefore = await refusals(castor.url, "hub_rate_limit");
    for (let i = 0; i < PER_MINUTE / 2; i++) {
      assert.equal((await get(castor, WHOAMI, alice)).status, 200);
      assert.equal((await get(castor, TOKEN_OP, alice)).status, 200);
    }
    assertTooMany(await get(castor, WHOAMI, alice), /Too many hub requests from this hub token: at most 20 a minute; retry after \d+ s/, 60);
    assertTooMany(await get(castor, TOKEN_OP, alice), /this hub token/, 60);
    assertTooMany(await get(castor, "/alice/limits/resolve/main/README.md", alice), /this hub token/, 60);
    assert.equal((await get(castor, WHOAMI, bob)).status, 200, "another token has its own minute");
    assert.equal((await refusals(castor.url, "hub_rate_limit")) - refusedBefore, 3, "castor_refusals_total counts each 429");
    assert.ok(!logText.some((line) => line.includes(alice) || line.includes(bob)), "no hub token is logged");
  });

  it("counts requests without a token per address", async () => {
    const castor = suite.castor();
    const carol = await tokenFor(castor, "alice");
    let status = 0;
    for (let i = 0; i < PER_MINUTE && status !== 429; i++) status = (await get(castor, "/api/models/alice/limits")).status;
    assert.notEqual(status, 429, "the address had its minute");
    assertTooMany(await get(castor, "/api/models/alice/limits"), /Too many hub requests from this address/, 60);
    assert.equal((await get(castor, WHOAMI, carol)).status, 200, "a token from the same address counts apart");
  });

  it("leaves the CAS routes unlimited", async () => {
    const castor = suite.castor();
    const { accessToken } = (await get(castor, TOKEN_OP, await tokenFor(castor, "alice"))).body as { accessToken: string };
    for (let i = 0; i < PER_MINUTE * 2; i++) {
      const answer = await fetch(`${castor.url}/v1/reconstructions/${"ab".repeat(32)}`, { headers: { authorization: `Bearer ${accessToken}` } });
      await answer.arrayBuffer();
      assert.equal(answer.status, 404);
    }
  });
});

describe("failed hub authentications per address", () => {
  const FAILURES = 5;
  const suite = appPerSuite("hub-auth-failures", { requestsPerMinute: null, authFailuresPerMinute: FAILURES });
  const { logText } = suite;

  it("refuses an address's unknown tokens after the limit, while a token already in use keeps working", async () => {
    const castor = suite.castor();
    const working = await tokenFor(castor, "alice");
    assert.equal((await get(castor, WHOAMI, working)).status, 200, "a client at work before the attack");
    const refusedBefore = await refusals(castor.url, "auth_failure_limit");
    const guesses = Array.from({ length: 20 }, inventedToken);
    const statuses: number[] = [];
    for (const guess of guesses) {
      const answer = await get(castor, WHOAMI, guess);
      statuses.push(answer.status);
      if (answer.status === 429) assertTooMany(answer, /Too many failed hub authentications from this address: .*Check HF_TOKEN/, 60);
    }
    assert.deepEqual(statuses, [...Array(FAILURES).fill(401), ...Array(20 - FAILURES).fill(429)]);
    // The token operation is refused alike.
    assertTooMany(await get(castor, TOKEN_OP, inventedToken()), /failed hub authentications/, 60);
    // The working client is unaffected, on the API and on the token operation.
    assert.equal((await get(castor, WHOAMI, working)).status, 200);
    assert.equal((await get(castor, TOKEN_OP, working)).status, 200);
    // Without a token nothing is authenticated, so nothing is refused.
    assert.equal((await get(castor, "/api/models/alice/limits")).status, 401);
    // A valid token this address never used before waits out the block like a guess: evaluating
    // it would tell a guesser which guess hit.
    assertTooMany(await get(castor, WHOAMI, await tokenFor(castor, "alice")), /failed hub authentications/, 60);
    assert.equal((await refusals(castor.url, "auth_failure_limit")) - refusedBefore, 20 - FAILURES + 2, "castor_refusals_total counts each 429");
    assert.equal(await refusals(castor.url, "hub_rate_limit"), 0, "the other limit refused nothing");
    const warnings = logText.filter((line) => line.includes("too many failed hub authentications"));
    assert.equal(warnings.length, 1, "the block is logged once");
    assert.ok(!guesses.some((guess) => logText.some((line) => line.includes(guess))), "no guessed token is logged");
  });

  it("counts revoked tokens as failures", async () => {
    const castorOther = await startTestApp({ name: "hub-auth-revoked", hubLimits: { requestsPerMinute: null, authFailuresPerMinute: 2 } });
    try {
      const { secret, token } = await castorOther.hub.createToken({ repos: [], namespaces: ["alice"], owner: "alice", access: "read", expiresAt: null });
      await castorOther.hub.revokeToken(token.id);
      assert.equal((await get(castorOther, WHOAMI, secret)).status, 401);
      assert.equal((await get(castorOther, WHOAMI, secret)).status, 401);
      assertTooMany(await get(castorOther, WHOAMI, secret), /failed hub authentications/, 60);
    } finally {
      await castorOther.close();
    }
  });
});

/** The headers a proxy adds in front of castor for a client at `client` (the chain, when several). */
const forwardedFor = (client: string) => ({ "x-forwarded-for": client });

describe("clients behind a trusted proxy (CASTOR_TRUSTED_PROXIES)", () => {
  const FAILURES = 3;
  const PER_MINUTE = 10;
  // The test's own requests come from 127.0.0.1: it plays the proxy.
  const suite = appPerSuite("hub-trusted-proxy", { requestsPerMinute: PER_MINUTE, authFailuresPerMinute: FAILURES }, ["127.0.0.1"]);
  const { logText } = suite;

  it("gives each client named by X-Forwarded-For its own auth-failure budget, and logs the client's address", async () => {
    const castor = suite.castor();
    for (let i = 0; i < FAILURES; i++) assert.equal((await get(castor, WHOAMI, inventedToken(), forwardedFor("203.0.113.7"))).status, 401);
    assertTooMany(await get(castor, WHOAMI, inventedToken(), forwardedFor("203.0.113.7")), /failed hub authentications/, 60);
    assert.equal((await get(castor, WHOAMI, inventedToken(), forwardedFor("203.0.113.8"))).status, 401, "another client of the proxy has its own budget");
    assert.equal((await get(castor, WHOAMI, inventedToken())).status, 401, "the proxy's own requests count as its address");
    // The proxy appends the address it saw: what the client put before it is not what is counted.
    assertTooMany(await get(castor, WHOAMI, inventedToken(), forwardedFor("198.51.100.1, 203.0.113.7")), /failed hub authentications/, 60);
    assert.ok(logText.some((line) => line.includes('"address":"203.0.113.7"') && line.includes("too many failed hub authentications")));
    assert.ok(
      logText.some((line) => line.includes('"remoteAddress":"203.0.113.8"')),
      "request lines show the client's address",
    );
  });

  it("gives each client named by X-Forwarded-For its own budget of requests without a token", async () => {
    const castor = suite.castor();
    for (let i = 0; i < PER_MINUTE; i++) assert.notEqual((await get(castor, "/api/models/alice/limits", undefined, forwardedFor("203.0.113.20"))).status, 429);
    assertTooMany(await get(castor, "/api/models/alice/limits", undefined, forwardedFor("203.0.113.20")), /from this address/, 60);
    assert.notEqual((await get(castor, "/api/models/alice/limits", undefined, forwardedFor("203.0.113.21"))).status, 429);
  });

  it("hands out the configured URLs whatever X-Forwarded-Host and X-Forwarded-Proto say", async () => {
    const castor = suite.castor();
    const answer = await get(castor, TOKEN_OP, await tokenFor(castor, "alice"), {
      ...forwardedFor("203.0.113.30"),
      "x-forwarded-host": "attacker.example",
      "x-forwarded-proto": "https",
    });
    assert.equal(answer.status, 200);
    assert.equal((answer.body as { casUrl?: string }).casUrl, castor.url);
    assert.equal(answer.headers.get("x-xet-cas-url"), castor.url);
  });
});

describe("X-Forwarded-For from a peer that is not a trusted proxy", () => {
  const FAILURES = 3;
  for (const [label, trustedProxies] of [
    ["without CASTOR_TRUSTED_PROXIES (the default)", undefined],
    ["from a peer not in CASTOR_TRUSTED_PROXIES", ["127.0.0.2"]],
  ] as const) {
    describe(label, () => {
      const suite = appPerSuite("hub-untrusted-proxy", { requestsPerMinute: null, authFailuresPerMinute: FAILURES }, trustedProxies && [...trustedProxies]);
      it("is ignored: a forged header does not escape the failure limit", async () => {
        const castor = suite.castor();
        for (let i = 0; i < FAILURES; i++) assert.equal((await get(castor, WHOAMI, inventedToken(), forwardedFor(`203.0.113.${i + 1}`))).status, 401);
        assertTooMany(await get(castor, WHOAMI, inventedToken(), forwardedFor("203.0.113.99")), /failed hub authentications/, 60);
        assert.ok(!suite.logText.some((line) => line.includes("203.0.113.")), "the forged addresses appear nowhere in the log");
      });
    });
  }
});

describe("AuthFailures", () => {
  it("blocks for a minute, then twice as long at each new block up to an hour, and forgets a clean address", () => {
    let now = 1_000_000;
    const failures = new AuthFailures(3, () => now);
    const blockLengths: number[] = [];
    for (let block = 0; block < 8; block++) {
      assert.equal(failures.blockedMs("x"), 0);
      assert.equal(failures.failed("x"), null);
      assert.equal(failures.failed("x"), null);
      const blockMs = failures.failed("x");
      assert.ok(blockMs !== null);
      blockLengths.push(blockMs / 60_000);
      assert.equal(failures.blockedMs("x"), blockMs);
      assert.equal(failures.blockedMs("y"), 0, "other addresses are not blocked");
      now += blockMs;
    }
    assert.deepEqual(blockLengths, [1, 2, 4, 8, 16, 32, 60, 60]);
    // Failures spread over more than a minute never add up to a block.
    for (let i = 0; i < 10; i++) {
      now += 31 * 60_000;
      assert.equal(failures.failed("z"), null);
    }
    // Clean for over an hour: the next block is one minute again.
    now += 61 * 60_000;
    failures.failed("x");
    failures.failed("x");
    assert.equal(failures.failed("x"), 60_000);
  });
});
