"""``cuda_graph``: the whole step as one graph, tested on the CPU through a fake backend.

The fake records warm-up, capture and replay; its capture runs nothing (as a CUDA capture runs no kernel)
and its replay calls the captured function again against the same static buffers. So the Trainer's logic
(warm-up count, one capture, batches copied into static buffers, the optimizer's tensors kept static, the
fallbacks and their lines) is exercised, and its numerics must equal eager's bit for bit.
The real capture is tests/gpu/test_cuda_graph_gpu.py's.
"""

from __future__ import annotations

import contextlib
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpulab.core.callbacks import Callback
from gpulab.engines.torch.runtime.cuda_graph import (
    CudaGraphs,
    HostReadProbe,
    load_optimizer_in_place,
    prepare_optimizer,
)
from gpulab.engines.torch.train.graph_step import blocker, choose
from gpulab.engines.torch.train.trainer import Trainer

FEATURES = 8


class FakeGraphs:
    """Records the calls; ``replay`` re-runs the captured step. ``fail`` makes the capture raise."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail
        self.replayed_inputs: list[torch.Tensor] = []

    def unsupported(self, device):
        return None

    @contextlib.contextmanager
    def warmup(self, device):
        self.calls.append("warmup")
        yield

    def capture(self, fn, device):
        self.calls.append("capture")
        if self.fail is not None:
            raise self.fail
        return fn

    def replay(self, graph):
        self.calls.append("replay")
        graph()

    def synchronize(self, device):
        pass


def _data(n: int = 256, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    return x, x @ torch.randn(FEATURES, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)


class _Net(nn.Module):
    """A small MLP with dropout (the RNG must advance as eager's) that records what its forward saw."""

    def __init__(self, item: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Dropout(0.1), nn.Linear(16, 1))
        self.item, self.seen, self.ptrs = item, [], []

    def forward(self, x):
        self.seen.append(x.detach().clone())
        self.ptrs.append(x.data_ptr())
        if self.item and x.sum().item() > 1e9:  # a host read: a CUDA capture refuses it
            return self.body(x) * 0
        return self.body(x)


def _fit(
    graph,
    *,
    backend=None,
    model=None,
    data=None,
    optimizer=None,
    scheduler=None,
    callbacks=(),
    resume=None,
    **kw,
):
    settings = {"device": "cpu", "precision": "fp32", "progress": False, "batch_size": 32, "log_every": 4}
    trainer = Trainer(callbacks=callbacks, cuda_graph=graph, **{**settings, **kw})
    trainer.graph_backend = backend if backend is not None else FakeGraphs()
    model = model if model is not None else _Net()
    result = trainer.fit(
        model,
        data if data is not None else _data(),
        loss_fn=F.mse_loss,
        optimizer=optimizer or (lambda p: torch.optim.AdamW(p, lr=1e-2)),
        scheduler=scheduler,
        resume=resume,
    )
    return trainer, result, model


def _same_parameters(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def _losses(result):
    return [h["loss"] for h in result.history if "loss" in h]


def test_warm_up_then_one_capture_then_a_replay_per_step():
    trainer, result, _ = _fit(True, max_steps=12)
    calls = trainer.graph_backend.calls
    assert calls == ["warmup"] * 3 + ["capture"] + ["replay"] * 9
    assert result.extras["cuda_graph"] == {
        "mode": "graph",
        "warmup": 3,
        "captures": 1,
        "replays": 9,
        "eager": 0,
    }


def test_each_batch_lands_in_the_static_buffers():
    _, _, eager = _fit(False, max_steps=12)
    _, _, graph = _fit(True, max_steps=12)
    replayed = graph.ptrs[3:]
    assert len(set(replayed)) == 1 and replayed[0] not in graph.ptrs[:3]  # one static buffer
    assert len(graph.seen) == len(eager.seen) == 12
    assert all(torch.equal(a, b) for a, b in zip(graph.seen, eager.seen, strict=True))  # each batch, in order


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"clip_grad_norm": 0.5},
        {"precision": "bf16-mixed"},
        {"precision": "fp16-mixed", "init_scale": 2.0**4},
        {"precision": "fp16-mixed", "init_scale": 2.0**40, "clip_grad_norm": 0.5},  # overflows: skipped steps
    ],
    ids=["fp32", "clip", "bf16-mixed", "fp16-mixed", "fp16-overflow-clip"],
)
def test_parameters_and_losses_equal_eager_bit_for_bit(settings):
    # 256 samples at batch 32: 8 steps an epoch, 3 epochs; a warm-up crosses no epoch end.
    _, eager_result, eager = _fit(False, epochs=3, **settings)
    trainer, graph_result, graph = _fit(True, epochs=3, **settings)
    assert trainer._graph.counts["replays"] == 21
    assert _same_parameters(eager, graph)
    assert _losses(graph_result) == _losses(eager_result)
    assert graph_result.skipped_steps == eager_result.skipped_steps
    if settings.get("init_scale") == 2.0**40:
        assert graph_result.skipped_steps > 3  # skipped inside replays too, not only in the warm-up


