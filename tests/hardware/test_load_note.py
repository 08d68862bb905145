"""The busy-machine note names the engine's own threads: OMP_NUM_THREADS does not size TensorFlow's
pools, so a TensorFlow run's note must not send its user there; and a launched rank's sibling ranks are
the job itself, not other processes (real CPU hogs make the machine busy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gpulab import engine_registry as engines
from gpulab.hardware.load import OtherCpuLoad, load_during, usable_cores


def _hint(engine: str) -> str:
    """The engine's words on its own CPU threads (its diagnosis capability)."""
    return engines.capability(engines.get(engine), "diagnosis").threads_hint


HOG = "import time\nend = time.time() + 90\nwhile time.time() < end: pass"


def test_the_busy_note_names_each_engines_threads():
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(usable_cores())]
    try:
        others = OtherCpuLoad()
        time.sleep(1.5)
        torch_run = load_during(others, on_cpu=True, threads_hint=_hint("torch"))
        tf_run = load_during(others, on_cpu=True, threads_hint=_hint("tensorflow"))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert torch_run["busy"] and tf_run["busy"]
    assert "torch's threads" in torch_run["note"] and "OMP_NUM_THREADS=1" in torch_run["note"]
    assert "TensorFlow's CPU threads" in tf_run["note"]
    assert "torch" not in tf_run["note"] and "OMP_NUM_THREADS" not in tf_run["note"]


# Measures until the hog has had 0.5 s of CPU inside the window (a loaded machine gives it a fraction of a
# core: a fixed 1.5 s window gave it less than the 0.3 s asserted), with a generous deadline.
MEASURE = """
import json, os, time
from gpulab.hardware.load import OtherCpuLoad, _process_cpu_s
hog = int(os.environ["HOG_PID"])
others, hog_start = OtherCpuLoad(), _process_cpu_s(hog)
deadline = time.monotonic() + 60
while _process_cpu_s(hog) - hog_start < 0.5 and time.monotonic() < deadline:
    time.sleep(0.05)
others.fraction()
print(json.dumps(others.siblings_cpu_s))
"""
PARENT = """
import os, subprocess, sys
hog = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
os.environ["HOG_PID"] = str(hog.pid)
try:
    print(subprocess.run([sys.executable, "-c", sys.argv[2]], capture_output=True, text=True, check=True).stdout)
finally:
    hog.kill()
    hog.wait()
"""


@pytest.mark.parametrize("launched", [True, False], ids=["launched-rank", "plain-process"])
def test_a_launched_ranks_sibling_ranks_are_not_other_processes(launched):
    # A launcher's children: one busy rank beside the one measuring. On 2 cores a 2-rank run was always
    # "busy" (the second rank used half the machine); a plain process's siblings stay others.
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_WORLD_SIZE", "TF_CONFIG")}
    if launched:
        env["LOCAL_WORLD_SIZE"] = "2"
    proc = subprocess.run(
        [sys.executable, "-c", PARENT, HOG, MEASURE], env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    siblings_cpu_s = json.loads(proc.stdout)
    if launched:
        assert siblings_cpu_s > 0.3  # the hog rank's CPU time, left out of "other processes"
    else:
        assert siblings_cpu_s == 0
