/**
 * The hub features beyond upload and download with the real `hf` CLI and huggingface_hub 2.0.0
 * (hf_xet 1.6.0), against a real `castor serve`:
 *
 * - `create_commit` with `CommitOperationCopy`: of a Xet-stored file (sent as an `lfsFile`
 *   without size: no bytes move) and of an inline file (downloaded and re-uploaded by the
 *   client), from the head and from an older revision; the copies download byte-exact;
 * - `list_repo_tree(expand=True)` and `get_paths_info(expand=True)` give each path the commit
 *   that last changed it; `hf models ls REPO -R` (which lists with expand) works;
 * - `hf upload --revision dev` creates the missing branch, as on the Hub;
 * - `move_repo`: the old name raises RepositoryNotFoundError, the new one has the files;
 *   `list_models(author, search)` and `hf models ls --author` list it; `update_repo_settings`;
 * - pull requests (`create_pr=True`), discussions and gated settings raise the client's
 *   BadRequestError with castor's "not supported" message, not RepositoryNotFoundError;
 * - `delete_file` + `super_squash_history` release a file's content: `castor gc` then removes
 *   its xorbs, and the files left still download byte-exact.
 */
import assert from "node:assert/strict";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { GcReport } from "../../src/ops/gc.js";
import { runCastor } from "../helpers/cli.js";
import { pseudoRandomBytes } from "./harness.js";
import {
  clientEnv,
  lastJson,
  PYTHON_VENVS,
  pythonVenv,
  removeDir,
  runOk,
  sha256Hex,
  startHub,
  tempDir,
  USER,
  venvScript,
  type HubServer,
} from "./hub-clients.js";

const REQUIREMENTS = PYTHON_VENVS["hub-cli"];
const REPO = `${USER}/features`;
const MOVED = `${USER}/features-moved`;

/** Binary (NUL bytes), so the client uploads it through Xet although it is small. */
const WEIGHTS = Buffer.concat([Buffer.alloc(16), pseudoRandomBytes("hub-features: weights", 300_000)]);
const NOTES_V1 = Buffer.from("notes, first version\n");
const NOTES_V2 = Buffer.from("notes, second version\n");

const COPY_SCRIPT = `
import hashlib, json, sys
from huggingface_hub import HfApi, CommitOperationCopy, hf_hub_download
repo = sys.argv[1]
api = HfApi()
first = api.list_repo_commits(repo)[0].commit_id
api.upload_file(path_or_fileobj=sys.argv[2].encode(), path_in_repo="notes.txt", repo_id=repo, commit_message="notes v2")
info = api.create_commit(repo, operations=[
    CommitOperationCopy(src_path_in_repo="weights.bin", path_in_repo="copies/weights.bin"),
    CommitOperationCopy(src_path_in_repo="notes.txt", path_in_repo="copies/notes.txt"),
    CommitOperationCopy(src_path_in_repo="notes.txt", path_in_repo="copies/notes-v1.txt", src_revision=first),
], commit_message="copies")
digest = lambda path: hashlib.sha256(open(path, "rb").read()).hexdigest()
print(json.dumps({
    "first": first,
    "copyCommit": info.oid,
    "files": {name: digest(hf_hub_download(repo, name, revision=info.oid)) for name in
              ["weights.bin", "copies/weights.bin", "notes.txt", "copies/notes.txt", "copies/notes-v1.txt"]},
}))
`;

const EXPAND_SCRIPT = `
import json, sys
from huggingface_hub import HfApi
repo = sys.argv[1]
api = HfApi()
last = lambda item: item.last_commit.oid if item.last_commit else None
tree = {item.path: last(item) for item in api.list_repo_tree(repo, recursive=True, expand=True)}
plain = {item.path: last(item) for item in api.list_repo_tree(repo, recursive=True)}
paths = {item.path: last(item) for item in api.get_paths_info(repo, ["weights.bin", "copies", "copies/notes-v1.txt", "missing"], expand=True)}
titles = {item.path: item.last_commit.title for item in api.get_paths_info(repo, ["weights.bin"], expand=True)}
print(json.dumps({"tree": tree, "plain": plain, "paths": paths, "titles": titles}))
`;

