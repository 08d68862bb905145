"""The loop owns its state (``core/loop_state.py``): a whole fit -- checkpoints, validation, a resume, a
failure -- writes no attribute of the engine from gpulab's code, and a user's callback still reads
``trainer.context`` and ``trainer.last_checkpoint`` (read-only) and the engine's own attributes."""

from __future__ import annotations

import sys

import numpy_engine  # (tests/core is on the path)
import pytest

from gpulab.config import RunConfig
from gpulab.core.callbacks import Callback


@pytest.fixture(autouse=True)
def numpy_layout(numpy_registered):
    """Its checkpoints verify as the NumPy engine's layout (the engine registered)."""


class Guarded(numpy_engine.NumpyTrainer):
    """The NumPy engine, refusing every attribute write whose writer is gpulab's code (the loop, the
    callbacks it runs, the view it hands them); the engine's own methods (this test tree) still write."""

    def __setattr__(self, name, value):
        writer = sys._getframe(1).f_globals.get("__name__", "")
        if writer.startswith("gpulab."):
            raise AssertionError(f"{writer} wrote engine.{name}")
        super().__setattr__(name, value)


class Reader(Callback):
    """A user's callback written against the trainer: what it read, at each hook."""

    def __init__(self):
        self.engines, self.last, self.lr = set(), [], None

    def on_step_end(self, trainer, state):
        self.engines.add(trainer.context.engine)
        self.lr = trainer.lr  # the engine's own attribute, read through

    def on_fit_end(self, trainer, state, result):
        self.last.append(trainer.last_checkpoint)
        self.resumed_from = trainer.context.resumed_from
        with pytest.raises(AttributeError, match="trainer.context is the fit loop's, read-only"):
            trainer.context = None


def _guarded(tmp_path, callbacks, **settings) -> Guarded:
    config = RunConfig(recipe="linear", progress=False, batch_size=16, out_dir=str(tmp_path), **settings)
    return Guarded(config, {"recipe": "linear", "options": {}}, callbacks)


def test_a_fit_and_its_resume_write_no_engine_attribute_and_callbacks_read_the_loops_state(tmp_path):
    reader = Reader()
    first = _guarded(tmp_path, [reader], max_steps=5, checkpoint_every=2).fit(numpy_engine.linear())
    second = _guarded(tmp_path, [reader], max_steps=9, checkpoint_every=2)
    resumed = second.fit(numpy_engine.linear(), resume="latest")

    assert (first.steps, resumed.steps) == (5, 9)
    assert reader.engines == {"numpy"} and reader.lr == numpy_engine.linear().lr
    checkpoints = tmp_path / "checkpoints"
    assert reader.last == [checkpoints / "step-00000005", checkpoints / "step-00000009"]
    assert reader.resumed_from == checkpoints / "step-00000005" == second.resumed_from
    assert not hasattr(second, "last_checkpoint") and not hasattr(second, "context")


def test_a_failing_fit_tells_the_callbacks_and_writes_no_engine_attribute(tmp_path):
    told = []

    class Told(Callback):
        def on_exception(self, trainer, state, error):
            told.append((trainer.context.engine, trainer.last_checkpoint, str(error)))

    engine = _guarded(tmp_path, [Told()], max_steps=6, checkpoint_every=2)
    step = engine.micro_step

    def third_breaks(batch, window, closes):
        if engine.state.global_step == 2:
            raise ValueError("the user's step is broken")
        return step(batch, window, closes)

    object.__setattr__(engine, "micro_step", third_breaks)
    with pytest.raises(ValueError, match="the user's step is broken") as caught:
        engine.fit(numpy_engine.linear())
    assert told == [("numpy", tmp_path / "checkpoints" / "step-00000002", "the user's step is broken")]
    assert "safe to resume from" in caught.value.__notes__[0]
