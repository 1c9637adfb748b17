/**
 * The bounded history walk behind `lastCommit` (src/hub/last-commits.ts), on a real SQLite
 * store: within the bound every path gets the newest commit that changed it (the one that
 * added it, for paths never changed since); a path unchanged over the whole bound gets none
 * rather than a commit that did not change it; and the walk opens only the trees whose ids
 * differ, so commits that touch other folders cost no tree loads.
 */
import assert from "node:assert/strict";
import { beforeEach, describe, it } from "node:test";
import { join } from "node:path";
import { OperatorHub } from "../helpers/operator.js";
import { lastCommits } from "../../src/hub/last-commits.js";
import { FileReader } from "../../src/cas/file-reader.js";
import { FileService } from "../../src/hub/files.js";
import { createAdminHub } from "../../src/hub/index.js";
import type { SqliteMetadataStore } from "../../src/metadata/sqlite.js";
import type { CommitRecord, Repo } from "../../src/metadata/store.js";
import { sha256Hex } from "../../src/hub/history.js";
import { gitBlobId } from "../../src/format/git.js";
import type { Caller } from "../../src/hub/access.js";
import { useFreshStores } from "../helpers/stores.js";

const stores = useFreshStores("last-commits");
let store: SqliteMetadataStore;
let fileService: FileService;
let caller: Caller;
let repo: Repo;

beforeEach(async () => {
  store = stores().metadata;
  const { blobs } = stores();
  const hub = createAdminHub(store);
  fileService = new FileService({
    store,
    blobs,
    xetFiles: new FileReader({ metadata: store, blobs }),
    repos: hub.repos,
    inlineMaxBytes: 1024,
    spoolDir: join(stores().dir, "spool"),
  });
  const { secret } = await new OperatorHub(store).createToken({ repos: "all", owner: "alice", access: "write", expiresAt: null });
  caller = await hub.tokens.authenticate(secret);
  repo = await hub.repos.create(caller, "model", "walk", { private: true });
});

/** Commits `path` = `text` (inline; the blob store is not needed to build trees). */
async function write(summary: string, ...files: [string, string][]): Promise<CommitRecord> {
  const operations = files.map(([path, text]) => {
    const bytes = Buffer.from(text);
    return { kind: "file" as const, path, size: bytes.length, sha256: sha256Hex(bytes), oid: gitBlobId(bytes) };
  });
  return fileService.commit(caller, { type: "model", name: "alice/walk" }, "main", { summary, description: "" }, operations);
}

describe("lastCommits", () => {
  it("finds the newest change of each path within the bound, and omits paths unchanged over the whole bound", async () => {
    const first = await write("first", ["old.txt", "o"], ["dir/a.txt", "a"]);
    let head = first;
    for (let i = 0; i < 5; i++) head = await write(`busy ${i}`, ["busy/n.txt", String(i)]);
    const touched = await write("touch dir", ["dir/a.txt", "a2"]);
    head = await write("busy again", ["busy/n.txt", "x"]);

    const all = await lastCommits(store, repo, head, ["old.txt", "dir", "dir/a.txt", "busy", "busy/n.txt", "missing", ""]);
    assert.deepEqual(Object.fromEntries([...all].map(([path, commit]) => [path, commit.title])), {
      "old.txt": "first",
      dir: "touch dir",
      "dir/a.txt": "touch dir",
      busy: "busy again",
      "busy/n.txt": "busy again",
    });
    assert.equal(all.get("dir")?.oid, touched.oid);

    // Walking 3 commits (head, touch dir, busy 4): old.txt's change is further back, so it has none.
    const bounded = await lastCommits(store, repo, head, ["old.txt", "dir/a.txt", "busy/n.txt"], 3);
    assert.deepEqual(Object.fromEntries([...bounded].map(([path, commit]) => [path, commit.title])), {
      "dir/a.txt": "touch dir",
      "busy/n.txt": "busy again",
    });
    // A bound of exactly the commits to the change finds it; one less does not.
    assert.equal((await lastCommits(store, repo, head, ["old.txt"], 8)).get("old.txt")?.oid, first.oid);
    assert.equal((await lastCommits(store, repo, head, ["old.txt"], 7)).size, 0);
  });

  it("loads only the trees whose ids differ between a commit and its parent", async () => {
    await write("first", ["deep/er/still/file.txt", "f"], ["other/x.txt", "x"]);
    let head: CommitRecord | null = null;
    for (let i = 0; i < 20; i++) head = await write(`other ${i}`, ["other/x.txt", String(i)]);
    const loaded: string[] = [];
    const counting = {
      getCommit: store.getCommit.bind(store),
      getTree: (repoId: number, oid: string) => {
        loaded.push(oid);
        return store.getTree(repoId, oid);
      },
    };
    const found = await lastCommits(counting, repo, head!, ["deep/er/still/file.txt"]);
    assert.equal(found.get("deep/er/still/file.txt")?.title, "first");
    // 22 commits walked: each root once, and deep/'s trees once (the same ids all the way down).
    assert.equal(new Set(loaded).size, loaded.length, "no tree is loaded twice");
    assert.ok(loaded.length <= 22 + 3, `${loaded.length} tree loads for 22 commits`);
  });
});
