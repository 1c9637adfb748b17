/**
 * git's pkt-line framing (gitprotocol-common): every message of the smart protocols is a
 * sequence of packets, each four hex digits giving its whole length (the four digits included)
 * followed by that many bytes less four. Three lengths are special: `0000` (flush: end of a
 * message), `0001` (delimiter: between sections, protocol v2) and `0002` (response end,
 * protocol v2); `0003` is invalid, as is any length above 65520.
 *
 * The decoder is fed bytes as they arrive and hands out whole packets; a packet's length is
 * read and checked before a byte of it is buffered, so memory stays within one packet (65520
 * bytes) plus what the caller has pushed and not yet read. Pure: no I/O.
 */
import { FormatError } from "./errors.js";

/** Longest packet, its four length digits included (git's LARGE_PACKET_MAX). */
export const PKT_MAX_LENGTH = 65520;
/** Most payload bytes in one packet. */
export const PKT_MAX_DATA = PKT_MAX_LENGTH - 4;
/** Most payload bytes in one side-band packet (the band byte takes one). */
export const SIDEBAND_MAX_DATA = PKT_MAX_DATA - 1;

export type PktLine = { kind: "data"; data: Buffer } | { kind: "flush" } | { kind: "delim" } | { kind: "response-end" };

export const FLUSH_PKT: Buffer = Buffer.from("0000", "latin1");
export const DELIM_PKT: Buffer = Buffer.from("0001", "latin1");
export const RESPONSE_END_PKT: Buffer = Buffer.from("0002", "latin1");

/** One data packet carrying `payload` (a string is written as UTF-8). FormatError beyond PKT_MAX_DATA. */
export function pktLine(payload: string | Uint8Array): Buffer {
  const data = typeof payload === "string" ? Buffer.from(payload, "utf8") : payload;
  if (data.length > PKT_MAX_DATA) {
    throw new FormatError("bad_pkt_line", `a pkt-line carries at most ${PKT_MAX_DATA} bytes; this one has ${data.length}`);
  }
  const packet = Buffer.allocUnsafe(data.length + 4);
  packet.write((data.length + 4).toString(16).padStart(4, "0"), 0, "latin1");
  packet.set(data, 4);
  return packet;
}

/** Side-band bands (gitprotocol-pack): pack data, progress text, a fatal error's text. */
export const BAND_DATA = 1;
export const BAND_PROGRESS = 2;
export const BAND_ERROR = 3;

/** Packets carrying `data` on side-band `band`, split at SIDEBAND_MAX_DATA. */
export function sidebandPackets(band: 1 | 2 | 3, data: Uint8Array): Buffer[] {
  const packets: Buffer[] = [];
  for (let start = 0; start < data.length; start += SIDEBAND_MAX_DATA) {
    const piece = data.subarray(start, Math.min(data.length, start + SIDEBAND_MAX_DATA));
    const packet = Buffer.allocUnsafe(piece.length + 5);
    packet.write((piece.length + 5).toString(16).padStart(4, "0"), 0, "latin1");
    packet[4] = band;
    packet.set(piece, 5);
    packets.push(packet);
  }
  return packets;
}

/** The text of a data packet without its one trailing LF (git's convention for text lines). */
export function pktText(line: PktLine): string | null {
  if (line.kind !== "data") return null;
  const end = line.data.length > 0 && line.data[line.data.length - 1] === 0x0a ? line.data.length - 1 : line.data.length;
  return line.data.toString("utf8", 0, end);
}

function hexDigit(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  if (byte >= 0x61 && byte <= 0x66) return byte - 0x61 + 10;
  if (byte >= 0x41 && byte <= 0x46) return byte - 0x41 + 10;
  return -1;
}

/**
 * Decodes packets from bytes pushed in any pieces. `read()` returns the next whole packet, or
 * null until more bytes arrive; `rest()` hands over the bytes after the last packet read (a
 * push's pack data follows its command list). FormatError `bad_pkt_line` for a length that is
 * not four hex digits, is 3, or exceeds PKT_MAX_LENGTH.
 */
export class PktLineDecoder {
  private pieces: Buffer[] = [];
  private buffered = 0;

  push(piece: Uint8Array): void {
    if (piece.length === 0) return;
    this.pieces.push(Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength));
    this.buffered += piece.length;
  }

  /** Bytes pushed and not yet read. */
  get pending(): number {
    return this.buffered;
  }

  read(): PktLine | null {
    if (this.buffered < 4) return null;
    const head = this.peek(4);
    let length = 0;
    for (let i = 0; i < 4; i++) {
      const digit = hexDigit(head[i]);
      if (digit < 0) {
        throw new FormatError("bad_pkt_line", `expected a pkt-line length (4 hex digits), got ${JSON.stringify(head.toString("latin1"))}`);
      }
      length = length * 16 + digit;
    }
    if (length === 0 || length === 1 || length === 2) {
      this.take(4);
      return { kind: length === 0 ? "flush" : length === 1 ? "delim" : "response-end" };
    }
    if (length === 3) throw new FormatError("bad_pkt_line", "pkt-line length 0003 is invalid");
    if (length > PKT_MAX_LENGTH) throw new FormatError("bad_pkt_line", `pkt-line length ${length} exceeds the maximum of ${PKT_MAX_LENGTH}`);
    if (this.buffered < length) return null;
    const packet = this.take(length);
    return { kind: "data", data: packet.subarray(4) };
  }

  /** Every byte pushed and not read, as one buffer; the decoder is empty afterwards. */
  rest(): Buffer {
    const rest = this.pieces.length === 1 ? this.pieces[0] : Buffer.concat(this.pieces);
    this.pieces = [];
    this.buffered = 0;
    return rest;
  }

  /** The first `count` (≤ 4) bytes: only the pieces that hold them are joined. */
  private peek(count: number): Buffer {
    if (this.pieces[0].length >= count) return this.pieces[0].subarray(0, count);
    const parts: Buffer[] = [];
    let joined = 0;
    for (let i = 0; joined < count; i++) {
      parts.push(this.pieces[i]);
      joined += this.pieces[i].length;
    }
    return Buffer.concat(parts, joined).subarray(0, count);
  }

  private take(count: number): Buffer {
    let first = this.pieces[0];
    if (first.length < count) {
      // Join just enough pieces to hold the packet (at most PKT_MAX_LENGTH bytes).
      const parts: Buffer[] = [];
      let joined = 0;
      while (joined < count) {
        const piece = this.pieces.shift()!;
        parts.push(piece);
        joined += piece.length;
      }
      first = Buffer.concat(parts, joined);
      this.pieces.unshift(first);
    }
    const taken = first.subarray(0, count);
    if (first.length === count) this.pieces.shift();
    else this.pieces[0] = first.subarray(count);
    this.buffered -= count;
    return taken;
  }
}
