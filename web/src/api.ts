/**
 * Talking to castor from the browser: the Hugging Face API and castor's /api/castor/ routes, on
 * the page's own origin. The hub token the user signs in with lives in session storage (gone
 * when the tab closes) and goes out as a bearer on every call.
 */

const TOKEN_KEY = "castor.hubToken";

export function storedToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function storeToken(token: string | null): void {
  if (token === null) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, token);
}

/** An answer other than 2xx, with castor's message (its errors are `{"error": "…"}`). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const token = storedToken();
  return token === null ? extra : { ...extra, authorization: `Bearer ${token}` };
}

export async function request(path: string, init: { method?: string; json?: unknown } = {}): Promise<Response> {
  const response = await fetch(path, {
    method: init.method ?? "GET",
    headers: headers(init.json === undefined ? {} : { "content-type": "application/json" }),
    body: init.json === undefined ? undefined : JSON.stringify(init.json),
  });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = (await response.json()) as { error?: string };
      if (typeof body.error === "string") message = body.error;
    } catch {
      // Not JSON: the status line says enough.
    }
    throw new ApiError(response.status, message);
  }
  return response;
}

export async function getJson<T>(path: string): Promise<T> {
  return (await request(path)).json() as Promise<T>;
}

export async function sendJson<T>(method: string, path: string, json: unknown): Promise<T> {
  return (await request(path, { method, json })).json() as Promise<T>;
}

/** Every page of a listing that pages with `Link: <…>; rel="next"` (trees, commits). */
export async function getAllPages<T>(path: string): Promise<T[]> {
  const items: T[] = [];
  for (let next: string | null = path; next !== null; ) {
    const response = await request(next);
    items.push(...((await response.json()) as T[]));
    const link = /<([^>]+)>;\s*rel="next"/.exec(response.headers.get("link") ?? "");
    // The server names its public URL; only its path and query are ours to follow (same origin).
    next = link === null ? null : new URL(link[1]).pathname + new URL(link[1]).search;
  }
  return items;
}

export type RepoType = "model" | "dataset" | "space";
export const REPO_TYPES: readonly RepoType[] = ["model", "dataset", "space"];
export const PLURAL: Record<RepoType, string> = { model: "models", dataset: "datasets", space: "spaces" };

export interface RepoId {
  type: RepoType;
  /** `namespace/name`. */
  name: string;
}

/** Path segments escaped one by one: names and file paths keep their `/`. */
export function encodePath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

/** `/api/{type}s/{ns}/{name}`. */
export function apiBase(repo: RepoId): string {
  return `/api/${PLURAL[repo.type]}/${encodePath(repo.name)}`;
}

/** The file URL Hugging Face clients download from: `/{prefix}{ns}/{name}/resolve/{rev}/{path}`. */
export function resolveUrl(repo: RepoId, revision: string, path: string): string {
  const prefix = repo.type === "model" ? "" : `/${PLURAL[repo.type]}`;
  // The revision is one segment (a branch may contain `/`), as the Hub's clients send it.
  return `${prefix}/${encodePath(repo.name)}/resolve/${encodeURIComponent(revision)}/${encodePath(path)}`;
}

// The answers' shapes, declared once with the routes that send them.
export type {
  Commit,
  CreatedToken,
  CreateTokenBody,
  DownloadLink,
  DownloadLinkBody,
  MaintenanceRun,
  Me,
  MirrorStatus,
  Refs,
  RepoStorage,
  RepoSummary,
  Sharing,
  StorageStatsAnswer as Stats,
  TokenInfo,
  TreeEntry,
} from "../../src/wire/hub.js";
