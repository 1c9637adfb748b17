/**
 * Authorised calls to the CAS: every request carries the current access token and goes to the
 * `casUrl` the hub named with it. A 401 (a token that expired early, e.g. clock skew between
 * client and server) is answered once by fetching a fresh token and retrying; xet-core fails
 * instead, but a retry costs nothing and saves a long upload.
 */
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
}
