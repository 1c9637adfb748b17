/**
 * Content-defined chunking with the gear rolling hash (docs/protocol.md §4), cutting exactly
 * where current xet-core (and the spec) cut, so castor's own client deduplicates against data
 * uploaded by hf_xet.
 *
 * Boundary rule (§4.2), per chunk with h reset to 0 at its start:
 *   h = (h << 1) + GEAR_TABLE[byte]  (mod 2^64)
 *   cut after a byte when (h & 0xFFFF000000000000) == 0 and the chunk has >= 8192 bytes,
 *   or when it has reached 131072 bytes; a match in a shorter chunk is ignored.
 *
 * Hand-written because no well-kept library applies this rule: huggingface.js's chunker accepts
 * matches from 8128 bytes on (§4.4, different boundaries), and `gearhash-jit` (a single-release
 * WASM gear scanner) only finds matches, so the rule would sit on top of it anyway.
 */

export const MIN_CHUNK_SIZE = 8_192;
export const TARGET_CHUNK_SIZE = 65_536;
export const MAX_CHUNK_SIZE = 131_072;

/** A position matches when these bits of h are all zero (top 16: 2^-16 per byte ≈ 1/target). */
export const GEAR_MATCH_MASK = 0xffff_0000_0000_0000n;

/** The 256 gear constants of rust-gearhash (= test/vectors/gearhash-table.json). */
export const GEAR_TABLE: readonly bigint[] = Object.freeze([
  0xb088d3a9e840f559n,
  0x5652c7f739ed20d6n,
  0x45b28969898972abn,
  0x6b0a89d5b68ec777n,
  0x368f573e8b7a31b7n,
  0x1dc636dce936d94bn,
  0x207a4c4e5554d5b6n,
  0xa474b34628239acbn,
  0x3b06a83e1ca3b912n,
  0x90e78d6c2f02baf7n,
  0xe1c92df7150d9a8an,
  0x8e95053a1086d3adn,
  0x5a2ef4f1b83a0722n,
  0xa50fac949f807faen,
  0x0e7303eb80d8d681n,
  0x99b07edc1570ad0fn,
  0x689d2fb555fd3076n,
  0x00005082119ea468n,
  0xc4b08306a88fcc28n,
  0x3eb0678af6374afdn,
  0xf19f87ab86ad7436n,
  0xf2129fbfbe6bc736n,
  0x481149575c98a4edn,
  0x0000010695477bc5n,
  0x1fba37801a9ceaccn,
  0x3bf06fd663a49b6dn,
  0x99687e9782e3874bn,
  0x79a10673aa50d8e3n,
  0xe4accf9e6211f420n,
  0x2520e71f87579071n,
  0x2bd5d3fd781a8a9bn,
  0x00de4dcddd11c873n,
  0xeaa9311c5a87392fn,
  0xdb748eb617bc40ffn,
  0xaf579a8df620bf6fn,
  0x86a6e5da1b09c2b1n,
  0xcc2fc30ac322a12en,
  0x355e2afec1f74267n,
  0x2d99c8f4c021a47bn,
  0xbade4b4a9404cfc3n,
  0xf7b518721d707d69n,
  0x3286b6587bf32c20n,
  0x0000b68886af270cn,
  0xa115d6e4db8a9079n,
  0x484f7e9c97b2e199n,
  0xccca7bb75713e301n,
  0xbf2584a62bb0f160n,
  0xade7e813625dbcc8n,
  0x000070940d87955an,
  0x8ae69108139e626fn,
  0xbd776ad72fde38a2n,
  0xfb6b001fc2fcc0cfn,
  0xc7a474b8e67bc427n,
  0xbaf6f11610eb5d58n,
  0x09cb1f5b6de770d1n,
  0xb0b219e6977d4c47n,
  0x00ccbc386ea7ad4an,
  0xcc849d0adf973f01n,
  0x73a3ef7d016af770n,
  0xc807d2d386bdbdfen,
  0x7f2ac9966c791730n,
  0xd037a86bc6c504dan,
  0xf3f17c661eaa609dn,
  0xaca626b04daae687n,
  0x755a99374f4a5b07n,
  0x90837ee65b2caeden,
  0x6ee8ad93fd560785n,
  0x0000d9e11053edd8n,
  0x9e063bb2d21cdbd7n,
  0x07ab77f12a01d2b2n,
  0xec550255e6641b44n,
  0x78fb94a8449c14c6n,
  0xc7510e1bc6c0f5f5n,
  0x0000320b36e4cae3n,
  0x827c33262c8b1a2dn,
  0x14675f0b48ea4144n,
  0x267bd3a6498decebn,
  0xf1916ff982f5035en,
  0x86221b7ff434fb88n,
  0x9dbecee7386f49d8n,
  0xea58f8cac80f8f4an,
  0x008d198692fc64d8n,
  0x6d38704fbabf9a36n,
  0xe032cb07d1e7be4cn,
  0x228d21f6ad450890n,
  0x635cb1bfc02589a5n,
  0x4620a1739ca2ce71n,
  0xa7e7dfe3aae5fb58n,
  0x0c10ca932b3c0debn,
  0x2727fee884afed7bn,
  0xa2df1c6df9e2ab1fn,
  0x4dcdd1ac0774f523n,
  0x000070ffad33e24en,
  0xa2ace87bc5977816n,
  0x9892275ab4286049n,
  0xc2861181ddf18959n,
  0xbb9972a042483e19n,
  0xef70cd3766513078n,
  0x00000513abfc9864n,
  0xc058b61858c94083n,
  0x09e850859725e0den,
  0x9197fb3bf83e7d94n,
  0x7e1e626d12b64bcen,
  0x520c54507f7b57d1n,
  0xbee1797174e22416n,
  0x6fd9ac3222e95587n,
  0x0023957c9adfbf3en,
  0xa01c7d7e234bbe15n,
  0xaba2c758b8a38cbbn,
  0x0d1fa0ceec3e2b30n,
  0x0bb6a58b7e60b991n,
  0x4333dd5b9fa26635n,
  0xc2fd3b7d4001c1a3n,
  0xfb41802454731127n,
  0x65a56185a50d18cbn,
  0xf67a02bd8784b54fn,
  0x696f11dd67e65063n,
  0x00002022fca814abn,
  0x8cd6be912db9d852n,
  0x695189b6e9ae8a57n,
  0xee9453b50ada0c28n,
  0xd8fc5ea91a78845en,
  0xab86bf191a4aa767n,
  0x0000c6b5c86415e5n,
  0x267310178e08a22en,
  0xed2d101b078bca25n,
  0x3b41ed84b226a8fbn,
  0x13e622120f28dc06n,
  0xa315f5ebfb706d26n,
  0x8816c34e3301bacen,
  0xe9395b9cbb71fdaen,
  0x002ce9202e721648n,
  0x4283db1d2bb3c91cn,
  0xd77d461ad2b1a6a5n,
  0xe2ec17e46eeb866bn,
  0xb8e0be4039fbc47cn,
  0xdea160c4d5299d04n,
  0x7eec86c8d28c3634n,
  0x2119ad129f98a399n,
  0xa6ccf46b61a283efn,
  0x2c52cedef658c617n,
  0x2db4871169acdd83n,
  0x0000f0d6f39ecbe9n,
  0x3dd5d8c98d2f9489n,
  0x8a1872a22b01f584n,
  0xf282a4c40e7b3cf2n,
  0x8020ec2ccb1ba196n,
  0x6693b6e09e59e313n,
  0x0000ce19cc7c83ebn,
  0x20cb5735f6479c3bn,
  0x762ebf3759d75a5bn,
  0x207bfe823d693975n,
  0xd77dc112339cd9d5n,
  0x9ba7834284627d03n,
  0x217dc513e95f51e9n,
  0xb27b1a29fc5e7816n,
  0x00d5cd9831bb662dn,
  0x71e39b806d75734cn,
  0x7e572af006fb1a23n,
  0xa2734f2f6ae91f85n,
  0xbf82c6b5022cddf2n,
  0x5c3beac60761a0den,
  0xcdc893bb47416998n,
  0x6d1085615c187e01n,
  0x77f8ae30ac277c5dn,
  0x917c6b81122a2c91n,
  0x5b75b699add16967n,
  0x0000cf6ae79a069bn,
  0xf3c40afa60de1104n,
  0x2063127aa59167c3n,
  0x621de62269d1894dn,
  0xd188ac1de62b4726n,
  0x107036e2154b673cn,
  0x0000b85f28553a1dn,
  0xf2ef4e4c18236f3dn,
  0xd9d6de6611b9f602n,
  0xa1fc7955fb47911cn,
  0xeb85fd032f298dbdn,
  0xbe27502fb3befae1n,
  0xe3034251c4cd661en,
  0x441364d354071836n,
  0x0082b36c75f2983en,
  0xb145910316fa66f0n,
  0x021c069c9847caf7n,
  0x2910dfc75a4b5221n,
  0x735b353e1c57a8b5n,
  0xce44312ce98ed96cn,
  0xbc942e4506bdfa65n,
  0xf05086a71257941bn,
  0xfec3b215d351ceadn,
  0x00ae1055e0144202n,
  0xf54b40846f42e454n,
  0x00007fd9c8bcbcc8n,
  0xbfbd9ef317de9bfen,
  0xa804302ff2854e12n,
  0x39ce4957a5e5d8d4n,
  0xffb9e2a45637ba84n,
  0x55b9ad1d9ea0818bn,
  0x00008acbf319178an,
  0x48e2bfc8d0fbfb38n,
  0x8be39841e848b5e8n,
  0x0e2712160696a08bn,
  0xd51096e84b44242an,
  0x1101ba176792e13an,
  0xc22e770f4531689dn,
  0x1689eff272bbc56cn,
  0x00a92a197f5650ecn,
  0xbc765990bda1784en,
  0xc61441e392fcb8aen,
  0x07e13a2ced31e4a0n,
  0x92cbe984234e9d4dn,
  0x8f4ff572bb7d8ac5n,
  0x0b9670c00b963bd0n,
  0x62955a581a03eb01n,
  0x645f83e5ea000254n,
  0x41fce516cd88f299n,
  0xbbda9748da7a98cfn,
  0x0000aab2fe4845fan,
  0x19761b069bf56555n,
  0x8b8f5e8343b6ad56n,
  0x3e5d1cfd144821d9n,
  0xec5c1e2ca2b0cd8fn,
  0xfaf7e0fea7fbb57fn,
  0x000000d3ba12961bn,
  0xda3f90178401b18en,
  0x70ff906de33a5febn,
  0x0527d5a7c06970e7n,
  0x22d8e773607c13e9n,
  0xc9ab70df643c3bacn,
  0xeda4c6dc8abe12e3n,
  0xecef1f410033e78an,
  0x0024c2b274ac72cbn,
  0x06740d954fa900b4n,
  0x1d7a299b323d6304n,
  0xb3c37cb298cbead5n,
  0xc986e3c76178739bn,
  0x9fabea364b46f58an,
  0x6da214c5af85cc56n,
  0x17a43ed8b7a38f84n,
  0x6eccec511d9adbebn,
  0xf9cab30913335afbn,
  0x4a5e60c5f415eed2n,
  0x00006967503672b4n,
  0x9da51d121454bb87n,
  0x84321e13b9bbc816n,
  0xfb3d6fb6ab2fdd8dn,
  0x60305eed8e160a8dn,
  0xcbbf4b14e9946ce8n,
  0x00004f63381b10c3n,
  0x07d5b7816fcc4e10n,
  0xe5a536726a6a8155n,
  0x57afb23447a07fddn,
  0x18f346f7abc9d394n,
  0x636dc655d61ad33dn,
  0xcc8bab4939f7f3f6n,
  0x63c7a906c1dd187bn,
]);

