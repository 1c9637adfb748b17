/**
 * Chunk boundaries (docs/protocol.md §4) found by a WebAssembly loop of a few dozen
 * instructions: the same cuts as `ChunkBoundaryScanner` in src/format/chunker.ts, 2–3× faster
 * (measured ~1.3–1.5 GB/s against ~0.45–0.57 GB/s).
 *
 * Why: finding boundaries was the largest CPU cost of an upload. The format's scanner must keep
 * the 64-bit gear hash as two int32 halves in JavaScript (~15 operations per byte); WebAssembly
 * has native i64, so a step is a shift, a table load and an add. Why hand-written: no package
 * applies the xet-core rule, and the one WASM gear scanner (`gearhash-jit`) copies every input
 * into its own 512 KiB memory and only reports matches; the rule would sit on top of it anyway.
 *
 * The rule, per chunk: cut after the first byte at chunk offset ≥ 8191 (size ≥ 8192) where the
 * gear hash h has its top 16 bits zero, else at size 131072. h only depends on the last 64
 * bytes (older ones are shifted out of the u64), so hashing starts 64 bytes before the first
 * tested offset and h is never reset: at every tested byte it holds exactly the spec's value.
 * The cutting loop around the scan is the format's own (`cutPiece`); the equivalence is tested
 * byte for byte against the format's scanner and chunking.json.
 */
import { GEAR_TABLE, cutPiece } from "../format/index.js";

/** Memory layout: the 256 gear constants (u64 LE), then the bytes being scanned. */
const TABLE_BYTES = 256 * 8;
const INPUT_OFFSET = TABLE_BYTES;
const PAGE_BYTES = 65_536;
/** Longer pieces are scanned in parts, which keeps the module's memory (and its addresses) small. */
const MAX_PIECE_BYTES = 16 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// The module, assembled from its opcodes (WebAssembly core spec 1.0 binary format)

function unsignedLeb(value: number): number[] {
  const out: number[] = [];
  do {
    let byte = value & 0x7f;
    value >>>= 7;
    if (value !== 0) byte |= 0x80;
    out.push(byte);
  } while (value !== 0);
  return out;
}

function signedLeb(value: bigint): number[] {
  const out: number[] = [];
  for (;;) {
    const byte = Number(value & 0x7fn);
    value >>= 7n;
    const done = (value === 0n && (byte & 0x40) === 0) || (value === -1n && (byte & 0x40) !== 0);
    out.push(done ? byte : byte | 0x80);
    if (done) return out;
  }
}

function section(id: number, content: number[]): number[] {
  return [id, ...unsignedLeb(content.length), ...content];
}

function name(text: string): number[] {
  return [text.length, ...Buffer.from(text, "latin1")];
}

const I32 = 0x7f;
const I64 = 0x7e;
const VOID = 0x40;
const op = {
  block: 0x02,
  loop: 0x03,
  if: 0x04,
  end: 0x0b,
  br: 0x0c,
  brIf: 0x0d,
  return: 0x0f,
  select: 0x1b,
  localGet: 0x20,
  localSet: 0x21,
  localTee: 0x22,
  globalGet: 0x23,
  globalSet: 0x24,
  i64Load: 0x29,
  i32Load8U: 0x2d,
  i32Const: 0x41,
  i64Const: 0x42,
  i32LtU: 0x49,
  i32GeU: 0x4f,
  i64LtU: 0x54,
  i32Add: 0x6a,
  i32Shl: 0x74,
  i64Add: 0x7c,
  i64Shl: 0x86,
} as const;

// Parameters 0 = from, 1 = to, 2 = testFrom; locals 3 = h (i64), 4 = warmEnd (i32).
const [FROM, TO, TEST_FROM, H, WARM_END] = [0, 1, 2, 3, 4];

/** h = (h << 1) + GEAR[memory[p]], left on the stack. */
const GEAR_STEP = [op.localGet, H, op.i64Const, 1, op.i64Shl, op.localGet, FROM, op.i32Load8U, 0, 0, op.i32Const, 3, op.i32Shl, op.i64Load, 3, 0, op.i64Add];
const NEXT_BYTE = [op.localGet, FROM, op.i32Const, 1, op.i32Add, op.localSet, FROM];

/** `while (from < local end) { body; from++ }`: a loop in a block, which the exit branch leaves. */
function overBytesUpTo(end: number, body: number[]): number[] {
  return [op.block, VOID, op.loop, VOID, op.localGet, FROM, op.localGet, end, op.i32GeU, op.brIf, 1, ...body, ...NEXT_BYTE, op.br, 0, op.end, op.end];
}

/**
 * scan(from, to, testFrom) → i32: feeds memory[from, to) into h (a global kept between calls),
 * testing from `testFrom` on; returns the address of the first byte after which h matches
 * (h < 2^48), or -1 when none does.
 */
