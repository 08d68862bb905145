"""``Trainer.fit`` on CPU: it trains, stops exactly at max_steps, calls callbacks, never syncs per step,
writes logs only when asked, shows a progress bar only on a terminal, clips gradients, and the tensor fast
path and the DataLoader path train identically."""

from __future__ import annotations

import io
import json
import sys
from collections import Counter

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from gpulab.core.callbacks import Callback, ProgressBar
from gpulab.core.callbacks.log_lines import LogLines
from gpulab.core.state import FitResult
from gpulab.engines.torch.train.trainer import Trainer
from gpulab.errors import ConfigError

FEATURES = 8


def _regression(n: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    y = x @ torch.randn(FEATURES, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))


def _sgd(lr: float = 0.05, **kw):
    return lambda params: torch.optim.SGD(params, lr=lr, **kw)


def _fit(
    model=None, data=None, *, callbacks=(), loss_fn=F.mse_loss, optimizer=None, val_data=None, **settings
):
    settings = {"device": "cpu", "precision": "fp32", "progress": False, "batch_size": 32, **settings}
    trainer = Trainer(callbacks=callbacks, **settings)
    result = trainer.fit(
        model if model is not None else _model(),
        data if data is not None else _regression(),
        loss_fn=loss_fn,
        optimizer=optimizer or _sgd(),
        val_data=val_data,
    )
    return trainer, result


def _losses(result: FitResult) -> list[float]:
    return [h["loss"] for h in result.history if "loss" in h]


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


class Recorder(Callback):
    """Records every hook call with the step/epoch it saw."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []
        self.result: FitResult | None = None

    def _add(self, name, state):
        self.calls.append((name, state.global_step, state.epoch))

    def on_fit_start(self, trainer, state):
        self._add("fit_start", state)

    def on_step_end(self, trainer, state):
        self._add("step_end", state)

    def on_log(self, trainer, state, metrics):
        self._add("log", state)

    def on_validation_end(self, trainer, state, metrics):
        self._add("validation_end", state)

    def on_epoch_end(self, trainer, state):
        self._add("epoch_end", state)

    def on_fit_end(self, trainer, state, result):
        self._add("fit_end", state)
        self.result = result

    def named(self, name: str) -> list[tuple[int, int]]:
        return [(step, epoch) for n, step, epoch in self.calls if n == name]


def test_fit_trains_and_fills_the_result():
    trainer, result = _fit(epochs=4, log_every=1)
    losses = _losses(result)
    assert len(losses) == 4 * 8  # 256 samples / 32 = 8 steps per epoch, one log each
    assert losses[-1] < 0.2 * losses[0]
    assert result.device == "cpu" and result.precision == "fp32"
    assert result.steps == 32 and result.epochs == 4
    assert result.final_loss == pytest.approx(losses[-1])
    assert result.samples_per_s is not None and result.samples_per_s > 0
    assert result.peak_memory_bytes > 0 and result.train_seconds > 0
    assert result.skipped_steps == 0 and result.compiled is False
    assert result.val_loss is None and result.accuracy is None  # no validation data given
    assert trainer.state.samples_seen == 4 * 256


def test_validation_reports_loss_and_accuracy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(320, FEATURES, generator=g)
    y = (x @ torch.randn(FEATURES, generator=g) > 0).float().unsqueeze(1)
    _, result = _fit(
        data=(x[:256], y[:256]),
        val_data=(x[256:], y[256:]),
        loss_fn=F.binary_cross_entropy_with_logits,
        optimizer=_sgd(0.5),
        epochs=5,
    )
    assert result.val_loss is not None and result.val_loss < 0.5
    assert 0.85 <= result.accuracy <= 1.0
    assert [h["step"] for h in result.history if "val_loss" in h] == [8, 16, 24, 32, 40]  # once per epoch


def test_a_regression_reports_no_accuracy():
    """Float targets that are not probabilities (y = a linear map of x, most outside [0, 1]) are no labels:
    the README's my_recipe (an MSE regression) once reported "val accuracy 91.89%"."""
    x, y = _regression(320)
    _, result = _fit(data=(x[:256], y[:256]), val_data=(x[256:], y[256:]), epochs=2)
    assert result.val_loss is not None and result.accuracy is None
    assert not [h for h in result.history if "val_accuracy" in h]