/**
 * h only depends on the last 64 bytes (older contributions are shifted out of the u64), so
 * hashing may start 64 bytes before the first position that can be tested — the skip-ahead of
 * §4.3 — and still produce the exact h of a byte-by-byte scan.
 */
const GEAR_WINDOW = 64;
const FIRST_HASHED_OFFSET = MIN_CHUNK_SIZE - GEAR_WINDOW;
/** Chunk offset of the first byte after which a match may cut (chunk size MIN_CHUNK_SIZE). */
const FIRST_TESTED_OFFSET = MIN_CHUNK_SIZE - 1;

// BigInt arithmetic per byte would be far too slow, so h is kept as two int32 halves, hi and lo
// (lo read as unsigned below). One step h' = 2h + T[b] becomes
//   lo' = (2·lo + T_lo[b]) mod 2^32
//   hi' = (2·hi + T_hi[b] + carry) mod 2^32,   carry = floor((2·lo + T_lo[b]) / 2^32) ∈ {0, 1, 2}
// and because 2·lo + T_lo = 2·(lo + floor(T_lo/2)) + (T_lo & 1), writing lo = 2^31·top + rest:
//   carry = floor((lo + floor(T_lo/2)) / 2^31) = top + ((rest + floor(T_lo/2)) >>> 31)
// where rest + floor(T_lo/2) < 2^32, so bit 31 of the int32 sum is exact. With floor(T_lo/2)
// precomputed that is three cheap int32 operations. Only the top 16 bits of hi decide a match:
// (h & GEAR_MATCH_MASK) == 0 ⇔ hi >>> 16 == 0.
const GEAR_HI = new Int32Array(256);
const GEAR_LO = new Int32Array(256);
const GEAR_LO_HALF = new Int32Array(256);
for (let i = 0; i < 256; i++) {
  GEAR_HI[i] = Number(BigInt.asIntN(32, GEAR_TABLE[i] >> 32n));
  GEAR_LO[i] = Number(BigInt.asIntN(32, GEAR_TABLE[i]));
  GEAR_LO_HALF[i] = GEAR_LO[i] >>> 1;
}

