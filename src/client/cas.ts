/**
 * Authorised calls to the CAS: every request carries the current access token and goes to the
 * `casUrl` the hub named with it. A 401 (a token that expired early, e.g. clock skew between
 * client and server) is answered once by fetching a fresh token and retrying; xet-core fails
 * instead, but a retry costs nothing and saves a long upload.
 */
import { hashToHex, type Hash } from "../format/index.js";
import { discardBody, type HttpClient, type HttpRequest } from "./http.js";
import type { TokenProvider } from "./token.js";

export interface CasRequest extends Omit<HttpRequest, "url"> {
  /** Path below the CAS base URL, starting with '/': `/v1/xorbs/default/<hex>`. */
  path: string;
}

export class CasClient {
  constructor(
    readonly http: HttpClient,
    readonly tokens: TokenProvider,
  ) {}

  async request(request: CasRequest): Promise<Response> {
    const { path, ...rest } = request;
    for (let attempt = 0; ; attempt++) {
      const credentials = await this.tokens.get();
      const firstTry = attempt === 0;
      const response = await this.http.request({
        ...rest,
        url: credentials.casUrl + path,
        headers: { ...rest.headers, authorization: `Bearer ${credentials.accessToken}` },
        passStatuses: firstTry ? [...(rest.passStatuses ?? []), 401] : rest.passStatuses,
        hints: { 401: "the CAS refused a freshly issued token: check that the server's clock is right", ...rest.hints },
      });
      if (response.status === 401 && firstTry && !(rest.passStatuses ?? []).includes(401)) {
        await discardBody(response);
        this.tokens.invalidate(credentials);
        continue;
      }
      return response;
    }
  }

  /**
   * The size of file `fileHash` when the token's repository has it registered
   * (`HEAD /v1/files/{file_id}`); null when it does not, or when the server cannot say (an
   * older server without the route, any failure): the caller then simply uploads.
   */
  async fileSize(fileHash: Hash): Promise<number | null> {
    const hex = hashToHex(fileHash);
    try {
      const response = await this.request({
        what: `asking whether file ${hex} is stored`,
        method: "HEAD",
        path: `/v1/files/${hex}`,
        passStatuses: [404],
        retry: { maxAttempts: 2 },
      });
      await discardBody(response);
      if (response.status !== 200) return null;
      const size = Number(response.headers.get("content-length"));
      return Number.isSafeInteger(size) && size >= 0 ? size : null;
    } catch {
      return null;
    }
  }
}
