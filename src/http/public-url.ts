/**
 * The base of every URL castor hands out (`casUrl`, a repository's `url`, `commitUrl`, `Link`
 * headers, the Xet links of `resolve`): `CASTOR_PUBLIC_URL`, with one exception for a server
 * on a loopback address.
 *
 * huggingface_hub parses the URLs it is given and refuses those whose host is not the host of
 * `HF_ENDPOINT` ("Invalid HF URI … Unrecognized host '127.0.0.1'"). With the default settings
 * castor listens on 127.0.0.1:8080 and names itself `http://127.0.0.1:8080`, but a person is as
 * likely to set `HF_ENDPOINT=http://localhost:8080`: same server, other host name. So when
 * castor listens on a loopback address and `CASTOR_PUBLIC_URL` was not set, a request that
 * names the server by one of its loopback names — `localhost` or the address itself, with the
 * port castor listens on — is answered with that origin. Those names reach this very server
 * from the machine the client runs on, so a forged `Host` can only name castor itself: any
 * other `Host` gets the public URL, and signed URLs never point anywhere a header chose.
 *
 * Any other mismatch between the host a client used and the host of the answers will break
 * Hugging Face clients; the first one seen is logged as a warning naming both (once: a
 * misconfiguration affects every request alike).
 */
import { isIP } from "node:net";
import type { FastifyBaseLogger, FastifyRequest } from "fastify";
import { publicUrlForBoundPort, type CastorConfig } from "../config.js";

/** Longest host shown in the warning: the header is the client's to choose. */
const MAX_LOGGED_HOST_CHARS = 200;

export interface PublicUrlOptions {
  config: Pick<CastorConfig, "publicUrl" | "publicUrlSet" | "listenHost">;
  logger: Pick<FastifyBaseLogger, "warn">;
}

export class PublicUrls {
  private base: string | null = null;
  /** `host:port` spellings that reach this server on a loopback address; empty when the rule is off. */
  private loopbackHosts: ReadonlySet<string> = new Set();
  private warned = false;

  constructor(private readonly options: PublicUrlOptions) {}

  /** Called once the port is bound: `boundAddress` and `boundPort` are the socket's. */
  bind(boundAddress: string, boundPort: number): void {
    const { config } = this.options;
    this.base = publicUrlForBoundPort(config, boundPort);
    if (config.publicUrlSet || !isLoopback(boundAddress)) return;
    const names = new Set(["localhost", bracketed(boundAddress), bracketed(config.listenHost)]);
    this.loopbackHosts = new Set([...names].flatMap((name) => (boundPort === 80 ? [`${name}:80`, name] : [`${name}:${boundPort}`])));
  }

  /** `CASTOR_PUBLIC_URL`, or the URL derived from the listen address; what signed transfer URLs are built on. */
  configured(): string {
    if (this.base === null) throw new Error("the public URL is not known before the server has bound its port");
    return this.base;
  }

  /** The base of the URLs in the answer to `request` (see the file comment). */
  forRequest(request: FastifyRequest): string {
    const base = this.configured();
    // The Host header as received: a name of this server on this machine, or nothing to follow.
    const host = request.headers.host?.toLowerCase();
    const answer = host !== undefined && this.loopbackHosts.has(host) ? `http://${host}` : base;
    // The host the client used: X-Forwarded-Host from a trusted proxy, else the Host header.
    const used = request.host?.toLowerCase();
    if (!this.warned && used && hostnameOf(used) !== new URL(answer).hostname) {
      this.warned = true;
      const origin = `${request.protocol}://${used.slice(0, MAX_LOGGED_HOST_CHARS)}`;
      this.options.logger.warn(
        { requestOrigin: origin, publicUrl: answer },
        `a client reached castor as ${origin}, but castor's answers name ${answer} (CASTOR_PUBLIC_URL): Hugging Face clients refuse URLs on another host ("Invalid HF URI … Unrecognized host"). Set CASTOR_PUBLIC_URL to the URL clients use and HF_ENDPOINT to the same (behind a proxy, have it pass the Host header). Logged once.`,
      );
    }
    return answer;
  }
}

function bracketed(host: string): string {
  return isIP(host) === 6 ? `[${host}]` : host;
}

function isLoopback(address: string): boolean {
  return address === "::1" || address === "localhost" || (isIP(address) === 4 && address.startsWith("127."));
}

/** The host name of a `host[:port]` as URL parsing spells it (IPv6 in brackets, lower case). */
function hostnameOf(host: string): string | null {
  try {
    return new URL(`http://${host}`).hostname;
  } catch {
    return null;
  }
}
