/**
 * The bulk transports against a real local HTTP server: `getInto` (the raw keep-alive range
 * reader and its fallback through node:http) and `request({ bulk: true })` (node:http sends,
 * redirects, web-stream bodies). Statuses, framings and failures the raw reader leaves alone
 * must come out exactly as through the general path.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createNetServer, type AddressInfo, type Socket } from "node:net";
import { after, before, beforeEach, describe, it } from "node:test";
import { CastorClientError, HttpStatusError } from "../../src/client/errors.js";
import { HttpClient, readBodyInto, readJson } from "../../src/client/http.js";
import { nodeSend } from "../../src/client/node-transport.js";
import { RawRangeClient } from "../../src/client/raw-range.js";
import { within } from "../helpers/wait.js";

type Handler = (request: IncomingMessage, response: ServerResponse, body: Buffer) => void;

const BODY = Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7 + 3) & 0xff));

let server: Server;
let base: string;
let handler: Handler;
/** Every connection the server accepted, in order. */
let connections: Socket[];
let requests: { method: string; url: string; headers: IncomingMessage["headers"] }[];

before(async () => {
  server = createServer((request, response) => {
    const parts: Buffer[] = [];
    request.on("data", (part: Buffer) => parts.push(part));
    request.on("end", () => {
      requests.push({ method: request.method!, url: request.url!, headers: request.headers });
      handler(request, response, Buffer.concat(parts));
    });
  });
  server.on("connection", (socket) => connections.push(socket));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

beforeEach(() => {
  connections = [];
  requests = [];
  handler = serveRange;
});

/** 206 with the requested slice of BODY, as castor's transfer route answers. */
function serveRange(request: IncomingMessage, response: ServerResponse): void {
  const [, start, end] = /^bytes=(\d+)-(\d+)$/.exec(request.headers.range ?? "") ?? [];
  const slice = BODY.subarray(Number(start), Number(end) + 1);
  response.writeHead(206, { "content-length": String(slice.length), "content-range": `bytes ${start}-${end}/${BODY.length}` });
  response.end(slice);
}

function client(): HttpClient {
  return new HttpClient({ retry: { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 5 } });
}

async function getRange(http: HttpClient, start: number, end: number, passStatuses: number[] = []) {
  const into = new Uint8Array(end - start + 1);
  const progress: number[] = [];
  const result = await http.getInto(
    { what: "fetching a range", url: `${base}/xorb?sig=1`, headers: { range: `bytes=${start}-${end}` }, passStatuses },
    into,
    (filled) => progress.push(filled),
  );
  return { result, into, progress };
}

describe("getInto over the raw keep-alive reader", () => {
  it("fills the buffer with the range, reports rising fill levels, and reuses one connection", async () => {
    const http = client();
    for (const [start, end] of [
      [0, 299_999],
      [5, 5],
      [1000, 250_000],
    ]) {
      const { result, into, progress } = await getRange(http, start, end);
      assert.equal(result.status, 206);
      assert.ok(Buffer.from(into).equals(BODY.subarray(start, end + 1)));
      assert.equal(progress.at(-1), into.length);
      assert.deepEqual(
        progress,
        [...progress].sort((a, b) => a - b),
      );
    }
    assert.ok(connections.length <= 1, "keep-alive: at most one new connection for three ranges");
    assert.equal(requests[0].headers.range, "bytes=0-299999");
    assert.equal(requests[0].headers.authorization, undefined);
    assert.equal(requests[0].url, "/xorb?sig=1");
  });

  it("takes a new connection when the server closed the idle one", async () => {
    const http = client();
    await getRange(http, 0, 99);
    const closed = connections.map((socket) => once(socket, "close"));
    server.closeAllConnections();
    await within(Promise.all(closed), "the server to close its connections");
    const opened = connections.length;
    const { into } = await getRange(http, 100, 199);
    assert.ok(Buffer.from(into).equals(BODY.subarray(100, 200)));
    assert.equal(connections.length, opened + 1);
  });

  it("retries a keep-alive connection that breaks before the answer", async () => {
    const http = client();
    await getRange(http, 0, 9);
    let broken = false;
    handler = (request, response) => {
      if (!broken) {
        broken = true;
        request.socket.destroy();
        return;
      }
      serveRange(request, response);
    };
    const { into } = await getRange(http, 10, 19);
    assert.ok(Buffer.from(into).equals(BODY.subarray(10, 20)));
  });

  it("asks again for a range whose connection breaks mid-body, whole", async () => {
    let cut = 0;
    handler = (request, response) => {
      if (cut++ > 0) return serveRange(request, response);
      response.writeHead(206, { "content-length": "1000" });
      // Once the first 400 bytes are handed to the kernel, which still delivers them before the FIN.
      response.write(BODY.subarray(0, 400), () => request.socket.destroy());
    };
    const { into, progress } = await getRange(client(), 0, 999);
    assert.ok(Buffer.from(into).equals(BODY.subarray(0, 1000)));
    assert.equal(requests.length, 2);
    assert.deepEqual(requests[1].headers.range, "bytes=0-999", "the whole range again: signed ranges cannot be resumed");
    // The first attempt's 400 bytes were reported, then the second attempt's, up to the whole range.
    assert.ok(progress.includes(400) && progress.at(-1) === 1000, `fill levels ${progress.join(" ")}`);
  });

  it("fails with a network error once every attempt broke mid-body", async () => {
    handler = (request, response) => {
      response.writeHead(206, { "content-length": "1000" });
      response.write(BODY.subarray(0, 400), () => request.socket.destroy());
    };
    await assert.rejects(
      getRange(client(), 0, 999),
      (error: unknown) => error instanceof CastorClientError && error.kind === "network" && /mid-body: .*\(3 attempts\)$/.test(error.message),
    );
    assert.equal(requests.length, 3);
  });

  it("refuses a body announced with another length than the range", async () => {
    handler = (_request, response) => {
      response.writeHead(206, { "content-length": "5" });
      response.end("12345");
    };
    await assert.rejects(
      getRange(client(), 0, 9),
      (error: unknown) => error instanceof CastorClientError && error.kind === "protocol" && /expected 10 bytes, the server announced 5/.test(error.message),
    );
  });

  it("hands statuses, chunked bodies and oversized headers to the general path, which reads them", async () => {
    // A 403 passes through (expired URL), asked twice: once raw, once through node:http.
    handler = (_request, response) => {
      response.writeHead(403, { "content-type": "application/json" });
      response.end(JSON.stringify({ error: "expired" }));
    };
    assert.equal((await getRange(client(), 0, 9, [403])).result.status, 403);
    assert.equal(requests.length, 2);

    // Other statuses fail with the server's message.
    handler = (_request, response) => {
      response.writeHead(404, { "content-type": "application/json" });
      response.end(JSON.stringify({ error: "no such xorb" }));
    };
    await assert.rejects(
      getRange(client(), 0, 9),
      (error: unknown) => error instanceof HttpStatusError && error.status === 404 && /no such xorb/.test(error.message),
    );

    // A chunked body (no Content-Length) and a huge header are read by node:http.
    for (const variant of ["chunked", "big-header"]) {
      requests = [];
      handler = (request, response) => {
        const [, start, end] = /^bytes=(\d+)-(\d+)$/.exec(request.headers.range!)!;
        const slice = BODY.subarray(Number(start), Number(end) + 1);
        if (variant === "big-header") response.setHeader("x-padding", "p".repeat(10_000));
        response.writeHead(206, variant === "chunked" ? {} : { "content-length": String(slice.length) });
        response.write(slice.subarray(0, 100));
        response.end(slice.subarray(100));
      };
      const { into, progress } = await getRange(client(), 7, 50_006);
      assert.ok(Buffer.from(into).equals(BODY.subarray(7, 50_007)), variant);
      assert.equal(progress.at(-1), 50_000);
      assert.equal(requests.length, 2, `${variant}: asked raw, then through node:http`);
    }
  });

  it("retries 5xx through the general path", async () => {
    let calls = 0;
    handler = (request, response) => {
      if (++calls <= 2) {
        response.writeHead(503);
        response.end();
        return;
      }
      serveRange(request, response);
    };
    const { into } = await getRange(client(), 0, 99);
    assert.ok(Buffer.from(into).equals(BODY.subarray(0, 100)));
  });

  it("lets a throw in onProgress abort the read", async () => {
    const into = new Uint8Array(BODY.length);
    await assert.rejects(
      client().getInto({ what: "t", url: `${base}/x`, headers: { range: `bytes=0-${BODY.length - 1}` } }, into, () => {
        throw new CastorClientError("protocol", "bad chunk");
      }),
      /bad chunk/,
    );
  });

  it("retries a refused connection, then reports it with advice", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/x`;
    await new Promise((resolve) => closed.close(resolve));
    await assert.rejects(
      client().getInto({ what: "fetching", url, headers: { range: "bytes=0-9" } }, new Uint8Array(10)),
      (error: unknown) => error instanceof CastorClientError && error.kind === "network" && /ECONNREFUSED \(3 attempts\)/.test(error.message),
    );
  });

  it("is used only without a custom fetch: with one, every request goes through it", async () => {
    const seen: string[] = [];
    const http = new HttpClient({
      fetch: async (input, init) => {
        seen.push(String(input));
        return fetch(input, init);
      },
    });
    const into = new Uint8Array(10);
    await http.getInto({ what: "t", url: `${base}/y`, headers: { range: "bytes=0-9" } }, into);
    assert.deepEqual(seen, [`${base}/y`]);
    assert.ok(Buffer.from(into).equals(BODY.subarray(0, 10)));
  });
});

describe("RawRangeClient", () => {
  it("refuses an answer that is not HTTP/1.x, and one longer than it announced", async () => {
    for (const answer of ["SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 206 Partial Content\r\ncontent-length: 2\r\n\r\nabcdef"]) {
      const liar = createNetServer((socket) => {
        socket.once("data", () => socket.end(answer));
      });
      await new Promise<void>((resolve) => liar.listen(0, "127.0.0.1", resolve));
      try {
        const url = `http://127.0.0.1:${(liar.address() as AddressInfo).port}/x`;
        await assert.rejects(
          client().getInto({ what: "fetching", url, headers: { range: "bytes=0-1" } }, new Uint8Array(2)),
          (error: unknown) =>
            error instanceof CastorClientError && error.kind === "protocol" && /HTTP\/1\.x status line|more than the body/.test(error.message),
          answer,
        );
      } finally {
        await new Promise((resolve) => liar.close(resolve));
      }
    }
  });

  it("reports https and non-2xx answers as fallback without delivering a byte", async () => {
    const raw = new RawRangeClient();
    assert.deepEqual(await raw.get(new URL("https://example.invalid/x"), {}, new Uint8Array(1)), { kind: "fallback", status: null });
    handler = (_request, response) => {
      response.writeHead(416, { "content-range": "bytes */5", "content-length": "0" });
      response.end();
    };
    let delivered = 0;
    assert.deepEqual(await raw.get(new URL(`${base}/x`), { range: "bytes=9-9" }, new Uint8Array(1), () => delivered++), { kind: "fallback", status: 416 });
    assert.equal(delivered, 0);
  });

  it("refuses header values with line breaks", () => {
    assert.throws(() => new RawRangeClient().get(new URL(`${base}/x`), { range: "bytes=0-1\r\nx: y" }, new Uint8Array(2)), TypeError);
  });
});

