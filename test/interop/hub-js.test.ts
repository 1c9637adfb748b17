/**
 * The JavaScript client `@huggingface/hub` 2.17.5 against a real `castor serve`, pointed at it
 * with `hubUrl` and a hub token of user alice, nothing mocked: `createRepo`, `uploadFiles` of a
 * small text file (inline in the commit) and a 12 MiB random file (LFS batch answered
 * `transfer: "xet"`, then the library's own Xet upload: write token, xorbs, shard, commit by
 * SHA-256), `listFiles`, `fileDownloadInfo` (castor's xet-fileinfo answer), `downloadFile` byte
 * for byte (XetBlob reconstruction for the Xet file, a plain GET for the inline one),
 * `fileExists`, `modelInfo`, raw downloads (`/raw/`: a Xet file's LFS pointer), `listCommits`
 * paged across a boundary, a re-upload of stored content that uploads nothing,
 * `deleteFile`, and the refusals: a read token may download but not write, another namespace
 * may not be created in, and a client with Xet switched off is told castor needs Xet.
 *
 * Every library request goes through a recording `fetch`; a failure shows them and castor's log.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  commit,
  createRepo,
  deleteFile,
  downloadFile,
  fileDownloadInfo,
  fileExists,
  HubApiError,
  listCommits,
  listFiles,
  modelInfo,
  uploadFiles,
  type ListFileEntry,
  type RepoDesignation,
} from "@huggingface/hub";
import { gitBlobId } from "../../src/format/git.js";
import { runCastor } from "../helpers/cli.js";
import { assertSameBytes, MIB, pseudoRandomBytes } from "./harness.js";
import { castorDiagnostics, sha256Hex, startHub, urlPrefix, USER, type HubServer, type RepoType } from "./hub-clients.js";

const BIG_SIZE = 12 * MIB + 4321;

interface Seen {
  method: string;
  /** Path and query, relative to castor. */
  path: string;
  status: number;
  /** The request body of hub calls the test inspects (preupload, LFS batch, commit). */
  body?: string;
}

/** Requests whose bodies are small JSON or NDJSON worth keeping. */
const KEEP_BODY = /\/(preupload\/[^/]+|info\/lfs\/objects\/batch|commit\/[^/]+)$/;

