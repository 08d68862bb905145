"""Legacy DataParallel: each replica computes in the Precision's dtype.

torch's ``parallel_apply`` runs every replica in its own thread and re-enters autocast there without a
dtype, so on CUDA the thread falls back to the default autocast dtype, float16, under bf16-mixed. Here
torch's own ``parallel_apply`` runs with its accelerator calls pointed at the CPU; without the fix its
replicas lose the caller's autocast altogether (it asks ``torch.is_autocast_enabled()``, i.e. CUDA's) and
compute in fp32 -- the same defect, a replica not computing in the Precision's dtype.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from contextlib import nullcontext

import pytest
import torch
from torch import nn

from gpulab.engines.torch.runtime.precision import BF16Mixed, FP16Mixed
from gpulab.engines.torch.runtime.strategies.data_parallel import AutocastDataParallel


class Probe(nn.Module):
    """Records the dtype its Linear computes in, and the thread it ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.seen: list[tuple[torch.dtype, int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        self.seen.append((out.dtype, threading.get_ident()))
        return out


@pytest.fixture
def cpu_as_accelerator(monkeypatch):
    """parallel_apply asks torch.accelerator for devices and streams; answer for the CPU."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: torch.device("cpu"))
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda *a: nullcontext())
    monkeypatch.setattr(torch.accelerator, "device_index", lambda *a: nullcontext())
    # nn.DataParallel's constructor: no GPU to bind to, also on a machine that has one.
    torch_dp = importlib.import_module("torch.nn.parallel.data_parallel")
    monkeypatch.setattr(torch_dp, "_get_available_device_type", lambda: None)


@pytest.mark.parametrize("precision", [FP16Mixed, BF16Mixed])
def test_every_replica_computes_in_the_precisions_dtype(cpu_as_accelerator, precision):
    wrapper = AutocastDataParallel(Probe(), device_ids=[])
    wrapper.device_ids = [0, 1]  # two "devices": two replica threads, as on two GPUs
    replicas = [Probe(), Probe()]
    x = torch.randn(2, 4)
    with precision("cpu").autocast():
        wrapper.parallel_apply(replicas, [(x,), (x,)], [{}, {}])
    seen = [entry for replica in replicas for entry in replica.seen]
    assert [dtype for dtype, _ in seen] == [precision.compute_dtype] * 2
    assert all(thread != threading.get_ident() for _, thread in seen)  # really in other threads


def test_outside_autocast_the_replicas_stay_in_fp32(cpu_as_accelerator):
    wrapper = AutocastDataParallel(Probe(), device_ids=[])
    wrapper.device_ids = [0, 1]
    replicas = [Probe(), Probe()]
    wrapper.parallel_apply(replicas, [(torch.randn(2, 4),)] * 2, [{}, {}])
    assert [r.seen[0][0] for r in replicas] == [torch.float32] * 2


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_bf16_mixed_on_two_gpus_computes_in_bf16():
    from gpulab.engines.torch.runtime.runtime import Runtime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rt = Runtime("cuda", precision="bf16-mixed", strategy="dp")
    probe = Probe()
    model, _ = rt.setup(probe)
    with rt.autocast():
        model(torch.randn(8, 4, device=rt.device))
    assert probe.seen and {dtype for dtype, _ in probe.seen} == {torch.bfloat16}  # replicas share the list
