"""``gpulab inspect``'s totals are the FLOP counter's and the memory estimate's own figures, on the real
recipes; under bf16-mixed the rows show autocast's dtypes."""

from __future__ import annotations

import pytest

from gpulab.engines.torch.data.loaders import loader_memory
from gpulab.engines.torch.measure.flops import training_step_flops
from gpulab.engines.torch.runtime.memory_estimate import estimate_memory, example_batch
from gpulab.engines.torch.runtime.precision import resolve_precision
from gpulab.engines.torch.train.run import resolve_config
from gpulab.profiling.inspect import inspect_recipe

SMALL_GPT = {"n_layer": 2, "n_embd": 32, "n_head": 2, "block_size": 16, "max_chars": 20_000}


@pytest.mark.parametrize(
    ("recipe", "options", "precision"), [("chargpt", SMALL_GPT, "bf16-mixed"), ("digits", {}, "fp32")]
)
def test_totals_equal_the_flop_counter_and_the_memory_estimate(recipe, options, precision):
    user = {"recipe": recipe, "options": options, "batch_size": 8, "precision": precision, "device": "cpu"}
    report = inspect_recipe(dict(user))
    _, fresh = resolve_config(dict(user))  # the same seed: the same model, built again
    batch = example_batch(fresh.train_data, 8)
    policy, _ = resolve_precision(precision, "cpu")
    flops = training_step_flops(fresh.model, fresh.loss_fn, batch, autocast=policy.autocast)
    optimizer = fresh.optimizer(fresh.model.parameters())
    held = loader_memory(fresh.train_data, "cpu")  # the fast path's shuffled copy of the epoch
    memory = estimate_memory(
        fresh.model, optimizer, policy, batch, loss_fn=fresh.loss_fn, batch_size=8,
        data_bytes=held.resident_bytes, batches_ahead=held.batches_ahead,
    )  # fmt: skip

    i = report.inspection
    assert i.failure is None and i.method == "fake tensors"
    assert i.flops_total == flops.total > 0
    assert i.flops_per_sample == flops.per_sample
    assert report.memory.predicted_peak_bytes == memory.predicted_peak_bytes > 0
    assert report.memory.data_bytes == held.resident_bytes > 0
    assert report.params_trainable == sum(p.numel() for p in fresh.model.parameters())
    # The root row's forward FLOPs are the forward part of that count, and its params the model's.
    root = i.rows[0]
    assert root.depth == 0 and root.flops_forward == i.flops_forward < i.flops_total
    assert root.params_trainable == report.params_trainable
    assert report.fits is True  # well under half the free RAM
    if recipe == "chargpt":
        _check_bf16_rows(i)


def _check_bf16_rows(i) -> None:
    rows = {r.name: r for r in i.rows}
    assert i.run_dtype == "bf16"
    qkv, ln1 = rows["blocks.0.qkv"], rows["blocks.0.ln1"]
    assert [str(t) for t in qkv.inputs] == ["8×16×32 f32"]  # the residual stream stays f32
    assert [str(t) for t in qkv.outputs] == ["8×16×96 bf16"]  # the Linear runs in bf16
    assert qkv.cast_dtype is None and qkv.flops_forward == 2 * 8 * 16 * 32 * 96
    assert ln1.cast_dtype == "f32"  # autocast keeps layer_norm in float32: flagged
    assert rows["blocks.0"].cast_dtype is None  # containers are not flagged, only layers that compute
    assert rows["blocks.0"].depth == 1  # the ModuleList is only iterated: no level of its own
