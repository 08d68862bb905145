"""What ``gpulab inspect`` shows: one row per module call of a forward pass, traced with fake tensors.

The model runs once, forward and backward, under ``FakeTensorMode`` (shapes and dtypes only: no memory,
no compute), with a forward pre-hook and hook on every module. Each row holds the module's inputs and
outputs (shapes, dtypes), its parameters, the forward FLOPs counted while it ran (``FlopCounterMode``,
children included), and the bytes it left alive when it returned (``LiveBytes``: its output and what it
saved for backward). Under a mixed precision a leaf module whose floating output is not the run's compute
dtype (a LayerNorm or a softmax autocast keeps in float32) is flagged.

The step is traced as ``flops.training_step_flops`` traces it (same fake inputs, same ``step_call``
rule for model and loss), so the FLOP total is the FLOP counter's; the memory total is
``memory_estimate.estimate_memory`` itself, at the batch size asked for.

When a module fails on its input the trace stops there: the rows so far are kept and the failing module
is named with the shapes it received and what it expects (``Linear``: ``in_features``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.data.transfer import iter_tensors
from gpulab.engines.torch.runtime.memory_estimate import LiveBytes, fake_step_inputs, unwrap_module
from gpulab.engines.torch.runtime.signature import Signature
from gpulab.engines.torch.runtime.step_call import LossCall, step_loss
from gpulab.measure.inspection import Inspection, LayerFailure, LayerRow, TensorInfo, first_line

SHORT_DTYPES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "bool",
    torch.uint8: "u8",
}


class _Recorder:
    """The hooks: a row per module call, a stack of the calls still open (the innermost fails first)."""

    def __init__(self, model: nn.Module, counter: FlopCounterMode, tracker: LiveBytes, run_dtype) -> None:
        self.names = {id(m): name for name, m in model.named_modules()}
        self.counter, self.tracker, self.run_dtype = counter, tracker, run_dtype
        self.rows: list[LayerRow] = []
        self.open: list[tuple[int, nn.Module, int, int]] = []  # (row index, module, flops, live bytes)

    def pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        name = self.names.get(id(module), "?")
        trainable, frozen = _param_counts(module)
        row = LayerRow(
            name=name,
            depth=len(self.open),  # call nesting: a ModuleList that is only iterated adds no level
            type=type(module).__name__,
            inputs=_describe((args, kwargs)),
            params_trainable=trainable,
            params_frozen=frozen,
            leaf=not any(True for _ in module.children()),
            status="unfinished",
        )
        self.rows.append(row)
        self.open.append((len(self.rows) - 1, module, self.counter.get_total_flops(), self.tracker.live))

    def post(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        index, _, flops, live = self.open.pop()
        row = self.rows[index]
        row.outputs = _describe(output)
        row.flops_forward = self.counter.get_total_flops() - flops
        row.activation_bytes = max(0, self.tracker.live - live)
        row.status = "ok"
        floating = {t.dtype for t in iter_tensors(output) if t.is_floating_point()}
        if row.leaf and floating and self.run_dtype not in floating:
            row.cast_dtype = "/".join(sorted(SHORT_DTYPES.get(d, str(d)) for d in floating))

    def failure(self, exc: BaseException) -> LayerFailure | None:
        if not self.open:
            return None
        index, module, _, _ = self.open[-1]
        row = self.rows[index]
        row.status = "failed"
        return LayerFailure(row.name, row.type, row.inputs, expects(module), first_line(exc))


def inspect_model(
    model: nn.Module,
    batch: Any,
    loss_fn: Callable | None = None,
    *,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    compute_dtype: torch.dtype | None = None,
    signature: Signature | None = None,
) -> Inspection:
    """Trace one training step of ``model`` on ``batch`` (called as the Trainer calls it) into rows.

    ``compute_dtype`` is the run's (bfloat16 under bf16-mixed; None: the parameters' dtype). Nothing of
    the model changes: parameters are swapped for fake copies (``functional_call``), hooks are removed.
    ``signature``: which of a dict batch's keys go to ``forward`` (the ``model_inputs`` setting); None:
    those the model's own ``forward`` names, as training passes them -- never the tracing wrapper's.
    """
    plain = unwrap_module(model)
    run_dtype = compute_dtype or next((p.dtype for p in plain.parameters()), torch.float32)
    first = next(iter_tensors(batch), None)
    rows = int(first.shape[0]) if first is not None and first.dim() else 0
    loss = LossCall(loss_fn, signature or Signature(plain))
    try:
        return _trace(plain, batch, loss, autocast, run_dtype, rows, fake=True)
    except _FAKE_LIMITS:  # an op fake tensors cannot run: trace a real step on a copy, as flops.py does
        return _trace(copy.deepcopy(plain), batch, loss, autocast, run_dtype, rows, fake=False)


_FAKE_LIMITS = torch_private.fake_tensor_limits()
_CONV, _NORM = torch_private.conv_and_norm_bases()


def _trace(model, batch, loss, autocast, run_dtype, rows: int, *, fake: bool) -> Inspection:
    if fake:
        mode, tensors, trainable, step_batch = fake_step_inputs(model, batch)
    else:
        mode, step_batch = nullcontext(), batch
        tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        trainable = [p for p in model.parameters() if p.requires_grad]
    ignore = [*tensors.values(), *iter_tensors(step_batch)]
    counter, tracker = FlopCounterMode(display=False), LiveBytes(ignore)
    recorder = _Recorder(model, counter, tracker, run_dtype)
    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(recorder.pre, with_kwargs=True))
        handles.append(module.register_forward_hook(recorder.post, with_kwargs=True))

    def forward(*args, **kwargs):
        return torch.func.functional_call(model, tensors, args, kwargs)

    was_training = model.training
    model.train()
    failure, forward_flops = None, 0
    try:
        with torch.random.fork_rng(devices=[]), _quiet_fake_tensor_log(), mode, counter, tracker:
            try:
                with autocast():
                    out = step_loss(forward, loss, step_batch)
                forward_flops = counter.get_total_flops()
                if trainable:
                    torch.autograd.grad(out, trainable, allow_unused=True)
            except _FAKE_LIMITS:
                raise
            except Exception as exc:
                failure = recorder.failure(exc) or LayerFailure("", "loss", [], None, first_line(exc))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return Inspection(
        rows=recorder.rows,
        flops_total=counter.get_total_flops() if failure is None else 0,
        flops_forward=forward_flops,
        batch_size=rows,
        run_dtype=SHORT_DTYPES.get(run_dtype, str(run_dtype)),
        method="fake tensors" if fake else "real step",
        failure=failure,
    )


@contextmanager
def _quiet_fake_tensor_log():
    """FakeTensorMode logs a traceback when an op fails on its inputs; that failure is the report's line."""
    log = torch_private.fake_tensor_log()
    saved = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = saved


