// Range header parsing: the reconstruction API's (src/cas/reconstruction.ts parseRangeHeader,
// ReconstructionError), the hub resolve route's (requestedRange, which never throws) and the
// transfer route's check against signed ranges (selectRequestedRanges, TransferUrlError).
import { selectRequestedRanges, TransferUrlError } from "../../dist/auth/transfer-url.js";
import { parseRangeHeader, ReconstructionError } from "../../dist/cas/reconstruction.js";
import { requestedRange } from "../../dist/http/hub/resolve-routes.js";
import { expected, text } from "./expect.mjs";

const SIGNED = [
  { start: 0, end: 499 },
  { start: 500, end: 999 },
  { start: 4096, end: 8191 },
];

export function fuzz(data) {
  const header = text(data);
  try {
    parseRangeHeader(header);
  } catch (error) {
    expected(error, [ReconstructionError]);
  }
  for (const size of [0, 1, 1000, 2 ** 53 - 1]) {
    const range = requestedRange(header, size);
    // An empty file answers every range with the empty range [0, 0); otherwise it is non-empty.
    const ok = range === null || range === "unsatisfiable" || (range.start >= 0 && range.end <= size && (range.start < range.end || size === 0));
    if (!ok) {
      throw new Error(`requestedRange(${JSON.stringify(header)}, ${size}) = ${JSON.stringify(range)} is outside the file`);
    }
  }
  try {
    const chosen = selectRequestedRanges(SIGNED, header);
    if (!chosen.every((r) => SIGNED.includes(r))) throw new Error("selectRequestedRanges returned a range that was not signed");
  } catch (error) {
    expected(error, [TransferUrlError]);
  }
}
