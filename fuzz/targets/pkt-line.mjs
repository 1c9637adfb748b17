// git's pkt-line framing (src/format/pkt-line.ts), the first thing every git request is cut
// into. Input: byte 0 picks the piece size the bytes arrive in (1..255, or all at once when 0),
// the rest is the stream. Expected: FormatError only. Besides crashes, a finding is: a packet
// whose payload differs from the bytes its length announced, bytes lost or invented (what was
// read plus what is left must be the input), or more buffered than was pushed.
import { FormatError } from "../../dist/format/errors.js";
import { PKT_MAX_LENGTH, PktLineDecoder } from "../../dist/format/pkt-line.js";
import { expected } from "./expect.mjs";

function fail(message) {
  throw new Error(`pkt-line: ${message}`);
}

export function fuzz(data) {
  if (data.length === 0) return;
  const bytes = Buffer.from(data);
  const pieceSize = bytes[0] === 0 ? bytes.length : bytes[0];
  const stream = bytes.subarray(1);
  const decoder = new PktLineDecoder();
  let consumed = 0;
  try {
    for (let at = 0; at < stream.length; at += pieceSize) {
      decoder.push(stream.subarray(at, at + pieceSize));
      if (decoder.pending > Math.min(stream.length, at + pieceSize) - consumed) fail("more buffered than pushed");
      for (let line = decoder.read(); line !== null; line = decoder.read()) {
        const length = Number.parseInt(stream.subarray(consumed, consumed + 4).toString("latin1"), 16);
        if (line.kind === "data") {
          if (length < 4 || length > PKT_MAX_LENGTH || line.data.length !== length - 4) fail(`a packet of ${line.data.length} bytes for length ${length}`);
          if (!line.data.equals(stream.subarray(consumed + 4, consumed + length))) fail("a packet's payload is not the input's bytes");
          consumed += length;
        } else {
          if (length !== { flush: 0, delim: 1, "response-end": 2 }[line.kind]) fail(`a ${line.kind} packet for length ${length}`);
          consumed += 4;
        }
      }
    }
  } catch (error) {
    expected(error, [FormatError], (e) => e.code === "bad_pkt_line");
    return;
  }
  if (!decoder.rest().equals(stream.subarray(consumed))) fail("the rest is not the bytes after the packets read");
}
