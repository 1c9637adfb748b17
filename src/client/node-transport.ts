/**
 * Bulk HTTP over `node:http`/`node:https`: xorb uploads, and the xorb range downloads that
 * raw-range.ts leaves to it (https, answers other than a plain 200/206 with a length).
 *
 * Why not `fetch` for these: measured on a 64 MiB body, undici's fetch spends ~4× the CPU of
 * `node:http` to send it (it copies a `Uint8Array` body twice on the way to the socket) and
 * ~2× to receive it (every piece goes through a web stream and a promise). Small requests
 * (tokens, reconstructions, dedup, shards) keep using `fetch`.
 *
 * The answer is still a standard `Response`, so callers need not care which transport made it.
 * Its body is a lazy web stream over the node message; `takeNodeBody` lets the bulk readers
 * in http.ts bypass that stream and copy the message's pieces straight into their buffer.
 */
import http, { type IncomingMessage } from "node:http";
import https from "node:https";

/** No byte sent or received for this long fails the attempt (fetch's own limit is 300 s). */
export const IDLE_TIMEOUT_MS = 120_000;
const MAX_REDIRECTS = 5;
/** Statuses `new Response` refuses a body for. */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

const agents = {
  "http:": new http.Agent({ keepAlive: true }),
  "https:": new https.Agent({ keepAlive: true }),
};

export interface NodeRequestInit {
  method: string;
  headers: Record<string, string>;
  body?: Uint8Array;
}

/** The node message behind a `Response` from `nodeSend`, until a reader claims it. */
const nodeBodies = new WeakMap<Response, IncomingMessage>();

/**
 * The response's body as the node message, for a reader that consumes it whole; null when the
 * response did not come from `nodeSend` or its web body was already touched. Claiming is
 * exclusive: afterwards the web body must not be read.
 */
export function takeNodeBody(response: Response): IncomingMessage | null {
  const message = nodeBodies.get(response);
  if (message === undefined || response.bodyUsed) return null;
  nodeBodies.delete(response);
  return message;
}

/** A network failure shaped like fetch's (`cause.code`), so error reporting has one path. */
export class NodeTransportError extends TypeError {
  constructor(cause: Error) {
    super("request failed", { cause });
  }
}

/** Sends one request, following up to 5 redirects as fetch does; rejects on network failure. */
export async function nodeSend(url: string, init: NodeRequestInit): Promise<Response> {
  let target = new URL(url);
  let { method, headers, body } = init;
  for (let hops = 0; ; hops++) {
    const message = await sendOnce(target, method, headers, body);
    const status = message.statusCode ?? 0;
    const location = message.headers.location;
    if (status >= 300 && status < 400 && status !== 304 && location !== undefined && hops < MAX_REDIRECTS) {
      message.resume();
      const next = new URL(location, target);
      if (next.origin !== target.origin) {
        // As fetch does: credentials are for the origin they were given to.
        headers = Object.fromEntries(Object.entries(headers).filter(([name]) => name.toLowerCase() !== "authorization"));
      }
      if (status === 303 || ((status === 301 || status === 302) && method === "POST")) {
        method = "GET";
        body = undefined;
      }
      target = next;
      continue;
    }
    return toResponse(message);
  }
}

function sendOnce(url: URL, method: string, headers: Record<string, string>, body: Uint8Array | undefined): Promise<IncomingMessage> {
  const transport = url.protocol === "https:" ? https : url.protocol === "http:" ? http : null;
  if (transport === null) return Promise.reject(new NodeTransportError(new Error(`unsupported protocol ${url.protocol}`)));
  return new Promise((resolve, reject) => {
    const request = transport.request(url, {
      method,
      headers: body === undefined ? headers : { ...headers, "content-length": String(body.length) },
      agent: agents[url.protocol as "http:" | "https:"],
    });
    request.setTimeout(IDLE_TIMEOUT_MS, () => {
      request.destroy(Object.assign(new Error(`no data for ${IDLE_TIMEOUT_MS / 1000} s`), { code: "ETIMEDOUT" }));
    });
    request.once("error", (error) => reject(new NodeTransportError(error)));
    request.once("response", (message) => {
      // Errors after this point (a connection lost mid-body) reach whoever reads the body.
      resolve(message);
    });
    request.end(body);
  });
}

function toResponse(message: IncomingMessage): Response {
  const headers = new Headers();
  const raw = message.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    try {
      headers.append(raw[i], raw[i + 1]);
    } catch {
      // A header Headers refuses (invalid characters) is one no caller here reads.
    }
  }
  const status = message.statusCode ?? 0;
  if (status < 200 || status > 599) {
    message.destroy();
    throw new NodeTransportError(new Error(`the server answered with HTTP status ${status}`));
  }
  if (NULL_BODY_STATUSES.has(status)) {
    message.resume();
    return new Response(null, { status, headers });
  }
  const response = new Response(webBody(message), { status, headers });
  nodeBodies.set(response, message);
  return response;
}

/**
 * A web stream over the message that reads nothing until asked (high-water mark 0), so a
 * reader that claims the node message instead finds every byte still there.
 */
function webBody(message: IncomingMessage): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        return new Promise<void>((resolve) => {
          const finish = (action: () => void) => {
            message.off("readable", tryRead);
            message.off("end", onEnd);
            message.off("error", onError);
            action();
            resolve();
          };
          const tryRead = () => {
            const piece: Buffer | null = message.read();
            if (piece !== null) finish(() => controller.enqueue(new Uint8Array(piece.buffer, piece.byteOffset, piece.length)));
          };
          const onEnd = () => finish(() => controller.close());
          const onError = (error: Error) => finish(() => controller.error(new NodeTransportError(error)));
          message.on("readable", tryRead);
          message.once("end", onEnd);
          message.once("error", onError);
          if (message.readableEnded) onEnd();
          else tryRead();
        });
      },
      cancel() {
        message.destroy();
      },
    },
    { highWaterMark: 0 },
  );
}

/**
 * Copies the whole message into `into` from offset 0, refusing more than `into.length` bytes,
 * and reports each new fill level to `onProgress` (whose throw aborts the read). Resolves with
 * the byte count (which may be short; the caller checks), or rejects with a
 * `NodeTransportError` (connection lost) or `overflow()`'s error after destroying the message.
 */
export function readMessageInto(message: IncomingMessage, into: Uint8Array, overflow: () => Error, onProgress?: (filled: number) => void): Promise<number> {
  return new Promise((resolve, reject) => {
    let filled = 0;
    let settled = false;
    const settle = (action: () => void) => {
      if (settled) return;
      settled = true;
      message.off("data", onData);
      action();
    };
    const onData = (piece: Buffer) => {
      if (filled + piece.length > into.length) {
        settle(() => reject(overflow()));
        message.destroy();
        return;
      }
      into.set(piece, filled);
      filled += piece.length;
      if (onProgress !== undefined) {
        try {
          onProgress(filled);
        } catch (error) {
          settle(() => reject(error));
          message.destroy();
        }
      }
    };
    message.on("data", onData);
    message.once("end", () => settle(() => resolve(filled)));
    message.once("error", (error) => settle(() => reject(new NodeTransportError(error))));
    message.once("close", () =>
      settle(() => reject(new NodeTransportError(Object.assign(new Error("the connection closed mid-body"), { code: "ECONNRESET" })))),
    );
  });
}
