import assert from "node:assert/strict";
import { once } from "node:events";
import type { Socket } from "node:net";
import { describe, it } from "node:test";
import type { FastifyInstance } from "fastify";
import { createHttpApp } from "../../src/http/app.js";
import { createLogger } from "../../src/http/logging.js";
import { openSocket, readUntilClosed } from "../helpers/raw-socket.js";
import { settlesWithin, until, within } from "../helpers/wait.js";

/** An app with a route that waits until the test releases it. */
async function startApp(): Promise<{ app: FastifyInstance; port: number; entered: Promise<void>; release: () => void }> {
  const app = createHttpApp({ logger: createLogger("silent") });
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let entered!: () => void;
  const enteredPromise = new Promise<void>((resolve) => (entered = resolve));
  app.get("/slow", async () => {
    entered();
    await released;
    return { done: true };
  });
  app.get("/fast", async () => ({ fast: true }));
  await app.listen({ host: "127.0.0.1", port: 0 });
  const address = app.server.address();
  assert.ok(address !== null && typeof address === "object");
  return { app, port: address.port, entered: enteredPromise, release };
}

/** Closing began: the listener is closed (Node announces that with no event of its own). */
function stoppedListening(app: FastifyInstance): Promise<void> {
  return until(() => !app.server.listening, "the listener to close");
}

describe("graceful close", () => {
  it("stops accepting, finishes the request in progress with Connection: close, then resolves", async () => {
    const { app, port, entered, release } = await startApp();
    const socket = await openSocket(port);
    const answer = readUntilClosed(socket);
    socket.write("GET /slow HTTP/1.1\r\nHost: castor\r\n\r\n");
    await entered;

    const closed = app.close();
    try {
      await stoppedListening(app);
      await assert.rejects(openSocket(port), { code: "ECONNREFUSED" });
      // Nothing to wait for here but time: close would resolve within milliseconds if it did
      // not wait for the request, which the test holds until it releases it below.
      assert.equal(await settlesWithin(closed, 200), false, "close waits for the request in progress");
    } finally {
      release();
    }
    const response = await answer;
    assert.match(response, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(response, /\r\nconnection: close\r\n/i);
    assert.match(response, /\{"done":true\}$/);
    assert.equal(await settlesWithin(closed, 2000), true);
  });

  it("serves a request that was only partly received when closing began, and does not linger on keep-alive", async () => {
    const { app, port } = await startApp();
    const accepted = once(app.server, "connection") as Promise<[Socket]>;
    const socket = await openSocket(port);
    const [serverSide] = await within(accepted, "the server to accept the connection");
    const answer = readUntilClosed(socket);
    const firstPart = "GET /fast HTTP/1.1\r\nHost: cas";
    socket.write(firstPart);
    // The server's HTTP parser has read the first part: the request is in progress, not idle.
    await until(() => serverSide.bytesRead === firstPart.length, "the server to read the first part of the request");

    const closed = app.close();
    await stoppedListening(app);
    socket.write("tor\r\n\r\n");

    const response = await answer;
    assert.match(response, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(response, /\r\nconnection: close\r\n/i);
    assert.match(response, /\{"fast":true\}$/);
    assert.equal(await settlesWithin(closed, 2000), true, "close does not wait for the 72 s keep-alive timeout");
  });

  it("closes a connection whose answer went out before its body arrived, without waiting for the body", async () => {
    const { app, port } = await startApp();
    const socket = await openSocket(port);
    const answer = readUntilClosed(socket);
    // A GET with a body: fastify answers at once, while the body is still arriving. Such an
    // early answer closes its connection (connection-limits.ts), so nothing is left to reap.
    socket.write("GET /fast HTTP/1.1\r\nHost: castor\r\nContent-Length: 10\r\n\r\n01234");
    const response = await answer;
    assert.match(response, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(response, /\r\nconnection: close\r\n/i);
    assert.equal(await settlesWithin(app.close(), 2000), true);
  });
});