def expects(module: nn.Module) -> str | None:
    """What ``module`` expects of its input, from its own attributes (None when nothing simple says)."""
    if isinstance(module, nn.Linear):
        return f"in_features={module.in_features} as the last dimension"
    if isinstance(module, _CONV):
        return f"in_channels={module.in_channels} as dimension 1 (N, C, ...)"
    if isinstance(module, _NORM):
        return f"num_features={module.num_features} as dimension 1"
    if isinstance(module, nn.LayerNorm):
        return f"normalized_shape={list(module.normalized_shape)} as the last dimension(s)"
    if isinstance(module, nn.Embedding):
        return f"integer indices below num_embeddings={module.num_embeddings}"
    if isinstance(module, nn.MultiheadAttention):
        return f"embed_dim={module.embed_dim} as the last dimension"
    if isinstance(module, (nn.RNNBase,)):
        return f"input_size={module.input_size} as the last dimension"
    return None


def _param_counts(module: nn.Module) -> tuple[int, int]:
    trainable = frozen = 0
    for p in module.parameters():  # deduplicated: a tied weight counts once per module
        if p.requires_grad:
            trainable += p.numel()
        else:
            frozen += p.numel()
    return trainable, frozen


def _describe(obj: Any) -> list[TensorInfo]:
    return [TensorInfo(list(t.shape), SHORT_DTYPES.get(t.dtype, str(t.dtype))) for t in iter_tensors(obj)]


__all__ = ["expects", "inspect_model"]
