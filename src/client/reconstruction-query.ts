/**
 * The reconstruction API as a download uses it (docs/protocol.md §8, docs/interface.md §4.1
 * operations 1–2): `ReconstructionQueries` asks for a byte range of one file with
 * `GET /v2/reconstructions/{hash}` and `Range: bytes=S-E`, falling back to V1 for the rest of
 * the download when V2 answers 404 or 501, and reads a 416 as the end of the file;
 * `parseReconstruction` checks an answer and pairs each term with the fetch range covering it;
 * `ReconstructionWindow` keeps one window's signed URLs and asks for the window again when a
 * transfer URL has expired (403).
 */
import {
  coversTerm,
  fetchSourcesOf,
  hashFromHex,
  isFormatError,
  parseReconstruction as parseWireReconstruction,
  type FetchSource,
  type Hash,
  type QueryReconstructionResponse,
  type QueryReconstructionResponseV2,
  type ReconstructionVersion,
} from "../format/index.js";
import type { CasClient } from "./cas.js";
import { CastorClientError, HttpStatusError } from "./errors.js";
import { discardBody, readJson } from "./http.js";

/** A reconstruction answer for one window; thousands of terms are a few MiB. */
const MAX_RECONSTRUCTION_JSON_BYTES = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// The reconstruction answer, normalized from V1 or V2

export interface ReconstructionTerm {
  xorbHex: string;
  xorbHash: Hash;
  chunkStart: number;
  /** Exclusive. */
  chunkEnd: number;
  unpackedLength: number;
  /** The fetch range that covers the term. */
  span: FetchSource;
}

export interface Reconstruction {
  offsetIntoFirstRange: number;
  terms: ReconstructionTerm[];
}

/**
 * Checks a V1 or V2 answer (every field, see parseReconstruction of src/format) and pairs each
 * term with the fetch range of its xorb that covers it (§8.4); a protocol error otherwise.
 */
export function parseReconstruction(body: unknown, version: ReconstructionVersion, what: string): Reconstruction {
  let answer: QueryReconstructionResponse | QueryReconstructionResponseV2;
  try {
    answer = parseWireReconstruction(body, version);
  } catch (error) {
    if (!isFormatError(error)) throw error;
    throw new CastorClientError("protocol", `${what}: ${error.message}`, { cause: error });
  }
  const sourcesByXorb = fetchSourcesOf(answer);
  const terms = answer.terms.map((term, i): ReconstructionTerm => {
    const span = sourcesByXorb.get(term.hash)?.find((source) => coversTerm(source, term));
    if (span === undefined) {
      throw new CastorClientError(
        "protocol",
        `${what}: invalid V${version} reconstruction: no fetch range of xorb ${term.hash} covers term ${i} (chunks ${term.range.start}..${term.range.end})`,
      );
    }
    return {
      xorbHex: term.hash,
      xorbHash: hashFromHex(term.hash),
      chunkStart: term.range.start,
      chunkEnd: term.range.end,
      unpackedLength: term.unpacked_length,
      span,
    };
  });
  return { offsetIntoFirstRange: answer.offset_into_first_range, terms };
}

/** Identifies a fetch range within one file's reconstruction: its xorb and chunks. */
export function spanKey(span: FetchSource): string {
  return `${span.xorbHex}:${span.chunks.start}-${span.chunks.end}`;
}

// ---------------------------------------------------------------------------------------------
// Asking for it

export interface ReconstructionReply {
  /** Null on 416: the range starts at or past the end of the file. */
  reconstruction: Reconstruction | null;
  /** With a 416, the file size when the server named it. */
  fileSize: number | null;
}

/** Reconstruction queries for one file: V2 until the server shows it does not serve V2, then V1. */
export class ReconstructionQueries {
  private useV1 = false;

  constructor(
    private readonly cas: CasClient,
    /** Hex string form of the file hash. */
    readonly hex: string,
  ) {}

  /** The answer format in use: 2 until a V2 query was answered 404 or 501. */
  get version(): 1 | 2 {
    return this.useV1 ? 1 : 2;
  }