describe("@huggingface/hub 2.17.5 against castor's hub", () => {
  let hub: HubServer;
  let readToken: string;
  const seen: Seen[] = [];

  /** The library's fetch: the real one, recording what it asks castor. */
  const recording: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const url = new URL(request.url);
    const body = request.method === "POST" && KEEP_BODY.test(url.pathname) ? await request.clone().text() : undefined;
    const response = await fetch(request);
    seen.push({ method: request.method, path: `${url.pathname}${url.search}`, status: response.status, ...(body === undefined ? {} : { body }) });
    return response;
  };

  /** Runs `action`, returning the requests it made; on failure, shows them and castor's log. */
  async function requestsOf<T>(what: string, action: () => Promise<T>): Promise<{ result: T; requests: Seen[] }> {
    const from = seen.length;
    const fromLog = hub.server.logLines().length;
    try {
      const result = await action();
      return { result, requests: seen.slice(from) };
    } catch (error) {
      const made = seen
        .slice(from)
        .map((r) => `${r.method} ${r.path} → ${r.status}`)
        .join("\n");
      throw new Error(
        `${what} failed: ${(error as Error).message}\n--- the library's requests ---\n${made || "(none)"}\n${castorDiagnostics(hub.server, fromLog)}`,
        {
          cause: error,
        },
      );
    }
  }

  const as = (token: string) => ({ hubUrl: hub.endpoint, accessToken: token, fetch: recording });
  const alice = () => as(hub.token);

  before(async () => {
    hub = await startHub();
    const created = await runCastor(["token", "create", "--user", USER, "--namespace", USER, "--access", "read"], { env: hub.server.settings });
    assert.equal(created.code, 0, created.stderr);
    readToken = created.stdout.trimEnd().split("\n").at(-1) ?? "";
    assert.match(readToken, /^hf_/);
  });

  after(async () => {
    await hub?.stop();
  });

  const contents = (type: RepoType) => ({
    small: new TextEncoder().encode(`a small text file in the ${type} repository\nsecond line: ünïcödé\n`),
    big: pseudoRandomBytes(`hub-js: 12 MiB for the ${type}`, BIG_SIZE),
  });

  async function bytesOf(blob: Blob | null, what: string): Promise<Uint8Array> {
    assert.ok(blob !== null, `${what}: downloadFile found the file`);
    return new Uint8Array(await blob.arrayBuffer());
  }

  const count = (requests: Seen[], method: string, path: RegExp) => requests.filter((r) => r.method === method && path.test(r.path)).length;

  describe("a model repository, step by step", () => {
    const repo: RepoDesignation = { type: "model", name: `${USER}/js-model` };
    const { small, big } = contents("model");
    /** Commit ids in the order made. */
    const commits: string[] = [];

    it("createRepo answers the repository's URL on castor; creating it again is a 409", async () => {
      const { result } = await requestsOf("createRepo", () => createRepo({ repo, ...alice() }));
      assert.deepEqual(result, { repoUrl: `${hub.endpoint}/${USER}/js-model`, id: `${USER}/js-model` });
      await assert.rejects(createRepo({ repo, ...alice() }), (error: unknown) => error instanceof HubApiError && error.statusCode === 409);
    });

    it("uploadFiles sends the small file inline and the 12 MiB one through the LFS batch (transfer xet) and Xet", async () => {
      const { result, requests } = await requestsOf("uploadFiles", () =>
        uploadFiles({
          repo,
          ...alice(),
          files: [
            { path: "small.txt", content: new Blob([small]) },
            { path: "weights/big.bin", content: new Blob([big]) },
          ],
        }),
      );
      assert.ok(result !== undefined);
      assert.match(result.commit.oid, /^[0-9a-f]{40}$/);
      assert.equal(result.commit.url, `${hub.endpoint}/${USER}/js-model/commit/${result.commit.oid}`);
      commits.push(result.commit.oid);

      const batch = requests.find((r) => r.path === `/${USER}/js-model.git/info/lfs/objects/batch`);
      assert.ok(batch, "the library asked the LFS batch endpoint");
      assert.equal(batch.status, 200);
      const asked = JSON.parse(batch.body!);
      assert.ok(asked.transfers.includes("xet"), "the library offers the xet transfer");
      assert.deepEqual(asked.objects, [{ oid: sha256Hex(big), size: big.length }], "only the large file goes through the batch");
      // The Xet upload the batch answer sent it to: write token at the branch, xorbs, one shard.
      assert.equal(count(requests, "GET", new RegExp(`^/api/models/${USER}/js-model/xet-write-token/main$`)), 1);
      assert.ok(count(requests, "POST", /^\/v1\/xorbs\/default\/[0-9a-f]{64}$/) >= 1, "xorbs uploaded");
      assert.equal(count(requests, "POST", /^\/v1\/shards$/), 1, "one shard uploaded");
      assert.ok(
        requests.every((r) => r.status < 400 || r.path.startsWith("/v1/chunks/")),
        "no request failed (dedup probes may 404)",
      );

      const committed = requests
        .find((r) => r.path === `/api/models/${USER}/js-model/commit/main`)!
        .body!.split("\n")
        .map((line) => JSON.parse(line));
      assert.deepEqual(
        committed.slice(1).map((line: { key: string; value: { path: string } }) => [line.key, line.value.path]),
        [
          ["file", "small.txt"],
          ["lfsFile", "weights/big.bin"],
        ],
      );
    });

    it("listFiles lists both, the large one Xet-stored (lfs sha256 + xetHash)", async () => {
      const { result } = await requestsOf("listFiles", async () => {
        const entries: ListFileEntry[] = [];
        for await (const entry of listFiles({ repo, recursive: true, ...alice() })) entries.push(entry);
        return entries;
      });
      const byPath = new Map(result.map((entry) => [entry.path, entry]));
      // .gitattributes: castor's line for the Xet-stored file, as the Hub adds one for API uploads.
      assert.deepEqual([...byPath.keys()].sort(), [".gitattributes", "small.txt", "weights", "weights/big.bin"]);
      assert.equal(byPath.get("weights")!.type, "directory");
      const smallEntry = byPath.get("small.txt")!;
      assert.equal(smallEntry.size, small.length);
      assert.equal(smallEntry.oid, gitBlobId(small));
      assert.equal(smallEntry.lfs, undefined);
      const bigEntry = byPath.get("weights/big.bin")!;
      assert.equal(bigEntry.size, big.length);
      assert.equal(bigEntry.lfs?.oid, sha256Hex(big));
      assert.equal(bigEntry.lfs?.size, big.length);
      assert.match(bigEntry.xetHash ?? "", /^[0-9a-f]{64}$/);
    });

    it("fileDownloadInfo describes the Xet file (xet hash, read-token route at the commit) and the inline one; null for a missing file", async () => {
      const { result: bigInfo } = await requestsOf("fileDownloadInfo", () => fileDownloadInfo({ repo, path: "weights/big.bin", ...alice() }));
      assert.ok(bigInfo !== null);
      assert.equal(bigInfo.size, big.length);
      assert.equal(bigInfo.etag, `"${sha256Hex(big)}"`);
      assert.ok(bigInfo.xet, "described as a Xet file");
      assert.match(bigInfo.xet.hash, /^[0-9a-f]{64}$/);
      assert.equal(bigInfo.xet.refreshUrl.href, `${hub.endpoint}/api/models/${USER}/js-model/xet-read-token/${commits[0]}`);
      assert.equal(bigInfo.xet.reconstructionUrl.href, `${hub.endpoint}/v1/reconstructions/${bigInfo.xet.hash}`);

      const smallInfo = await fileDownloadInfo({ repo, path: "small.txt", ...alice() });
      assert.ok(smallInfo !== null);
      assert.equal(smallInfo.size, small.length);
      assert.equal(smallInfo.etag, `"${gitBlobId(small)}"`);
      assert.equal(smallInfo.xet, undefined);
      assert.equal(smallInfo.url, `${hub.endpoint}/${USER}/js-model/resolve/main/small.txt`);

      assert.equal(await fileDownloadInfo({ repo, path: "nothing.bin", ...alice() }), null);
      const atCommit = await fileDownloadInfo({ repo, path: "weights/big.bin", revision: commits[0], ...alice() });
      assert.equal(atCommit?.xet?.hash, bigInfo.xet.hash, "a commit id works as the revision");
    });

    it("downloadFile returns both byte for byte: the Xet file reconstructed by the library, the inline one fetched", async () => {
      const { result: bigBytes, requests } = await requestsOf("downloadFile (Xet)", async () =>
        bytesOf(await downloadFile({ repo, path: "weights/big.bin", ...alice() }), "big.bin"),
      );
      assertSameBytes(bigBytes, big, "weights/big.bin");
      assert.equal(count(requests, "GET", new RegExp(`^/api/models/${USER}/js-model/xet-read-token/${commits[0]}$`)), 1);
      assert.ok(count(requests, "GET", /^\/v2\/reconstructions\/[0-9a-f]{64}/) >= 1, "the library reconstructed the file itself");
      assert.ok(count(requests, "GET", /^\/v1\/transfer\//) >= 1);
      assert.equal(count(requests, "GET", /\/resolve\/main\/weights\/big\.bin$/), 1, "resolve only described it");

      const { result: smallBytes } = await requestsOf("downloadFile (inline)", async () =>
        bytesOf(await downloadFile({ repo, path: "small.txt", ...alice() }), "small.txt"),
      );
      assertSameBytes(smallBytes, small, "small.txt");
      assert.equal(await downloadFile({ repo, path: "nothing.bin", ...alice() }), null);
    });

    it("fileExists (HEAD raw), modelInfo (revision HEAD) and raw downloads (the Xet file's LFS pointer)", async () => {
      assert.equal(await fileExists({ repo, path: "weights/big.bin", ...alice() }), true);
      assert.equal(await fileExists({ repo, path: "small.txt", ...alice() }), true);
      assert.equal(await fileExists({ repo, path: "nothing.bin", ...alice() }), false);
      const info = await modelInfo({ name: `${USER}/js-model`, ...alice(), additionalFields: ["sha"] });
      assert.equal(info.name, `${USER}/js-model`);
      assert.equal(info.private, true);
      assert.equal(info.sha, commits[0]);
      const pointer = await bytesOf(await downloadFile({ repo, path: "weights/big.bin", raw: true, ...alice() }), "raw big.bin");
      assert.equal(new TextDecoder().decode(pointer), `version https://git-lfs.github.com/spec/v1\noid sha256:${sha256Hex(big)}\nsize ${big.length}\n`);
      assertSameBytes(await bytesOf(await downloadFile({ repo, path: "small.txt", raw: true, ...alice() }), "raw small.txt"), small, "raw small.txt");
    });

    it("uploading stored content again under another path uploads nothing: the batch answers it without an action", async () => {
      const { result, requests } = await requestsOf("uploadFiles (stored content)", () =>
        uploadFiles({ repo, ...alice(), files: [{ path: "copy-of-big.bin", content: new Blob([big]) }] }),
      );
      commits.push(result!.commit.oid);
      const batch = requests.find((r) => r.path.endsWith("/info/lfs/objects/batch"));
      assert.equal(batch?.status, 200);
      assert.equal(count(requests, "GET", /xet-write-token/), 0, "no write token needed");
      assert.equal(count(requests, "POST", /^\/v1\/(xorbs|shards)/), 0, "no xorb or shard uploaded");
      assertSameBytes(await bytesOf(await downloadFile({ repo, path: "copy-of-big.bin", ...alice() }), "copy"), big, "copy-of-big.bin");
    });

    it("listCommits pages through the history (batchSize 2, across page boundaries)", async () => {
      for (let i = 0; i < 3; i++) {
        const made = await commit({
          repo,
          ...alice(),
          title: `notes ${i}`,
          description: `description ${i}`,
          operations: [{ operation: "addOrUpdate", path: `notes/${i}.txt`, content: new Blob([`notes ${i}\n`]) }],
        });
        commits.push(made!.commit.oid);
      }
      const { result, requests } = await requestsOf("listCommits", async () => {
        const listed = [];
        for await (const entry of listCommits({ repo, batchSize: 2, ...alice() })) listed.push(entry);
        return listed;
      });
      // Newest first: the five commits made here, then the repository's initial commit.
      assert.deepEqual(
        result.map((c) => c.oid),
        [...commits].reverse().concat(result.at(-1)!.oid),
      );
      assert.equal(result.length, 6);
      assert.deepEqual(
        result.map((c) => c.title),
        ["notes 2", "notes 1", "notes 0", "Add 1 files", "Add 2 files", "initial commit"],
      );
      assert.equal(result[0].message, "description 2");
      assert.deepEqual(
        result[0].authors.map((a) => a.username),
        [USER],
      );
      assert.ok(result.every((c) => c.date instanceof Date && !Number.isNaN(c.date.getTime())));
      const pages = requests.filter((r) => r.path.includes("/commits/"));
      assert.equal(pages.length, 3, "three pages of two");
      assert.match(pages[0].path, /\/commits\/main\?limit=2$/);
      assert.match(pages[1].path, new RegExp(`/commits/${commits.at(-1)}\\?p=1&limit=2$`), "next pages are pinned to the commit");
    });

    it("deleteFile removes the file in a new commit", async () => {
      const { result } = await requestsOf("deleteFile", () => deleteFile({ repo, path: "small.txt", ...alice() }));
      assert.match(result!.commit.oid, /^[0-9a-f]{40}$/);
      assert.equal(await fileDownloadInfo({ repo, path: "small.txt", ...alice() }), null);
      assert.equal(await downloadFile({ repo, path: "small.txt", ...alice() }), null);
      const old = await downloadFile({ repo, path: "small.txt", revision: commits[0], ...alice() });
      assertSameBytes(await bytesOf(old, "small.txt at the first commit"), small, "small.txt at the first commit");
      const paths = [];
      for await (const entry of listFiles({ repo, recursive: true, ...alice() })) paths.push(entry.path);
      assert.ok(!paths.includes("small.txt"));
      assert.ok(paths.includes("weights/big.bin"));
      await assert.rejects(deleteFile({ repo, path: "small.txt", ...alice() }), (error: unknown) => error instanceof HubApiError && error.statusCode === 404);
    });

    it("a read token downloads but may not upload, delete or create", async () => {
      const reader = as(readToken);
      assertSameBytes(await bytesOf(await downloadFile({ repo, path: "weights/big.bin", ...reader }), "big.bin"), big, "big.bin with a read token");
      const refused = (status: number) => (error: unknown) => error instanceof HubApiError && error.statusCode === status;
      await assert.rejects(uploadFiles({ repo, ...reader, files: [{ path: "x.txt", content: new Blob(["x"]) }] }), refused(403));
      await assert.rejects(uploadFiles({ repo, ...reader, files: [{ path: "big2.bin", content: new Blob([big.subarray(0, 11 * MIB)]) }] }), refused(403));
      await assert.rejects(deleteFile({ repo, path: "weights/big.bin", ...reader }), refused(403));
      await assert.rejects(createRepo({ repo: { type: "model", name: `${USER}/by-reader` }, ...reader }), refused(403));
      await assert.rejects(createRepo({ repo: { type: "model", name: "bob/elsewhere" }, ...alice() }), refused(403));
      const files = [];
      for await (const entry of listFiles({ repo, recursive: true, ...alice() })) files.push(entry.path);
      assert.ok(!files.includes("x.txt") && !files.includes("big2.bin"), "refused uploads committed nothing");
    });

    it("a client without Xet (useXet: false) uploads through the LFS basic transfer, which castor stores through Xet", async () => {
      const other = big.subarray(MIB, 3 * MIB);
      const { requests } = await requestsOf("commit with useXet: false", () =>
        commit({ repo, ...alice(), title: "no xet", useXet: false, operations: [{ operation: "addOrUpdate", path: "other.bin", content: new Blob([other]) }] }),
      );
      assert.ok(
        requests.some((line) => line.method === "PUT" && /\/info\/lfs\/objects\/[0-9a-f]{64}(\?|$)/.test(line.path) && line.status === 200),
        `the bytes went by a basic LFS upload:\n${requests.map((line) => `${line.method} ${line.path} ${line.status}`).join("\n")}`,
      );
      let listed: { path: string; xetHash?: string } | undefined;
      for await (const entry of listFiles({ repo, recursive: true, ...alice() })) if (entry.path === "other.bin") listed = entry;
      assert.match(listed?.xetHash ?? "", /^[0-9a-f]{64}$/, "other.bin is a Xet file");
      assertSameBytes(await bytesOf(await downloadFile({ repo, path: "other.bin", ...alice() }), "other.bin"), other, "other.bin");
    });
  });

  for (const type of ["dataset", "space"] as const) {
    it(`a ${type} repository: createRepo, uploadFiles (inline + Xet), listFiles, downloadFile byte for byte`, async () => {
      const repo: RepoDesignation = { type, name: `${USER}/js-${type}` };
      const { small, big } = contents(type);
      const { result: created } = await requestsOf(`createRepo (${type})`, () => createRepo({ repo, ...alice() }));
      assert.equal(created.repoUrl, `${hub.endpoint}/${urlPrefix(type)}${USER}/js-${type}`);
      const { requests } = await requestsOf(`uploadFiles (${type})`, () =>
        uploadFiles({
          repo,
          ...alice(),
          files: [
            { path: "small.txt", content: new Blob([small]) },
            { path: "big.bin", content: new Blob([big]) },
          ],
        }),
      );
      assert.equal(count(requests, "POST", new RegExp(`^/${urlPrefix(type)}${USER}/js-${type}\\.git/info/lfs/objects/batch$`)), 1);
      assert.equal(count(requests, "GET", new RegExp(`^/api/${type}s/${USER}/js-${type}/xet-write-token/main$`)), 1);
      assert.equal(count(requests, "POST", /^\/v1\/shards$/), 1);
      const paths = [];
      for await (const entry of listFiles({ repo, ...alice() })) paths.push(entry.path);
      assert.deepEqual(paths.sort(), [".gitattributes", "big.bin", "small.txt"]);
      const attributes = await downloadFile({ repo, path: ".gitattributes", ...alice() });
      assert.equal(await attributes?.text(), "big.bin filter=lfs diff=lfs merge=lfs -text\n");
      const { result: bigBytes } = await requestsOf(`downloadFile (${type})`, async () =>
        bytesOf(await downloadFile({ repo, path: "big.bin", ...alice() }), "big.bin"),
      );
      assertSameBytes(bigBytes, big, `${type} big.bin`);
      assertSameBytes(await bytesOf(await downloadFile({ repo, path: "small.txt", ...alice() }), "small.txt"), small, `${type} small.txt`);
    });
  }
});
