#!/usr/bin/env node
// Builds the web interface (web/) into dist/web/: one JavaScript and one CSS bundle named by a
// hash of their content (castor serves them as immutable), and index.html naming them. Run by
// `npm run build`; the server reads dist/web/ at start (src/http/web-ui.ts).
//
// Why this stack: Preact (a 4 KiB React-compatible renderer) with TSX, so the pages are typed
// like the rest of castor; esbuild, already castor's TypeScript compiler through tsx, as the one
// build tool; marked + DOMPurify for READMEs (Markdown rendered, then sanitised); the chart is
// hand-drawn SVG. Everything is bundled: the page loads nothing but its two files from castor,
// so it works on a network with no way out.
import { mkdir, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "web");
const BASE = "/-/ui/";

await rm(out, { recursive: true, force: true });
await mkdir(join(out, "assets"), { recursive: true });
const result = await build({
  absWorkingDir: root,
  entryPoints: { app: "web/src/main.tsx" },
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  sourcemap: "linked",
  jsx: "automatic",
  jsxImportSource: "preact",
  entryNames: "[name]-[hash]",
  outdir: join(out, "assets"),
  metafile: true,
  legalComments: "linked",
  logLevel: "warning",
});
const outputs = Object.keys(result.metafile.outputs).map((path) => basename(path));
const script = outputs.find((name) => name.endsWith(".js"));
const style = outputs.find((name) => name.endsWith(".css"));
if (!script || !style) throw new Error(`the web build made no script or no stylesheet: ${outputs.join(", ")}`);
// No inline script or style: the page's Content-Security-Policy allows neither.
const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>castor</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${BASE}assets/${style}">
<script type="module" src="${BASE}assets/${script}"></script>
</head>
<body>
<div id="app"></div>
<noscript>castor's web interface needs JavaScript. The Hugging Face API at this address works without it.</noscript>
</body>
</html>
`;
await writeFile(join(out, "index.html"), page);
console.log(`web interface built into dist/web/ (${script}, ${style})`);
