"""The busy-machine note names the engine's own threads: OMP_NUM_THREADS does not size TensorFlow's
pools, so a TensorFlow run's note must not send its user there (real CPU hogs make the machine busy)."""

from __future__ import annotations

import subprocess
import sys
import time

from gpulab.hardware.load import OtherCpuLoad, load_during, usable_cores

HOG = "import time\nend = time.time() + 20\nwhile time.time() < end: pass"


def test_the_busy_note_names_each_engines_threads():
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(usable_cores())]
    try:
        others = OtherCpuLoad()
        time.sleep(1.5)
        torch_run = load_during(others, on_cpu=True)
        tf_run = load_during(others, on_cpu=True, engine="tensorflow")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert torch_run["busy"] and tf_run["busy"]
    assert "torch's threads" in torch_run["note"] and "OMP_NUM_THREADS=1" in torch_run["note"]
    assert "TensorFlow's CPU threads" in tf_run["note"]
    assert "torch" not in tf_run["note"] and "OMP_NUM_THREADS" not in tf_run["note"]