/** The rolling hash between calls: [hi, lo] halves of h. */
type GearState = Int32Array;

/** Feeds data[from, to) into h without testing for matches (the warm-up window before size 8192). */
function absorb(state: GearState, data: Uint8Array, from: number, to: number): void {
  let hi = state[0];
  let lo = state[1];
  for (let i = from; i < to; i++) {
    const b = data[i];
    hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
    lo = ((lo << 1) + GEAR_LO[b]) | 0;
  }
  state[0] = hi;
  state[1] = lo;
}

/** Whether a 32-bit word read from memory holds its first byte in its low 8 bits. */
const LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1;

/**
 * Feeds data[from, to) into h, testing after every byte; returns the index of the first byte
 * after which h matches, or -1 (h then covers the whole range).
 *
 * Two measured tricks on top of `absorb`'s step (same arithmetic):
 * - the input is read one aligned 32-bit word per 4 bytes: once any ArrayBuffer in the process
 *   has been detached (loading the native BLAKE3 addon does it), V8 checks for detachment on
 *   every typed-array read, and 4x fewer reads of the input gain ~20%;
 * - the loop is unrolled 8 times by hand (V8 does not unroll): ~520 → ~680 MB/s on an idle
 *   core; 16 copies gain nothing more.
 */
function scanForMatch(state: GearState, data: Uint8Array, from: number, to: number): number {
  let hi = state[0];
  let lo = state[1];
  let i = from;
  let b: number;
  // Bytes up to the first 4-byte-aligned address (all of them on a big-endian machine).
  const alignedFrom = LITTLE_ENDIAN ? Math.min(to, from + ((4 - ((data.byteOffset + from) & 3)) & 3)) : to;
  for (; i < alignedFrom; i++) {
    b = data[i];
    hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
    lo = ((lo << 1) + GEAR_LO[b]) | 0;
    if (hi >>> 16 === 0) return i;
  }
  const wordCount = ((to - i) >> 3) << 1;
  if (wordCount > 0) {
    const words = new Int32Array(data.buffer, data.byteOffset + i, wordCount);
    for (let w = 0, word = 0; w < wordCount; w += 2, i += 8) {
      word = words[w];
      b = word & 255;
      hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
      lo = ((lo << 1) + GEAR_LO[b]) | 0;
      if (hi >>> 16 === 0) return i;
      b = (word >>> 8) & 255;
      hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
      lo = ((lo << 1) + GEAR_LO[b]) | 0;
      if (hi >>> 16 === 0) return i + 1;
      b = (word >>> 16) & 255;
      hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
      lo = ((lo << 1) + GEAR_LO[b]) | 0;
      if (hi >>> 16 === 0) return i + 2;
      b = word >>> 24;
      hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
      lo = ((lo << 1) + GEAR_LO[b]) | 0;
      if (hi >>> 16 === 0) return i + 3;
      word = words[w + 1];
      b = word & 255;
      hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
      lo = ((lo << 1) + GEAR_LO[b]) | 0;
      if (hi >>> 16 === 0) return i + 4;
      b = (word >>> 8) & 255;
      hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
      lo = ((lo << 1) + GEAR_LO[b]) | 0;
      if (hi >>> 16 === 0) return i + 5;
      b = (word >>> 16) & 255;
      hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
      lo = ((lo << 1) + GEAR_LO[b]) | 0;
      if (hi >>> 16 === 0) return i + 6;
      b = word >>> 24;
      hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
      lo = ((lo << 1) + GEAR_LO[b]) | 0;
      if (hi >>> 16 === 0) return i + 7;
    }
  }
  for (; i < to; i++) {
    b = data[i];
    hi = ((hi << 1) + GEAR_HI[b] + (lo >>> 31) + (((lo & 0x7fffffff) + GEAR_LO_HALF[b]) >>> 31)) | 0;
    lo = ((lo << 1) + GEAR_LO[b]) | 0;
    if (hi >>> 16 === 0) return i;
  }
  state[0] = hi;
  state[1] = lo;
  return -1;
}

