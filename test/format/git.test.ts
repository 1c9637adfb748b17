/**
 * Git ids checked against the real `git` binary: blobs (plain and LFS pointers), trees with
 * git's ordering subtleties, and commits with and without parents.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  commitMessage,
  compareTreeItems,
  gitBlobId,
  gitCommitBody,
  gitObjectId,
  gitTreeId,
  lfsPointer,
  lfsPointerSize,
  userSignature,
  type GitTreeItem,
} from "../../src/format/git.js";

const repo = mkdtempSync(join(tmpdir(), "castor-git-ids-"));
after(() => rmSync(repo, { recursive: true, force: true }));
execFileSync("git", ["init", "-q", "--bare", repo]);

/** Runs git in the bare repository with `input` on stdin; returns trimmed stdout. */
function git(args: string[], input?: string | Uint8Array): string {
  return execFileSync("git", ["--git-dir", repo, ...args], { input, env: { ...process.env, GIT_CONFIG_NOSYSTEM: "1", HOME: repo } })
    .toString("utf8")
    .trim();
}

/** Writes a blob into the repository and returns git's id for it. */
function gitWriteBlob(content: string | Uint8Array): string {
  return git(["hash-object", "-w", "--stdin"], content);
}

describe("git ids", () => {
  it("blob ids are git hash-object's, for text, binary and empty content", () => {
    for (const content of ["", "hello\n", "ünïcode ✓\n", randomBytes(100_000)]) {
      assert.equal(gitBlobId(content), gitWriteBlob(content));
    }
  });

  it("an LFS pointer is the Hub's pointer text, and its blob id is git's", () => {
    const sha = "a".repeat(64);
    const pointer = lfsPointer(sha, 12_582_912);
    assert.equal(pointer, `version https://git-lfs.github.com/spec/v1\noid sha256:${sha}\nsize 12582912\n`);
    assert.equal(lfsPointerSize(sha, 12_582_912), Buffer.byteLength(pointer));
    assert.equal(gitBlobId(pointer), gitWriteBlob(pointer));
  });

  it("tree ids match git mktree, with git's order (a directory sorts as name/)", () => {
    const blob = gitWriteBlob("x\n");
    const empty = gitTreeId([]);
    assert.equal(empty, "4b825dc642cb6eb9a060e54bf8d69288fbee4904");
    const sub = git(["mktree"], `100644 blob ${blob}\tinner.txt\n`);
    const items: GitTreeItem[] = (
      [
        { type: "file", name: "a0", oid: blob },
        { type: "directory", name: "a", oid: sub },
        { type: "file", name: "a.txt", oid: blob },
        { type: "file", name: "B", oid: blob },
        { type: "file", name: "ü", oid: blob },
        { type: "file", name: "with space", oid: blob },
      ] as GitTreeItem[]
    ).sort(compareTreeItems);
    assert.deepEqual(
      items.map((i) => i.name),
      ["B", "a.txt", "a", "a0", "with space", "ü"],
    );
    assert.equal(gitTreeId([{ type: "file", name: "inner.txt", oid: blob }]), sub);
    const mktreeInput = items.map((i) => `${i.type === "directory" ? "040000 tree" : "100644 blob"} ${i.oid}\t${i.name}\n`).join("");
    assert.equal(gitTreeId(items), git(["mktree"], mktreeInput));
  });

  it("commit ids match git commit-tree, root and child commits", () => {
    const tree = git(["mktree"], "");
    const env = (seconds: number) => ({
      GIT_AUTHOR_NAME: "alice",
      GIT_AUTHOR_EMAIL: "alice@users.castor.invalid",
      GIT_AUTHOR_DATE: `${seconds} +0000`,
      GIT_COMMITTER_NAME: "alice",
      GIT_COMMITTER_EMAIL: "alice@users.castor.invalid",
      GIT_COMMITTER_DATE: `${seconds} +0000`,
    });
    const commitTree = (message: string, seconds: number, parents: string[]) =>
      execFileSync("git", ["--git-dir", repo, "commit-tree", tree, ...parents.flatMap((p) => ["-p", p]), "-F", "-"], {
        input: message,
        env: { ...process.env, ...env(seconds), HOME: repo },
      })
        .toString()
        .trim();

    const signature = userSignature("alice", 1_764_000_000);
    const rootMessage = commitMessage("initial commit", "");
    const root = gitCommitBody({ tree, parents: [], author: signature, committer: signature, message: rootMessage });
    const rootId = commitTree(rootMessage, 1_764_000_000, []);
    assert.equal(`${git(["cat-file", "commit", rootId])}\n`, root);
    assert.equal(gitObjectId("commit", root), rootId);

    const childMessage = commitMessage("Upload model.bin", "A longer description\nover two lines");
    assert.equal(childMessage, "Upload model.bin\n\nA longer description\nover two lines\n");
    const child = gitCommitBody({ tree, parents: [rootId], author: signature, committer: signature, message: childMessage });
    const childId = commitTree(childMessage, 1_764_000_000, [rootId]);
    assert.equal(`${git(["cat-file", "commit", childId])}\n`, child);
    assert.equal(gitObjectId("commit", child), childId);
  });
});