def test_the_partial_last_batch_is_one_eager_step_and_the_graph_stays():
    data = _data(n=250)  # 7 full batches of 32 and one of 26 each epoch
    _, _, eager = _fit(False, epochs=3, data=data)
    trainer, result, graph = _fit(True, epochs=3, data=data)
    assert trainer._graph.mode == "graph"
    assert result.extras["cuda_graph"]["eager"] == 3  # one per epoch
    assert _same_parameters(eager, graph)


def test_the_capture_never_takes_an_epochs_last_batch():
    data = _data(n=80)  # 32, 32, 16: the third warm-up step is the partial batch
    _, _, eager = _fit(False, epochs=4, data=data)
    trainer, result, graph = _fit(True, epochs=4, data=data)
    assert trainer.graph_backend.calls[:5] == ["warmup"] * 4 + ["capture"]  # on epoch 2's first batch
    assert result.extras["cuda_graph"] == {
        "mode": "graph",
        "warmup": 4,
        "captures": 1,
        "replays": 5,
        "eager": 3,
    }
    assert _same_parameters(eager, graph)


def test_a_streams_partial_last_batch_is_one_eager_step_per_pass():
    class Stream(torch.utils.data.IterableDataset):  # no length: 100 samples a pass, 3 x 32 and 4
        def __iter__(self):
            x, y = _data(n=100)
            return iter(zip(x, y, strict=True))

    trainer, result, _ = _fit(True, max_steps=12, data=Stream())
    assert result.extras["cuda_graph"]["mode"] == "graph", result.extras["cuda_graph"]
    assert result.extras["cuda_graph"]["eager"] == 3  # the 4-sample batch ending each of the 3 passes


def test_learning_rate_schedule_reaches_the_graph():
    def schedule(opt, total):
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / total)

    _, eager_result, eager = _fit(False, max_steps=16, scheduler=schedule)
    trainer, graph_result, graph = _fit(True, max_steps=16, scheduler=schedule)
    lr = trainer.optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor)  # the tensor the graph reads, filled in place by the scheduler
    assert float(lr) == pytest.approx(eager.body[0].weight.new_tensor(0.0).item() + 1e-2 * (1 - 16 / 16))
    assert [h["lr"] for h in graph_result.history] == [h["lr"] for h in eager_result.history]
    assert _same_parameters(eager, graph)


