"""TensorBoardLogger hands records to the writer in batches: one event per step, every scalar in it."""

from types import SimpleNamespace

import pytest

from gpulab.core.callbacks import TensorBoardLogger


class FakeFileWriter:
    def __init__(self):
        self.events = []

    def add_summary(self, summary, step):
        self.events.append((step, {v.tag: v.simple_value for v in summary.value}))

    def close(self):
        pass


def start(tmp_path, hand_over_s):
    logger = TensorBoardLogger(tmp_path / "tb", hand_over_s=hand_over_s)
    logger.on_fit_start(trainer=None, state=SimpleNamespace(global_step=0))
    fake = FakeFileWriter()
    logger._writer.close()
    logger._writer = fake
    return logger, fake


def test_records_wait_for_the_hand_over_then_arrive_whole(tmp_path):
    logger, fake = start(tmp_path, hand_over_s=3600)
    for step in (50, 100):
        logger.on_log(None, SimpleNamespace(global_step=step), {"loss": step / 100, "lr": 1e-3, "flag": True})
    logger.on_validation_end(None, SimpleNamespace(global_step=100), {"val_loss": 0.25})
    assert fake.events == []  # nothing woke the writer thread during the fit
    logger.on_fit_end(None, SimpleNamespace(global_step=100), result=None)
    assert fake.events == [
        (50, {"loss": 0.5, "lr": pytest.approx(1e-3)}),  # booleans are not scalars to plot
        (100, {"loss": 1.0, "lr": pytest.approx(1e-3)}),
        (100, {"val_loss": 0.25}),
    ]


def test_a_zero_interval_hands_over_at_once(tmp_path):
    logger, fake = start(tmp_path, hand_over_s=0.0)
    logger.on_log(None, SimpleNamespace(global_step=7), {"loss": 0.5})
    assert fake.events == [(7, {"loss": 0.5})]
    logger.on_fit_end(None, SimpleNamespace(global_step=7), result=None)
