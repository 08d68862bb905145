"""A worker of the `gpulab launch --engine tensorflow` stall test; imports no TensorFlow (fast).

``python tflaunch_stall_job.py OUT``: worker 1 suspends itself (SIGSTOP, as ``kill -STOP`` or Ctrl-Z would);
worker 0 waits until it is, then does what a real worker 0 does when TensorFlow's coordination service
misses worker 1's heartbeats: prints the service's error and exits 1.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
out.mkdir(parents=True, exist_ok=True)
(out / f"worker{index}.pid").write_text(str(os.getpid()))
if index == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(120)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    peer = out / "worker1.pid"
    if peer.is_file() and peer.read_text():
        stat = Path(f"/proc/{peer.read_text()}/stat").read_text()
        if stat.rpartition(")")[2].split()[0] == "T":
            break
    time.sleep(0.05)
print(
    "E0000 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort UNAVAILABLE: Error reported "
    "from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):\n"
    "/job:worker/replica:0/task:1\nThe tasks have crashed.",
    file=sys.stderr,
    flush=True,
)
sys.exit(1)