def test_a_scheduler_that_assigns_floats_still_reaches_the_graph():
    class Halving:  # not an LRScheduler: it rebinds group["lr"] to a float, as hand-written ones do
        def __init__(self, optimizer, total):
            self.optimizer, self.n = optimizer, 0

        def step(self):
            self.n += 1
            for group in self.optimizer.param_groups:
                group["lr"] = 1e-2 * 0.5 ** (self.n // 4)

    def halving(opt, total):
        return Halving(opt, total)

    _, _, eager = _fit(False, max_steps=16, scheduler=halving)
    trainer, _, graph = _fit(True, max_steps=16, scheduler=halving)
    assert trainer._graph.counts["replays"] == 13
    # The fake replay reads group["lr"] live; a real graph reads only the tensor it recorded, which must
    # hold the LR of the last replay (steps 13-16 ran at 1e-2 / 8).
    assert float(trainer._graph._lrs[0]) == 1e-2 * 0.5**3
    assert _same_parameters(eager, graph)


def test_a_schedule_of_betas_falls_back_in_one_line(capsys):
    def cycling(opt, total):  # as OneCycleLR's cycle_momentum does to Adam
        def beta(step):
            for group in opt.param_groups:
                group["betas"] = (0.9 - 0.01 * step, 0.999)
            return 1.0

        return torch.optim.lr_scheduler.LambdaLR(opt, beta)

    trainer, result, _ = _fit(True, max_steps=8, scheduler=cycling, progress=None)
    lines = [line for line in capsys.readouterr().out.splitlines() if "cuda_graph" in line]
    assert len(lines) == 2 and "the optimizer's betas changed after the capture (a graph keeps" in lines[1]
    assert result.extras["cuda_graph"]["mode"] == "eager" and result.steps == 8


def test_resume_from_a_checkpoint_continues_as_an_uninterrupted_run(tmp_path):
    _, _, whole = _fit(True, max_steps=20, out_dir=str(tmp_path / "whole"), checkpoints=False)
    out = str(tmp_path / "cut")
    _fit(True, max_steps=12, out_dir=out, checkpoint_every=12)
    trainer, result, resumed = _fit(True, max_steps=20, out_dir=out, resume="latest")
    assert result.steps == 20 and trainer._graph.counts["captures"] == 1
    assert _same_parameters(whole, resumed)


def test_loading_optimizer_state_copies_into_the_static_tensors():
    model = nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    saved = {k: v for k, v in opt.state_dict().items()}
    saved = torch.optim.AdamW(model.parameters()).state_dict() | {
        "state": {k: {n: t.clone() + 1 for n, t in s.items()} for k, s in saved["state"].items()},
        "param_groups": [dict(g, lr=5e-4) for g in saved["param_groups"]],
    }
    prepare_optimizer(opt, torch.device("cpu"), capturable=False)
    static = {name: t for s in opt.state.values() for name, t in s.items()}
    lr = opt.param_groups[0]["lr"]
    load_optimizer_in_place(opt, saved)
    after = {name: t for s in opt.state.values() for name, t in s.items()}
    assert all(after[k] is static[k] for k in static)  # the very tensors a graph recorded
    assert opt.param_groups[0]["lr"] is lr and float(lr) == 5e-4
    first = next(iter(saved["state"].values()))
    assert torch.equal(next(iter(opt.state.values()))["exp_avg"], first["exp_avg"])


def test_a_host_read_in_the_model_is_named_before_any_capture(capsys):
    _, _, eager = _fit(False, max_steps=10, model=_Net(item=True))
    trainer, result, graph = _fit(True, max_steps=10, model=_Net(item=True), progress=None)
    lines = [line for line in capsys.readouterr().out.splitlines() if "cuda_graph" in line]
    assert len(lines) == 2  # the intent, then the one line naming the cause and where
    assert lines[1].startswith("cuda_graph: eager steps from step 1: the step reads a tensor on the host")
    assert "(.item(), float(), int() or bool() of a tensor at test_cuda_graph.py:" in lines[1]
    assert result.extras["cuda_graph"]["mode"] == "eager"
    assert trainer.graph_backend.calls == ["warmup"]  # no capture tried
    assert _same_parameters(eager, graph)


def test_a_capture_that_fails_says_why_in_one_line_and_trains_eagerly(capsys):
    error = RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")
    _, _, eager = _fit(False, max_steps=10)
    trainer, result, graph = _fit(True, max_steps=10, backend=FakeGraphs(error), progress=None)
    lines = [line for line in capsys.readouterr().out.splitlines() if "cuda_graph" in line]
    assert len(lines) == 2  # the intent, then the one line naming the cause
    assert "capture failed (RuntimeError: CUDA error: operation not permitted" in lines[1]
    assert ".item()" in lines[1]
    assert result.extras["cuda_graph"]["mode"] == "eager"
    assert trainer.graph_backend.calls.count("replay") == 0
    assert _same_parameters(eager, graph)  # the failed capture changed nothing


def test_shapes_that_change_mid_epoch_fall_back_in_one_line(capsys):
    g = torch.Generator().manual_seed(0)
    ragged = [
        (torch.randn(n, FEATURES, generator=g), torch.randn(n, 1, generator=g)) for n in [32] * 6 + [16] * 6
    ]
    loader = torch.utils.data.DataLoader(ragged, batch_size=None)  # each item is a batch
    trainer = Trainer(device="cpu", max_steps=12, log_every=4, cuda_graph=True, progress=None)
    trainer.graph_backend = FakeGraphs()
    result = trainer.fit(_Net(), loader, loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.AdamW(p))
    lines = [line for line in capsys.readouterr().out.splitlines() if "cuda_graph" in line]
    assert (
        len(lines) == 2
        and "batch shapes changed mid-epoch ((16, 8), (16, 1) after (32, 8), (32, 1))" in lines[1]
    )
    assert result.steps == 12 and result.extras["cuda_graph"]["mode"] == "eager"


@pytest.mark.parametrize(
    ("settings", "cause"),
    [
        ({"accumulate": 2}, "accumulate 2: the graph holds one batch per optimizer step"),
        ({"micro_batch": "auto"}, "micro_batch: auto splits a step"),
        ({"log_every": 1}, "log_every 1 reads the loss on the host every step"),
    ],
)
def test_a_fit_that_cannot_capture_says_why_in_one_line(capsys, settings, cause):
    trainer, result, _ = _fit(True, max_steps=4, progress=None, **settings)
    lines = [line for line in capsys.readouterr().out.splitlines() if "cuda_graph" in line]
    assert lines == [
        f"cuda_graph true: eager steps: {result.extras['cuda_graph']['reason'].split(': ', 2)[2]}"
    ]
    assert cause in lines[0]
    assert trainer.graph_backend.calls == []


def test_a_callback_that_runs_every_step_blocks_the_graph_unless_it_says_it_is_safe(capsys):
    class EveryStep(Callback):
        def on_step_end(self, trainer, state):
            pass

    class Safe(EveryStep):
        graph_safe = True

    _, result, _ = _fit(True, max_steps=4, callbacks=[EveryStep()])
    assert "callback EveryStep runs on_step_end every step" in result.extras["cuda_graph"]["reason"]
    _, result, _ = _fit(True, max_steps=8, callbacks=[Safe()])
    assert result.extras["cuda_graph"]["mode"] == "graph"


def _stub(**over):
    settings = SimpleNamespace(
        accumulate=1, micro_batch=None, compile=False, compile_mode=None, log_every=50, cuda_graph=True
    )
    runtime = SimpleNamespace(
        device=torch.device("cpu"), world_size=1, strategy=SimpleNamespace(name="single"), precision=None
    )
    optimizer = torch.optim.AdamW(nn.Linear(2, 2).parameters(), fused=True)
    stub = SimpleNamespace(settings=settings, runtime=runtime, optimizer=optimizer)
    for key, value in over.items():
        target, name = key.split(".")
        setattr(getattr(stub, target) if target != "stub" else stub, name, value)
    return stub


@pytest.mark.parametrize(
    ("over", "cause"),
    [
        ({"runtime.strategy": SimpleNamespace(name="ddp")}, "strategy ddp: the whole-step graph runs on one"),
        (
            {"settings.compile": True, "settings.compile_mode": "reduce-overhead"},
            "compile_mode reduce-overhead captures CUDA graphs of its own",
        ),
        (
            {"stub.optimizer": torch.optim.RMSprop(nn.Linear(2, 2).parameters())},
            "optimizer RMSprop: the whole-step graph takes torch's Adam, AdamW or SGD",
        ),
        (
            {"stub.optimizer": torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1, foreach=True)},
            "optimizer SGD without fused kernels",
        ),
        (
            {
                "runtime.precision": SimpleNamespace(scaler=object()),
                "stub.optimizer": torch.optim.AdamW(nn.Linear(2, 2).parameters(), foreach=True),
            },
            "fp16-mixed with an unfused AdamW",
        ),
    ],
)
def test_blockers_name_their_cause(over, cause):
    assert cause in blocker(_stub(**over), FakeGraphs())