@pytest.mark.parametrize("max_steps, accumulate", [(7, 1), (11, 1), (3, 2)])
def test_max_steps_stops_exactly(max_steps, accumulate):
    rec = Recorder()
    trainer, result = _fit(epochs=50, max_steps=max_steps, accumulate=accumulate, callbacks=[rec])
    assert result.steps == max_steps == trainer.state.global_step
    assert [step for step, _ in rec.named("step_end")] == list(range(1, max_steps + 1))
    micro_batches = max_steps * accumulate
    assert trainer.state.samples_seen == micro_batches * 32
    assert result.epochs == -(-micro_batches // 8)  # a started epoch counts
    assert len(rec.named("epoch_end")) == micro_batches // 8  # only completed epochs end


def test_callbacks_are_called_at_their_points():
    rec = Recorder()
    x, y = _regression(320)
    _, result = _fit(
        data=(x[:256], y[:256]), val_data=(x[256:], y[256:]), epochs=3, log_every=4, callbacks=[rec]
    )
    assert rec.named("fit_start") == [(0, 0)]
    assert [s for s, _ in rec.named("step_end")] == list(range(1, 25))
    assert rec.named("epoch_end") == [(8, 0), (16, 1), (24, 2)]
    assert [s for s, _ in rec.named("log")] == [4, 8, 12, 16, 20, 24]
    assert rec.named("validation_end") == [(8, 0), (16, 1), (24, 2)]
    assert rec.named("fit_end") == [(24, 3)]
    assert rec.calls[0][0] == "fit_start" and rec.calls[-1][0] == "fit_end"
    assert rec.result is result


def test_a_callback_can_stop_the_fit():
    class StopAt5(Callback):
        def on_step_end(self, trainer, state):
            state.should_stop = state.global_step == 5

    _, result = _fit(epochs=10, callbacks=[StopAt5()])
    assert result.steps == 5


def test_no_host_sync_per_step(monkeypatch):
    """100 steps with log_every=50 may read the device twice (two logs) plus a few times at the end;
    one read per step would show up as ~100."""
    counts: Counter[str] = Counter()

    def counting(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            counts[name] += 1
            return original(self, *args, **kwargs)

        return wrapper

    model, data = _model(), _regression()
    trainer = Trainer(
        device="cpu", precision="fp32", batch_size=32, max_steps=100, log_every=50, progress=False
    )
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, counting(name))
    result = trainer.fit(model, data, loss_fn=F.mse_loss, optimizer=_sgd(momentum=0.9))
    monkeypatch.undo()
    assert result.steps == 100
    assert sum(counts.values()) <= 5, dict(counts)
    assert [h["step"] for h in result.history] == [50, 100]


def test_logs_written_only_with_out_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _fit(epochs=1, log_every=2)
    assert list(tmp_path.iterdir()) == []  # no out_dir: nothing written anywhere

    out = tmp_path / "run"
    _, result = _fit(epochs=1, log_every=2, out_dir=str(out))
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4  # 8 steps, one record every 2
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    # TensorBoard reads back every logged scalar at its step (one event carries all of a step's scalars).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(out / "tensorboard")).Reload()
    assert {"loss", "lr"} <= set(board.Tags()["scalars"])
    logged = [json.loads(line) for line in lines]
    assert [(e.step, pytest.approx(e.value)) for e in board.Scalars("loss")] == [
        (r["step"], r["loss"]) for r in logged if "loss" in r
    ]
    # The fit's own samples/s (summary.json's), not the last interval's, under run/ at the last step.
    (final,) = board.Scalars("run/samples_per_s")
    assert (final.step, final.value) == (result.steps, pytest.approx(result.samples_per_s))

    quiet = tmp_path / "quiet"
    _fit(epochs=1, out_dir=str(quiet), tensorboard=False)
    assert (quiet / "metrics.jsonl").is_file() and not (quiet / "tensorboard").exists()


class _FakeStdout(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize("tty", [False, True])
def test_progress_bar_only_on_a_terminal(monkeypatch, tty):
    fake = _FakeStdout(tty)
    monkeypatch.setattr(sys, "stdout", fake)
    ran: list[Callback] = []

    class Ran(Callback):
        def on_fit_start(self, trainer, state):
            ran.extend(trainer.callbacks.callbacks)  # every callback the fit runs (the loop's list)

    trainer = Trainer(device="cpu", precision="fp32", batch_size=32, epochs=1, callbacks=[Ran()])
    trainer.fit(_model(), _regression(), loss_fn=F.mse_loss, optimizer=_sgd())  # progress=None: auto
    monkeypatch.undo()
    kinds = {type(cb) for cb in ran}
    assert (ProgressBar in kinds, LogLines in kinds) == (tty, not tty)  # no terminal: plain lines instead
    assert fake.getvalue() != ""


def test_progress_false_prints_nothing(monkeypatch):
    fake = _FakeStdout(False)
    monkeypatch.setattr(sys, "stdout", fake)
    _fit(epochs=1)  # progress=False
    monkeypatch.undo()
    assert fake.getvalue() == ""


def test_unknown_setting_is_a_config_error_naming_valid_ones():
    with pytest.raises(ConfigError) as info:
        Trainer(batchsize=3)
    message = str(info.value)
    assert "'batchsize'" in message and "valid settings: batch_size|" in message  # closest first
    assert "\n" not in message


def test_bad_setting_value_lists_choices():
    with pytest.raises(ConfigError, match=r"precision.*fp17.*auto\|fp32\|tf32\|bf16-mixed\|fp16-mixed"):
        Trainer(precision="fp17")


def test_gradient_clipping_limits_the_update():
    x, y = _regression()
    y = 100 * y  # a big gradient: unclipped, lr=1 moves the parameters far
    deltas = {}
    for clip in (None, 0.01):
        model = _model()
        before = _params(model)
        _fit(model, (x, y), optimizer=_sgd(lr=1.0), max_steps=1, clip_grad_norm=clip)
        change = torch.cat([(a - b).flatten() for a, b in zip(_params(model), before, strict=True)])
        deltas[clip] = change.norm().item()
    assert deltas[None] > 1.0
    assert deltas[0.01] <= 0.01 + 1e-6
    assert deltas[0.01] == pytest.approx(0.01, rel=1e-4)  # clipped to the limit, not below


class _PlainDataset(Dataset):
    """Not a TensorDataset: forces the DataLoader path."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def test_fast_path_and_dataloader_path_train_identically():
    x, y = _regression(200)  # 200/32: a partial last batch too
    finals = []
    for data in ((x, y), _PlainDataset(x, y)):
        model = _model()
        _, result = _fit(model, data, epochs=3, seed=7, optimizer=_sgd(momentum=0.9))
        assert result.steps == 3 * 7
        finals.append(_params(model))
    for fast, loader in zip(*finals, strict=True):
        torch.testing.assert_close(fast, loader, rtol=0, atol=1e-6)


def test_scheduler_factory_gets_total_steps_and_steps_per_optimizer_step():
    seen = {}

    def factory(optimizer, total_steps):
        seen["total"] = total_steps
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / total_steps)

    trainer = Trainer(device="cpu", precision="fp32", batch_size=32, epochs=2, accumulate=2, progress=False)
    trainer.fit(_model(), _regression(), loss_fn=F.mse_loss, optimizer=_sgd(), scheduler=factory)
    assert seen["total"] == 8  # 2 epochs x 8 batches / accumulate 2
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.0)


class _WhereLoaded(torch.utils.data.Dataset):
    """Records whether each sample was loaded in a DataLoader worker process."""

    def __init__(self, n: int = 64) -> None:
        self.x, self.y = torch.randn(n, 4), torch.randn(n, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        in_worker = torch.utils.data.get_worker_info() is not None
        return self.x[i], self.y[i] + 0.0 * in_worker, torch.tensor(float(in_worker))


def test_num_workers_loads_a_wrapped_dataset_in_worker_processes():
    seen = []

    def loss_fn(output, batch):  # records where the batch's samples were loaded
        seen.append(batch[2].mean().item())
        return torch.nn.functional.mse_loss(output, batch[1])

    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 1)

        def forward(self, x, _y):
            return self.fc(x)

    trainer = Trainer(
        device="cpu", batch_size=16, max_steps=4, progress=False, num_workers=2, checkpoints=False
    )
    trainer.fit(TwoInputs(), _WhereLoaded(), loss_fn=loss_fn, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    assert seen and all(v == 1.0 for v in seen)  # every batch came from a worker (the default on a CPU: none)
