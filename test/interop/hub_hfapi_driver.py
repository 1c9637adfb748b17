"""Drives huggingface_hub's HfApi and HfFileSystem against castor's hub for hub-libraries.test.ts.

    python hub_hfapi_driver.py COMMAND REPO_ID WORK_DIR [ARG]

The hub comes from the environment the test sets (HF_ENDPOINT, HF_TOKEN, HF_HOME, ...). Each
command prints one JSON object on its last stdout line; anything else goes to stderr. The test
compares what the commands report with the original files, which `upload` writes under
WORK_DIR/originals (same relative paths as in the repository).

  upload     writes the original files, then create_repo, upload_file (a small text file, inline;
             a 12 MiB random one, through Xet) and upload_folder (a folder of text and binary
             files, nested); prints the commit ids
  download   hf_hub_download of every file, then snapshot_download: the SHA-256 of each file
             the client wrote, and the commit folder the cache filed them under
  fs COMMIT  HfFileSystem: ls (detail False and True; also of REPO_ID@COMMIT, an earlier
             commit), glob, info (file and folder), open with
             seek + read (middle slices, a read past the end, cat_file with start/end), get of
             a file and of a folder (recursive); prints what each call returned, with the
             SHA-256 of bytes instead of the bytes
"""

import hashlib
import json
import os
import random
import sys

# 12 MiB and a bit: well above castor's inline limit, so huggingface_hub uploads it through Xet.
BIG_SIZE = 12 * 1024 * 1024 + 12_345
# Text, small: travels inline in the commit.
SMALL_TEXT = "".join(f"line {i}: castor keeps this file inline\n" for i in range(40))
# A slice of the big file well inside it, spanning many chunks and not aligned to anything.
BIG_SLICE = (5 * 1024 * 1024 + 4_321, 1024 * 1024 + 777)
SMALL_SLICE = (100, 333)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def original_files():
    """Relative path -> bytes. Binary files start with a NUL so castor stores them through Xet."""
    rng = random.Random(1233)
    return {
        "small.txt": SMALL_TEXT.encode(),
        "big.bin": rng.randbytes(BIG_SIZE),
        "folder/README.md": b"# a folder\n\nuploaded with upload_folder\n",
        "folder/config.json": json.dumps({"layers": 2, "name": "castor"}, indent=2).encode(),
        "folder/data/part-0.bin": b"\0" + rng.randbytes(300_000),
        "folder/data/nested/part-1.bin": b"\0" + rng.randbytes(3_000),
    }


def write_originals(work_dir):
    root = os.path.join(work_dir, "originals")
    for path, data in original_files().items():
        target = os.path.join(root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
    return root


def digests_below(root):
    """Relative path -> SHA-256 of every file below root (following the cache's symlinks), skipping .cache/."""
    out = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d != ".cache"]
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root).replace(os.sep, "/")] = sha256(f.read())
    return out


def upload(repo_id, work_dir):
    from huggingface_hub import HfApi

    api = HfApi()
    root = write_originals(work_dir)
    api.create_repo(repo_id, exist_ok=False)
    small = api.upload_file(path_or_fileobj=os.path.join(root, "small.txt"), path_in_repo="small.txt", repo_id=repo_id, commit_message="a small text file")
    big = api.upload_file(path_or_fileobj=os.path.join(root, "big.bin"), path_in_repo="big.bin", repo_id=repo_id, commit_message="a 12 MiB random file")
    folder = api.upload_folder(folder_path=os.path.join(root, "folder"), path_in_repo="folder", repo_id=repo_id, commit_message="a folder")
    return {"commits": [small.oid, big.oid, folder.oid], "files": sorted(original_files())}


def download(repo_id, work_dir):
    from huggingface_hub import hf_hub_download, snapshot_download

    files = {}
    for path in sorted(original_files()):
        with open(hf_hub_download(repo_id, path), "rb") as f:
            files[path] = sha256(f.read())
    snapshot = snapshot_download(repo_id)
    local_dir = os.path.join(work_dir, "snapshot-local-dir")
    snapshot_download(repo_id, local_dir=local_dir)
    return {
        "hfHubDownload": files,
        "snapshot": digests_below(snapshot),
        "snapshotCommit": os.path.basename(snapshot),
        "localDir": digests_below(local_dir),
    }


