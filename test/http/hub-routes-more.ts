/**
 * The hub routes beyond upload and download (issue 12 items 2, 3, 4, 7), against a real
 * `castor serve`: embedded (SQLite, fs blobs) from hub-routes-more.test.ts, PostgreSQL + S3
 * from test/scaleout/hub-routes-postgres.test.ts. One suite, so both backends answer alike:
 *
 * - listing (`GET /api/{type}s`) with author, search, limit and `Link` pages exactly at their
 *   boundaries, only the repositories the caller can see; settings; delete;
 * - `POST /api/repos/move`: the old name is 404 `RepoNotFound`, history and files move along;
 *   a taken name 409, a namespace the token may not create in 403;
 * - `lastCommit` in `expand=true` tree pages (50 per page) and paths-info (≤ 100 paths);
 * - refs: unknown revisions 404 `RevisionNotFound`, existing branch / tag 409, `main` not
 *   deletable, commit-history and tree pages exactly at their boundaries;
 * - copies: a size-less `lfsFile` names content of this repository (no bytes move), else 404
 *   `EntryNotFound`; cross-repository duplication 400 `NotSupported`;
 * - every unsupported Hub feature answers 400 `NotSupported`, never 404 or 5xx;
 * - a read token is refused (403) on every write route, which then changed nothing.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { upload } from "../../src/client/index.js";
import { loadConfig } from "../../src/config.js";
import { OperatorHub } from "../helpers/operator.js";
import { openMetadataStore } from "../../src/metadata/open.js";
import { startCastorServer, type ServerProcess } from "../helpers/server.js";

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json(): any;
}

interface Tokens {
  /** Write, user alice, namespace alice. */
  alice: string;
  /** Read, user alice, namespace alice. */
  aliceRead: string;
  /** Write, user bob, namespace bob. */
  bob: string;
  /** Write, user alice, namespaces alice and bob. */
  both: string;
}

const ndjson = (...lines: unknown[]) => `${lines.map((line) => JSON.stringify(line)).join("\n")}\n`;
const header = (summary: string) => ({ key: "header", value: { summary, description: "" } });
const inline = (path: string, content: string | Buffer) => ({
  key: "file",
  value: { path, encoding: "base64", content: Buffer.from(content).toString("base64") },
});
const deleted = (path: string) => ({ key: "deletedFile", value: { path } });

