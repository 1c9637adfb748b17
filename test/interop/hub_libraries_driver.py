"""Drives transformers and datasets against castor's hub for hub-libraries.test.ts.

    python hub_libraries_driver.py COMMAND ARG...

The hub comes from the environment the test sets (HF_ENDPOINT, HF_TOKEN, HF_HOME, ...). Each
command prints one JSON object on its last stdout line; anything else goes to stderr.

  push-model REPO_ID WORK_DIR   makes a tiny BERT (and a word-piece tokenizer) with transformers,
                                saves it to WORK_DIR/model, pushes it with push_to_hub, saves the
                                reference output of a forward pass to WORK_DIR/reference.pt
  load-model REPO_ID WORK_DIR   AutoTokenizer/AutoModel.from_pretrained(REPO_ID) through the hub,
                                compares the state dict and the forward pass with the reference
  push-revisions REPO_ID        pushes three tiny BERTs of different random weights: v1 to main
                                (then tags it `v1`), v2 to a new branch `dev`, v3 to main; prints
                                each one's commit id and a digest of its weights
  load-revisions REPO_ID WORK_DIR REVISION...
                                AutoModel.from_pretrained(REPO_ID, revision=REVISION) for each
                                REVISION (each in a cache of its own under WORK_DIR): the digest of
                                the weights it loaded and the commit folder the cache filed it under
  push-dataset REPO_ID          Dataset.from_dict(ROWS).push_to_hub(REPO_ID)
  load-dataset REPO_ID          load_dataset(REPO_ID, split="train")
  stream-dataset REPO_ID        load_dataset(REPO_ID, split="train", streaming=True)

The dataset commands print {"rows": [...]} so that the test compares what was pushed with what
each way of loading returns.
"""

import json
import os
import sys

SENTENCE = "hello castor world"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "castor", "world", "##s"] + [f"tok{i}" for i in range(90)]


def tiny_bert_config():
    from transformers import BertConfig

    return BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, vocab_size=len(VOCAB))


def forward(model, tokenizer):
    import torch

    model.eval()
    with torch.no_grad():
        inputs = tokenizer(SENTENCE, return_tensors="pt")
        return inputs["input_ids"], model(**inputs).last_hidden_state


def push_model(repo_id, work_dir):
    import torch
    from transformers import BertModel, BertTokenizerFast

    torch.manual_seed(11)
    model = BertModel(tiny_bert_config())
    vocab_file = os.path.join(work_dir, "vocab.txt")
    with open(vocab_file, "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=vocab_file)
    model_dir = os.path.join(work_dir, "model")
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    input_ids, output = forward(model, tokenizer)
    torch.save({"state_dict": model.state_dict(), "input_ids": input_ids, "output": output}, os.path.join(work_dir, "reference.pt"))
    model.push_to_hub(repo_id, commit_message="tiny BERT made by transformers")
    tokenizer.push_to_hub(repo_id, commit_message="its tokenizer")
    return {"files": sorted(os.listdir(model_dir)), "inputIds": input_ids.tolist()}


def load_model(repo_id, work_dir):
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    reference = torch.load(os.path.join(work_dir, "reference.pt"))
    config = AutoConfig.from_pretrained(repo_id)
    tokenizer = AutoTokenizer.from_pretrained(repo_id)
    model = AutoModel.from_pretrained(repo_id)
    input_ids, output = forward(model, tokenizer)
    state = model.state_dict()
    expected = reference["state_dict"]
    differing = sorted(name for name in expected if name not in state or not torch.equal(state[name], expected[name]))
    return {
        "modelClass": type(model).__name__,
        "hiddenSize": config.hidden_size,
        "inputIds": input_ids.tolist(),
        "sameInputIds": torch.equal(input_ids, reference["input_ids"]),
        "differingTensors": differing,
        "missingTensors": sorted(set(expected) - set(state)),
        "sameOutput": torch.equal(output, reference["output"]),
        "maxAbsDifference": float((output - reference["output"]).abs().max()) if output.shape == reference["output"].shape else None,
    }


def weights_digest(model):
    """SHA-256 over every tensor of the state dict, by name: equal digests, equal weights."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + b"\0" + tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def push_revisions(repo_id):
    import torch
    from huggingface_hub import HfApi
    from transformers import BertModel

    api = HfApi()
    commits, digests = {}, {}
    for version, seed, branch in (("v1", 1, None), ("v2", 2, "dev"), ("v3", 3, None)):
        torch.manual_seed(seed)
        model = BertModel(tiny_bert_config())
        # transformers creates the branch `dev` (from main) before committing to it.
        commit = model.push_to_hub(repo_id, revision=branch, commit_message=f"weights {version}")
        commits[version], digests[version] = commit.oid, weights_digest(model)
        if version == "v1":
            api.create_tag(repo_id, tag="v1", revision=commit.oid)
    return {"commits": commits, "digests": digests}


def load_revisions(repo_id, work_dir, *revisions):
    from transformers import AutoModel

    loaded = {}
    for index, revision in enumerate(revisions):
        cache_dir = os.path.join(work_dir, f"cache-{index}")
        model = AutoModel.from_pretrained(repo_id, revision=revision, cache_dir=cache_dir)
        snapshots = os.path.join(cache_dir, "models--" + repo_id.replace("/", "--"), "snapshots")
        loaded[revision] = {"digest": weights_digest(model), "commitFolders": sorted(os.listdir(snapshots))}
    return loaded


def dataset_rows():
    return {
        "id": list(range(200)),
        "text": [f"row {i}: " + "castor " * (i % 7) for i in range(200)],
        "score": [i / 8 for i in range(200)],
        "label": [["neg", "pos"][i % 2] for i in range(200)],
    }


def rows_of(records):
    return [{key: record[key] for key in ("id", "text", "score", "label")} for record in records]


def push_dataset(repo_id):
    from datasets import Dataset

    dataset = Dataset.from_dict(dataset_rows())
    dataset.push_to_hub(repo_id, commit_message="a small dataset pushed by datasets")
    return {"rows": rows_of(dataset)}


def load_dataset_rows(repo_id, streaming):
    from datasets import load_dataset

    dataset = load_dataset(repo_id, split="train", streaming=streaming)
    return {"rows": rows_of(dataset), "type": type(dataset).__name__}


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "push-model":
        result = push_model(*args)
    elif command == "load-model":
        result = load_model(*args)
    elif command == "push-revisions":
        result = push_revisions(*args)
    elif command == "load-revisions":
        result = load_revisions(*args)
    elif command == "push-dataset":
        result = push_dataset(*args)
    elif command == "load-dataset":
        result = load_dataset_rows(*args, streaming=False)
    elif command == "stream-dataset":
        result = load_dataset_rows(*args, streaming=True)
    else:
        raise SystemExit(f"unknown command {command!r}")
    sys.stdout.flush()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
