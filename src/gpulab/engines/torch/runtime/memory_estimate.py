"""Will it fit? ``estimate_memory`` predicts a training step's memory (``batch_search.find_batch_size``
finds the largest batch that really runs).

The estimate splits the step's memory into parameters, gradients, optimizer state and activations:

- parameters and gradients are counted from the model (a gradient per trainable parameter, same dtype);
- optimizer state and the optimizer step's temporaries come from real steps of the same optimizer
  class on small probe tensors (``optimizer_memory``): the state of element-wise optimizers (SGD
  momentum, Adam, RMSprop, ...) is a fixed number of parameter-sized "slots" plus a few scalars;
- activations come from tracing one forward + backward with fake tensors (``FakeTensorMode``: shapes
  and dtypes only, no memory, no compute, so the trace is at the batch size itself, however large),
  counting the bytes of every tensor alive at each moment (``LiveBytes``). A second trace at half the
  batch gives a line, so ``MemoryEstimate.at(b)`` re-evaluates other batch sizes without tracing. A
  model fake tensors cannot run (data-dependent shapes, ``.item()``, custom kernels without a fake
  implementation) is traced for real at batches 2 and 4 instead, and scaled along the line.

The predicted peak is ``parameters + optimizer state + data + batch + max(forward/backward peak,
gradients + optimizer-step temporaries)``. ``data`` is what the loader keeps on the device for the whole
run (``data_bytes``, from ``loaders.loader_memory``: the fast path's copy of the dataset there and its
shuffled copy of the epoch); the batch counts once more for each batch the prefetcher has in flight
(``batches_ahead``). The trace sees every tensor the step makes (attention scores, softmax outputs,
dropout masks, the logits and the loss's intermediates, autocast's casts of the weights) as the device
the trace runs on makes them: inspect traces on the CPU, whose autocast lists differ from CUDA's for a
few operations (CUDA runs softmax, layer norm, ``pow``, ``exp`` in fp32 under autocast), and whose
dropout keeps a mask of the input's dtype where CUDA's keeps a bool one. What it leaves out: the CUDA
context (~0.5 GiB, never in ``max_memory_allocated`` either), allocator rounding and fragmentation,
DDP's gradient buckets when ``gradient_as_bucket_view`` is off, and workspaces of libraries such as
cuBLAS. ``find_batch_size`` (``batch_search.py``) therefore decides with real steps, and uses the
estimate only to start its search near the answer.
"""

from __future__ import annotations

import inspect
import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from gpulab.engines.torch import torch_private
from gpulab.engines.torch.data.transfer import iter_tensors, map_tensors
from gpulab.engines.torch.devices import accelerator
from gpulab.engines.torch.torch_private import tree_flatten
from gpulab.errors import ConfigError

AllReduce = Callable[[torch.Tensor, str], torch.Tensor]
LossFn = Callable[[Any, Any], torch.Tensor]
StepFn = Callable[[Callable[..., Any], Any], torch.Tensor]  # (forward, batch) -> loss


# --------------------------------------------------------------------------------------------------------
# Counting live bytes


class LiveBytes(torch_private.dispatch_mode_base()):
    """Counts the bytes of every storage an operator creates while the mode is active, until it is freed.

    ``live`` is the current total, ``peak`` its maximum: what a step *adds*. An operator's output that
    shares storage with one of its inputs (a view, an in-place result) allocated nothing and is not
    counted; nor are the storages listed in ``ignore`` (parameters, the batch). Works for real and fake
    tensors alike: a storage's Python object lives exactly as long as the storage, so a weakref
    finalizer on it sees the free.
    """

    def __init__(self, ignore: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self._known: set[int] = {_storage_key(t) for t in ignore}
        self._counted: set[int] = set()
        self.live = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # An output sharing an input's storage (a view, an in-place or out= result) allocated nothing.
        inputs = {_storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t, inputs)
        return out

    def _track(self, t: torch.Tensor, inputs: set[int]) -> None:
        storage = t.untyped_storage()
        key = torch_private.storage_key(storage)
        if key in self._known or key in self._counted or key in inputs:
            return
        nbytes = storage.nbytes()
        self._counted.add(key)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, nbytes)

    def _free(self, key: int, nbytes: int) -> None:
        if key in self._counted:
            self._counted.discard(key)
            self.live -= nbytes

    def mark(self) -> int:
        """The live bytes now (for reading between phases)."""
        return self.live


