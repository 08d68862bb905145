"""TensorBoardLogger hands records to the writer in batches: one event per step, every scalar in it."""

from types import SimpleNamespace

import pytest

from gpulab.core.callbacks import TensorBoardLogger
from gpulab.core.state import FitResult

FRESH = SimpleNamespace(context=SimpleNamespace(resumed_from=None))  # a trainer's fit that is no resume
DONE = FitResult(device="cpu", precision="fp32", steps=100, epochs=1, final_loss=1.0, samples_per_s=2493.0,
                 peak_memory_bytes=0, train_seconds=2.0)  # fmt: skip


class FakeFileWriter:
    def __init__(self):
        self.events = []

    def add_summary(self, summary, step):
        self.events.append((step, {v.tag: v.simple_value for v in summary.value}))

    def close(self):
        pass


def start(tmp_path, hand_over_s):
    logger = TensorBoardLogger(tmp_path / "tb", hand_over_s=hand_over_s)
    logger.on_fit_start(trainer=FRESH, state=SimpleNamespace(global_step=0))
    fake = FakeFileWriter()
    assert logger._ready()  # the writer opens in a thread started at fit start
    logger._writer.close()
    logger._writer = fake
    return logger, fake


def test_records_wait_for_the_hand_over_then_arrive_whole(tmp_path):
    logger, fake = start(tmp_path, hand_over_s=3600)
    for step in (50, 100):
        logger.on_log(None, SimpleNamespace(global_step=step), {"loss": step / 100, "lr": 1e-3, "flag": True})
    logger.on_validation_end(None, SimpleNamespace(global_step=100), {"val_loss": 0.25})
    assert fake.events == []  # nothing woke the writer thread during the fit
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
    assert fake.events == [(7, {"loss": 0.5})]
    logger.on_fit_end(None, SimpleNamespace(global_step=7), result=DONE)


def test_the_writer_opens_off_the_training_thread_and_the_first_hand_over_waits_for_it(tmp_path, monkeypatch):
    import threading

    from gpulab.core.callbacks import tensorboard

    opened_in, release = [], threading.Event()
    real = tensorboard._EventWriter

    def slow_writer(log_dir):
        opened_in.append(threading.current_thread().name)
        release.wait()  # the import and the file take their time: the fit goes on meanwhile
        return real(log_dir)

    monkeypatch.setattr(tensorboard, "_EventWriter", slow_writer)
    logger = TensorBoardLogger(tmp_path / "tb", hand_over_s=3600)
    logger.on_fit_start(trainer=FRESH, state=SimpleNamespace(global_step=0))
    logger.on_log(None, SimpleNamespace(global_step=5), {"loss": 0.5})  # returns: nothing waits yet
    release.set()
    logger.on_fit_end(None, SimpleNamespace(global_step=5), result=DONE)  # waits, then writes
    assert opened_in == ["gpulab-tensorboard-open"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(5, 0.5)]
