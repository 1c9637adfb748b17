import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CasClient } from "../../src/client/cas.js";
import { CastorClientError } from "../../src/client/errors.js";
import { HttpClient, type FetchFunction } from "../../src/client/http.js";
import { TokenProvider, parseRepoRef, tokenUrl } from "../../src/client/token.js";

const REPO = parseRepoRef("model:alice/bert");

/** A hub issuing numbered tokens that live `lifetime` seconds on the injected clock. */
function hub(clock: { now: number }, lifetime = 3600) {
  const requests: { url: string; auth: string | null }[] = [];
  let issued = 0;
  const fetch: FetchFunction = async (input, init) => {
    requests.push({ url: String(input), auth: new Headers(init?.headers).get("authorization") });
    issued++;
    return Response.json({ accessToken: `tok-${issued}`, exp: Math.floor(clock.now / 1000) + lifetime, casUrl: "http://cas.test/" });
  };
  return { fetch, requests };
}

function provider(fetch: FetchFunction, clock: { now: number }, access: "read" | "write" = "write") {
  return new TokenProvider({
    endpoint: "http://hub.test/",
    hubToken: "hf_secret",
    repo: REPO,
    revision: "main",
    access,
    http: new HttpClient({ fetch, retry: { maxAttempts: 1 } }),
    now: () => clock.now,
  });
}

describe("repository references and the token URL", () => {
  it("parses TYPE:NS/NAME and refuses anything else as a usage error", () => {
    assert.deepEqual(parseRepoRef("dataset:org/data-set_1.v2"), { type: "dataset", name: "org/data-set_1.v2" });
    for (const bad of ["alice/bert", "models:alice/bert", "model:alice", "model:alice/bert/x", "model:/bert", "model:alice/ bert", "model:alice/-x"]) {
      assert.throws(
        () => parseRepoRef(bad),
        (error: unknown) => error instanceof CastorClientError && error.kind === "usage",
        bad,
      );
    }
  });

  it("builds the xet token path real clients use, encoding the revision as one segment", () => {
    assert.equal(tokenUrl("http://h:8080/", REPO, "read", "main"), "http://h:8080/api/models/alice/bert/xet-read-token/main");
    assert.equal(tokenUrl("http://h", parseRepoRef("space:a/b"), "write", "feature/x"), "http://h/api/spaces/a/b/xet-write-token/feature%2Fx");
  });
});

