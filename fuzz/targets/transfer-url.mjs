// Transfer-URL verification (src/auth/transfer-url.ts). The input is a path and query; it is
// verified as given (almost always a bad signature) and once more re-signed with the test key,
// so the parsing behind the signature check (expiry, base-36 ranges) is reached as well.
// Expected: TransferUrlError only; an accepted URL must carry ascending, disjoint ranges.
import { createHmac } from "node:crypto";
import { HmacTransferUrls, TransferUrlError } from "../../dist/auth/transfer-url.js";
import { expected, text } from "./expect.mjs";

const KEY = new Uint8Array(32).fill(7);
const urls = new HmacTransferUrls({ key: KEY, publicUrl: "http://castor.test", ttlSeconds: 60, now: () => 1_700_000_000_000 });

function check(target) {
  try {
    const { ranges } = urls.verify(target);
    let nextFree = 0;
    for (const { start, end } of ranges) {
      if (!(Number.isSafeInteger(start) && Number.isSafeInteger(end) && start >= nextFree && end >= start)) {
        throw new Error(`verify(${JSON.stringify(target)}) accepted invalid ranges ${JSON.stringify(ranges)}`);
      }
      nextFree = end + 1;
    }
  } catch (error) {
    expected(error, [TransferUrlError]);
  }
}

export function fuzz(data) {
  const target = text(data);
  check(target);
  const signed = target.replace(/&s=[^&]*$/, "");
  check(`${signed}&s=${createHmac("sha256", KEY).update(signed, "utf8").digest("base64url")}`);
}
