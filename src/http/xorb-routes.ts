/**
 * Xorb routes (docs/interface.md §4.1 operation 4, docs/protocol.md §5.6 and §9):
 *
 *     POST /v1/xorbs/default/{hash}   write scope   body: the serialized xorb → {"was_inserted": bool}
 *     HEAD /v1/xorbs/default/{hash}   read scope    200 + Content-Length (stored size) / 404
 *     POST /v1/telemetry              read scope    body read and dropped → 200
 *
 * `/xorbs/{prefix}/{hash}` (hf_xet of 2025-09…11) is served as an alias of both xorb routes.
 * Bodies arrive raw (no Content-Type needed, see raw-body.ts) and stream into the ingest
 * service; the cap is `XorbIngestService.maxBodyBytes` (CASTOR_MAX_XORB_BYTES).
 *
 * Register with `await cas.register(xorbRoutes, { xorbs })` inside the CAS scope (cas-scope.ts).
 */
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import type { XorbIngestService } from "../cas/xorb-ingest.js";
import { hashFromHex, isHashHex, type Hash } from "../format/hash.js";
import { ERROR_BODY_SCHEMA, HttpError, pathOf } from "./errors.js";
import { bodyPieces, discardBody, settleUnreadBody } from "./raw-body.js";

export interface XorbRouteDeps {
  xorbs: Pick<XorbIngestService, "ingest" | "storedSize" | "maxBodyBytes">;
}

/** The one prefix clients use for xorbs (docs/interface.md §4.1, operation 4). */
export const XORB_PREFIX = "default";

/** Telemetry is informational; a larger body is not telemetry. */
export const MAX_TELEMETRY_BODY_BYTES = 1024 * 1024;

const XORB_PATHS = ["/v1/xorbs/:prefix/:hash", "/xorbs/:prefix/:hash"] as const;

interface XorbParams {
  prefix: string;
  hash: string;
}

const UPLOAD_RESPONSE_SCHEMA = {
  200: {
    type: "object",
    required: ["was_inserted"],
    additionalProperties: false,
    properties: { was_inserted: { type: "boolean" } },
  },
  "4xx": ERROR_BODY_SCHEMA,
} as const;

export const xorbRoutes: FastifyPluginAsync<XorbRouteDeps> = async (app, { xorbs }) => {
  for (const path of XORB_PATHS) {
    app.post<{ Params: XorbParams }>(
      path,
      { config: { casScope: "write", upload: true }, bodyLimit: xorbs.maxBodyBytes, schema: { response: UPLOAD_RESPONSE_SCHEMA } },
      async (request) => {
        const hash = parseXorbAddress(request);
        try {
          const { wasInserted, outcome } = await xorbs.ingest(hash, bodyPieces(request));
          // Debug only: at info level each request logs exactly one line (logging.ts).
          request.log.debug({ xorb: request.params.hash, outcome, wasInserted }, "xorb upload");
          return { was_inserted: wasInserted };
        } catch (error) {
          throw settleUnreadBody(request, error);
        }
      },
    );

    app.head<{ Params: XorbParams }>(path, { config: { casScope: "read" } }, async (request, reply) => {
      const size = await xorbs.storedSize(parseXorbAddress(request));
      if (size === null) throw new HttpError(404, `Xorb ${request.params.hash} is not stored: upload it with POST ${pathOf(request.url)}`);
      // No body: fastify keeps a Content-Length set on a HEAD answer.
      return reply.header("content-length", String(size)).type("application/octet-stream").send();
    });
  }

  app.post("/v1/telemetry", { config: { casScope: "read" }, bodyLimit: MAX_TELEMETRY_BODY_BYTES }, async (request, reply) => {
    await discardBody(request);
    return reply.code(200).send();
  });
};

/** The xorb hash of the path; 400 for another prefix or a malformed hash, before any body byte is read. */
function parseXorbAddress(request: FastifyRequest<{ Params: XorbParams }>): Hash {
  const { prefix, hash } = request.params;
  if (prefix !== XORB_PREFIX) {
    throw refuse(request, `Unknown xorb prefix ${JSON.stringify(prefix)}: xorbs live under "${XORB_PREFIX}" (/v1/xorbs/${XORB_PREFIX}/{hash})`);
  }
  if (!isHashHex(hash)) {
    throw refuse(request, `Malformed xorb hash ${JSON.stringify(hash.slice(0, 80))}: it must be exactly 64 lowercase hexadecimal characters`);
  }
  return hashFromHex(hash);
}

/**
 * A refusal before the body was touched. The body is still read off and dropped in the
 * background (bounded by the route's cap), so the client gets this answer and not a reset.
 */
function refuse(request: FastifyRequest, message: string): HttpError {
  return settleUnreadBody(request, new HttpError(400, message));
}
