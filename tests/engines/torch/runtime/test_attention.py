"""``attention``: the SDPA kernel order a Runtime applies (torch's process-wide priority), and undoes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from gpulab.config import TrainerSettings
from gpulab.engines.torch.runtime import attention as A
from gpulab.engines.torch.runtime.runtime import Runtime


def _order() -> list[int]:
    return list(torch._C._get_sdp_priority_order())  # what torch's SDPA dispatcher reads


def _causal_attention(q: torch.Tensor) -> torch.Tensor:
    scores = (q @ q.transpose(-1, -2)) / q.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(torch.ones(8, 8).triu(1).bool(), float("-inf")), -1) @ q


def test_a_named_kernel_goes_first_and_teardown_restores_torchs_order():
    before = _order()
    with Runtime("cpu", "fp32", "single", attention="cudnn") as rt:
        assert _order()[0] == int(SDPBackend.CUDNN_ATTENTION)
        assert sorted(_order()) == sorted(before)  # every kernel still there to fall back on
        assert rt.describe()["attention"] == "cudnn"
        q = torch.randn(2, 2, 8, 4)  # a kernel this device lacks falls back: the same attention
        torch.testing.assert_close(
            F.scaled_dot_product_attention(q, q, q, is_causal=True), _causal_attention(q)
        )
    assert _order() == before


def test_auto_leaves_torchs_order_and_says_so():
    before = _order()
    with Runtime("cpu", "fp32", "single") as rt:
        assert _order() == before
        assert rt.describe()["attention"] == "auto"
        assert rt.describe()["reasons"]["attention"].startswith("auto: torch's own order")


def test_the_setting_reaches_the_runtime_and_a_typo_names_the_choices():
    rt = Runtime.from_settings(TrainerSettings(device="cpu", attention="math"))
    try:
        assert rt.attention.name == "math" and _order()[0] == int(SDPBackend.MATH)
    finally:
        rt.teardown()
    with pytest.raises(ValueError, match="attention"):
        TrainerSettings(attention="cudn")
    with pytest.raises(ValueError, match="choose one of auto, flash, efficient, math, cudnn"):
        A.resolve_attention("cudn")
