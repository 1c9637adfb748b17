/**
 * Lines of a byte stream, each bounded. Node's readline buffers a line of any length, which a
 * client could use to fill the server's memory; this splitter refuses a line over the bound
 * (413) as soon as it has seen that many bytes without a newline.
 */
import type { Readable } from "node:stream";
import { HubError } from "../../hub/errors.js";

export async function* readLines(body: Readable, maxLineBytes: number): AsyncGenerator<string> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    let start = 0;
    for (let newline = chunk.indexOf(10, start); newline !== -1; newline = chunk.indexOf(10, start)) {
      const part = chunk.subarray(start, newline);
      if (pendingBytes + part.length > maxLineBytes) throw tooLong(maxLineBytes);
      yield (pendingBytes === 0 ? part : Buffer.concat([...pending, part])).toString("utf8");
      pending = [];
      pendingBytes = 0;
      start = newline + 1;
    }
    const rest = chunk.subarray(start);
    if (rest.length > 0) {
      pendingBytes += rest.length;
      if (pendingBytes > maxLineBytes) throw tooLong(maxLineBytes);
      pending.push(rest);
    }
  }
  if (pendingBytes > 0) yield Buffer.concat(pending).toString("utf8");
}

function tooLong(maxLineBytes: number): HubError {
  return new HubError(413, `a line of the body is longer than ${maxLineBytes} bytes: large files go through Xet, not inline`);
}