function requireBytes(piece: unknown): asserts piece is Uint8Array {
  if (!(piece instanceof Uint8Array)) {
    throw new TypeError(`the chunker takes bytes (a Uint8Array or Buffer), got ${piece === null ? "null" : typeof piece}`);
  }
}

/**
 * Streaming boundary finder: feed any number of pieces of any size, get the end offsets of the
 * chunks they complete. Keeps only the rolling hash and a length, so memory does not depend on
 * the input; boundaries never depend on how the input was split into pieces.
 */
export class ChunkBoundaryScanner {
  private readonly gear: GearState = new Int32Array(2);
  /** Bytes of the current, unfinished chunk seen so far. */
  private chunkLength = 0;
  private streamOffset = 0;

  /** Total bytes fed since construction or the last `finish()`. */
  get bytesSeen(): number {
    return this.streamOffset;
  }

  /**
   * Stream offsets (end-exclusive, from the start of the stream) of the chunks that end inside
   * `piece`, ascending. Bytes after the last of them stay pending for the next call.
   */
  update(piece: Uint8Array): number[] {
    requireBytes(piece);
    const cuts = this.cutsWithin(piece, this.streamOffset);
    this.streamOffset += piece.length;
    return cuts;
  }

  /**
   * Ends the stream: the end offset of the last, possibly short, chunk (none if nothing is
   * pending). The scanner is then ready for a new stream.
   */
  finish(): number[] {
    const tail = this.chunkLength > 0 ? [this.streamOffset] : [];
    this.reset();
    return tail;
  }

