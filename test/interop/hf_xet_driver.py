"""Drives the real hf_xet client for castor's interop tests.

Reads one JSON request on stdin, runs it through hf_xet's public functions and prints one JSON
result on stdout. The Node tests spawn it with the venv made by scripts/setup-interop.mjs.

Request fields (all required unless noted):
  op            "upload" or "download"
  casUrl        the CAS base URL handed out by castor's token operation
  accessToken   a CAS access token from that operation
  exp           the expiry (unix seconds) to declare for accessToken; a value in the past or
                within 30 s makes hf_xet call the refresher before its first request
  tokenUrl      castor's token operation URL (…/xet-{read|write}-token/{rev}); the refresher GETs it
  hubToken      the hf_… hub token the refresher authenticates with
  repoType      (upload) "model", "dataset" or "space"
  paths         (upload) files to upload
  files         (download) [{"hash": …, "size": …, "path": …}] to write

Result: {"files": [...], "refreshes": N} where files are, for an upload,
{"path", "hash", "size", "sha256"} per input path, and for a download, the written paths.
"""

import json
import sys
import urllib.request
import warnings

import hf_xet

# upload_files/download_files are what huggingface_hub calls and what the tests mean to drive;
# hf_xet 1.6 marks them deprecated in favour of XetSession, which would only add noise to the
# stderr a failing test reports.
warnings.filterwarnings("ignore", category=DeprecationWarning, message=r"hf_xet\.(upload|download)_files")


def make_refresher(token_url, hub_token, calls):
    def refresh():
        calls.append(1)
        request = urllib.request.Request(token_url, headers={"Authorization": f"Bearer {hub_token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.load(response)
        return body["accessToken"], int(body["exp"])

    return refresh


def main():
    request = json.load(sys.stdin)
    calls = []
    refresher = make_refresher(request["tokenUrl"], request["hubToken"], calls)
    token_info = (request["accessToken"], int(request["exp"]))

    if request["op"] == "upload":
        infos = hf_xet.upload_files(
            request["paths"], request["casUrl"], token_info, refresher, None, request["repoType"]
        )
        files = [
            {"path": path, "hash": info.hash, "size": info.file_size, "sha256": info.sha256}
            for path, info in zip(request["paths"], infos)
        ]
    elif request["op"] == "download":
        wanted = [
            hf_xet.PyXetDownloadInfo(entry["path"], entry["hash"], int(entry["size"]))
            for entry in request["files"]
        ]
        files = hf_xet.download_files(wanted, request["casUrl"], token_info, refresher, None)
    else:
        raise SystemExit(f"unknown op {request['op']!r}: use upload or download")

    json.dump({"files": files, "refreshes": len(calls)}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
