/**
 * The Python libraries people point at a hub, against a real `castor serve`: huggingface_hub
 * 1.33.0 (an older client still widely installed) on its own and through HfFileSystem, and
 * transformers 5.17.0 and datasets 5.0.1 over it, with hf_xet 1.6.0 and a CPU torch. The venv
 * (scripts/python-venv.mjs) is built once per version set (about 1.5 min here) and reused.
 * It is one of the heavy files that CASTOR_SKIP_HEAVY=1 leaves out (scripts/run-tests.mjs); CI always runs it.
 *
 * huggingface_hub uploads a small text file (inline), a 12 MiB random file (Xet) and a nested
 * folder, then a fresh machine downloads them with hf_hub_download and snapshot_download:
 * byte-exact. HfFileSystem lists, globs and describes the same repository, reads slices of the
 * Xet-stored and the inline file with seek + read (ranged GETs of `resolve`), and copies a file
 * and a folder with `get`.
 *
 * transformers makes a tiny BERT and its tokenizer, pushes them with `push_to_hub`, and a
 * fresh machine loads them back with `AutoTokenizer`/`AutoModel.from_pretrained`: same tensors,
 * same forward pass. Three versions of a model on main, a tag and a branch load back as the
 * version each revision names. datasets pushes a small table with `push_to_hub`; `load_dataset`
 * gives the same rows, and so does `load_dataset(..., streaming=True)`, which reads the parquet
 * file with ranged GETs of `resolve` instead of Xet. The Python side is hub_hfapi_driver.py
 * (huggingface_hub) and hub_libraries_driver.py (transformers, datasets).
 */
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import {
  clientEnv,
  describeRequests,
  fetchExpecting,
  filesBelow,
  lastJson,
  PYTHON_VENVS,
  pythonVenv,
  removeDir,
  runOk,
  sha256Hex,
  startHub,
  tempDir,
  USER,
  type HubServer,
} from "./hub-clients.js";

const REQUIREMENTS = PYTHON_VENVS["hub-libraries"];
const DRIVER = fileURLToPath(new URL("./hub_libraries_driver.py", import.meta.url));
const HFAPI_DRIVER = fileURLToPath(new URL("./hub_hfapi_driver.py", import.meta.url));
/** Importing torch and transformers takes a while on two busy cores. */
const PYTHON_TIMEOUT_MS = 300_000;

interface TreeEntry {
  type: "file" | "directory";
  path: string;
  size: number;
  xetHash?: string;
  lfs?: { oid: string; size: number };
}

interface Rows {
  rows: { id: number; text: string; score: number; label: string }[];
  type: string;
}