  /** Drops any unfinished chunk and starts a new stream at offset 0. */
  reset(): void {
    this.gear.fill(0);
    this.chunkLength = 0;
    this.streamOffset = 0;
  }

  /** `base` + each offset within `piece` after which a chunk ends; advances the per-chunk state. */
  private cutsWithin(piece: Uint8Array, base: number): number[] {
    const gear = this.gear;
    const { cuts, chunkLength } = cutPiece(piece.length, base, this.chunkLength, (from, to, testFrom) => {
      const warmEnd = Math.min(testFrom, to);
      if (warmEnd > from) absorb(gear, piece, from, warmEnd);
      return scanForMatch(gear, piece, warmEnd, to);
    });
    this.chunkLength = chunkLength;
    return cuts;
  }
}

/**
 * The chunk ends within one piece of a stream: the cutting loop of every boundary scanner, this
 * file's and the WebAssembly one of src/client/gear-scan.ts, so that they cut alike by
 * construction and differ only in how they hash.
 *
 * `chunkLength` bytes of the current chunk came before the piece. Per chunk, the bytes before
 * chunk offset FIRST_HASHED_OFFSET are skipped unhashed; then `findMatch(from, to, testFrom)`
 * must feed the piece's bytes [from, to) into the rolling hash, testing it after every byte from
 * `testFrom` on (earlier bytes only warm it up), and return the index of the first byte after
 * which it matches, or -1 once all of them are absorbed. A chunk ends after that byte, or at
 * MAX_CHUNK_SIZE. The hash needs no reset at a cut: the 64 bytes hashed before the first test
 * shift all older state out of it.
 *
 * Returns the stream offsets of the cuts (`base` + the offset in the piece) and the length of
 * the chunk left unfinished at the end of the piece.
 */
