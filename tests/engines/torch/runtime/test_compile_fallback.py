"""CompileFallback: a compilation error falls back to eager; an out-of-memory error does not."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from gpulab.engines.torch.runtime.compile import CompileFallback, compile_model, is_compile_error
from gpulab.engines.torch.runtime.oom import OomGuard


class RaisesOnce:
    """A stand-in for the compiled model: raises ``exc`` on its first call, then runs the model."""

    def __init__(self, model: nn.Module, exc: BaseException) -> None:
        self.model, self.exc, self.calls = model, exc, 0

    def __call__(self, *args):
        self.calls += 1
        if self.calls == 1:
            raise self.exc
        return self.model(*args)


OOMS = [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory: out of memory"),
]


@pytest.mark.parametrize("oom", OOMS, ids=["cuda", "cpu"])
def test_an_out_of_memory_error_passes_through_and_compilation_stays_on(oom):
    model = nn.Linear(3, 2)
    compiled = RaisesOnce(model, oom)
    wrapper = CompileFallback(model, compiled)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "continuing without compilation" warning
        with pytest.raises(type(oom)):
            wrapper(torch.ones(1, 3))
        wrapper(torch.ones(1, 3))
    assert not wrapper.fell_back and compiled.calls == 2  # the second call ran compiled


def test_the_oom_guard_sees_the_out_of_memory_error_of_a_compiled_step():
    model = nn.Linear(3, 2)
    wrapper = CompileFallback(model, RaisesOnce(model, OOMS[0]))
    guard = OomGuard(4, 1, inject_oom_at=())
    guard.run(lambda mb, acc: wrapper(torch.ones(mb, 3)).sum().backward(), clear_grads=model.zero_grad)
    assert (guard.micro_batch, guard.accumulate) == (2, 2) and not wrapper.fell_back


def test_an_oom_wrapped_by_the_compiler_is_not_a_compile_error():
    from torch._dynamo.exc import BackendCompilerFailed

    try:
        try:
            raise torch.OutOfMemoryError("out of memory while autotuning")
        except torch.OutOfMemoryError as inner:
            raise BackendCompilerFailed(lambda *a: None, inner, None) from inner
    except BackendCompilerFailed as wrapped:
        assert not is_compile_error(wrapped)
    assert not is_compile_error(ValueError("a bug in the model"))


def test_a_real_compilation_error_falls_back_to_eager_with_one_warning():
    def broken_backend(graph, example_inputs):
        raise RuntimeError("this backend cannot compile anything")

    torch._dynamo.reset()
    model = nn.Linear(3, 2)
    wrapper = compile_model(model, backend=broken_backend)
    x = torch.ones(1, 3)
    with pytest.warns(RuntimeWarning, match="torch.compile failed.*continuing without compilation"):
        out = wrapper(x)
    assert wrapper.fell_back and torch.equal(out, model(x))


def test_an_unknown_mode_is_one_config_error_line_on_the_cpu():
    from gpulab.errors import ConfigError

    with pytest.raises(ConfigError, match="mode='fastest'.*Unrecognized mode=fastest, should be one of"):
        compile_model(nn.Linear(3, 2), mode="fastest")


@pytest.mark.slow
def test_inductor_gives_a_conv_before_a_max_pool_its_gradients_on_the_cpu():
    """torch 2.13's inductor zeroes this conv's gradients unless peak-memory reordering is off.

    benchmarks/inductor_maxpool_repro.py explains the lost dependency; compile_model's CPU options avoid it.
    """
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64, 128), nn.ReLU(),
    )  # fmt: skip
    x, g = torch.rand(64, 32, 4, 4), torch.randn(64, 128)
    grads = {}
    for name, forward in (("eager", model), ("compiled", compile_model(model, mode="default"))):
        model.zero_grad()
        (forward(x) * g).sum().backward()
        grads[name] = [p.grad.clone() for p in model.parameters()]
    assert not forward.fell_back
    # The bug: the conv's weight and bias gradients come back all zero.
    for want, got in zip(grads["eager"], grads["compiled"], strict=True):
        assert (got - want).abs().max() <= 1e-4 * want.abs().max(), "compiled gradients differ from eager"
