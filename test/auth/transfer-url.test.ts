import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  HmacTransferUrls,
  MAX_TRANSFER_TARGET_CHARS,
  selectRequestedRanges,
  TRANSFER_PATH_PREFIX,
  TransferUrlError,
  type TransferUrlRejection,
} from "../../src/auth/transfer-url.js";
import { byteRange, type ByteRange } from "../../src/format/ranges.js";
import { hashFromHex, hashToHex } from "../../src/format/hash.js";

const KEY = Buffer.from("k".repeat(43));
const OTHER_KEY = Buffer.from("q".repeat(43));
const XORB_HEX = "0123456789abcdeffedcba98765432100123456789abcdeffedcba9876543210";
const XORB = hashFromHex(XORB_HEX);
const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);
const RANGES: ByteRange[] = [byteRange(0, 1397), byteRange(5000, 9999), byteRange(10_000, 10_000), byteRange(65_000_000, 67_108_863)];

function authority(options: { key?: Buffer; publicUrl?: string; ttlSeconds?: number; clock?: { now: number } } = {}) {
  const clock = options.clock ?? { now: T0 };
  return new HmacTransferUrls({
    key: options.key ?? KEY,
    publicUrl: options.publicUrl ?? "https://cas.example.com",
    ttlSeconds: options.ttlSeconds ?? 3600,
    now: () => clock.now,
  });
}

function rejection(action: () => unknown): TransferUrlRejection {
  try {
    action();
  } catch (error) {
    assert.ok(error instanceof TransferUrlError, `expected a TransferUrlError, got ${String(error)}`);
    return error.reason;
  }
  assert.fail("expected a refusal, but it was accepted");
}

/** The part of a signed URL castor's router sees. */
function targetOf(url: string, publicUrl = "https://cas.example.com"): string {
  assert.ok(url.startsWith(publicUrl), url);
  return url.slice(publicUrl.length);
}

