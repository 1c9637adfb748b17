/**
 * The hub side of client tests that fake the network with a `fetch` function: the hub and CAS
 * origins, JSON answers, the hub's Xet token answer, and a client on them that does not retry.
 */
import { CastorClient, type FetchFunction } from "../../src/client/index.js";

export const HUB = "http://hub.test";
export const CAS = "http://cas.test";

/** A JSON answer, as the hub and castor send them. */
export function jsonResponse(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
}

/** The hub's answer to a Xet token request: `accessToken` for CAS, valid for an hour. */
export function casTokenAnswer(accessToken: string): Response {
  return jsonResponse(200, { accessToken, exp: Math.floor(Date.now() / 1000) + 3600, casUrl: CAS });
}

/** A client of `repo` on HUB, with `hubToken`, whose requests go to `fetch`; it fails on the first error instead of retrying. */
export function fakeHubClient(fetch: FetchFunction, repo: string, hubToken: string): CastorClient {
  return new CastorClient({ endpoint: HUB, hubToken, repo, fetch, retry: { maxAttempts: 1 } });
}
