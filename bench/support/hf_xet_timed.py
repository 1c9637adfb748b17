"""Times one hf_xet upload or download for castor's `clients` benchmark.

Takes exactly the request of test/interop/hf_xet_driver.py on stdin and runs it through that
driver unchanged, but prints its result with one more field, "seconds": the wall time of the
hf_xet call alone (upload_files or download_files). Interpreter start-up, imports and JSON
handling are thus not charged to the client being measured.
"""

import contextlib
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "interop"))

import hf_xet  # noqa: E402
import hf_xet_driver  # noqa: E402  (the interop tests' driver: one request format for both)


def timed(function, durations):
    def call(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            durations.append(time.perf_counter() - started)

    return call


def main():
    durations = []
    # The driver calls these through the module, so wrapping the module attributes times them.
    hf_xet.upload_files = timed(hf_xet.upload_files, durations)
    hf_xet.download_files = timed(hf_xet.download_files, durations)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        hf_xet_driver.main()
    if len(durations) != 1:
        raise SystemExit(f"expected exactly one hf_xet call, the driver made {len(durations)}")
    result = json.loads(captured.getvalue())
    result["seconds"] = durations[0]
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