describe("huggingface_hub 1.33.0, transformers and datasets against castor's hub", () => {
  let hub: HubServer;
  let python: string;
  let workDir: string;
  let machines = 0;

  before(async () => {
    [python, hub, workDir] = await Promise.all([pythonVenv("hub-libraries", REQUIREMENTS), startHub(), tempDir("castor-hub-libraries-")]);
  });

  after(async () => {
    await hub?.stop();
    await removeDir(workDir);
  });

  /** Runs a driver command on a client machine of its own (fresh HF_HOME, HF_XET_CACHE, datasets cache). */
  const runDriver = async <T>(script: string, command: string, args: string[]): Promise<T> => {
    const env = clientEnv(hub, join(workDir, "machines", String(machines++)), { TRANSFORMERS_VERBOSITY: "error", TOKENIZERS_PARALLELISM: "false" });
    return lastJson<T>(await runOk(hub, `${script} ${command}`, python, [script, command, ...args], { env, timeoutMs: PYTHON_TIMEOUT_MS }));
  };
  const driver = <T>(command: string, args: string[]): Promise<T> => runDriver<T>(DRIVER, command, args);
  const hfapiDriver = <T>(command: string, args: string[]): Promise<T> => runDriver<T>(HFAPI_DRIVER, command, args);

  const tree = async (plural: string, repoId: string, revision = "main"): Promise<TreeEntry[]> => {
    const response = await fetchExpecting(
      `${hub.endpoint}/api/${plural}/${repoId}/tree/${encodeURIComponent(revision)}?recursive=true`,
      { headers: { authorization: `Bearer ${hub.token}` } },
      200,
    );
    return (await response.json()) as TreeEntry[];
  };

  describe("huggingface_hub on its own", () => {
    const repoId = `${USER}/hfapi-files`;
    let filesDir: string;
    /** The uploaded files by repository path, as the driver wrote them before uploading. */
    let originals: Map<string, Buffer>;
    let mainCommit: string;
    let firstCommit: string;
    /** The .gitattributes the hub wrote, covering the Xet-stored files. */
    let attributes: Buffer;

    const digestsOf = (files: Map<string, Buffer>): Record<string, string> =>
      Object.fromEntries([...files].map(([path, bytes]) => [path, sha256Hex(bytes)]).sort(([a], [b]) => (a < b ? -1 : 1)));

    it("upload_file (inline and through Xet) and upload_folder", async () => {
      filesDir = join(workDir, "hfapi-files");
      await mkdir(filesDir, { recursive: true });
      const from = hub.server.logLines().length;
      const uploaded = await hfapiDriver<{ commits: string[]; files: string[] }>("upload", [repoId, filesDir]);
      originals = await filesBelow(join(filesDir, "originals"));
      assert.deepEqual([...originals.keys()].sort(), uploaded.files);
      assert.equal(new Set(uploaded.commits).size, 3, "upload_file, upload_file and upload_folder made a commit each");
      [firstCommit, , mainCommit] = uploaded.commits;

      const listed = (await tree("models", repoId)).filter((entry) => entry.type === "file");
      assert.deepEqual(
        listed.map((entry) => entry.path).sort(),
        [".gitattributes", ...uploaded.files].sort(),
        "the repository holds exactly the uploaded files, and .gitattributes",
      );
      // The hub's .gitattributes: a line for each file stored through Xet, as the Hub writes for API uploads.
      attributes = Buffer.from(
        await (
          await fetchExpecting(`${hub.endpoint}/${repoId}/resolve/main/.gitattributes`, { headers: { authorization: `Bearer ${hub.token}` } }, 200)
        ).arrayBuffer(),
      );
      assert.deepEqual(
        attributes.toString().trimEnd().split("\n").sort(),
        uploaded.files.filter((path) => path.endsWith(".bin")).map((path) => `${path} filter=lfs diff=lfs merge=lfs -text`),
      );
      const files = listed.filter((entry) => entry.path !== ".gitattributes");
      for (const entry of files) {
        const original = originals.get(entry.path)!;
        assert.equal(entry.size, original.length, `${entry.path}: size`);
        if (entry.path.endsWith(".bin")) {
          assert.match(entry.xetHash ?? "", /^[0-9a-f]{64}$/, `${entry.path} (binary) is stored through Xet`);
          assert.equal(entry.lfs?.oid, sha256Hex(original), `${entry.path}: the lfs oid is the SHA-256 of what was uploaded`);
        } else {
          assert.equal(entry.xetHash, undefined, `${entry.path} (small text) is stored inline`);
        }
      }
      assert.ok(originals.get("big.bin")!.length >= 12 * 1024 * 1024, "the Xet file is at least 12 MiB");
      const requests = hub.server.requestLog(from);
      assert.ok(
        requests.some((line) => line.method === "POST" && line.path.startsWith("/v1/xorbs/") && line.statusCode === 200),
        `the binary files travelled as xorbs:\n${describeRequests(requests)}`,
      );
      const refs = (await (
        await fetchExpecting(`${hub.endpoint}/api/models/${repoId}/refs`, { headers: { authorization: `Bearer ${hub.token}` } }, 200)
      ).json()) as {
        branches: { name: string; targetCommit: string }[];
      };
      assert.equal(refs.branches.find((branch) => branch.name === "main")?.targetCommit, mainCommit, "main is upload_folder's commit");
    });

    it("hf_hub_download and snapshot_download on a fresh machine give the uploaded bytes", async () => {
      assert.ok(originals, "the upload test ran first");
      const from = hub.server.logLines().length;
      const downloaded = await hfapiDriver<{
        hfHubDownload: Record<string, string>;
        snapshot: Record<string, string>;
        snapshotCommit: string;
        localDir: Record<string, string>;
      }>("download", [repoId, filesDir]);
      const expected = digestsOf(new Map([...originals, [".gitattributes", attributes]]));
      assert.deepEqual(downloaded.hfHubDownload, digestsOf(originals), "hf_hub_download: every file byte-exact");
      assert.deepEqual(downloaded.snapshot, expected, "snapshot_download (cache): exactly the repository's files, byte-exact");
      assert.equal(downloaded.snapshotCommit, mainCommit, "the cache files the snapshot under main's commit");
      assert.deepEqual(downloaded.localDir, expected, "snapshot_download(local_dir=…): exactly the repository's files, byte-exact");
      const requests = hub.server.requestLog(from);
      assert.ok(
        requests.some((line) => line.method === "GET" && /^\/v[12]\/reconstructions\//.test(line.path) && line.statusCode === 200),
        `the Xet files came through Xet:\n${describeRequests(requests)}`,
      );
    });

    interface FsEntry {
      name: string;
      type: "file" | "directory";
      size: number;
      xetHash: string | null;
      lfsSha256: string | null;
    }
    interface FsRead {
      start: number;
      length: number;
      sha256: string;
      position?: number;
    }
    let fs: {
      lsNames: string[];
      lsDetail: FsEntry[];
      lsSubfolder: string[];
      lsAtCommit: string[];
      glob: string[];
      infoFile: FsEntry;
      infoInlineFile: FsEntry;
      infoFolder: FsEntry;
      exists: Record<string, boolean>;
      reads: Record<string, FsRead>;
      catFile: FsRead;
      readWhole: string;
      getFile: string;
      getFolder: Record<string, string>;
    };
    let fsRequestsFrom: number;

    it("HfFileSystem: ls (detail False and True), glob, info of a file and a folder", async () => {
      assert.ok(originals, "the upload test ran first");
      fsRequestsFrom = hub.server.logLines().length;
      fs = await hfapiDriver<typeof fs>("fs", [repoId, filesDir, firstCommit]);
      const at = (path: string): string => `${repoId}/${path}`;
      const big = originals.get("big.bin")!;
      const config = originals.get("folder/config.json")!;
      assert.deepEqual(fs.lsNames, [at(".gitattributes"), at("big.bin"), at("folder"), at("small.txt")]);
      assert.deepEqual(fs.lsDetail, [
        { name: at(".gitattributes"), type: "file", size: attributes.length, xetHash: null, lfsSha256: null },
        { name: at("big.bin"), type: "file", size: big.length, xetHash: fs.lsDetail[1]?.xetHash, lfsSha256: sha256Hex(big) },
        { name: at("folder"), type: "directory", size: 0, xetHash: null, lfsSha256: null },
        { name: at("small.txt"), type: "file", size: originals.get("small.txt")!.length, xetHash: null, lfsSha256: null },
      ]);
      assert.match(fs.lsDetail[1].xetHash ?? "", /^[0-9a-f]{64}$/, "ls(detail=True) gives the Xet hash of the Xet-stored file");
      assert.deepEqual(fs.lsSubfolder, [at("folder/data/nested"), at("folder/data/part-0.bin")]);
      assert.deepEqual(fs.lsAtCommit, [`${repoId}@${firstCommit}/small.txt`], "ls of REPO@COMMIT lists that commit's tree (small.txt only)");
      assert.deepEqual(fs.glob, [at("big.bin"), at("folder/data/nested/part-1.bin"), at("folder/data/part-0.bin")]);
      assert.deepEqual({ name: fs.infoFile.name, type: fs.infoFile.type, size: fs.infoFile.size }, { name: at("big.bin"), type: "file", size: big.length });
      assert.deepEqual(
        { name: fs.infoInlineFile.name, type: fs.infoInlineFile.type, size: fs.infoInlineFile.size },
        { name: at("folder/config.json"), type: "file", size: config.length },
      );
      assert.deepEqual({ name: fs.infoFolder.name, type: fs.infoFolder.type }, { name: at("folder/data"), type: "directory" });
      assert.deepEqual(fs.exists, { "big.bin": true, "missing.bin": false });
      const requests = hub.server.requestLog(fsRequestsFrom);
      assert.ok(
        requests.some((line) => line.method === "POST" && line.path.startsWith(`/api/models/${repoId}/paths-info/`) && line.statusCode === 200),
        `info(refresh=True) asked paths-info:\n${describeRequests(requests)}`,
      );
    });

    it("HfFileSystem: open + seek + read of slices (ranged GETs of resolve), cat_file, get of a file and of a folder", async () => {
      assert.ok(fs, "the HfFileSystem listing test ran first");
      const big = originals.get("big.bin")!;
      const small = originals.get("small.txt")!;
      const slice = (bytes: Buffer, start: number, length: number): FsRead => {
        const part = bytes.subarray(start, start + length);
        return { start, length: part.length, sha256: sha256Hex(part), position: start + part.length };
      };
      const { reads } = fs;
      const middle = reads["big.bin middle"];
      assert.ok(middle.start > 4 * 1024 * 1024 && middle.start + middle.length < big.length - 4 * 1024 * 1024, "the slice is well inside the Xet file");
      assert.deepEqual(middle, slice(big, middle.start, 1024 * 1024 + 777), "a slice in the middle of the Xet-stored file, byte-exact");
      assert.deepEqual(reads["big.bin past the end"], slice(big, big.length - 1000, 5000), "a read past the end gives the last bytes only");
      assert.deepEqual(reads["small.txt middle"], slice(small, 100, 333), "a slice of the inline file, byte-exact");
      const { position: _, ...catExpected } = slice(big, fs.catFile.start, fs.catFile.length);
      assert.deepEqual(fs.catFile, catExpected, "cat_file(start, end) of the Xet-stored file");
      assert.equal(fs.catFile.length, middle.length);
      assert.equal(fs.readWhole, sha256Hex(big), "read() of the whole file");
      assert.equal(fs.getFile, sha256Hex(big), "get of the Xet-stored file");
      assert.deepEqual(
        fs.getFolder,
        digestsOf(new Map([...originals].filter(([path]) => path.startsWith("folder/")).map(([path, bytes]) => [path.slice("folder/".length), bytes]))),
        "get(recursive=True) of the folder: its files, byte-exact",
      );
      const requests = hub.server.requestLog(fsRequestsFrom);
      for (const path of ["big.bin", "small.txt"]) {
        assert.ok(
          requests.some(
            (line) => line.method === "GET" && line.path.startsWith(`/${repoId}/resolve/`) && line.path.endsWith(`/${path}`) && line.statusCode === 206,
          ),
          `${path} was read with ranged GETs of resolve:\n${describeRequests(requests)}`,
        );
      }
    });
  });

  describe("transformers", () => {
    const repoId = `${USER}/tiny-bert`;
    let modelDir: string;

    it("push_to_hub of a tiny BERT and its tokenizer made by transformers", async () => {
      modelDir = join(workDir, "bert");
      await mkdir(modelDir, { recursive: true });
      const from = hub.server.logLines().length;
      const pushed = await driver<{ files: string[] }>("push-model", [repoId, modelDir]);
      assert.ok(pushed.files.includes("model.safetensors") && pushed.files.includes("config.json"), `save_pretrained wrote ${pushed.files.join(", ")}`);

      const files = (await tree("models", repoId)).filter((entry) => entry.type === "file");
      const paths = files.map((entry) => entry.path);
      assert.deepEqual(
        pushed.files.filter((name) => !paths.includes(name)),
        [],
        `the repository holds what save_pretrained wrote; it has ${paths.join(", ")}`,
      );
      const weights = files.find((entry) => entry.path === "model.safetensors")!;
      assert.match(weights.xetHash ?? "", /^[0-9a-f]{64}$/, "the weights (binary) are stored through Xet");
      const requests = hub.server.requestLog(from);
      assert.ok(
        requests.some((line) => line.method === "POST" && line.path.startsWith("/v1/xorbs/")),
        `the weights travelled as xorbs:\n${describeRequests(requests)}`,
      );
    });

    it("AutoTokenizer/AutoModel.from_pretrained on a fresh machine: same tensors, same forward pass", async () => {
      assert.ok(modelDir, "the push test ran first");
      const from = hub.server.logLines().length;
      const loaded = await driver<{
        modelClass: string;
        hiddenSize: number;
        sameInputIds: boolean;
        differingTensors: string[];
        missingTensors: string[];
        sameOutput: boolean;
        maxAbsDifference: number | null;
      }>("load-model", [repoId, modelDir]);
      assert.equal(loaded.modelClass, "BertModel");
      assert.equal(loaded.hiddenSize, 32);
      assert.equal(loaded.sameInputIds, true, "the tokenizer loaded from castor tokenizes like the original");
      assert.deepEqual(loaded.missingTensors, [], "no tensor is missing");
      assert.deepEqual(loaded.differingTensors, [], "every tensor equals the original");
      assert.equal(loaded.sameOutput, true, `the forward pass equals the original (max |difference| ${loaded.maxAbsDifference})`);
      const requests = hub.server.requestLog(from);
      assert.ok(
        requests.some((line) => line.method === "GET" && /^\/v[12]\/reconstructions\//.test(line.path) && line.statusCode === 200),
        `the weights came through Xet:\n${describeRequests(requests)}`,
      );
    });

    it("from_pretrained at a branch, a tag and a commit id (full and short) loads that revision's weights", async () => {
      const revisionsRepo = `${USER}/tiny-bert-revisions`;
      const pushed = await driver<{ commits: Record<"v1" | "v2" | "v3", string>; digests: Record<"v1" | "v2" | "v3", string> }>("push-revisions", [
        revisionsRepo,
      ]);
      assert.equal(new Set(Object.values(pushed.digests)).size, 3, "the three versions have different weights");
      const refs = (await (
        await fetchExpecting(`${hub.endpoint}/api/models/${revisionsRepo}/refs`, { headers: { authorization: `Bearer ${hub.token}` } }, 200)
      ).json()) as { branches: { name: string; targetCommit: string }[]; tags: { name: string; targetCommit: string }[] };
      const target = (refs: { name: string; targetCommit: string }[], name: string) => refs.find((ref) => ref.name === name)?.targetCommit;
      assert.equal(target(refs.branches, "main"), pushed.commits.v3, "main is v3");
      assert.equal(target(refs.branches, "dev"), pushed.commits.v2, "push_to_hub(revision='dev') made the branch dev, at v2");
      assert.equal(target(refs.tags, "v1"), pushed.commits.v1, "the tag v1 names v1's commit");

      const cases: [revision: string, version: "v1" | "v2" | "v3"][] = [
        ["main", "v3"],
        ["dev", "v2"],
        ["v1", "v1"],
        [pushed.commits.v1, "v1"],
        [pushed.commits.v2, "v2"],
        // A short id, as `git log --oneline` prints it: castor answers with the full id, which
        // the cache files the snapshot under.
        [pushed.commits.v1.slice(0, 12), "v1"],
      ];
      const revisionsDir = join(workDir, "revisions");
      await mkdir(revisionsDir, { recursive: true });
      const loaded = await driver<Record<string, { digest: string; commitFolders: string[] }>>("load-revisions", [
        revisionsRepo,
        revisionsDir,
        ...cases.map(([revision]) => revision),
      ]);
      for (const [revision, version] of cases) {
        assert.deepEqual(
          loaded[revision],
          { digest: pushed.digests[version], commitFolders: [pushed.commits[version]] },
          `from_pretrained(revision=${JSON.stringify(revision)}) loads ${version}, filed under its commit`,
        );
      }
    });
  });

  describe("datasets", () => {
    const repoId = `${USER}/ds`;
    let pushed: Rows;

    it("Dataset.push_to_hub, then load_dataset gives the same rows", async () => {
      pushed = await driver<Rows>("push-dataset", [repoId]);
      assert.equal(pushed.rows.length, 200);
      const files = (await tree("datasets", repoId)).filter((entry) => entry.type === "file");
      const parquet = files.filter((entry) => entry.path.endsWith(".parquet"));
      assert.equal(parquet.length, 1, `push_to_hub wrote one parquet file: ${files.map((entry) => entry.path).join(", ")}`);
      // Binary, so stored through Xet: streaming it below needs castor to rebuild byte ranges.
      assert.match(parquet[0].xetHash ?? "", /^[0-9a-f]{64}$/, "the parquet file is stored through Xet");
      assert.ok(
        files.some((entry) => entry.path === "README.md"),
        "push_to_hub wrote the dataset card",
      );

      const loaded = await driver<Rows>("load-dataset", [repoId]);
      assert.equal(loaded.type, "Dataset");
      assert.deepEqual(loaded.rows, pushed.rows);
    });

    it("load_dataset(streaming=True) reads the same rows with ranged GETs of resolve", async () => {
      assert.ok(pushed, "the push test ran first");
      const from = hub.server.logLines().length;
      const streamed = await driver<Rows>("stream-dataset", [repoId]);
      assert.equal(streamed.type, "IterableDataset");
      assert.deepEqual(streamed.rows, pushed.rows);
      const requests = hub.server.requestLog(from);
      assert.ok(
        requests.some(
          (line) => line.method === "GET" && line.path.startsWith(`/datasets/${repoId}/resolve/`) && line.path.endsWith(".parquet") && line.statusCode === 206,
        ),
        `streaming read the parquet file with ranged GETs:\n${describeRequests(requests)}`,
      );
    });
  });
});
