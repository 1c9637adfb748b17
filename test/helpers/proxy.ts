/**
 * A small reverse proxy for the multi-node tests: one public URL (the `CASTOR_PUBLIC_URL` of
 * every node) in front of several `castor serve` processes, doing what nginx's `upstream` block
 * does in production, in a form a test can steer and watch.
 *
 * - Routing: round-robin over the live nodes, or pinned to one node (so a real client that
 *   cannot pick a node — hf_xet — still talks to the node the test means). A single request
 *   can name its node with the `x-castor-test-node` header, which the proxy strips.
 * - Failure: a node that refuses or resets a connection is marked down for `downForMs` (nginx's
 *   `max_fails=1 fail_timeout=…`), and traffic goes to the next live node. A request without a
 *   body (GET, HEAD) that could not reach its node is retried on the next one (nginx's
 *   `proxy_next_upstream error`). A request whose body was already being streamed cannot be
 *   replayed — the proxy keeps no copy — so it is answered 502 (or its connection is cut, if
 *   the node died mid-answer), and the client's own retry then reaches a live node.
 * - Watching: every request is logged with the node that handled it, its status and how it
 *   ended; listeners see request bodies stream by (to kill a node mid-upload). Each answer
 *   carries `x-castor-test-served-by` naming the node.
 *
 * Bodies are streamed in both directions, never buffered, so a 64 MiB xorb costs no memory here.
 */
import http, { type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/** Request header naming the node (upstream name) one request must go to. */
export const ROUTE_HEADER = "x-castor-test-node";
/** Response header naming the node that answered. */
export const SERVED_BY_HEADER = "x-castor-test-served-by";

export type ProxyRoute = { mode: "round-robin" } | { mode: "pin"; node: string };

export interface ProxyOptions {
  /** Node name → base URL (`http://127.0.0.1:port`). More can be added with `setUpstream`. */
  upstreams?: Record<string, string>;
  /** Default: round-robin. */
  route?: ProxyRoute;
  /** How long a node that failed a connection is skipped. Default 30 s (a test's lifetime). */
  downForMs?: number;
}

/** How a proxied request ended. */
export type ProxyOutcome =
  /** The node's answer was relayed whole. */
  | "ok"
  /** The node could not be reached or died before answering; the client got a 502. */
  | "bad-gateway"
  /** The node died (or the connection broke) mid-answer; the client's connection was cut. */
  | "cut"
  /** The client went away first. */
  | "client-aborted"
  /** In progress. */
  | "pending";

export interface ProxiedRequest {
  readonly id: number;
  readonly method: string;
  /** Path without the query string (transfer URLs carry signatures there). */
  readonly path: string;
  /** Nodes tried, in order; the last one answered (or failed last). */
  readonly nodes: string[];
  status: number | null;
  outcome: ProxyOutcome;
  /** Request body bytes forwarded so far. */
  requestBytes: number;
  /** Why the last node failed, when one did (`ECONNREFUSED`, `ECONNRESET`, …). */
  failure: string | null;
}

/** Sees a request's body stream by: called after each piece is forwarded to `node`. */
export type BodyListener = (request: Readonly<ProxiedRequest>, node: string) => void;

export interface TestProxy {
  /** The one public URL, e.g. http://127.0.0.1:40123 (no trailing slash). */
  readonly url: string;
  /** Adds a node, or points an existing name at a new process (a restarted node); it counts as live. */
  setUpstream(name: string, baseUrl: string): void;
  setRoute(route: ProxyRoute): void;
  /** Nodes not currently marked down. */
  liveNodes(): string[];
  /** Every request so far (copies), oldest first; from index `from` on. */
  requests(from?: number): ProxiedRequest[];
  /** Registers a listener for request-body progress; returns the function that removes it. */
  onRequestBody(listener: BodyListener): () => void;
  /** Stops listening and cuts every open connection. */
  close(): Promise<void>;
}

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  ROUTE_HEADER,
]);

