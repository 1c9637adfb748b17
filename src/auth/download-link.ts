/**
 * Signed download links: how the web interface hands a private file to the browser's download
 * manager. A page can send `Authorization: Bearer` only with a `fetch`, which holds the whole
 * body in the tab before it can be saved; a link the browser follows itself streams to disk,
 * with the browser's own progress and resume, but carries no header. So a signed-in page asks
 * castor (`POST /api/castor/download-links`, with its token) for a link that authorises itself:
 *
 *     /{prefix}{ns}/{name}/resolve/{commit}/{path}?expires={unix ms}&signature={HMAC}
 *
 * - It names a commit, never a branch: it serves exactly the file that was asked for, however
 *   the branch moves.
 * - `signature` is HMAC-SHA256 (base64url, 43 characters) over the path and query before
 *   `&signature=`, byte for byte as castor's router receives it, with a key derived from the
 *   server's URL key (`CASTOR_URL_KEY`, shared by every node), so a download link can never pass
 *   for a transfer URL or the other way round.
 * - It lives `ttlSeconds` (a few minutes): it is checked when a download starts (and at each
 *   resumed range), and is written into the browser's download list and history, where it
 *   must not stay useful. It is not bound to the token that asked for it: revoking that token
 *   leaves its links working until they expire, as the CAS tokens a hub token obtained do.
 *
 * The request log never shows the query (logging.ts), so the signature never reaches the log.
 */
import { createHmac, timingSafeEqual } from "node:crypto";

/** How long a link works: enough to start a download a click asked for, short enough to be useless once copied. */
export const DOWNLOAD_LINK_TTL_SECONDS = 300;

const SIGNATURE_PARAM = "&signature=";
const SIGNATURE_CHARS = 43;
/** What the key is derived for: the URL key also signs transfer URLs (transfer-url.ts). */
const KEY_PURPOSE = "castor download links v1";

/** Why a link was refused; the resolve route answers 403 with the message. */
export class DownloadLinkError extends Error {
  override readonly name = "DownloadLinkError";
}

export interface DownloadLinkOptions {
  /** The server's URL key (`CastorKeys.urlKey`). */
  urlKey: Uint8Array;
  ttlSeconds?: number;
  /** Clock in ms since the epoch; tests pin it. */
  now?: () => number;
}

export class DownloadLinks {
  private readonly key: Buffer;
  private readonly ttlMs: number;
  private readonly now: () => number;

  constructor(options: DownloadLinkOptions) {
    this.key = createHmac("sha256", options.urlKey).update(KEY_PURPOSE).digest();
    this.ttlMs = (options.ttlSeconds ?? DOWNLOAD_LINK_TTL_SECONDS) * 1000;
    this.now = options.now ?? Date.now;
  }

  /** The signed link to `path` (a resolve path at a commit, percent-encoded as it will be requested), and when it expires. */
  sign(path: string): { url: string; expiresAt: Date } {
    const expires = Math.floor(this.now()) + this.ttlMs;
    const signed = `${path}?expires=${expires}`;
    return { url: `${signed}${SIGNATURE_PARAM}${this.mac(signed)}`, expiresAt: new Date(expires) };
  }

  /** Whether the request target (path and query as received) carries a link signature at all. */
  static isLink(pathAndQuery: string): boolean {
    return pathAndQuery.includes("?expires=") && pathAndQuery.includes(SIGNATURE_PARAM);
  }

  /** Checks a link (path and query as received); throws DownloadLinkError unless it is genuine and current. */
  verify(pathAndQuery: string): void {
    const at = pathAndQuery.lastIndexOf(SIGNATURE_PARAM);
    const signed = at === -1 ? "" : pathAndQuery.slice(0, at);
    const query = /\?expires=(\d{1,16})$/.exec(signed);
    const given = Buffer.from(at === -1 ? "" : pathAndQuery.slice(at + SIGNATURE_PARAM.length), "utf8");
    const expected = Buffer.from(this.mac(signed), "utf8");
    if (query === null || given.length !== SIGNATURE_CHARS || !timingSafeEqual(given, expected)) {
      throw new DownloadLinkError(
        "This download link is not valid: it was altered, or signed by another castor. Download the file again from the web interface.",
      );
    }
    if (this.now() >= Number(query[1])) {
      throw new DownloadLinkError("This download link has expired (links last a few minutes): download the file again from the web interface.");
    }
  }

  private mac(signed: string): string {
    return createHmac("sha256", this.key).update(signed, "utf8").digest("base64url");
  }
}