const SCAN_BODY = [
  2,
  1,
  I64,
  1,
  I32, // locals: one i64, one i32
  op.globalGet,
  0,
  op.localSet,
  H,
  // warmEnd = min(testFrom, to)
  op.localGet,
  TEST_FROM,
  op.localGet,
  TO,
  op.localGet,
  TEST_FROM,
  op.localGet,
  TO,
  op.i32LtU,
  op.select,
  op.localSet,
  WARM_END,
  // while (from < warmEnd) h = step(h)
  ...overBytesUpTo(WARM_END, [...GEAR_STEP, op.localSet, H]),
  // while (from < to) if ((h = step(h)) < 2^48) { keep h; return from }
  ...overBytesUpTo(TO, [
    ...GEAR_STEP,
    op.localTee,
    H,
    op.i64Const,
    ...signedLeb(1n << 48n),
    op.i64LtU,
    op.if,
    VOID,
    op.localGet,
    H,
    op.globalSet,
    0,
    op.localGet,
    FROM,
    op.return,
    op.end,
  ]),
  op.localGet,
  H,
  op.globalSet,
  0,
  op.i32Const,
  ...signedLeb(-1n),
  op.end,
];

const MODULE_BYTES = new Uint8Array([
  0x00,
  0x61,
  0x73,
  0x6d,
  0x01,
  0x00,
  0x00,
  0x00,
  ...section(1, [1, 0x60, 3, I32, I32, I32, 1, I32]),
  ...section(2, [1, ...name("env"), ...name("memory"), 0x02, 0x00, 1]),
  ...section(3, [1, 0]),
  ...section(6, [1, I64, 1, op.i64Const, 0, op.end]),
  ...section(7, [1, ...name("scan"), 0x00, 0]),
  ...section(10, [1, ...unsignedLeb(SCAN_BODY.length), ...SCAN_BODY]),
]);

/**
 * The part of the WebAssembly JS API used here. Declared locally: the project compiles with
 * `lib: ES2022` and Node's types, neither of which declares the `WebAssembly` global.
 */
interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: Record<string, Record<string, unknown>>) => { exports: Record<string, unknown> };
  Memory: new (descriptor: { initial: number }) => WasmMemory;
}
const wasm = (globalThis as { WebAssembly?: WasmApi }).WebAssembly;

let compiled: object | null | undefined;

/** The compiled module, or null where WebAssembly is unavailable (then use the format's scanner). */
function gearModule(): object | null {
  if (compiled === undefined) {
    try {
      compiled = wasm === undefined ? null : new wasm.Module(MODULE_BYTES);
    } catch {
      compiled = null;
    }
  }
  return compiled;
}

// ---------------------------------------------------------------------------------------------

/**
 * Streaming boundary finder with `ChunkBoundaryScanner`'s interface: feed pieces, get the
 * stream offsets (end-exclusive) of the chunks they complete. Each piece is copied once into
 * the module's memory (a memcpy, far below the cost of hashing it).
 */
export class GearBoundaryScanner {
  private readonly memory: WasmMemory;
  private readonly scan: (from: number, to: number, testFrom: number) => number;
  private view: Uint8Array;
  private chunkLength = 0;
  private streamOffset = 0;

  /** A scanner, or null where WebAssembly cannot run. */
  static create(): GearBoundaryScanner | null {
    const module = gearModule();
    return module === null || wasm === undefined ? null : new GearBoundaryScanner(wasm, module);
  }

  private constructor(api: WasmApi, module: object) {
    this.memory = new api.Memory({ initial: 1 });
    const instance = new api.Instance(module, { env: { memory: this.memory } });
    this.scan = instance.exports.scan as (from: number, to: number, testFrom: number) => number;
    this.view = new Uint8Array(this.memory.buffer);
    const table = new DataView(this.memory.buffer);
    GEAR_TABLE.forEach((value, i) => {
      table.setBigUint64(i * 8, value, true);
    });
  }

  get bytesSeen(): number {
    return this.streamOffset;
  }

  update(piece: Uint8Array): number[] {
    if (piece.length <= MAX_PIECE_BYTES) return this.updatePart(piece);
    const cuts: number[] = [];
    for (let at = 0; at < piece.length; at += MAX_PIECE_BYTES) cuts.push(...this.updatePart(piece.subarray(at, at + MAX_PIECE_BYTES)));
    return cuts;
  }

  private updatePart(piece: Uint8Array): number[] {
    const needed = INPUT_OFFSET + piece.length;
    if (needed > this.view.length) {
      this.memory.grow(Math.ceil((needed - this.view.length) / PAGE_BYTES));
      this.view = new Uint8Array(this.memory.buffer);
    }
    // Bytes before the first hashed one need no copy (a new stream starts with an 8 KiB skip).
    let copied = false;
    const { cuts, chunkLength } = cutPiece(piece.length, this.streamOffset, this.chunkLength, (from, to, testFrom) => {
      if (!copied) {
        this.view.set(piece.subarray(from), INPUT_OFFSET + from);
        copied = true;
      }
      const match = this.scan(INPUT_OFFSET + from, INPUT_OFFSET + to, INPUT_OFFSET + testFrom);
      return match < 0 ? match : match - INPUT_OFFSET;
    });
    this.chunkLength = chunkLength;
    this.streamOffset += piece.length;
    return cuts;
  }

  finish(): number[] {
    const tail = this.chunkLength > 0 ? [this.streamOffset] : [];
    this.chunkLength = 0;
    this.streamOffset = 0;
    return tail;
  }
}
