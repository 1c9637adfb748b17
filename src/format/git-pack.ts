/**
 * git's pack format (gitformat-pack), version 2: `PACK`, the version, the object count (each a
 * 4-byte big-endian number), then each object as a header — its type and inflated size in a
 * variable-length number — the base of a delta (a negative offset for ofs-delta, an object id
 * for ref-delta) and its zlib-deflated body, and last the SHA-1 of everything before.
 *
 * `PackWriter` produces a pack piece by piece, so a server streams it without holding it.
 * `readPack` reads one as it arrives, within limits on total bytes, object count, object size
 * and delta depth checked before anything is allocated for them; it resolves deltas through
 * the caller's store of earlier objects (the reader keeps none), computes every object's id,
 * and checks the trailing checksum. Pure: no I/O, node's zlib and SHA-1 only.
 */
import { createHash, type Hash } from "node:crypto";
import { deflateSync, inflateSync } from "node:zlib";
import { FormatError } from "./errors.js";

export type PackObjectType = "commit" | "tree" | "blob" | "tag";

const TYPE_CODES: Readonly<Record<PackObjectType, number>> = { commit: 1, tree: 2, blob: 3, tag: 4 };
const TYPE_NAMES: Readonly<Record<number, PackObjectType>> = { 1: "commit", 2: "tree", 3: "blob", 4: "tag" };
const OFS_DELTA = 6;
const REF_DELTA = 7;

const PACK_SIGNATURE = 0x5041434b; // "PACK"
const PACK_VERSION = 2;
const HEADER_BYTES = 12;
const CHECKSUM_BYTES = 20;

/** git's id of an object: SHA-1 over `<type> <size>\0` and the body. */
export function packObjectId(type: PackObjectType, body: Uint8Array): string {
  return createHash("sha1").update(`${type} ${body.length}\0`).update(body).digest("hex");
}

/** An object's header in a pack: type in bits 4–6 of the first byte, the size in 4 + 7·n bits, least significant first. */
function objectHeader(typeCode: number, size: number): Buffer {
  const bytes: number[] = [];
  let rest = Math.floor(size / 16);
  let byte = (typeCode << 4) | (size & 0x0f);
  while (rest > 0) {
    bytes.push(byte | 0x80);
    byte = rest & 0x7f;
    rest = Math.floor(rest / 128);
  }
  bytes.push(byte);
  return Buffer.from(bytes);
}

/** An ofs-delta's distance back to its base: 7 bits a byte, most significant first, each continuation adding one (gitformat-pack). */
function ofsDistance(distance: number): Buffer {
  const bytes = [distance & 0x7f];
  let rest = Math.floor(distance / 128);
  while (rest > 0) {
    rest -= 1;
    bytes.unshift(0x80 | (rest & 0x7f));
    rest = Math.floor(rest / 128);
  }
  return Buffer.from(bytes);
}

export interface PackWriterOptions {
  /** zlib level of the objects' bodies (git's default, core.compression -1, is zlib's 6). */
  level?: number;
}

/**
 * Writes a pack as a sequence of buffers: `header(count)` first, then exactly `count` objects
 * (`object` or `ofsDelta`), then `trailer()`. Each call returns the bytes to send next; the
 * writer keeps only the running checksum and the offset.
 */
export class PackWriter {
  private readonly hash: Hash = createHash("sha1");
  private written = 0;
  private remaining = -1;
  private readonly level: number;

  constructor(options: PackWriterOptions = {}) {
    this.level = options.level ?? 6;
  }

  /** Bytes written so far: the offset the next object starts at. */
  get offset(): number {
    return this.written;
  }

  header(count: number): Buffer {
    if (this.remaining !== -1) throw new Error("the pack header was already written");
    if (!Number.isSafeInteger(count) || count < 0 || count > 0xffffffff) throw new RangeError(`a pack holds 0 to 2^32-1 objects, not ${count}`);
    const header = Buffer.alloc(HEADER_BYTES);
    header.writeUInt32BE(PACK_SIGNATURE, 0);
    header.writeUInt32BE(PACK_VERSION, 4);
    header.writeUInt32BE(count, 8);
    this.remaining = count;
    return this.emit(header);
  }

