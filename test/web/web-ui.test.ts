/**
 * The web interface end to end: a real headless Chromium (Debian's `chromium`, driven by
 * playwright-core) against a real `castor serve` holding uploaded repositories. Anonymous
 * browsing sees public repositories only; signing in with a hub token; a repository's files,
 * README, revisions and history; downloads byte-exact (anonymous link, and signed-in through a
 * signed link the browser's download manager streams to disk, a 96 MiB file included);
 * the storage dashboard's numbers against `castor stats --json`; a file's shared chunks; tokens
 * created and revoked from the admin page.
 *
 * Every request the browser makes to anything but castor is refused and recorded (the page must
 * work air-gapped), every page is checked with axe-core (no serious or critical violation) and
 * photographed at 1280×800 into test-output/screenshots/, which CI keeps. Keyboard: tabbing
 * reaches every control of the repository and admin pages.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { CastorClient } from "../../src/client/index.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";

// The callbacks given to page.evaluate run in the browser, with its globals; this file is
// type-checked without the DOM library (it would change fetch's types for every test).
declare const document: any;
declare const window: any;
declare const sessionStorage: any;
type HTMLElement = any;

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const SCREENSHOT_DIR = join(ROOT, "test-output", "screenshots");
const CHROMIUM = process.env.CASTOR_TEST_CHROMIUM ?? "/usr/bin/chromium";
const AXE_SOURCE = join(ROOT, "node_modules", "axe-core", "axe.min.js");

const WEIGHTS = randomBytes(700_000);
/** A file a tab must not hold whole: the signed-in download of it is streamed to disk. */
const LARGE_FILE_BYTES = 96 * 1024 * 1024;
/** Most of WEIGHTS, then more: the dataset's file shares chunks with the model's. */
const CORPUS = Buffer.concat([WEIGHTS.subarray(0, 500_000), randomBytes(200_000)]);
const README = `---
license: apache-2.0
---
# Bert for castor

A **model card** with a [link](https://example.org) and a table:

| a | b |
|---|---|
| 1 | 2 |

<script>window.__readmeRan = true</script>
<img src="x" onerror="window.__readmeRan = true">
<a href="javascript:window.__readmeRan = true">bad link</a>
`;

let server: ServerProcess;
let work: string;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let adminToken: string;
/** Requests the browser tried to send anywhere but castor; must stay empty. */
const escaped: string[] = [];
/** Console errors, CSP refusals included. */
const consoleErrors: string[] = [];

async function cli(...args: string[]): Promise<string> {
  const result = await runCastor(args, { env: server.settings });
  assert.equal(result.code, 0, result.stderr);
  return result.stdout.trim();
}

