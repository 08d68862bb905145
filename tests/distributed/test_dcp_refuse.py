"""A sharded (FSDP2) checkpoint never runs code on resume, through the CLI as a user runs it.

Two gloo ranks of ``gpulab train mlp --set strategy=fsdp2`` (started with torchrun's variables, as
``gpulab launch`` starts them) write sharded checkpoints. Then ``.metadata`` is replaced by a pickle whose
loading runs ``touch MARKER``, and the MANIFEST is rewritten to match (whoever can write the checkpoint
can). Resuming from it must end each rank with exit 2 and one line, and the marker must not exist.
A clean sharded resume (same reader and planner) is proven exact in tests/distributed/test_fsdp.py.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.checkpoint.io import write_manifest
from gpulab.engines.torch.distributed.process_group import free_port

pytest.importorskip("torch.distributed.fsdp")


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _train_two_ranks(*args: str, timeout: float = 240) -> list[subprocess.CompletedProcess]:
    port, procs = free_port(), []
    for rank in range(2):
        env = {
            **os.environ,
            **{"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
            **{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"},
        }
        cmd = [sys.executable, "-m", "gpulab", "train", "mlp", "--device", "cpu", "--set", "strategy=fsdp2"]
        procs.append(subprocess.Popen([*cmd, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode()))
    return done


@pytest.mark.distributed
@pytest.mark.slow
def test_resume_from_a_sharded_checkpoint_with_a_pickle_payload_is_refused_and_never_runs(tmp_path):
    out = tmp_path / "run"
    first = _train_two_ranks("--out", str(out), "--max-steps", "2", "--set", "checkpoint_every=2")
    assert [r.returncode for r in first] == [0, 0], first[0].stderr[-3000:] + first[1].stderr[-3000:]
    step = out / "checkpoints" / "step-00000002"
    marker = tmp_path / "payload-ran"
    (step / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    (step / "MANIFEST.json").unlink()
    write_manifest(step, layout="sharded")  # the tampered file now verifies

    resumed = _train_two_ranks("--out", str(out), "--max-steps", "4", "--resume", str(step))

    assert not marker.exists()
    for r in resumed:
        assert r.returncode == 2, r.stderr[-3000:]
        assert r.stderr.strip().splitlines() == [
            f"gpulab: error: {step / '.metadata'}: refused pickle content (posix.system is not allowed); a "
            "sharded checkpoint's .metadata may hold only torch.distributed.checkpoint's metadata classes"
        ]