const REFUSALS_SCRIPT = `
import json, sys
from huggingface_hub import HfApi, CommitOperationAdd
from huggingface_hub.errors import BadRequestError, RepositoryNotFoundError
repo = sys.argv[1]
api = HfApi()
out = {}
def attempt(name, call):
    try:
        call()
        out[name] = {"raised": None}
    except Exception as error:
        out[name] = {
            "raised": type(error).__name__,
            "badRequest": isinstance(error, BadRequestError),
            "repoNotFound": isinstance(error, RepositoryNotFoundError),
            "message": str(error),
        }
attempt("createPr", lambda: api.create_commit(repo, operations=[CommitOperationAdd("pr.txt", b"pr")], commit_message="pr", create_pr=True))
attempt("uploadPr", lambda: api.upload_file(path_or_fileobj=b"pr", path_in_repo="pr.txt", repo_id=repo, create_pr=True))
attempt("discussion", lambda: api.create_discussion(repo, title="hello"))
attempt("discussions", lambda: list(api.get_repo_discussions(repo)))
attempt("gated", lambda: api.update_repo_settings(repo, gated="manual"))
print(json.dumps(out))
`;

const MOVE_SCRIPT = `
import json, sys
from huggingface_hub import HfApi
from huggingface_hub.errors import RepositoryNotFoundError
source, target = sys.argv[1], sys.argv[2]
api = HfApi()
api.move_repo(source, target)
try:
    api.repo_info(source)
    old = "found"
except RepositoryNotFoundError:
    old = "RepositoryNotFoundError"
api.update_repo_settings(target, private=False)
info = api.model_info(target, files_metadata=True)
print(json.dumps({
    "old": old,
    "id": info.id,
    "private": info.private,
    "files": sorted(s.rfilename for s in info.siblings),
    "listed": [m.id for m in api.list_models(author="${USER}", search="features")],
    "refs": sorted(b.name for b in api.list_repo_refs(target).branches),
}))
`;

const SQUASH_SCRIPT = `
import json, sys
from huggingface_hub import HfApi
repo, content = sys.argv[1], sys.argv[2]
api = HfApi()
api.upload_file(path_or_fileobj=bytes(16) + content.encode() * 20000, path_in_repo="old.bin", repo_id=repo, commit_message="an old version")
api.delete_file("old.bin", repo_id=repo)
api.super_squash_history(repo_id=repo, commit_message="one commit")
commits = api.list_repo_commits(repo)
print(json.dumps({"commits": [c.title for c in commits], "files": sorted(api.list_repo_files(repo))}))
`;

