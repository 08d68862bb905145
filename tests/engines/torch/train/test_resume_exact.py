"""Exact resume, proven with real processes: a run killed mid-epoch and resumed equals one never stopped.

Every run is a process of its own, forked from one that imported torch and gpulab once (tests/forked.py,
tests/conftest.py's gpulab_server): SIGKILLed for real, and resumed in a process that holds nothing of the
killed one's."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import torch
from forked import Child

from gpulab.engines.torch.state.api import list_checkpoints, resolve_checkpoint

JOB = Path(__file__).with_name("resume_job.py")
# The tensor fast path and the DataLoader path, each with tuple batches and with dict batches (a model
# called with keyword arguments that computes its own loss); and the user's own shuffling DataLoader, with
# its own generator, drawing from the global RNG, and with 2 workers (persistent or not).
FLAVOURS = {
    "tensors": (),
    "dataset": ("--dataset",),
    "dict": ("--dict",),
    "dict-dataset": ("--dict", "--dataset"),
    "own-loader": ("--loader", "own-generator"),
    "own-loader-global-rng": ("--loader", "global-rng"),
    "own-loader-workers": ("--loader", "workers"),
    "own-loader-persistent-workers": ("--loader", "persistent-workers"),
    # resume_data: skip (no consumed item loaded): exact here, the dataset drawing nothing as it loads
    "own-loader-skip": ("--loader", "own-generator", "--resume-data", "skip"),
    "own-loader-workers-skip": ("--loader", "workers", "--resume-data", "skip"),
}


@pytest.fixture
def job(gpulab_server, tmp_path):
    """``job(out, result, *extra, env=None)``: resume_job.py's run in a process of its own."""
    count = iter(range(100))

    def start(out: Path, result: Path, *extra: str, env: dict[str, str] | None = None) -> Child:
        stderr = tmp_path / f"job{next(count)}.err"
        argv, path = [str(out), str(result), *extra], [str(JOB.parent)]
        return gpulab_server.start("resume_job:main", argv, stderr=stderr, env=env, path=path)

    return start


def finish(proc: Child) -> int:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, -signal.SIGKILL), err
    return proc.returncode


def warned(proc: Child, words: str) -> list[str]:
    return [line for line in proc.stderr_text.splitlines() if words in line]


def assert_same_run(full: dict, resumed: dict, from_step: int) -> None:
    later = {s: v for s, v in full["losses"].items() if s > from_step}
    assert resumed["losses"] == later, "per-step losses differ after resume"
    for name, p in full["params"].items():
        assert torch.equal(p, resumed["params"][name]), f"parameter {name} differs"
    for pid, st in full["optimizer"]["state"].items():
        for key, value in st.items():
            assert torch.equal(value, resumed["optimizer"]["state"][pid][key]), (
                f"optimizer {pid}.{key} differs"
            )


@pytest.fixture(scope="module")
def uninterrupted(gpulab_server, tmp_path_factory) -> dict:
    """Each flavour's run never stopped, one after another in one process of their own (the killed and
    resumed runs each get a process of their own)."""
    tmp = tmp_path_factory.mktemp("full")
    runs = [[str(tmp / f), str(tmp / f"{f}.pt"), *extra] for f, extra in FLAVOURS.items()]
    argv, path = [json.dumps(runs)], [str(JOB.parent)]
    proc = gpulab_server.start("resume_job:main_many", argv, stderr=tmp / "stderr", path=path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return {flavour: torch.load(tmp / f"{flavour}.pt") for flavour in FLAVOURS}


@pytest.mark.slow
@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_killed_mid_epoch_then_resumed_is_bit_identical(tmp_path, job, uninterrupted, flavour):
    extra = FLAVOURS[flavour]
    # Step 10 lies mid-epoch (7 optimizer steps an epoch) and mid-schedule; the process dies by SIGKILL.
    assert (
        finish(job(tmp_path / "run", tmp_path / "ignored.pt", "--kill-at", "10", *extra)) == -signal.SIGKILL
    )
    assert resolve_checkpoint(tmp_path / "run" / "checkpoints").name == "step-00000010"
    resumed = job(tmp_path / "run", tmp_path / "resumed.pt", "--resume", *extra)
    assert finish(resumed) == 0
    assert_same_run(uninterrupted[flavour], torch.load(tmp_path / "resumed.pt"), from_step=10)
    # Persistent workers keep their random streams across epochs: the order is exact, the line says what
    # is not (this dataset draws nothing in its workers, so the run is bit-identical all the same).
    assert len(warned(resumed, "persistent_workers=True")) == (flavour == "own-loader-persistent-workers")
    assert len(warned(resumed, "resume_data: skip: epoch 1 resumes at batch 6")) == flavour.endswith("-skip")


@pytest.mark.slow
def test_a_resume_with_another_thread_count_says_so_in_one_line(tmp_path, job):
    assert finish(job(tmp_path / "run", tmp_path / "x.pt", "--threads", "2", "--kill-at", "10")) == -9
    resumed = job(tmp_path / "run", tmp_path / "resumed.pt", "--resume", "--threads", "1")
    assert finish(resumed) == 0
    (line,) = warned(resumed, "intra-op threads")
    assert "resuming with 1 intra-op threads a run checkpointed with 2" in line
    assert "OMP_NUM_THREADS=2" in line


@pytest.mark.slow
def test_killed_while_saving_resumes_from_previous_checkpoint(tmp_path, job, uninterrupted):
    signal_file = tmp_path / "paused"
    env = {"GPULAB_CHECKPOINT_PAUSE_SIGNAL": str(signal_file)}
    proc = job(tmp_path / "run", tmp_path / "x.pt", "--pause-save-at", "15", env=env)
    deadline = time.time() + 120
    while not signal_file.exists():
        assert proc.poll() is None, proc.stderr_path.read_text()
        assert time.time() < deadline
        time.sleep(0.05)
    proc.kill()  # SIGKILL in the middle of writing step 15
    proc.wait()
    root = tmp_path / "run" / "checkpoints"
    assert resolve_checkpoint(root).name == "step-00000010"
    assert (root / "latest").read_text().strip() == "step-00000010"
    assert not (root / "step-00000015").exists(), "a partial checkpoint sits at a final path"
    # every 5 steps, plus the end of epoch 1 (step 7)
    assert [p.name for p in list_checkpoints(root)] == ["step-00000005", "step-00000007", "step-00000010"]
    assert finish(job(tmp_path / "run", tmp_path / "resumed.pt", "--resume")) == 0
    assert_same_run(uninterrupted["tensors"], torch.load(tmp_path / "resumed.pt"), from_step=10)
