/**
 * castor as a pull-through mirror, end to end over HTTP (run on the embedded stores by
 * mirror.test.ts, on PostgreSQL and S3 by test/scaleout/mirror.test.ts): a real `castor serve` with
 * CASTOR_UPSTREAM_URL pointing at a test upstream (a second castor behind a proxy answering as
 * huggingface.co does). Every read of a mirrored repository as of a local one — info with
 * siblings, revisions, trees, paths-info, refs, commits, resolve with Range and the Hub's
 * headers, the Xet read token and castor's CAS behind it — writes refused, private upstream
 * repositories and who may read them, a branch that moves, an upstream that stops or corrupts
 * bytes, concurrent cold downloads sharing one upstream fetch, and local names winning.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient } from "../../src/client/index.js";
import { gitBlobId } from "../../src/format/git.js";
import { runCastor } from "../helpers/cli.js";
import { startCastorServer, type ServerProcess, type StartServerOptions } from "../helpers/server.js";
import { startTestUpstream, type TestUpstream } from "../helpers/upstream-hub.js";
import { until } from "../helpers/wait.js";

export function runMirrorSuite(name: string, server: Pick<StartServerOptions, "scaleOut" | "env"> = {}): void {
  describe(`castor as a mirror (${name})`, () => {
    const MiB = 1024 * 1024;
    const PUBLIC = "model:org/weights";
    const PRIVATE = "model:secret/weights";
    const DATASET = "dataset:org/table";

    let upstream: TestUpstream;
    let mirror: ServerProcess;
    let work: string;
    const tokens = { alice: "", org: "", secret: "", writer: "" };
    const weights = randomBytes(20 * MiB);
    const config = Buffer.from(JSON.stringify({ model_type: "bert", hidden_size: 32 }));
    const moved = randomBytes(2 * MiB);
    const cold = randomBytes(6 * MiB);
    const commits = { first: "", second: "" };

    async function admin(...args: string[]): Promise<string> {
      const result = await runCastor(args, { env: mirror.settings, timeoutMs: 60_000 });
      assert.equal(result.code, 0, `castor ${args.join(" ")}: ${result.stderr}`);
      return result.stdout;
    }

    async function token(...args: string[]): Promise<string> {
      return (await admin("token", "create", ...args)).trimEnd().split("\n").at(-1)!;
    }

    function get(path: string, bearer: string | null, init: RequestInit = {}): Promise<Response> {
      const headers = new Headers(init.headers);
      if (bearer !== null) headers.set("authorization", `Bearer ${bearer}`);
      return fetch(`${mirror.url}${path}`, { ...init, headers, redirect: "manual" });
    }

    /** How many files the mirror holds. */
    async function mirroredFiles(): Promise<number> {
      return ((await json("/api/castor/mirror", tokens.writer)) as { files: number }).files;
    }

    async function json(path: string, bearer: string | null = tokens.alice): Promise<unknown> {
      const response = await get(path, bearer);
      const text = await response.text();
      assert.equal(response.status, 200, `${path}: ${response.status} ${text}`);
      return JSON.parse(text);
    }

    const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

    before(async () => {
      upstream = await startTestUpstream();
      await upstream.createRepo(PUBLIC);
      await upstream.createRepo(PRIVATE, { private: true });
      await upstream.createRepo(DATASET);
      commits.first = await upstream.commit(PUBLIC, [
        { path: "model.safetensors", bytes: weights },
        { path: "config.json", bytes: config, storage: "inline" },
        { path: "sub/notes.md", bytes: Buffer.from("# notes\n"), storage: "inline" },
      ]);
      await upstream.createRevision(PUBLIC, "v1.0", commits.first, "tag");
      await upstream.commit(PRIVATE, [{ path: "secret.bin", bytes: randomBytes(MiB) }]);
      await upstream.commit(DATASET, [
        { path: "data/train.csv", bytes: Buffer.from("a,b\n1,2\n"), storage: "inline" },
        { path: "data/cold.bin", bytes: cold },
      ]);
      mirror = await startCastorServer({
        ...server,
        env: {
          ...server.env,
          CASTOR_UPSTREAM_URL: upstream.hubUrl,
          CASTOR_UPSTREAM_TOKEN: upstream.adminToken,
          CASTOR_UPSTREAM_REFRESH: "2s",
          CASTOR_HUB_RATE_LIMIT: "off",
        },
      });
      tokens.alice = await token("--user", "alice", "--namespace", "alice", "--access", "read");
      tokens.secret = await token("--user", "bob", "--namespace", "secret", "--access", "read");
      tokens.writer = await token("--user", "root", "--all-repos", "--access", "write");
      work = await mkdtemp(join(tmpdir(), "castor-mirror-e2e-"));
    });

    after(async () => {
      await mirror?.stop();
      await upstream?.stop();
      if (work !== undefined) await rm(work, { recursive: true, force: true });
    });

    describe("a mirrored repository reads as a local one", () => {
      it("answers repository info with siblings, the revision route, refs and commits", async () => {
        const info = (await json("/api/models/org/weights?blobs=true")) as {
          id: string;
          sha: string;
          siblings: { rfilename: string; size: number; lfs?: { sha256: string } }[];
        };
        assert.equal(info.id, "org/weights");
        assert.equal(info.sha, commits.first);
        // The upstream keeps .gitattributes covering its Xet file, as the Hub does; the mirror shows it like any file.
        assert.deepEqual(info.siblings.map((s) => s.rfilename).sort(), [".gitattributes", "config.json", "model.safetensors", "sub/notes.md"]);
        assert.equal(info.siblings.find((s) => s.rfilename === "model.safetensors")?.lfs?.sha256, sha256(weights));
        assert.equal(((await json("/api/models/org/weights/revision/v1.0")) as { sha: string }).sha, commits.first);
        assert.equal(((await json(`/api/models/org/weights/revision/${commits.first}`)) as { sha: string }).sha, commits.first);
        const refs = (await json("/api/models/org/weights/refs")) as { branches: { name: string; targetCommit: string }[]; tags: { name: string }[] };
        assert.deepEqual(refs.branches, [{ name: "main", ref: "refs/heads/main", targetCommit: commits.first }]);
        assert.deepEqual(
          refs.tags.map((t) => t.name),
          ["v1.0"],
        );
        const history = (await json("/api/models/org/weights/commits/main")) as { id: string; title: string }[];
        assert.equal(history[0].id, commits.first);
        assert.match(history[0].title, /Add 3 file/);
      });

      it("lists trees (recursive, expanded) and answers paths-info", async () => {
        const tree = (await json("/api/models/org/weights/tree/main?recursive=true")) as {
          type: string;
          path: string;
          xetHash?: string;
          oid: string;
          size: number;
        }[];
        assert.deepEqual(tree.map((e) => `${e.type}:${e.path}`).sort(), [
          "directory:sub",
          "file:.gitattributes",
          "file:config.json",
          "file:model.safetensors",
          "file:sub/notes.md",
        ]);
        assert.equal(tree.find((e) => e.path === "config.json")?.oid, gitBlobId(config));
        const expanded = (await json("/api/models/org/weights/tree/main/sub?expand=true")) as { path: string; lastCommit?: { id: string } }[];
        assert.deepEqual(
          expanded.map((e) => [e.path, e.lastCommit?.id]),
          [["sub/notes.md", commits.first]],
        );
        const response = await get(`/api/models/org/weights/paths-info/${commits.first}`, tokens.alice, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: "paths=config.json&paths=nope&paths=sub",
        });
        assert.equal(response.status, 200);
        assert.deepEqual(
          ((await response.json()) as { path: string }[]).map((e) => e.path),
          ["config.json", "sub"],
        );
        const missing = await get("/api/models/org/weights/tree/main/nope", tokens.alice);
        assert.equal(missing.status, 404);
        assert.equal(missing.headers.get("x-error-code"), "EntryNotFound");
      });

      it("resolves files: HEAD with the Hub's headers, GET of a git file, GET with Range of a Xet file streamed while fetched", async () => {
        const heldBefore = await mirroredFiles();
        const head = await get("/org/weights/resolve/main/model.safetensors", tokens.alice, { method: "HEAD" });
        assert.equal(head.status, 200);
        assert.equal(head.headers.get("x-repo-commit"), commits.first);
        assert.equal(head.headers.get("etag"), `"${sha256(weights)}"`);
        assert.match(head.headers.get("x-xet-hash") ?? "", /^[0-9a-f]{64}$/);
        assert.match(head.headers.get("link") ?? "", new RegExp(`/api/models/org/weights/xet-read-token/${commits.first}>; rel="xet-auth"`));
        const gitFile = await get("/org/weights/resolve/main/config.json", tokens.alice);
        assert.equal(gitFile.status, 200);
        assert.deepEqual(Buffer.from(await gitFile.arrayBuffer()), config);
        const ranged = await get("/org/weights/resolve/main/model.safetensors", tokens.alice, { headers: { range: "bytes=1000-1999999" } });
        assert.equal(ranged.status, 206);
        assert.equal(ranged.headers.get("content-range"), `bytes 1000-1999999/${weights.length}`);
        assert.deepEqual(Buffer.from(await ranged.arrayBuffer()), weights.subarray(1000, 2_000_000));
        const whole = await get("/org/weights/resolve/main/model.safetensors", tokens.alice);
        assert.equal(whole.status, 200);
        assert.ok(Buffer.from(await whole.arrayBuffer()).equals(weights));
        // Held now: both served from castor's stores, the Xet file with Range too.
        await until(async () => (await mirroredFiles()) >= heldBefore + 2, "both files stored", 30_000);
        const fromUpstream = upstream.casBytes();
        const gitAgain = await get("/org/weights/resolve/main/config.json", tokens.alice);
        assert.deepEqual(Buffer.from(await gitAgain.arrayBuffer()), config);
        const rangedAgain = await get("/org/weights/resolve/main/model.safetensors", tokens.alice, { headers: { range: "bytes=5-104" } });
        assert.equal(rangedAgain.status, 206);
        assert.equal(rangedAgain.headers.get("content-range"), `bytes 5-104/${weights.length}`);
        assert.deepEqual(Buffer.from(await rangedAgain.arrayBuffer()), weights.subarray(5, 105));
        assert.equal(upstream.casBytes(), fromUpstream, "nothing fetched again");
      });

      it("serves the Xet read token and the file through castor's own CAS, under the upstream's file hash", async () => {
        const client = new CastorClient({ endpoint: mirror.url, hubToken: tokens.alice, repo: "dataset:org/table" });
        const out = join(work, "train.csv");
        await client.downloadFile({ path: "data/train.csv", output: out });
        assert.equal((await readFile(out)).toString(), "a,b\n1,2\n");
        const model = new CastorClient({ endpoint: mirror.url, hubToken: tokens.alice, repo: PUBLIC });
        const result = await model.downloadFile({ path: "model.safetensors", output: join(work, "model.safetensors") });
        assert.equal(result.verified, "file-hash");
        assert.ok((await readFile(join(work, "model.safetensors"))).equals(weights));
        const token = (await json(`/api/models/org/weights/xet-read-token/${commits.first}`)) as { casUrl: string };
        assert.equal(token.casUrl, mirror.publicUrl, "castor's own CAS, not the upstream's");
      });

      it("marks mirrored repositories in listings, and tells admins what the mirror holds", async () => {
        const listed = (await json("/api/models?author=org")) as { id: string; mirror?: boolean; sha?: string }[];
        assert.deepEqual(
          listed.map((repo) => [repo.id, repo.mirror, repo.sha]),
          [["org/weights", true, commits.first]],
        );
        const totals = (await json("/api/castor/mirror", tokens.writer)) as {
          upstream: string;
          files: number;
          bytes: number;
          fetchedBytes: number;
          servedBytes: number;
        };
        assert.equal(totals.upstream, new URL(upstream.hubUrl).origin);
        assert.ok(totals.files >= 3 && totals.bytes >= weights.length && totals.fetchedBytes >= weights.length, JSON.stringify(totals));
        assert.ok(totals.servedBytes >= weights.length + 1_999_000, `the ranged and the whole read over HTTP (${totals.servedBytes})`);
        assert.equal((await get("/api/castor/mirror", tokens.alice)).status, 403, "admins only");
      });

      it("refuses writes with 403 naming the upstream", async () => {
        const commit = await get("/api/models/org/weights/commit/main", tokens.writer, {
          method: "POST",
          headers: { "content-type": "application/x-ndjson" },
          body: `${JSON.stringify({ key: "header", value: { summary: "x", description: "" } })}\n`,
        });
        assert.equal(commit.status, 403);
        assert.match(((await commit.json()) as { error: string }).error, new RegExp(`read-only mirror of ${upstream.hubUrl.replace(/[.:/]/g, "\\$&")}`));
        const writeToken = await get("/api/models/org/weights/xet-write-token/main", tokens.writer);
        assert.equal(writeToken.status, 403);
        const branch = await get("/api/models/org/weights/branch/dev", tokens.writer, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{}",
        });
        assert.equal(branch.status, 403);
      });

      it("refuses git clone and fetch of a mirrored repository, saying how to read it", async () => {
        const refs = await get("/org/weights.git/info/refs?service=git-upload-pack", tokens.alice);
        assert.equal(refs.status, 400);
        assert.match(await refs.text(), /git clone and fetch of a mirrored repository is not supported by castor: download it through the Hub API/);
      });

      it("lets only tokens naming a private upstream repository's namespace read it", async () => {
        const anonymous = await get("/api/models/secret/weights", null);
        assert.equal(anonymous.status, 401);
        const other = await get("/api/models/secret/weights", tokens.alice);
        assert.equal(other.status, 404);
        assert.equal(other.headers.get("x-error-code"), "RepoNotFound");
        assert.equal(((await json("/api/models/secret/weights", tokens.secret)) as { private: boolean }).private, true);
        const publicAnonymous = await get("/api/models/org/weights", null);
        assert.equal(publicAnonymous.status, 401, "without CASTOR_UPSTREAM_ANONYMOUS, a token is needed even for public ones");
        const unknown = await get("/api/models/org/unknown", tokens.alice);
        assert.equal(unknown.status, 404);
        assert.equal(unknown.headers.get("x-error-code"), "RepoNotFound");
      });
    });

    describe("the mirror and its upstream over time", () => {
      it("fetches a cold Xet file for a client reading it through castor's CAS", async () => {
        const from = upstream.casBytes();
        const client = new CastorClient({ endpoint: mirror.url, hubToken: tokens.alice, repo: DATASET });
        const result = await client.downloadFile({ path: "data/cold.bin", output: join(work, "cold.bin") });
        assert.equal(result.storage, "xet");
        assert.ok((await readFile(join(work, "cold.bin"))).equals(cold));
        assert.ok(upstream.casBytes() - from >= cold.length * 0.99, "fetched from the upstream when first asked");
        const again = upstream.casBytes();
        await client.downloadFile({ path: "data/cold.bin", output: join(work, "cold-again.bin") });
        assert.equal(upstream.casBytes(), again, "and never again");
      });

      it("keeps a client of castor's CAS waiting for a slow cold file alive, then answers", async () => {
        const slowBytes = randomBytes(MiB);
        await upstream.commit(DATASET, [{ path: "data/slow.bin", bytes: slowBytes }], { message: "slow" });
        await new Promise((resolve) => setTimeout(resolve, 2100));
        // Past the 5 s after which the answer's headers and blank space go out first.
        upstream.slow(6_000);
        try {
          const from = mirror.logLines().length;
          const client = new CastorClient({ endpoint: mirror.url, hubToken: tokens.alice, repo: DATASET });
          await client.downloadFile({ path: "data/slow.bin", output: join(work, "slow.bin") });
          assert.ok((await readFile(join(work, "slow.bin"))).equals(slowBytes));
          assert.ok(mirror.requestLog(from).some((line) => line.path.startsWith("/v2/reconstructions/") && line.statusCode === 200));
        } finally {
          upstream.slow(0);
        }
      });

      it("answers a cold file's reconstruction at once and serves its ranges as they arrive, whole upstream xorbs or packed", async () => {
        // Two files of one upload share the upstream's xorbs: reading one fetches parts of them,
        // which castor packs into its own xorbs.
        const first = randomBytes(2 * MiB);
        const second = randomBytes(3 * MiB);
        await upstream.commit(DATASET, [
          { path: "data/live-a.bin", bytes: first },
          { path: "data/live-b.bin", bytes: second },
        ]);
        await new Promise((resolve) => setTimeout(resolve, 2100));
        for (const [path, bytes] of [
          ["data/live-b.bin", second],
          ["data/live-a.bin", first],
        ] as const) {
          const from = mirror.logLines().length;
          const fetchedBefore = upstream.casBytes();
          const release = upstream.holdTransfers();
          const client = new CastorClient({ endpoint: mirror.url, hubToken: tokens.alice, repo: DATASET });
          const output = join(work, path.replaceAll("/", "-"));
          const download = client.downloadFile({ path, output });
          try {
            // While no byte can come from the upstream, castor's answer names what to read.
            await until(
              () => mirror.requestLog(from).some((line) => line.path.startsWith("/v2/reconstructions/") && line.statusCode === 200),
              "the reconstruction answered before the file is fetched",
              30_000,
            );
            assert.equal(upstream.casBytes(), fetchedBefore, "and nothing was fetched yet");
          } finally {
            release();
          }
          await download;
          assert.ok((await readFile(output)).equals(bytes), `${path} read as it arrived`);
        }
      });

      it("shares one upstream fetch between concurrent cold downloads of one file", async () => {
        const big = randomBytes(12 * MiB);
        await upstream.commit(DATASET, [{ path: "data/shared.bin", bytes: big }], { message: "shared" });
        await new Promise((resolve) => setTimeout(resolve, 2100));
        const from = upstream.casBytes();
        const bodies = await Promise.all(
          [0, 1, 2].map(async () => Buffer.from(await (await get("/datasets/org/table/resolve/main/data/shared.bin", tokens.alice)).arrayBuffer())),
        );
        for (const body of bodies) assert.ok(body.equals(big));
        const fetched = upstream.casBytes() - from;
        assert.ok(fetched >= big.length * 0.99 && fetched <= big.length * 1.01, `one fetch of ${big.length} bytes, not ${fetched}`);
      });

      it("follows a branch that moved once the refresh time passed; commit ids stay as they were", async () => {
        commits.second = await upstream.commit(PUBLIC, [{ path: "moved.bin", bytes: moved }], { message: "moved on" });
        await new Promise((resolve) => setTimeout(resolve, 2100));
        assert.equal(((await json("/api/models/org/weights")) as { sha: string }).sha, commits.second);
        assert.equal(((await json("/api/models/org/weights/revision/v1.0")) as { sha: string }).sha, commits.first);
        const atFirst = (await json(`/api/models/org/weights/tree/${commits.first}`)) as { path: string }[];
        assert.ok(!atFirst.some((e) => e.path === "moved.bin"));
        const head = await get("/org/weights/resolve/main/moved.bin", tokens.alice, { method: "HEAD" });
        assert.equal(head.headers.get("x-repo-commit"), commits.second);
      });

      it("refuses bytes the upstream corrupted, publishing nothing, then serves good ones", async () => {
        const bytes = randomBytes(3 * MiB);
        await upstream.commit(DATASET, [{ path: "data/corrupt.bin", bytes }], { message: "corrupt" });
        await new Promise((resolve) => setTimeout(resolve, 2100));
        upstream.corrupt(true);
        try {
          const client = new CastorClient({ endpoint: mirror.url, hubToken: tokens.alice, repo: DATASET, retry: { maxAttempts: 1 } });
          // Its ranges cut short as the fill finds the bytes wrong, or refused with the 502 naming the upstream.
          await assert.rejects(client.downloadFile({ path: "data/corrupt.bin", output: join(work, "corrupt.bin") }), /502|upstream|mid-body/);
          await assert.rejects(readFile(join(work, "corrupt.bin")), { code: "ENOENT" }, "no file completed");
          // A connection lost before any answer was seen once in a loaded full run: its log then says why.
          const plain = await get("/datasets/org/table/resolve/main/data/corrupt.bin", tokens.alice).catch((error: Error) => {
            throw new Error(
              `${error.message} (${String(error.cause)}); the mirror's last log lines:\n${mirror
                .logLines()
                .slice(-15)
                .map((line) => JSON.stringify(line))
                .join("\n")}`,
            );
          });
          assert.equal(plain.status, 200, "the stream started");
          await assert.rejects(plain.arrayBuffer(), "and was cut short, never completed");
        } finally {
          upstream.corrupt(false);
        }
        const good = await get("/datasets/org/table/resolve/main/data/corrupt.bin", tokens.alice);
        assert.ok(Buffer.from(await good.arrayBuffer()).equals(bytes));
      });

      it("passes the upstream's rate limit on as a 429 with Retry-After", async () => {
        upstream.rateLimit(10, 120);
        try {
          const response = await get("/api/models/org/other-name", tokens.alice);
          assert.equal(response.status, 429);
          assert.equal(response.headers.get("retry-after"), "120");
        } finally {
          upstream.rateLimit(0, 0);
        }
      });

      it("keeps serving what it holds while the upstream is stopped, and answers promptly for the rest", async () => {
        upstream.stopUpstream();
        try {
          await new Promise((resolve) => setTimeout(resolve, 2100));
          const from = mirror.logLines().length;
          assert.equal(((await json("/api/models/org/weights")) as { sha: string }).sha, commits.second, "the last known ref");
          const held = await get("/org/weights/resolve/main/model.safetensors", tokens.alice);
          assert.ok(Buffer.from(await held.arrayBuffer()).equals(weights), "a held file");
          assert.ok(
            mirror
              .logLines()
              .slice(from)
              .some((line) => String(line.msg).includes("cannot be reached")),
            "a log line says the upstream is away",
          );
          const started = Date.now();
          const never = await get("/org/weights/resolve/main/moved.bin", tokens.alice);
          assert.equal(never.status, 502, "a file never fetched");
          assert.match(((await never.json()) as { error: string }).error, /cannot be reached, and castor holds no copy/);
          const headOnly = await get("/org/weights/resolve/main/moved.bin", tokens.alice, { method: "HEAD" });
          assert.equal(headOnly.status, 200, "its metadata comes from the stored tree");
          const unknown = await get("/api/models/org/never-seen", tokens.alice);
          assert.equal(unknown.status, 502);
          assert.match(((await unknown.json()) as { error: string }).error, /cannot be reached/);
          assert.ok(Date.now() - started < 30_000, "promptly");
        } finally {
          upstream.startUpstream();
        }
      });

      it("lets a local repository take a mirrored name", async () => {
        await admin("repo", "create", "dataset", "org/table", "--public");
        const info = (await json("/api/datasets/org/table")) as { siblings: unknown[] };
        assert.deepEqual(info.siblings, [], "the local, empty repository");
      });

      it("lets a local repository moved onto a mirrored name take it", async () => {
        await admin("repo", "create", "model", "org/local", "--public");
        const moved = await get("/api/repos/move", tokens.writer, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ fromRepo: "org/local", toRepo: "org/weights", type: "model" }),
        });
        assert.equal(moved.status, 200, await moved.text());
        const info = (await json("/api/models/org/weights")) as { siblings: unknown[]; mirror?: boolean };
        assert.deepEqual(info.siblings, [], "the local, empty repository under the mirrored name");
        assert.equal(info.mirror, undefined);
      });
    });
  });
}