describe("hub features with huggingface_hub 2.0.0 and the hf CLI", () => {
  let hub: HubServer;
  let python: string;
  let hf: string;
  let work: string;
  let machines = 0;
  const machine = () => clientEnv(hub, join(work, "machines", String(machines++)));
  let copies: { first: string; copyCommit: string; files: Record<string, string> };

  before(async () => {
    [python, hub, work] = await Promise.all([pythonVenv("hub-cli", REQUIREMENTS), startHub(), tempDir("castor-hub-features-")]);
    hf = venvScript(python, "hf");
    await writeFile(join(work, "weights.bin"), WEIGHTS);
    await writeFile(join(work, "notes.txt"), NOTES_V1);
    await writeFile(join(work, "dev.txt"), "on the dev branch\n");
  });

  after(async () => {
    await hub?.stop();
    await removeDir(work);
  });

  it("CommitOperationCopy: a Xet-stored file server-side, inline files re-uploaded, from the head and an older revision", async () => {
    const env = machine();
    await runOk(hub, "hf repos create", hf, ["repos", "create", REPO, "--private"], { env });
    await runOk(hub, "hf upload weights.bin + notes.txt", hf, ["upload", REPO, work, ".", "--include", "weights.bin", "--include", "notes.txt"], { env });
    const from = hub.server.logLines().length;
    copies = lastJson(await runOk(hub, "create_commit with copies", python, ["-c", COPY_SCRIPT, REPO, NOTES_V2.toString()], { env }));
    assert.deepEqual(copies.files, {
      "weights.bin": sha256Hex(WEIGHTS),
      "copies/weights.bin": sha256Hex(WEIGHTS),
      "notes.txt": sha256Hex(NOTES_V2),
      "copies/notes.txt": sha256Hex(NOTES_V2),
      "copies/notes-v1.txt": sha256Hex(NOTES_V1),
    });
    // The Xet-stored copy moved no bytes: no xorb and no shard between the notes upload and the copy commit.
    const requests = hub.server.requestLog(from);
    const commits = requests.flatMap((line, index) => (line.method === "POST" && line.path.endsWith("/commit/main") ? [index] : []));
    const [notesCommit, copyCommit] = commits;
    assert.equal(commits.length, 2, "the notes upload and the copy made one commit each");
    assert.ok(
      !requests.slice(notesCommit + 1, copyCommit).some((line) => /^\/v[12]\/(xorbs|shards)/.test(line.path)),
      "copying the Xet-stored file sent no xorb or shard",
    );
  });

  it("list_repo_tree(expand=True) and get_paths_info(expand=True) name the commit that last changed each path; hf models ls -R lists them", async () => {
    const env = machine();
    const result = lastJson<{
      tree: Record<string, string | null>;
      plain: Record<string, string | null>;
      paths: Record<string, string | null>;
      titles: Record<string, string>;
    }>(await runOk(hub, "expand listings", python, ["-c", EXPAND_SCRIPT, REPO], { env }));
    const { first, copyCommit } = copies;
    // "first" is the commit of the folder upload (weights.bin, notes.txt); notes.txt changed once more.
    assert.equal(result.tree["weights.bin"], first);
    assert.notEqual(result.tree["notes.txt"], first);
    for (const path of ["copies", "copies/weights.bin", "copies/notes.txt", "copies/notes-v1.txt"]) assert.equal(result.tree[path], copyCommit, path);
    assert.ok(
      Object.values(result.plain).every((value) => value === null),
      "no last commits without expand",
    );
    assert.deepEqual(result.paths, { "weights.bin": first, copies: copyCommit, "copies/notes-v1.txt": copyCommit });
    assert.equal(typeof result.titles["weights.bin"], "string");

    // The CLI pretty-prints its JSON over several lines.
    const listed = JSON.parse((await runOk(hub, "hf models ls REPO -R", hf, ["models", "ls", REPO, "-R", "--format", "json"], { env })).stdout) as {
      path: string;
      last_commit?: { oid: string };
    }[];
    assert.deepEqual(
      Object.fromEntries(listed.map((item) => [item.path, item.last_commit?.oid ?? null])),
      result.tree,
      `hf models ls -R printed ${JSON.stringify(listed)}`,
    );
  });

  it("hf upload --revision dev creates the missing branch from main and commits there", async () => {
    const env = machine();
    await runOk(hub, "hf upload --revision dev", hf, ["upload", REPO, join(work, "dev.txt"), "dev.txt", "--revision", "dev"], { env });
    const headers = { authorization: `Bearer ${hub.token}` };
    const refs = (await (await fetch(`${hub.endpoint}/api/models/${REPO}/refs`, { headers })).json()) as { branches: { name: string; targetCommit: string }[] };
    assert.deepEqual(
      refs.branches.map((b) => b.name),
      ["main", "dev"],
    );
    const history = (await (await fetch(`${hub.endpoint}/api/models/${REPO}/commits/dev`, { headers })).json()) as { id: string }[];
    assert.equal(history[1].id, copies.copyCommit, "dev started at main's head");
    assert.equal((await fetch(`${hub.endpoint}/${REPO}/resolve/dev/dev.txt`, { headers, method: "HEAD" })).status, 200);
    assert.equal((await fetch(`${hub.endpoint}/${REPO}/resolve/main/dev.txt`, { headers, method: "HEAD" })).status, 404, "main is untouched");
  });

  it("pull requests, discussions and gated settings raise BadRequestError saying castor does not support them", async () => {
    const result = lastJson<Record<string, { raised: string | null; badRequest: boolean; repoNotFound: boolean; message: string }>>(
      await runOk(hub, "refused features", python, ["-c", REFUSALS_SCRIPT, REPO], { env: machine() }),
    );
    for (const [name, feature] of [
      ["createPr", /pull requests are not supported by castor/],
      ["uploadPr", /pull requests are not supported by castor/],
      ["discussion", /discussions and pull requests are not supported by castor/],
      ["discussions", /discussions and pull requests are not supported by castor/],
      ["gated", /gated repositories are not supported by castor/],
    ] as const) {
      const outcome = result[name];
      assert.equal(outcome.badRequest, true, `${name}: ${JSON.stringify(outcome)}`);
      assert.equal(outcome.repoNotFound, false, `${name} does not look like a missing repository`);
      assert.match(outcome.message, feature, name);
    }
  });

  it("move_repo: the old name is gone, the new one has the files and branches; listings and settings follow", async () => {
    const env = machine();
    const result = lastJson<{ old: string; id: string; private: boolean; files: string[]; listed: string[]; refs: string[] }>(
      await runOk(hub, "move_repo", python, ["-c", MOVE_SCRIPT, REPO, MOVED], { env }),
    );
    assert.equal(result.old, "RepositoryNotFoundError");
    assert.equal(result.id, MOVED);
    assert.equal(result.private, false, "update_repo_settings(private=False)");
    assert.deepEqual(result.files, [".gitattributes", "copies/notes-v1.txt", "copies/notes.txt", "copies/weights.bin", "notes.txt", "weights.bin"]);
    assert.deepEqual(result.listed, [MOVED]);
    assert.deepEqual(result.refs, ["dev", "main"]);
    const listed = JSON.parse((await runOk(hub, "hf models ls --author", hf, ["models", "ls", "--author", USER, "--format", "json"], { env })).stdout) as {
      id: string;
    }[];
    assert.deepEqual(
      listed.map((model) => model.id),
      [MOVED],
    );
  });

  it("delete_file and super_squash_history release a file: castor gc removes its xorbs, the rest still downloads", async () => {
    const env = machine();
    const result = lastJson<{ commits: string[]; files: string[] }>(
      await runOk(hub, "super_squash_history", python, ["-c", SQUASH_SCRIPT, MOVED, "released "], { env }),
    );
    assert.deepEqual(result.commits, ["one commit"]);
    assert.deepEqual(result.files, [".gitattributes", "copies/notes-v1.txt", "copies/notes.txt", "copies/weights.bin", "notes.txt", "weights.bin"]);

    const before = await hub.countStoredXorbs();
    const gc = await runCastor(["gc", "--grace", "0", "--json"], { env: hub.server.settings, timeoutMs: 120_000 });
    assert.equal(gc.code, 0, gc.stderr);
    const report = JSON.parse(gc.stdout) as GcReport;
    assert.ok(report.removed.files.objects >= 1, JSON.stringify(report.removed));
    assert.ok(report.removed.xorbs.objects >= 1);
    assert.equal(await hub.countStoredXorbs(), before - report.removed.xorbs.objects);

    const out = join(work, "after-gc");
    await runOk(hub, "hf download after gc", hf, ["download", MOVED, "weights.bin", "copies/notes-v1.txt", "--local-dir", out], { env });
    assert.equal(sha256Hex(await readFile(join(out, "weights.bin"))), sha256Hex(WEIGHTS));
    assert.equal(sha256Hex(await readFile(join(out, "copies/notes-v1.txt"))), sha256Hex(NOTES_V1));
    const fsck = await runCastor(["fsck"], { env: hub.server.settings, timeoutMs: 120_000 });
    assert.equal(fsck.code, 0, fsck.stdout);
  });
});
