"""``core/loop.py`` on the test tree's NumPy engine (``numpy_engine.py``): what the loop itself decides,
whichever engine runs under it."""

from __future__ import annotations

import numpy_engine  # (tests/core is on the path)
import pytest

from gpulab.config import RunConfig


@pytest.fixture(autouse=True)
def numpy_layout(numpy_registered):
    """Its checkpoints verify as the NumPy engine's layout (the engine registered)."""


def trainer(**settings) -> numpy_engine.NumpyTrainer:
    config = RunConfig(recipe="linear", progress=False, batch_size=16, **settings)
    return numpy_engine.NumpyTrainer(config, {"recipe": "linear", "options": {}})


def test_scheduled_checkpoints_are_left_out_of_the_clock_as_epoch_end_ones(tmp_path):
    """Every save here is a scheduled one (step 2, 4, 6 of a 7-batch epoch, no validation): once only the
    epoch-end and final saves were left out, and untimed_s read 0 for this run."""
    recipe = numpy_engine.linear()
    recipe.val = None
    result = trainer(max_steps=6, checkpoint_every=2, out_dir=str(tmp_path)).fit(recipe)
    saved = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    assert saved == ["step-00000002", "step-00000004", "step-00000006"]
    assert 0.0 < result.extras["untimed_s"] < result.train_seconds


def test_a_users_error_in_a_step_is_noted_with_the_step_batch_and_checkpoint(tmp_path, monkeypatch):
    t = trainer(max_steps=6, checkpoint_every=2, out_dir=str(tmp_path))
    step = t.micro_step

    def third_breaks(batch, window, closes):
        if t.state.global_step == 2:
            raise ValueError("the user's step is broken")
        return step(batch, window, closes)

    monkeypatch.setattr(t, "micro_step", third_breaks)
    with pytest.raises(ValueError, match="the user's step is broken") as caught:
        t.fit(numpy_engine.linear())
    assert caught.value.__notes__ == [
        "gpulab: the fit failed in step 3 (epoch 1, batch 3/7: (16, 4) float64, (16,) float64); safe to resume "
        f"from {tmp_path / 'checkpoints' / 'step-00000002'} (--resume latest)"
    ]
