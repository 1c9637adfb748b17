// git's pack format as a push sends it (src/format/git-pack.ts readPack): objects inflated
// under bounds, deltas resolved against earlier objects, ids computed, the checksum checked.
// Input: byte 0 picks the piece size the pack arrives in (1..255, or all at once when 0), the
// rest is the pack. Expected: FormatError only. Besides crashes, a finding is: an object whose
// id is not the SHA-1 of its type and bytes, one larger than the object limit, or a delta chain
// deeper than the depth limit. Limits are small so that they are reachable; memory stays within
// the objects yielded (kept here, as a receiver keeps them) and one object being inflated.
import { createHash } from "node:crypto";
import { FormatError } from "../../dist/format/errors.js";
import { readPack } from "../../dist/format/git-pack.js";
import { expected } from "./expect.mjs";

const LIMITS = { maxPackBytes: 1 << 20, maxObjects: 64, maxObjectBytes: 64 * 1024, maxDeltaDepth: 8 };

function fail(message) {
  throw new Error(`git pack: ${message}`);
}

export async function fuzz(data) {
  if (data.length === 0) return;
  const bytes = Buffer.from(data);
  const pieceSize = bytes[0] === 0 ? bytes.length : bytes[0];
  const pack = bytes.subarray(1);
  async function* pieces() {
    for (let at = 0; at < pack.length; at += pieceSize) yield pack.subarray(at, at + pieceSize);
  }
  const byOffset = new Map();
  const byOid = new Map();
  try {
    for await (const object of readPack(pieces(), LIMITS, { atOffset: (offset) => byOffset.get(offset), byOid: (oid) => byOid.get(oid) })) {
      const oid = createHash("sha1").update(`${object.type} ${object.data.length}\0`).update(object.data).digest("hex");
      if (oid !== object.oid) fail(`object ${object.oid} hashes to ${oid}`);
      if (object.data.length > LIMITS.maxObjectBytes) fail(`an object of ${object.data.length} bytes`);
      if (object.depth > LIMITS.maxDeltaDepth) fail(`a delta chain of ${object.depth}`);
      byOffset.set(object.offset, object);
      byOid.set(object.oid, object);
    }
  } catch (error) {
    expected(error, [FormatError]);
  }
}