  /** Asks for the reconstruction of bytes [start, end]; null on 416 (start past the end). */
  async query(start: number, end: number): Promise<ReconstructionReply> {
    const { hex } = this;
    const headers = { range: `bytes=${start}-${end}` };
    const what = `asking for the reconstruction of file ${hex} (bytes ${start}-${end})`;
    // No 404 hint: the server's message already says the file is not in the token's repository.
    if (!this.useV1) {
      const response = await this.cas.request({ what, path: `/v2/reconstructions/${hex}`, headers, passStatuses: [404, 416, 501] });
      if (response.status === 404 || response.status === 501) {
        // xet-core's rule: V2 unknown here (or the file is missing, which V1 will confirm).
        await discardBody(response);
        this.useV1 = true;
      } else {
        return this.read(response, 2, what);
      }
    }
    const response = await this.cas.request({ what, path: `/v1/reconstructions/${hex}`, headers, passStatuses: [416] });
    return this.read(response, 1, what);
  }

  private async read(response: Response, version: 1 | 2, what: string): Promise<ReconstructionReply> {
    if (response.status === 416) {
      await discardBody(response);
      const match = /^bytes \*\/(\d+)$/.exec(response.headers.get("content-range")?.trim() ?? "");
      return { reconstruction: null, fileSize: match ? Number(match[1]) : null };
    }
    const body = await readJson(response, MAX_RECONSTRUCTION_JSON_BYTES, what);
    return { reconstruction: parseReconstruction(body, version, what), fileSize: null };
  }
}

// ---------------------------------------------------------------------------------------------
// One window of a download

/**
 * One window's reconstruction and its signed URLs. A 403 from a transfer URL (expired) makes
 * it ask for the window again — once for all ranges waiting on it — and retry with the new URL.
 */
export class ReconstructionWindow {
  private urls = new Map<string, string>();
  private refreshing: Promise<void> | null = null;
  private generation = 0;
  fileSize: number | null = null;

  constructor(
    private readonly queries: ReconstructionQueries,
    private readonly start: number,
    private readonly end: number,
  ) {}

  async load(): Promise<Reconstruction | null> {
    const { reconstruction, fileSize } = await this.queries.query(this.start, this.end);
    this.fileSize = fileSize;
    if (reconstruction !== null) this.remember(reconstruction);
    return reconstruction;
  }

  /**
   * Fetches one range with `fetch`, given the range's current URL; "expired" (a 403, no byte
   * delivered) makes the window fetch fresh URLs and call `fetch` again.
   */
  async fetchSpan(span: FetchSource, fetch: (url: string) => Promise<"expired" | "done">): Promise<void> {
    const maxRefreshes = 2;
    for (let refreshes = 0; ; refreshes++) {
      const generation = this.generation;
      const url = this.urls.get(spanKey(span));
      if (url === undefined) {
        throw new CastorClientError(
          "protocol",
          `the refreshed reconstruction no longer lists chunks ${span.chunks.start}..${span.chunks.end} of xorb ${span.xorbHex}`,
        );
      }
      const result = await fetch(url);
      if (result !== "expired") return;
      if (refreshes >= maxRefreshes) {
        throw new HttpStatusError(
          403,
          null,
          `downloading chunks of xorb ${span.xorbHex}: the transfer URL was refused (403) even after ${maxRefreshes} fresh reconstructions`,
        );
      }
      await this.refresh(generation);
    }
  }

  /** Re-queries the window unless another range already did since `seen`. */
  private async refresh(seen: number): Promise<void> {
    if (this.generation !== seen) return;
    this.refreshing ??= (async () => {
      try {
        const { reconstruction } = await this.queries.query(this.start, this.end);
        if (reconstruction === null)
          throw new CastorClientError("protocol", `the reconstruction of bytes ${this.start}-${this.end} vanished (416) while downloading`);
        this.remember(reconstruction);
        this.generation++;
      } finally {
        this.refreshing = null;
      }
    })();
    await this.refreshing;
  }

  private remember(reconstruction: Reconstruction): void {
    const urls = new Map<string, string>();
    for (const term of reconstruction.terms) urls.set(spanKey(term.span), term.span.url);
    this.urls = urls;
  }
}
