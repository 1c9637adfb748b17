/** git's pkt-line framing: encoding, the special packets, decoding from any split, and every bound. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FormatError } from "../../src/format/errors.js";
import {
  DELIM_PKT,
  FLUSH_PKT,
  PKT_MAX_DATA,
  PKT_MAX_LENGTH,
  PktLineDecoder,
  pktLine,
  pktText,
  RESPONSE_END_PKT,
  sidebandPackets,
  SIDEBAND_MAX_DATA,
  type PktLine,
} from "../../src/format/pkt-line.js";

function decodeAll(bytes: Buffer, pieceSize = bytes.length): PktLine[] {
  const decoder = new PktLineDecoder();
  const out: PktLine[] = [];
  for (let at = 0; at < bytes.length; at += pieceSize) {
    decoder.push(bytes.subarray(at, at + pieceSize));
    for (let line = decoder.read(); line !== null; line = decoder.read()) out.push(line);
  }
  assert.equal(decoder.pending, 0);
  return out;
}

describe("pkt-line encoding", () => {
  it("prefixes the length in four lowercase hex digits, the digits included", () => {
    assert.equal(pktLine("a\n").toString(), "0006a\n");
    assert.equal(pktLine("# service=git-upload-pack\n").toString(), "001e# service=git-upload-pack\n");
    assert.equal(pktLine(Buffer.alloc(0)).toString(), "0004");
    assert.equal(pktLine("x".repeat(PKT_MAX_DATA)).subarray(0, 4).toString(), "fff0");
  });

  it("refuses a payload that does not fit one packet", () => {
    assert.throws(
      () => pktLine("x".repeat(PKT_MAX_DATA + 1)),
      (error: unknown) => error instanceof FormatError && error.code === "bad_pkt_line",
    );
  });

  it("writes the special packets", () => {
    assert.equal(FLUSH_PKT.toString(), "0000");
    assert.equal(DELIM_PKT.toString(), "0001");
    assert.equal(RESPONSE_END_PKT.toString(), "0002");
  });

  it("splits side-band data into packets of at most 65520 bytes with the band first", () => {
    const data = Buffer.alloc(SIDEBAND_MAX_DATA * 2 + 10, 7);
    const packets = sidebandPackets(1, data);
    assert.equal(packets.length, 3);
    assert.equal(packets[0].length, PKT_MAX_LENGTH);
    assert.equal(packets[0][4], 1);
    const lines = decodeAll(Buffer.concat(packets));
    assert.deepEqual(Buffer.concat(lines.map((line) => (line.kind === "data" ? line.data.subarray(1) : Buffer.alloc(0)))), data);
  });
});

describe("pkt-line decoding", () => {
  const stream = Buffer.concat([pktLine("command=fetch\n"), DELIM_PKT, pktLine("want 0123\n"), pktLine(Buffer.from([0, 1, 2])), FLUSH_PKT, RESPONSE_END_PKT]);

  it("reads data and special packets, whatever the pieces the bytes arrive in", () => {
    for (const pieceSize of [1, 2, 3, 5, stream.length]) {
      const lines = decodeAll(stream, pieceSize);
      assert.deepEqual(
        lines.map((line) => line.kind),
        ["data", "delim", "data", "data", "flush", "response-end"],
      );
      assert.equal(pktText(lines[0]), "command=fetch");
      assert.deepEqual((lines[3] as { data: Buffer }).data, Buffer.from([0, 1, 2]));
    }
  });

  it("waits for the rest of a packet and hands over the bytes after the last one read", () => {
    const decoder = new PktLineDecoder();
    decoder.push(Buffer.from("000ahello"));
    assert.equal(decoder.read(), null);
    decoder.push(Buffer.from("\n0000PACK"));
    assert.equal(pktText(decoder.read()!), "hello");
    assert.equal(decoder.read()!.kind, "flush");
    assert.equal(decoder.rest().toString(), "PACK");
    assert.equal(decoder.pending, 0);
  });

  it("refuses lengths that are not four hex digits, 0003, or above the maximum", () => {
    for (const bad of ["00g1", "zzzz", "0003", "fff1", "ffff", "-001"]) {
      const decoder = new PktLineDecoder();
      decoder.push(Buffer.from(`${bad}xxxx`));
      assert.throws(
        () => decoder.read(),
        (error: unknown) => error instanceof FormatError && error.code === "bad_pkt_line",
        bad,
      );
    }
  });

  it("accepts uppercase hex digits, as git's own reader does", () => {
    assert.equal(pktText(decodeAll(Buffer.from("000Aabcdef"))[0]), "abcdef");
  });

  it("does not buffer beyond one packet for a length it has not checked", () => {
    const decoder = new PktLineDecoder();
    decoder.push(Buffer.from("fff0"));
    decoder.push(Buffer.alloc(100));
    assert.equal(decoder.read(), null);
    assert.equal(decoder.pending, 104);
  });
});
