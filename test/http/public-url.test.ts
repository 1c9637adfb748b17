/**
 * The base of the URLs in answers (src/http/public-url.ts), on a real fastify app bound to
 * 127.0.0.1: a loopback name of the server (`localhost`, the address, with the bound port) is
 * answered with that origin when CASTOR_PUBLIC_URL is not set; any other Host — forged or of
 * another server — gets the public URL; a mismatch that will break clients is logged once.
 */
import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { loadConfig } from "../../src/config.js";
import { createHttpApp } from "../../src/http/app.js";
import { createLogger } from "../../src/http/logging.js";
import { PublicUrls } from "../../src/http/public-url.js";

interface Served {
  app: FastifyInstance;
  port: number;
  warnings: Record<string, unknown>[];
  /** The base URL answered to a request with this Host header (and extra headers). */
  baseFor(host: string, headers?: Record<string, string>): Promise<string>;
}

async function serve(env: Record<string, string>, trustedProxies: string[] = []): Promise<Served> {
  const warnings: Record<string, unknown>[] = [];
  const logger = createLogger("warn", {
    write: (line: string) => {
      warnings.push(JSON.parse(line));
    },
  });
  const publicUrls = new PublicUrls({ config: loadConfig({ CASTOR_LISTEN: "127.0.0.1:0", ...env }), logger });
  const app = createHttpApp({ logger, trustedProxies });
  app.get("/base", async (request) => ({ base: publicUrls.forRequest(request) }));
  await app.listen({ host: "127.0.0.1", port: 0 });
  const { address, port } = app.server.address() as AddressInfo;
  publicUrls.bind(address, port);
  const baseFor = (host: string, headers: Record<string, string> = {}) =>
    new Promise<string>((resolve, reject) => {
      // node:http, not fetch: the Host header is sent exactly as given.
      const request = httpRequest({ host: "127.0.0.1", port, path: "/base", headers: { ...headers, host } }, (response) => {
        let body = "";
        response.setEncoding("utf8").on("data", (text: string) => (body += text));
        response.on("end", () => (response.statusCode === 200 ? resolve(JSON.parse(body).base) : reject(new Error(`${response.statusCode}: ${body}`))));
      });
      request.on("error", reject).end();
    });
  return { app, port, warnings, baseFor };
}

describe("the public URL of answers, CASTOR_PUBLIC_URL unset, listening on 127.0.0.1", () => {
  let served: Served;

  before(async () => {
    served = await serve({});
  });

  after(async () => {
    await served?.app.close();
  });

  it("answers a client that used localhost or 127.0.0.1 (with the bound port) with that origin", async () => {
    const { port, baseFor } = served;
    assert.equal(await baseFor(`localhost:${port}`), `http://localhost:${port}`);
    assert.equal(await baseFor(`LocalHost:${port}`), `http://localhost:${port}`);
    assert.equal(await baseFor(`127.0.0.1:${port}`), `http://127.0.0.1:${port}`);
    assert.deepEqual(served.warnings, [], "nothing to warn of");
  });

  it("answers any other Host — forged, another port, another address — with the public URL", async () => {
    const { port, baseFor } = served;
    const publicUrl = `http://127.0.0.1:${port}`;
    for (const host of [
      "evil.example",
      `evil.example:${port}`,
      `localhost:${port + 1}`,
      "localhost",
      `[::1]:${port}`,
      `127.0.0.2:${port}`,
      `localhost.evil.example:${port}`,
    ]) {
      assert.equal(await baseFor(host), publicUrl, `Host: ${host}`);
    }
  });

  it("never takes the origin from X-Forwarded-Host of an untrusted peer", async () => {
    const { port, baseFor } = served;
    assert.equal(await baseFor("evil.example", { "x-forwarded-host": `localhost:${port}` }), `http://127.0.0.1:${port}`);
  });

  it("warns once, naming both, of a Host whose clients will refuse the answers", async () => {
    const { port } = served;
    const warnings = served.warnings.filter((line) => line.publicUrl !== undefined);
    assert.equal(warnings.length, 1, JSON.stringify(served.warnings));
    assert.equal(warnings[0].publicUrl, `http://127.0.0.1:${port}`);
    assert.equal(warnings[0].requestOrigin, "http://evil.example");
    assert.match(String(warnings[0].msg), /CASTOR_PUBLIC_URL/);
  });
});

describe("the public URL of answers, CASTOR_PUBLIC_URL set", () => {
  it("answers every request with it, a loopback name too, and warns once of a client on another host", async () => {
    const served = await serve({ CASTOR_PUBLIC_URL: "https://cas.example.com" });
    try {
      assert.equal(await served.baseFor("cas.example.com"), "https://cas.example.com");
      assert.equal(served.warnings.length, 0, "a proxy that passes the Host is no mismatch");
      assert.equal(await served.baseFor(`localhost:${served.port}`), "https://cas.example.com");
      assert.equal(await served.baseFor(`127.0.0.1:${served.port}`), "https://cas.example.com");
      assert.equal(served.warnings.length, 1);
      assert.deepEqual([served.warnings[0].requestOrigin, served.warnings[0].publicUrl], [`http://localhost:${served.port}`, "https://cas.example.com"]);
    } finally {
      await served.app.close();
    }
  });

  it("takes the host a client used from X-Forwarded-Host of a trusted proxy only", async () => {
    const served = await serve({ CASTOR_PUBLIC_URL: "https://cas.example.com" }, ["127.0.0.1"]);
    try {
      const forwarded = { "x-forwarded-host": "cas.example.com", "x-forwarded-proto": "https" };
      assert.equal(await served.baseFor(`127.0.0.1:${served.port}`, forwarded), "https://cas.example.com");
      assert.deepEqual(served.warnings, [], "the proxy's clients used the public host");
    } finally {
      await served.app.close();
    }
    const untrusted = await serve({ CASTOR_PUBLIC_URL: "https://cas.example.com" });
    try {
      assert.equal(await untrusted.baseFor(`127.0.0.1:${untrusted.port}`, { "x-forwarded-host": "cas.example.com" }), "https://cas.example.com");
      assert.equal(untrusted.warnings[0]?.requestOrigin, `http://127.0.0.1:${untrusted.port}`, "the header of an untrusted peer is ignored");
    } finally {
      await untrusted.app.close();
    }
  });
});

describe("the public URL of answers behind a proxy on the same machine, CASTOR_PUBLIC_URL unset", () => {
  it("warns that the proxy's clients, who used another host, will refuse the answers", async () => {
    const served = await serve({}, ["127.0.0.1"]);
    try {
      const base = await served.baseFor(`localhost:${served.port}`, { "x-forwarded-host": "cas.example.com", "x-forwarded-proto": "https" });
      assert.equal(base, `http://localhost:${served.port}`, "the Host the proxy sent names castor itself");
      assert.equal(served.warnings.length, 1);
      assert.deepEqual([served.warnings[0].requestOrigin, served.warnings[0].publicUrl], ["https://cas.example.com", `http://localhost:${served.port}`]);
    } finally {
      await served.app.close();
    }
  });
});