describe("TokenProvider", () => {
  it("fetches once, reuses the token, and refreshes 30 s before it expires", async () => {
    const clock = { now: 1_700_000_000_000 };
    const { fetch, requests } = hub(clock);
    const tokens = provider(fetch, clock);
    const first = await tokens.get();
    assert.deepEqual(first, { accessToken: "tok-1", exp: 1_700_000_000 + 3600, casUrl: "http://cas.test" });
    assert.equal(requests[0].url, "http://hub.test/api/models/alice/bert/xet-write-token/main");
    assert.equal(requests[0].auth, "Bearer hf_secret");

    clock.now += (3600 - 31) * 1000; // 31 s left: still fresh
    assert.equal((await tokens.get()).accessToken, "tok-1");
    clock.now += 2000; // 29 s left: inside the margin
    assert.equal((await tokens.get()).accessToken, "tok-2");
    assert.equal(tokens.tokenRequests, 2);
  });

  it("renews a token shorter-lived than twice the margin at half its life, not on every call", async () => {
    const clock = { now: 1_700_000_000_000 };
    const { fetch } = hub(clock, 10);
    const tokens = provider(fetch, clock);
    await tokens.get();
    clock.now += 4000;
    assert.equal((await tokens.get()).accessToken, "tok-1");
    clock.now += 1500; // 4.5 s left of 10
    assert.equal((await tokens.get()).accessToken, "tok-2");
  });

  it("shares one refresh between concurrent callers", async () => {
    const clock = { now: 1_700_000_000_000 };
    const { fetch, requests } = hub(clock);
    const tokens = provider(fetch, clock);
    const all = await Promise.all([tokens.get(), tokens.get(), tokens.get()]);
    assert.deepEqual(new Set(all.map((t) => t.accessToken)), new Set(["tok-1"]));
    assert.equal(requests.length, 1);
  });

  it("fetches anew after invalidate, but not when another token already replaced the stale one", async () => {
    const clock = { now: 1_700_000_000_000 };
    const { fetch } = hub(clock);
    const tokens = provider(fetch, clock);
    const first = await tokens.get();
    tokens.invalidate(first);
    const second = await tokens.get();
    assert.equal(second.accessToken, "tok-2");
    tokens.invalidate(first);
    assert.equal((await tokens.get()).accessToken, "tok-2");
  });

  it("explains hub refusals and refuses malformed token answers", async () => {
    const clock = { now: 1_700_000_000_000 };
    const refusing: FetchFunction = async () => Response.json({ error: "Invalid hub token" }, { status: 401 });
    await assert.rejects(
      provider(refusing, clock).get(),
      /answered 401 Unauthorized: Invalid hub token \(check the hub token given with --hub-token or CASTOR_HUB_TOKEN\)/,
    );
    const forbidden: FetchFunction = async () => Response.json({ error: "read only" }, { status: 403 });
    await assert.rejects(provider(forbidden, clock).get(), /does not grant write access to model:alice\/bert/);
    for (const body of [
      { accessToken: "", exp: 1, casUrl: "http://x" },
      { accessToken: "t", exp: "soon", casUrl: "http://x" },
      { accessToken: "t", exp: 1, casUrl: "ftp://x" },
      [],
    ]) {
      const odd: FetchFunction = async () => Response.json(body);
      await assert.rejects(provider(odd, clock).get(), (error: unknown) => error instanceof CastorClientError && error.kind === "protocol");
    }
  });
});

describe("CasClient", () => {
  it("sends the bearer token to casUrl, and on a 401 fetches a fresh token and retries once", async () => {
    const clock = { now: 1_700_000_000_000 };
    const hubSide = hub(clock);
    const casCalls: { url: string; auth: string | null }[] = [];
    const fetch: FetchFunction = async (input, init) => {
      const url = String(input);
      if (url.startsWith("http://hub.test")) return hubSide.fetch(input, init);
      const auth = new Headers(init?.headers).get("authorization");
      casCalls.push({ url, auth });
      return auth === "Bearer tok-1" ? Response.json({ error: "expired" }, { status: 401 }) : Response.json({ ok: 1 });
    };
    const http = new HttpClient({ fetch, retry: { maxAttempts: 1 } });
    const tokens = new TokenProvider({ endpoint: "http://hub.test", hubToken: "hf", repo: REPO, revision: "main", access: "read", http, now: () => clock.now });
    const response = await new CasClient(http, tokens).request({ what: "t", path: "/v1/x" });
    assert.equal(response.status, 200);
    assert.deepEqual(casCalls, [
      { url: "http://cas.test/v1/x", auth: "Bearer tok-1" },
      { url: "http://cas.test/v1/x", auth: "Bearer tok-2" },
    ]);
  });

  it("gives up with the server's message when the fresh token is refused too", async () => {
    const clock = { now: 1_700_000_000_000 };
    const hubSide = hub(clock);
    const fetch: FetchFunction = async (input, init) =>
      String(input).startsWith("http://hub.test") ? hubSide.fetch(input, init) : Response.json({ error: "token expired" }, { status: 401 });
    const http = new HttpClient({ fetch, retry: { maxAttempts: 1 } });
    const tokens = new TokenProvider({ endpoint: "http://hub.test", hubToken: "hf", repo: REPO, revision: "main", access: "read", http, now: () => clock.now });
    await assert.rejects(new CasClient(http, tokens).request({ what: "t", path: "/v1/x" }), /answered 401 Unauthorized: token expired/);
    assert.equal(tokens.tokenRequests, 2);
  });
});
