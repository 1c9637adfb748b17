import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  HubError,
  MAX_TOKEN_LIFETIME_MS,
  formatRepoRef,
  generateHubTokenId,
  generateHubTokenSecret,
  hashHubTokenSecret,
  parseExpires,
  parseRepoRef,
  repoNameProblem,
  revisionNameProblem,
} from "../../src/hub/index.js";
import { newRevisionNameProblem, requireNewRevisionName } from "../../src/hub/names.js";

function throwsHub400(fn: () => unknown, message: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof HubError, `expected a HubError, got ${String(err)}`);
    assert.equal(err.status, 400);
    assert.match(err.message, message);
    return true;
  });
}

describe("repository names and references", () => {
  it("parses TYPE:NAMESPACE/NAME and formats it back", () => {
    for (const [ref, type, name] of [
      ["model:alice/bert", "model", "alice/bert"],
      ["dataset:Org-1/data.set_v2", "dataset", "Org-1/data.set_v2"],
      ["space:a/b", "space", "a/b"],
    ] as const) {
      assert.deepEqual(parseRepoRef(ref), { type, name });
      assert.equal(formatRepoRef({ type, name }), ref);
    }
  });

  it("refuses other references with a 400 naming the expected form", () => {
    throwsHub400(() => parseRepoRef("alice/bert"), /TYPE:NAMESPACE\/NAME/);
    throwsHub400(() => parseRepoRef("models:alice/bert"), /type must be one of model, dataset, space/);
    throwsHub400(() => parseRepoRef("model:alice"), /namespace\/name/);
    throwsHub400(() => parseRepoRef("model:alice/bert:x"), /namespace\/name/);
    throwsHub400(() => parseRepoRef(":alice/bert"), /type/);
  });

  it("accepts parts of 1–96 characters starting with a letter or digit, without '..'", () => {
    for (const ok of ["a/b", "A9/z.Z-_", `${"a".repeat(96)}/${"b".repeat(96)}`, "gpt2/gpt2.5"]) {
      assert.equal(repoNameProblem(ok), null, ok);
    }
    for (const bad of [
      "",
      "a",
      "a/",
      "/b",
      "a/b/c",
      "_a/b",
      "a/.b",
      "a/-b",
      "a..b/c",
      "a/b..",
      "a b/c",
      "a/b\n",
      "é/b",
      `${"a".repeat(97)}/b`,
      "a".repeat(10_000),
    ]) {
      assert.notEqual(repoNameProblem(bad), null, JSON.stringify(bad));
    }
  });

  it("does not echo an unbounded value in a message", () => {
    const problem = repoNameProblem("x".repeat(10_000));
    assert.ok(problem !== null && problem.length < 400);
  });
});

describe("revision names", () => {
  it("accepts git-ref-like names, slashes included", () => {
    for (const ok of ["main", "feature/x", "v1.0.0", "refs/pr/1", "release-2024.01", "a_b/c-d/e.f", "x".repeat(255), "0123abc"]) {
      assert.equal(revisionNameProblem(ok), null, ok);
    }
  });

  it("refuses what git refuses, and names over 255 characters", () => {
    for (const bad of [
      "",
      "x".repeat(256),
      "a b",
      "a\tb",
      "a\x00b",
      "a..b",
      "..",
      "/main",
      "-main",
      "main/",
      "a//b",
      "a.",
      ".hidden",
      "a/.b",
      "a.lock",
      "a/b.lock/c",
      "a~1",
      "a^",
      "a:b",
      "a?",
      "a*",
      "a[b",
      "a\\b",
      "a@{1}",
      "@",
      "a\x7f",
    ]) {
      assert.notEqual(revisionNameProblem(bad), null, JSON.stringify(bad));
    }
  });
});

describe("names of new branches and tags", () => {
  it("refuses HEAD, which names the default branch where revisions are read, and commit ids", () => {
    assert.match(newRevisionNameProblem("HEAD") ?? "", /revision name "HEAD" is reserved: it names the default branch \(main\), as in git/);
    assert.match(newRevisionNameProblem("a".repeat(40)) ?? "", /looks like a commit id/);
    throwsHub400(() => requireNewRevisionName("HEAD"), /"HEAD" is reserved/);
    // What no revision may be named stays refused with its own reason.
    assert.match(newRevisionNameProblem("a..b") ?? "", /is not valid: it contains '\.\.'/);
  });

  it("accepts every other valid revision name, HEAD in other spellings or as a part included", () => {
    for (const ok of ["main", "feature/x", "v1.0", "head", "HEADS", "HEAD-1", "x/HEAD", "0123abc", "a".repeat(39), "A".repeat(40)]) {
      assert.equal(newRevisionNameProblem(ok), null, ok);
    }
  });
});