  /** A whole object. */
  object(type: PackObjectType, body: Uint8Array): Buffer {
    return this.entry(objectHeader(TYPE_CODES[type], body.length), null, body);
  }

  /** A delta against the object written at `baseOffset` (see `encodeDelta`); `delta` is its instructions. */
  ofsDelta(baseOffset: number, delta: Uint8Array): Buffer {
    if (!(baseOffset >= 0 && baseOffset < this.written)) throw new RangeError(`a delta base must be an earlier object of the pack (offset ${baseOffset})`);
    return this.entry(objectHeader(OFS_DELTA, delta.length), ofsDistance(this.written - baseOffset), delta);
  }

  trailer(): Buffer {
    if (this.remaining !== 0) throw new Error(`the pack header announced ${this.remaining} more objects than were written`);
    this.remaining = -2;
    const checksum = this.hash.digest();
    this.written += checksum.length;
    return checksum;
  }

  private entry(header: Buffer, base: Buffer | null, body: Uint8Array): Buffer {
    if (this.remaining <= 0) throw new Error("more objects than the pack header announced");
    this.remaining--;
    const deflated = deflateSync(body, { level: this.level });
    const parts = base === null ? [header, deflated] : [header, base, deflated];
    return this.emit(Buffer.concat(parts));
  }

  private emit(bytes: Buffer): Buffer {
    this.hash.update(bytes);
    this.written += bytes.length;
    return bytes;
  }
}

// --- deltas -----------------------------------------------------------------------------------

/** One instruction of a delta: copy a range of the base, or insert literal bytes. */
export type DeltaOp = { copy: { offset: number; length: number } } | { insert: Uint8Array };

function sizeNumber(value: number): number[] {
  const bytes: number[] = [];
  let rest = value;
  do {
    let byte = rest & 0x7f;
    rest = Math.floor(rest / 128);
    if (rest > 0) byte |= 0x80;
    bytes.push(byte);
  } while (rest > 0);
  return bytes;
}

/** The delta data (gitformat-pack, "Deltified representation") that turns a base of `baseSize` bytes into a target of `targetSize` by `ops`. */
export function encodeDelta(baseSize: number, targetSize: number, ops: readonly DeltaOp[]): Buffer {
  const out: (number[] | Uint8Array)[] = [sizeNumber(baseSize), sizeNumber(targetSize)];
  for (const op of ops) {
    if ("insert" in op) {
      for (let start = 0; start < op.insert.length; start += 0x7f) {
        const piece = op.insert.subarray(start, Math.min(op.insert.length, start + 0x7f));
        out.push([piece.length], piece);
      }
      continue;
    }
    // A copy of at most 0xffffff bytes per instruction (0x10000 may be written as size 0; not needed).
    let { offset, length } = op.copy;
    while (length > 0) {
      const size = Math.min(length, 0xffffff);
      const fields: number[] = [];
      let command = 0x80;
      for (let i = 0; i < 4; i++) {
        const byte = Math.floor(offset / 2 ** (8 * i)) & 0xff;
        if (byte !== 0) {
          command |= 1 << i;
          fields.push(byte);
        }
      }
      for (let i = 0; i < 3; i++) {
        const byte = (size >> (8 * i)) & 0xff;
        if (byte !== 0) {
          command |= 0x10 << i;
          fields.push(byte);
        }
      }
      out.push([command, ...fields]);
      offset += size;
      length -= size;
    }
  }
  return Buffer.concat(out.map((part) => (part instanceof Uint8Array ? part : Buffer.from(part))));
}

/** Reads one of a delta's size numbers at `at`; FormatError past the end or beyond 2^53. */
function readSizeNumber(delta: Uint8Array, at: { pos: number }): number {
  let value = 0;
  let scale = 1;
  for (;;) {
    if (at.pos >= delta.length) throw badDelta("it ends inside a size");
    const byte = delta[at.pos++];
    value += (byte & 0x7f) * scale;
    if ((byte & 0x80) === 0) return value;
    scale *= 128;
    if (scale > 2 ** 49) throw badDelta("a size is too large");
  }
}