async function hubJson(method: string, path: string, body?: unknown, token = adminToken): Promise<any> {
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${await response.clone().text()}`);
  return response.json();
}

async function sha256Of(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk);
  return hash.digest("hex");
}

async function file(name: string, data: Buffer | string): Promise<string> {
  const path = join(work, name);
  await writeFile(path, data);
  return path;
}

/** The repositories: alice/bert (public model: README, config, Xet weights, a dev branch, a tag) and alice/corpus (private dataset). */
async function seed(): Promise<void> {
  await hubJson("POST", "/api/repos/create", { type: "model", name: "alice/bert", private: false });
  await hubJson("POST", "/api/repos/create", { type: "dataset", name: "alice/corpus", private: true });
  const bert = new CastorClient({ endpoint: server.url, hubToken: adminToken, repo: "model:alice/bert" });
  await bert.commit({
    summary: "Add the model card and config",
    operations: [
      { kind: "file", path: "README.md", content: Buffer.from(README) },
      { kind: "file", path: "config.json", content: Buffer.from('{"layers": 12}\n') },
    ],
  });
  await bert.uploadToRepo([await file("model.bin", WEIGHTS)], { pathInRepo: "weights/model.bin", message: "Add the weights" });
  await bert.commit({ summary: "Use 24 layers", operations: [{ kind: "file", path: "config.json", content: Buffer.from('{"layers": 24}\n') }] });
  await hubJson("POST", "/api/models/alice/bert/tag/main", { tag: "v1.0" });
  await hubJson("POST", "/api/models/alice/bert/branch/dev", {});
  const dev = new CastorClient({ endpoint: server.url, hubToken: adminToken, repo: "model:alice/bert", revision: "dev" });
  await dev.commit({ summary: "Try a tokenizer", operations: [{ kind: "file", path: "tokenizer.json", content: Buffer.from("{}\n") }] });
  const corpus = new CastorClient({ endpoint: server.url, hubToken: adminToken, repo: "dataset:alice/corpus" });
  await corpus.uploadToRepo([await file("train.bin", CORPUS)], { pathInRepo: "data/train.bin", message: "Add the training data" });
}

/** Runs axe-core in the page; fails on any serious or critical violation. */
async function checkAccessibility(name: string): Promise<void> {
  // Evaluated through the DevTools protocol, which the page's CSP does not govern (an injected <script> would be refused).
  await page.evaluate(await readFile(AXE_SOURCE, "utf8"));
  const violations = await page.evaluate(async () => {
    const axe = (window as any).axe;
    const result = await axe.run(document, { resultTypes: ["violations"] });
    return result.violations.map((v: any) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n: any) => n.target.join(" ")).slice(0, 5) }));
  });
  const serious = violations.filter((v: any) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(serious, [], `axe on ${name}: ${JSON.stringify(serious, null, 2)}`);
}

async function shoot(name: string): Promise<void> {
  await page.screenshot({ path: join(SCREENSHOT_DIR, `${name}.png`), fullPage: false });
}

/** Visits a page of the interface and waits for its heading. */
async function open(path: string, heading: string | RegExp): Promise<void> {
  await page.goto(`${server.url}/-/ui/${path}`);
  await page.getByRole("heading", { level: 1, name: heading }).waitFor();
}

/**
 * Presses Tab until focus comes back round, and checks that every visible control of the page
 * (links, buttons, fields, disclosure summaries) held it once.
 */
async function checkKeyboardReach(name: string): Promise<void> {
  const controls = await page.evaluate(() => {
    const all: HTMLElement[] = [...document.querySelectorAll("a[href], button:not([disabled]), input:not([disabled]), select:not([disabled]), summary")];
    all.forEach((element, index) => {
      element.dataset.reach = String(index);
    });
    return all.filter((element) => element.getClientRects().length > 0 && !element.closest("[hidden]")).map((element) => element.dataset.reach!);
  });
  const reached = new Set<string>();
  await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
  for (let presses = 0; presses < controls.length + 10; presses++) {
    await page.keyboard.press("Tab");
    const index = await page.evaluate(() => (document.activeElement as HTMLElement | null)?.dataset.reach ?? null);
    if (index !== null) reached.add(index);
  }
  const missed = await page.evaluate(
    (missing) => missing.map((index: string) => document.querySelector(`[data-reach="${index}"]`)?.outerHTML.slice(0, 120)),
    controls.filter((index) => !reached.has(index)),
  );
  assert.deepEqual(missed, [], `controls of the ${name} page that Tab never reached`);
}

before(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it), or set CASTOR_TEST_CHROMIUM`);
  // The page the server sends is dist/web/: built from the current sources.
  const build = spawnSync(process.execPath, [join(ROOT, "scripts", "build-web.mjs")], { encoding: "utf8" });
  assert.equal(build.status, 0, build.stderr);
  await mkdir(SCREENSHOT_DIR, { recursive: true });
  work = await mkdtemp(join(tmpdir(), "castor-web-"));
  server = await startCastorServer({ env: { CASTOR_HUB_INLINE_MAX_BYTES: String(64 * 1024) } });
  adminToken = (await cli("token", "create", "--all-repos", "--access", "write", "--user", "root")).split("\n").at(-1)!;
  await seed();
  await cli("fsck");

  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  context = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true });
  const origin = new URL(server.url).origin;
  await context.route("**", (route) => {
    const url = route.request().url();
    if (url.startsWith(`${origin}/`) || url.startsWith("blob:") || url.startsWith("data:")) return route.continue();
    escaped.push(url);
    return route.abort("blockedbyclient");
  });
  page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() === "error") consoleErrors.push(`${page.url()}: ${message.text()}`);
  });
  page.on("pageerror", (error) => consoleErrors.push(String(error)));
});

