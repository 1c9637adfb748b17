import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CastorClientError, HttpStatusError } from "../../src/client/errors.js";
import { HttpClient, isRetryableStatus, parseRetryAfter, readBodyBounded, readBodyExactly, redactUrl, type FetchFunction } from "../../src/client/http.js";

/** A fetch that answers from a script, one entry per call, and records the calls. */
function scripted(...answers: (Response | Error)[]) {
  const calls: { url: string; init: RequestInit | undefined }[] = [];
  const fetch: FetchFunction = async (input, init) => {
    calls.push({ url: String(input), init });
    const next = answers.shift();
    if (next === undefined) throw new Error("the script ran out of answers");
    if (next instanceof Error) throw next;
    return next;
  };
  return { fetch, calls };
}

function jsonResponse(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
}

function connectionRefused(): Error {
  return new TypeError("fetch failed", { cause: Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" }) });
}

function clientWith(fetch: FetchFunction, delays: number[] = []) {
  return new HttpClient({
    fetch,
    retry: { maxAttempts: 4, baseDelayMs: 100, maxDelayMs: 1000 },
    sleep: async (ms) => {
      delays.push(ms);
    },
    random: () => 0.5,
  });
}

describe("HttpClient retries", () => {
  it("retries 5xx, 408 and 429 with growing delays, then returns the success", async () => {
    const { fetch, calls } = scripted(jsonResponse(503, { error: "busy" }), jsonResponse(408, {}), jsonResponse(500, {}), jsonResponse(200, { ok: true }));
    const delays: number[] = [];
    const response = await clientWith(fetch, delays).request({ what: "testing", url: "http://h/x" });
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { ok: true });
    assert.equal(calls.length, 4);
    // Equal jitter with random() = 0.5: three quarters of 100, 200, 400.
    assert.deepEqual(delays, [75, 150, 300]);
  });

  it("honours Retry-After on 429, capped by the maximum delay", async () => {
    const { fetch } = scripted(jsonResponse(429, {}, { "retry-after": "0" }), jsonResponse(429, {}, { "retry-after": "600" }), jsonResponse(200, {}));
    const delays: number[] = [];
    await clientWith(fetch, delays).request({ what: "testing", url: "http://h/x" });
    assert.deepEqual(delays, [75, 1000]);
  });

  it("does not retry other 4xx and reports the server's JSON error message", async () => {
    const { fetch, calls } = scripted(jsonResponse(403, { error: "This token has read access only" }));
    await assert.rejects(
      clientWith(fetch).request({ what: "uploading xorb abc", url: "http://h/v1/xorbs/default/abc?sig=secret", hints: { 403: "use a write token" } }),
      (error: unknown) => {
        assert.ok(error instanceof HttpStatusError);
        assert.equal(error.status, 403);
        assert.equal(error.kind, "http");
        assert.equal(error.serverMessage, "This token has read access only");
        assert.equal(
          error.message,
          "uploading xorb abc: http://h/v1/xorbs/default/abc answered 403 Forbidden: This token has read access only (use a write token)",
        );
        return true;
      },
    );
    assert.equal(calls.length, 1);
  });

  it("does not retry 501 (V2 not implemented is permanent)", async () => {
    const { fetch, calls } = scripted(jsonResponse(501, { error: "off" }));
    await assert.rejects(clientWith(fetch).request({ what: "t", url: "http://h/" }), HttpStatusError);
    assert.equal(calls.length, 1);
  });

  it("hands listed statuses back without retrying or failing", async () => {
    const { fetch, calls } = scripted(jsonResponse(404, { error: "miss" }), jsonResponse(503, {}));
    const client = clientWith(fetch);
    assert.equal((await client.request({ what: "t", url: "http://h/", passStatuses: [404] })).status, 404);
    assert.equal((await client.request({ what: "t", url: "http://h/", passStatuses: [503] })).status, 503);
    assert.equal(calls.length, 2);
  });

  it("gives up after the last attempt with the last status and the attempt count", async () => {
    const { fetch } = scripted(jsonResponse(502, {}), jsonResponse(502, {}), jsonResponse(502, { error: "bad gateway" }));
    const client = new HttpClient({ fetch, retry: { maxAttempts: 3, baseDelayMs: 0 } });
    await assert.rejects(client.request({ what: "t", url: "http://h/" }), /answered 502 Bad Gateway after 3 attempts: bad gateway/);
  });

  it("retries network errors and then explains an unreachable server", async () => {
    const { fetch, calls } = scripted(connectionRefused(), connectionRefused(), connectionRefused(), connectionRefused());
    await assert.rejects(clientWith(fetch).request({ what: "asking the hub for a token", url: "http://127.0.0.1:1/api/x?secret=1" }), (error: unknown) => {
      assert.ok(error instanceof CastorClientError);
      assert.equal(error.kind, "network");
      assert.match(error.message, /^asking the hub for a token: cannot reach http:\/\/127\.0\.0\.1:1: ECONNREFUSED \(4 attempts\) — is castor running there\?/);
      assert.doesNotMatch(error.message, /secret/);
      return true;
    });
    assert.equal(calls.length, 4);
  });

  it("sends the method, headers and body it is given", async () => {
    const { fetch, calls } = scripted(jsonResponse(200, {}));
    await clientWith(fetch).request({ what: "t", url: "http://h/p", method: "POST", headers: { authorization: "Bearer x" }, body: Uint8Array.of(1, 2, 3) });
    assert.equal(calls[0].init?.method, "POST");
    assert.equal(new Headers(calls[0].init?.headers).get("authorization"), "Bearer x");
    assert.deepEqual(calls[0].init?.body, Uint8Array.of(1, 2, 3));
  });

  it("quotes the start of a non-JSON error body", async () => {
    const { fetch } = scripted(new Response("<html>\n  proxy error\n</html>", { status: 400 }));
    await assert.rejects(clientWith(fetch).request({ what: "t", url: "http://h/" }), /answered 400 Bad Request: <html> proxy error <\/html>/);
  });
});

describe("HTTP helpers", () => {
  it("classifies statuses like xet-core", () => {
    assert.deepEqual([408, 429, 500, 502, 503, 504].map(isRetryableStatus), [true, true, true, true, true, true]);
    assert.deepEqual([400, 401, 403, 404, 416, 501].map(isRetryableStatus), [false, false, false, false, false, false]);
  });

  it("parses Retry-After seconds and dates", () => {
    assert.equal(parseRetryAfter("3"), 3000);
    assert.equal(parseRetryAfter(null), null);
    assert.equal(parseRetryAfter("soon"), null);
    assert.equal(parseRetryAfter("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
  });

  it("removes query strings (signatures) from URLs in messages", () => {
    assert.equal(redactUrl("http://h:8080/v1/transfer/ab?x=1&s=sig"), "http://h:8080/v1/transfer/ab");
  });

  it("bounds bodies: by Content-Length before reading, and while reading", async () => {
    await assert.rejects(readBodyBounded(new Response("x".repeat(100), { headers: { "content-length": "100" } }), 10, "t"), /announced 100 bytes/);
    const stream = new ReadableStream({
      start(controller) {
        controller.enqueue(new Uint8Array(8));
        controller.enqueue(new Uint8Array(8));
        controller.close();
      },
    });
    await assert.rejects(readBodyBounded(new Response(stream), 10, "t"), /exceeds the 10 bytes/);
    assert.equal((await readBodyBounded(new Response("hello"), 10, "t")).length, 5);
  });

  it("reads exactly the requested length, refusing short and long bodies", async () => {
    assert.deepEqual(await readBodyExactly(new Response(Uint8Array.of(1, 2, 3)), 3, "t"), Uint8Array.of(1, 2, 3));
    await assert.rejects(readBodyExactly(new Response(Uint8Array.of(1, 2)), 3, "t"), /ended after 2 of 3 bytes/);
    await assert.rejects(readBodyExactly(new Response(Uint8Array.of(1, 2, 3, 4)), 3, "t"), /more than the 3 bytes|announced 4/);
  });
});