describe("HmacTransferUrls.sign / verify", () => {
  it("signs {publicUrl}/v1/transfer/{xorb}?… and verifies back the xorb, ranges and expiry", () => {
    const urls = authority();
    const url = urls.sign(XORB, RANGES);
    assert.match(url, /^https:\/\/cas\.example\.com\/v1\/transfer\/[0-9a-f]{64}\?x=\d+&r=[0-9a-z.,]+&s=[A-Za-z0-9_-]{43}$/);
    const verified = urls.verify(targetOf(url));
    assert.equal(verified.xorbHex, XORB_HEX);
    assert.deepEqual(verified.ranges, RANGES);
    assert.equal(verified.expiresAtMs, T0 + 3600 * 1000);
    // The hash in the path is the protocol's string form.
    assert.equal(new URL(url).pathname, `${TRANSFER_PATH_PREFIX}${hashToHex(XORB)}`);
  });

  it("round-trips any ascending, disjoint range list", () => {
    const urls = authority();
    const rangeLists = fc.array(fc.tuple(fc.nat({ max: 5_000_000 }), fc.integer({ min: 1, max: 5_000_000 })), { minLength: 1, maxLength: 40 }).map((pieces) => {
      let next = 0;
      return pieces.map(([gap, length]) => {
        const start = next + gap;
        next = start + length;
        return byteRange(start, start + length - 1);
      });
    });
    fc.assert(
      fc.property(rangeLists, (ranges) => {
        assert.deepEqual(urls.verify(targetOf(urls.sign(XORB, ranges))).ranges, ranges);
      }),
      { numRuns: 300 },
    );
  });

  it("keeps URLs compact: 600 chunk-sized ranges spread over a 64 MiB xorb fit in 8 KiB", () => {
    const ranges: ByteRange[] = [];
    const stride = Math.floor((64 * 1024 * 1024) / 600);
    for (let i = 0; i < 600; i++) ranges.push(byteRange(i * stride + 1000, i * stride + 1000 + 65_000));
    const url = authority().sign(XORB, ranges);
    assert.ok(url.length < 8 * 1024, `URL of ${url.length} characters`);
    assert.deepEqual(authority().verify(targetOf(url)).ranges, ranges);
  });

  it("refuses a changed, deleted or inserted byte anywhere in the path or query", () => {
    const urls = authority();
    const target = targetOf(urls.sign(XORB, RANGES));
    const alphabet = "0a.,&=?/-_xrsZ";
    for (let i = 0; i < target.length; i++) {
      const original = target[i];
      const replacement = alphabet[(alphabet.indexOf(original) + 1) % alphabet.length] ?? "0";
      const changed = target.slice(0, i) + (replacement === original ? "1" : replacement) + target.slice(i + 1);
      const deleted = target.slice(0, i) + target.slice(i + 1);
      const inserted = `${target.slice(0, i)}0${target.slice(i)}`;
      for (const tampered of [changed, deleted, inserted]) {
        assert.notEqual(tampered, target);
        const reason = rejection(() => urls.verify(tampered));
        assert.ok(reason === "bad_signature" || reason === "malformed", `${tampered}: ${reason}`);
      }
    }
  });

  it("refuses extra query parameters, a missing signature and a path without a query", () => {
    const urls = authority();
    const target = targetOf(urls.sign(XORB, RANGES));
    const signatureAt = target.lastIndexOf("&s=");
    assert.equal(
      rejection(() => urls.verify(`${target.slice(0, signatureAt)}&download=1${target.slice(signatureAt)}`)),
      "bad_signature",
    );
    assert.equal(
      rejection(() => urls.verify(`${target}&s=${"A".repeat(43)}`)),
      "bad_signature",
    );
    assert.equal(
      rejection(() => urls.verify(`${target}&extra=1`)),
      "bad_signature",
    );
    assert.equal(
      rejection(() => urls.verify(target.slice(0, signatureAt))),
      "malformed",
    );
    assert.equal(
      rejection(() => urls.verify(`${TRANSFER_PATH_PREFIX}${XORB_HEX}`)),
      "malformed",
    );
    assert.equal(
      rejection(() => urls.verify(target.replace(TRANSFER_PATH_PREFIX, "/v1/xorbs/"))),
      "malformed",
    );
    assert.equal(
      rejection(() => urls.verify(`${target.slice(0, signatureAt)}&s=${target.slice(signatureAt + 3, -1)}`)),
      "bad_signature",
    );
    assert.equal(
      rejection(() => urls.verify(`${target}${"0".repeat(MAX_TRANSFER_TARGET_CHARS)}`)),
      "malformed",
    );
  });

  it("refuses a URL signed with another key", () => {
    const target = targetOf(authority({ key: OTHER_KEY }).sign(XORB, RANGES));
    assert.equal(
      rejection(() => authority().verify(target)),
      "bad_signature",
    );
  });

  it("expires exactly ttl seconds after signing, to the millisecond, independent of anything else", () => {
    for (const ttlSeconds of [1, 60]) {
      const clock = { now: T0 + 123 };
      const urls = authority({ ttlSeconds, clock });
      const target = targetOf(urls.sign(XORB, RANGES));
      clock.now = T0 + 123 + ttlSeconds * 1000 - 1;
      assert.deepEqual(urls.verify(target).ranges, RANGES);
      clock.now += 1;
      const expiry = new Date(T0 + 123 + ttlSeconds * 1000).toISOString();
      assert.throws(
        () => urls.verify(target),
        (error: unknown) =>
          error instanceof TransferUrlError &&
          error.reason === "expired" &&
          error.message.includes(`expired at ${expiry}`) &&
          error.message.includes("reconstruction API"),
      );
    }
  });

  it("refuses a forged expiry (the expiry is signed)", () => {
    const clock = { now: T0 };
    const urls = authority({ ttlSeconds: 1, clock });
    const target = targetOf(urls.sign(XORB, RANGES));
    clock.now = T0 + 5000;
    const extended = target.replace(/x=(\d+)/, (_, expiry: string) => `x=${Number(expiry) + 3_600_000}`);
    assert.equal(
      rejection(() => urls.verify(extended)),
      "bad_signature",
    );
  });

  it("signs the path relative to the public URL: a path prefix or another host does not matter", () => {
    const prefixed = authority({ publicUrl: "https://example.com/cas" });
    const url = prefixed.sign(XORB, RANGES);
    assert.ok(url.startsWith("https://example.com/cas/v1/transfer/"), url);
    // A proxy strips /cas; any node with the same key but its own public URL verifies it.
    const otherNode = authority({ publicUrl: "http://10.0.0.7:8080" });
    assert.deepEqual(otherNode.verify(targetOf(url, "https://example.com/cas")).ranges, RANGES);
    // The prefix itself is not part of what castor verifies.
    assert.equal(
      rejection(() => otherNode.verify(new URL(url).pathname + new URL(url).search)),
      "malformed",
    );
  });

  it("reads a public URL given as a function on every call (known only after binding)", () => {
    let base = "http://127.0.0.1:1";
    const urls = new HmacTransferUrls({ key: KEY, publicUrl: () => base, ttlSeconds: 60 });
    assert.ok(urls.sign(XORB, RANGES).startsWith("http://127.0.0.1:1/v1/transfer/"));
    base = "http://127.0.0.1:2";
    assert.ok(urls.sign(XORB, RANGES).startsWith("http://127.0.0.1:2/v1/transfer/"));
  });

  it("refuses to sign what it could not serve", () => {
    const urls = authority();
    assert.throws(() => urls.sign(XORB, []), RangeError);
    assert.throws(() => urls.sign(XORB, [byteRange(10, 9)]), RangeError);
    assert.throws(() => urls.sign(XORB, [byteRange(-1, 9)]), RangeError);
    assert.throws(() => urls.sign(XORB, [byteRange(0.5, 9)]), RangeError);
    assert.throws(() => urls.sign(XORB, [byteRange(0, 2 ** 53)]), RangeError);
    assert.throws(() => urls.sign(XORB, [byteRange(20, 29), byteRange(0, 9)]), /ascending and disjoint/);
    assert.throws(() => urls.sign(XORB, [byteRange(0, 9), byteRange(9, 19)]), /ascending and disjoint/);
    // Adjacent ranges are disjoint and allowed.
    assert.deepEqual(urls.verify(targetOf(urls.sign(XORB, [byteRange(0, 9), byteRange(10, 19)]))).ranges, [
      { start: 0, end: 9 },
      { start: 10, end: 19 },
    ]);
    const tooMany = Array.from({ length: 3000 }, (_, i) => byteRange(i * 10_000_000, i * 10_000_000 + 5_000_000));
    assert.throws(() => urls.sign(XORB, tooMany), /split them over several URLs/);
  });

  it("refuses a short key or a lifetime below one second", () => {
    assert.throws(() => new HmacTransferUrls({ key: randomBytes(16), publicUrl: "http://x", ttlSeconds: 60 }), /at least 32/);
    assert.throws(() => new HmacTransferUrls({ key: KEY, publicUrl: "http://x", ttlSeconds: 0 }), /≥ 1/);
    assert.throws(() => new HmacTransferUrls({ key: KEY, publicUrl: "http://x", ttlSeconds: 1.5 }), /≥ 1/);
  });

  it("does not keep a reference to the caller's key buffer", () => {
    const key = Buffer.from(KEY);
    const urls = new HmacTransferUrls({ key, publicUrl: "https://cas.example.com", ttlSeconds: 60 });
    const target = targetOf(urls.sign(XORB, RANGES));
    key.fill(0);
    assert.deepEqual(urls.verify(target).ranges, RANGES);
  });
});

