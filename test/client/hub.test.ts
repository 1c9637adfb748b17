/**
 * The client's hub calls against a fake hub (an injected fetch): the NDJSON commit and when it
 * is (not) sent again, tree pages through `Link`, HEAD of a file and the server's error
 * message and code, inline downloads checked against the git blob id, and where uploaded files
 * go in the repository.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CastorClient, CastorClientError, HubStatusError, commitMessageOf, commitOperationsFor, repoPathsFor } from "../../src/client/index.js";
import { HttpClient, type FetchFunction } from "../../src/client/http.js";
import { HubClient, encodeCommit, nextLink } from "../../src/client/hub.js";
import { parseRepoRef } from "../../src/client/token.js";

const ENDPOINT = "http://hub.test";
const COMMIT = "c".repeat(40);

interface Seen {
  method: string;
  url: string;
  headers: Headers;
  body: string | null;
}

function fakeHub(answer: (request: Seen, index: number) => Response | Promise<Response>) {
  const seen: Seen[] = [];
  const fetch: FetchFunction = async (input, init) => {
    const request: Seen = {
      method: init?.method ?? "GET",
      url: String(input),
      headers: new Headers(init?.headers),
      body: init?.body === undefined || init.body === null ? null : Buffer.from(init.body as Uint8Array).toString("utf8"),
    };
    seen.push(request);
    return answer(request, seen.length - 1);
  };
  return { fetch, seen };
}

function hubClient(fetch: FetchFunction, repo = "model:alice/bert"): HubClient {
  return new HubClient({
    endpoint: `${ENDPOINT}/`,
    hubToken: "hf_secret",
    repo: parseRepoRef(repo),
    http: new HttpClient({ fetch, retry: { maxAttempts: 3, baseDelayMs: 0, maxDelayMs: 0 } }),
    sleep: async () => undefined,
  });
}

function networkError(code: string): TypeError {
  return new TypeError("fetch failed", { cause: Object.assign(new Error(`connect ${code}`), { code }) });
}

function gitBlobId(bytes: Buffer): string {
  return createHash("sha1").update(`blob ${bytes.length}\0`).update(bytes).digest("hex");
}

describe("where uploaded files go, and the commit that puts them there", () => {
  it("maps local files to repository paths", () => {
    assert.deepEqual(repoPathsFor(["/tmp/x/a.bin", "b.txt"]), ["a.bin", "b.txt"]);
    assert.deepEqual(repoPathsFor(["/tmp/x/a.bin", "b.txt"], "dir/sub"), ["dir/sub/a.bin", "dir/sub/b.txt"]);
    assert.deepEqual(repoPathsFor(["/tmp/x/a.bin", "b.txt"], "./dir/"), ["dir/a.bin", "dir/b.txt"]);
    assert.deepEqual(repoPathsFor(["/tmp/x/a.bin"], "weights/model.bin"), ["weights/model.bin"]);
    assert.deepEqual(repoPathsFor(["/tmp/x/a.bin"], "weights/"), ["weights/a.bin"]);
    assert.deepEqual(repoPathsFor(["/tmp/x/a.bin"], "."), ["a.bin"]);
    const usage = (error: unknown) => error instanceof CastorClientError && error.kind === "usage";
    assert.throws(
      () => repoPathsFor(["one/a.bin", "two/a.bin"]),
      (error: unknown) => usage(error) && /would both be "a\.bin"/.test((error as Error).message),
    );
    assert.throws(
      () => repoPathsFor(["a.bin"], "x/../y"),
      (error: unknown) => usage(error) && /'\.' or '\.\.' segment/.test((error as Error).message),
    );
    assert.throws(() => repoPathsFor(["a.bin"], "x//y"), usage);
  });

  it("names Xet content by SHA-256 and size, and sends the empty file inline", () => {
    const sha = "a".repeat(64);
    const operations = commitOperationsFor([
      { pathInRepo: "dir/a.bin", sha256: sha, size: 3 },
      { pathInRepo: "dir/empty", sha256: "e".repeat(64), size: 0 },
    ]);
    const body = Buffer.from(encodeCommit({ summary: "Upload 2 files with castor", operations })).toString("utf8");
    assert.ok(body.endsWith("\n"));
    assert.deepEqual(
      body
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line)),
      [
        { key: "header", value: { summary: "Upload 2 files with castor", description: "" } },
        { key: "lfsFile", value: { path: "dir/a.bin", algo: "sha256", oid: sha, size: 3 } },
        { key: "file", value: { content: "", path: "dir/empty", encoding: "base64" } },
      ],
    );
    assert.deepEqual(commitMessageOf(undefined, 1), { summary: "Upload 1 file with castor", description: "" });
    assert.deepEqual(commitMessageOf(undefined, 3), { summary: "Upload 3 files with castor", description: "" });
    assert.deepEqual(commitMessageOf("Add weights\n\nTrained longer.", 3), { summary: "Add weights", description: "Trained longer." });
    assert.throws(() => encodeCommit({ summary: " ", operations: [] }), CastorClientError);
  });
});

describe("HubClient.commit", () => {
  it("POSTs the NDJSON to the branch with the hub token and returns the commit", async () => {
    const hub = fakeHub(() => Response.json({ commitOid: COMMIT, commitUrl: `${ENDPOINT}/datasets/alice/data/commit/${COMMIT}` }));
    const result = await hubClient(hub.fetch, "dataset:alice/data").commit("feature/x", {
      summary: "s",
      operations: [{ kind: "deletedFile", path: "old.txt" }],
    });
    assert.deepEqual(result, { commitOid: COMMIT, commitUrl: `${ENDPOINT}/datasets/alice/data/commit/${COMMIT}` });
    assert.equal(hub.seen.length, 1);
    const [request] = hub.seen;
    assert.equal(request.method, "POST");
    assert.equal(request.url, `${ENDPOINT}/api/datasets/alice/data/commit/feature%2Fx`);
    assert.equal(request.headers.get("authorization"), "Bearer hf_secret");
    assert.equal(request.headers.get("content-type"), "application/x-ndjson");
    assert.match(request.body!, /^\{"key":"header".*\n\{"key":"deletedFile","value":\{"path":"old.txt"\}\}\n$/s);
  });

  it("is sent again only when the connection was never made", async () => {
    const refused = fakeHub((_request, index) => {
      if (index < 2) throw networkError("ECONNREFUSED");
      return Response.json({ commitOid: COMMIT, commitUrl: "" });
    });
    assert.equal((await hubClient(refused.fetch).commit("main", { summary: "s", operations: [] })).commitOid, COMMIT);
    assert.equal(refused.seen.length, 3);

    const reset = fakeHub(() => {
      throw networkError("ECONNRESET");
    });
    await assert.rejects(hubClient(reset.fetch).commit("main", { summary: "s", operations: [] }), (error: unknown) => {
      assert.ok(error instanceof CastorClientError && error.kind === "network");
      assert.match(error.message, /ECONNRESET.*the commit may have been applied: check the branch/);
      return true;
    });
    assert.equal(reset.seen.length, 1, "a connection lost after sending is not retried");

    const failing = fakeHub(() => Response.json({ error: "database went away" }, { status: 503 }));
    await assert.rejects(hubClient(failing.fetch).commit("main", { summary: "s", operations: [] }), (error: unknown) => {
      assert.ok(error instanceof HubStatusError);
      assert.equal(error.status, 503);
      assert.match(error.message, /503 Service Unavailable: database went away \(the commit may have been applied/);
      return true;
    });
    assert.equal(failing.seen.length, 1, "a 5xx answer to a commit is not retried");
  });

  it("reports a refusal with the server's message and code", async () => {
    const hub = fakeHub(() =>
      Response.json({ error: 'lfsFile "a.bin": no content with SHA-256 aaaa was uploaded' }, { status: 400, headers: { "x-error-message": "lfsFile ascii" } }),
    );
    await assert.rejects(hubClient(hub.fetch).commit("main", { summary: "s", operations: [] }), (error: unknown) => {
      assert.ok(error instanceof HubStatusError);
      assert.equal(error.serverMessage, 'lfsFile "a.bin": no content with SHA-256 aaaa was uploaded');
      assert.match(error.message, /^committing 0 changes to branch "main" of model:alice\/bert: 400 Bad Request: lfsFile "a\.bin"/);
      return true;
    });
  });
});

describe("HubClient listings and lookups", () => {
  it("follows Link rel=next pages and parses files and folders", async () => {
    const pages = [
      [
        { type: "directory", path: "dir", oid: "d".repeat(40), size: 0 },
        {
          type: "file",
          path: "dir/a.bin",
          oid: "1".repeat(40),
          size: 3145728,
          xetHash: "f".repeat(64),
          lfs: { oid: "a".repeat(64), size: 3145728, pointerSize: 134 },
        },
      ],
      [{ type: "file", path: "dir/empty", oid: "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", size: 0 }],
    ];
    const hub = fakeHub((request) => {
      const page = new URL(request.url).searchParams.get("cursor") === null ? 0 : 1;
      const headers: Record<string, string> =
        page === 0 ? { link: `<${ENDPOINT}/api/models/alice/bert/tree/${COMMIT}?recursive=true&cursor=MQ>; rel="next"` } : {};
      return Response.json(pages[page], { headers });
    });
    const client = hubClient(hub.fetch);
    const files = await client.listFiles("main");
    assert.deepEqual(files, [
      { type: "file", path: "dir/a.bin", size: 3145728, oid: "1".repeat(40), storage: "xet", xetHash: "f".repeat(64), sha256: "a".repeat(64) },
      { type: "file", path: "dir/empty", size: 0, oid: "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", storage: "inline", xetHash: null, sha256: null },
    ]);
    assert.equal(hub.seen[0].url, `${ENDPOINT}/api/models/alice/bert/tree/main?recursive=true&expand=false`);
    assert.equal(hub.seen[1].url, `${ENDPOINT}/api/models/alice/bert/tree/${COMMIT}?recursive=true&cursor=MQ`);
    assert.ok(hub.seen.every((request) => request.headers.get("authorization") === "Bearer hf_secret"));
  });

  it("refuses to send the hub token to a next page on another host", async () => {
    const hub = fakeHub(() => Response.json([], { headers: { link: '<http://elsewhere.test/api/models/alice/bert/tree/main?cursor=MQ>; rel="next"' } }));
    await assert.rejects(hubClient(hub.fetch).listFiles("main"), /points to http:\/\/elsewhere\.test, not to the endpoint http:\/\/hub\.test/);
    assert.equal(hub.seen.length, 1);
  });

  it("reads Link headers with several relations", () => {
    assert.equal(nextLink('<http://a/prev>; rel="prev", <http://a/next?x=1,2>; rel=next'), "http://a/next?x=1,2");
    assert.equal(nextLink('<http://a/prev>; rel="prev"'), null);
    assert.equal(nextLink(null), null);
  });

  it("HEADs a file by path, with the type's URL prefix, and reads what it is", async () => {
    const hub = fakeHub(
      () =>
        new Response(null, {
          headers: {
            "x-repo-commit": COMMIT,
            etag: `"${"a".repeat(64)}"`,
            "x-linked-etag": `"${"a".repeat(64)}"`,
            "x-linked-size": "3145728",
            "content-length": "3145728",
            "x-xet-hash": "f".repeat(64),
          },
        }),
    );
    const info = await hubClient(hub.fetch, "space:alice/demo").fileInfo("refs/pr/1", "dir/a b#.bin");
    assert.equal(hub.seen[0].method, "HEAD");
    assert.equal(hub.seen[0].url, `${ENDPOINT}/spaces/alice/demo/resolve/refs%2Fpr%2F1/dir/a%20b%23.bin`);
    assert.deepEqual(info, {
      path: "dir/a b#.bin",
      revision: "refs/pr/1",
      commit: COMMIT,
      size: 3145728,
      storage: "xet",
      xetHash: "f".repeat(64),
      etag: "a".repeat(64),
    });
  });

  it("reports a 404 on a HEAD with X-Error-Message and X-Error-Code", async () => {
    const hub = fakeHub(
      () =>
        new Response(null, {
          status: 404,
          headers: { "x-error-code": "EntryNotFound", "x-error-message": `"dir/missing" does not exist at commit ${COMMIT}` },
        }),
    );
    await assert.rejects(hubClient(hub.fetch).fileInfo("main", "dir/missing"), (error: unknown) => {
      assert.ok(error instanceof HubStatusError);
      assert.equal(error.status, 404);
      assert.equal(error.errorCode, "EntryNotFound");
      assert.match(error.message, new RegExp(`: 404 Not Found \\(EntryNotFound\\): "dir/missing" does not exist at commit ${COMMIT}$`));
      return true;
    });
    assert.equal(hub.seen.length, 1, "a 404 is final");
  });
});

describe("CastorClient.downloadFile of an inline file", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "castor-hub-client-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  const content = Buffer.from("hello, inline world\n");
  function inlineHub(served: Buffer, etag = gitBlobId(content)) {
    return fakeHub((request) => {
      const headers = { "x-repo-commit": COMMIT, etag: `"${etag}"`, "content-length": String(content.length) };
      if (request.method === "HEAD") return new Response(null, { headers });
      return new Response(served, { headers: { ...headers, "content-length": String(served.length) } });
    });
  }
  const client = (fetch: FetchFunction) =>
    new CastorClient({ endpoint: ENDPOINT, hubToken: "hf_secret", repo: "dataset:alice/data", revision: "main", fetch, retry: { maxAttempts: 1 } });

  it("GETs the file at the commit its HEAD named and checks the git blob id", async () => {
    const hub = inlineHub(content);
    const out = join(dir, "notes.txt");
    const result = await client(hub.fetch).downloadFile({ path: "./dir/notes.txt", output: out });
    assert.deepEqual((await readFile(out)).toString(), content.toString());
    assert.deepEqual(result, {
      path: "dir/notes.txt",
      commit: COMMIT,
      size: content.length,
      storage: "inline",
      etag: gitBlobId(content),
      fileHash: null,
      resumedBytes: 0,
      bytesWritten: content.length,
      verified: "git-blob-id",
    });
    assert.deepEqual(
      hub.seen.map((request) => `${request.method} ${request.url}`),
      [`HEAD ${ENDPOINT}/datasets/alice/data/resolve/main/dir/notes.txt`, `GET ${ENDPOINT}/datasets/alice/data/resolve/${COMMIT}/dir/notes.txt`],
    );

    const part = join(dir, "part.txt");
    const ranged = await client(inlineHub(content).fetch).downloadFile({ path: "dir/notes.txt", output: part, range: { start: 7, end: 12 } });
    assert.equal((await readFile(part)).toString(), "inline");
    assert.equal(ranged.bytesWritten, 6);
    assert.equal(ranged.verified, "git-blob-id", "the whole file is still read and checked");
  });

  it("keeps no output when the bytes do not match the ETag", async () => {
    const tampered = Buffer.from(content);
    tampered[0] ^= 1;
    const out = join(dir, "tampered.txt");
    await assert.rejects(client(inlineHub(tampered).fetch).downloadFile({ path: "notes.txt", output: out }), (error: unknown) => {
      assert.ok(error instanceof CastorClientError && error.kind === "integrity");
      assert.match(error.message, /not the ETag .*the output file was not kept/);
      return true;
    });
    assert.deepEqual(
      (await readdir(dir)).filter((name) => name.startsWith("tampered")),
      [],
      "neither the output nor a partial file",
    );
  });
});