/** Runs the suite against a `castor serve` started with `scaleOut` (false: embedded). */
export function runHubRoutesMoreSuite(backend: string, scaleOut: boolean): void {
  describe(`hub routes beyond upload and download (${backend})`, () => {
    let server: ServerProcess;
    let base: string;
    let work: string;
    const tokens: Tokens = { alice: "", aliceRead: "", bob: "", both: "" };

    before(async () => {
      server = await startCastorServer({ scaleOut });
      base = server.url;
      work = await mkdtemp(join(tmpdir(), "castor-hub-more-"));
      // Tokens are made as `castor token create` makes them, on the server's own metadata store.
      const store = await openMetadataStore(loadConfig(server.settings));
      try {
        const hub = new OperatorHub(store);
        const token = async (owner: string, namespaces: string[], access: "read" | "write") =>
          (await hub.createToken({ repos: [], namespaces, owner, access, expiresAt: null })).secret;
        tokens.alice = await token("alice", ["alice"], "write");
        tokens.aliceRead = await token("alice", ["alice"], "read");
        tokens.bob = await token("bob", ["bob"], "write");
        tokens.both = await token("alice", ["alice", "bob"], "write");
      } finally {
        await store.close();
      }
    });

    after(async () => {
      await server?.stop();
      if (work !== undefined) await rm(work, { recursive: true, force: true });
    });

    async function call(
      method: string,
      path: string,
      options: { token?: string; json?: unknown; body?: string; type?: string; headers?: Record<string, string> } = {},
    ): Promise<Answer> {
      const headers: Record<string, string> = { ...options.headers };
      if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
      let body = options.body;
      if (options.json !== undefined) {
        body = JSON.stringify(options.json);
        headers["content-type"] = "application/json";
      } else if (options.type !== undefined) {
        headers["content-type"] = options.type;
      }
      const response = await fetch(path.startsWith("http") ? path : `${base}${path}`, { method, headers, body });
      const buffer = Buffer.from(await response.arrayBuffer());
      return { status: response.status, headers: response.headers, text: buffer.toString("latin1"), json: () => JSON.parse(buffer.toString("utf8")) };
    }

    function assertStatus(answer: Answer, status: number, code?: string): void {
      assert.equal(answer.status, status, answer.text);
      if (status >= 400) {
        assert.ok(answer.headers.get("x-error-message"), "errors carry X-Error-Message");
        // HEAD answers have no body.
        if (answer.text !== "") assert.equal(typeof answer.json().error, "string", "errors are JSON {error}");
      }
      if (code !== undefined) assert.equal(answer.headers.get("x-error-code"), code, answer.text);
    }

    const create = async (name: string, options: { type?: string; private?: boolean; token?: string } = {}) =>
      assertStatus(
        await call("POST", "/api/repos/create", {
          token: options.token ?? tokens.alice,
          json: { name, type: options.type ?? "model", private: options.private ?? true },
        }),
        200,
      );

    const commit = async (repoPath: string, revision: string, summary: string, ...ops: unknown[]): Promise<string> => {
      const answer = await call("POST", `/api/${repoPath}/commit/${encodeURIComponent(revision)}`, {
        token: tokens.alice,
        body: ndjson(header(summary), ...ops),
        type: "application/x-ndjson",
      });
      assertStatus(answer, 200);
      return answer.json().commitOid;
    };

    const info = async (repoPath: string, token = tokens.alice) => call("GET", `/api/${repoPath}`, { token });

    const nextLink = (answer: Answer): string | null => {
      const link = answer.headers.get("link");
      return link === null ? null : /<([^>]+)>; rel="next"/.exec(link)![1];
    };

    /** Every item of a paginated listing, following `Link` from `path`; the number of pages too. */
    const allPages = async (path: string, token?: string): Promise<{ items: any[]; pages: number[] }> => {
      const items: any[] = [];
      const pages: number[] = [];
      let next: string | null = path;
      while (next !== null) {
        const page = await call("GET", next, { token });
        assertStatus(page, 200);
        pages.push(page.json().length);
        items.push(...page.json());
        next = nextLink(page);
        if (pages.length > 50) assert.fail("more pages than the test made items");
      }
      return { items, pages };
    };

    describe("listing, settings and delete", () => {
      it("pages exactly at their boundaries: N items one page without Link, N+1 a second page; filters survive the Link", async () => {
        for (const n of [1, 2, 3]) await create(`alice/pager-${n}`);
        const three = await call("GET", "/api/models?author=alice&search=pager-&limit=3", { token: tokens.alice });
        assertStatus(three, 200);
        assert.deepEqual(
          three.json().map((r: { id: string }) => r.id),
          ["alice/pager-1", "alice/pager-2", "alice/pager-3"],
        );
        assert.equal(three.headers.get("link"), null, "exactly a page: no next page");

        await create("alice/pager-4");
        const first = await call("GET", "/api/models?author=alice&search=pager-&limit=3", { token: tokens.alice });
        assert.equal(first.json().length, 3);
        const next = nextLink(first);
        assert.ok(next !== null, "one more than a page: a next page");
        assert.ok(next.startsWith(`${base}/api/models?`), `the Link is on the public URL: ${next}`);
        const params = new URL(next).searchParams;
        assert.equal(params.get("search"), "pager-");
        assert.equal(params.get("author"), "alice");
        assert.equal(params.get("limit"), "3");
        const second = await call("GET", next, { token: tokens.alice });
        assert.deepEqual(
          second.json().map((r: { id: string }) => r.id),
          ["alice/pager-4"],
        );
        assert.equal(second.headers.get("link"), null);

        // A page of one, walked to the end: every repository once, in creation order.
        const walked = await allPages("/api/models?search=pager-&limit=1", tokens.alice);
        assert.deepEqual(walked.pages, [1, 1, 1, 1]);
        assert.deepEqual(
          walked.items.map((r: { id: string }) => r.id),
          ["alice/pager-1", "alice/pager-2", "alice/pager-3", "alice/pager-4"],
        );
        assertStatus(await call("GET", "/api/models?cursor=%21%21", { token: tokens.alice }), 400);
      });

      it("lists only what the caller can see: anonymous callers public repositories, other users not alice's private ones", async () => {
        await create("alice/seen-public", { private: false });
        await create("alice/seen-private");
        await create("alice/seen-data", { type: "dataset" });
        const ids = async (path: string, token?: string) => (await allPages(path, token)).items.map((r: { id: string }) => r.id);
        assert.deepEqual(await ids("/api/models?search=seen-", tokens.alice), ["alice/seen-public", "alice/seen-private"]);
        assert.deepEqual(await ids("/api/models?search=seen-"), ["alice/seen-public"]);
        assert.deepEqual(await ids("/api/models?search=seen-", tokens.bob), ["alice/seen-public"]);
        assert.deepEqual(await ids("/api/models?author=bob&search=seen-", tokens.alice), []);
        assert.deepEqual(await ids("/api/datasets?search=seen-", tokens.alice), ["alice/seen-data"]);
        // Search is case-insensitive, on the whole id.
        assert.deepEqual(await ids("/api/models?search=ALICE%2FSEEN-PUB", tokens.alice), ["alice/seen-public"]);
        const summary = (await call("GET", "/api/models?search=seen-public")).json()[0];
        assert.equal(summary.private, false);
        assert.match(summary.sha, /^[0-9a-f]{40}$/);
      });

      it("settings: private and visibility switch; gated is refused as NotSupported; delete makes the repository 404", async () => {
        await create("alice/settled");
        assertStatus(await call("GET", "/api/models/alice/settled"), 401, "RepoNotFound");
        assertStatus(await call("PUT", "/api/models/alice/settled/settings", { token: tokens.alice, json: { visibility: "public" } }), 200);
        assertStatus(await call("GET", "/api/models/alice/settled"), 200);
        assertStatus(await call("PUT", "/api/models/alice/settled/settings", { token: tokens.alice, json: { private: true } }), 200);
        assertStatus(await call("GET", "/api/models/alice/settled"), 401, "RepoNotFound");
        const gated = await call("PUT", "/api/models/alice/settled/settings", { token: tokens.alice, json: { gated: "manual" } });
        assertStatus(gated, 400, "NotSupported");
        assert.match(gated.json().error, /gated repositories are not supported by castor/);
        assertStatus(await call("PUT", "/api/models/alice/settled/settings", { token: tokens.alice, json: { gated: false } }), 200);
        const withFiles = await call("POST", "/api/repos/create", {
          token: tokens.alice,
          json: { name: "alice/with-files", type: "model", files: [{ path: "a.txt", content: "aGk=", encoding: "base64" }] },
        });
        assertStatus(withFiles, 400, "NotSupported");
        assert.match(withFiles.json().error, /uploading files at repository creation is not supported by castor/);
        assertStatus(await call("GET", "/api/models/alice/with-files", { token: tokens.alice }), 404, "RepoNotFound");

        assertStatus(await call("DELETE", "/api/repos/delete", { token: tokens.alice, json: { name: "alice/settled", type: "model" } }), 200);
        assertStatus(await info("models/alice/settled"), 404, "RepoNotFound");
        assertStatus(await call("DELETE", "/api/repos/delete", { token: tokens.alice, json: { name: "alice/settled", type: "model" } }), 404, "RepoNotFound");
      });
    });

    describe("move_repo", () => {
      it("renames: the old name answers 404 RepoNotFound, history, files and branches move along", async () => {
        await create("alice/mv-src");
        const first = await commit("models/alice/mv-src", "main", "first", inline("a.txt", "a"));
        assertStatus(await call("POST", "/api/models/alice/mv-src/branch/dev", { token: tokens.alice, json: {} }), 200);
        const moved = await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/mv-src", toRepo: "alice/mv-dst", type: "model" } });
        assertStatus(moved, 200);
        assert.equal(moved.json().url, `${base}/alice/mv-dst`);

        assertStatus(await info("models/alice/mv-src"), 404, "RepoNotFound");
        assertStatus(await call("HEAD", "/alice/mv-src/resolve/main/a.txt", { token: tokens.alice }), 404, "RepoNotFound");
        const after = await info("models/alice/mv-dst");
        assertStatus(after, 200);
        assert.equal(after.json().id, "alice/mv-dst");
        assert.equal(after.json().sha, first);
        const file = await call("GET", "/alice/mv-dst/resolve/main/a.txt", { token: tokens.alice });
        assertStatus(file, 200);
        assert.equal(file.text, "a");
        const refs = (await call("GET", "/api/models/alice/mv-dst/refs", { token: tokens.alice })).json();
        assert.deepEqual(
          refs.branches.map((b: { name: string }) => b.name),
          ["main", "dev"],
        );
        const history = (await call("GET", "/api/models/alice/mv-dst/commits/main", { token: tokens.alice })).json();
        assert.deepEqual(
          history.map((c: { title: string }) => c.title),
          ["first", "initial commit"],
        );
        // The old name is free again.
        await create("alice/mv-src");
      });

      it("refuses: a taken name 409 with its URL, another namespace without the right 403, read tokens 403, bad names 400, unknown sources 404", async () => {
        await create("alice/mv-a");
        await create("alice/mv-b");
        const taken = await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/mv-a", toRepo: "alice/mv-b", type: "model" } });
        assertStatus(taken, 409);
        assert.equal(taken.json().url, `${base}/alice/mv-b`);
        const refusals: [Answer, number, string?][] = [
          [await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/mv-a", toRepo: "bob/mv-a", type: "model" } }), 403],
          [await call("POST", "/api/repos/move", { token: tokens.aliceRead, json: { fromRepo: "alice/mv-a", toRepo: "alice/mv-c" } }), 403],
          [await call("POST", "/api/repos/move", { json: { fromRepo: "alice/mv-a", toRepo: "alice/mv-c" } }), 401],
          [await call("POST", "/api/repos/move", { token: tokens.bob, json: { fromRepo: "alice/mv-a", toRepo: "bob/mv-a" } }), 404, "RepoNotFound"],
          [await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/nothing", toRepo: "alice/mv-c" } }), 404, "RepoNotFound"],
          [await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/mv-a", toRepo: "no-namespace" } }), 400],
          [await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/mv-a", toRepo: "alice/mv-a" } }), 400],
          [await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/mv-a" } }), 400],
          [await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/mv-a", toRepo: "alice/mv-c", type: "kernel" } }), 400],
        ];
        for (const [answer, status, code] of refusals) assertStatus(answer, status, code);
        assertStatus(await info("models/alice/mv-a"), 200, undefined);
        // A dataset of that name is another repository: a model may take it.
        await create("alice/mv-d", { type: "dataset" });
        assertStatus(await call("POST", "/api/repos/move", { token: tokens.alice, json: { fromRepo: "alice/mv-a", toRepo: "alice/mv-d" } }), 200);
        assertStatus(await info("datasets/alice/mv-d"), 200);
        assertStatus(await info("models/alice/mv-d"), 200);
      });

      it("moves into another namespace with a token that may create there; that namespace's tokens then cover it", async () => {
        await create("alice/mv-out");
        assertStatus(
          await call("POST", "/api/repos/move", { token: tokens.both, json: { fromRepo: "alice/mv-out", toRepo: "bob/mv-in", type: "model" } }),
          200,
        );
        assertStatus(await info("models/bob/mv-in", tokens.bob), 200);
        assertStatus(await info("models/bob/mv-in", tokens.alice), 404, "RepoNotFound");
      });
    });

    describe("lastCommit in expanded listings", () => {
      let c1: string;
      let c2: string;
      let c3: string;
      let c5: string;
      before(async () => {
        await create("alice/history");
        c1 = await commit("models/alice/history", "main", "add a and dir/b", inline("a.txt", "a1"), inline("dir/b.txt", "b1"), inline("dir/sub/d.txt", "d1"));
        c2 = await commit("models/alice/history", "main", "change dir/b", inline("dir/b.txt", "b2"));
        c3 = await commit("models/alice/history", "main", "add c", inline("c.txt", "c"));
        await commit("models/alice/history", "main", "delete c", deleted("c.txt"));
        // Re-adding the same content is a change of the path: this commit, not c3.
        c5 = await commit("models/alice/history", "main", "add c again", inline("c.txt", "c"));
      });

      const lastCommitsOf = (entries: { path: string; lastCommit?: { id: string } }[]) =>
        Object.fromEntries(entries.map((entry) => [entry.path, entry.lastCommit?.id]));

      it("tree?expand=true: each entry's last commit {id, title, date}; folders by their tree id; none without expand", async () => {
        const tree = await call("GET", "/api/models/alice/history/tree/main?expand=true", { token: tokens.alice });
        assertStatus(tree, 200);
        assert.deepEqual(lastCommitsOf(tree.json()), { "a.txt": c1, "c.txt": c5, dir: c2 });
        const a = tree.json().find((entry: { path: string }) => entry.path === "a.txt");
        const history = (await call("GET", "/api/models/alice/history/commits/main", { token: tokens.alice })).json();
        const c1Json = history.find((c: { id: string }) => c.id === c1);
        assert.deepEqual(a.lastCommit, { id: c1, title: "add a and dir/b", date: c1Json.date });
        assert.match(a.lastCommit.date, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

        const recursive = await call("GET", "/api/models/alice/history/tree/main?recursive=true&expand=true", { token: tokens.alice });
        assert.deepEqual(lastCommitsOf(recursive.json()), {
          "a.txt": c1,
          "c.txt": c5,
          dir: c2,
          "dir/b.txt": c2,
          "dir/sub": c1,
          "dir/sub/d.txt": c1,
        });
        const folder = await call("GET", "/api/models/alice/history/tree/main/dir?expand=1", { token: tokens.alice });
        assert.deepEqual(lastCommitsOf(folder.json()), { "dir/b.txt": c2, "dir/sub": c1 });
        // At an older commit, the history before it.
        const old = await call("GET", `/api/models/alice/history/tree/${c3}?expand=true`, { token: tokens.alice });
        assert.deepEqual(lastCommitsOf(old.json()), { "a.txt": c1, "c.txt": c3, dir: c2 });

        const plain = await call("GET", "/api/models/alice/history/tree/main?recursive=true", { token: tokens.alice });
        assert.ok(
          plain.json().every((entry: object) => !("lastCommit" in entry)),
          "no lastCommit without expand",
        );
      });

      it("paths-info with expand=True (huggingface_hub's form) or JSON expand:true; none without", async () => {
        const form = await call("POST", "/api/models/alice/history/paths-info/main", {
          token: tokens.alice,
          body: "paths=a.txt&paths=dir%2Fb.txt&paths=dir&paths=missing.txt&expand=True",
          type: "application/x-www-form-urlencoded",
        });
        assertStatus(form, 200);
        assert.deepEqual(lastCommitsOf(form.json()), { "a.txt": c1, "dir/b.txt": c2, dir: c2 });
        const json = await call("POST", "/api/models/alice/history/paths-info/main", { token: tokens.alice, json: { paths: ["c.txt"], expand: true } });
        assert.deepEqual(lastCommitsOf(json.json()), { "c.txt": c5 });
        const plain = await call("POST", "/api/models/alice/history/paths-info/main", {
          token: tokens.alice,
          body: "paths=a.txt&expand=False",
          type: "application/x-www-form-urlencoded",
        });
        assert.deepEqual(plain.json().length, 1);
        assert.ok(!("lastCommit" in plain.json()[0]));
      });

      // Once a quadratic regular expression over the path: 1,000,000 slashes between two letters
      // took hours. Now milliseconds (`npm run bench -- hub` times it); the timeout only turns a
      // return of the quadratic scan into a failure instead of a hang.
      it("paths-info answers a path of a million slashes between two letters, with and without expand", { timeout: 60_000 }, async () => {
        const long = `a${"/".repeat(1_000_000)}b`;
        for (const expand of [false, true]) {
          const answer = await call("POST", "/api/models/alice/history/paths-info/main", { token: tokens.alice, json: { paths: [long, `${long}/`], expand } });
          assertStatus(answer, 200);
          assert.deepEqual(answer.json(), []);
        }
      });

      it("expanded tree pages hold 50 entries (51 make two pages, the Link keeping expand); paths-info expands at most 100 paths (413 beyond)", async () => {
        await create("alice/wide");
        const files = Array.from({ length: 51 }, (_, i) => inline(`f${String(i).padStart(3, "0")}.txt`, `${i}`));
        const wide = await commit("models/alice/wide", "main", "51 files", ...files);
        const first = await call("GET", "/api/models/alice/wide/tree/main?expand=true", { token: tokens.alice });
        assert.equal(first.json().length, 50);
        const next = nextLink(first);
        assert.ok(next?.includes("expand=true"), `the next page is expanded too: ${next}`);
        const walked = await allPages("/api/models/alice/wide/tree/main?expand=true", tokens.alice);
        assert.deepEqual(walked.pages, [50, 1]);
        assert.ok(walked.items.every((entry: { lastCommit?: { id: string } }) => entry.lastCommit?.id === wide));
        // Without expand, a page is 1,000.
        assert.equal(nextLink(await call("GET", "/api/models/alice/wide/tree/main", { token: tokens.alice })), null);

        const paths = (n: number) => Array.from({ length: n }, (_, i) => `paths=f${String(i).padStart(3, "0")}.txt`).join("&");
        const hundred = await call("POST", "/api/models/alice/wide/paths-info/main", {
          token: tokens.alice,
          body: `${paths(51)}&${Array.from({ length: 49 }, () => "paths=nothing").join("&")}&expand=True`,
          type: "application/x-www-form-urlencoded",
        });
        assertStatus(hundred, 200);
        assert.equal(hundred.json().length, 51);
        const tooMany = await call("POST", "/api/models/alice/wide/paths-info/main", {
          token: tokens.alice,
          body: `${paths(51)}&${Array.from({ length: 50 }, () => "paths=nothing").join("&")}&expand=True`,
          type: "application/x-www-form-urlencoded",
        });
        assertStatus(tooMany, 413);
        const unexpanded = await call("POST", "/api/models/alice/wide/paths-info/main", {
          token: tokens.alice,
          body: `${paths(51)}&${Array.from({ length: 50 }, () => "paths=nothing").join("&")}&expand=False`,
          type: "application/x-www-form-urlencoded",
        });
        assertStatus(unexpanded, 200);
      });
    });

    describe("refs and pages", () => {
      before(async () => {
        await create("alice/refs");
      });

      it("unknown revisions are 404 RevisionNotFound on every route that takes one", async () => {
        const missing = "no-such-branch";
        const answers: Answer[] = [
          await call("GET", `/api/models/alice/refs/tree/${missing}`, { token: tokens.alice }),
          await call("GET", `/api/models/alice/refs/revision/${missing}`, { token: tokens.alice }),
          await call("GET", `/api/models/alice/refs/commits/${missing}`, { token: tokens.alice }),
          await call("POST", `/api/models/alice/refs/paths-info/${missing}`, { token: tokens.alice, json: { paths: ["a"] } }),
          await call("HEAD", `/alice/refs/resolve/${missing}/a.txt`, { token: tokens.alice }),
          await call("GET", `/api/models/alice/refs/tree/${"f".repeat(40)}`, { token: tokens.alice }),
          await call("POST", `/api/models/alice/refs/commit/${missing}`, {
            token: tokens.alice,
            body: ndjson(header("x"), inline("x", "x")),
            type: "application/x-ndjson",
          }),
          await call("POST", `/api/models/alice/refs/branch/new-one`, { token: tokens.alice, json: { startingPoint: missing } }),
          await call("DELETE", `/api/models/alice/refs/branch/${missing}`, { token: tokens.alice }),
          await call("DELETE", `/api/models/alice/refs/tag/${missing}`, { token: tokens.alice }),
        ];
        for (const answer of answers) assertStatus(answer, 404, "RevisionNotFound");
      });

      it("a short commit id names its commit wherever a revision is taken; too short or unknown is 404", async () => {
        const head = (await call("GET", "/api/models/alice/refs/revision/main", { token: tokens.alice })).json().sha as string;
        for (const short of [head.slice(0, 7), head.slice(0, 4), head.slice(0, 39)]) {
          const info = await call("GET", `/api/models/alice/refs/revision/${short}`, { token: tokens.alice });
          assertStatus(info, 200);
          assert.equal(info.json().sha, head);
          assertStatus(await call("GET", `/api/models/alice/refs/tree/${short}`, { token: tokens.alice }), 200);
        }
        assertStatus(await call("GET", `/api/models/alice/refs/revision/${head.slice(0, 3)}`, { token: tokens.alice }), 404, "RevisionNotFound");
        const unknown = head.startsWith("0000") ? "ffff" : "0000";
        assertStatus(await call("GET", `/api/models/alice/refs/revision/${unknown}`, { token: tokens.alice }), 404, "RevisionNotFound");
      });

      it("a branch or tag named HEAD is 400: HEAD keeps naming main, as in git", async () => {
        const refused = [
          await call("POST", "/api/models/alice/refs/branch/HEAD", { token: tokens.alice, json: {} }),
          await call("POST", "/api/models/alice/refs/tag/main", { token: tokens.alice, json: { tag: "HEAD" } }),
        ];
        for (const answer of refused) {
          assertStatus(answer, 400);
          assert.match(answer.json().error, /revision name "HEAD" is reserved: it names the default branch \(main\)/);
        }
        const refs = (await call("GET", "/api/models/alice/refs/refs", { token: tokens.alice })).json();
        assert.deepEqual(
          [...refs.branches, ...refs.tags].filter((ref: { name: string }) => ref.name === "HEAD"),
          [],
        );
        const main = (await call("GET", "/api/models/alice/refs/revision/main", { token: tokens.alice })).json().sha;
        assert.equal((await call("GET", "/api/models/alice/refs/revision/HEAD", { token: tokens.alice })).json().sha, main);
      });

      it("an existing branch or tag name is 409; main cannot be deleted; a tag is not a branch", async () => {
        assertStatus(await call("POST", "/api/models/alice/refs/branch/dev", { token: tokens.alice, json: {} }), 200);
        assertStatus(await call("POST", "/api/models/alice/refs/branch/dev", { token: tokens.alice, json: {} }), 409);
        assertStatus(await call("POST", "/api/models/alice/refs/branch/main", { token: tokens.alice, json: {} }), 409);
        assertStatus(await call("POST", "/api/models/alice/refs/tag/main", { token: tokens.alice, json: { tag: "v1" } }), 200);
        assertStatus(await call("POST", "/api/models/alice/refs/tag/main", { token: tokens.alice, json: { tag: "v1" } }), 409);
        assertStatus(await call("POST", "/api/models/alice/refs/tag/main", { token: tokens.alice, json: { tag: "dev" } }), 409);
        const main = await call("DELETE", "/api/models/alice/refs/branch/main", { token: tokens.alice });
        assertStatus(main, 400);
        assert.match(main.json().error, /main/);
        assertStatus(await call("DELETE", "/api/models/alice/refs/branch/v1", { token: tokens.alice }), 404, "RevisionNotFound");
        assertStatus(await call("DELETE", "/api/models/alice/refs/tag/dev", { token: tokens.alice }), 404, "RevisionNotFound");
        const tagCommit = await call("POST", "/api/models/alice/refs/commit/v1", {
          token: tokens.alice,
          body: ndjson(header("x"), inline("x", "x")),
          type: "application/x-ndjson",
        });
        assertStatus(tagCommit, 400);
        assert.equal(
          (await call("GET", "/api/models/alice/refs/refs", { token: tokens.alice })).json().branches.some((b: { name: string }) => b.name === "main"),
          true,
          "main is still there",
        );
      });

      it("commit history pages hold 50 commits: exactly 50 is one page, 51 two", async () => {
        await create("alice/long");
        // The initial commit and 49 more: 50.
        for (let i = 1; i <= 49; i++) await commit("models/alice/long", "main", `commit ${i}`, inline("n.txt", String(i)));
        const fifty = await call("GET", "/api/models/alice/long/commits/main", { token: tokens.alice });
        assert.equal(fifty.json().length, 50);
        assert.equal(fifty.headers.get("link"), null, "exactly a page: no next page");
        await commit("models/alice/long", "main", "commit 50", inline("n.txt", "50"));
        const walked = await allPages("/api/models/alice/long/commits/main", tokens.alice);
        assert.deepEqual(walked.pages, [50, 1]);
        assert.equal(walked.items[0].title, "commit 50");
        assert.equal(walked.items.at(-1).title, "initial commit");
        assert.equal(new Set(walked.items.map((c: { id: string }) => c.id)).size, 51);
      });

      it("tree pages (limit=3): exactly 3 entries one page, 4 two", async () => {
        await create("alice/small-tree");
        await commit("models/alice/small-tree", "main", "three", inline("t/1", "1"), inline("t/2", "2"), inline("t/3", "3"));
        const three = await call("GET", "/api/models/alice/small-tree/tree/main/t?limit=3", { token: tokens.alice });
        assert.equal(three.json().length, 3);
        assert.equal(three.headers.get("link"), null);
        await commit("models/alice/small-tree", "main", "four", inline("t/4", "4"));
        const walked = await allPages("/api/models/alice/small-tree/tree/main/t?limit=3", tokens.alice);
        assert.deepEqual(walked.pages, [3, 1]);
        assert.deepEqual(
          walked.items.map((e: { path: string }) => e.path),
          ["t/1", "t/2", "t/3", "t/4"],
        );
      });
    });

    describe("copies", () => {
      let sha256: string;
      let content: Buffer;
      let xetHash: string;
      before(async () => {
        await create("alice/copies");
        await create("alice/elsewhere");
        content = randomBytes(200_000);
        sha256 = createHash("sha256").update(content).digest("hex");
        const path = join(work, "weights.bin");
        await writeFile(path, content);
        xetHash = (await upload({ endpoint: base, hubToken: tokens.alice, repo: "model:alice/copies", files: [path] })).files[0].fileHash;
        await commit("models/alice/copies", "main", "weights", {
          key: "lfsFile",
          value: { path: "weights.bin", algo: "sha256", oid: sha256, size: content.length },
        });
      });

      it("an lfsFile without size (CommitOperationCopy) points a new path at the same content, at once", async () => {
        const copied = await commit("models/alice/copies", "main", "copy", { key: "lfsFile", value: { path: "copies/w.bin", algo: "sha256", oid: sha256 } });
        const tree = (await call("GET", "/api/models/alice/copies/tree/main?recursive=true", { token: tokens.alice })).json();
        const original = tree.find((e: { path: string }) => e.path === "weights.bin");
        const copy = tree.find((e: { path: string }) => e.path === "copies/w.bin");
        assert.deepEqual({ ...copy, path: "weights.bin" }, original, "the copy is the same entry under another path");
        assert.equal(copy.xetHash, xetHash);
        const bytes = await call("GET", "/alice/copies/resolve/main/copies/w.bin", { token: tokens.alice });
        assertStatus(bytes, 200);
        assert.ok(Buffer.from(bytes.text, "latin1").equals(content));
        const head = await call("HEAD", "/alice/copies/resolve/main/copies/w.bin", { token: tokens.alice });
        assert.equal(head.headers.get("x-repo-commit"), copied);
        // Deleting the original leaves the copy.
        await commit("models/alice/copies", "main", "rename", deleted("weights.bin"));
        assertStatus(await call("HEAD", "/alice/copies/resolve/main/copies/w.bin", { token: tokens.alice }), 200);
      });

      it("a copy of content the repository does not hold is 404 EntryNotFound at the head; the branch stays", async () => {
        const headBefore = (await info("models/alice/copies")).json().sha;
        const unknown = await call("POST", "/api/models/alice/copies/commit/main", {
          token: tokens.alice,
          body: ndjson(header("copy"), { key: "lfsFile", value: { path: "x.bin", algo: "sha256", oid: "ab".repeat(32) } }),
          type: "application/x-ndjson",
        });
        assertStatus(unknown, 404, "EntryNotFound");
        assert.equal(unknown.headers.get("x-repo-commit"), headBefore);
        // Content of another repository: knowing its SHA-256 does not make it this one's.
        const foreign = await call("POST", "/api/models/alice/elsewhere/commit/main", {
          token: tokens.alice,
          body: ndjson(header("copy"), { key: "lfsFile", value: { path: "x.bin", algo: "sha256", oid: sha256 } }),
          type: "application/x-ndjson",
        });
        assertStatus(foreign, 404, "EntryNotFound");
        assert.equal((await info("models/alice/copies")).json().sha, headBefore);
      });

      it("copies between repositories (lfs-files/duplicate) are 400 NotSupported", async () => {
        const answer = await call("POST", "/api/models/alice/copies/lfs-files/duplicate", {
          token: tokens.alice,
          json: { target: { type: "model", name: "alice/elsewhere" }, files: [{ xetHash, sha256, filename: "weights.bin" }] },
        });
        assertStatus(answer, 400, "NotSupported");
        assert.match(answer.json().error, /copies between repositories are not supported by castor/);
      });
    });

    describe("unsupported Hub features", () => {
      it("answer 400 NotSupported naming the feature, for existing and missing repositories alike, never 404 or 5xx", async () => {
        await create("alice/plain");
        await create("alice/app", { type: "space" });
        const pr = { body: ndjson(header("pr"), inline("x", "x")), type: "application/x-ndjson" };
        const cases: [string, string, RegExp, Record<string, unknown>?][] = [
          ["POST", "/api/models/alice/plain/commit/main?create_pr=1", /pull requests/, pr],
          ["POST", "/api/models/alice/plain/commit/main?create_pr=True", /pull requests/, pr],
          ["POST", "/api/models/alice/plain/preupload/main?create_pr=1", /pull requests/, { json: { files: [] } }],
          ["GET", "/api/models/alice/plain/discussions", /discussions and pull requests/],
          ["POST", "/api/models/alice/plain/discussions", /discussions and pull requests/, { json: { title: "t", pullRequest: true } }],
          ["GET", "/api/models/alice/plain/discussions/1", /discussions and pull requests/],
          ["POST", "/api/models/alice/plain/discussions/1/comment", /discussions and pull requests/, { json: { comment: "hi" } }],
          ["POST", "/api/models/alice/plain/discussions/1/merge", /discussions and pull requests/, { json: {} }],
          ["PATCH", "/api/models/alice/plain/discussions/1/status", /discussions and pull requests/, { json: { status: "closed" } }],
          ["GET", "/api/datasets/alice/missing/discussions", /discussions and pull requests/],
          ["PUT", "/api/models/alice/plain/settings", /gated repositories/, { json: { gated: "auto" } }],
          ["GET", "/api/models/alice/plain/user-access-request/pending", /gated repositories/],
          ["POST", "/api/models/alice/plain/user-access-request/grant", /gated repositories/, { json: { user: "bob" } }],
          ["GET", "/api/spaces/alice/app/runtime", /Spaces runtime/],
          ["POST", "/api/spaces/alice/app/hardware", /Spaces runtime/, { json: { flavor: "t4-small" } }],
          ["POST", "/api/spaces/alice/app/secrets", /Spaces runtime/, { json: { key: "K", value: "V" } }],
          ["DELETE", "/api/spaces/alice/app/secrets", /Spaces runtime/, { json: { key: "K" } }],
          ["GET", "/api/spaces/alice/app/variables", /Spaces runtime/],
          ["POST", "/api/spaces/alice/app/restart", /Spaces runtime/],
          ["POST", "/api/spaces/alice/app/pause", /Spaces runtime/],
          ["POST", "/api/spaces/alice/app/sleeptime", /Spaces runtime/, { json: { seconds: 60 } }],
          ["GET", "/api/spaces/alice/app/logs/run", /Spaces runtime/],
          ["GET", "/api/spaces/hardware", /Spaces runtime/],
          ["POST", "/api/spaces/alice/app/duplicate", /duplicating repositories/, { json: { repository: "alice/app2" } }],
          ["POST", "/api/models/alice/plain/lfs-files/duplicate", /copies between repositories/, { json: {} }],
          ["GET", "/api/models/alice/plain/lfs-files", /LFS files/],
          ["GET", "/api/tasks", /inference/],
        ];
        for (const [method, path, feature, options] of cases) {
          for (const token of [tokens.alice, undefined]) {
            const answer = await call(method, path, { token, ...(options ?? {}) });
            assert.equal(answer.status, 400, `${method} ${path} ${token ? "with" : "without"} a token: ${answer.status} ${answer.text}`);
            assert.equal(answer.headers.get("x-error-code"), "NotSupported", `${method} ${path}`);
            assert.match(answer.json().error, feature, `${method} ${path}`);
            assert.match(answer.json().error, /not supported by castor/, `${method} ${path}`);
          }
        }
        assertStatus(await info("models/alice/plain"), 200);
      });
    });

    describe("read tokens", () => {
      it("are refused (403) on every write route, which then changed nothing", async () => {
        await create("alice/guarded");
        const head = await commit("models/alice/guarded", "main", "first", inline("a.txt", "a"));
        assertStatus(await call("POST", "/api/models/alice/guarded/branch/dev", { token: tokens.alice, json: {} }), 200);
        assertStatus(await call("POST", "/api/models/alice/guarded/tag/main", { token: tokens.alice, json: { tag: "v1" } }), 200);
        const read = tokens.aliceRead;
        const routes: [string, string, Record<string, unknown>][] = [
          ["POST", "/api/repos/create", { json: { name: "alice/by-reader", type: "model" } }],
          ["POST", "/api/repos/create", { json: { name: "by-reader", organization: "alice", type: "dataset" } }],
          ["DELETE", "/api/repos/delete", { json: { name: "alice/guarded", type: "model" } }],
          ["POST", "/api/repos/move", { json: { fromRepo: "alice/guarded", toRepo: "alice/moved-by-reader", type: "model" } }],
          ["PUT", "/api/models/alice/guarded/settings", { json: { private: false } }],
          ["PUT", "/api/models/alice/guarded/settings", { json: {} }],
          ["POST", "/api/models/alice/guarded/branch/by-reader", { json: {} }],
          ["DELETE", "/api/models/alice/guarded/branch/dev", {}],
          ["POST", "/api/models/alice/guarded/tag/main", { json: { tag: "by-reader" } }],
          ["DELETE", "/api/models/alice/guarded/tag/v1", {}],
          ["POST", "/api/models/alice/guarded/commit/main", { body: ndjson(header("x"), inline("b.txt", "b")), type: "application/x-ndjson" }],
          ["POST", "/api/models/alice/guarded/commit/main", { body: ndjson(header("x"), deleted("a.txt")), type: "application/x-ndjson" }],
          ["POST", "/api/models/alice/guarded/preupload/main", { json: { files: [{ path: "b.txt", sample: "Yg==", size: 1 }] } }],
          ["GET", "/api/models/alice/guarded/xet-write-token/main", {}],
          ["GET", "/api/models/alice/guarded/cas-write-token/main", {}],
        ];
        for (const [method, path, options] of routes) {
          const answer = await call(method, path, { token: read, ...options });
          assert.equal(answer.status, 403, `${method} ${path} with a read token: ${answer.status} ${answer.text}`);
          assert.match(answer.json().error, /read-only|may not create/, `${method} ${path}: the error says why`);
        }
        // The LFS batch endpoint (lfs-routes) refuses a read token's upload too.
        const batch = await call("POST", "/alice/guarded.git/info/lfs/objects/batch", {
          token: read,
          json: { operation: "upload", transfers: ["basic", "xet"], objects: [{ oid: "ab".repeat(32), size: 1 }] },
        });
        assert.equal(batch.status, 403, `the LFS batch upload with a read token: ${batch.status} ${batch.text}`);

        const after = await info("models/alice/guarded");
        assertStatus(after, 200);
        assert.equal(after.json().sha, head);
        assert.equal(after.json().private, true);
        const refs = (await call("GET", "/api/models/alice/guarded/refs", { token: read })).json();
        assert.deepEqual(
          refs.branches.map((b: { name: string }) => b.name),
          ["main", "dev"],
        );
        assert.deepEqual(
          refs.tags.map((t: { name: string }) => t.name),
          ["v1"],
        );
        assertStatus(await info("models/alice/by-reader"), 404, "RepoNotFound");
        assertStatus(await info("models/alice/moved-by-reader"), 404, "RepoNotFound");
      });
    });
  });
}
