/**
 * What castor's client commands (`upload`, `download`, `repo files`) share: the client made
 * from `--endpoint` / `--hub-token` (or `CASTOR_ENDPOINT` / `CASTOR_HUB_TOKEN`), and the
 * mapping of client errors caused by the command line to usage errors.
 */
import { CastorClient, CastorClientError, DEFAULT_ENDPOINT } from "../client/index.js";
import { UsageError } from "./args.js";

/** The flags every client command takes (`parseCommandLine` options). */
export const CLIENT_FLAGS = {
  repo: { type: "string" },
  revision: { type: "string" },
  endpoint: { type: "string" },
  "hub-token": { type: "string" },
} as const;

/** Client commands that move file contents also take `--concurrency`. */
export const TRANSFER_FLAGS = { ...CLIENT_FLAGS, concurrency: { type: "string" } } as const;

export interface ClientFlags {
  repo?: string;
  revision?: string;
  endpoint?: string;
  "hub-token"?: string;
}

/** The client from the shared flags, with the environment as fallback; `repo` overrides `--repo`. */
export function createClient(values: ClientFlags, repo: string | undefined = values.repo): CastorClient {
  if (repo === undefined) throw new UsageError("--repo TYPE:NS/NAME is required, e.g. --repo model:alice/bert");
  const hubToken = values["hub-token"] ?? nonEmpty(process.env.CASTOR_HUB_TOKEN);
  if (hubToken === undefined) {
    throw new UsageError("a hub token is required: set CASTOR_HUB_TOKEN (or pass --hub-token); 'castor token create' makes one");
  }
  const endpoint = values.endpoint ?? nonEmpty(process.env.CASTOR_ENDPOINT) ?? DEFAULT_ENDPOINT;
  try {
    return new CastorClient({ endpoint, hubToken, repo, revision: values.revision });
  } catch (error) {
    throw asUsageError(error);
  }
}

/** A client error caused by the command line becomes a UsageError (exit code 2). */
export function asUsageError(error: unknown): unknown {
  return error instanceof CastorClientError && error.kind === "usage" ? new UsageError(error.message) : error;
}

export function parsePositiveInt(flag: string, text: string): number {
  if (!/^\d+$/.test(text) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(`${flag} must be a whole number ≥ 1, got ${JSON.stringify(text)}`);
  }
  return Number(text);
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}
