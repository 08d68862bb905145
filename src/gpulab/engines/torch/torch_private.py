"""Every use gpulab makes of torch's private names (``torch._*``, ``torch.utils._*``, an object's ``_attr``),
in one place, each behind a function that says why no public API serves and the torch versions it was
checked on. A torch upgrade reads this file first: tests/engines/torch/test_torch_private.py fails if a
module elsewhere in src/ uses a private name of torch.

Private submodules are imported inside their functions, so importing this module loads nothing of torch's
that gpulab did not load before (dynamo, inductor, fake tensors stay unloaded until asked for); what the
optimizer step reads every step (``torch.optim.optimizer``'s, loaded with torch) is imported once, here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks, _to_scalar
from torch.utils import _pytree

# The torch version every function below was checked on (its behaviour read in that version's source and
# exercised by the tests named in its docstring). Another version: check each, then add it.
CHECKED_ON = ("2.13.0",)

# --------------------------------------------------------------------------------------------------------
# Nested batches (pytree). torch has no public pytree module; its private one knows the containers torch
# itself registers (namedtuples, OrderedDict, ...), which gpulab's own walk (data/transfer.py) does not need.


def tree_flatten(tree: Any) -> tuple[list[Any], Any]:
    """The leaves of ``tree`` and the spec that rebuilds it (``torch.utils._pytree``; torch 2.13.0)."""
    return _pytree.tree_flatten(tree)


def tree_unflatten(leaves: Iterable[Any], spec: Any) -> Any:
    """``tree_flatten``'s inverse: the CUDA graph rebuilds a batch from its static buffers with it
    (``torch.utils._pytree``; torch 2.13.0)."""
    return _pytree.tree_unflatten(leaves, spec)


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of ``tree`` without its spec: the CUDA graph copies a batch into its static buffers with
    them each replay (``torch.utils._pytree``; torch 2.13.0)."""
    return _pytree.tree_leaves(tree)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``tree`` with ``fn`` applied to every leaf (``torch.utils._pytree``; torch 2.13.0)."""
    return _pytree.tree_map(fn, tree)


# --------------------------------------------------------------------------------------------------------
# Dispatch modes, fake tensors and storages: the memory estimate, inspect and the CUDA graph's probe watch
# every operator a step runs. TorchDispatchMode is documented but lives in a private module.


def dispatch_mode_base() -> type:
    """The base class of a mode that sees every aten operator (``torch.utils._python_dispatch.
    TorchDispatchMode``; torch 2.13.0): ``LiveBytes`` counts the bytes they create, ``HostReadProbe`` finds
    a host read before a CUDA graph capture would refuse it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def storage_key(storage: torch.UntypedStorage) -> int:
    """An id of a storage that lives as long as the storage and is the same for every Python object of it,
    real or fake (``UntypedStorage._cdata``; ``data_ptr`` is 0 for a fake tensor or an empty storage;
    torch 2.13.0)."""
    return storage._cdata


def host_read_op() -> Any:
    """The aten operator behind ``.item()``, ``float()``, ``int()``, ``bool()`` and ``if tensor:``
    (``aten._local_scalar_dense``), which a CUDA graph capture refuses (torch 2.13.0)."""
    return torch.ops.aten._local_scalar_dense.default