describe("parseExpires", () => {
  const now = new Date("2030-06-15T10:00:00.000Z");
  const at = (iso: string): number => new Date(iso).getTime();

  it("reads durations in days, hours, minutes and seconds from now", () => {
    assert.equal(parseExpires("30d", now).getTime(), now.getTime() + 30 * 86_400_000);
    assert.equal(parseExpires("12h", now).getTime(), now.getTime() + 12 * 3_600_000);
    assert.equal(parseExpires("45m", now).getTime(), now.getTime() + 45 * 60_000);
    assert.equal(parseExpires("3600s", now).getTime(), now.getTime() + 3_600_000);
    assert.equal(parseExpires(" 1D ", now).getTime(), now.getTime() + 86_400_000);
  });

  it("reads ISO dates (midnight UTC) and date-times with a zone", () => {
    assert.equal(parseExpires("2031-01-31", now).getTime(), at("2031-01-31T00:00:00Z"));
    assert.equal(parseExpires("2030-06-15T12:30:00Z", now).getTime(), at("2030-06-15T12:30:00Z"));
    assert.equal(parseExpires("2030-06-15T12:30Z", now).getTime(), at("2030-06-15T12:30:00Z"));
    assert.equal(parseExpires("2030-06-15T12:30:00.250+02:00", now).getTime(), at("2030-06-15T10:30:00.250Z"));
    assert.equal(parseExpires("2032-02-29", now).getTime(), at("2032-02-29T00:00:00Z"), "a leap day");
  });

  it("refuses anything else with a 400 that shows the accepted forms", () => {
    for (const bad of ["", "30", "d", "30 d", "30w", "1.5h", "-1d", "tomorrow", "2031/01/31", "31-01-2031", "2031-1-31"]) {
      throwsHub400(() => parseExpires(bad, now), /duration \(30d, 12h, 45m, 3600s\) or an ISO date/);
    }
  });

  it("refuses impossible dates and times instead of rolling them over", () => {
    throwsHub400(() => parseExpires("2031-02-29", now), /not a calendar date/);
    throwsHub400(() => parseExpires("2031-04-31", now), /not a calendar date/);
    throwsHub400(() => parseExpires("2031-13-01", now), /not a calendar date/);
    throwsHub400(() => parseExpires("2031-00-10", now), /not a calendar date/);
    throwsHub400(() => parseExpires("2031-01-01T24:00Z", now), /time of day/);
    throwsHub400(() => parseExpires("2031-01-01T10:00+25:00", now), /offset/);
  });

  it("asks for a zone on a date-time rather than guessing the local one", () => {
    throwsHub400(() => parseExpires("2031-01-01T10:00:00", now), /time zone/);
  });

  it("refuses zero, the past and more than 100 years ahead", () => {
    throwsHub400(() => parseExpires("0d", now), /longer than zero/);
    throwsHub400(() => parseExpires("2030-06-15T10:00:00Z", now), /not in the future/);
    throwsHub400(() => parseExpires("2001-01-01", now), /not in the future/);
    throwsHub400(() => parseExpires("36501d", now), /100 years/);
    throwsHub400(() => parseExpires("999999999999s", now), /100 years/);
    throwsHub400(() => parseExpires("2200-01-01", now), /100 years/);
    assert.equal(parseExpires("36500d", now).getTime(), now.getTime() + MAX_TOKEN_LIFETIME_MS);
  });
});

describe("hub token secrets", () => {
  it("are hf_ + 43 base64url characters, distinct, with a tok_ id", () => {
    const secrets = new Set<string>();
    for (let i = 0; i < 50; i++) {
      const secret = generateHubTokenSecret();
      assert.match(secret, /^hf_[A-Za-z0-9_-]{43}$/);
      secrets.add(secret);
      assert.match(generateHubTokenId(), /^tok_[0-9a-f]{12}$/);
    }
    assert.equal(secrets.size, 50);
  });

  it("hash to the lowercase hex SHA-256 of the whole string", () => {
    // FIPS 180-2 test vector for "abc".
    assert.equal(hashHubTokenSecret("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert.notEqual(hashHubTokenSecret("hf_a"), hashHubTokenSecret("hf_b"));
  });
});
