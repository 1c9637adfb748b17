import assert from "node:assert/strict";
import { createPublicKey, generateKeyPairSync } from "node:crypto";
import { describe, it } from "node:test";
import { decodeProtectedHeader, SignJWT } from "jose";
import {
  CasTokenError,
  CasTokenIssuer,
  CasTokenVerifier,
  MAX_CAS_TOKEN_CHARS,
  scopeAllows,
  type CasTokenFailure,
  type CasTokenRequest,
} from "../../src/auth/cas-token.js";

const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const REQUEST: CasTokenRequest = { repo: { type: "model", id: "alice/bert" }, rev: "feature/x", scope: "read" };
const T0 = new Date("2030-01-01T00:00:00.250Z");
const T0_SECONDS = Math.floor(T0.getTime() / 1000);

function at(seconds: number): () => Date {
  return () => new Date(seconds * 1000);
}

async function refused(verifier: CasTokenVerifier, token: string, reason: CasTokenFailure): Promise<void> {
  await assert.rejects(verifier.verify(token), (error: unknown) => error instanceof CasTokenError && error.reason === reason);
}

function b64json(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

describe("CAS access tokens", () => {
  it("carries repository, revision, scope, iat and exp = iat + TTL", async () => {
    const issuer = new CasTokenIssuer(privateKey, 600, () => T0);
    const { token, claims } = await issuer.issue(REQUEST);
    assert.deepEqual(decodeProtectedHeader(token), { alg: "EdDSA", typ: "JWT" });
    assert.equal(claims.iat, T0_SECONDS);
    assert.equal(claims.exp, T0_SECONDS + 600);

    const verified = await new CasTokenVerifier(publicKey, () => T0).verify(token);
    assert.deepEqual(verified, claims);
    assert.deepEqual(verified.repo, { type: "model", id: "alice/bert" });
    assert.equal(verified.rev, "feature/x");
    assert.equal(verified.scope, "read");
  });

  it("verifies on any node holding only the public key", async () => {
    const { token } = await new CasTokenIssuer(privateKey, 60).issue({ ...REQUEST, scope: "write" });
    const exported = publicKey.export({ type: "spki", format: "pem" });
    const otherNode = new CasTokenVerifier(createPublicKey(exported));
    assert.equal((await otherNode.verify(token)).scope, "write");
  });

  it("issues a distinct token on every call, even within one second", async () => {
    const issuer = new CasTokenIssuer(privateKey, 60, () => T0);
    const first = await issuer.issue(REQUEST);
    const second = await issuer.issue(REQUEST);
    assert.notEqual(first.token, second.token);
    assert.notEqual(first.claims.jti, second.claims.jti);
    assert.equal(first.claims.exp, second.claims.exp);
  });

  it("enforces exp exactly, without clock tolerance", async () => {
    const { token, claims } = await new CasTokenIssuer(privateKey, 1, () => T0).issue(REQUEST);
    assert.equal(claims.exp, T0_SECONDS + 1);
    await new CasTokenVerifier(publicKey, () => new Date(claims.exp * 1000 - 1)).verify(token);
    await refused(new CasTokenVerifier(publicKey, at(claims.exp)), token, "expired");
    await refused(new CasTokenVerifier(publicKey, at(claims.exp + 3600)), token, "expired");
  });

  it("enforces exp exactly for a token it has verified (and remembered) before", async () => {
    const { token, claims } = await new CasTokenIssuer(privateKey, 2, () => T0).issue(REQUEST);
    let now = new Date(T0.getTime());
    const verifier = new CasTokenVerifier(publicKey, () => now);
    assert.deepEqual(await verifier.verify(token), claims);
    now = new Date(claims.exp * 1000 - 1);
    assert.deepEqual(await verifier.verify(token), claims);
    now = new Date(claims.exp * 1000);
    await refused(verifier, token, "expired");
    await refused(verifier, token, "expired");
  });

  it("hands out remembered claims that cannot be altered", async () => {
    const { token } = await new CasTokenIssuer(privateKey, 60).issue(REQUEST);
    const verifier = new CasTokenVerifier(publicKey);
    const claims = await verifier.verify(token);
    assert.throws(() => ((claims as { scope: string }).scope = "write"), TypeError);
    assert.throws(() => ((claims.repo as { id: string }).id = "eve/other"), TypeError);
    assert.equal((await verifier.verify(token)).repo.id, REQUEST.repo.id);
  });

  it("refuses a token signed with another key", async () => {
    const other = generateKeyPairSync("ed25519").privateKey;
    const { token } = await new CasTokenIssuer(other, 60).issue(REQUEST);
    await refused(new CasTokenVerifier(publicKey), token, "forged");
  });

  it("refuses a token whose payload was changed after signing", async () => {
    const { token } = await new CasTokenIssuer(privateKey, 60).issue(REQUEST);
    const [header, payload, signature] = token.split(".");
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString());
    const tampered = [header, b64json({ ...claims, scope: "write" }), signature].join(".");
    await refused(new CasTokenVerifier(publicKey), tampered, "forged");
    const otherRepo = [header, b64json({ ...claims, repo: { type: "model", id: "mallory/x" } }), signature].join(".");
    await refused(new CasTokenVerifier(publicKey), otherRepo, "forged");
  });

  it("refuses alg none and algorithm confusion", async () => {
    const { claims } = await new CasTokenIssuer(privateKey, 60).issue(REQUEST);
    const unsigned = `${b64json({ alg: "none", typ: "JWT" })}.${b64json(claims)}.`;
    await refused(new CasTokenVerifier(publicKey), unsigned, "forged");

    // HS256 "signed" with the public key's bytes: the classic confusion attack on RS/HS verifiers.
    const hmacSecret = publicKey.export({ type: "spki", format: "der" });
    const confused = await new SignJWT({ ...claims }).setProtectedHeader({ alg: "HS256" }).sign(new Uint8Array(hmacSecret));
    await refused(new CasTokenVerifier(publicKey), confused, "forged");
  });

  it("refuses what is not a JWT at all, before any work", async () => {
    const verifier = new CasTokenVerifier(publicKey);
    for (const junk of ["", "abc", "a.b", "a.b.c.d", "a b.c.d", "hf_abcdefghijklmnopqrstuvwxyz"]) {
      await refused(verifier, junk, "malformed");
    }
    await refused(verifier, `${"a".repeat(MAX_CAS_TOKEN_CHARS)}.b.c`, "malformed");
    await refused(verifier, `bm90IGpzb24.${b64json({ rev: "main" })}.c2ln`, "malformed");
    // A payload nobody signed is refused on its signature, before its content is looked at.
    await refused(verifier, `${b64json({ alg: "EdDSA" })}.bm90IGpzb24.c2ln`, "forged");
  });

  it("refuses validly signed tokens whose claims are not a CAS token's", async () => {
    const verifier = new CasTokenVerifier(publicKey, () => T0);
    const good = { repo: { type: "model", id: "alice/bert" }, rev: "main", scope: "read", jti: "x", iat: T0_SECONDS, exp: T0_SECONDS + 60 };
    const variants: Record<string, unknown>[] = [
      { ...good, scope: "admin" },
      { ...good, repo: { type: "bucket", id: "alice/bert" } },
      { ...good, repo: { type: "model", id: "no-slash" } },
      { ...good, repo: "model:alice/bert" },
      { ...good, rev: "" },
      { ...good, rev: 7 },
      { ...good, jti: undefined },
      { ...good, exp: undefined },
      { ...good, iat: undefined },
      { ...good, exp: T0_SECONDS + 60.5 },
    ];
    for (const claims of variants) {
      const token = await new SignJWT(claims).setProtectedHeader({ alg: "EdDSA" }).sign(privateKey);
      await refused(verifier, token, "malformed");
    }
    const control = await new SignJWT(good).setProtectedHeader({ alg: "EdDSA" }).sign(privateKey);
    assert.equal((await verifier.verify(control)).rev, "main");
  });

  it("rejects a TTL below one second", () => {
    assert.throws(() => new CasTokenIssuer(privateKey, 0), RangeError);
    assert.throws(() => new CasTokenIssuer(privateKey, 1.5), RangeError);
  });

  it("lets write include read, and nothing else", () => {
    assert.equal(scopeAllows("write", "write"), true);
    assert.equal(scopeAllows("write", "read"), true);
    assert.equal(scopeAllows("read", "read"), true);
    assert.equal(scopeAllows("read", "write"), false);
  });
});