def entry_json(entry):
    """The fields of an ls/info entry the test checks."""
    lfs = entry.get("lfs")
    return {
        "name": entry["name"],
        "type": entry["type"],
        "size": entry["size"],
        "xetHash": entry.get("xet_hash"),
        "lfsSha256": lfs["sha256"] if lfs else None,
    }


def read_slice(fs, path, start, length):
    with fs.open(path, "rb") as f:
        f.seek(start)
        data = f.read(length)
        return {"start": start, "length": len(data), "sha256": sha256(data), "position": f.tell()}


def filesystem(repo_id, work_dir, earlier_commit):
    from huggingface_hub import HfFileSystem

    # A fresh instance, and every call below on an empty cache: each one asks castor.
    fs = HfFileSystem(skip_instance_cache=True)
    out = {}
    out["lsNames"] = sorted(fs.ls(repo_id, detail=False))
    fs.invalidate_cache()
    out["lsDetail"] = sorted((entry_json(e) for e in fs.ls(repo_id, detail=True)), key=lambda e: e["name"])
    fs.invalidate_cache()
    out["lsSubfolder"] = sorted(fs.ls(f"{repo_id}/folder/data", detail=False))
    fs.invalidate_cache()
    out["lsAtCommit"] = sorted(fs.ls(f"{repo_id}@{earlier_commit}", detail=False))
    fs.invalidate_cache()
    out["glob"] = sorted(fs.glob(f"{repo_id}/**/*.bin"))
    fs.invalidate_cache()
    # info lists the parent folder (tree); refresh=True makes it ask paths-info as well.
    out["infoFile"] = entry_json(fs.info(f"{repo_id}/big.bin", refresh=True))
    fs.invalidate_cache()
    out["infoInlineFile"] = entry_json(fs.info(f"{repo_id}/folder/config.json", refresh=True))
    fs.invalidate_cache()
    out["infoFolder"] = entry_json(fs.info(f"{repo_id}/folder/data", refresh=True))
    fs.invalidate_cache()
    out["exists"] = {"big.bin": fs.exists(f"{repo_id}/big.bin"), "missing.bin": fs.exists(f"{repo_id}/missing.bin")}
    fs.invalidate_cache()

    size = fs.info(f"{repo_id}/big.bin")["size"]
    out["reads"] = {
        "big.bin middle": read_slice(fs, f"{repo_id}/big.bin", *BIG_SLICE),
        "big.bin past the end": read_slice(fs, f"{repo_id}/big.bin", size - 1000, 5000),
        "small.txt middle": read_slice(fs, f"{repo_id}/small.txt", *SMALL_SLICE),
    }
    start, length = BIG_SLICE
    cat = fs.cat_file(f"{repo_id}/big.bin", start=start, end=start + length)
    out["catFile"] = {"start": start, "length": len(cat), "sha256": sha256(cat)}
    with fs.open(f"{repo_id}/big.bin", "rb") as f:
        out["readWhole"] = sha256(f.read())

    got_file = os.path.join(work_dir, "fs-get", "big.bin")
    fs.get(f"{repo_id}/big.bin", got_file)
    with open(got_file, "rb") as f:
        out["getFile"] = sha256(f.read())
    got_dir = os.path.join(work_dir, "fs-get", "folder")
    fs.get(f"{repo_id}/folder", got_dir, recursive=True)
    out["getFolder"] = digests_below(got_dir)
    return out


COMMANDS = {"upload": upload, "download": download, "fs": filesystem}


def main(argv):
    command, args = argv[1], argv[2:]
    if command not in COMMANDS:
        raise SystemExit(f"unknown command {command!r} (one of {', '.join(COMMANDS)})")
    result = COMMANDS[command](*args)
    sys.stdout.flush()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
