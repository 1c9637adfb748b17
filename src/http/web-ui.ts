/**
 * The web interface (web/, built by `npm run build` into dist/web/): served by castor itself,
 * from memory, with no request leaving the origin.
 *
 * Where it lives: below `/-/ui/`. The Hub's URL space starts with a namespace
 * (`/{ns}/{name}/resolve/…`), and a namespace starts with a letter or digit (hub/names.ts), so
 * no repository can ever own a path starting with `/-/` (GitLab separates its own pages from
 * namespaces the same way). A `/ui/` prefix would have hidden the files of every repository in
 * a namespace called `ui`.
 *
 * Browsers that ask for HTML (`Accept: text/html`) are sent there from `/`, and from a
 * repository's Hub-style address (`/{ns}/{name}`, `/datasets/{ns}/{name}`,
 * `/spaces/{ns}/{name}`), which answer nothing else: every other request to these paths — what
 * Hugging Face clients send — gets the same 404 as before.
 *
 * Every path below `/-/ui/` that is not an asset answers the app's page (the app routes in the
 * browser, with the History API). The page carries a strict Content-Security-Policy: scripts,
 * styles and requests from the origin only, nothing inline, no framing.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";

export const WEB_UI_PATH = "/-/ui/";

/** dist/web/, the same from the sources (src/http/) and from the build (dist/http/). */
export const WEB_UI_DIR = fileURLToPath(new URL("../../dist/web/", import.meta.url));

const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".map": "application/json",
  ".txt": "text/plain; charset=utf-8",
};

interface Asset {
  type: string;
  body: Buffer;
}

export interface WebUiOptions {
  /** Where the built interface is; WEB_UI_DIR by default. */
  dir?: string;
}

/** The built files, read once: a few hundred KiB, and the build never changes under a running server. */
async function loadBuild(dir: string): Promise<{ page: Buffer; assets: Map<string, Asset> } | null> {
  let page: Buffer;
  try {
    page = await readFile(join(dir, "index.html"));
  } catch {
    return null;
  }
  const assets = new Map<string, Asset>();
  for (const name of await readdir(join(dir, "assets")).catch(() => [])) {
    const type = CONTENT_TYPES[name.slice(name.lastIndexOf("."))];
    if (type !== undefined) assets.set(name, { type, body: await readFile(join(dir, "assets", name)) });
  }
  return { page, assets };
}

function wantsHtml(request: FastifyRequest): boolean {
  return (request.headers.accept ?? "").includes("text/html");
}

export async function webUiRoutes(app: FastifyInstance, options: WebUiOptions): Promise<void> {
  const build = await loadBuild(options.dir ?? WEB_UI_DIR);

  const sendPage = (reply: FastifyReply) => {
    reply.header("content-security-policy", CONTENT_SECURITY_POLICY);
    reply.header("x-content-type-options", "nosniff");
    reply.header("referrer-policy", "no-referrer");
    reply.header("cache-control", "no-cache");
    if (build === null) {
      // A checkout run from source before `npm run build`: say so rather than a bare 404.
      return reply
        .code(503)
        .type("text/plain; charset=utf-8")
        .send("castor's web interface is not built: run `npm run build` (it writes dist/web/), then restart castor.\n");
    }
    return reply.type("text/html; charset=utf-8").send(build.page);
  };

  app.get("/", (request, reply) => (wantsHtml(request) ? reply.redirect(WEB_UI_PATH) : reply.callNotFound()));
  app.get("/-/ui", (_request, reply) => reply.redirect(WEB_UI_PATH));
  for (const [prefix, plural] of [
    ["", "models"],
    ["/datasets", "datasets"],
    ["/spaces", "spaces"],
  ]) {
    app.get<{ Params: { namespace: string; name: string } }>(`${prefix}/:namespace/:name`, (request, reply) => {
      if (!wantsHtml(request)) return reply.callNotFound();
      const { namespace, name } = request.params;
      return reply.redirect(`${WEB_UI_PATH}${plural}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`);
    });
  }
  app.get<{ Params: { name: string } }>(`${WEB_UI_PATH}assets/:name`, (request, reply) => {
    const asset = build?.assets.get(request.params.name);
    if (asset === undefined) return reply.callNotFound();
    reply.header("x-content-type-options", "nosniff");
    // Asset names carry a hash of their content (the build names them so).
    reply.header("cache-control", "public, max-age=31536000, immutable");
    return reply.type(asset.type).send(asset.body);
  });
  app.get(WEB_UI_PATH, (_request, reply) => sendPage(reply));
  app.get(`${WEB_UI_PATH}*`, (_request, reply) => sendPage(reply));
}
