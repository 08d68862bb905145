"""``attention``: the SDPA kernel order a Runtime applies (torch's process-wide priority), and undoes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpulab.config import TrainerSettings
from gpulab.engines.torch.runtime import attention as A
from gpulab.engines.torch.runtime.devices import CudaAccelerator
from gpulab.engines.torch.runtime.runtime import Runtime


def _order() -> list[int]:
    return list(torch._C._get_sdp_priority_order())  # what torch's SDPA dispatcher reads


class _Capability:
    def __init__(self, capability):
        self.capability = capability

    def get_device_capability(self, device):
        return self.capability


@pytest.mark.parametrize(("capability", "first"), [((9, 0), "cudnn"), ((10, 0), "cudnn"), ((8, 0), None)])
def test_auto_puts_cudnn_first_on_hopper_and_newer_only(monkeypatch, capability, first):
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    assert CudaAccelerator("cuda:0", cuda=_Capability(capability)).attention_first() == first


def test_no_cudnn_first_on_rocm(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2")
    assert CudaAccelerator("cuda:0", cuda=_Capability((9, 4))).attention_first() is None


def test_the_runtime_applies_its_order_and_teardown_restores_torchs():
    before = _order()
    assert before[0] != int(torch.nn.attention.SDPBackend.CUDNN_ATTENTION)
    with Runtime("cpu", "fp32", "single", attention="cudnn") as rt:
        assert _order()[0] == int(torch.nn.attention.SDPBackend.CUDNN_ATTENTION)
        assert sorted(_order()) == sorted(before)  # every kernel still there to fall back on
        assert rt.describe()["attention"] == "cudnn"
        q = torch.randn(2, 2, 8, 4)
        torch.testing.assert_close(  # a kernel this device lacks falls back: the same attention
            F.scaled_dot_product_attention(q, q, q, is_causal=True),
            torch.softmax(
                (q @ q.transpose(-1, -2) / 2).masked_fill(torch.ones(8, 8).triu(1).bool(), -1e9), -1
            )
            @ q,
        )
    assert _order() == before


def test_auto_keeps_torchs_order_on_a_cpu_and_says_so():
    before = _order()
    with Runtime("cpu", "fp32", "single") as rt:
        assert _order() == before
        assert rt.describe()["attention"] == "torch"
        assert rt.describe()["reasons"]["attention"].startswith("auto: torch's own order")


def test_the_setting_reaches_the_runtime_and_a_typo_names_the_choices():
    rt = Runtime.from_settings(TrainerSettings(device="cpu", attention="math"))
    try:
        assert rt.attention.name == "math"
    finally:
        rt.teardown()
    with pytest.raises(ValueError, match="attention"):
        TrainerSettings(attention="cudn")
    with pytest.raises(ValueError, match="choose one of auto, torch, flash, efficient, math, cudnn"):
        A.resolve_attention("cudn", torch.device("cpu"))