export function cutPiece(
  pieceLength: number,
  base: number,
  chunkLength: number,
  findMatch: (from: number, to: number, testFrom: number) => number,
): { cuts: number[]; chunkLength: number } {
  const cuts: number[] = [];
  let length = chunkLength;
  let pos = 0;
  while (pos < pieceLength) {
    if (length < FIRST_HASHED_OFFSET) {
      const skipped = Math.min(FIRST_HASHED_OFFSET - length, pieceLength - pos);
      pos += skipped;
      length += skipped;
      if (pos === pieceLength) break;
    }
    const limit = Math.min(pieceLength, pos + (MAX_CHUNK_SIZE - length));
    const match = findMatch(pos, limit, pos + Math.max(0, FIRST_TESTED_OFFSET - length));
    if (match >= 0) {
      pos = match + 1;
    } else {
      length += limit - pos;
      pos = limit;
      if (length < MAX_CHUNK_SIZE) break;
    }
    cuts.push(base + pos);
    length = 0;
  }
  return { cuts, chunkLength: length };
}

/**
 * Streaming chunker that hands out chunk bytes. A chunk lying entirely inside one piece is
 * returned as a view of that piece (no copy) — do not overwrite a piece while its chunks are in
 * use; a chunk spanning pieces is assembled into a new buffer. At most MAX_CHUNK_SIZE - 1 bytes
 * are held between calls.
 */
export class Chunker {
  private readonly scanner = new ChunkBoundaryScanner();
  private readonly pending = new Uint8Array(MAX_CHUNK_SIZE);
  private pendingLength = 0;

  /** The chunks completed by `piece`, in order. */
  update(piece: Uint8Array): Uint8Array[] {
    requireBytes(piece);
    const base = this.scanner.bytesSeen;
    const chunks: Uint8Array[] = [];
    let start = 0;
    for (const streamCut of this.scanner.update(piece)) {
      const cut = streamCut - base;
      if (start === 0 && this.pendingLength > 0) {
        chunks.push(this.takePendingWith(piece.subarray(0, cut)));
      } else {
        chunks.push(piece.subarray(start, cut));
      }
      start = cut;
    }
    if (start < piece.length) {
      // Copied rather than referenced: the caller may reuse the piece's buffer for its next read.
      this.pending.set(piece.subarray(start), this.pendingLength);
      this.pendingLength += piece.length - start;
    }
    return chunks;
  }

  /**
   * Ends the stream: the last chunk if bytes are pending (it may be shorter than
   * MIN_CHUNK_SIZE). The chunker is then ready for a new stream.
   */
  finish(): Uint8Array[] {
    const tail = this.pendingLength > 0 ? [this.pending.slice(0, this.pendingLength)] : [];
    this.pendingLength = 0;
    this.scanner.reset();
    return tail;
  }

  private takePendingWith(rest: Uint8Array): Uint8Array {
    const chunk = new Uint8Array(this.pendingLength + rest.length);
    chunk.set(this.pending.subarray(0, this.pendingLength));
    chunk.set(rest, this.pendingLength);
    this.pendingLength = 0;
    return chunk;
  }
}

/** End offsets (cumulative, end-exclusive) of the chunks of a whole buffer; `[]` for no bytes. */
export function chunkBoundaries(data: Uint8Array): number[] {
  const scanner = new ChunkBoundaryScanner();
  const cuts = scanner.update(data);
  cuts.push(...scanner.finish());
  return cuts;
}

/** The chunks of a whole buffer, as views of it (no copies). */
export function splitIntoChunks(data: Uint8Array): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  let start = 0;
  for (const end of chunkBoundaries(data)) {
    chunks.push(data.subarray(start, end));
    start = end;
  }
  return chunks;
}
