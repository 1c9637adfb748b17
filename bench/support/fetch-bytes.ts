import { type Agent, request as httpRequest } from "node:http";

/**
 * GETs `url` (with a Range header when `range` is given, then expecting 206, else 200) and
 * counts the body's bytes, checking them against Content-Length. The body is dropped as it
 * comes: the benches measure the server, not the client's copying.
 */
export function fetchCountedBytes(agent: Agent, url: string, range?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { agent, headers: range === undefined ? {} : { range } }, (response) => {
      if (response.statusCode !== (range === undefined ? 200 : 206)) {
        reject(new Error(`${url.split("?")[0]} answered ${response.statusCode}`));
        response.resume();
        return;
      }
      const expected = Number(response.headers["content-length"]);
      let received = 0;
      response.on("data", (piece: Buffer) => (received += piece.length));
      response.once("end", () => (received === expected ? resolve(received) : reject(new Error(`got ${received} of ${expected} bytes`))));
      response.once("error", reject);
    });
    request.once("error", reject);
    request.end();
  });
}