describe("request({ bulk: true }) over node:http", () => {
  it("sends the body as is and reads the JSON answer", async () => {
    handler = (request, response, body) => {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ length: body.length, sha: body.equals(BODY), method: request.method }));
    };
    const response = await client().request({ what: "uploading", url: `${base}/xorb`, method: "POST", body: BODY, bulk: true });
    assert.deepEqual(await readJson(response, 1000, "t"), { length: BODY.length, sha: true, method: "POST" });
    assert.equal(requests[0].headers["content-length"], String(BODY.length));
  });

  it("follows redirects, keeping a 307 POST's body and dropping credentials on another origin", async () => {
    const other = createServer((request, response) => {
      const parts: Buffer[] = [];
      request.on("data", (part: Buffer) => parts.push(part));
      request.on("end", () => {
        response.writeHead(200, { "content-type": "application/json" });
        response.end(JSON.stringify({ authorization: request.headers.authorization ?? null, length: Buffer.concat(parts).length }));
      });
    });
    await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
    try {
      const target = `http://127.0.0.1:${(other.address() as AddressInfo).port}/final`;
      handler = (_request, response) => {
        response.writeHead(307, { location: target });
        response.end();
      };
      const response = await nodeSend(`${base}/start`, { method: "POST", headers: { authorization: "Bearer secret" }, body: BODY.subarray(0, 1234) });
      assert.deepEqual(await response.json(), { authorization: null, length: 1234 });
    } finally {
      await new Promise((resolve) => other.close(resolve));
    }
  });

  it("reads a bulk answer into a buffer without a web stream, and reports a short body", async () => {
    handler = serveRange;
    const response = await nodeSend(`${base}/r`, { method: "GET", headers: { range: "bytes=0-999" } });
    const into = new Uint8Array(1000);
    await readBodyInto(response, into, "t");
    assert.ok(Buffer.from(into).equals(BODY.subarray(0, 1000)));

    handler = (_request, response) => {
      response.writeHead(200);
      response.end(BODY.subarray(0, 10));
    };
    await assert.rejects(readBodyInto(await nodeSend(`${base}/r`, { method: "GET", headers: {} }), new Uint8Array(20), "t"), /ended after 10 of 20 bytes/);
  });

  it("answers null-body statuses with an empty Response", async () => {
    handler = (_request, response) => {
      response.writeHead(204);
      response.end();
    };
    const response = await nodeSend(`${base}/n`, { method: "GET", headers: {} });
    assert.equal(response.status, 204);
    assert.equal(response.body, null);
  });
});
