// CAS token verification (src/auth/cas-token.ts), claims side: the input is the JWT payload
// (any bytes, usually JSON), signed with the verifier's own Ed25519 key so that the signature
// passes and the claim checks are what is exercised. Expected: CasTokenError only; an accepted
// token's claims must have the documented shape.
import { generateKeyPairSync, sign } from "node:crypto";
import { CasTokenError, CasTokenVerifier } from "../../dist/auth/cas-token.js";
import { expected } from "./expect.mjs";

const { publicKey, privateKey } = generateKeyPairSync("ed25519");
const HEADER = Buffer.from(JSON.stringify({ alg: "EdDSA", typ: "JWT" })).toString("base64url");
const NOW = new Date(1_700_000_000_000);

export async function fuzz(data) {
  // A fresh verifier each time: its cache must not answer for an earlier input.
  const verifier = new CasTokenVerifier(publicKey, () => NOW);
  const signingInput = `${HEADER}.${Buffer.from(data).toString("base64url")}`;
  const token = `${signingInput}.${sign(null, Buffer.from(signingInput), privateKey).toString("base64url")}`;
  try {
    const claims = await verifier.verify(token);
    const ok =
      typeof claims.repo?.id === "string" &&
      ["model", "dataset", "space"].includes(claims.repo.type) &&
      ["read", "write"].includes(claims.scope) &&
      typeof claims.rev === "string" &&
      Number.isSafeInteger(claims.exp) &&
      claims.exp > NOW.getTime() / 1000;
    if (!ok) throw new Error(`accepted claims of the wrong shape: ${JSON.stringify(claims)}`);
  } catch (error) {
    expected(error, [CasTokenError]);
  }
}
