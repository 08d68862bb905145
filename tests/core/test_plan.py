"""The fit's plan, computed once in core for every engine: steps, windows, epochs, checkpoints."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpulab.core.plan import plan_fit
from gpulab.errors import ConfigError, DataError


def settings(max_steps=None, epochs=2, checkpoint_every=None):
    return SimpleNamespace(max_steps=max_steps, epochs=epochs, checkpoint_every=checkpoint_every)


def test_an_epoch_of_ten_batches_in_windows_of_four_has_a_short_last_window():
    plan = plan_fit(settings(), 10, 4)
    assert (plan.steps_per_epoch, plan.total_steps) == (3, 6)
    windows = [plan.window(i) for i in range(10)]
    assert windows == [4, 4, 4, 4, 4, 4, 4, 4, 2, 2]
    assert [i for i in range(10) if plan.closes(i, windows[i])] == [3, 7, 9]


def test_max_steps_overrides_epochs_and_a_stream_keeps_full_windows():
    assert plan_fit(settings(max_steps=5), 10, 4).total_steps == 5
    stream = plan_fit(settings(max_steps=7), None, 3)
    assert (stream.total_steps, stream.steps_per_epoch, stream.window(10)) == (7, 0, 3)
    state = stream.fresh_state()
    assert (state.total_steps, state.steps_per_epoch, state.global_step) == (7, 0, 0)


def test_checkpoints_are_due_every_n_steps_or_never():
    assert [s for s in range(1, 10) if plan_fit(settings(checkpoint_every=4), 10, 1).checkpoint_due(s)] == [
        4,
        8,
    ]
    assert not any(plan_fit(settings(), 10, 1).checkpoint_due(s) for s in range(1, 10))


def test_a_stream_without_max_steps_and_an_empty_epoch_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="has no length .*: set max_steps"):
        plan_fit(settings(), None, 1)
    with pytest.raises(DataError, match="training data gives no batch"):
        plan_fit(settings(), 0, 1)
