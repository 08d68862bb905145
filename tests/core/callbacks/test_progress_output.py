"""What a person sees while a fit runs: without a terminal (a CI log, nohup, a pipe) plain lines from the
first step on, one every few seconds and one at the end; on a terminal the bar shows the first step's loss
without waiting for the first log."""

from __future__ import annotations

import io
import re
import sys

import torch
from torch import nn
from torch.nn import functional as F

from gpulab.core.callbacks import Callback, ProgressBar
from gpulab.core.callbacks.log_lines import LogLines
from gpulab.engines.torch.train.trainer import Trainer


class _Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def _fit(callbacks=(), **settings):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    settings = {"device": "cpu", "precision": "fp32", "batch_size": 32, **settings}
    trainer = Trainer(callbacks=callbacks, **settings)
    optimizer = lambda params: torch.optim.SGD(params, lr=0.05)  # noqa: E731
    return trainer, trainer.fit(model, (x, y), loss_fn=F.mse_loss, optimizer=optimizer)


def _fit_printing(monkeypatch, **fit):
    """``_fit(**fit)`` with stdout a pipe (no terminal): its result and the lines it printed."""
    pipe = _Pipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    _, result = _fit(**fit)
    monkeypatch.undo()
    return result, pipe.getvalue().splitlines()


def _first_logged_loss() -> float:
    _, result = _fit(progress=False, max_steps=1, log_every=1)
    return result.history[0]["loss"]


def test_without_a_terminal_a_fit_prints_plain_lines_from_the_first_step(monkeypatch):
    # progress unset: a bar only on a terminal
    result, lines = _fit_printing(monkeypatch, epochs=2, log_every=4)
    assert lines[0] == f"step 1/16  epoch 1/2  loss {_first_logged_loss():.4f}"
    assert lines[-1].startswith(f"step 16/16  epoch 2/2  loss {result.final_loss:.4f}  ")
    assert lines[-1].endswith(f"done in {result.train_seconds:.1f} s")


def test_a_line_every_every_s_seconds_names_the_step_its_loss_was_read_at(monkeypatch):
    _, lines = _fit_printing(
        monkeypatch, callbacks=[LogLines(every_s=0.0)], progress=False, max_steps=6, log_every=4
    )
    assert [line.split("  ")[0] for line in lines] == [f"step {i}/6" for i in range(1, 7)] + ["step 6/6"]
    assert "(read at step 1)" in lines[2]  # step 3: the loss last read is the first step's
    assert "read at" not in lines[3] and "samples/s" in lines[3]  # step 4 is a log
    assert "(read at step 4)" in lines[4]
    assert all(re.search(r"ETA \d+:\d\d:\d\d$", line) for line in lines[1:6])
    assert "done in" in lines[-1]


def test_a_line_waits_for_every_s_seconds(monkeypatch):
    _, lines = _fit_printing(
        monkeypatch, callbacks=[LogLines(every_s=3600.0)], progress=False, max_steps=6, log_every=2
    )
    assert len(lines) == 2 and lines[0].startswith("step 1/6") and "done in" in lines[1]


def test_the_bar_shows_the_first_steps_loss_before_the_first_log():
    shown: list[str] = []

    class Look(Callback):  # runs after the bar's on_step_end
        def on_step_end(self, trainer, state):
            bar = next(cb for cb in trainer.callbacks.callbacks if isinstance(cb, ProgressBar))
            shown.append(bar._progress.tasks[0].fields["loss"])

    _fit(callbacks=[Look()], progress=True, max_steps=3, log_every=100)
    assert shown == [f"{_first_logged_loss():.4f}"] * 3


def test_the_eta_leaves_out_a_one_off_such_as_a_retrace_after_a_resume(monkeypatch, capsys):
    """A fit resumed at step 400 of 1000: its second step takes 10 s (a graph traced again), then each step
    0.05 s; the ETA is the 600 steps left at 0.05 s, not at the 10 s step (it said 1:24:19 for a run that
    ended 30 s later). A host that waits for the device every 10 steps (9 short gaps, 1 long) keeps it."""
    from types import SimpleNamespace

    from gpulab.core.callbacks import log_lines

    def eta_after(gaps: list[float]) -> str:
        clock = iter(__import__("itertools").accumulate([100.0, *gaps]))
        monkeypatch.setattr(log_lines.time, "monotonic", lambda: next(clock))
        lines = LogLines(every_s=3600.0)
        state = SimpleNamespace(global_step=400, total_steps=1000, steps_per_epoch=0, epoch=0, first_loss=0.5)
        for _ in range(len(gaps) + 1):
            state.global_step += 1
            lines.on_step_end(None, state)
        lines._last_line = 0.0  # the next step prints its line
        monkeypatch.setattr(log_lines.time, "monotonic", lambda: 200.0)
        return lines._eta(state, 200.0)[0]

    capsys.readouterr()
    # steps 402..450: one 10 s retrace then 48 steps of 0.05 s; 549 steps left at 0.05 s = 27 s
    assert eta_after([10.0] + [0.05] * 48) == "ETA 0:00:27"
    # a sync every 10 steps: 9 gaps of 0.01 s, one of 0.41 s: 0.05 s a step on average, kept
    assert eta_after(([0.01] * 9 + [0.41]) * 5) == "ETA 0:00:27"


def test_a_fit_stopped_by_a_signal_ends_on_the_loss_last_read_not_loss_dash(monkeypatch):
    """A signal stops the fit without a final log (issue 40: ``step 2/100000  loss -  done in``): the
    last line shows the loss last read and the step it was read at."""
    from gpulab.core.callbacks import Callback

    class Signalled(Callback):  # what StopOnSignal does at the step boundary after a Ctrl-C
        def on_step_end(self, trainer, state):
            if state.global_step == 2:
                state.stop_signal, state.should_stop = 2, True

    result, lines = _fit_printing(
        monkeypatch,
        callbacks=[LogLines(every_s=3600.0), Signalled()],
        progress=False,
        max_steps=6,
        log_every=100,
    )
    assert result.final_loss is None
    assert lines[-1].startswith(f"step 2/6  epoch 1/1  loss {_first_logged_loss():.4f} (read at step 1)  ")
    assert "loss -" not in "\n".join(lines)