def _storage_key(t: torch.Tensor) -> int:
    return torch_private.storage_key(t.untyped_storage())


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (tied weights count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        seen.setdefault(_storage_key(t), t.untyped_storage().nbytes())
    return sum(seen.values())


# --------------------------------------------------------------------------------------------------------
# The estimate


@dataclass
class MemoryEstimate:
    """Predicted memory of one training step at ``batch_size`` (bytes; per process)."""

    batch_size: int
    parameters_bytes: int
    buffers_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    optimizer_step_bytes: int  # temporaries of the optimizer step beyond its state
    activations_bytes: int  # alive at the end of forward (what backward needs) at batch_size
    forward_backward_peak_bytes: int  # at batch_size: activations, temporaries, gradients as made
    batch_bytes: int  # the input batch at batch_size, and those in flight
    predicted_peak_bytes: int
    method: str  # "fake tensors" or "real step"
    # Affine models in the batch size b: bytes = intercept + slope * b.
    activations_per_sample: float = 0.0
    activations_intercept: float = 0.0
    fwd_bwd_per_sample: float = 0.0
    fwd_bwd_intercept: float = 0.0
    batch_bytes_per_sample: float = 0.0
    data_bytes: int = 0  # what the loader keeps on the device for the whole run (not per batch)
    batches_ahead: int = 0  # batches in flight beside the step's (the prefetcher's next one)
    notes: list[str] = field(default_factory=list)

    def at(self, batch_size: int) -> MemoryEstimate:
        """The same estimate re-evaluated at another batch size, without a new trace: exact at the
        traced batch, elsewhere on the line through the two traces. The peak is convex in the batch
        (a maximum of lines), so far above the traced batch this can under-estimate it: trace there
        (``estimate_memory(..., batch_size=b)``, free with fake tensors) when it matters."""
        return _assemble(
            batch_size,
            self.parameters_bytes,
            self.buffers_bytes,
            self.gradients_bytes,
            self.optimizer_state_bytes,
            self.optimizer_step_bytes,
            (self.activations_intercept, self.activations_per_sample),
            (self.fwd_bwd_intercept, self.fwd_bwd_per_sample),
            self.batch_bytes_per_sample,
            self.method,
            list(self.notes),
            self.data_bytes,
            self.batches_ahead,
        )

    def max_batch_size(self, limit_bytes: int) -> int:
        """The largest batch whose predicted peak stays under ``limit_bytes`` (0 if not even one)."""
        fixed = self.at(0).predicted_peak_bytes
        if fixed > limit_bytes:
            return 0
        per_sample = max(self.fwd_bwd_per_sample, 0.0) + self.batch_bytes_per_sample * (
            1 + self.batches_ahead
        )
        if per_sample <= 0:
            return 1 << 30
        b = int((limit_bytes - fixed) // per_sample)
        while b > 0 and self.at(b).predicted_peak_bytes > limit_bytes:  # the max() may bend the line
            b -= 1
        return b

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _assemble(
    batch_size: int,
    params: int,
    buffers: int,
    grads: int,
    opt_state: int,
    opt_step: int,
    act: tuple[float, float],
    fwd_bwd: tuple[float, float],
    batch_per_sample: float,
    method: str,
    notes: list[str],
    data_bytes: int = 0,
    batches_ahead: int = 0,
) -> MemoryEstimate:
    activations = max(0, int(act[0] + act[1] * batch_size))
    peak_fb = max(0, int(fwd_bwd[0] + fwd_bwd[1] * batch_size))
    batch_bytes = int(batch_per_sample * batch_size * (1 + batches_ahead))
    predicted = params + buffers + opt_state + data_bytes + batch_bytes + max(peak_fb, grads + opt_step)
    return MemoryEstimate(
        batch_size=batch_size,
        parameters_bytes=params,
        buffers_bytes=buffers,
        gradients_bytes=grads,
        optimizer_state_bytes=opt_state,
        optimizer_step_bytes=opt_step,
        activations_bytes=activations,
        forward_backward_peak_bytes=peak_fb,
        batch_bytes=batch_bytes,
        predicted_peak_bytes=predicted,
        method=method,
        activations_per_sample=act[1],
        activations_intercept=act[0],
        fwd_bwd_per_sample=fwd_bwd[1],
        fwd_bwd_intercept=fwd_bwd[0],
        batch_bytes_per_sample=batch_per_sample,
        data_bytes=data_bytes,
        batches_ahead=batches_ahead,
        notes=notes,
    )


def estimate_memory(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None,
    precision: Any,
    batch: Sequence[torch.Tensor],
    *,
    loss_fn: LossFn | None = None,
    batch_size: int | None = None,
    trace_batches: tuple[int, int] | None = None,
    step: StepFn | None = None,
    data_bytes: int = 0,
    batches_ahead: int = 0,
) -> MemoryEstimate:
    """Predict the memory of one training step of ``model`` at ``batch_size`` samples per process.

    ``batch`` is an example batch ``(inputs..., target)`` of any size (only its shapes and dtypes are
    used, and it may be that of one sample); ``batch_size`` defaults to its size. ``optimizer`` is an
    optimizer or a factory ``params -> Optimizer`` (None: no optimizer state). ``precision`` is a
    ``Precision`` (its ``autocast()`` wraps the forward), a name such as ``"bf16-mixed"``, or None for
    fp32. ``loss_fn(output, target)`` defaults to the output's sum. ``step(forward, batch) -> loss``
    replaces that rule for any batch (a dict of model arguments: the caller's rule, train/step_call.py,
    passed in since runtime/ imports nothing of train/). ``data_bytes`` and ``batches_ahead``: what the
    loader holds on the device (``loaders.loader_memory``; 0 when the caller has none). Nothing of the model
    is changed.
    """
    plain = unwrap_module(model)
    if holds_shards(plain):
        raise ConfigError(
            "estimate_memory needs the model before FSDP2 shards it (its DTensor parameters cannot be traced)"
        )
    example = _as_batch(batch)
    batch_size = batch_size if batch_size is not None else _rows(example)
    if trace_batches is not None and not 0 < trace_batches[0] < trace_batches[1]:
        raise ConfigError(f"trace_batches must be two increasing positive sizes, got {trace_batches}")
    autocast = _autocast_factory(precision, _device_of(plain, example))
    step = step or _tuple_step(loss_fn or _sum_loss)
    params = [p for p in plain.parameters()]
    trainable = [p for p in params if p.requires_grad]
    notes: list[str] = []
    try:
        # Fake tensors cost nothing whatever their size: trace at the batch itself (exact there).
        lo, hi = trace_batches or (max(1, batch_size // 2), max(2, batch_size))
        traces = [_trace_fake(plain, step, example, b, autocast) for b in (lo, hi)]
        method = "fake tensors"
    except Exception as exc:  # any op without a fake implementation: trace for real, small, and scale
        notes.append(f"fake-tensor trace failed ({type(exc).__name__}: {_first_line(exc)}); traced for real")
        lo, hi = trace_batches or (2, 4)
        traces = [_trace_real(plain, step, _resize(example, b), autocast) for b in (lo, hi)]
        method = "real step"
    state, step = optimizer_memory(optimizer, trainable)
    return _assemble(
        batch_size,
        tensor_bytes(params),
        tensor_bytes(plain.buffers()),
        tensor_bytes(trainable),
        state,
        step,
        _line((lo, traces[0][0]), (hi, traces[1][0])),
        _line((lo, traces[0][1]), (hi, traces[1][1])),
        _batch_bytes(_resize(example, 1)),
        method,
        notes,
        data_bytes,
        batches_ahead,
    )


def _line(a: tuple[int, int], b: tuple[int, int]) -> tuple[float, float]:
    """(intercept, slope) of the line through two (batch, bytes) points; never a negative slope."""
    slope = max(0.0, (b[1] - a[1]) / (b[0] - a[0]))
    return float(a[1] - slope * a[0]), slope


def _tuple_step(loss_fn: LossFn) -> StepFn:
    """The default step rule: a batch ``(inputs..., target)``, ``loss_fn(forward(*inputs), target)``."""
    return lambda forward, batch: loss_fn(forward(*batch[:-1]), batch[-1])


def _trace_fake(model: nn.Module, step: StepFn, example: Any, rows: int, autocast) -> tuple[int, int]:
    """(bytes alive after forward, peak bytes during forward + backward) of one step of ``rows`` samples
    shaped like ``example``'s, with fake tensors. The batch is made fake at that size directly: a real one
    of a million rows (the batch search asks for such sizes) would cost seconds and gigabytes to build."""
    mode, tensors, trainable, _ = fake_step_inputs(model, ())
    with mode:
        batch = map_tensors(
            lambda t: torch.empty((rows, *t.shape[1:]), dtype=t.dtype, device=t.device), example
        )
    return _measure_step(model, step, batch, tensors, trainable, autocast, mode)


def fake_step_inputs(model: nn.Module, batch: Any) -> tuple[Any, dict[str, torch.Tensor], list, Any]:
    """A ``FakeTensorMode`` with fake copies of ``model``'s parameters and buffers (by name, for
    ``torch.func.functional_call``), the trainable ones among them, and ``batch`` made fake."""
    mode = torch_private.fake_tensor_mode()
    tensors = {}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        fake = mode.from_tensor(t)
        tensors[name] = fake.requires_grad_(t.requires_grad) if t.is_floating_point() else fake
    trainable = [tensors[name] for name, p in model.named_parameters() if p.requires_grad]
    fake_batch = map_tensors(mode.from_tensor, batch)  # a dataclass batch too (a pytree is not one)
    return mode, tensors, trainable, fake_batch


def _trace_real(model: nn.Module, step: StepFn, batch: Any, autocast) -> tuple[int, int]:
    """The same measurement on real tensors at a small batch. Buffers are copied (batch-norm statistics
    stay as they were), the RNG state is restored, and gradients are returned, not accumulated."""
    named_params = dict(model.named_parameters())
    tensors = {**named_params, **{k: v.clone() for k, v in model.named_buffers()}}
    trainable = [p for p in named_params.values() if p.requires_grad]
    devices = [d for t in named_params.values() for d in accelerator(t.device).rng_devices()][:1]
    with torch.random.fork_rng(devices=devices):
        return _measure_step(model, step, batch, tensors, trainable, autocast, nullcontext())


def _measure_step(model, step, batch, tensors, trainable, autocast, mode) -> tuple[int, int]:
    def forward(*args, **kwargs):
        return torch.func.functional_call(model, tensors, args, kwargs)

    ignore = [*tensors.values(), *iter_tensors(batch)]
    tracker = LiveBytes(ignore)
    was_training = model.training
    model.train()
    try:
        with mode, tracker:
            with autocast():
                loss = step(forward, batch)
            after_forward = tracker.mark()
            grads = torch.autograd.grad(loss, trainable, allow_unused=True) if trainable else ()
            del loss, grads
    finally:
        model.train(was_training)
    return after_forward, tracker.peak


def optimizer_memory(
    optimizer: torch.optim.Optimizer | Callable[..., torch.optim.Optimizer] | None,
    params: Sequence[torch.Tensor],
) -> tuple[int, int]:
    """(state bytes, step temporaries in bytes) of ``optimizer`` over ``params``, from probe steps.

    The state: an optimizer that already has state for every parameter reports it as it is. Otherwise a
    fresh optimizer of the same class and hyper-parameters steps on two probe tensors of 8 and 24
    elements: their state sizes separate the parameter-sized slots from the constant per parameter
    (Adam: 2 slots and a 4-byte ``step``), exact for element-wise optimizers.

    The temporaries: another probe holds one tensor per parameter, each ``scale`` times smaller (about
    2^18 elements in all), so that per-tensor loops (the peak is the largest parameter's temporaries) and
    multi-tensor ``foreach`` kernels (the peak is the sum) both keep their proportions. Its first step
    (which also allocates the state) and its second are counted with ``LiveBytes`` and scaled back up.
    """
    if optimizer is None or not params:
        return 0, 0
    slots, constant = _probe_state(optimizer)
    if isinstance(optimizer, torch.optim.Optimizer) and all(p in optimizer.state for p in params):
        state = sum(tensor_bytes(_state_tensors(optimizer.state[p])) for p in params)
    else:
        state = int(sum(slots * p.numel() * p.element_size() + constant for p in params))
    first, later = _probe_step(optimizer, params)
    return state, int(max(first - state, later, 0))


def _probe_state(optimizer) -> tuple[float, float]:
    small, large = torch.zeros(8), torch.zeros(24)
    try:
        probe = _clone_optimizer(optimizer, [small, large])
        for p in (small, large):
            p.grad = torch.full_like(p, 1e-3)
        probe.step()
    except Exception:  # cannot be rebuilt from its hyper-parameters: assume Adam's two slots
        return 2.0, 4.0
    es = small.element_size()
    s_small = tensor_bytes(_state_tensors(probe.state[small]))
    s_large = tensor_bytes(_state_tensors(probe.state[large]))
    slots = (s_large - s_small) / ((large.numel() - small.numel()) * es)
    return max(slots, 0.0), max(s_small - slots * small.numel() * es, 0.0)


def _probe_step(optimizer, params: Sequence[torch.Tensor]) -> tuple[float, float]:
    """Peak bytes the first and a later optimizer step add, from a scaled-down copy of ``params``."""
    total = sum(p.numel() for p in params)
    scale = max(1.0, total / 2**18)
    probes = [torch.zeros(max(1, math.ceil(p.numel() / scale)), dtype=p.dtype) for p in params]
    real_bytes = sum(p.numel() * p.element_size() for p in params)
    probe_bytes = sum(p.numel() * p.element_size() for p in probes)
    try:
        probe = _clone_optimizer(optimizer, probes)
        for p in probes:
            p.grad = torch.full_like(p, 1e-3)
        peaks = []
        for _ in range(2):
            with LiveBytes(_all_tensors(probe)) as tracker:
                probe.step()
            peaks.append(tracker.peak)
    except Exception:  # as above: assume one parameter-sized temporary
        return float(real_bytes), float(real_bytes)
    ratio = real_bytes / probe_bytes
    return peaks[0] * ratio, peaks[1] * ratio


def _clone_optimizer(optimizer, probes: list[torch.Tensor]) -> torch.optim.Optimizer:
    if not isinstance(optimizer, torch.optim.Optimizer):
        return optimizer(probes)  # a factory params -> Optimizer
    # The first group's settings ride in the group dict (any key is allowed there); the constructor gets
    # only the defaults it names (AdamW's defaults hold keys its __init__ does not take).
    group = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
    accepted = inspect.signature(type(optimizer).__init__).parameters
    kwargs = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    return type(optimizer)([{"params": probes, **group}], **kwargs)


def _state_tensors(state: dict[str, Any]) -> list[torch.Tensor]:
    return [v for v in state.values() if isinstance(v, torch.Tensor)]


def _all_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    out = [p for g in optimizer.param_groups for p in g["params"]]
    out += [p.grad for p in out if p.grad is not None]
    for state in optimizer.state.values():
        out += _state_tensors(state)
    return out


def holds_shards(model: nn.Module) -> bool:
    """Whether any parameter is a ``DTensor`` (a shard, as FSDP2 leaves them between steps): such a model
    cannot be traced by swapping its parameters (``functional_call``) under FSDP's hooks."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def unwrap_module(model: nn.Module) -> nn.Module:
    """The user's module inside DDP/DataParallel and ``torch.compile`` wrappers."""
    while True:
        inner = torch_private.compiled_inner(model) or getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def _as_batch(batch: Any) -> Any:
    if isinstance(batch, (tuple, list)) and len(batch) >= 2 and all(torch.is_tensor(t) for t in batch):
        return tuple(batch)
    if isinstance(batch, Mapping) and batch and all(torch.is_tensor(t) for t in batch.values()):
        return dict(batch)  # model arguments by name: the caller's ``step`` knows how to call with them
    raise ConfigError(
        "the example batch must be a tuple (inputs..., target) or a dict of tensors (model arguments)"
    )


def _rows(batch: Any) -> int:
    return int(next(iter_tensors(batch)).shape[0])


def _resize(batch: Any, b: int) -> Any:
    """``batch`` (a tuple or dict of tensors) with ``b`` rows (cycled when it has fewer)."""
    index = torch.arange(b) % _rows(batch)
    return map_tensors(lambda t: t.index_select(0, index.to(t.device)), batch)


def _batch_bytes(batch: Any) -> float:
    return float(sum(t.numel() * t.element_size() for t in iter_tensors(batch)))


def num_rows(data: Any) -> int | None:
    """How many samples ``data`` holds (tensors: their first dimension; else ``len``), None if unknown."""
    if isinstance(data, (tuple, list)) and data and torch.is_tensor(data[0]):
        return int(data[0].shape[0])
    if isinstance(data, Mapping) and data and all(torch.is_tensor(t) for t in data.values()):
        return _rows(data)
    try:
        return len(data)
    except TypeError:
        return None


def _take(data: Any, b: int) -> Any:
    """The first ``b`` samples of ``data`` as one batch (rows cycle when there are fewer)."""
    from gpulab.engines.torch.data.loaders import as_tensors, whole_fields

    if not isinstance(data, torch.utils.data.Dataset):  # NumPy arrays and a dataclass's fields as tensors
        data = whole_fields(data)
        tensors = as_tensors(data)
        if tensors is not None:
            data = dict(zip(data, tensors, strict=True)) if isinstance(data, Mapping) else tensors
    if isinstance(data, (tuple, list)) and data and torch.is_tensor(data[0]):
        return _resize(tuple(data), b)
    if isinstance(data, Mapping) and data and all(torch.is_tensor(t) for t in data.values()):
        return _resize(dict(data), b)  # a dict of tensors (the fast path's dict batches)
    if isinstance(data, torch.utils.data.TensorDataset):
        return _resize(tuple(data.tensors), b)
    if isinstance(data, torch.utils.data.Dataset):
        from gpulab.engines.torch.data.collate import collate
        from gpulab.engines.torch.data.transfer import is_dataclass_instance

        n = len(data)
        batch = collate([data[i % n] for i in range(b)])
        keep = isinstance(batch, Mapping) or is_dataclass_instance(batch)
        return batch if keep else tuple(batch)  # a dict or dataclass batch keeps its fields
    raise ConfigError(
        f"cannot take example batches from {type(data).__name__}; give a tuple of tensors or a Dataset"
    )


def _take_collated(data: Any, rows: int, collate_fn: Callable) -> Any:
    try:
        n = len(data)
        batch = collate_fn([data[i % n] for i in range(rows)])
        return tuple(batch) if isinstance(batch, list) else batch  # default_collate's list of a tuple
    except (TypeError, IndexError, KeyError):
        return None


def example_batch(data: Any, rows: int) -> tuple | None:
    """``rows`` samples of ``data`` as one batch: a tuple of tensors, a Dataset, or a batch source
    from ``make_loader`` (its tensors or its DataLoader's dataset); None when there is no way to take
    samples without consuming an iterator (an IterableDataset, a user's DataLoader over one)."""
    tensors = getattr(data, "tensors", None)
    if isinstance(tensors, (tuple, list)) and tensors and torch.is_tensor(tensors[0]):
        keys = getattr(data, "keys", None)  # the fast path over a dict of tensors: a dict batch
        batch = _resize(tuple(tensors), rows)
        return dict(zip(keys, batch, strict=True)) if isinstance(keys, tuple) else batch
    loader = data if isinstance(data, torch.utils.data.DataLoader) else getattr(data, "loader", None)
    if loader is not None:
        data = getattr(loader, "dataset", None)
    if isinstance(data, torch.utils.data.IterableDataset):
        return None
    if isinstance(loader, torch.utils.data.DataLoader) and isinstance(data, torch.utils.data.Dataset):
        return _take_collated(data, rows, loader.collate_fn)  # a user's loader: its own collate_fn
    try:
        return _take(data, rows)
    except (ConfigError, TypeError, IndexError, KeyError):
        return None


def _device_of(model: nn.Module, batch: Any) -> torch.device:
    for p in model.parameters():
        return p.device
    return next(iter_tensors(batch)).device


def _autocast_factory(precision: Any, device: torch.device) -> Callable[[], AbstractContextManager]:
    if precision is None:
        return nullcontext
    if isinstance(precision, str):
        from gpulab.engines.torch.runtime.precision import resolve_precision

        precision, _ = resolve_precision(precision, device)
    return precision.autocast


def _sum_loss(output: Any, target: Any) -> torch.Tensor:
    return sum(t.float().sum() for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


__all__ = [
    "LiveBytes",
    "MemoryEstimate",
    "estimate_memory",
    "example_batch",
    "fake_step_inputs",
    "optimizer_memory",
    "tensor_bytes",
    "unwrap_module",
]