describe("selectRequestedRanges", () => {
  const header = (ranges: readonly ByteRange[]) => `bytes=${ranges.map((r) => `${r.start}-${r.end}`).join(",")}`;

  it("allows the full signed list, in order", () => {
    assert.deepEqual(selectRequestedRanges(RANGES, header(RANGES)), RANGES);
  });

  it("allows exactly one signed range", () => {
    for (const range of RANGES) assert.deepEqual(selectRequestedRanges(RANGES, header([range])), [range]);
  });

  it("refuses sub-ranges, super-ranges, unsigned ranges, partial lists and reorderings", () => {
    const refused = [
      "bytes=0-1396", // sub-range of a signed one
      "bytes=1-1397",
      "bytes=0-1398", // extends past it
      "bytes=0-9999", // spans two signed ranges and the gap between
      "bytes=2000-3000", // inside a gap
      header([RANGES[0], RANGES[1]]), // a subset of several
      header([RANGES[1], RANGES[0], RANGES[2], RANGES[3]]), // reordered
      header([...RANGES, byteRange(70_000_000, 70_000_001)]), // one more
      header([RANGES[0], RANGES[0], RANGES[2], RANGES[3]]), // a duplicate
      "bytes=0-", // open
      "bytes=-1398", // suffix
      "bytes=00-1397", // leading zero
      "bytes=0-01397",
      "Bytes=0-1397", // unit spelled differently
      "items=0-1397",
      "bytes 0-1397",
      "bytes=0 - 1397", // whitespace inside a range
      "bytes = 0-1397",
      "bytes=0-1397,", // empty element
      "bytes=,0-1397",
      "bytes=0-1397;5000-9999",
      "bytes=99999999999999999-99999999999999999",
    ];
    for (const value of refused) {
      assert.equal(
        rejection(() => selectRequestedRanges(RANGES, value)),
        "range_not_signed",
        value,
      );
    }
  });

  it("tolerates optional whitespace around list elements (HTTP list syntax), nothing else", () => {
    assert.deepEqual(
      selectRequestedRanges(
        RANGES,
        RANGES.map((r) => `${r.start}-${r.end}`)
          .join(" , ")
          .replace(/^/, "bytes="),
      ),
      RANGES,
    );
    assert.deepEqual(selectRequestedRanges(RANGES, `bytes=0-1397,\t5000-9999, 10000-10000,65000000-67108863`), RANGES);
    assert.deepEqual(selectRequestedRanges(RANGES, "  bytes=5000-9999  "), [RANGES[1]]);
    assert.deepEqual(selectRequestedRanges(RANGES, "bytes= 5000-9999"), [RANGES[1]]);
  });

  it("requires a Range header", () => {
    assert.equal(
      rejection(() => selectRequestedRanges(RANGES, undefined)),
      "range_missing",
    );
    assert.equal(
      rejection(() => selectRequestedRanges(RANGES, "")),
      "range_missing",
    );
    assert.equal(
      rejection(() => selectRequestedRanges(RANGES, "   ")),
      "range_missing",
    );
  });

  it("quotes at most 80 characters of a refused header in its message", () => {
    try {
      selectRequestedRanges(RANGES, `bytes=${"1".repeat(5000)}-2`);
      assert.fail("accepted");
    } catch (error) {
      assert.ok(error instanceof TransferUrlError);
      assert.ok(error.message.length < 400, error.message);
      assert.match(error.message, /exactly one of its signed ranges/);
    }
  });
});
