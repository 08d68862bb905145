"""One torch step (train/step.py) serves the Trainer, profile and bench: its routes are chosen when it is
built, its phase hook is a few calls a step whatever the model's size, and its numbers are a hand-written
loop's."""

from __future__ import annotations

import copy

import torch
from torch import nn

from gpulab.engines.torch.bench import Stepper, load_workload, single_runtime
from gpulab.engines.torch.runtime import Runtime
from gpulab.engines.torch.runtime.step_call import LossCall
from gpulab.engines.torch.train.step import TorchStep, no_mark
from gpulab.engines.torch.train.trainer import Trainer


def _mlp(layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(layers)], nn.Linear(8, 1))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)


def _step(model: nn.Module, rt: Runtime, **kw) -> TorchStep:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return TorchStep(rt, model, model, optimizer, LossCall(nn.functional.mse_loss), **kw)


def test_a_whole_step_is_the_hand_written_loop_bit_for_bit():
    hand, ours = _mlp(2), _mlp(2)
    opt = torch.optim.SGD(hand.parameters(), lr=0.1)
    with Runtime("cpu", "fp32", "single") as rt:
        step = _step(ours, rt, clip_grad_norm=1.0)
        for _ in range(3):
            x, y = _batch()
            loss = nn.functional.mse_loss(hand(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(hand.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            assert torch.equal(step.whole_step((x, y)), loss)
    for a, b in zip(hand.parameters(), ours.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_phase_hook_is_called_the_same_few_times_for_any_model_size():
    calls = {}
    with Runtime("cpu", "fp32", "single") as rt:
        for layers in (1, 40):
            step = _step(_mlp(layers), rt)
            assert step.mark is no_mark  # off unless profile sets it
            seen = []
            step.mark = seen.append
            step.whole_step(_batch())
            calls[layers] = seen
    assert calls[1] == calls[40] == ["forward", "backward", "optimizer"]


def test_the_routes_are_chosen_at_set_up():
    with Runtime("cpu", "fp32", "single") as rt:
        plain = _step(_mlp(1), rt)
        clipped = _step(_mlp(1), rt, clip_grad_norm=1.0, count_items=lambda batch: torch.tensor(16))
    assert plain.micro.func == plain._micro_mean and plain._before_step == ()
    assert clipped.micro.func == clipped._micro_by_items and len(clipped._before_step) == 2
    assert plain.whole_step == plain._whole_step


def test_the_trainer_picks_its_route_once_and_runs_its_step(tmp_path):
    x, y = _batch()
    trainer = Trainer(device="cpu", max_steps=2, batch_size=8, progress=False, accumulate=2)
    trainer.fit(_mlp(1), (x, y), loss_fn=nn.functional.mse_loss, optimizer=lambda p: torch.optim.SGD(p, 0.1))
    assert trainer._route.func == trainer._window_step
    assert trainer._route.keywords["micro"] == trainer.torch_step.micro
    guarded = Trainer(device="cpu", max_steps=1, batch_size=8, progress=False, micro_batch="auto")
    guarded.fit(_mlp(1), (x, y), loss_fn=nn.functional.mse_loss, optimizer=lambda p: torch.optim.SGD(p, 0.1))
    assert guarded._route == guarded._guarded_step


def test_bench_steps_through_the_trainers_step():
    work = load_workload("mlp", seed=0, batch_size=32)
    twin = copy.deepcopy(work.model)
    stepper = Stepper(work, single_runtime(torch.device("cpu")), optimizer=lambda p: torch.optim.SGD(p, 0.1))
    assert isinstance(stepper.torch_step, TorchStep)
    loss = stepper.step()
    hand = torch.optim.SGD(twin.parameters(), lr=0.1)
    expected = work.loss_fn(twin(stepper.inputs[:32]), stepper.targets[:32])
    expected.backward()
    hand.step()
    assert torch.equal(loss, expected)
    for a, b in zip(twin.parameters(), stepper.model.parameters(), strict=True):
        assert torch.equal(a, b)