function badDelta(why: string): FormatError {
  return new FormatError("bad_pack", `a delta in the pack is malformed: ${why}`);
}

/**
 * The object a delta makes of `base`. FormatError when the delta does not fit its base (other
 * base size, a copy outside it, a result of another size) or its result would exceed `maxBytes`.
 */
export function applyDelta(base: Uint8Array, delta: Uint8Array, maxBytes: number): Buffer {
  const at = { pos: 0 };
  const baseSize = readSizeNumber(delta, at);
  if (baseSize !== base.length) throw badDelta(`it applies to a base of ${baseSize} bytes, its base has ${base.length}`);
  const targetSize = readSizeNumber(delta, at);
  if (targetSize > maxBytes) {
    throw new FormatError("git_object_too_large", `a delta in the pack makes an object of ${targetSize} bytes, above the limit of ${maxBytes}`);
  }
  const target = Buffer.allocUnsafe(targetSize);
  let written = 0;
  while (at.pos < delta.length) {
    const command = delta[at.pos++];
    if (command & 0x80) {
      let offset = 0;
      let size = 0;
      for (let i = 0; i < 4; i++) {
        if (command & (1 << i)) {
          if (at.pos >= delta.length) throw badDelta("it ends inside a copy instruction");
          offset += delta[at.pos++] * 2 ** (8 * i);
        }
      }
      for (let i = 0; i < 3; i++) {
        if (command & (0x10 << i)) {
          if (at.pos >= delta.length) throw badDelta("it ends inside a copy instruction");
          size |= delta[at.pos++] << (8 * i);
        }
      }
      if (size === 0) size = 0x10000;
      if (offset + size > base.length) throw badDelta(`a copy of bytes ${offset}–${offset + size} reaches past its base of ${base.length} bytes`);
      if (written + size > targetSize) throw badDelta(`it makes more than the ${targetSize} bytes it announced`);
      target.set(base.subarray(offset, offset + size), written);
      written += size;
    } else if (command !== 0) {
      if (at.pos + command > delta.length) throw badDelta("it ends inside inserted data");
      if (written + command > targetSize) throw badDelta(`it makes more than the ${targetSize} bytes it announced`);
      target.set(delta.subarray(at.pos, at.pos + command), written);
      written += command;
      at.pos += command;
    } else {
      throw badDelta("it uses the reserved instruction 0");
    }
  }
  if (written !== targetSize) throw badDelta(`it makes ${written} bytes, not the ${targetSize} it announced`);
  return target;
}

// --- reading ----------------------------------------------------------------------------------

export interface PackLimits {
  /** Most bytes of the whole pack. */
  maxPackBytes: number;
  /** Most objects the header may announce. */
  maxObjects: number;
  /** Most bytes of one object (and of one delta's instructions). */
  maxObjectBytes: number;
  /** Longest chain of deltas to a whole object (git's default pack.depth is 50). */
  maxDeltaDepth: number;
}

export interface PackObject {
  /** Where the object's entry starts in the pack. */
  offset: number;
  type: PackObjectType;
  oid: string;
  data: Buffer;
  /** Deltas between this object and a whole one (0: stored whole). */
  depth: number;
}

/** An object a delta may be based on. */
export interface DeltaBase {
  type: PackObjectType;
  data: Buffer;
  /** Its own delta depth (0 for an object the receiver already had). */
  depth: number;
}

/**
 * Where deltas find their bases: the caller keeps what `readPack` yielded (the reader keeps no
 * object after yielding it), and may offer objects it already had for thin packs.
 */
export interface DeltaBases {
  /** The object yielded earlier that starts at `offset` of this pack. */
  atOffset(offset: number): DeltaBase | undefined | Promise<DeltaBase | undefined>;
  /** The object `oid`, yielded earlier or already held by the receiver. */
  byOid(oid: string): DeltaBase | undefined | Promise<DeltaBase | undefined>;
}

function badPack(message: string): FormatError {
  return new FormatError("bad_pack", message);
}

/** Bytes pushed and consumed in order, every consumed byte fed to the pack's checksum. */
class PackInput {
  private pieces: Buffer[] = [];
  buffered = 0;
  consumed = 0;
  ended = false;
  readonly checksum: Hash = createHash("sha1");