def fake_tensor_mode() -> Any:
    """A ``FakeTensorMode``: a step's shapes, FLOPs and bytes without its memory or compute
    (``torch._subclasses.fake_tensor``; torch 2.13.0)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def fake_tensor_limits() -> tuple[type[BaseException], ...]:
    """The errors an operator fake tensors cannot run raises, so inspect traces a real step instead
    (``torch._subclasses.fake_tensor``; the names each torch has; torch 2.13.0)."""
    from torch._subclasses import fake_tensor as ft

    names = ("UnsupportedOperatorException", "DynamicOutputShapeException", "DataDependentOutputException")
    return tuple(getattr(ft, n) for n in names if hasattr(ft, n))


def fake_tensor_log() -> logging.Logger:
    """The logger FakeTensorMode writes a traceback to when an op fails on its inputs; inspect reports that
    failure in one line instead (torch 2.13.0)."""
    return logging.getLogger("torch._subclasses.fake_tensor")


def conv_and_norm_bases() -> tuple[type, type]:
    """The private base classes of every ConvNd and BatchNorm/InstanceNorm layer, whose ``in_channels`` and
    ``num_features`` inspect reads to say what a layer expects (torch 2.13.0)."""
    return torch.nn.modules.conv._ConvNd, torch.nn.modules.batchnorm._NormBase


# --------------------------------------------------------------------------------------------------------
# torch.compile: dynamo and inductor have no public error types, counters or option lists.


def compile_error_types() -> tuple[type[BaseException], ...]:
    """The errors a failed ``torch.compile`` raises at its first call, so the model falls back to eager in
    one line (dynamo's ``TorchDynamoException`` and inductor's own that do not derive from it: lowering,
    C++/CUDA compilers; torch 2.13.0)."""
    from torch._dynamo.exc import TorchDynamoException  # BackendCompilerFailed, InductorError, Unsupported
    from torch._inductor import exc as inductor

    return (
        TorchDynamoException,
        inductor.OperatorIssue,
        inductor.SubgraphLoweringException,
        inductor.InvalidCxxCompiler,
        inductor.CppWrapperCodegenError,
        inductor.CppCompileError,
    )


def inductor_has_option(name: str) -> bool:
    """Whether this torch's inductor config has ``name`` (``reorder_for_peak_memory``; torch 2.13.0)."""
    from torch._inductor import config

    return hasattr(config, name)


def inductor_mode_options(mode: str) -> dict[str, Any]:
    """The inductor options a ``torch.compile`` mode stands for, so gpulab can add its own to them
    (``mode`` and ``options`` cannot both be given; ``torch._inductor.list_mode_options``; torch 2.13.0)."""
    from torch._inductor import list_mode_options

    return list_mode_options(mode)


def frames_compiled() -> int:
    """Frames dynamo has compiled in this process so far: recompiles are kept out of the throughput
    (``torch._dynamo.utils.counters``; torch 2.13.0)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def dynamo_context_manager_log() -> logging.Logger:
    """The logger dynamo warns on about the profiler's record_function around a compiled optimizer step,
    which bench filters (torch 2.13.0)."""
    return logging.getLogger("torch._dynamo.variables.ctx_manager")


def aoti_compile_and_package(program: Any, path: str) -> None:
    """AOTInductor's compiler, the aoti export format's writer (documented, under ``torch._inductor``;
    torch 2.13.0)."""
    torch._inductor.aoti_compile_and_package(program, package_path=path)


def aoti_load_package(path: str) -> Callable[..., Any]:
    """AOTInductor's loader, the aoti export format's runtime (``torch._inductor``; torch 2.13.0)."""
    return torch._inductor.aoti_load_package(path)


def onnx_registration_log() -> logging.Logger:
    """The logger torch's ONNX exporter says "torchvision is not installed" on, which export quiets
    (torch 2.13.0)."""
    return logging.getLogger("torch.onnx._internal.exporter._registration")


def compiled_inner(model: Any) -> Any:
    """The module a ``torch.compile``'d ``OptimizedModule`` wraps, or None (``_orig_mod``; torch 2.13.0)."""
    return getattr(model, "_orig_mod", None)


# --------------------------------------------------------------------------------------------------------
# The optimizer step: the fused Adam kernels called directly (runtime/fused_step.py), GradScaler's hand-off
# and its sync-free scale, gradients scaled in one kernel.


