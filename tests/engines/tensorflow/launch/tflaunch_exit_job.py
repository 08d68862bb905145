"""A worker of the `gpulab launch --engine tensorflow` failure test; imports no TensorFlow (fast).

``python tflaunch_exit_job.py OUT FAIL_INDEX CODE``: each worker writes its TF_CONFIG to ``OUT/workerI.json``;
worker FAIL_INDEX waits until every worker has written, then exits with CODE; the others sleep until
the launcher stops them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

out, fail, code = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
config = json.loads(os.environ["TF_CONFIG"])
index = config["task"]["index"]
print(f"worker {index} started", flush=True)
out.mkdir(parents=True, exist_ok=True)  # as the README runs it, into a new directory
(out / f"worker{index}.json").write_text(json.dumps({**config, "pid": os.getpid()}))
if index == fail:
    deadline = time.monotonic() + 120  # generous: every worker must have written before this one fails
    while (
        len(list(out.glob("worker*.json"))) < len(config["cluster"]["worker"]) and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    sys.exit(code)
time.sleep(120)