def test_not_cuda_is_a_blocker_and_a_plain_fit_is_not():
    assert blocker(_stub(), FakeGraphs()) is None
    assert blocker(_stub(), CudaGraphs()) == "the device is cpu (CUDA graphs need a CUDA device)"


@pytest.mark.parametrize("setting", [True, "auto"])
def test_the_real_backend_on_a_cpu_trains_eagerly_and_says_so_where_asked(capsys, setting):
    trainer = Trainer(
        device="cpu", batch_size=32, max_steps=3, cuda_graph=setting, progress=None, log_every=3
    )
    result = trainer.fit(_Net(), _data(), loss_fn=F.mse_loss, optimizer=lambda p: torch.optim.AdamW(p))
    out = [line for line in capsys.readouterr().out.splitlines() if "cuda_graph" in line]
    if setting is True:  # asked for: why not, in one line
        assert out == ["cuda_graph true: eager steps: the device is cpu (CUDA graphs need a CUDA device)"]
        assert result.extras["cuda_graph"]["mode"] == "eager"
    else:  # the default: nothing asked for that this device lacks, nothing said
        assert out == [] and "cuda_graph" not in result.extras


def test_auto_keeps_the_graph_only_where_it_measured_faster():
    use, line = choose(eager_s=1.2e-3, replay_s=0.3e-3)
    assert use and line.startswith(
        "cuda_graph auto: whole-step graph (a replay took 0.300 ms against 1.200 ms"
    )
    use, line = choose(eager_s=67.9e-3, replay_s=67.5e-3)
    assert not use and "compute-bound" in line


def test_auto_measures_then_says_which_it_chose_in_one_line(capsys):
    trainer, result, _ = _fit("auto", max_steps=12, progress=None)
    lines = [line for line in capsys.readouterr().out.splitlines() if "cuda_graph" in line]
    assert len(lines) == 1 and lines[0].startswith("cuda_graph auto: ")
    assert result.extras["cuda_graph"]["reason"] == lines[0]
    assert trainer.graph_backend.calls.count("capture") == 1


def test_the_probe_counts_host_reads_of_the_runs_device_only():
    t = torch.ones(4)
    with HostReadProbe(torch.device("cuda")) as probe:  # a CPU tensor read in a GPU step syncs nothing
        float(t.sum())
    assert probe.found is None
    with HostReadProbe(torch.device("cpu")) as probe:
        line = sys._getframe().f_lineno + 1
        t[t > 0].sum()  # a boolean-mask index: its size is read on the host
        float(t.sum())
    assert probe.found.endswith(f" at test_cuda_graph.py:{line}")  # the first read, where it was made