after(async () => {
  await browser?.close();
  await server?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("the web interface in Chromium", () => {
  it("sends a browser at / to the interface and shows anonymous users public repositories only", async () => {
    await page.goto(`${server.url}/`);
    assert.equal(new URL(page.url()).pathname, "/-/ui/");
    await page.getByRole("heading", { name: "Repositories" }).waitFor();
    const list = page.getByTestId("repo-list");
    await list.getByRole("link", { name: "alice/bert" }).waitFor();
    assert.equal(await list.getByRole("link", { name: "alice/corpus" }).count(), 0);
    assert.equal(await page.getByRole("link", { name: "Storage" }).count(), 0, "no admin pages for anonymous users");
    // Sizes arrive one request per repository.
    await list.locator("data").first().waitFor();
    await shoot("repositories-anonymous");
    await checkAccessibility("the anonymous repository list");
  });

  it("downloads a public file byte-exact without signing in", async () => {
    await open("models/alice/bert?path=weights", "alice/bert");
    const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: "Download weights/model.bin" }).click()]);
    assert.ok((await readFile((await download.path())!)).equals(WEIGHTS), "the downloaded file equals the uploaded one");
  });

  it("refuses a private repository to anonymous users and signs in with a hub token", async () => {
    await open("datasets/alice/corpus", "alice/corpus");
    await page.getByRole("alert").waitFor();
    await page.getByRole("link", { name: "Sign in" }).first().click();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await page.getByLabel("Hub token").fill("hf_wrong");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("alert").waitFor();
    await shoot("sign-in");
    await checkAccessibility("the sign-in page");
    await page.getByLabel("Hub token").fill(adminToken);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Storage" }).waitFor();
    assert.equal(await page.getByTestId("signed-in-as").textContent(), "root (admin)");
    assert.equal(await page.evaluate(() => sessionStorage.getItem("castor.hubToken")), adminToken, "the token lives in session storage");
  });

  it("lists the private repository once signed in, with type filter and search", async () => {
    await open("", "Repositories");
    const list = page.getByTestId("repo-list");
    await list.getByRole("link", { name: "alice/corpus" }).waitFor();
    await page.getByLabel("Type").selectOption("dataset");
    await page.waitForURL(/type=dataset/);
    await list.getByRole("link", { name: "alice/corpus" }).waitFor();
    await list.getByRole("link", { name: "alice/bert" }).waitFor({ state: "detached" });
    await page.getByLabel("Type").selectOption("all");
    await page.getByLabel("Search by name").fill("ber");
    await page.waitForURL(/q=ber/);
    await list.getByRole("link", { name: "alice/corpus" }).waitFor({ state: "detached" });
    await list.getByRole("link", { name: "alice/bert" }).waitFor();
  });

  it("opens a repository: refs, files with sizes and storage, the README sanitised", async () => {
    await open("", "Repositories");
    await page.getByTestId("repo-list").getByRole("link", { name: "alice/bert" }).click();
    await page.getByRole("heading", { level: 1, name: /alice\/bert/ }).waitFor();
    const tree = page.getByTestId("file-tree");
    await tree.getByRole("link", { name: "weights/" }).waitFor();
    assert.match((await page.getByTestId("refs").textContent())!, /2 branches: main, dev · 1 tag: v1\.0/);
    const config = tree.getByRole("row", { name: /config\.json/ });
    assert.match((await config.textContent())!, /inline/);
    const readme = page.locator(".markdown");
    await readme.getByRole("heading", { name: "Bert for castor" }).waitFor();
    assert.equal(await readme.locator("table").count(), 1);
    assert.equal(await readme.locator("script, [onerror], a[href^='javascript:']").count(), 0, "nothing that runs survives sanitising");
    assert.ok(!(await readme.textContent())!.includes("license: apache-2.0"), "the YAML header is not shown");
    assert.equal(await page.evaluate(() => (window as any).__readmeRan), undefined);
    await shoot("repository");
    await checkAccessibility("the repository page");
    await checkKeyboardReach("repository");

    await tree.getByRole("link", { name: "weights/" }).click();
    const weights = tree.getByRole("row", { name: /model\.bin/ });
    await weights.waitFor();
    assert.match((await weights.textContent())!, /Xet/);
    assert.equal(await weights.locator("data").getAttribute("value"), String(WEIGHTS.length));
  });

  it("switches revision: a branch, a tag, a commit", async () => {
    await open("models/alice/bert", /alice\/bert/);
    const tree = page.getByTestId("file-tree");
    await tree.getByRole("link", { name: "config.json", exact: true }).waitFor();
    assert.equal(await tree.getByRole("link", { name: "tokenizer.json", exact: true }).count(), 0);
    await page.getByLabel("Revision").selectOption("dev");
    await page.waitForURL(/rev=dev/);
    await tree.getByRole("link", { name: "tokenizer.json", exact: true }).waitFor();
    await page.getByLabel("Revision").selectOption("v1.0");
    await tree.getByRole("link", { name: "tokenizer.json", exact: true }).waitFor({ state: "detached" });
    // The first commit's files: no weights yet, the first config.
    const first = (await hubJson("GET", "/api/models/alice/bert/commits/main")).at(-2).id;
    await open(`models/alice/bert?rev=${first}`, /alice\/bert/);
    await tree.getByRole("link", { name: "config.json", exact: true }).waitFor();
    assert.equal(await tree.getByRole("link", { name: "weights/" }).count(), 0);
    const [download] = await Promise.all([page.waitForEvent("download"), tree.getByRole("link", { name: "Download config.json" }).click()]);
    assert.equal(await readFile((await download.path())!, "utf8"), '{"layers": 12}\n');
  });

  it("shows the history with each commit's changed files", async () => {
    await open("models/alice/bert?tab=history", /alice\/bert/);
    const commits = page.getByTestId("commit-list").locator(":scope > li");
    await commits.first().waitFor();
    assert.deepEqual(
      await commits.locator("strong").allTextContents(),
      ["Use 24 layers", "Add the weights", "Add the model card and config", "initial commit"].slice(0, await commits.count()),
    );
    await commits.nth(0).getByText("Changed files").click();
    await commits.nth(0).getByText("modified").waitFor();
    assert.match((await commits.nth(0).locator(".changes").textContent())!, /modified config\.json/);
    await commits.nth(1).getByText("Changed files").click();
    await commits.nth(1).getByText("added").first().waitFor();
    const added = (await commits.nth(1).locator(".changes").textContent())!;
    assert.match(added, /added weights\/model\.bin/);
    // The hub added the Xet-stored file to .gitattributes in the same commit, as the Hub does.
    assert.match(added, /added \.gitattributes/);
    await shoot("history");
    await checkAccessibility("the history");
  });

  it("downloads a private Xet file byte-exact through a signed link, and shows its shared chunks", async () => {
    await open("datasets/alice/corpus?path=data&file=data%2Ftrain.bin", /alice\/corpus/);
    await page.getByTestId("file-size").waitFor();
    assert.equal(await page.getByTestId("file-size").getAttribute("value"), String(CORPUS.length));
    const sharing = page.getByTestId("chunk-sharing");
    await sharing.getByText(/chunks \(/).waitFor();
    const [shared, total] = await sharing.locator("data").evaluateAll((nodes) => nodes.slice(0, 2).map((node) => Number(node.getAttribute("value"))));
    assert.ok(shared > 0 && shared < total, `${shared} of ${total} chunks shared`);
    assert.match((await sharing.textContent())!, /model:alice\/bert/);
    const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: "Download train.bin" }).click()]);
    assert.ok((await readFile((await download.path())!)).equals(CORPUS), "the downloaded file equals the uploaded one");
    await shoot("file");
    await checkAccessibility("the file page");
  });

  it("streams a large private file to disk through the browser's download manager, never through the page", async () => {
    // Far more than a page should hold: the old way (fetch, then a blob) kept all of it in the tab.
    const large = randomBytes(LARGE_FILE_BYTES);
    const corpus = new CastorClient({ endpoint: server.url, hubToken: adminToken, repo: "dataset:alice/corpus" });
    await corpus.uploadToRepo([await file("large.bin", large)], { pathInRepo: "data/large.bin", message: "Add a large file" });

    // What the page does with response bodies, recorded from before its scripts run.
    await page.addInitScript(() => {
      const seen: { fetched: string[]; objectUrls: number } = { fetched: [], objectUrls: 0 };
      (window as any).__bodies = seen;
      const fetch = window.fetch.bind(window);
      window.fetch = (input: any, init?: any) => {
        seen.fetched.push(String(input instanceof Request ? input.url : input));
        return fetch(input, init);
      };
      const createObjectURL = URL.createObjectURL.bind(URL);
      URL.createObjectURL = (object: any) => {
        seen.objectUrls++;
        return createObjectURL(object);
      };
    });
    const requests: { url: string; type: string }[] = [];
    const onRequest = (request: any) => requests.push({ url: request.url(), type: request.resourceType() });
    page.on("request", onRequest);
    try {
      await open("datasets/alice/corpus?path=data", /alice\/corpus/);
      const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: "Download data/large.bin" }).click()]);
      assert.equal(download.suggestedFilename(), "large.bin");
      const saved = (await download.path())!;
      assert.equal((await stat(saved)).size, large.length);
      assert.equal(await sha256Of(saved), createHash("sha256").update(large).digest("hex"), "the saved file equals the uploaded one");

      // The browser's download manager fetched it (Playwright's download is the manager's), the page did not.
      assert.match(download.url(), /\/datasets\/alice\/corpus\/resolve\/[0-9a-f]{40}\/data\/large\.bin\?expires=\d+&signature=[A-Za-z0-9_-]{43}$/);
      assert.deepEqual(
        requests.filter((request) => request.url.includes("/resolve/")),
        [],
        "no request of the page's own fetched the file",
      );
      const served = server.requestLog().filter((line) => /\/resolve\/[0-9a-f]{40}\/data\/large\.bin$/.test(line.path));
      assert.deepEqual(
        served.map((line) => [line.method, line.statusCode]),
        [["GET", 200]],
        "castor sent it once, whole",
      );
      const bodies = await page.evaluate(() => (window as any).__bodies);
      assert.deepEqual(
        bodies.fetched.filter((url: string) => !url.startsWith("/api/")),
        [],
        "the page fetched nothing but API answers",
      );
      assert.ok(bodies.fetched.includes("/api/castor/download-links"), JSON.stringify(bodies.fetched));
      assert.equal(bodies.objectUrls, 0, "no blob was made of a response");
    } finally {
      page.off("request", onRequest);
    }
  });

  it("shows the storage dashboard with the numbers of castor stats", async () => {
    await open("storage", "Storage");
    await page.getByTestId("total-logical").waitFor();
    const expected = JSON.parse(await cli("stats", "--json"));
    const value = async (testId: string) => page.getByTestId(testId).getAttribute("value");
    assert.equal(await value("total-logical"), String(expected.totals.logicalBytes));
    assert.equal(await value("total-unique"), String(expected.totals.uniqueBytes));
    assert.equal(await value("total-stored"), String(expected.totals.storedBytes));
    assert.equal(Number(await value("total-dedup")), expected.totals.dedupRatio);
    assert.equal(Number(await value("total-compression")), expected.totals.compressionRatio);
    assert.equal(await value("total-unreferenced"), String(expected.totals.unreferencedXorbBytes));
    assert.ok(expected.totals.logicalBytes > expected.totals.storedBytes, "the shared chunks are stored once");
    for (const repo of expected.repositories) {
      const row = page.getByTestId("repo-storage").locator(`tr[data-repo="${repo.type}:${repo.name}"]`);
      assert.deepEqual(await row.locator("data").evaluateAll((nodes) => nodes.map((node) => node.getAttribute("value"))), [
        String(repo.logicalBytes),
        String(repo.storedBytes),
      ]);
    }
    await page.getByTestId("history-chart").waitFor();
    // Today's sample is the measurement the page shows: the chart's last point is today's uploads.
    assert.match((await page.getByTestId("history-chart").getAttribute("aria-label"))!, new RegExp(`daily samples?\\); on ${expected.history.at(-1).day}: `));
    assert.equal(expected.history.at(-1).logicalBytes, expected.totals.logicalBytes);
    await shoot("storage");
    await checkAccessibility("the storage dashboard");
  });

  it("creates a token shown once, and revokes it, on the admin page; shows the last fsck", async () => {
    await open("admin", "Admin");
    await page.getByTestId("run-fsck").waitFor();
    await page.getByLabel("Access").selectOption("read");
    await page.getByRole("textbox", { name: "Repositories" }).fill("dataset:alice/corpus");
    await page.getByLabel("User").fill("carol");
    await page.getByRole("button", { name: "Create token" }).click();
    const secret = await page.getByTestId("new-token-secret").inputValue();
    assert.match(secret, /^hf_/);
    const me = await hubJson("GET", "/api/castor/me", undefined, secret);
    assert.deepEqual([me.user, me.access, me.admin], ["carol", "read", false]);
    await shoot("admin");
    await checkAccessibility("the admin page");
    await checkKeyboardReach("admin");

    await page.getByRole("button", { name: "Done, hide it" }).click();
    assert.equal(await page.getByTestId("new-token").count(), 0, "the secret is gone from the page");
    const row = page.getByTestId("token-list").locator(`tr[data-token="${me.id}"]`);
    await row.getByRole("button", { name: `Revoke token ${me.id}` }).click();
    await row.getByTestId("token-state").getByText("revoked").waitFor();
    const refused = await fetch(`${server.url}/api/castor/me`, { headers: { authorization: `Bearer ${secret}` } });
    assert.equal(refused.status, 401);
  });

  it("creates a repository, changes its visibility and deletes it on the admin page", async () => {
    await open("admin", "Admin");
    await page.getByLabel("Type", { exact: true }).selectOption("space");
    await page.getByLabel("Name", { exact: true }).fill("alice/demo");
    await page.getByRole("button", { name: "Create repository" }).click();
    const row = page.getByTestId("admin-repo-list").locator('tr[data-repo="space:alice/demo"]');
    await row.getByText("private").waitFor();
    await row.getByRole("button", { name: "Make public alice/demo" }).click();
    await row.getByText("public", { exact: true }).waitFor();
    assert.equal((await hubJson("GET", "/api/spaces/alice/demo")).private, false);
    await row.getByRole("button", { name: "Delete alice/demo" }).click();
    await row.getByRole("button", { name: "Confirm delete alice/demo" }).click();
    await row.waitFor({ state: "detached" });
    const gone = await fetch(`${server.url}/api/spaces/alice/demo`, { headers: { authorization: `Bearer ${adminToken}` } });
    assert.equal(gone.status, 404);
  });

  it("runs no script of an uploaded file as a script or page of castor's origin, where the signed-in token lives", async () => {
    await hubJson("POST", "/api/repos/create", { type: "model", name: "alice/pages", private: false });
    const leak = `sessionStorage.setItem("castor.leaked", String(sessionStorage.getItem("castor.hubToken")))`;
    const pages = new CastorClient({ endpoint: server.url, hubToken: adminToken, repo: "model:alice/pages" });
    await pages.commit({
      summary: "Add a page and a script",
      operations: [
        { kind: "file", path: "page.html", content: Buffer.from(`<!doctype html><title>uploaded page</title><script>${leak}</script>`) },
        { kind: "file", path: "script.js", content: Buffer.from(`${leak};\n`) },
      ],
    });
    // A tab of its own (sessionStorage is per tab), signed in; its console is not the interface's.
    const probe = await context.newPage();
    try {
      await probe.goto(`${server.url}/-/ui/`);
      await probe.evaluate((token: string) => sessionStorage.setItem("castor.hubToken", token), adminToken);
      // What markup injected into a page of the interface could add: a script element naming the
      // uploaded file. The interface's policy lets scripts of its own origin run.
      const outcome = await probe.evaluate(
        (src: string) =>
          new Promise((resolve) => {
            const script = document.createElement("script");
            script.src = src;
            script.onload = () => resolve("loaded");
            script.onerror = () => resolve("refused");
            document.head.append(script);
          }),
        "/alice/pages/resolve/main/script.js",
      );
      assert.equal(await probe.evaluate(() => sessionStorage.getItem("castor.leaked")), null, "the uploaded script ran with the page's token");
      assert.equal(outcome, "refused");
      // Opened directly, the uploaded page is not rendered as a page of castor's origin.
      for (const route of ["resolve", "raw"]) {
        const opened = await context.newPage();
        try {
          const [download] = await Promise.all([
            opened.waitForEvent("download"),
            opened.goto(`${server.url}/alice/pages/${route}/main/page.html`).catch(() => null),
          ]);
          assert.equal(download.suggestedFilename(), "page.html");
          assert.notEqual(await opened.title(), "uploaded page");
        } finally {
          await opened.close();
        }
      }
      assert.equal(await probe.evaluate(() => sessionStorage.getItem("castor.leaked")), null);
    } finally {
      await probe.close();
    }
  });

  it("signs out back to anonymous browsing", async () => {
    await open("", "Repositories");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("link", { name: "Sign in" }).waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem("castor.hubToken")), null);
    await page.getByTestId("repo-list").getByRole("link", { name: "alice/bert" }).waitFor();
    assert.equal(await page.getByTestId("repo-list").getByRole("link", { name: "alice/corpus" }).count(), 0);
  });

  it("made no request beyond castor, and no CSP refusal or script error", () => {
    assert.deepEqual(escaped, []);
    // Expected: the 401s of the anonymous visit to the private repository and of the wrong
    // token; and Chromium's CSP report of the README's `onerror` while DOMPurify parses it in
    // an inert document, where the policy blocks it (it never reaches the page: checked above).
    const unexpected = consoleErrors.filter(
      (text) => !/status of 401/.test(text) && !/\/-\/ui\/models\/alice\/bert(\?[^:]*)?: Executing inline event handler violates/.test(text),
    );
    assert.deepEqual(unexpected, []);
  });
});