/** Copies end-to-end headers; hop-by-hop ones (RFC 9110 §7.6.1) belong to each connection. */
function endToEndHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const connectionListed = new Set(
    String(headers.connection ?? "")
      .split(",")
      .map((name) => name.trim().toLowerCase())
      .filter(Boolean),
  );
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || connectionListed.has(name)) continue;
    out[name] = value;
  }
  return out;
}

/** Codes meaning the node never got (or never answered) the request: another node may take it. */
const CONNECT_FAILURES = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT"]);

export async function startProxy(options: ProxyOptions = {}): Promise<TestProxy> {
  const upstreams = new Map<string, URL>();
  const downUntil = new Map<string, number>();
  const downForMs = options.downForMs ?? 30_000;
  let route: ProxyRoute = options.route ?? { mode: "round-robin" };
  let nextRoundRobin = 0;
  const log: ProxiedRequest[] = [];
  const bodyListeners = new Set<BodyListener>();
  // One keep-alive pool per proxy, so closing it closes every upstream connection it opened.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

  const setUpstream = (name: string, baseUrl: string) => {
    const url = new URL(baseUrl);
    if (url.protocol !== "http:") throw new Error(`the test proxy speaks plain http to its nodes, got ${baseUrl}`);
    upstreams.set(name, url);
    downUntil.delete(name);
  };
  for (const [name, baseUrl] of Object.entries(options.upstreams ?? {})) setUpstream(name, baseUrl);

  const isLive = (name: string) => (downUntil.get(name) ?? 0) <= Date.now();
  const liveNodes = () => [...upstreams.keys()].filter(isLive);

  /** The node for a new attempt: the requested one, else the route's choice among live nodes not yet tried. */
  function pickNode(requested: string | null, tried: readonly string[]): string | null {
    if (requested !== null) return tried.length === 0 && upstreams.has(requested) ? requested : null;
    const candidates = liveNodes().filter((name) => !tried.includes(name));
    if (candidates.length === 0) return null;
    if (route.mode === "pin" && candidates.includes(route.node)) return route.node;
    // Round-robin, and a pinned node's failover: the next live node in turn.
    const names = [...upstreams.keys()];
    for (let i = 0; i < names.length; i++) {
      const name = names[(nextRoundRobin + i) % names.length];
      if (candidates.includes(name)) {
        nextRoundRobin = (names.indexOf(name) + 1) % names.length;
        return name;
      }
    }
    return null;
  }

  function badGateway(res: ServerResponse, entry: ProxiedRequest, message: string): void {
    entry.status = 502;
    entry.outcome = "bad-gateway";
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = JSON.stringify({ error: message });
    // Connection: close — the client may still be sending a body nobody will read.
    res.writeHead(502, { "content-type": "application/json", "content-length": Buffer.byteLength(body), connection: "close" });
    res.end(body, () => res.socket?.destroySoon());
  }

  function handle(req: IncomingMessage, res: ServerResponse): void {
    const entry: ProxiedRequest = {
      id: log.length,
      method: req.method ?? "GET",
      path: (req.url ?? "/").replace(/\?.*$/s, ""),
      nodes: [],
      status: null,
      outcome: "pending",
      requestBytes: 0,
      failure: null,
    };
    log.push(entry);
    const requestedHeader = req.headers[ROUTE_HEADER];
    const requested = typeof requestedHeader === "string" ? requestedHeader : null;
    if (requested !== null && !upstreams.has(requested)) {
      req.resume();
      badGateway(res, entry, `the test proxy has no node named ${JSON.stringify(requested)} (${ROUTE_HEADER}); it knows ${[...upstreams.keys()].join(", ")}`);
      return;
    }
    // GET and HEAD carry no body, so they can be sent again to another node.
    const replayable =
      (entry.method === "GET" || entry.method === "HEAD") && req.headers["content-length"] === undefined && req.headers["transfer-encoding"] === undefined;
    let clientGone = false;
    // The node's answer being relayed: a client that has read a whole answer may close its
    // connection before the proxy's own end-of-answer event has run; that answer was still
    // relayed whole.
    let answer: IncomingMessage | null = null;
    const answerRelayedWhole = () => answer?.complete && answer.readableLength === 0;
    res.on("close", () => {
      if (entry.outcome !== "pending") return;
      if (answerRelayedWhole()) entry.outcome = "ok";
      else if (!res.writableFinished) {
        clientGone = true;
        entry.outcome = "client-aborted";
      }
    });

    const attempt = (): void => {
      const node = pickNode(requested, entry.nodes);
      if (node === null) {
        req.resume();
        badGateway(
          res,
          entry,
          `no live castor node to send ${entry.method} ${entry.path} to (tried: ${entry.nodes.join(", ") || "none"}; last failure: ${entry.failure ?? "none"})`,
        );
        return;
      }
      entry.nodes.push(node);
      const target = upstreams.get(node)!;
      const upstreamReq = http.request({
        agent,
        protocol: target.protocol,
        hostname: target.hostname,
        port: target.port,
        method: entry.method,
        path: req.url,
        headers: endToEndHeaders(req.headers),
      });
      let answered = false;

      upstreamReq.on("response", (upstreamRes) => {
        answered = true;
        answer = upstreamRes;
        entry.status = upstreamRes.statusCode ?? 502;
        if (clientGone) {
          upstreamRes.destroy();
          return;
        }
        res.writeHead(entry.status, { ...endToEndHeaders(upstreamRes.headers), [SERVED_BY_HEADER]: node });
        upstreamRes.pipe(res);
        upstreamRes.on("end", () => {
          if (entry.outcome === "pending") entry.outcome = "ok";
        });
        // The node died mid-answer: the bytes so far are already the client's, so all that is
        // left is to cut the connection (a complete-looking short answer would be worse).
        upstreamRes.on("aborted", () => cut(node, "ECONNRESET"));
        upstreamRes.on("error", (error) => cut(node, (error as NodeJS.ErrnoException).code ?? error.message));
      });

      const cut = (failedNode: string, reason: string) => {
        if (entry.outcome !== "pending") return;
        entry.outcome = "cut";
        entry.failure = reason;
        downUntil.set(failedNode, Date.now() + downForMs);
        res.destroy();
        req.destroy();
      };

      upstreamReq.on("error", (error: NodeJS.ErrnoException) => {
        if (answered) return cut(node, error.code ?? error.message);
        if (clientGone) return;
        entry.failure = error.code ?? error.message;
        if (error.code !== undefined && CONNECT_FAILURES.has(error.code)) downUntil.set(node, Date.now() + downForMs);
        req.unpipe(upstreamReq);
        if (replayable && entry.requestBytes === 0) {
          attempt();
          return;
        }
        badGateway(
          res,
          entry,
          `castor node ${node} failed during ${entry.method} ${entry.path} (${entry.failure}) after ${entry.requestBytes} request body bytes; retry the request`,
        );
      });

      res.once("close", () => {
        if (clientGone) upstreamReq.destroy();
      });
      // A retried GET: its (empty) body already ended, so a pipe would never end the new request.
      if (req.readableEnded) upstreamReq.end();
      else req.pipe(upstreamReq);
    };

    req.on("data", (piece: Buffer) => {
      entry.requestBytes += piece.length;
      const node = entry.nodes.at(-1);
      if (node !== undefined) for (const listener of bodyListeners) listener(entry, node);
    });
    attempt();
  }

  const sockets = new Set<Socket>();
  const server = http.createServer(handle);
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    setUpstream,
    setRoute(next) {
      if (next.mode === "pin" && !upstreams.has(next.node)) throw new Error(`cannot pin the proxy to unknown node ${JSON.stringify(next.node)}`);
      route = next;
    },
    liveNodes,
    requests: (from = 0) => log.slice(from).map((entry) => ({ ...entry, nodes: [...entry.nodes] })),
    onRequestBody(listener) {
      bodyListeners.add(listener);
      return () => bodyListeners.delete(listener);
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      agent.destroy();
      await closed;
    },
  };
}