  constructor(
    private readonly source: AsyncIterator<Uint8Array>,
    private readonly maxBytes: number,
  ) {}

  /** Reads one more piece from the source; false at its end. */
  async fill(): Promise<boolean> {
    if (this.ended) return false;
    const next = await this.source.next();
    if (next.done) {
      this.ended = true;
      return false;
    }
    const piece = Buffer.from(next.value.buffer, next.value.byteOffset, next.value.byteLength);
    if (this.consumed + this.buffered + piece.length > this.maxBytes) {
      throw new FormatError("pack_too_large", `the pack exceeds the limit of ${this.maxBytes} bytes`);
    }
    if (piece.length > 0) this.pieces.push(piece);
    this.buffered += piece.length;
    return true;
  }

  /** Waits until `count` bytes are buffered; FormatError `truncated` when the source ends first. */
  async need(count: number, what: string): Promise<void> {
    while (this.buffered < count) {
      if (!(await this.fill())) throw new FormatError("truncated", `the pack ends inside ${what}`);
    }
  }

  /** The first `count` buffered bytes, as one buffer, without consuming them. */
  peek(count: number): Buffer {
    if (this.pieces.length > 0 && this.pieces[0].length >= count) return this.pieces[0].subarray(0, count);
    const joined = Buffer.concat(this.pieces, this.buffered);
    this.pieces = joined.length > 0 ? [joined] : [];
    return joined.subarray(0, count);
  }

  /** Consumes `count` buffered bytes (into the checksum unless `hashed` is false). */
  take(count: number, hashed = true): Buffer {
    const taken = this.peek(count);
    if (hashed) this.checksum.update(taken);
    let left = count;
    while (left > 0) {
      const first = this.pieces[0];
      if (first.length <= left) {
        this.pieces.shift();
        left -= first.length;
      } else {
        this.pieces[0] = first.subarray(left);
        left = 0;
      }
    }
    this.buffered -= count;
    this.consumed += count;
    return taken;
  }

  async byte(what: string): Promise<number> {
    await this.need(1, what);
    return this.take(1)[0];
  }
}

/**
 * Inflates the zlib stream at the start of `input` into exactly `size` bytes and consumes it.
 * The stream's end is known only by inflating, so the attempt is repeated as more bytes arrive,
 * each time with at least twice the bytes of the last (linear work in all). The compressed
 * bytes are bounded too: deflate never needs much more than its input, while a crafted stream
 * of empty blocks could grow without end.
 */
async function inflateEntry(input: PackInput, size: number, what: string): Promise<Buffer> {
  const maxCompressed = size + Math.ceil(size / 16) + 4096;
  let attempt = Math.min(input.buffered, maxCompressed);
  for (;;) {
    if (attempt > 0) {
      const compressed = input.peek(attempt);
      try {
        const { buffer, engine } = inflateSync(compressed, { info: true, maxOutputLength: Math.max(1, size) }) as unknown as {
          buffer: Buffer;
          engine: { bytesWritten: number };
        };
        if (buffer.length !== size) throw badPack(`${what} inflates to ${buffer.length} bytes, not the ${size} its header announces`);
        input.take(engine.bytesWritten);
        return buffer;
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === "ERR_BUFFER_TOO_LARGE") throw badPack(`${what} inflates to more than the ${size} bytes its header announces`);
        if (code !== "Z_BUF_ERROR") {
          if (error instanceof FormatError) throw error;
          throw badPack(`${what} is not valid zlib data (${(error as Error).message})`);
        }
      }
    }
    if (attempt >= maxCompressed) throw badPack(`${what} has more compressed bytes than any zlib stream of ${size} bytes needs`);
    const wanted = Math.min(maxCompressed, Math.max(attempt * 2, attempt + 1024));
    while (input.buffered < wanted) {
      if (!(await input.fill())) break;
    }
    if (input.buffered <= attempt) throw new FormatError("truncated", `the pack ends inside ${what}`);
    attempt = Math.min(input.buffered, maxCompressed);
  }
}

