"""TensorBoardLogger hands records to the event file in batches: one event per step, every scalar in it; a
resume writes each step once."""

import json
import sys
import types
from types import SimpleNamespace

import pytest

from gpulab.core.callbacks import TensorBoardLogger
from gpulab.core.state import FitResult

FRESH = SimpleNamespace(context=SimpleNamespace(resumed_from=None))  # a trainer's fit that is no resume
RESUMED = SimpleNamespace(context=SimpleNamespace(resumed_from="checkpoints/step-10"))
DONE = FitResult(device="cpu", precision="fp32", steps=100, epochs=1, final_loss=1.0, samples_per_s=2493.0,
                 peak_memory_bytes=0, train_seconds=2.0)  # fmt: skip


class FakeEventFile:
    def __init__(self):
        self.events, self.flushes = [], 0

    def add_scalars(self, step, values):
        self.events.append((step, dict(values)))

    def flush(self):
        self.flushes += 1

    def close(self):
        pass


def start(tmp_path, hand_over_s):
    logger = TensorBoardLogger(tmp_path / "tb", hand_over_s=hand_over_s)
    logger.on_fit_start(trainer=FRESH, state=SimpleNamespace(global_step=0))
    fake = FakeEventFile()
    logger._writer.close()
    logger._writer = fake
    return logger, fake


def test_records_wait_for_the_hand_over_then_arrive_whole(tmp_path):
    logger, fake = start(tmp_path, hand_over_s=3600)
    for step in (50, 100):
        logger.on_log(None, SimpleNamespace(global_step=step), {"loss": step / 100, "lr": 1e-3, "flag": True})
    logger.on_validation_end(None, SimpleNamespace(global_step=100), {"val_loss": 0.25})
    assert fake.events == [] and fake.flushes == 0  # nothing written during the fit
    logger.on_fit_end(None, SimpleNamespace(global_step=100), result=DONE)
    assert fake.events[:3] == [
        (50, {"loss": 0.5, "lr": pytest.approx(1e-3)}),  # booleans are not scalars to plot
        (100, {"loss": 1.0, "lr": pytest.approx(1e-3)}),
        (100, {"val_loss": 0.25}),
    ]
    # then the fit's own figures (summary.json's), under run/, at the last step
    assert fake.events[3][0] == 100 and fake.events[3][1]["run/samples_per_s"] == 2493.0
    assert fake.events[3][1]["run/train_seconds"] == 2.0 and len(fake.events) == 4


def test_a_zero_interval_hands_over_at_once(tmp_path):
    logger, fake = start(tmp_path, hand_over_s=0.0)
    logger.on_log(None, SimpleNamespace(global_step=7), {"loss": 0.5})
    assert fake.events == [(7, {"loss": 0.5})] and fake.flushes == 1
    logger.on_fit_end(None, SimpleNamespace(global_step=7), result=DONE)


def scalars(log_dir, tag):
    """(step, value) of ``tag`` in every event file of ``log_dir``, read by TensorBoard's loader."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    return sorted(
        (e.step, v.simple_value)
        for path in sorted(log_dir.glob("events.out.tfevents.*"))
        for e in LegacyEventFileLoader(str(path)).Load()
        for v in e.summary.value
        if v.tag == tag
    )


def test_a_hand_over_is_on_disk_before_the_fit_ends(tmp_path):
    logger = TensorBoardLogger(tmp_path / "tb", hand_over_s=0.0)
    logger.on_fit_start(trainer=FRESH, state=SimpleNamespace(global_step=0))
    logger.on_log(None, SimpleNamespace(global_step=5), {"loss": 0.5})
    assert scalars(tmp_path / "tb", "loss") == [(5, 0.5)]  # TensorBoard shows it now, not at the end
    logger.on_fit_end(None, SimpleNamespace(global_step=5), result=DONE)
    assert scalars(tmp_path / "tb", "run/train_seconds") == [(5, 2.0)]


def test_a_resume_writes_what_the_event_files_lack_and_nothing_twice(tmp_path):
    first = TensorBoardLogger(tmp_path / "tb", hand_over_s=0.0, out_dir=tmp_path)
    first.on_fit_start(trainer=FRESH, state=SimpleNamespace(global_step=0))
    first.on_log(None, SimpleNamespace(global_step=5), {"loss": 0.5})  # then killed: step 10 never handed
    first._writer.close()
    lines = [{"step": 5, "epoch": 0, "loss": 0.5}, {"step": 10, "epoch": 0, "loss": 0.25}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    resumed = TensorBoardLogger(tmp_path / "tb", hand_over_s=3600, out_dir=tmp_path)
    resumed.on_fit_start(trainer=RESUMED, state=SimpleNamespace(global_step=10))
    resumed.on_log(None, SimpleNamespace(global_step=15), {"loss": 0.125})
    resumed.on_fit_end(None, SimpleNamespace(global_step=15), result=DONE)
    assert scalars(tmp_path / "tb", "loss") == [(5, 0.5), (10, 0.25), (15, 0.125)]