def has_step_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Whether a step hook, the optimizer's own or global, would run around ``optimizer.step()`` (a hook may
    change anything, so the direct fused step leaves it to ``step()``; torch 2.13.0)."""
    return bool(
        optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or _global_optimizer_pre_hooks
        or _global_optimizer_post_hooks
    )


def fused_adam_kernel(decoupled: bool) -> Callable[..., None]:
    """The kernel ``torch.optim.Adam``/``AdamW`` with ``fused=True`` ends in (``torch._fused_adamw_`` when
    the weight decay is decoupled, ``torch._fused_adam_`` otherwise; torch 2.13.0)."""
    return torch._fused_adamw_ if decoupled else torch._fused_adam_


def add_to_each(tensors: Sequence[torch.Tensor], value: float) -> None:
    """Every tensor plus ``value``, in place, in one kernel (``torch._foreach_add_``, as the fused Adam
    step counts its steps; torch 2.13.0)."""
    torch._foreach_add_(tensors, value)


def multiply_each(tensors: Sequence[torch.Tensor], factor: torch.Tensor) -> None:
    """Every tensor times ``factor`` (a device scalar: no host read), in place, in one kernel
    (``torch._foreach_mul_``, as ``clip_grad_norm_`` scales; torch 2.13.0)."""
    torch._foreach_mul_(tensors, factor)


def optimizer_scalar(value: Any) -> Any:
    """A beta as the fused kernel takes it: a one-element tensor as a 0-d one, anything else as it is
    (``torch.optim.optimizer._to_scalar``, what ``_fused_adam`` passes; torch 2.13.0)."""
    return _to_scalar(value)


def record_optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """The no-op ``step()`` calls so the profiler sees an optimizer step (``_optimizer_step_code``; the
    direct fused step calls it too; torch 2.13.0)."""
    optimizer._optimizer_step_code()


def takes_scaler_handoff(optimizer: torch.optim.Optimizer) -> bool:
    """Whether GradScaler hands ``optimizer.step`` its scale and inf flag instead of unscaling and reading
    the flag on the host (``_step_supports_amp_scaling``; torch 2.13.0)."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def set_scaler_handoff(optimizer: torch.optim.Optimizer, on: bool) -> None:
    """Set what the constructor sets for ``fused=True`` (``_step_supports_amp_scaling``), for an optimizer
    gpulab fused after it was built, or whose loaded groups changed it (torch 2.13.0)."""
    optimizer._step_supports_amp_scaling = on


def scale_without_sync(scaler: torch.amp.GradScaler) -> torch.Tensor:
    """The loss scale as a device tensor: the public ``get_scale()`` reads it on the host every step
    (``GradScaler._get_scale_async``; torch 2.13.0)."""
    return scaler._get_scale_async()


def restart_scaler_step(scaler: torch.amp.GradScaler) -> None:
    """GradScaler's per-step bookkeeping started afresh, after a CUDA graph capture stopped it half way
    (``_per_optimizer_states``, as ``update()`` resets it; torch 2.13.0)."""
    from collections import defaultdict

    from torch.amp.grad_scaler import _refresh_per_optimizer_state

    scaler._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)


# --------------------------------------------------------------------------------------------------------
# Data loading, distributed, checkpoints and CUDA memory.


def loader_has_live_iterator(loader: torch.utils.data.DataLoader) -> bool:
    """Whether a DataLoader keeps an iterator (its persistent workers and their random streams) from an
    earlier epoch (``DataLoader._iterator``; torch 2.13.0)."""
    return loader._iterator is not None


def shut_down_persistent_workers(loader: Any) -> None:
    """End a DataLoader's persistent workers now (``_iterator._shutdown_workers``; the next iteration starts
    new ones): freed by the cyclic garbage collector instead, torch's iterator waits 5 s per worker
    (pytorch/pytorch#81794; torch 2.13.0). Anything without such workers is left alone."""
    iterator = getattr(loader, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        loader._iterator = None
        shutdown()


def default_store() -> Any:
    """The c10d key-value store behind the default process group (TCPStore under torchrun), which ranks
    share to agree outside collectives (``distributed_c10d._get_default_store``; torch 2.13.0)."""
    return torch.distributed.distributed_c10d._get_default_store()


def set_element(root: Any, path: Any, value: Any) -> None:
    """Put ``value`` at ``path`` (a checkpoint's flattened key) in a nested state dict, as DCP's own loader
    does (``torch.distributed.checkpoint._traverse``; torch 2.13.0)."""
    from torch.distributed.checkpoint._traverse import set_element as dcp_set_element

    dcp_set_element(root, path, value)


def start_cuda_memory_history(cuda: Any, max_entries: int) -> None:
    """Record every CUDA allocation with its stack, for profile's memory snapshot (``cuda`` is
    ``torch.cuda``, or a test's fake; ``memory._record_memory_history``: documented, private by name;
    torch 2.13.0)."""
    cuda.memory._record_memory_history(max_entries=max_entries)


def cuda_memory_snapshot(cuda: Any) -> Any:
    """The allocations recorded since ``start_cuda_memory_history``, which profile writes as the memory
    snapshot (``torch.cuda.memory._snapshot``; torch 2.13.0)."""
    return cuda.memory._snapshot()


def stop_cuda_memory_history(cuda: Any) -> None:
    """Stop recording allocations once profile wrote its snapshot, so the run pays no more for them
    (``_record_memory_history(enabled=None)``; torch 2.13.0)."""
    cuda.memory._record_memory_history(enabled=None)