/**
 * The objects of the pack arriving from `source`, in pack order, each with its id. Deltas are
 * resolved through `bases` (the caller stores every yielded object before asking for the
 * next). FormatError for anything that is not a valid pack within `limits`: a bad signature or
 * version, too many objects, an object above the size limit or not of its declared size, a
 * delta chain deeper than allowed or based on nothing known, a wrong checksum, bytes after it.
 */
export async function* readPack(source: AsyncIterable<Uint8Array>, limits: PackLimits, bases: DeltaBases): AsyncGenerator<PackObject, void, undefined> {
  const input = new PackInput(source[Symbol.asyncIterator](), limits.maxPackBytes);
  await input.need(HEADER_BYTES, "its header");
  const header = input.take(HEADER_BYTES);
  if (header.readUInt32BE(0) !== PACK_SIGNATURE) throw badPack("the data is not a git pack (it does not start with PACK)");
  const version = header.readUInt32BE(4);
  if (version !== 2 && version !== 3) throw badPack(`pack version ${version} is not supported (2 or 3)`);
  const count = header.readUInt32BE(8);
  if (count > limits.maxObjects) {
    throw new FormatError("pack_too_large", `the pack holds ${count} objects, above the limit of ${limits.maxObjects}`);
  }

  for (let index = 0; index < count; index++) {
    const offset = input.consumed;
    const what = `object ${index + 1} of ${count} (at byte ${offset})`;
    let byte = await input.byte(what);
    const typeCode = (byte >> 4) & 0x07;
    let size = byte & 0x0f;
    let scale = 16;
    while (byte & 0x80) {
      byte = await input.byte(what);
      size += (byte & 0x7f) * scale;
      scale *= 128;
      if (size > limits.maxObjectBytes) break;
    }
    if (size > limits.maxObjectBytes) {
      throw new FormatError("git_object_too_large", `${what} has at least ${size} bytes, above the limit of ${limits.maxObjectBytes}`);
    }

    let base: DeltaBase | undefined;
    let baseName = "";
    if (typeCode === OFS_DELTA) {
      byte = await input.byte(what);
      let distance = byte & 0x7f;
      while (byte & 0x80) {
        byte = await input.byte(what);
        distance = (distance + 1) * 128 + (byte & 0x7f);
        if (distance > offset) break;
      }
      if (distance === 0 || distance > offset) throw badPack(`${what} is a delta whose base would start outside the pack`);
      base = await bases.atOffset(offset - distance);
      baseName = `the object at byte ${offset - distance}`;
    } else if (typeCode === REF_DELTA) {
      await input.need(20, what);
      const baseOid = input.take(20).toString("hex");
      base = await bases.byOid(baseOid);
      baseName = `object ${baseOid}`;
    } else if (TYPE_NAMES[typeCode] === undefined) {
      throw badPack(`${what} has the unknown type ${typeCode}`);
    }
    if (baseName !== "" && base === undefined) {
      throw badPack(`${what} is a delta against ${baseName}, which is neither earlier in the pack nor in the repository`);
    }

    const body = await inflateEntry(input, size, what);
    if (base === undefined) {
      const type = TYPE_NAMES[typeCode];
      yield { offset, type, oid: packObjectId(type, body), data: body, depth: 0 };
      continue;
    }
    const depth = base.depth + 1;
    if (depth > limits.maxDeltaDepth) {
      throw badPack(`${what} is at the end of a chain of ${depth} deltas, above the limit of ${limits.maxDeltaDepth} (repack with a smaller --depth)`);
    }
    const data = applyDelta(base.data, body, limits.maxObjectBytes);
    yield { offset, type: base.type, oid: packObjectId(base.type, data), data, depth };
  }

  const expected = input.checksum.digest();
  await input.need(CHECKSUM_BYTES, "its checksum");
  const trailer = input.take(CHECKSUM_BYTES, false);
  if (!trailer.equals(expected)) throw badPack(`the pack's checksum ${trailer.toString("hex")} does not match its content (${expected.toString("hex")})`);
  while (input.buffered === 0 && (await input.fill()));
  if (input.buffered > 0) throw badPack("data follows the pack's checksum");
}
