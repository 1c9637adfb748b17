/**
 * The libraries built on huggingface_hub, against a real `castor serve`: transformers 5.17.0
 * and datasets 5.0.1 over huggingface_hub 1.33.0 and hf_xet 1.6.0, with a CPU torch. The venv
 * (scripts/python-venv.mjs) is built once per version set (about 1.5 min here) and reused.
 *
 * transformers makes a tiny BERT and its tokenizer, pushes them with `push_to_hub`, and a
 * fresh machine loads them back with `AutoTokenizer`/`AutoModel.from_pretrained`: same tensors,
 * same forward pass. datasets pushes a small table with `push_to_hub`; `load_dataset` gives the
 * same rows, and so does `load_dataset(..., streaming=True)`, which reads the parquet file with
 * ranged GETs of `resolve` instead of Xet. The Python side is hub_libraries_driver.py.
 */
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { clientEnv, describeRequests, fetchExpecting, lastJson, pythonVenv, removeDir, runOk, startHub, tempDir, USER, type HubServer } from "./hub-clients.js";

const REQUIREMENTS = ["huggingface_hub==1.33.0", "hf_xet==1.6.0", "transformers==5.17.0", "torch==2.13.0+cpu", "safetensors", "datasets==5.0.1"];
const DRIVER = fileURLToPath(new URL("./hub_libraries_driver.py", import.meta.url));
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

describe("transformers and datasets (huggingface_hub 1.33.0) against castor's hub", () => {
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
  const driver = async <T>(command: string, args: string[]): Promise<T> => {
    const env = clientEnv(hub, join(workDir, "machines", String(machines++)), { TRANSFORMERS_VERBOSITY: "error", TOKENIZERS_PARALLELISM: "false" });
    return lastJson<T>(await runOk(hub, `hub_libraries_driver.py ${command}`, python, [DRIVER, command, ...args], { env, timeoutMs: PYTHON_TIMEOUT_MS }));
  };

  const tree = async (plural: string, repoId: string): Promise<TreeEntry[]> => {
    const response = await fetchExpecting(
      `${hub.endpoint}/api/${plural}/${repoId}/tree/main?recursive=true`,
      { headers: { authorization: `Bearer ${hub.token}` } },
      200,
    );
    return (await response.json()) as TreeEntry[];
  };

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
