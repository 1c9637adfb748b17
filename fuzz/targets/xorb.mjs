// The streaming xorb validator (src/format/xorb.ts), fed the body in pieces as the network would.
// Input: byte 0 picks the piece size (1..256 bytes, or the whole body when 0), the rest is the
// body. Expected: FormatError only. Memory is bounded by -rss_limit_mb (the validator holds at
// most one straddling chunk plus the footer).
import { FormatError, XorbValidator } from "../../dist/format/index.js";
import { expected } from "./expect.mjs";

export function fuzz(data) {
  if (data.length === 0) return;
  const pieceSize = data[0] === 0 ? data.length : data[0];
  const body = data.subarray(1);
  const validator = new XorbValidator();
  try {
    for (let at = 0; at < body.length; at += pieceSize) validator.push(body.subarray(at, at + pieceSize));
    validator.finish();
  } catch (error) {
    expected(error, [FormatError]);
    // A poisoned validator must keep refusing with a FormatError.
    try {
      validator.finish();
    } catch (again) {
      expected(again, [FormatError]);
      return;
    }
    throw new Error("XorbValidator.finish() succeeded after a failure");
  }
}
